//! A hash map whose snapshot costs O(shards), not O(entries), and whose writes during a
//! snapshot do not copy it: the store behind keyed state.
//!
//! The map is split into [`SHARDS`] hash tables. A snapshot moves each table behind an
//! `Arc` and shares it (a few microseconds whatever the size — the synchronous phase of a
//! checkpoint does not grow with the state). The first write to a shared shard takes the
//! table back:
//!
//! * without a copy if the snapshot is done with it (written, or dropped);
//! * otherwise the snapshots still holding it are asked to let go first
//!   ([`ShardRelease`]: keyed state encodes the shard to compact bytes for the writer),
//!   and then without a copy either;
//! * with a copy of that one shard if it is small (a few kilobytes: cheaper than encoding
//!   it), or if a writer thread is reading it at that moment.
//!
//! So a checkpoint of a large map never holds a second copy of its tables — at most the
//! encoded bytes of the shards written to before the writer reached them — and writes to
//! an owned shard touch no atomic at all.
//!
//! Each key is hashed once per access (FxHash: the per-record path cannot afford the
//! stable hash that decides key groups, which costs several times more); the shard comes
//! from a second mix of that hash, so the bits the tables use within a shard stay well
//! distributed. Key groups are the writer's business (see `state::keyed::view`).

use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex, Weak};

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

/// Number of shards (a power of two): bounds the work of one shard's take-back (or
/// encoding) to 1/256 of the map.
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

/// A shared shard whose entries take at most this many bytes (shallow) is copied when
/// written rather than released ([`ShardRelease`]): copying a small table is far cheaper
/// for the processing thread than encoding it, and the copies of a map whose shards are
/// all this small add at most `SHARDS` × this to memory.
#[cfg(not(test))]
const COPY_AT_MOST: usize = 16 << 10;
/// Unit tests keep states small: most take the release path, as large states do.
#[cfg(test)]
const COPY_AT_MOST: usize = 64;

/// Something still holding shards of a snapshot (keyed state's view on its way to
/// storage), asked to let go of one before the map writes to it, so that the write needs
/// no copy of the shard.
pub trait ShardRelease: Send + Sync {
    /// Drops every hold on shard `shard` (for keyed state: encodes it first). Runs on the
    /// processing thread, inside a state access, so it should take time in proportion to
    /// one shard at most.
    fn release(&self, shard: usize);
}

/// A shard's table while snapshots share it, with what the map needs to take it back:
/// its number and the views to ask (kept here, so that the per-record path passes
/// nothing but the shard to the rare take-back).
struct Frozen<K, V> {
    table: HashTable<(K, V)>,
    index: usize,
    watchers: Mutex<Vec<Weak<dyn ShardRelease>>>,
}

/// One shard: owned (written in place) or shared with a snapshot. 32 bytes: the `Arc`
/// fits beside the table's non-null control pointer.
enum Shard<K, V> {
    Owned(HashTable<(K, V)>),
    Shared(Arc<Frozen<K, V>>),
}

