//! Holding a subtask's LSM under its bound on local disk (`--state-cache-size`, issue 25
//! item 4): after a confirmed checkpoint, the key groups of a state its chain holds
//! unchanged are dropped from the LSM and become remote again, fetched on their next
//! access as after a lazy restore ([`super::lazy`]). The backend decides how much to drop
//! (`state/keyed/bound.rs`); this is one state's part.
//!
//! A group is dropped only if nothing of it changed since the confirmed checkpoint's
//! barrier — no key of it in the change sets of the snapshots taken since, in the tier's own
//! change set, dirty, or in a pending write-back (every pending write-back runs first) —
//! so the confirmed chain's sections of it are exactly what the LSM held. Its entries in
//! the cache are then clean, and leave it with the group.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::super::super::cow_map::CowMap;
use super::super::super::key_group::{key_group, KeyGroupRange};
use super::super::incremental::ChangeSet;
use super::super::remote::{ConfirmedChain, RemoteState};
use super::super::ttl::Ttl;
use super::{DiskTier, Key, StateValue};
use crate::error::Result;

/// The key group of an LSM key of a tier without a namespace (its first two bytes).
fn group_of(lsm_key: &[u8]) -> Option<u32> {
    lsm_key
        .get(..2)
        .map(|g| u32::from(u16::from_be_bytes([g[0], g[1]])))
}

impl<K: Key, S: StateValue> DiskTier<K, S> {
    /// Drops from the LSM key groups of `range` that nothing changed since the confirmed
    /// checkpoint whose chain is `chain` (`state`: its name in the chain, and how to name
    /// and decode the groups when fetched back), until about `to_free` bytes (the chain's
    /// sections of them) are dropped; `sets` are the state's change sets of the snapshots
    /// taken since that checkpoint, `map` the cache (with its TTL stamps). Returns the
    /// bytes dropped. Drops nothing if a set overflowed (its keys are unknown until a new
    /// base is confirmed) or the tier records no changes (a window pane's namespace, or
    /// without incremental checkpoints).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn evict(
        &mut self,
        map: &mut CowMap<K, S>,
        ttl_stamps: Option<&mut Ttl<K>>,
        state: &Arc<RemoteState>,
        chain: &ConfirmedChain,
        sets: &[Arc<ChangeSet>],
        range: KeyGroupRange,
        to_free: u64,
    ) -> Result<u64> {
        if !self.prefix.is_empty() || self.changes.is_none() || to_free == 0 {
            return Ok(0);
        }
        // Every pending write-back runs first: its keys are then known, and the LSM holds
        // every write made before now.
        self.settle()?;
        let mut touched = BTreeSet::new();
        let own = self.changes.as_ref().map(std::slice::from_ref);
        for set in sets.iter().map(|s| &**s).chain(own.into_iter().flatten()) {
            let Some(deferred) = set.deferred_keys_except(None).filter(|_| !set.overflowed())
            else {
                return Ok(0);
            };
            touched.extend(set.keys().chain(deferred).filter_map(group_of));
        }
        touched.extend(
            self.dirty
                .iter()
                .map(|k| key_group(k, self.max_parallelism)),
        );
        let mut freed = 0;
        let mut dropped = BTreeSet::new();
        for g in range.start..range.end {
            if freed >= to_free {
                break;
            }
            let remote = self.remote.as_ref().is_some_and(|r| r.has(g));
            if touched.contains(&g) || remote {
                continue;
            }
            let sections = chain.sections(&state.name, g);
            let bytes: u64 = sections.iter().map(|s| s.span.len).sum();
            let prefix = (g as u16).to_be_bytes();
            let mut batch = self.store.db.batch().durability(None);
            let mut keys = 0usize;
            for guard in self.ks.prefix(prefix) {
                let k = guard.key().map_err(|e| self.err(e))?;
                batch.remove(&self.ks, k);
                keys += 1;
            }
            // Nothing local to drop; or keys the chain has no entry of (expired entries
            // the base left out): kept, which is always safe.
            if keys == 0 || sections.is_empty() {
                continue;
            }
            // Not a change: the chain holds the group, so no delta writes these deletes.
            batch.commit().map_err(|e| self.err(e))?;
            self.add_remote(state, g, sections);
            super::super::bound::note_evicted(bytes);
            dropped.insert(g);
            freed += bytes;
        }
        // The cache's entries of a dropped group are clean (no dirty key is in one): they
        // leave the cache too, so the group's next access fetches it whole. (Keeping groups
        // with a cached key instead would drop nothing: a cache of a million keys spans
        // every key group.)
        if !dropped.is_empty() {
            let cached: Vec<K> = (map.iter())
                .map(|(k, _)| k)
                .filter(|k| dropped.contains(&key_group(*k, self.max_parallelism)))
                .cloned()
                .collect();
            for k in &cached {
                map.remove(k);
            }
            if let Some(t) = ttl_stamps {
                for k in &cached {
                    t.stamps.remove(k);
                }
            }
        }
        if freed > 0 {
            // fjall has no range delete: the tombstones free the bytes once compaction
            // reaches the last level.
            self.ks
                .rotate_memtable_and_wait()
                .and_then(|()| self.ks.major_compact())
                .map_err(|e| self.err(e))?;
        }
        Ok(freed)
    }
}
