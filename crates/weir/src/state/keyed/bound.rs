//! A bounded local disk for keyed state whose durable copy is in object storage
//! (`--state-cache-size`, issue 25 item 4; docs/design-notes.md, "Durable copy in object
//! storage"): after each confirmed checkpoint, a subtask whose LSM is past its bound drops
//! key groups the confirmed chain holds unchanged, down to a low-water mark, and fetches
//! each again on its next access as after a lazy restore.
//!
//! **Invariant (retention).** A key group in storage points at files of the newest
//! confirmed checkpoint's chain: it is made remote (here, or by a lazy restore) pointing at
//! a confirmed chain, and re-pointed at each newly confirmed chain
//! ([`super::KeyedStateBackend::notify_complete`]) — valid because a remote group has not
//! been touched since before that checkpoint's barrier, so the newer chain holds it
//! unchanged (a new base streams it from the old chain: `disk/lazy.rs`). Retention deletes
//! a shared file only once no complete checkpoint lists it and no checkpoint triggered
//! before its release is in flight (`checkpoint::shared::Deferred`), so the files an
//! in-flight snapshot's view reads outlive them.
//!
//! **The retention race.** Between a checkpoint N+1 completing and this subtask hearing of
//! it, retention (`--retained-checkpoints 1`) may already have deleted chain N's files that
//! N+1 does not list — N+1 is then a new base — while the subtask's remote groups still
//! point at them. The subtask took N+1's snapshot itself, and every snapshot it took since
//! N (`remote::Unconfirmed`, kept in step with the tracker's pending snapshots) holds each
//! remote group as it is, by the same reasoning: a remote group was untouched since N's
//! barrier (a group is dropped only if no snapshot since N changed it; any access fetches
//! it first). So a fetch that finds a file missing reads the group whole from the newest
//! such snapshot's chain it can read (`DiskTier::load_sections`; all of a group's sections
//! are fetched before any is applied, so it never mixes two chains) — exact, no failover.
//! Retention keeps the completed N+1's files, so one always can. A missing file no
//! snapshot since covers (none taken, or each of their chains misses a file too) fails the
//! fetch naming the file, as before. (Keeping N's files until every subtask acknowledged,
//! as Flink's `SharedStateRegistry` keeps what a checkpoint still refers to, would need a
//! round trip from every subtask before retention: the subtask already has what it needs.)
use std::sync::atomic::{AtomicU64, Ordering};

use super::remote::ConfirmedChain;
use super::KeyedStateBackend;
use crate::error::Result;
use crate::state::Key;

/// Down to this share of the bound, once past it: each eviction compacts the LSM (fjall
/// has no range delete), so it should free a good part at once.
const LOW_WATER: f64 = 0.8;

/// Key groups dropped from local disk in this process, and the bytes of their sections.
static EVICTED_GROUPS: AtomicU64 = AtomicU64::new(0);
static EVICTED_BYTES: AtomicU64 = AtomicU64::new(0);
/// The largest LSM (its tables' bytes on local disk) a subtask with a bound had at a
/// checkpoint's barrier in this process.
static MAX_LOCAL_AT_BARRIER: AtomicU64 = AtomicU64::new(0);
/// The largest LSM a subtask left right after dropping key groups in this process.
static MAX_LOCAL_AFTER_DROP: AtomicU64 = AtomicU64::new(0);

/// What the run reports at its end about the bound (`None`: nothing was dropped).
pub fn cache_report() -> Option<String> {
    let groups = EVICTED_GROUPS.load(Ordering::Relaxed);
    (groups > 0).then(|| {
        format!(
            "state cache: dropped {groups} key-group sections ({} bytes) from local disk to \
             the checkpoint storage; the local state was at most {} bytes after a drop, {} \
             at a checkpoint",
            EVICTED_BYTES.load(Ordering::Relaxed),
            MAX_LOCAL_AFTER_DROP.load(Ordering::Relaxed),
            MAX_LOCAL_AT_BARRIER.load(Ordering::Relaxed)
        )
    })
}

/// Records one state's key group dropped from local disk, its sections `bytes` long.
#[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
pub(crate) fn note_evicted(bytes: u64) {
    EVICTED_GROUPS.fetch_add(1, Ordering::Relaxed);
    EVICTED_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// Records a subtask's local bytes at a checkpoint's barrier (for [`cache_report`]).
pub(crate) fn note_local_at_barrier(bytes: u64) {
    MAX_LOCAL_AT_BARRIER.fetch_max(bytes, Ordering::Relaxed);
}

impl<K: Key> KeyedStateBackend<K> {
    /// After a checkpoint was confirmed (its chain `chain`): if the LSM is past its bound,
    /// drops key groups the chain holds unchanged, state by state (timers excepted: their
    /// firing order is kept from their registrations), until about the low-water mark.
    pub(super) fn hold_local_bound(&mut self, chain: &ConfirmedChain) -> Result<()> {
        let (Some(store), Some((tracker, _))) = (&self.disk, &self.incremental) else {
            return Ok(());
        };
        let Some(bound) = store.local_bound() else {
            return Ok(());
        };
        let used = store.table_bytes();
        if used <= bound {
            return Ok(());
        }
        let mut to_free = used - (bound as f64 * LOW_WATER) as u64;
        let timers = [&self.timers, &self.event_timers].map(|t| t.as_ref().map(|(i, _)| *i));
        for (t, (name, table)) in self.names.iter().zip(&mut self.tables).enumerate() {
            if timers.contains(&Some(t)) || to_free == 0 {
                continue;
            }
            let Some(sets) = tracker.unconfirmed_sets(t) else {
                continue;
            };
            let freed = table.evict(name, chain, &sets, self.range, to_free)?;
            to_free = to_free.saturating_sub(freed);
        }
        MAX_LOCAL_AFTER_DROP.fetch_max(store.table_bytes(), Ordering::Relaxed);
        Ok(())
    }
}
