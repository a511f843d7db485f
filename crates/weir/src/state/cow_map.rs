//! A hash map whose snapshot costs O(shards), not O(entries): the copy-on-write store
//! behind keyed state.
//!
//! The map is split into [`SHARDS`] hash tables. A snapshot moves each table behind an
//! `Arc` and shares it (a few microseconds whatever the size — the synchronous phase of a
//! checkpoint does not grow with the state). The first write to a shared shard takes the
//! table back: without a copy if the snapshot has already been written and dropped, with a
//! copy of that one shard otherwise. So a checkpoint copies only the shards written while
//! its snapshot is being encoded, and writes to an owned shard touch no atomic at all.
//!
//! Each key is hashed once per access (FxHash); the shard comes from a second mix of that
//! hash, so the bits the tables use within a shard stay well distributed.

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

/// Number of shards (a power of two).
pub const SHARDS: usize = 256;

#[inline]
fn hash_of<K: Hash + ?Sized>(k: &K) -> u64 {
    FxBuildHasher.hash_one(k)
}

#[inline]
fn shard_of(hash: u64) -> usize {
    // A different multiplier than FxHash's, then the top bits: independent of the bits
    // hashbrown uses inside the shard (its low bits and top seven).
    ((hash ^ (hash >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SHARDS.trailing_zeros()))
        as usize
}

/// Inserts `k` (absent) with `default()`: the rare half of [`CowMap::get_or_insert_with`],
/// out of line so that the common half stays short.
#[cold]
#[inline(never)]
fn insert_absent<'t, K: Hash + Clone, V>(
    absent: hashbrown::hash_table::AbsentEntry<'t, (K, V)>,
    h: u64,
    k: &K,
    default: impl FnOnce() -> V,
    len: &mut usize,
) -> &'t mut V {
    *len += 1;
    &mut absent
        .into_table()
        .insert_unique(h, (k.clone(), default()), |e| hash_of(&e.0))
        .into_mut()
        .1
}

/// One shard: owned (written in place) or shared with a snapshot.
enum Shard<K, V> {
    Owned(HashTable<(K, V)>),
    Shared(Arc<HashTable<(K, V)>>),
}

impl<K: Clone, V: Clone> Shard<K, V> {
    #[inline]
    fn table(&self) -> &HashTable<(K, V)> {
        match self {
            Shard::Owned(t) => t,
            Shard::Shared(t) => t,
        }
    }

    #[inline]
    fn table_mut(&mut self) -> &mut HashTable<(K, V)> {
        if let Shard::Shared(_) = self {
            self.take_back();
        }
        match self {
            Shard::Owned(t) => t,
            Shard::Shared(_) => unreachable!("made owned above"),
        }
    }

    /// Makes a shared shard owned again: once per shard per checkpoint, so kept out of line
    /// to keep the per-record path of [`Shard::table_mut`] short (see
    /// [`CowMap::get_or_insert_with`]).
    #[cold]
    #[inline(never)]
    fn take_back(&mut self) {
        if let Shard::Shared(arc) = self {
            let arc = std::mem::replace(arc, Arc::new(HashTable::new()));
            *self = Shard::Owned(Arc::try_unwrap(arc).unwrap_or_else(|shared| (*shared).clone()));
        }
    }

    /// Shares the table (moving it behind an `Arc` if owned) and returns a handle to it.
    fn share(&mut self) -> Arc<HashTable<(K, V)>> {
        if let Shard::Owned(t) = self {
            *self = Shard::Shared(Arc::new(std::mem::take(t)));
        }
        match self {
            Shard::Shared(a) => a.clone(),
            Shard::Owned(_) => unreachable!("shared above"),
        }
    }
}

/// See the module docs.
pub struct CowMap<K, V> {
    shards: Vec<Shard<K, V>>,
    len: usize,
}

/// An immutable view of a [`CowMap`] at one moment; cheap to take, safe to send.
pub struct CowSnapshot<K, V> {
    shards: Vec<Arc<HashTable<(K, V)>>>,
    len: usize,
}

impl<K, V> Default for CowMap<K, V> {
    fn default() -> Self {
        CowMap {
            shards: (0..SHARDS)
                .map(|_| Shard::Owned(HashTable::new()))
                .collect(),
            len: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone> CowMap<K, V> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value of `k`.
    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        let h = hash_of(k);
        self.shards[shard_of(h)]
            .table()
            .find(h, |e| e.0 == *k)
            .map(|e| &e.1)
    }

    #[inline]
    fn shard_mut(&mut self, h: u64) -> &mut HashTable<(K, V)> {
        self.shards[shard_of(h)].table_mut()
    }

    /// Mutable access to `k`'s value, inserting `default()` if absent. The key is cloned
    /// only when it is inserted.
    ///
    /// This is the per-record path of keyed state, and with state larger than the cache its
    /// time is mostly waiting for the slot's cache line. The CPU hides that only by running
    /// ahead into the next records, which it can do further the fewer instructions each
    /// record takes — so everything rare (inserting, copying a shard back from a snapshot)
    /// is out of line, leaving a short lookup here.
    #[inline]
    pub fn get_or_insert_with(&mut self, k: &K, default: impl FnOnce() -> V) -> &mut V {
        let h = hash_of(k);
        let table = self.shards[shard_of(h)].table_mut();
        match table.find_entry(h, |e| e.0 == *k) {
            Ok(found) => &mut found.into_mut().1,
            Err(absent) => insert_absent(absent, h, k, default, &mut self.len),
        }
    }

    /// Sets `k` to `v`, returning the previous value.
    #[inline]
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        let h = hash_of(&k);
        let table = self.shards[shard_of(h)].table_mut();
        match table.find_entry(h, |e| e.0 == k) {
            Ok(mut found) => Some(std::mem::replace(&mut found.get_mut().1, v)),
            Err(absent) => {
                absent
                    .into_table()
                    .insert_unique(h, (k, v), |e| hash_of(&e.0));
                self.len += 1;
                None
            }
        }
    }

