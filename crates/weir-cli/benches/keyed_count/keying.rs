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

/// One subtask's final counts, checked as they are read (a 10 M-key run must not hold a
/// second copy of its state in the harness, or the row's peak memory measures the harness):
/// which slots it reported, and the first wrong one.
pub struct CountSummary {
    seen: Vec<u64>,
    keys: u64,
    error: Option<String>,
}

impl CountSummary {
    /// Checks `counts` (one subtask's `(key, count)` pairs) against the truth of `0..n`.
    pub fn of(n: u64, keying: Keying, counts: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let keys = keying.keys;
        let distinct = keys.min(n);
        let mut s = CountSummary {
            seen: vec![0; distinct.div_ceil(64) as usize],
            keys: 0,
            error: None,
        };
        for (k, c) in counts {
            let j = if k < keys { keying.slot(k) } else { u64::MAX };
            let problem = if j >= distinct {
                Some(format!("unexpected key {k}"))
            } else if s.seen[(j / 64) as usize] & (1 << (j % 64)) != 0 {
                Some(format!("key {k} reported twice"))
            } else if c != expected_count(n, keys, j) {
                Some(format!(
                    "key {k} counted {c}, expected {}",
                    expected_count(n, keys, j)
                ))
            } else {
                None
            };
            if let Some(p) = problem {
                s.error.get_or_insert(p);
                continue;
            }
            s.seen[(j / 64) as usize] |= 1 << (j % 64);
            s.keys += 1;
        }
        s
    }
}

/// Panics unless the subtasks' summaries hold every key of `0..n` exactly once, each with
/// its exact count.
pub fn check_summaries(row: &str, n: u64, keying: Keying, parts: Vec<CountSummary>) {
    let distinct = keying.keys.min(n);
    let mut all = vec![0u64; distinct.div_ceil(64) as usize];
    let mut total = 0;
    for p in parts {
        if let Some(e) = p.error {
            panic!("{row}: WRONG RESULT: {e}");
        }
        for (a, b) in all.iter_mut().zip(&p.seen) {
            assert!(
                *a & b == 0,
                "{row}: WRONG RESULT: a key reported by two subtasks"
            );
            *a |= b;
        }
        total += p.keys;
    }
    assert_eq!(
        total, distinct,
        "{row}: WRONG RESULT: {total} keys reported, {distinct} expected"
    );
}

/// Panics unless `counts` holds every key of the events `0..n` exactly once with its exact
/// count.
pub fn check_counts(
    row: &str,
    n: u64,
    keying: Keying,
    counts: impl IntoIterator<Item = (u64, u64)>,
) {
    check_summaries(row, n, keying, vec![CountSummary::of(n, keying, counts)]);
}
