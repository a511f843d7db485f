//! The views a disk table's snapshot hands to the checkpoint writer: the full state
//! ([`DiskView`]) or an incremental checkpoint's delta ([`DeltaView`]), both read from the
//! LSM snapshot their barrier's write-back pins ([`Pinned`]) — on the writer thread, which
//! runs that write-back first if nobody has.

use std::path::PathBuf;
use std::sync::Arc;

use super::super::super::key_group::KeyGroupRange;
use super::super::super::StateValue;
use super::super::incremental::{ChangeSet, DeferredKeys, DeltaEntries};
use super::super::table::{EncodedShard, TableSnapshot};
use super::super::ttl::StateTtlConfig;
use super::lazy::RemoteAtBarrier;
use super::writeback::Pinned;
use super::{lsm_error, ViewPin};
use crate::error::{Error, Result};

/// A disk table's snapshot: a pinned LSM snapshot, read key group by key group (one
/// "shard" per key group of the range) by the writer thread.
pub(super) struct DiskView<S> {
    /// Counts the view as alive for the processing thread's memory bound.
    pub(super) _pin: ViewPin,
    /// The barrier's write-back, whose LSM snapshot this reads.
    pub(super) pinned: Arc<dyn Pinned>,
    pub(super) ks: fjall::Keyspace,
    /// The tier's namespace prefix (before the key group).
    pub(super) prefix: Vec<u8>,
    pub(super) dir: PathBuf,
    pub(super) range: KeyGroupRange,
    /// With TTL: the config and the time of the snapshot (expired entries are left out).
    pub(super) ttl: Option<(StateTtlConfig, u64)>,
    /// The key groups still in storage at the barrier, read from their chain rather than
    /// the LSM (which never loaded them, or loaded them after the barrier).
    pub(super) remote: Option<RemoteAtBarrier>,
    pub(super) _s: std::marker::PhantomData<fn() -> S>,
}

impl<S: StateValue> TableSnapshot for DiskView<S> {
    fn shards(&self) -> usize {
        self.range.len() as usize
    }

    fn take_shard(&self, shard: usize) -> Result<EncodedShard> {
        use fjall::Readable;
        let g = self.range.start + shard as u32;
        if let Some(merged) = self.remote.as_ref().and_then(|r| r.shard(g, self.ttl)) {
            return merged;
        }
        let mut prefix = self.prefix.clone();
        prefix.extend_from_slice(&(g as u16).to_be_bytes());
        let skip = prefix.len();
        let mut out = EncodedShard::default();
        for guard in self.pinned.pinned()?.prefix(&self.ks, &prefix) {
            let (k, v) = guard.into_inner().map_err(|e| lsm_error(&self.dir, e))?;
            if let Some((cfg, now)) = &self.ttl {
                let (_, stamp): (S, u64) =
                    postcard::from_bytes(&v).map_err(|e| Error::StateDecode {
                        what: "keyed state read from disk".into(),
                        cause: e.to_string(),
                    })?;
                if *now >= stamp.saturating_add(cfg.ttl_ms()) {
                    continue;
                }
            }
            // postcard((k, v)) is postcard(k) ‖ postcard(v): the stored bytes, unchanged.
            out.bytes.extend_from_slice(&k[skip..]);
            out.bytes.extend_from_slice(&v);
            out.entries += 1;
        }
        if !out.bytes.is_empty() {
            out.runs.push((g, out.bytes.len()));
        }
        Ok(out)
    }
}