impl<K: Clone, V: Clone> Shard<K, V> {
    #[inline]
    fn table(&self) -> &HashTable<(K, V)> {
        match self {
            Shard::Owned(t) => t,
            Shard::Shared(f) => &f.table,
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

    /// Makes a shared shard owned again: first asks the snapshots still holding it to let
    /// go ([`ShardRelease`]), then takes the table without a copy — or copies this one
    /// shard if a writer thread is still reading it. Once per shard per checkpoint, so
    /// kept out of line to keep the per-record path of [`Shard::table_mut`] short (see
    /// [`CowMap::get_or_insert_with`]).
    #[cold]
    #[inline(never)]
    fn take_back(&mut self) {
        let Shard::Shared(frozen) = self else {
            return;
        };
        let small = frozen.table.len() * std::mem::size_of::<(K, V)>() <= COPY_AT_MOST;
        if Arc::strong_count(frozen) > 1 && !small {
            let watchers = frozen.watchers.lock().unwrap_or_else(|p| p.into_inner());
            for view in watchers.iter().filter_map(Weak::upgrade) {
                view.release(frozen.index);
            }
        }
        if let Shard::Shared(frozen) = std::mem::replace(self, Shard::Owned(HashTable::new())) {
            *self = Shard::Owned(match Arc::try_unwrap(frozen) {
                Ok(f) => f.table,
                Err(shared) => shared.table.clone(),
            });
        }
    }

    /// Shares the table (moving it behind an `Arc` if owned) and returns a handle to it.
    /// An owned empty table is not shared: there is nothing to keep, and a sparse map
    /// then costs no allocation per shard at the barrier.
    fn share(&mut self, index: usize) -> SharedShard<K, V> {
        if let Shard::Owned(t) = self {
            if t.is_empty() {
                return SharedShard(None);
            }
            *self = Shard::Shared(Arc::new(Frozen {
                table: std::mem::take(t),
                index,
                watchers: Mutex::new(Vec::new()),
            }));
        }
        match self {
            Shard::Shared(f) => SharedShard(Some(f.clone())),
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
    shards: Vec<SharedShard<K, V>>,
}

/// One shard of a [`CowSnapshot`]; dropping it is what lets the map write to the shard
/// without a copy. `None` for a shard that was empty.
pub struct SharedShard<K, V>(Option<Arc<Frozen<K, V>>>);

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

    /// Whether the map is empty (the window state drops a window whose table emptied).
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
    /// record takes — so everything rare (inserting, taking a shard back from a snapshot)
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

    /// Every entry, mutably, in no particular order. Takes back every shard a snapshot
    /// still shares (see the module docs), so use it for whole-map updates only.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.shards
            .iter_mut()
            .flat_map(|s| s.table_mut().iter_mut().map(|e| (&e.0, &mut e.1)))
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
            shards: self
                .shards
                .iter_mut()
                .enumerate()
                .map(|(i, s)| s.share(i))
                .collect(),
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

    /// Registers `view`, which holds shards of a snapshot of this map, to be asked to let
    /// go of a shard before it is written (held weakly: a dropped view is forgotten). Call
    /// it right after [`CowMap::snapshot`]; O(shards).
    pub fn watch(&mut self, view: Weak<dyn ShardRelease>) {
        for shard in &self.shards {
            if let Shard::Shared(f) = shard {
                let mut watchers = f.watchers.lock().unwrap_or_else(|p| p.into_inner());
                watchers.retain(|w| w.strong_count() > 0);
                watchers.push(view.clone());
            }
        }
    }
}

impl<K: Hash + Eq, V> CowSnapshot<K, V> {
    /// The value of `k` in the view: how the disk tier's asynchronous write-back reads the
    /// cache as it was at the barrier (the engine's snapshots otherwise read shard by shard).
    #[cfg_attr(not(any(test, feature = "disk-state")), allow(dead_code))]
    pub fn get(&self, k: &K) -> Option<&V> {
        let h = hash_of(k);
        self.shards[shard_of(h)].get_hashed(h, k)
    }
}

/// Whole-view reads, for the tests: the engine reads a snapshot shard by shard
/// ([`CowSnapshot::into_shards`]).
#[cfg(test)]
impl<K: Hash + Eq, V> CowSnapshot<K, V> {
    /// Every entry of the view.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flat_map(|s| s.iter())
    }

    /// Number of entries in the view.
    pub fn len(&self) -> usize {
        self.shards.iter().map(SharedShard::len).sum()
    }
}

impl<K, V> CowSnapshot<K, V> {
    /// The shards, in shard order (shard `i` of every map holds the same keys: the shard
    /// depends on the key alone), to be encoded and dropped one by one.
    pub fn into_shards(self) -> Vec<SharedShard<K, V>> {
        self.shards
    }
}

impl<K, V> SharedShard<K, V> {
    /// Every entry of the shard.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0
            .iter()
            .flat_map(|f| f.table.iter().map(|e| (&e.0, &e.1)))
    }

    /// Number of entries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |f| f.table.len())
    }

    /// Whether the shard is empty.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Hash + Eq, V> SharedShard<K, V> {
    /// The value of `k`, if it is in this shard.
    pub fn get(&self, k: &K) -> Option<&V> {
        self.get_hashed(hash_of(k), k)
    }

    fn get_hashed(&self, h: u64, k: &K) -> Option<&V> {
        let f = self.0.as_ref()?;
        f.table.find(h, |e| e.0 == *k).map(|e| &e.1)
    }
}

#[cfg(test)]
mod tests;
