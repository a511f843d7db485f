//! The write-back of a barrier's dirty cache entries, off the processing thread (the
//! asynchronous phase of a disk snapshot, as Flink's RocksDB backend flushes and uploads in
//! its asynchronous phase; docs/design-notes.md, "Keyed state on disk").
//!
//! At a barrier the disk tier only *freezes*: it takes its set of dirty keys (starting a new,
//! empty one), and shares the cache's copy-on-write shards (and TTL stamps) with a
//! [`WriteBack`] — O(shards), whatever the number of dirty keys. The write-back then puts
//! (or deletes) every frozen dirty key into the LSM in one batch and pins an MVCC snapshot
//! right after it: that snapshot is exactly the state at the barrier.
//!
//! Guarantees:
//! * **Order.** Write-backs of one tier reach the LSM in barrier order: each runs the one
//!   before it first ([`WriteBack::run`]). The processing thread writes to the tier's keys
//!   only after every pending write-back of the tier ran (`DiskTier::settle`), so nothing
//!   written after a barrier lands before (or inside) that barrier's snapshot.
//! * **Reads see the frozen state.** Until a write-back ran, the cache keeps every frozen
//!   entry (shared, copied shard by shard on the first write after the barrier), and a key
//!   that was deleted before the barrier is not read back from the LSM: a load skips the
//!   keys of pending write-backs (`DiskTier::load`).
//! * **Whoever needs it first runs it.** The checkpoint's writer thread runs it when it
//!   reaches the state's view; the processing thread runs it (or waits for it) only when it
//!   must write to the LSM itself (a full cache, a cleared pane, end of input). Nothing is
//!   lost if no view ever reads it (an aborted checkpoint): the tier keeps it pending.
//! * **Encoded, then committed.** A run has two steps ([`Stage`]): encode (the earlier
//!   write-backs run, the dirty keys sorted into a batch, the delta's keys and entries
//!   filled, the cache's shards let go) and commit (the batch into the memtable). A delta
//!   holding this write-back's entries reads only after the first ([`Pinned::encoded`]);
//!   the commit then runs after its checkpoint is acknowledged, and until it has, the
//!   write-back stays pending like any other.
//! * **A failed write-back poisons the tier:** it stays pending with its error, so every
//!   later snapshot of the tier and every later LSM write fails (the task restarts from its
//!   last checkpoint) rather than going on without the writes it lost.

use std::sync::{Arc, Mutex, OnceLock};

use rustc_hash::FxHashSet;

use super::super::super::cow_map::CowSnapshot;
use super::super::super::{Key, StateValue};
use super::super::incremental::{DeferredKeys, DeltaEntries};
use super::{lsm_error, lsm_key, lsm_value_into, DiskStore};
use crate::error::Result;

/// A pinned point of the LSM a snapshot view reads, once the write-back it waits for ran.
pub(super) trait Pinned: Send + Sync {
    /// The LSM snapshot at the barrier, after running the write-back (and every earlier one
    /// of its tier) if nobody has yet.
    fn pinned(&self) -> Result<&fjall::Snapshot>;

    /// For a delta that holds the entries of `own` (its barrier's write-back) as that
    /// write-back encoded them: every earlier write-back of the tier run, `own` *encoded*
    /// (its keys and entries filled) but not necessarily committed, and an LSM snapshot
    /// right for every key but `own`'s — the delta takes those from the entries. The
    /// commit, about half of a write-back's CPU (the memtable inserts), then runs after the
    /// checkpoint is acknowledged ([`crate::state::after_ack`]) instead of
    /// before. Where `own` is not this chain's newest write-back with entries, the same as
    /// [`Pinned::pinned`].
    fn encoded(&self, own: &Arc<DeferredKeys>) -> Result<fjall::Snapshot>;
}

/// Where a write-back stands before it is done.
enum Stage<K, S> {
    /// Frozen at the barrier, nothing encoded yet.
    Frozen(Work<K, S>),
    /// Every earlier write-back ran and this one's batch is encoded (its keys and delta
    /// entries filled, the cache's shards let go): only the commit (of the batch and its
    /// bytes; `None`: nothing was dirty) is left.
    Encoded(Option<(fjall::OwnedWriteBatch, usize)>),
    /// Taken by a run that panicked (the lock was poisoned).
    Gone,
}