/// An incremental checkpoint's delta of one disk table: the keys changed since the last
/// confirmed checkpoint, key group by key group, each entry `postcard((k, Some(v)))`, or
/// `postcard((k, None))` for a key deleted (or expired) since — the state at the barrier.
///
/// The keys the barrier's own write-back wrote come as that write-back encoded them
/// ([`DeltaEntries`]: their values at the barrier, no LSM read); the others — written back
/// earlier in the interval (a full cache), swept, or changed before an unconfirmed
/// checkpoint — are point lookups in the LSM snapshot pinned after the barrier's write-back.
/// A key in both is taken from the entries: nothing after the barrier reached either.
pub(super) struct DeltaView<S> {
    /// Counts the view as alive for the processing thread's memory bound.
    pub(super) _pin: ViewPin,
    /// The barrier's write-back, whose LSM snapshot this reads.
    pub(super) pinned: Arc<dyn Pinned>,
    pub(super) ks: fjall::Keyspace,
    pub(super) dir: PathBuf,
    pub(super) range: KeyGroupRange,
    /// With TTL: the config and the time of the snapshot (expired entries become deletes).
    pub(super) ttl: Option<(StateTtlConfig, u64)>,
    pub(super) sets: Vec<Arc<ChangeSet>>,
    /// The keys of this checkpoint's barrier write-back, and its delta entries (taken at
    /// the first shard).
    pub(super) captured: Option<Arc<DeferredKeys>>,
    /// Built by the writer at the first shard, off the processing thread.
    pub(super) groups: std::sync::OnceLock<Groups>,
    /// The LSM snapshot the lookups read, taken at the first shard ([`DeltaView::snapshot`]).
    pub(super) snapshot: std::sync::OnceLock<fjall::Snapshot>,
    pub(super) _s: std::marker::PhantomData<fn() -> S>,
}

/// What a delta reads, by key group.
pub(super) struct Groups {
    /// The keys to look up by key group (index from `range.start`), sorted and
    /// deduplicated.
    lookups: Vec<Vec<Box<[u8]>>>,
    /// The barrier write-back's entries (`None`: not kept; their keys are in `lookups`).
    entries: Option<DeltaEntries>,
}

impl<S: StateValue> DeltaView<S> {
    /// The keys to look up and the entries to copy. Called after the barrier's write-back
    /// ran (which ran every earlier write-back of the state), so the keys each deferred are
    /// known and the barrier's entries are kept if they were wanted.
    fn groups(&self) -> Result<&Groups> {
        if let Some(groups) = self.groups.get() {
            return Ok(groups);
        }
        let entries = self.captured.as_ref().and_then(|d| d.take_entries());
        // Their keys need no lookup; without them they are looked up like the others.
        let except = self.captured.as_ref().filter(|_| entries.is_some());
        let mut lookups = vec![Vec::new(); self.range.len() as usize];
        for set in &self.sets {
            let deferred = set.deferred_keys_except(except).ok_or_else(|| {
                lsm_error(
                    &self.dir,
                    "internal: a delta read before the write-back of its keys (a bug in \
                     Weir; please report it)",
                )
            })?;
            for key in set.keys().chain(deferred) {
                let Some(g) = key
                    .get(..2)
                    .map(|g| u16::from_be_bytes([g[0], g[1]]) as u32)
                else {
                    continue;
                };
                if self.range.contains(g) {
                    lookups[(g - self.range.start) as usize].push(Box::<[u8]>::from(key));
                }
            }
        }
        for keys in &mut lookups {
            keys.sort_unstable();
            keys.dedup();
        }
        Ok(self.groups.get_or_init(|| Groups { lookups, entries }))
    }

    /// The LSM snapshot the lookups read, with [`Groups`] built. Where the delta holds its
    /// barrier write-back's entries, that write-back need only be *encoded*: the lookups
    /// are of other keys, whose values it does not change, so the snapshot is taken before
    /// its commit ([`Pinned::encoded`]) and the commit — the memtable inserts, about half
    /// of the write-back — runs after the checkpoint is acknowledged (on drop). Otherwise
    /// the snapshot pinned after the commit, as a full view reads.
    fn snapshot(&self) -> Result<(&fjall::Snapshot, &Groups)> {
        if let Some(snapshot) = self.snapshot.get() {
            return Ok((snapshot, self.groups()?));
        }
        let snapshot = match &self.captured {
            Some(own) => {
                let before = self.pinned.encoded(own)?;
                if self.groups()?.entries.is_some() {
                    before
                } else {
                    self.pinned.pinned()?.clone()
                }
            }
            None => self.pinned.pinned()?.clone(),
        };
        let snapshot = self.snapshot.get_or_init(|| snapshot);
        Ok((snapshot, self.groups()?))
    }

