//! The disk tier of keyed state: one embedded LSM (`fjall`) per operator subtask, one
//! keyspace per state, in front of it the state's ordinary copy-on-write table used as a
//! bounded write-back cache (docs/design-notes.md, "Keyed state on disk").
//!
//! Guarantees:
//! * Every access sees the state as if it were all in memory: a key missing from the cache
//!   is read from the LSM before the access ([`DiskTier::fault_in`]); a key written through
//!   the cache is recorded as dirty and written back (put, or delete if the access removed
//!   it) before the cache is emptied, and for a snapshot after the barrier.
//! * LSM keys are `key_group (2 bytes, big-endian) ‖ postcard(key)` and values
//!   `postcard(value)` — with TTL `postcard((value, stamp))` — so a key-group range is a
//!   key range (rescale and snapshots scan ranges) and an entry's bytes *are* its canonical
//!   snapshot encoding: `postcard((k, v)) = postcard(k) ‖ postcard(v)`. A full snapshot
//!   copies bytes; it decodes nothing (but TTL stamps).
//! * The synchronous phase of a snapshot only freezes: the dirty keys and the cache's
//!   copy-on-write shards go to an asynchronous write-back ([`writeback`]), which the
//!   writer thread runs before it reads the LSM snapshot pinned right after that write-back
//!   — the state at the barrier, writes after it never reach it — and writes it in the
//!   canonical per-key-group format: a savepoint restores on either backend.
//! * A restore that fails to decode leaves the state empty, as the memory backend does.
//!
//! * Timers (their registrations, and their firing order in a keyspace of their own:
//!   [`DiskTimerOrder`]) and window panes (a namespace per pane: [`DiskStore::tier_in`]) live
//!   here too; expired TTL entries nobody reads again are swept ([`DiskTier::maybe_sweep`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::super::cow_map::CowMap;
use super::super::key_group::{key_group, KeyGroupRange};
use super::super::{Key, StateValue};
use super::incremental::{ChangeSet, DeferredKeys};
use super::table::TableSnapshot;
use super::ttl::{Ttl, SWEEP_EVERY};

mod lazy;
mod timer_order;
mod views;
mod writeback;

pub(crate) use timer_order::DiskTimerOrder;
use views::{DeltaView, DiskView};
use writeback::{Target, WriteBack};

/// Entries one step of the disk TTL sweep looks at ([`DiskTier::maybe_sweep`]): with one
/// step every [`SWEEP_EVERY`] accesses, a quarter of an entry per access.
const SWEEP_ENTRIES: usize = 256;
use crate::error::{Error, Result};
use crate::storage::shared_bytes::SharedBytes;

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
        }
    }

    /// The options of each keyspace (one per state): its write buffer, and table files of
    /// at most that size (fjall's default is 64 MiB, the default write buffer): a table is
    /// dirty page cache until it is synced whole, so under a memory limit its size counts.
    fn keyspace(&self) -> fjall::KeyspaceCreateOptions {
        let leveled =
            fjall::compaction::Leveled::default().with_table_target_size(self.write_buffer_bytes);
        fjall::KeyspaceCreateOptions::default()
            .max_memtable_size(self.write_buffer_bytes)
            .compaction_strategy(Arc::new(leveled))
    }
}

/// Bytes written to the LSM (its journal) between two syncs of the journal
/// ([`DiskStore::commit`]).
const JOURNAL_SYNC_BYTES: u64 = 8 << 20;

/// The LSM of one operator subtask, shared by its states' tiers.
pub(crate) struct DiskStore {
    db: fjall::Database,
    dir: PathBuf,
    options: DiskOptions,
    /// Bytes committed since the journal was last synced.
    unsynced: std::sync::atomic::AtomicU64,
    /// Snapshot views alive (a checkpoint's writer reading a pinned LSM snapshot), and the
    /// bytes committed since the first of them was made ([`DiskStore::hold_for_views`]).
    views: std::sync::Mutex<(usize, u64)>,
    /// Signalled when the last view is dropped.
    views_gone: std::sync::Condvar,
}

/// A snapshot view's share of [`DiskStore::views`]: counted while it lives.
pub(super) struct ViewPin(Arc<DiskStore>);

