//! A filter of the LSM keys a disk tier may hold ([`KeyFilter`]), so that a cache miss on a
//! key the tier never wrote is answered "absent" without asking the LSM — in W1 with
//! 10 M keys half the records touch a key for the first time, and fjall's `get` of a key it
//! does not have (memtable skip-list search, a bloom filter and a block index per table)
//! was most of their cost (docs/design-notes.md, "Where a miss spends its time").
//!
//! A scalable Bloom filter (Almeida et al., 2007): layers of doubling capacity, each a
//! *blocked* Bloom filter — a key's bits all lie in one 64-byte block, one bit in each of
//! its eight 64-bit words (Parquet's split-block filter on a cache line) — so a layer costs
//! one cache line per lookup, not one per bit. A layer is added when the newest is full;
//! each new layer's false-positive rate is [`TIGHTENING`] times the one before, so the
//! filter's rate stays under [`FALSE_POSITIVES`] however many layers it grows.
//!
//! It has **no false negatives** as long as every key put into the tier's keyspace was
//! added first (`DiskTier` adds it on a write that missed the cache, and on every restore
//! and fetch of a remote key group). Nothing is ever removed: a key deleted from the LSM
//! stays in the filter, which costs a read that finds nothing, as before the filter.

use xxhash_rust::xxh3::xxh3_64;

/// Keys the first layer holds: a few KiB, as a window pane's tier may never hold more.
const FIRST_CAPACITY: usize = 4096;

/// The bound on the whole filter's false-positive rate (every layer's rate added up).
const FALSE_POSITIVES: f64 = 0.01;

/// Each layer's false-positive rate is this times the previous layer's: the rates form a
/// geometric series bounded by `FALSE_POSITIVES`. Closer to 1 costs the first layers more
/// bits and the later ones fewer (about 0.8 bit per key per doubling at 0.85); for the
/// millions of keys per tier of a state that does not fit in memory, 0.85 held the least
/// memory per key of 0.5–0.9 (computed from the block filter's rate, see [`rate`]).
const TIGHTENING: f64 = 0.85;

/// Bits of a block (a cache line), in 64-bit words: a key sets one bit in each word.
const WORDS: usize = 8;

/// Odd multipliers picking a key's bit in each word of its block (Parquet's split-block
/// Bloom filter's salts).
const SALTS: [u32; WORDS] = [
    0x47b6_137b,
    0x4497_4d91,
    0x8824_ad5b,
    0xa2b7_289d,
    0x7054_95c7,
    0x2df1_424b,
    0x9efc_4947,
    0x5c6b_fb31,
];

/// One layer: a blocked Bloom filter sized for `capacity` keys at its rate.
struct Layer {
    /// `WORDS` words per block.
    words: Box<[u64]>,
    /// Number of blocks (`words.len() / WORDS`).
    blocks: u64,
    /// Keys it is sized for; the filter adds a layer when it is reached.
    capacity: usize,
    /// Keys added (each once: the filter adds only keys it does not already report).
    len: usize,
    /// Mixed into the key's hash so layers place a key independently.
    seed: u64,
}

impl Layer {
    fn new(capacity: usize, rate: f64, seed: u64) -> Layer {
        let bits = capacity as f64 * bits_per_key(rate);
        let blocks = ((bits / (64 * WORDS) as f64).ceil() as u64).max(1);
        Layer {
            // Zeroed memory from the allocator: no pass over it here.
            words: vec![0u64; blocks as usize * WORDS].into_boxed_slice(),
            blocks,
            capacity,
            len: 0,
            seed,
        }
    }

    /// The first word of `hash`'s block and the mask of its bit in each word.
    #[inline]
    fn place(&self, hash: u64) -> (usize, [u64; WORDS]) {
        let h = mix(hash ^ self.seed);
        // The high half picks the block (multiply-shift: no division), the low half the
        // bits.
        let block = ((h >> 32) * self.blocks) >> 32;
        let low = h as u32;
        let mut masks = [0u64; WORDS];
        for (m, salt) in masks.iter_mut().zip(SALTS) {
            *m = 1u64 << (low.wrapping_mul(salt) >> 26);
        }
        (block as usize * WORDS, masks)
    }

