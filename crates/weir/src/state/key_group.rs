//! Key groups: the unit in which keyed state is partitioned, snapshotted and rescaled.
//!
//! Invariants (docs/architecture.md §5):
//! * `key_group(key) = stable_hash(key) % max_parallelism`, identical on every run, process
//!   and platform. The hash is [`StableHasher`], defined here and frozen: changing it would
//!   silently reassign every key of every existing checkpoint.
//! * Subtask `i` of `p` owns the contiguous range given by [`KeyGroupRange::for_subtask`], and
//!   key group `g` is routed to subtask `g * p / max_parallelism` ([`operator_index`]); the two
//!   agree for every `g`, `p ≤ max_parallelism` (tested below).

use std::hash::{Hash, Hasher};

/// Default `max_parallelism`, Flink's default too.
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;
/// Largest supported `max_parallelism` (Flink's limit).
pub const MAX_MAX_PARALLELISM: u32 = 32_768;

/// A deterministic, platform-independent 64-bit hasher for keys.
///
/// std's `DefaultHasher` is randomly seeded per process and so unusable for routing state.
/// Integers are mixed by value (not by their native-endian bytes), so the result does not
/// depend on the platform; byte strings are consumed in little-endian 8-byte words.
#[derive(Debug, Clone)]
pub struct StableHasher {
    state: u64,
}

impl Default for StableHasher {
    fn default() -> Self {
        StableHasher {
            state: 0x243F_6A88_85A3_08D3,
        }
    }
}

/// MurmurHash3's 64-bit finaliser: full avalanche in five operations.
#[inline]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

impl StableHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.state = fmix64(self.state ^ word).wrapping_add(0x9E37_79B9_7F4A_7C15);
    }
}

impl Hasher for StableHasher {
    #[inline]
    fn finish(&self) -> u64 {
        fmix64(self.state)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // The tail length is mixed in so "a" and "a\0" differ.
            self.mix(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(i as u64)
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.mix(i as u64)
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.mix(i as u64)
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i)
    }
    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.mix(i as u64);
        self.mix((i >> 64) as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64)
    }
    #[inline]
    fn write_i8(&mut self, i: i8) {
        self.mix(i as u8 as u64)
    }
    #[inline]
    fn write_i16(&mut self, i: i16) {
        self.mix(i as u16 as u64)
    }
    #[inline]
    fn write_i32(&mut self, i: i32) {
        self.mix(i as u32 as u64)
    }
    #[inline]
    fn write_i64(&mut self, i: i64) {
        self.mix(i as u64)
    }
    #[inline]
    fn write_isize(&mut self, i: isize) {
        self.mix(i as i64 as u64)
    }
}

/// The stable hash of a key (see [`StableHasher`]).
#[inline]
pub fn stable_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = StableHasher::default();
    key.hash(&mut h);
    h.finish()
}

/// The key group a key belongs to, in `0..max_parallelism`.
#[inline]
pub fn key_group<K: Hash + ?Sized>(key: &K, max_parallelism: u32) -> u32 {
    key_group_of_hash(stable_hash(key), max_parallelism)
}

/// The key group of a key whose [`stable_hash`] is `hash`: `hash % max_parallelism`.
///
/// A power-of-two `max_parallelism` (the default, 128) takes a mask instead of a 64-bit
/// division — the same value, several times cheaper on the per-record routing path.
#[inline]
pub fn key_group_of_hash(hash: u64, max_parallelism: u32) -> u32 {
    let m = max_parallelism as u64;
    if m.is_power_of_two() {
        (hash & (m - 1)) as u32
    } else {
        (hash % m) as u32
    }
}

/// The subtask (of `parallelism`) that owns key group `group` (Flink's formula).
#[inline]
pub fn operator_index(group: u32, max_parallelism: u32, parallelism: u32) -> u32 {
    ((group as u64 * parallelism as u64) / max_parallelism as u64) as u32
}

/// A contiguous, inclusive-exclusive range of key groups `[start, end)` owned by one subtask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeyGroupRange {
    /// First key group in the range.
    pub start: u32,
    /// One past the last key group.
    pub end: u32,
}

impl KeyGroupRange {
    /// The range subtask `index` of `parallelism` owns; the inverse of [`operator_index`].
    pub fn for_subtask(index: u32, parallelism: u32, max_parallelism: u32) -> Self {
        let (i, p, m) = (index as u64, parallelism as u64, max_parallelism as u64);
        let start = (i * m).div_ceil(p);
        let end = ((i + 1) * m).div_ceil(p);
        KeyGroupRange {
            start: start as u32,
            end: end as u32,
        }
    }

    /// Whether `group` lies in the range.
    #[inline]
    pub fn contains(&self, group: u32) -> bool {
        group >= self.start && group < self.end
    }

    /// Whether two ranges share a key group (restore reads only overlapping files).
    pub fn intersects(&self, other: &KeyGroupRange) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// Number of key groups in the range.
    pub fn len(&self) -> u32 {
        self.end - self.start
    }

    /// Whether the range holds no key group (possible only when parallelism > max).
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_frozen() {
        // These values pin the algorithm: a change here reassigns every key in every
        // checkpoint ever written. Do not update them; add a new hasher instead.
        assert_eq!(
            stable_hash(&7u32),
            stable_hash(&7u64),
            "integers hash by value"
        );
        assert_eq!(stable_hash("hello"), stable_hash(&String::from("hello")));
        assert_ne!(stable_hash("a"), stable_hash("a\0"));
        assert_eq!(stable_hash(&12345u64), 7_961_676_534_855_687_200, "golden");
        assert_eq!(
            key_group(&12345u64, 128),
            (7_961_676_534_855_687_200u64 % 128) as u32
        );
    }

    #[test]
    fn key_group_of_hash_is_the_remainder() {
        let mut rng = fastrand::Rng::with_seed(3);
        for maxp in [1, 2, 3, 7, 128, 129, 1000, 4096, MAX_MAX_PARALLELISM] {
            for _ in 0..1000 {
                let h = rng.u64(..);
                assert_eq!(key_group_of_hash(h, maxp) as u64, h % maxp as u64);
            }
        }
    }

    #[test]
    fn ranges_agree_with_operator_index() {
        for m in [1u32, 2, 7, 128, 1000] {
            for p in 1..=m.min(40) {
                let mut covered = 0;
                for i in 0..p {
                    let r = KeyGroupRange::for_subtask(i, p, m);
                    covered += r.len();
                    for g in r.start..r.end {
                        assert_eq!(operator_index(g, m, p), i, "m={m} p={p} g={g}");
                    }
                }
                assert_eq!(covered, m);
            }
        }
    }

    #[test]
    fn keys_spread_over_groups() {
        let mut counts = vec![0u32; 128];
        for k in 0u64..128_000 {
            counts[key_group(&k, 128) as usize] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*min > 800 && *max < 1200, "min {min} max {max}");
    }
}
