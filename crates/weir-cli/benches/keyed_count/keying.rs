//! The keys of workload W1 (`i % K`, optionally scrambled) and the exact-count check every
//! run must pass before it reaches a table.

/// How event `i` is keyed: `i % K`, or with `scramble` a fixed pseudo-random permutation
/// of `0..K` applied to `i % K` (same keys, same counts, scattered order).
#[derive(Clone, Copy)]
pub struct Keying {
    pub keys: u64,
    pub scramble: bool,
    /// `2^bits - 1` for the smallest power of two `2^bits >= keys`.
    mask: u64,
    /// `ceil(bits / 2)`: `x ^ (x >> shift)` is then its own inverse on `bits` bits.
    shift: u32,
}

/// Odd multipliers of the scrambling bijection (invertible modulo any power of two).
const MUL: [u64; 2] = [0x9E37_79B9_7F4A_7C15, 0xBF58_476D_1CE4_E5B9];

/// The inverse of odd `a` modulo 2^64 (Newton's iteration; each step doubles the correct
/// low bits, starting from 3).
const fn inverse(a: u64) -> u64 {
    let mut x = a;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

impl Keying {
    /// Keys `0..keys`, scrambled or not.
    pub fn new(keys: u64, scramble: bool) -> Keying {
        let bits = keys
            .checked_next_power_of_two()
            .map_or(64, u64::trailing_zeros);
        Keying {
            keys,
            scramble,
            mask: if bits >= 64 {
                u64::MAX
            } else {
                (1 << bits) - 1
            },
            shift: bits.div_ceil(2).max(1),
        }
    }

    /// A bijection of `0..=mask`: multiplications by odd numbers and xor-shifts, each
    /// invertible on `bits` bits.
    #[inline]
    fn mix(self, x: u64) -> u64 {
        let x = x.wrapping_mul(MUL[0]) & self.mask;
        let x = x ^ (x >> self.shift);
        let x = x.wrapping_mul(MUL[1]) & self.mask;
        x ^ (x >> self.shift)
    }

    /// The inverse of [`Keying::mix`].
    fn unmix(self, x: u64) -> u64 {
        let x = x ^ (x >> self.shift);
        let x = x.wrapping_mul(inverse(MUL[1])) & self.mask;
        let x = x ^ (x >> self.shift);
        x.wrapping_mul(inverse(MUL[0])) & self.mask
    }

    /// The scrambled key of slot `j < keys`: `mix` repeated until the value is below
    /// `keys` (cycle walking), which makes it a bijection of `0..keys`.
    #[inline]
    pub fn scrambled(self, j: u64) -> u64 {
        let mut x = self.mix(j);
        while x >= self.keys {
            x = self.mix(x);
        }
        x
    }

    /// The key of event `i`.
    #[inline]
    pub fn key(self, i: u64) -> u64 {
        if self.scramble {
            self.scrambled(i % self.keys)
        } else {
            i % self.keys
        }
    }

    /// The slot `j` (the `i % K` before scrambling) whose key is `k < keys`.
    pub fn slot(self, k: u64) -> u64 {
        if !self.scramble {
            return k;
        }
        let mut x = self.unmix(k);
        while x >= self.keys {
            x = self.unmix(x);
        }
        x
    }
}

/// The exact count of slot `j` (key `j` unless scrambled) among events `0..n`.
fn expected_count(n: u64, keys: u64, j: u64) -> u64 {
    n / keys + u64::from(j < n % keys)
}

/// Panics unless `counts` holds every key of the events `0..n` exactly once with its exact
/// count.
pub fn check_counts(
    row: &str,
    n: u64,
    keying: Keying,
    counts: impl IntoIterator<Item = (u64, u64)>,
) {
    let keys = keying.keys;
    let distinct = keys.min(n);
    let mut seen = vec![false; distinct as usize];
    let mut total = 0u64;
    for (k, c) in counts {
        let j = if k < keys { keying.slot(k) } else { u64::MAX };
        assert!(j < distinct, "{row}: WRONG RESULT: unexpected key {k}");
        assert!(
            !seen[j as usize],
            "{row}: WRONG RESULT: key {k} reported twice"
        );
        seen[j as usize] = true;
        let want = expected_count(n, keys, j);
        assert_eq!(
            c, want,
            "{row}: WRONG RESULT: key {k} counted {c}, expected {want}"
        );
        total += 1;
    }
    assert_eq!(
        total, distinct,
        "{row}: WRONG RESULT: {total} keys reported, {distinct} expected"
    );
}