    #[inline]
    fn contains(&self, hash: u64) -> bool {
        let (at, masks) = self.place(hash);
        let block = &self.words[at..at + WORDS];
        block.iter().zip(masks).all(|(w, m)| w & m != 0)
    }

    fn insert(&mut self, hash: u64) {
        let (at, masks) = self.place(hash);
        for (w, m) in self.words[at..at + WORDS].iter_mut().zip(masks) {
            *w |= m;
        }
        self.len += 1;
    }
}

/// The most memory one tier's filter may hold: about 10 M keys at the bits per key the
/// layers take. Past it the filter lets go of its layers and answers "may hold" for every
/// key (as without a filter): the disk backend's memory must not grow with the number of
/// keys, which is unbounded (RocksDB bounds its filters the same way, as blocks of its
/// block cache).
const MAX_BYTES: usize = 32 << 20;

/// The keys a disk tier may hold (see the module docs). Empty until the first key: a
/// tier that is only read costs nothing.
pub(crate) struct KeyFilter {
    layers: Vec<Layer>,
    /// Past `max_bytes`: the layers are gone and every key may be held.
    saturated: bool,
    max_bytes: usize,
}

impl Default for KeyFilter {
    fn default() -> Self {
        KeyFilter::with_max_bytes(MAX_BYTES)
    }
}

impl KeyFilter {
    /// The hash the filter places an LSM key by (its encoded bytes: what restore and a
    /// remote fetch have, and what a miss encodes anyway).
    #[inline]
    pub(crate) fn hash(key: &[u8]) -> u64 {
        xxh3_64(key)
    }

    /// A filter that saturates past `max_bytes` of layers.
    pub(crate) fn with_max_bytes(max_bytes: usize) -> Self {
        KeyFilter {
            layers: Vec::new(),
            saturated: false,
            max_bytes,
        }
    }

    /// Whether the key of `hash` may have been added; `false` means it never was.
    #[inline]
    pub(crate) fn may_contain(&self, hash: u64) -> bool {
        // The newest layer holds about half the keys: asked first.
        self.saturated || self.layers.iter().rev().any(|l| l.contains(hash))
    }

    /// Adds the key of `hash`, which [`KeyFilter::may_contain`] just denied (so each key
    /// counts once towards a layer's capacity).
    pub(crate) fn insert_new(&mut self, hash: u64) {
        let full = self.layers.last().is_none_or(|l| l.len >= l.capacity);
        if self.saturated {
            return;
        }
        if full {
            let n = self.layers.len();
            let capacity = FIRST_CAPACITY << n.min(40);
            let rate = FALSE_POSITIVES * (1.0 - TIGHTENING) * TIGHTENING.powi(n as i32);
            let held: usize = self.layers.iter().map(|l| l.words.len() * 8).sum();
            let next = (capacity as f64 * bits_per_key(rate) / 8.0) as usize;
            if held + next > self.max_bytes {
                self.layers = Vec::new();
                self.saturated = true;
                return;
            }
            let seed = (n as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            self.layers.push(Layer::new(capacity, rate, seed));
        }
        if let Some(l) = self.layers.last_mut() {
            l.insert(hash);
        }
    }

    /// Adds the LSM key `key` unless the filter already reports it.
    #[inline]
    pub(crate) fn insert(&mut self, key: &[u8]) {
        let hash = Self::hash(key);
        if !self.may_contain(hash) {
            self.insert_new(hash);
        }
    }

    /// Bytes the filter holds (its layers' bits).
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.layers.iter().map(|l| l.words.len() * 8).sum()
    }

    /// Keys added (each counted once).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.layers.iter().map(|l| l.len).sum()
    }
}

