//! The tier's cache protocol: the state's copy-on-write table in front of the LSM as a
//! bounded write-back cache — a miss loads the key from the LSM ([`DiskTier::fault_in`]), a
//! write marks it dirty, a full cache is written back, a barrier freezes the dirty keys
//! for an asynchronous write-back ([`DiskTier::freeze`]).

use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::super::super::cow_map::CowMap;
use super::super::incremental::{ChangeSet, DeferredKeys};
use super::super::ttl::Ttl;
use super::codec::lsm_key;
use super::filter::KeyFilter;
use super::writeback::{self, Target, WriteBack};
use super::{lazy, lsm_error, lsm_value_into, DiskStore, Key, StateValue};
use crate::error::{Error, Result};

/// The disk side of one state's table: its keyspace and the cache's dirty keys.
pub(crate) struct DiskTier<K, S> {
    pub(super) store: Arc<DiskStore>,
    pub(super) ks: fjall::Keyspace,
    /// What every LSM key of this tier starts with (its namespace; empty without one).
    pub(super) prefix: Vec<u8>,
    /// With TTL: where the next sweep step starts (empty: from the beginning).
    pub(super) sweep_from: Vec<u8>,
    /// With TTL: accesses since the last sweep step.
    pub(super) accesses: u32,
    /// Keys written through the cache since the last write-back (present in the cache: a
    /// put; absent: a delete).
    pub(super) dirty: FxHashSet<K>,
    /// With incremental checkpoints: the LSM keys put or deleted since the last
    /// checkpoint's snapshot took them ([`DiskTier::take_changes`]).
    pub(super) changes: Option<ChangeSet>,
    /// Write-backs handed off at barriers and not known to have run, oldest first (each
    /// runs the one before it): see [`writeback`].
    pub(super) pending: Vec<Arc<WriteBack<K, S>>>,
    /// With incremental checkpoints: the keys of the write-back the last checkpoint's
    /// barrier froze ([`DiskTier::take_changes`]), whose delta entries that checkpoint's
    /// delta takes ([`DiskTier::delta_snapshot`]); released when no delta will.
    pub(super) barrier_entries: Option<Arc<DeferredKeys>>,
    pub(super) capacity: usize,
    /// Keys [`changes`](Self::changes) may hold before it overflows (the next checkpoint is
    /// then a base): twice the cache, not the cache's size, because a full cache's eviction
    /// records every key it writes back — as many as the cache holds — and the barriers
    /// around it must fit too ([`DiskStore::change_limit`], computed once per LSM, copied
    /// here as it is read for every key recorded).
    pub(super) change_limit: usize,
    pub(super) max_parallelism: u32,
    pub(super) key_buf: Vec<u8>,
    /// Key groups a lazy restore left in storage (`None`: none, the usual case).
    pub(super) remote: Option<Box<lazy::Remote>>,
    /// Every LSM key this tier may have put into its keyspace: a miss on a key it denies is
    /// absent without a read of the LSM ([`filter`](super::filter)). Added to before the
    /// LSM can hold a key: on a write that misses the cache (every key written back was
    /// dirtied by one, or was in the cache, which holds only keys read from the LSM or
    /// written after a miss) and on every entry a restore or a remote fetch puts.
    pub(super) filter: KeyFilter,
    pub(super) _s: std::marker::PhantomData<fn() -> S>,
}

impl<K: Key, S: StateValue> DiskTier<K, S> {
    pub(super) fn err(&self, e: impl std::fmt::Display) -> Error {
        lsm_error(&self.store.dir, e)
    }

    /// Encodes `k`'s LSM key into `buf`: its key group, then its postcard bytes.
    pub(super) fn encode_key(&self, k: &K, buf: &mut Vec<u8>) -> Result<()> {
        lsm_key(&self.prefix, k, self.max_parallelism, buf)
    }

    /// Runs every pending write-back (or waits for the writer thread running it): before
    /// the processing thread writes to the LSM itself, so writes reach it in order. A failed
    /// write-back stays pending and fails every later call.
    pub(super) fn settle(&mut self) -> Result<()> {
        if let Some(last) = self.pending.last() {
            last.run()?;
        }
        self.pending.clear();
        Ok(())
    }

    /// Freezes the cache for a snapshot (the synchronous phase: O(shards), whatever is
    /// dirty): the dirty keys start again from none and go, with the cache's shards shared
    /// at this point, to a new write-back chained after the pending ones. Returns it and,
    /// with incremental checkpoints, the keys it will write.
    pub(super) fn freeze(
        &mut self,
        map: &mut CowMap<K, S>,
        ttl: Option<&mut Ttl<K>>,
    ) -> (Arc<WriteBack<K, S>>, Option<Arc<DeferredKeys>>) {
        // Those that ran are done with: their writes are in the LSM.
        let ran = self.pending.iter().take_while(|w| w.succeeded()).count();
        self.pending.drain(..ran);
        let dirty = std::mem::take(&mut self.dirty);
        let has_ttl = ttl.is_some();
        let (frozen, stamps, keys) = if dirty.is_empty() {
            (None, None, None)
        } else {
            (
                Some(map.snapshot()),
                ttl.map(|t| t.stamps.snapshot()),
                self.changes
                    .is_some()
                    .then(|| DeferredKeys::new(dirty.len())),
            )
        };
        let target = Target {
            store: &self.store,
            ks: &self.ks,
            prefix: &self.prefix,
            max_parallelism: self.max_parallelism,
        };
        let prev = self.pending.last().cloned();
        let job = Arc::new(WriteBack::new(
            target,
            dirty,
            frozen,
            stamps,
            has_ttl,
            prev,
            keys.clone(),
        ));
        self.pending.push(job.clone());
        (job, keys)
    }