    /// Whether an LSM value is live at the snapshot's time (always, without TTL).
    fn live(&self, value: &[u8]) -> Result<bool> {
        let Some((cfg, now)) = &self.ttl else {
            return Ok(true);
        };
        let (_, stamp): (S, u64) = postcard::from_bytes(value).map_err(|e| Error::StateDecode {
            what: "keyed state read from disk".into(),
            cause: e.to_string(),
        })?;
        Ok(*now < stamp.saturating_add(cfg.ttl_ms()))
    }

    /// Appends the entry of key tail `key` with LSM value `value` (`None`, or expired: a
    /// delete): `postcard((k, Option<v>))` is `postcard(k) ‖ tag ‖ postcard(v)`.
    fn put(&self, out: &mut EncodedShard, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        out.bytes.extend_from_slice(key);
        let live = match value {
            Some(v) => self.live(v)?,
            None => false,
        };
        match value.filter(|_| live) {
            Some(v) => {
                out.bytes.push(1);
                out.bytes.extend_from_slice(v);
            }
            None => out.bytes.push(0),
        }
        out.entries += 1;
        Ok(())
    }
}

impl<S: StateValue> TableSnapshot for DeltaView<S> {
    fn shards(&self) -> usize {
        self.range.len() as usize
    }

    fn take_shard(&self, shard: usize) -> Result<EncodedShard> {
        use fjall::Readable;
        let g = self.range.start + shard as u32;
        let mut out = EncodedShard::default();
        // First: it runs (or encodes) the barrier's write-back, which fills what `groups`
        // reads.
        let (snapshot, groups) = self.snapshot()?;
        let mut entries = groups
            .entries
            .as_ref()
            .map(|e| e.group(g))
            .into_iter()
            .flatten()
            .peekable();
        // Both in key order: merged, so the delta stays sorted and a key is written once.
        for key in &groups.lookups[shard] {
            let tail = &key[2..];
            let mut taken = false;
            while let Some((k, v)) = entries.next_if(|(k, _)| *k <= tail) {
                taken |= k == tail;
                self.put(&mut out, k, v)?;
            }
            if taken {
                continue;
            }
            let value = snapshot
                .get(&self.ks, key)
                .map_err(|e| lsm_error(&self.dir, e))?;
            self.put(&mut out, tail, value.as_deref())?;
        }
        for (k, v) in entries {
            self.put(&mut out, k, v)?;
        }
        if !out.bytes.is_empty() {
            out.runs.push((g, out.bytes.len()));
        }
        Ok(out)
    }
}

impl<S> Drop for DeltaView<S> {
    /// The barrier's write-back, maybe only encoded for the delta, is committed once the
    /// checkpoint is acknowledged, by the writer thread that wrote the delta
    /// ([`after_ack`](crate::state::after_ack::after_ack)); until then the tier keeps it
    /// pending, so whoever needs it first (the processing thread's next write to the LSM,
    /// the next barrier's write-back) runs it — and one dropped elsewhere (a failure, a
    /// shutdown) or while unwinding is left to them. A commit that panics inside the LSM
    /// poisons the write-back, which then fails every later access to the tier with an
    /// error, as a failed write-back always does; the writer thread goes on.
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let pinned = self.pinned.clone();
        crate::state::after_ack::after_ack(move || {
            let run = std::panic::AssertUnwindSafe(|| {
                let _ = pinned.pinned();
            });
            let _ = std::panic::catch_unwind(run);
        });
    }
}