/// A 64-bit finaliser (splitmix64's): spreads a layer's seed through the key's hash.
#[inline]
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The false-positive rate of a layer at `bits` per key: a block holds a Poisson number of
/// keys (mean 512 / `bits`), each setting one bit of each of its 8 words; a key is falsely
/// reported when all 8 of its bits are set.
fn rate(bits: f64) -> f64 {
    let word = 64.0_f64;
    let mean = (64 * WORDS) as f64 / bits;
    let (mut p, mut sum) = ((-mean).exp(), 0.0);
    for n in 0..1024 {
        if n > 0 {
            p *= mean / n as f64;
        }
        let fill = 1.0 - (1.0 - 1.0 / word).powi(n);
        sum += p * fill.powi(WORDS as i32);
        if n as f64 > mean && p < 1e-12 {
            break;
        }
    }
    sum
}

/// The fewest bits per key (in quarter bits) at which a layer's rate is at most `target`.
fn bits_per_key(target: f64) -> f64 {
    let mut bits = 4.0;
    while rate(bits) > target && bits < 64.0 {
        bits += 0.25;
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> Vec<u8> {
        // Shaped like an LSM key: key group, then postcard bytes.
        let mut k = ((i % 128) as u16).to_be_bytes().to_vec();
        k.extend(postcard::to_stdvec(&i).unwrap());
        k
    }

    #[test]
    fn every_key_added_is_reported_across_layers() {
        let mut f = KeyFilter::default();
        assert!(!f.may_contain(KeyFilter::hash(&key(1))), "empty");
        let n = 300_000u64;
        for i in 0..n {
            f.insert(&key(i));
        }
        assert!(f.layers.len() >= 6, "grew by layers: {}", f.layers.len());
        for i in 0..n {
            assert!(f.may_contain(KeyFilter::hash(&key(i))), "key {i} lost");
        }
    }

    #[test]
    fn the_false_positive_rate_stays_under_its_bound_as_it_grows() {
        let mut f = KeyFilter::default();
        let n = 1_000_000u64;
        for i in 0..n {
            f.insert(&key(i));
        }
        let probes = 1_000_000u64;
        let false_pos = (n..n + probes)
            .filter(|&i| f.may_contain(KeyFilter::hash(&key(i))))
            .count();
        let rate = false_pos as f64 / probes as f64;
        // Deterministic (fixed keys, fixed hash): measured 0.6 % at 1 M keys, 9 layers.
        assert!(rate < FALSE_POSITIVES, "false positives {rate}");
        // Duplicates are counted once, so the layers fill with distinct keys.
        assert!(f.len() as u64 <= n);
        let bits = f.bytes() as f64 * 8.0 / f.len() as f64;
        assert!(bits < 32.0, "{bits} bits per key");
    }

    #[test]
    fn the_rate_model_matches_the_textbook_figures() {
        // A split-block filter on a cache line at 10 bits per key: about 1 %.
        assert!((0.009..0.012).contains(&rate(10.0)), "{}", rate(10.0));
        assert!(rate(bits_per_key(0.001)) <= 0.001);
    }

    /// Past its memory bound the filter lets go of its layers and reports every key, the
    /// added ones included: it never denies a key it was given.
    #[test]
    fn past_its_bound_the_filter_saturates_and_denies_nothing() {
        let mut f = KeyFilter::with_max_bytes(64 << 10);
        let keys: Vec<Vec<u8>> = (0..200_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        for k in &keys {
            f.insert(k);
            assert!(f.bytes() <= 64 << 10, "held {} bytes", f.bytes());
        }
        assert!(f.saturated && f.bytes() == 0);
        assert!(keys.iter().all(|k| f.may_contain(KeyFilter::hash(k))));
        assert!(f.may_contain(KeyFilter::hash(b"never added")));
        // Under the default bound 1 M keys fit: no saturation.
        let mut f = KeyFilter::default();
        for i in 0..1_000_000u32 {
            f.insert(&i.to_be_bytes());
        }
        assert!(!f.saturated && f.bytes() <= MAX_BYTES);
    }
}