/// What a write-back writes: taken out (and dropped, letting go of the cache's shards) when
/// it is encoded.
struct Work<K, S> {
    /// The tier's previous write-back, if it had not run at the freeze: runs first.
    prev: Option<Arc<WriteBack<K, S>>>,
    /// The cache at the barrier (`None`: nothing was dirty).
    map: Option<CowSnapshot<K, S>>,
    /// With TTL: the stamps at the barrier.
    stamps: Option<CowSnapshot<K, u64>>,
    /// With incremental checkpoints: where the LSM keys written are listed.
    keys: Option<Arc<DeferredKeys>>,
}

/// One barrier's write-back of one disk tier (see the module docs).
pub(super) struct WriteBack<K, S> {
    store: Arc<DiskStore>,
    ks: fjall::Keyspace,
    /// The tier's namespace prefix.
    prefix: Vec<u8>,
    max_parallelism: u32,
    /// Whether values carry TTL stamps.
    ttl: bool,
    /// The keys dirty at the barrier: present in the frozen cache, a put; absent, a delete.
    /// Read by the processing thread's loads while the write-back is pending.
    pub(super) dirty: FxHashSet<K>,
    /// With incremental checkpoints: the LSM keys it writes (the same `Arc` as the work's).
    keys: Option<Arc<DeferredKeys>>,
    work: Mutex<Stage<K, S>>,
    /// The LSM snapshot taken right after the batch, or why the write-back failed.
    done: OnceLock<std::result::Result<fjall::Snapshot, String>>,
}

/// Where a write-back writes (the tier's fixed parts).
pub(super) struct Target<'a> {
    pub store: &'a Arc<DiskStore>,
    pub ks: &'a fjall::Keyspace,
    pub prefix: &'a [u8],
    pub max_parallelism: u32,
}

impl<K: Key, S: StateValue> WriteBack<K, S> {
    /// The write-back of `dirty`, whose values are in `map` (with `stamps` under TTL), after
    /// `prev`; `keys` lists the LSM keys written (incremental checkpoints).
    pub(super) fn new(
        target: Target<'_>,
        dirty: FxHashSet<K>,
        map: Option<CowSnapshot<K, S>>,
        stamps: Option<CowSnapshot<K, u64>>,
        ttl: bool,
        prev: Option<Arc<WriteBack<K, S>>>,
        keys: Option<Arc<DeferredKeys>>,
    ) -> Self {
        WriteBack {
            store: target.store.clone(),
            ks: target.ks.clone(),
            prefix: target.prefix.to_vec(),
            max_parallelism: target.max_parallelism,
            ttl,
            dirty,
            keys: keys.clone(),
            work: Mutex::new(Stage::Frozen(Work {
                prev,
                map,
                stamps,
                keys,
            })),
            done: OnceLock::new(),
        }
    }

    /// Whether it ran and succeeded (its LSM writes are in).
    pub(super) fn succeeded(&self) -> bool {
        matches!(self.done.get(), Some(Ok(_)))
    }

    /// Runs the write-back unless it ran (waiting if another thread is running it), the
    /// previous one of its tier first; returns the snapshot pinned right after it.
    pub(super) fn run(&self) -> Result<&fjall::Snapshot> {
        if self.done.get().is_none() {
            let mut stage = self.work.lock().unwrap_or_else(|p| p.into_inner());
            if self.done.get().is_none() {
                let result = self
                    .encode(&mut stage)
                    .and_then(|()| self.commit(&mut stage))
                    .map(|()| self.store.db.snapshot());
                let _ = self.done.set(result.map_err(|e| e.to_string()));
            }
        }
        self.result()
    }

    /// The outcome of a write-back that ran.
    fn result(&self) -> Result<&fjall::Snapshot> {
        match self.done.get() {
            Some(Ok(snapshot)) => Ok(snapshot),
            Some(Err(e)) => Err(lsm_error(&self.store.dir, e)),
            None => Err(lsm_error(
                &self.store.dir,
                "internal: a write-back ended without a result (a bug in Weir; please report it)",
            )),
        }
    }

