//! The LSM of one operator subtask ([`DiskStore`]) and how it is set up ([`DiskOptions`]):
//! opening it, committing write batches with its memory kept bounded, and handing out one
//! tier per state.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::super::incremental::{self, ChangeSet};
use super::{DiskTier, Key, StateValue};
use crate::error::{Error, Result};

/// How the disk backend of one operator subtask is set up.
#[derive(Debug, Clone)]
pub struct DiskOptions {
    /// The folder under which the subtask's LSM gets a folder of its own (created, and
    /// removed when the backend is dropped; nothing else in `dir` is touched).
    pub dir: PathBuf,
    /// Most keys each state keeps decoded in memory (its write-back cache).
    pub cache_entries: usize,
    /// Bytes of the LSM's block cache (shared by the subtask's states).
    pub block_cache_bytes: u64,
    /// Bytes of each state's LSM write buffer (memtable) before it is flushed.
    pub write_buffer_bytes: u64,
    /// Incremental checkpoints (`--incremental-checkpoints`): each state records the keys
    /// it changes, so a checkpoint writes only those (docs/design-notes.md).
    pub incremental: bool,
    /// The most bytes the LSM keeps on local disk (`--state-cache-size`; `None`:
    /// unbounded): past it, after a confirmed checkpoint, key groups its chain holds
    /// unchanged are dropped and fetched again on access (`state/keyed/bound.rs`).
    pub local_disk_bytes: Option<u64>,
}

impl DiskOptions {
    /// Defaults for a folder: 1 M cached keys per state, a 64 MiB block cache, 64 MiB
    /// write buffers (`JobConfig::disk_state`'s defaults).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DiskOptions {
            dir: dir.into(),
            cache_entries: 1 << 20,
            block_cache_bytes: 64 << 20,
            write_buffer_bytes: 64 << 20,
            incremental: false,
            local_disk_bytes: None,
        }
    }

    /// The options of each keyspace (one per state): its write buffer, and table files of
    /// at most that size (fjall's default is 64 MiB, the default write buffer): a table is
    /// dirty page cache until it is synced whole, so under a memory limit its size counts.
    ///
    /// Data blocks carry a hash index ([`DATA_BLOCK_HASH_RATIO`]): a cache miss is a point
    /// read, and without one each read binary-searched its block's restart points.
    pub(super) fn keyspace(&self) -> fjall::KeyspaceCreateOptions {
        let leveled =
            fjall::compaction::Leveled::default().with_table_target_size(self.write_buffer_bytes);
        fjall::KeyspaceCreateOptions::default()
            .max_memtable_size(self.write_buffer_bytes)
            .compaction_strategy(Arc::new(leveled))
            .data_block_hash_ratio_policy(fjall::config::HashRatioPolicy::all(
                DATA_BLOCK_HASH_RATIO,
            ))
            .filter_block_pinning_policy(fjall::config::PinningPolicy::all(true))
    }
}

// Filter blocks are pinned in memory at every level (fjall pins them at the first level
// only). An unpinned table filter is one block of ~1.25 bytes per key — about 8 MB for a
// table of 6 M keys — and fjall's block cache refuses an item larger than a shard's share
// of it, so every point read past the first level read the whole block again from the
// file: the disk backend fell from ~80 k to ~1.4 k events/s once W1 at 10 M keys and p=1
// began its second pass over the keys (h-big, BENCHMARKS.md 2026-12-07; strace showed the
// same 8 MB pread ~950 times a second). Pinned, the filters cost ~1.25 bytes of memory per
// key (125 MB at 100 M keys); partitioning them instead (fjall's other way out) cost 6 to
// 30 % more CPU where the filters fit in the cache, pinning 2 to 4 %.

/// Hash-index buckets per entry of each LSM data block. A point read (every cache miss of
/// the disk backend, and each key of an incremental checkpoint's delta) then goes straight
/// to its key's restart interval; without the index it binary-searched the block's restart
/// points, decoding a key at each step — `parse_restart_key` was 6 % of W1's CPU on the disk
/// backend, the largest part of reading a table (perf, BENCHMARKS.md). fjall builds it for
/// its own metadata at 8 buckets per entry; 1.5 keeps conflicts (which fall back to the
/// binary search) rare at about 1.5 bytes per entry (a few % of a block of small entries).
const DATA_BLOCK_HASH_RATIO: f32 = 1.5;

/// Bytes written to the LSM (its journal) between two syncs of the journal
/// ([`DiskStore::commit`]).
const JOURNAL_SYNC_BYTES: u64 = 8 << 20;