    /// Removes `k`, returning its value.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let h = hash_of(k);
        // Do not copy a shared shard just to find out the key is absent.
        self.shards[shard_of(h)].table().find(h, |e| e.0 == *k)?;
        let shard = self.shard_mut(h);
        let (entry, _) = shard.find_entry(h, |e| e.0 == *k).ok()?.remove();
        self.len -= 1;
        Some(entry.1)
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards
            .iter()
            .flat_map(|s| s.table().iter().map(|e| (&e.0, &e.1)))
    }

    /// The entries of shard `shard` (for incremental sweeps over the map).
    pub fn shard_iter(&self, shard: usize) -> impl Iterator<Item = (&K, &V)> {
        self.shards[shard % SHARDS]
            .table()
            .iter()
            .map(|e| (&e.0, &e.1))
    }

    /// An immutable view, in O(shards).
    pub fn snapshot(&mut self) -> CowSnapshot<K, V> {
        CowSnapshot {
            shards: self.shards.iter_mut().map(Shard::share).collect(),
            len: self.len,
        }
    }

    /// Makes room for `additional` more entries (spread over the shards as hashing spreads
    /// them, with headroom), so that a restore, which knows its entry count, does not
    /// rehash every shard again and again as it grows. Does nothing for a few entries.
    pub fn reserve(&mut self, additional: usize) {
        if additional < SHARDS * 16 {
            return;
        }
        let per_shard = additional / SHARDS;
        let per_shard = per_shard + per_shard / 8;
        for shard in &mut self.shards {
            shard.table_mut().reserve(per_shard, |e| hash_of(&e.0));
        }
    }
}

impl<K: Hash + Eq, V> CowSnapshot<K, V> {
    /// The value of `k` in the view.
    pub fn get(&self, k: &K) -> Option<&V> {
        let h = hash_of(k);
        self.shards[shard_of(h)]
            .find(h, |e| e.0 == *k)
            .map(|e| &e.1)
    }
}

impl<K, V> CowSnapshot<K, V> {
    /// Every entry of the view.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards
            .iter()
            .flat_map(|s| s.iter().map(|e| (&e.0, &e.1)))
    }

    /// Number of entries in the view.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn behaves_like_a_hash_map() {
        let mut m = CowMap::<u64, u64>::default();
        let mut model = HashMap::new();
        let mut rng = fastrand::Rng::with_seed(1);
        for _ in 0..20_000 {
            let k = rng.u64(0..500);
            match rng.u8(0..4) {
                0 => assert_eq!(m.insert(k, k * 3), model.insert(k, k * 3)),
                1 => assert_eq!(m.remove(&k), model.remove(&k)),
                2 => {
                    *m.get_or_insert_with(&k, || 7) += 1;
                    *model.entry(k).or_insert(7) += 1;
                }
                _ => assert_eq!(m.get(&k), model.get(&k)),
            }
            assert_eq!(m.len(), model.len());
        }
        let mut all: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
        all.sort();
        let mut want: Vec<_> = model.into_iter().collect();
        want.sort();
        assert_eq!(all, want);
    }

    #[test]
    fn snapshots_are_isolated_and_cheap() {
        let mut m = CowMap::<String, u64>::default();
        for i in 0..1000u64 {
            m.insert(format!("k{i}"), i);
        }
        let snap = m.snapshot();
        for i in 0..1000u64 {
            *m.get_or_insert_with(&format!("k{i}"), || 0) += 1;
        }
        m.remove(&"k0".to_string());
        m.insert("new".into(), 1);
        assert_eq!(snap.len(), 1000);
        let mut seen: Vec<u64> = snap.iter().map(|(_, v)| *v).collect();
        seen.sort();
        assert_eq!(seen, (0..1000).collect::<Vec<_>>());
        assert_eq!(m.get(&"k5".to_string()), Some(&6));
        assert_eq!(m.len(), 1000);
        // Once the snapshot is gone, a shared shard is taken back without a copy.
        let snap2 = m.snapshot();
        let i = (0..SHARDS).find(|&i| !snap2.shards[i].is_empty()).unwrap();
        let before = snap2.shards[i].iter().next().unwrap() as *const (String, u64);
        drop(snap2);
        let after = m.shards[i].table_mut().iter().next().unwrap() as *const (String, u64);
        assert_eq!(before, after, "no copy once the snapshot is dropped");
    }

    #[test]
    fn keys_spread_over_shards() {
        let mut m = CowMap::<u64, ()>::default();
        for k in 0..(SHARDS as u64 * 100) {
            m.insert(k, ());
        }
        let sizes: Vec<usize> = m.shards.iter().map(|s| s.table().len()).collect();
        let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(*min > 50 && *max < 160, "min {min} max {max}");
    }
}
