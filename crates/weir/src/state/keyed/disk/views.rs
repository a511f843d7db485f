//! The views a disk table's snapshot hands to the checkpoint writer: the full state
//! ([`DiskView`]) or an incremental checkpoint's delta ([`DeltaView`]), both read from the
//! LSM snapshot their barrier's write-back pins ([`Pinned`]) — on the writer thread, which
//! runs that write-back first if nobody has.

use std::path::PathBuf;
use std::sync::Arc;

use super::super::super::key_group::KeyGroupRange;
use super::super::super::StateValue;
use super::super::incremental::ChangeSet;
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
/// confirmed checkpoint, read from a pinned LSM snapshot key group by key group by the
/// writer thread; each entry is `postcard((k, Some(v)))`, or `postcard((k, None))` for a key
/// deleted (or expired) since.
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
    /// The sets' keys by key group (index from `range.start`), sorted and deduplicated:
    /// built by the writer at the first shard, off the processing thread.
    pub(super) groups: std::sync::OnceLock<Vec<Vec<Box<[u8]>>>>,
    pub(super) _s: std::marker::PhantomData<fn() -> S>,
}

impl<S> DeltaView<S> {
    /// The sets' keys by key group. Called after the barrier's write-back ran (which ran
    /// every earlier write-back of the state), so the keys each deferred are known.
    fn groups(&self) -> Result<&[Vec<Box<[u8]>>]> {
        if let Some(groups) = self.groups.get() {
            return Ok(groups);
        }
        let mut groups = vec![Vec::new(); self.range.len() as usize];
        for set in &self.sets {
            let deferred = set.deferred_keys().ok_or_else(|| {
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
                    groups[(g - self.range.start) as usize].push(Box::<[u8]>::from(key));
                }
            }
        }
        for keys in &mut groups {
            keys.sort_unstable();
            keys.dedup();
        }
        Ok(self.groups.get_or_init(|| groups))
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
        let snapshot = self.pinned.pinned()?;
        for key in &self.groups()?[shard] {
            let value = snapshot
                .get(&self.ks, key)
                .map_err(|e| lsm_error(&self.dir, e))?;
            let live = match (&value, &self.ttl) {
                (Some(v), Some((cfg, now))) => {
                    let (_, stamp): (S, u64) =
                        postcard::from_bytes(v).map_err(|e| Error::StateDecode {
                            what: "keyed state read from disk".into(),
                            cause: e.to_string(),
                        })?;
                    *now < stamp.saturating_add(cfg.ttl_ms())
                }
                (v, _) => v.is_some(),
            };
            // postcard((k, Option<v>)) is postcard(k) ‖ tag ‖ postcard(v).
            out.bytes.extend_from_slice(&key[2..]);
            match value.filter(|_| live) {
                Some(v) => {
                    out.bytes.push(1);
                    out.bytes.extend_from_slice(&v);
                }
                None => out.bytes.push(0),
            }
            out.entries += 1;
        }
        if !out.bytes.is_empty() {
            out.runs.push((g, out.bytes.len()));
        }
        Ok(out)
    }
}