/// The LSM of one operator subtask, shared by its states' tiers.
pub(crate) struct DiskStore {
    pub(super) db: fjall::Database,
    pub(super) dir: PathBuf,
    pub(super) options: DiskOptions,
    /// Keys each state's change set — and the union of the sets a delta reads — may hold
    /// before it overflows and the next checkpoint is a base: twice the cache
    /// (`cache_entries`), so that a full cache's eviction, which records every key it
    /// writes back (as many as the cache holds), and the barriers around it fit; with the
    /// cache's own size a job touching more keys than its cache wrote a whole base each
    /// time the cache filled ([`incremental::change_limit`] has the figures). Computed once
    /// here; each tier keeps a copy ([`DiskTier::change_limit`]), the backend reads it for
    /// its tracker.
    pub(crate) change_limit: usize,
    /// Bytes committed since the journal was last synced.
    unsynced: std::sync::atomic::AtomicU64,
    /// Snapshot views alive (a checkpoint's writer reading a pinned LSM snapshot), and the
    /// bytes committed since the first of them was made ([`DiskStore::hold_for_views`]).
    views: std::sync::Mutex<(usize, u64)>,
    /// Signalled when the last view is dropped.
    views_gone: std::sync::Condvar,
    /// The snapshots taken since the newest confirmed checkpoint, whose chains a key group
    /// in storage is read from when the file it points at is gone (`state/keyed/bound.rs`).
    unconfirmed: crate::state::keyed::remote::Unconfirmed,
}

/// A snapshot view's share of [`DiskStore::views`]: counted while it lives.
pub(super) struct ViewPin(Arc<DiskStore>);

impl ViewPin {
    pub(super) fn new(store: &Arc<DiskStore>) -> ViewPin {
        store.views.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
        ViewPin(store.clone())
    }
}

impl Drop for ViewPin {
    fn drop(&mut self) {
        let mut views = self.0.views.lock().unwrap_or_else(|p| p.into_inner());
        views.0 -= 1;
        if views.0 == 0 {
            views.1 = 0;
            self.0.views_gone.notify_all();
        }
    }
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore").field("dir", &self.dir).finish()
    }
}

/// An LSM error as the engine reports it: an I/O error naming the folder.
pub(super) fn lsm_error(dir: &Path, e: impl std::fmt::Display) -> Error {
    Error::io(
        "keyed state on disk",
        dir,
        std::io::Error::other(e.to_string()),
    )
}

impl DiskStore {
    /// The snapshots taken since the newest confirmed checkpoint (kept by the backend).
    pub(crate) fn unconfirmed(&self) -> &crate::state::keyed::remote::Unconfirmed {
        &self.unconfirmed
    }

    /// Opens a fresh LSM in a new folder under `options.dir` (a restore starts from a
    /// checkpoint, never from a working folder, so nothing is reused).
    pub(crate) fn open(options: DiskOptions) -> Result<Arc<Self>> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        std::fs::create_dir_all(&options.dir)
            .map_err(|e| Error::io("cannot create the keyed-state folder", &options.dir, e))?;
        let dir = loop {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = options
                .dir
                .join(format!("weir-keyed-{}-{n}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => break dir,
                // Left by an earlier process with the same id: take the next name.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io("cannot create the keyed-state folder", &dir, e)),
            }
        };
        let db = fjall::Database::builder(&dir)
            .cache_size(options.block_cache_bytes)
            // Durability comes from checkpoints: the LSM's own journal is never synced.
            .manual_journal_persist(true)
            // The folder is removed when the database is dropped.
            .temporary(true)
            // One background thread per subtask's LSM: with two, fjall's first worker
            // re-queues compaction requests to itself in a loop while the second works
            // (to keep itself free for flushes), spinning a core — 18 % of a debug run's
            // CPU in `worker_tick` and `flume::send` (perf; docs/design-notes.md, "Memory
            // of the disk backend").
            .worker_threads(1)
            .open()
            .map_err(|e| lsm_error(&dir, e))?;
        Ok(Arc::new(DiskStore {
            db,
            dir,
            change_limit: incremental::change_limit(options.cache_entries),
            options,
            unsynced: Default::default(),
            views: Default::default(),
            views_gone: Default::default(),
            unconfirmed: Default::default(),
        }))
    }