impl ViewPin {
    fn new(store: &Arc<DiskStore>) -> ViewPin {
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
fn lsm_error(dir: &Path, e: impl std::fmt::Display) -> Error {
    Error::io(
        "keyed state on disk",
        dir,
        std::io::Error::other(e.to_string()),
    )
}

/// Encodes `k`'s LSM key into `buf`: `prefix`, its key group, then its postcard bytes.
fn lsm_key<K: Key>(prefix: &[u8], k: &K, max_parallelism: u32, buf: &mut Vec<u8>) -> Result<()> {
    buf.clear();
    buf.extend_from_slice(prefix);
    let g = key_group(k, max_parallelism) as u16;
    buf.extend_from_slice(&g.to_be_bytes());
    let out = postcard::to_extend(k, std::mem::take(buf)).map_err(|e| Error::StateDecode {
        what: "a key of keyed state (encoding)".into(),
        cause: e.to_string(),
    })?;
    *buf = out;
    Ok(())
}

/// Encodes an LSM value: `postcard(v)`, or with TTL (`stamp` set) `postcard((v, stamp))`.
fn lsm_value<S: StateValue>(v: &S, stamp: Option<u64>) -> Result<Vec<u8>> {
    match stamp {
        None => postcard::to_allocvec(v),
        Some(stamp) => postcard::to_allocvec(&(v, stamp)),
    }
    .map_err(|e| Error::StateDecode {
        what: "keyed state written to disk (encoding)".into(),
        cause: e.to_string(),
    })
}

impl DiskStore {
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
            options,
            unsynced: Default::default(),
            views: Default::default(),
            views_gone: Default::default(),
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
    fn commit(
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
    fn hold_for_views(&self) {
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
            capacity: self.options.cache_entries.max(1),
            max_parallelism,
            key_buf: Vec::new(),
            remote: None,
            _s: std::marker::PhantomData,
        })
    }
}

/// The disk side of one state's table: its keyspace and the cache's dirty keys.
pub(crate) struct DiskTier<K, S> {
    store: Arc<DiskStore>,
    ks: fjall::Keyspace,
    /// What every LSM key of this tier starts with (its namespace; empty without one).
    prefix: Vec<u8>,
    /// With TTL: where the next sweep step starts (empty: from the beginning).
    sweep_from: Vec<u8>,
    /// With TTL: accesses since the last sweep step.
    accesses: u32,
    /// Keys written through the cache since the last write-back (present in the cache: a
    /// put; absent: a delete).
    dirty: FxHashSet<K>,
    /// With incremental checkpoints: the LSM keys put or deleted since the last
    /// checkpoint's snapshot took them ([`DiskTier::take_changes`]).
    changes: Option<ChangeSet>,
    /// Write-backs handed off at barriers and not known to have run, oldest first (each
    /// runs the one before it): see [`writeback`].
    pending: Vec<Arc<WriteBack<K, S>>>,
    capacity: usize,
    max_parallelism: u32,
    key_buf: Vec<u8>,
    /// Key groups a lazy restore left in storage (`None`: none, the usual case).
    remote: Option<Box<lazy::Remote>>,
    _s: std::marker::PhantomData<fn() -> S>,
}

impl<K: Key, S: StateValue> DiskTier<K, S> {
    fn err(&self, e: impl std::fmt::Display) -> Error {
        lsm_error(&self.store.dir, e)
    }

    /// Encodes `k`'s LSM key into `buf`: its key group, then its postcard bytes.
    fn encode_key(&self, k: &K, buf: &mut Vec<u8>) -> Result<()> {
        lsm_key(&self.prefix, k, self.max_parallelism, buf)
    }