    /// Before an access to `key`: makes room if the cache is full, then loads `key`'s entry
    /// (and TTL stamp) from the LSM unless the cache has it; a `write` marks it dirty.
    ///
    /// Whether the cache has the key (its entry, or a delete through it) is asked once: on a
    /// miss the key is known not to be dirty, so it is marked without asking again — each
    /// question is a probe of a table of up to a cache's worth of keys, a likely cache miss
    /// of the CPU's own.
    pub(crate) fn fault_in(
        &mut self,
        map: &mut CowMap<K, S>,
        mut ttl: Option<&mut Ttl<K>>,
        key: &K,
        write: bool,
    ) -> Result<()> {
        let cached = map.get(key).is_some();
        if cached || self.dirty.contains(key) {
            if write && cached && !self.dirty.contains(key) {
                self.dirty.insert(key.clone());
            }
            return Ok(());
        }
        if map.len() >= self.capacity {
            self.write_back(map, ttl.as_deref())?;
            *map = CowMap::default();
            if let Some(t) = ttl.as_deref_mut() {
                t.stamps = CowMap::default();
            }
        }
        self.load_missing(map, ttl, key, write)?;
        if write {
            self.dirty.insert(key.clone());
        }
        Ok(())
    }

    /// Loads `key`'s entry (and TTL stamp) from the LSM into the cache; `key` is neither in
    /// the cache nor dirty (the caller asked), so it was not deleted through the cache since
    /// the last write-back — unless by a write-back still pending, checked here. A key the
    /// filter denies is absent without a read; a `write` adds it to the filter (the caller
    /// marks it dirty, so the LSM will hold it).
    fn load_missing(
        &mut self,
        map: &mut CowMap<K, S>,
        ttl: Option<&mut Ttl<K>>,
        key: &K,
        write: bool,
    ) -> Result<()> {
        // Those that ran are done with: their writes are in the LSM, which is right for
        // their keys (as at a freeze); asking their dirty sets was a probe per miss for
        // the whole interval after a barrier.
        let ran = self.pending.iter().take_while(|w| w.succeeded()).count();
        if ran > 0 {
            self.pending.drain(..ran);
        }
        // Dirty at a barrier whose write-back has not run: the cache holds its value (the
        // cache is only emptied once every write-back ran), so absent it was deleted (or
        // expired) and the LSM's entry is stale.
        if self.pending.iter().any(|w| w.dirty.contains(key)) {
            return Ok(());
        }
        if self.remote.is_some() {
            self.fetch_group_of(key)?;
        }
        let mut buf = std::mem::take(&mut self.key_buf);
        self.encode_key(key, &mut buf)?;
        let hash = KeyFilter::hash(&buf);
        if !self.filter.may_contain(hash) {
            // Never put into the LSM: absent. A write puts it there from now on.
            self.key_buf = buf;
            if write {
                self.filter.insert_new(hash);
            }
            return Ok(());
        }
        let found = self.ks.get(&buf).map_err(|e| self.err(e));
        self.key_buf = buf;
        let Some(bytes) = found? else {
            return Ok(());
        };
        let decode_err = |e: postcard::Error| Error::StateDecode {
            what: "keyed state read from disk".into(),
            cause: e.to_string(),
        };
        match ttl {
            None => {
                let v: S = postcard::from_bytes(&bytes).map_err(decode_err)?;
                map.insert(key.clone(), v);
            }
            Some(t) => {
                let (v, stamp): (S, u64) = postcard::from_bytes(&bytes).map_err(decode_err)?;
                t.stamps.insert(key.clone(), stamp);
                map.insert(key.clone(), v);
            }
        }
        Ok(())
    }

    /// Writes every dirty key back to the LSM in one batch (after every pending
    /// write-back): its cached value (with its TTL stamp), or a delete if the cache no
    /// longer has it. On the processing thread: for a full cache, and before reading the
    /// whole state (tools, end of input).
    pub(crate) fn write_back(&mut self, map: &CowMap<K, S>, ttl: Option<&Ttl<K>>) -> Result<()> {
        self.settle()?;
        if self.dirty.is_empty() {
            return Ok(());
        }
        let dirty: Vec<K> = self.dirty.drain().collect();
        let (limit, changes) = (self.change_limit, &mut self.changes);
        let (batch, bytes) = writeback::sorted_batch(
            &self.store,
            &self.ks,
            (&self.prefix, self.max_parallelism),
            dirty.iter(),
            // A value without a stamp is not live (as in memory): stamp 0.
            |k, buf| {
                let Some(v) = map.get(k) else {
                    return Ok(false);
                };
                let stamp = ttl.map(|t| t.stamps.get(k).copied().unwrap_or(0));
                lsm_value_into(v, stamp, buf)?;
                Ok(true)
            },
            |key, _| {
                if let Some(changes) = changes.as_mut() {
                    changes.record(key, limit);
                }
            },
        )?;
        self.store.commit(&self.ks, batch, bytes)?;
        self.store.hold_for_views();
        Ok(())
    }
}