    /// Commits `batch` (writes to `ks`, about `bytes` of keys and values) and keeps the
    /// LSM's memory and dirty page cache bounded, which fjall alone does not
    /// (docs/design-notes.md, "Memory of the disk backend"):
    ///
    /// * *Write buffers.* fjall rotates a full memtable on a background worker; while its
    ///   workers flush and compact, rotations wait in their queue and the active memtable
    ///   grows past `max_memtable_size` without limit — measured, 800 MB of 64 KiB values
    ///   written in batches held 500 MB of memtables. When the memtables of the subtask
    ///   pass one write buffer per state and one more, this rotates `ks`'s memtable and waits
    ///   until it is flushed: backpressure on the processing thread, as fjall's own write
    ///   stall gives when it sees sealed memtables pile up.
    /// * *Journal.* Every [`JOURNAL_SYNC_BYTES`] it syncs the journal. Not for durability
    ///   (checkpoints give that; the journal is never read back): unsynced, the journal is
    ///   dirty page cache, which a memory cgroup charges to the process and cannot reclaim
    ///   until it is written out. Synced, its pages are clean and reclaimable.
    pub(super) fn commit(
        &self,
        ks: &fjall::Keyspace,
        batch: fjall::OwnedWriteBatch,
        bytes: usize,
    ) -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        let err = |e| lsm_error(&self.dir, e);
        batch.commit().map_err(err)?;
        let budget =
            (self.options.write_buffer_bytes).saturating_mul(self.db.keyspace_count() as u64 + 1);
        if self.db.write_buffer_size() > budget {
            ks.rotate_memtable_and_wait().map_err(err)?;
        }
        {
            let mut views = self.views.lock().unwrap_or_else(|p| p.into_inner());
            if views.0 > 0 {
                views.1 += bytes as u64;
            }
        }
        let unsynced = self.unsynced.fetch_add(bytes as u64, Relaxed) + bytes as u64;
        if unsynced >= JOURNAL_SYNC_BYTES {
            self.unsynced.store(0, Relaxed);
            self.db.persist(fjall::PersistMode::SyncData).map_err(err)?;
        }
        Ok(())
    }

    /// Waits (on the processing thread, after it wrote to the LSM) while snapshot views are
    /// alive and more than a write buffer per state (and one more) was written since the
    /// first was made. fjall frees a flushed memtable only once no MVCC snapshot older than
    /// it is open, and a checkpoint's view keeps its snapshot open until the writer has read
    /// the whole state: everything written meanwhile stayed in memory — measured, 58 MB of a
    /// 64 MB state at its peak (docs/design-notes.md, "Memory of the disk backend"). Waiting
    /// for the writer to finish bounds that, at the cost of processing while a checkpoint of
    /// a large state is written (Flink's RocksDB backend has no such cost: its snapshots do
    /// not hold memtables). The writer never waits for the processing thread.
    pub(super) fn hold_for_views(&self) {
        let budget =
            (self.options.write_buffer_bytes).saturating_mul(self.db.keyspace_count() as u64 + 1);
        let mut views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        while views.0 > 0 && views.1 > budget {
            views = self
                .views_gone
                .wait(views)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The tier of the state at `index` (one keyspace per state).
    pub(crate) fn tier<K: Key, S: StateValue>(
        self: &Arc<Self>,
        index: usize,
        max_parallelism: u32,
    ) -> Result<DiskTier<K, S>> {
        self.tier_in(index, None, max_parallelism)
    }

    /// The tier of namespace `ns` of the state at `index`: its entries are keyed
    /// `ns (8 bytes, big-endian) ‖ key_group ‖ postcard(key)` in the state's keyspace, so
    /// one namespace (a window's pane) is one key range — fired, and dropped, by one scan.
    pub(crate) fn tier_in<K: Key, S: StateValue>(
        self: &Arc<Self>,
        index: usize,
        ns: Option<u64>,
        max_parallelism: u32,
    ) -> Result<DiskTier<K, S>> {
        let ks = self
            .db
            .keyspace(&format!("s{index}"), || self.options.keyspace())
            .map_err(|e| lsm_error(&self.dir, e))?;
        Ok(DiskTier {
            store: self.clone(),
            ks,
            prefix: ns.map(|n| n.to_be_bytes().to_vec()).unwrap_or_default(),
            sweep_from: Vec::new(),
            accesses: 0,
            dirty: FxHashSet::default(),
            // Window panes (a namespace each) are always written whole.
            changes: (self.options.incremental && ns.is_none()).then(ChangeSet::default),
            pending: Vec::new(),
            barrier_entries: None,
            capacity: self.options.cache_entries.max(1),
            change_limit: self.change_limit,
            max_parallelism,
            key_buf: Vec::new(),
            remote: None,
            filter: Default::default(),
            _s: std::marker::PhantomData,
        })
    }
}
