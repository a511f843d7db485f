//! State time-to-live: entries that were not written (or read) for a while expire.
//!
//! A TTL'd table keeps, beside its values, the time each key's entry was last refreshed.
//! Guarantees: an expired value is never returned (access checks the stamp first and
//! drops the entry); expired entries are left out of snapshots; and the table is swept
//! incrementally — one shard every [`SWEEP_EVERY`] accesses — so keys that are never
//! touched again do not keep memory forever. Time is processing time (wall clock, ms).

use std::time::Duration;

use super::super::cow_map::{CowMap, SHARDS};
use super::super::Key;

/// Accesses between two incremental sweep steps.
pub const SWEEP_EVERY: u32 = 1024;

/// When a TTL'd entry's clock restarts (Flink's `UpdateType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlUpdate {
    /// On creation and on every write.
    OnCreateAndWrite,
    /// On creation, every write and every read.
    OnReadAndWrite,
}

/// Time-to-live of a keyed state (Flink's `StateTtlConfig`), set with
/// `KeyedStateStore::with_ttl` before declaring the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateTtlConfig {
    /// How long an entry lives after its last refresh.
    pub ttl: Duration,
    /// What refreshes it.
    pub update: TtlUpdate,
}

impl StateTtlConfig {
    /// Entries expire `ttl` after they were created or last written.
    pub fn new(ttl: Duration) -> Self {
        StateTtlConfig {
            ttl,
            update: TtlUpdate::OnCreateAndWrite,
        }
    }

    /// Reads refresh entries too.
    pub fn update_on_read_and_write(mut self) -> Self {
        self.update = TtlUpdate::OnReadAndWrite;
        self
    }

    pub(crate) fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis().min(u64::MAX as u128) as u64
    }
}

/// The TTL bookkeeping of one table.
pub(crate) struct Ttl<K> {
    pub cfg: StateTtlConfig,
    /// Last refresh per key (ms since the Unix epoch).
    pub stamps: CowMap<K, u64>,
    accesses: u32,
    cursor: usize,
}

impl<K: Key> Ttl<K> {
    pub(crate) fn new(cfg: StateTtlConfig) -> Self {
        Ttl {
            cfg,
            stamps: CowMap::default(),
            accesses: 0,
            cursor: 0,
        }
    }

    /// Whether an entry stamped `stamp` is expired at `now`.
    #[inline]
    pub(crate) fn expired(&self, stamp: u64, now: u64) -> bool {
        now >= stamp.saturating_add(self.cfg.ttl_ms())
    }

    /// Before an access to `key` at `now`: now and then sweeps one shard, drops the entry
    /// if expired, and refreshes the stamp if the access counts as an update.
    pub(crate) fn on_access<S: Clone>(
        &mut self,
        map: &mut CowMap<K, S>,
        key: &K,
        write: bool,
        now: u64,
    ) {
        // Sweep first: a sweep between stamping `key` and the caller's write would find a
        // stamp without a value and drop it, leaving the written value unstamped (hidden,
        // and left out of snapshots).
        self.accesses += 1;
        if self.accesses >= SWEEP_EVERY {
            self.accesses = 0;
            self.sweep_step(map, now);
        }
        if let Some(&stamp) = self.stamps.get(key) {
            if self.expired(stamp, now) {
                map.remove(key);
                self.stamps.remove(key);
            }
        }
        if write || self.cfg.update == TtlUpdate::OnReadAndWrite {
            // Stamped ahead of the write; a stamp without a value is harmless (swept).
            if write || map.get(key).is_some() {
                self.stamps.insert(key.clone(), now);
            }
        }
    }

    /// Removes every expired entry (and dangling stamp) of the next shard.
    pub(crate) fn sweep_step<S: Clone>(&mut self, map: &mut CowMap<K, S>, now: u64) {
        let shard = self.cursor;
        self.cursor = (self.cursor + 1) % SHARDS;
        let dead: Vec<K> = self
            .stamps
            .shard_iter(shard)
            .filter(|(k, s)| self.expired(**s, now) || map.get(k).is_none())
            .map(|(k, _)| k.clone())
            .collect();
        for k in dead {
            map.remove(&k);
            self.stamps.remove(&k);
        }
    }

    /// Whether `key`'s entry is live at `now` (for whole-table iteration).
    pub(crate) fn live(&self, key: &K, now: u64) -> bool {
        self.stamps.get(key).is_some_and(|s| !self.expired(*s, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_reads_writes_and_sweeps() {
        let mut map = CowMap::<u64, u64>::default();
        let mut ttl = Ttl::new(StateTtlConfig::new(Duration::from_millis(100)));
        ttl.on_access(&mut map, &1, true, 1000);
        map.insert(1, 10);
        ttl.on_access(&mut map, &1, false, 1050);
        assert_eq!(map.get(&1), Some(&10), "alive before the ttl");
        ttl.on_access(&mut map, &1, false, 1100);
        assert_eq!(
            map.get(&1),
            None,
            "expired 100 ms after the write; reads do not refresh"
        );

        let mut ttl =
            Ttl::new(StateTtlConfig::new(Duration::from_millis(100)).update_on_read_and_write());
        ttl.on_access(&mut map, &2, true, 1000);
        map.insert(2, 20);
        ttl.on_access(&mut map, &2, false, 1090);
        ttl.on_access(&mut map, &2, false, 1180);
        assert_eq!(map.get(&2), Some(&20), "reads refresh");

        // Keys never touched again are swept.
        let mut ttl = Ttl::new(StateTtlConfig::new(Duration::from_millis(10)));
        for k in 0..5000u64 {
            ttl.on_access(&mut map, &k, true, 0);
            map.insert(k, k);
        }
        for _ in 0..SHARDS {
            ttl.sweep_step(&mut map, 100);
        }
        assert!(map.is_empty() && ttl.stamps.is_empty());
    }

    #[test]
    fn a_sweep_never_unstamps_the_key_being_written() {
        // Whichever shard the sweep of this access hits, the written value keeps its stamp.
        let mut map = CowMap::<u64, u64>::default();
        let mut ttl = Ttl::new(StateTtlConfig::new(Duration::from_secs(60)));
        let k = 7u64;
        for shard in 0..SHARDS {
            ttl.cursor = shard;
            ttl.accesses = SWEEP_EVERY - 1;
            ttl.on_access(&mut map, &k, true, 1000);
            map.insert(k, k);
            assert!(
                ttl.live(&k, 1000),
                "the sweep of shard {shard} unstamped the key"
            );
            map.remove(&k);
            ttl.stamps.remove(&k);
        }
    }
}
