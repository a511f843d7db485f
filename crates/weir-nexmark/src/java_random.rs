//! `java.util.Random`, bit for bit: the reference generator draws every field from it.
//!
//! The Beam Nexmark generator, which nexmark-flink's generator derives from, seeds one
//! `Random` with each event's id; doing the same here makes an event a pure function of its
//! number (so a source can restart at any offset) and keeps the value distributions (prices,
//! hot ids, string lengths) exactly the reference's.

const MULTIPLIER: u64 = 0x5_DEEC_E66D;
const ADDEND: u64 = 0xB;
const MASK: u64 = (1 << 48) - 1;

/// A 48-bit linear congruential generator with `java.util.Random`'s constants and methods.
#[derive(Clone, Debug)]
pub struct JavaRandom {
    seed: u64,
}

impl JavaRandom {
    /// `new Random(seed)`.
    pub fn new(seed: i64) -> Self {
        JavaRandom {
            seed: (seed as u64 ^ MULTIPLIER) & MASK,
        }
    }

    /// The 48-bit state: with [`JavaRandom::from_state`], a way to resume the sequence
    /// later (the `extra` padding is drawn from it only when written).
    pub(crate) fn state(&self) -> u64 {
        self.seed
    }

    /// A generator at `state`, as [`JavaRandom::state`] returned it.
    pub(crate) fn from_state(state: u64) -> Self {
        JavaRandom { seed: state & MASK }
    }

    /// `next(bits)`: the top `bits` of the next 48-bit state, sign-extended as Java's int.
    #[inline(always)]
    fn next(&mut self, bits: u32) -> i32 {
        self.seed = (self.seed.wrapping_mul(MULTIPLIER).wrapping_add(ADDEND)) & MASK;
        (self.seed >> (48 - bits)) as i64 as i32
    }

    /// `nextInt()`: any 32-bit value.
    #[inline]
    pub fn next_int(&mut self) -> i32 {
        self.next(32)
    }

    /// `nextInt(bound)`: uniform in `[0, bound)`; `bound` must be positive (a non-positive
    /// bound, which Java rejects with an exception, yields 0 here).
    #[inline(always)]
    pub fn next_int_bounded(&mut self, bound: i32) -> i32 {
        if bound <= 0 {
            return 0;
        }
        let mut r = self.next(31);
        let m = bound - 1;
        if bound & m == 0 {
            return ((bound as i64 * r as i64) >> 31) as i32;
        }
        let mut u = r;
        loop {
            r = u % bound;
            if u.wrapping_sub(r).wrapping_add(m) >= 0 {
                return r;
            }
            u = self.next(31);
        }
    }

    /// `nextLong()`.
    #[inline]
    pub fn next_long(&mut self) -> i64 {
        let hi = self.next(32) as i64;
        let lo = self.next(32) as i64;
        (hi << 32).wrapping_add(lo)
    }

    /// `nextDouble()`: uniform in `[0, 1)` with 53 random bits.
    #[inline]
    pub fn next_double(&mut self) -> f64 {
        let hi = self.next(26) as i64;
        let lo = self.next(27) as i64;
        ((hi << 27) + lo) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values printed by OpenJDK 17 for `new Random(seed)`.
    #[test]
    fn matches_java_util_random() {
        let mut r = JavaRandom::new(42);
        assert_eq!(r.next_int(), -1170105035);
        let mut r = JavaRandom::new(42);
        assert_eq!(r.next_int_bounded(10), 0);
        assert_eq!(r.next_int_bounded(10), 3);
        let mut r = JavaRandom::new(42);
        assert_eq!(r.next_double(), 0.7275636800328681);
        let mut r = JavaRandom::new(0);
        assert_eq!(r.next_int(), -1155484576);
        // The rejection loop, a power-of-two bound and nextLong, interleaved.
        let mut r = JavaRandom::new(123_456_789);
        let mut got = String::new();
        for _ in 0..5 {
            got += &format!(
                "{},{},{},{};",
                r.next_int_bounded(13),
                r.next_int_bounded(1 << 30 | 7),
                r.next_long(),
                r.next_int_bounded(16)
            );
        }
        assert_eq!(
            got,
            "2,981296483,4701514676984888228,3;1,913732807,-4618295442963808721,5;\
             7,1020854664,294892302017037793,7;1,252919789,4590096229867741023,4;\
             6,877320754,3535006857479722867,7;"
        );
    }
}
