//! Reading the whole state of a tier (emptiness, length, keys, iteration — each after a
//! write-back), the TTL sweep, and clearing a tier.

use super::super::super::cow_map::CowMap;
use super::super::ttl::{Ttl, SWEEP_EVERY};
use super::codec::{decode_entry, decode_key};
use super::{lsm_error, DiskTier, Key, StateValue};
use crate::error::Result;

/// Entries one step of the disk TTL sweep looks at ([`DiskTier::maybe_sweep`]): with one
/// step every [`SWEEP_EVERY`] accesses, a quarter of an entry per access.
const SWEEP_ENTRIES: usize = 256;

impl<K: Key, S: StateValue> DiskTier<K, S> {
    /// Whether the state has no entry (after a write-back: exact).
    pub(crate) fn is_empty(&mut self, map: &CowMap<K, S>, ttl: Option<&Ttl<K>>) -> Result<bool> {
        self.fetch_all_remote()?;
        self.write_back(map, ttl)?;
        match self.ks.prefix(&self.prefix).next() {
            None => Ok(true),
            Some(guard) => guard.key().map(|_| false).map_err(|e| self.err(e)),
        }
    }

    /// Number of entries (after a write-back; a full scan: tests and tools only).
    pub(crate) fn len(&mut self, map: &CowMap<K, S>, ttl: Option<&Ttl<K>>) -> Result<usize> {
        self.fetch_all_remote()?;
        self.write_back(map, ttl)?;
        let mut n = 0;
        for guard in self.ks.prefix(&self.prefix) {
            guard.key().map_err(|e| self.err(e))?;
            n += 1;
        }
        Ok(n)
    }

    /// Every key with state (after a write-back).
    pub(crate) fn keys(&mut self, map: &CowMap<K, S>, ttl: Option<&Ttl<K>>) -> Result<Vec<K>> {
        self.fetch_all_remote()?;
        self.write_back(map, ttl)?;
        let mut keys = Vec::new();
        for guard in self.ks.prefix(&self.prefix) {
            let k = guard.key().map_err(|e| self.err(e))?;
            keys.push(decode_key::<K>(&k, self.prefix.len())?);
        }
        Ok(keys)
    }

    /// Calls `f` with every entry and its TTL stamp (after a write-back), streaming from
    /// the LSM: memory holds one entry at a time, not the state.
    pub(crate) fn for_each(
        &mut self,
        map: &CowMap<K, S>,
        ttl: Option<&Ttl<K>>,
        mut f: impl FnMut(&K, &S, Option<u64>),
    ) -> Result<()> {
        self.fetch_all_remote()?;
        self.write_back(map, ttl)?;
        for guard in self.ks.prefix(&self.prefix) {
            let (k, v) = guard.into_inner().map_err(|e| self.err(e))?;
            let (key, value, stamp) =
                decode_entry::<K, S>(&k, self.prefix.len(), &v, ttl.is_some())?;
            f(&key, &value, stamp);
        }
        Ok(())
    }

    /// With TTL, once every [`SWEEP_EVERY`] accesses: one step of the sweep that removes
    /// expired entries nobody reads again — the next [`SWEEP_ENTRIES`] entries of the LSM,
    /// resuming where the last step stopped and wrapping around (Flink's incremental
    /// cleanup). Entries the cache holds are the in-memory TTL's to expire. Deletes are
    /// ordinary writes, so a snapshot pinned earlier still sees what it saw.
    pub(crate) fn maybe_sweep(&mut self, map: &CowMap<K, S>, ttl: &Ttl<K>, now: u64) -> Result<()> {
        self.accesses += 1;
        if self.accesses < SWEEP_EVERY {
            return Ok(());
        }
        self.accesses = 0;
        let mut next = Vec::new();
        let mut range = self.prefix.clone();
        if self.sweep_from > range {
            range.clone_from(&self.sweep_from);
        }
        for (seen, guard) in self.ks.range(range..).enumerate() {
            let (k, v) = guard.into_inner().map_err(|e| self.err(e))?;
            if !k.starts_with(&self.prefix) {
                break;
            }
            if seen == SWEEP_ENTRIES {
                next = k.to_vec();
                break;
            }
            let (key, _, stamp) = decode_entry::<K, S>(&k, self.prefix.len(), &v, true)?;
            let expired = stamp.is_some_and(|s| ttl.expired(s, now));
            // Marked dirty while absent from the cache: the next write-back deletes it
            // (the sweep itself never writes to the LSM, so it needs no pending write-back
            // to have run, and a barrier's snapshot never sees a delete made after it).
            if expired && map.get(&key).is_none() && !self.dirty.contains(&key) {
                self.dirty.insert(key);
            }
        }
        self.sweep_from = next;
        Ok(())
    }

    /// Removes every entry of the tier from the LSM (a window's pane dropped whole); the
    /// caller drops the cache.
    pub(crate) fn clear(&mut self) -> Result<()> {
        self.drop_remote();
        self.settle()?;
        self.dirty.clear();
        let mut batch = self.store.db.batch().durability(None);
        for guard in self.ks.prefix(&self.prefix) {
            let k = guard.key().map_err(|e| self.err(e))?;
            if let Some(changes) = &mut self.changes {
                changes.record(&k, self.change_limit);
            }
            batch.remove(&self.ks, k);
        }
        batch.commit().map_err(|e| self.err(e))
    }

    /// Every entry live at `now` (after a write-back), decoded one at a time as the
    /// iterator is advanced: memory holds one entry, not the state.
    ///
    /// # Panics
    /// If the LSM fails to read or holds an entry that does not decode (it wrote them
    /// itself): the task fails and restarts from its last checkpoint.
    pub(crate) fn stream(
        &mut self,
        map: &CowMap<K, S>,
        ttl: Option<&Ttl<K>>,
        now: u64,
    ) -> Result<impl Iterator<Item = (K, S)> + use<K, S>> {
        self.fetch_all_remote()?;
        self.write_back(map, ttl)?;
        let ttl_ms = ttl.map(|t| t.cfg.ttl_ms());
        let dir = self.store.dir.clone();
        let skip = self.prefix.len();
        Ok(self.ks.prefix(&self.prefix).filter_map(move |guard| {
            let entry = guard
                .into_inner()
                .map_err(|e| lsm_error(&dir, e))
                .and_then(|(k, v)| decode_entry::<K, S>(&k, skip, &v, ttl_ms.is_some()));
            match entry {
                Ok((key, value, stamp)) => {
                    let live = match (ttl_ms, stamp) {
                        (Some(ttl), Some(stamp)) => now < stamp.saturating_add(ttl),
                        _ => true,
                    };
                    live.then_some((key, value))
                }
                Err(e) => panic!("keyed state on disk: {e}"),
            }
        }))
    }
}
