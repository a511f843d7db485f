//! The synchronous phase of a tier's snapshots: a full snapshot's view, the changed keys of
//! an incremental checkpoint, and a delta's view — each only freezes the cache.

use std::sync::Arc;

use super::super::super::cow_map::CowMap;
use super::super::super::key_group::KeyGroupRange;
use super::super::incremental::ChangeSet;
use super::super::table::TableSnapshot;
use super::super::ttl::Ttl;
use super::views::{DeltaView, DiskView};
use super::{DiskTier, Key, StateValue, ViewPin};
use crate::error::Result;

impl<K: Key, S: StateValue> DiskTier<K, S> {
    /// Synchronous phase of a snapshot: freezes the cache ([`DiskTier::freeze`]); the view
    /// runs the write-back and reads the LSM pinned right after it, off the processing
    /// thread — and the key groups a lazy restore left in storage from their chain,
    /// captured here ([`DiskTier::remote_at_barrier`]). `None` if the state is empty.
    pub(crate) fn snapshot(
        &mut self,
        map: &mut CowMap<K, S>,
        ttl: Option<&mut Ttl<K>>,
        range: KeyGroupRange,
    ) -> Result<Option<Box<dyn TableSnapshot>>> {
        // The key groups still in storage stay there: the view reads them from the chain
        // (lazy.rs), so a new base after a lazy restore fetches nothing into the LSM.
        let remote = self.remote_at_barrier();
        // A cache with an entry is a state with one, and so is one with key groups in
        // storage; an empty cache (rare: the state is empty, or every cached key was
        // deleted) is checked against the LSM, after writing back what is dirty — deletes
        // only.
        if remote.is_none() && map.is_empty() && self.is_empty(map, ttl.as_deref())? {
            return Ok(None);
        }
        let ttl_now = ttl.as_deref().map(|t| (t.cfg, crate::clock::wall_ms()));
        // A full snapshot is no delta: the last barrier's entries are not wanted any more.
        if let Some(entries) = self.barrier_entries.take() {
            entries.release_entries();
        }
        let (job, keys) = self.freeze(map, ttl);
        // The keys it writes back changed since the last checkpoint's snapshot took the
        // changes (this is a savepoint's, or a base's, for which nothing is dirty): the next
        // delta must hold them too.
        if let (Some(keys), Some(changes)) = (keys, self.changes.as_mut()) {
            keys.release_entries();
            changes.defer(keys, self.change_limit);
        }
        Ok(Some(Box::new(DiskView::<S> {
            _pin: ViewPin::new(&self.store),
            pinned: job,
            ks: self.ks.clone(),
            prefix: self.prefix.clone(),
            dir: self.store.dir.clone(),
            range,
            ttl: ttl_now,
            remote,
            _s: std::marker::PhantomData,
        })))
    }

    /// With incremental checkpoints, at a checkpoint's snapshot: the keys changed since the
    /// previous one, which start again from none — those written back since, and those of
    /// the write-back this freezes (counted now, listed when it runs). `None` without.
    pub(crate) fn take_changes(
        &mut self,
        map: &mut CowMap<K, S>,
        ttl: Option<&mut Ttl<K>>,
    ) -> Result<Option<ChangeSet>> {
        if self.changes.is_none() {
            return Ok(None);
        }
        let (_, keys) = self.freeze(map, ttl);
        // Only this barrier's entries may feed a delta (a delta of this checkpoint).
        if let Some(old) = std::mem::replace(&mut self.barrier_entries, keys.clone()) {
            old.release_entries();
        }
        let limit = self.change_limit;
        Ok(self.changes.as_mut().map(|changes| {
            let mut set = std::mem::take(changes);
            if let Some(keys) = keys {
                set.defer(keys, limit);
            }
            set
        }))
    }

    /// Synchronous phase of an incremental checkpoint's delta (after
    /// [`DiskTier::take_changes`] froze the cache): the view holds, per key group, every key
    /// of `sets` with its value at the barrier or a tombstone (`postcard((k, Option<v>))`),
    /// read off the processing thread once the write-backs ran. `None` if no key changed.
    pub(crate) fn delta_snapshot(
        &mut self,
        map: &mut CowMap<K, S>,
        ttl: Option<&mut Ttl<K>>,
        sets: Vec<Arc<ChangeSet>>,
        range: KeyGroupRange,
    ) -> Result<Option<Box<dyn TableSnapshot>>> {
        // This barrier's write-back encodes the entries of its keys for the delta.
        let captured = self.barrier_entries.take();
        if sets.iter().all(|s| s.is_empty()) {
            if let Some(entries) = captured {
                entries.release_entries();
            }
            return Ok(None);
        }
        let ttl_now = ttl.as_deref().map(|t| (t.cfg, crate::clock::wall_ms()));
        // Nothing is dirty since `take_changes`: an empty write-back after the pending ones,
        // whose pinned snapshot is the state at this barrier.
        let (job, _) = self.freeze(map, ttl);
        Ok(Some(Box::new(DeltaView::<S> {
            _pin: ViewPin::new(&self.store),
            pinned: job,
            ks: self.ks.clone(),
            dir: self.store.dir.clone(),
            range,
            ttl: ttl_now,
            sets,
            captured,
            groups: std::sync::OnceLock::new(),
            snapshot: std::sync::OnceLock::new(),
            _s: std::marker::PhantomData,
        })))
    }
}