    /// Runs every pending write-back (or waits for the writer thread running it): before
    /// the processing thread writes to the LSM itself, so writes reach it in order. A failed
    /// write-back stays pending and fails every later call.
    fn settle(&mut self) -> Result<()> {
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
    fn freeze(
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
    pub(crate) fn fault_in(
        &mut self,
        map: &mut CowMap<K, S>,
        mut ttl: Option<&mut Ttl<K>>,
        key: &K,
        write: bool,
    ) -> Result<()> {
        if map.len() >= self.capacity && map.get(key).is_none() && !self.dirty.contains(key) {
            self.write_back(map, ttl.as_deref())?;
            *map = CowMap::default();
            if let Some(t) = ttl.as_deref_mut() {
                t.stamps = CowMap::default();
            }
        }
        self.load(map, ttl, key)?;
        if write && !self.dirty.contains(key) {
            self.dirty.insert(key.clone());
        }
        Ok(())
    }

    /// Loads `key`'s entry (and TTL stamp) from the LSM into the cache unless the cache has
    /// it or it was deleted through the cache (whatever the cache's size).
    fn load(&mut self, map: &mut CowMap<K, S>, ttl: Option<&mut Ttl<K>>, key: &K) -> Result<()> {
        if map.get(key).is_some() || self.dirty.contains(key) {
            return Ok(());
        }
        // Dirty at a barrier whose write-back may not have run: the cache holds its value
        // (the cache is only emptied once every write-back ran), so absent it was deleted
        // (or expired) and the LSM's entry is stale.
        if self.pending.iter().any(|w| w.dirty.contains(key)) {
            return Ok(());
        }
        if self.remote.is_some() {
            self.fetch_group_of(key)?;
        }
        let mut buf = std::mem::take(&mut self.key_buf);
        self.encode_key(key, &mut buf)?;
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
        let (capacity, changes) = (self.capacity, &mut self.changes);
        let (batch, bytes) = writeback::sorted_batch(
            &self.store,
            &self.ks,
            (&self.prefix, self.max_parallelism),
            dirty.iter(),
            // A value without a stamp is not live (as in memory): stamp 0.
            |k| {
                (map.get(k))
                    .map(|v| lsm_value(v, ttl.map(|t| t.stamps.get(k).copied().unwrap_or(0))))
                    .transpose()
            },
            |key| {
                if let Some(changes) = changes.as_mut() {
                    changes.record(key, capacity);
                }
            },
        )?;
        self.store.commit(&self.ks, batch, bytes)?;
        self.store.hold_for_views();
        Ok(())
    }

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
                changes.record(&k, self.capacity);
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

    /// Synchronous phase of a snapshot: freezes the cache ([`DiskTier::freeze`]); the view
    /// runs the write-back and reads the LSM pinned right after it, off the processing
    /// thread. `None` if the state is empty.
    pub(crate) fn snapshot(
        &mut self,
        map: &mut CowMap<K, S>,
        ttl: Option<&mut Ttl<K>>,
        range: KeyGroupRange,
    ) -> Result<Option<Box<dyn TableSnapshot>>> {
        // A full snapshot reads the whole state: what is still in storage comes first.
        self.fetch_all_remote()?;
        // A cache with an entry is a state with one; an empty cache (rare: the state is
        // empty, or every cached key was deleted) is checked against the LSM, after writing
        // back what is dirty — deletes only.
        if map.is_empty() && self.is_empty(map, ttl.as_deref())? {
            return Ok(None);
        }
        let ttl_now = ttl.as_deref().map(|t| (t.cfg, crate::clock::wall_ms()));
        let (job, _) = self.freeze(map, ttl);
        Ok(Some(Box::new(DiskView::<S> {
            _pin: ViewPin::new(&self.store),
            pinned: job,
            ks: self.ks.clone(),
            prefix: self.prefix.clone(),
            dir: self.store.dir.clone(),
            range,
            ttl: ttl_now,
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
        let capacity = self.capacity;
        Ok(self.changes.as_mut().map(|changes| {
            let mut set = std::mem::take(changes);
            if let Some(keys) = keys {
                set.defer(keys, capacity);
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
        if sets.iter().all(|s| s.is_empty()) {
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
            groups: std::sync::OnceLock::new(),
            _s: std::marker::PhantomData,
        })))
    }

    /// Applies the changes of incremental deltas on top of a restored base: `sections` (one
    /// per key group and delta, in chain order) hold `postcard((k, Option<v>))` entries (with
    /// TTL `Option<(v, stamp)>`), each checked to decode; a `None` deletes the key.
    pub(crate) fn apply_changes(
        &mut self,
        what: &str,
        sections: &[SharedBytes],
        ttl: bool,
    ) -> Result<()> {
        let result = self.apply_changes_inner(what, sections, ttl);
        if result.is_err() {
            self.clear()?;
        }
        result
    }

    fn apply_changes_inner(
        &mut self,
        what: &str,
        sections: &[SharedBytes],
        ttl: bool,
    ) -> Result<()> {
        let err = |e: postcard::Error| Error::StateDecode {
            what: what.to_string(),
            cause: e.to_string(),
        };
        let mut key = Vec::new();
        // One batch per section: a key appears at most once in a section, while later
        // sections (later deltas) must override earlier ones.
        for section in sections {
            let mut batch = self.store.db.batch().durability(None);
            let mut rest: &[u8] = section;
            while !rest.is_empty() {
                let (k, after_key) = postcard::take_from_bytes::<K>(rest).map_err(err)?;
                let key_len = rest.len() - after_key.len();
                key.clear();
                key.extend_from_slice(&self.prefix);
                let g = key_group(&k, self.max_parallelism) as u16;
                key.extend_from_slice(&g.to_be_bytes());
                key.extend_from_slice(&rest[..key_len]);
                let (&tag, value) = after_key.split_first().ok_or_else(|| Error::StateDecode {
                    what: what.to_string(),
                    cause: "an entry of a delta ends after its key".into(),
                })?;
                rest = match tag {
                    0 => {
                        batch.remove(&self.ks, key.as_slice());
                        value
                    }
                    1 => {
                        let after_value = if ttl {
                            postcard::take_from_bytes::<(S, u64)>(value).map_err(err)?.1
                        } else {
                            postcard::take_from_bytes::<S>(value).map_err(err)?.1
                        };
                        let len = value.len() - after_value.len();
                        batch.insert(&self.ks, key.as_slice(), &value[..len]);
                        after_value
                    }
                    other => {
                        return Err(Error::StateDecode {
                            what: what.to_string(),
                            cause: format!("an entry of a delta has the tag {other}, not 0 or 1"),
                        })
                    }
                };
            }
            batch.commit().map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Loads encoded sections (one per key group, each entry `postcard((k, v))` or with
    /// TTL `postcard((k, (v, stamp)))`) into the LSM, checking that every entry decodes;
    /// on an error the state is left empty.
    pub(crate) fn restore(
        &mut self,
        what: &str,
        sections: &[SharedBytes],
        ttl: bool,
    ) -> Result<()> {
        self.settle()?;
        let result = self.restore_inner(what, sections, ttl);
        if result.is_err() {
            self.clear()?;
        }
        result
    }

    fn restore_inner(&mut self, what: &str, sections: &[SharedBytes], ttl: bool) -> Result<()> {
        /// Entries, and bytes, per write batch: bound the memory a restore holds (a batch
        /// copies its entries; 64 Ki entries of 64 KiB values would be 4 GiB).
        const BATCH: usize = 1 << 16;
        const BATCH_BYTES: usize = 4 << 20;
        let err = |e: postcard::Error| Error::StateDecode {
            what: what.to_string(),
            cause: e.to_string(),
        };
        let mut batch = self.store.db.batch().durability(None);
        let (mut key, mut bytes) = (Vec::new(), 0);
        for section in sections {
            let mut rest: &[u8] = section;
            while !rest.is_empty() {
                let (k, after_key) = postcard::take_from_bytes::<K>(rest).map_err(err)?;
                let after_value = if ttl {
                    postcard::take_from_bytes::<(S, u64)>(after_key)
                        .map_err(err)?
                        .1
                } else {
                    postcard::take_from_bytes::<S>(after_key).map_err(err)?.1
                };
                let key_len = rest.len() - after_key.len();
                let value_len = after_key.len() - after_value.len();
                key.clear();
                key.extend_from_slice(&self.prefix);
                let g = key_group(&k, self.max_parallelism) as u16;
                key.extend_from_slice(&g.to_be_bytes());
                key.extend_from_slice(&rest[..key_len]);
                batch.insert(&self.ks, key.as_slice(), &after_key[..value_len]);
                bytes += key.len() + value_len;
                if batch.len() >= BATCH || bytes >= BATCH_BYTES {
                    bytes = 0;
                    let full =
                        std::mem::replace(&mut batch, self.store.db.batch().durability(None));
                    self.store.commit(&self.ks, full, BATCH_BYTES)?;
                }
                rest = after_value;
            }
        }
        self.store.commit(&self.ks, batch, bytes)
    }
}

/// Decodes one LSM entry: its key, its value and (`ttl`) its TTL stamp.
fn decode_entry<K: Key, S: StateValue>(
    lsm_key: &[u8],
    prefix: usize,
    value: &[u8],
    ttl: bool,
) -> Result<(K, S, Option<u64>)> {
    let key = decode_key::<K>(lsm_key, prefix)?;
    let err = |e: postcard::Error| Error::StateDecode {
        what: "keyed state read from disk".into(),
        cause: e.to_string(),
    };
    Ok(if ttl {
        let (v, stamp) = postcard::from_bytes::<(S, u64)>(value).map_err(err)?;
        (key, v, Some(stamp))
    } else {
        (key, postcard::from_bytes(value).map_err(err)?, None)
    })
}

/// Decodes the user key of an LSM key (after its `prefix` bytes and two key-group bytes).
fn decode_key<K: Key>(lsm_key: &[u8], prefix: usize) -> Result<K> {
    let bytes = lsm_key.get(prefix + 2..).unwrap_or_default();
    postcard::from_bytes(bytes).map_err(|e| Error::StateDecode {
        what: "a key of keyed state read from disk".into(),
        cause: e.to_string(),
    })
}

#[cfg(test)]
mod tests;