    /// Encodes the batch unless it is (see [`Stage`]); a failure is the write-back's result.
    fn encode(&self, stage: &mut Stage<K, S>) -> Result<()> {
        if let Stage::Frozen(_) = stage {
            let Stage::Frozen(work) = std::mem::replace(stage, Stage::Gone) else {
                unreachable!("matched above")
            };
            match self.write(work) {
                Ok(batch) => *stage = Stage::Encoded(batch),
                Err(e) => {
                    let _ = self.done.set(Err(e.to_string()));
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Commits an encoded batch (an empty write-back has none left: it commits nothing).
    fn commit(&self, stage: &mut Stage<K, S>) -> Result<()> {
        match std::mem::replace(stage, Stage::Gone) {
            Stage::Encoded(Some((batch, bytes))) => self.store.commit(&self.ks, batch, bytes),
            Stage::Encoded(None) => Ok(()),
            // Only after a panic inside `encode` or `commit` (the lock was poisoned).
            Stage::Frozen(_) | Stage::Gone => Err(lsm_error(
                &self.store.dir,
                "a write-back of keyed state failed earlier",
            )),
        }
    }

    /// See [`Pinned::encoded`].
    fn encoded_snapshot(&self, own: &Arc<DeferredKeys>) -> Result<fjall::Snapshot> {
        if self.done.get().is_some() {
            return self.result().cloned();
        }
        let mut stage = self.work.lock().unwrap_or_else(|p| p.into_inner());
        if self.done.get().is_some() {
            return self.result().cloned();
        }
        if self.keys.as_ref().is_some_and(|k| Arc::ptr_eq(k, own)) {
            self.encode(&mut stage)?;
            // Taken under the lock: nothing reaches the tier's keys in the LSM until this
            // commit ran (the processing thread settles first, which waits for the lock).
            return Ok(self.store.db.snapshot());
        }
        // An empty write-back (the delta's own freeze, after its barrier's): its previous
        // one is the barrier's.
        if let Stage::Frozen(work) = &*stage {
            if work.map.is_none() {
                if let Some(prev) = work.prev.clone() {
                    drop(stage);
                    return prev.encoded_snapshot(own);
                }
            }
        }
        drop(stage);
        self.run().cloned()
    }

    /// Encodes every frozen dirty key, a put or a delete, into one batch (after running the
    /// previous write-back): the batch and its bytes, for [`WriteBack::commit`] (`None`:
    /// nothing was dirty).
    fn write(&self, w: Work<K, S>) -> Result<Option<(fjall::OwnedWriteBatch, usize)>> {
        if let Some(prev) = &w.prev {
            prev.run()?;
        }
        drop(w.prev);
        let Some(map) = w.map else {
            return Ok(None);
        };
        let track = w.keys.is_some();
        let mut recorded = Vec::with_capacity(if track { self.dirty.len() } else { 0 });
        // The delta of this barrier's checkpoint takes its entries from here (no lookup).
        let mut entries = (w.keys.as_ref())
            .filter(|k| k.wants_entries())
            .map(|_| DeltaEntries::with_capacity(self.dirty.len()));
        let skip = self.prefix.len();
        let (batch, bytes) = sorted_batch(
            &self.store,
            &self.ks,
            (&self.prefix, self.max_parallelism),
            self.dirty.iter(),
            |k, buf| {
                let Some(v) = map.get(k) else {
                    return Ok(false);
                };
                let stamp = self.ttl.then(|| {
                    (w.stamps.as_ref())
                        .and_then(|s| s.get(k).copied())
                        .unwrap_or(0)
                });
                lsm_value_into(v, stamp, buf)?;
                Ok(true)
            },
            |key, value| {
                if track {
                    recorded.push(Box::<[u8]>::from(key));
                }
                if let Some(entries) = entries.as_mut() {
                    entries.push(&key[skip..], value);
                }
            },
        )?;
        // Let go of the cache's shards before the slow part is over for the caller.
        drop(map);
        drop(w.stamps);
        if let Some(keys) = w.keys {
            keys.fill(recorded, entries);
        }
        Ok(Some((batch, bytes)))
    }
}

/// A write batch of `keys` in the order of their LSM keys (`prefix`: the state's prefix and
/// the max parallelism), each put with the value `value_of` encodes into the buffer it is
/// handed (returning `true`), or deleted (`false`); and the batch's bytes. `each` sees every
/// LSM key with the value put (`None`: deleted), in that order. Sorted because the memtable is a skip list: keys inserted in order find their
/// place next to the previous one, in cache, where the dirty set's hash order sent every
/// insert through cold nodes — the skip-list search was a third of a disk backend run's CPU
/// (perf of W1 with 1 M keys, BENCHMARKS.md). The keys are encoded into one buffer and
/// sorted by offset, so sorting costs a few bytes per key, not an allocation; each sort
/// entry carries its key's first eight bytes as a number ([`order_prefix`]), so most
/// comparisons are of two integers rather than a `memcmp` into the buffer (4 % less CPU
/// at W1's disk shape, BENCHMARKS.md); each value is encoded into one reused buffer as it
/// goes into the batch (which copies it).
pub(super) fn sorted_batch<'k, K: Key + 'k>(
    store: &DiskStore,
    ks: &fjall::Keyspace,
    (prefix, max_parallelism): (&[u8], u32),
    keys: impl ExactSizeIterator<Item = &'k K>,
    mut value_of: impl FnMut(&K, &mut Vec<u8>) -> Result<bool>,
    mut each: impl FnMut(&[u8], Option<&[u8]>),
) -> Result<(fjall::OwnedWriteBatch, usize)> {
    let (mut arena, mut key) = (Vec::new(), Vec::new());
    let mut order = Vec::with_capacity(keys.len());
    for k in keys {
        lsm_key(prefix, k, max_parallelism, &mut key)?;
        order.push((order_prefix(&key), arena.len(), key.len(), k));
        arena.extend_from_slice(&key);
    }
    order.sort_unstable_by(|a, b| {
        (a.0.cmp(&b.0)).then_with(|| arena[a.1..a.1 + a.2].cmp(&arena[b.1..b.1 + b.2]))
    });
    let mut batch = store.db.batch().durability(None);
    let (mut bytes, mut value) = (0, Vec::new());
    for (_, start, len, k) in order {
        let key = &arena[start..start + len];
        bytes += len;
        if value_of(k, &mut value)? {
            bytes += value.len();
            batch.insert(ks, key, value.as_slice());
            each(key, Some(value.as_slice()));
        } else {
            batch.remove(ks, key);
            each(key, None);
        }
    }
    Ok((batch, bytes))
}

/// The first eight bytes of an LSM key as a big-endian number, zero-padded: ordering by it,
/// then by the whole key where it ties, is the keys' byte order (a shorter key padded with
/// zeros never sorts after a longer one it is a prefix of, and the tie-break settles it),
/// and most comparisons of a sort are then one of two integers in the sorted vector itself,
/// not a `memcmp` of two keys read from the arena.
fn order_prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

impl<K: Key, S: StateValue> Pinned for WriteBack<K, S> {
    fn pinned(&self) -> Result<&fjall::Snapshot> {
        self.run()
    }

    fn encoded(&self, own: &Arc<DeferredKeys>) -> Result<fjall::Snapshot> {
        self.encoded_snapshot(own)
    }
}

#[cfg(test)]
mod tests {
    use super::order_prefix;

    /// Sorting by the prefix, then by the whole key, is the keys' byte order — for keys
    /// shorter and longer than the prefix, keys that are prefixes of others, and zero bytes
    /// (which the padding could be mistaken for).
    #[test]
    fn the_prefix_order_is_the_byte_order() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut keys: Vec<Vec<u8>> = (0..5000)
            .map(|_| {
                let len = (next() % 13) as usize;
                // Few distinct bytes, zeros among them: many shared prefixes and ties.
                (0..len)
                    .map(|_| [0u8, 1, 0xff][(next() % 3) as usize])
                    .collect()
            })
            .collect();
        keys.push(Vec::new());
        keys.push(vec![0; 8]);
        keys.push(vec![0; 9]);
        let mut by_prefix = keys.clone();
        by_prefix.sort_unstable_by(|a, b| {
            (order_prefix(a).cmp(&order_prefix(b))).then_with(|| a.cmp(b))
        });
        keys.sort_unstable();
        assert_eq!(by_prefix, keys);
    }
}
