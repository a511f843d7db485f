//! The disk tier of keyed state: one embedded LSM (`fjall`) per operator subtask, one
//! keyspace per state, in front of it the state's ordinary copy-on-write table used as a
//! bounded write-back cache (docs/design-notes.md, "Keyed state on disk").
//!
//! Guarantees:
//! * Every access sees the state as if it were all in memory: a key missing from the cache
//!   is read from the LSM before the access ([`DiskTier::fault_in`]); a key written through
//!   the cache is recorded as dirty and written back (put, or delete if the access removed
//!   it) before the cache is emptied and before any snapshot.
//! * LSM keys are `key_group (2 bytes, big-endian) ‖ postcard(key)` and values
//!   `postcard(value)` — with TTL `postcard((value, stamp))` — so a key-group range is a
//!   key range (rescale and snapshots scan ranges) and an entry's bytes *are* its canonical
//!   snapshot encoding: `postcard((k, v)) = postcard(k) ‖ postcard(v)`. A full snapshot
//!   copies bytes; it decodes nothing (but TTL stamps).
//! * A snapshot reads a point-in-time LSM snapshot taken at the barrier after the write-back,
//!   so writes after the barrier never reach it, and it is written off the processing
//!   thread in the canonical per-key-group format: a savepoint restores on either backend.
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
use super::incremental::ChangeSet;
use super::table::{EncodedShard, TableSnapshot};
use super::ttl::{StateTtlConfig, Ttl, SWEEP_EVERY};

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
    /// Incremental checkpoints (`--incremental-checkpoints`): each state records the keys
    /// it changes, so a checkpoint writes only those (docs/design-notes.md).
    pub incremental: bool,
}

impl DiskOptions {
    /// Defaults for a folder: 1 M cached keys per state, a 64 MB block cache.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DiskOptions {
            dir: dir.into(),
            cache_entries: 1 << 20,
            block_cache_bytes: 64 << 20,
            incremental: false,
        }
    }
}

/// The LSM of one operator subtask, shared by its states' tiers.
pub(crate) struct DiskStore {
    db: fjall::Database,
    dir: PathBuf,
    options: DiskOptions,
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
            .open()
            .map_err(|e| lsm_error(&dir, e))?;
        Ok(Arc::new(DiskStore { db, dir, options }))
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
            .keyspace(&format!("s{index}"), fjall::KeyspaceCreateOptions::default)
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
            capacity: self.options.cache_entries.max(1),
            max_parallelism,
            key_buf: Vec::new(),
            _s: std::marker::PhantomData,
        })
    }
}

impl DiskStore {
    /// The firing order of the timers of table `name` (a keyspace of its own, empty: it is
    /// rebuilt from the timers table, never snapshotted).
    pub(crate) fn timer_order<K: Key>(self: &Arc<Self>, name: &str) -> Result<DiskTimerOrder<K>> {
        let ks = self
            .db
            .keyspace(
                &format!("order{name}"),
                fjall::KeyspaceCreateOptions::default,
            )
            .map_err(|e| lsm_error(&self.dir, e))?;
        Ok(DiskTimerOrder {
            store: self.clone(),
            ks,
            from: Vec::new(),
            buf: Vec::new(),
            _k: std::marker::PhantomData,
        })
    }
}

/// The firing order of one timer domain on disk (Flink keeps its timers in RocksDB too):
/// keys `time (8 bytes, big-endian) ‖ postcard(key)` with no value, so the earliest timer
/// is the keyspace's first key and the order costs no memory per timer.
///
/// Fired timers leave tombstones at the front of the keyspace until a compaction drops
/// them, and an LSM seek from the start steps over every one (firing n timers would cost
/// n²): the search starts after the last timer removed instead, moved back by any timer
/// registered before it.
pub(crate) struct DiskTimerOrder<K> {
    store: Arc<DiskStore>,
    ks: fjall::Keyspace,
    /// No timer's key is below this (the successor of the last one fired, or lower).
    from: Vec<u8>,
    buf: Vec<u8>,
    _k: std::marker::PhantomData<fn() -> K>,
}

impl<K: Key> DiskTimerOrder<K> {
    fn encode(&mut self, time: u64, key: &K) -> Result<Vec<u8>> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.extend_from_slice(&time.to_be_bytes());
        postcard::to_extend(key, buf).map_err(|e| Error::StateDecode {
            what: "a timer's key (encoding)".into(),
            cause: e.to_string(),
        })
    }

    /// Adds the timer (time, key).
    pub(crate) fn insert(&mut self, time: u64, key: &K) -> Result<()> {
        let k = self.encode(time, key)?;
        if k < self.from {
            self.from.clone_from(&k);
        }
        let r = self.ks.insert(k.as_slice(), []);
        self.buf = k;
        r.map_err(|e| lsm_error(&self.store.dir, e))
    }

    /// Removes the timer (time, key).
    pub(crate) fn remove(&mut self, time: u64, key: &K) -> Result<()> {
        let k = self.encode(time, key)?;
        let r = self.ks.remove(k.as_slice());
        self.buf = k;
        r.map_err(|e| lsm_error(&self.store.dir, e))
    }

    /// Removes the earliest timer, which [`DiskTimerOrder::first`] returned as `(time,
    /// key)`: no timer is below it any more.
    pub(crate) fn remove_first(&mut self, time: u64, key: &K) -> Result<()> {
        let mut k = self.encode(time, key)?;
        let r = self.ks.remove(k.as_slice());
        k.push(0); // the least key above it
        self.from = k;
        r.map_err(|e| lsm_error(&self.store.dir, e))
    }

    /// The earliest timer, if any.
    pub(crate) fn first(&self) -> Result<Option<(u64, K)>> {
        let Some(guard) = self.ks.range(self.from.as_slice()..).next() else {
            return Ok(None);
        };
        let k = guard.key().map_err(|e| lsm_error(&self.store.dir, e))?;
        let bad = |cause: String| Error::StateDecode {
            what: "a timer read from disk".into(),
            cause,
        };
        let (time, key) = k
            .split_at_checked(8)
            .ok_or_else(|| bad("too short".into()))?;
        let time = u64::from_be_bytes(time.try_into().map_err(|_| bad("too short".into()))?);
        let key = postcard::from_bytes(key).map_err(|e| bad(e.to_string()))?;
        Ok(Some((time, key)))
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
    capacity: usize,
    max_parallelism: u32,
    key_buf: Vec<u8>,
    _s: std::marker::PhantomData<fn() -> S>,
}

impl<K: Key, S: StateValue> DiskTier<K, S> {
    fn err(&self, e: impl std::fmt::Display) -> Error {
        lsm_error(&self.store.dir, e)
    }

    /// Encodes `k`'s LSM key into `buf`: its key group, then its postcard bytes.
    fn encode_key(&self, k: &K, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        buf.extend_from_slice(&self.prefix);
        let g = key_group(k, self.max_parallelism) as u16;
        buf.extend_from_slice(&g.to_be_bytes());
        let out = postcard::to_extend(k, std::mem::take(buf)).map_err(|e| Error::StateDecode {
            what: "a key of keyed state (encoding)".into(),
            cause: e.to_string(),
        })?;
        *buf = out;
        Ok(())
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

    /// Writes every dirty key back to the LSM in one batch: its cached value (with its TTL
    /// stamp), or a delete if the cache no longer has it.
    pub(crate) fn write_back(&mut self, map: &CowMap<K, S>, ttl: Option<&Ttl<K>>) -> Result<()> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        let mut batch = self.store.db.batch().durability(None);
        let mut key = Vec::new();
        for k in self.dirty.drain() {
            key.clear();
            key.extend_from_slice(&self.prefix);
            let g = key_group(&k, self.max_parallelism) as u16;
            key.extend_from_slice(&g.to_be_bytes());
            key = postcard::to_extend(&k, key).map_err(|e| Error::StateDecode {
                what: "a key of keyed state (encoding)".into(),
                cause: e.to_string(),
            })?;
            let encode_err = |e: postcard::Error| Error::StateDecode {
                what: "keyed state written to disk (encoding)".into(),
                cause: e.to_string(),
            };
            if let Some(changes) = &mut self.changes {
                changes.record(&key, self.capacity);
            }
            match map.get(&k) {
                None => batch.remove(&self.ks, key.as_slice()),
                Some(v) => {
                    let value = match ttl {
                        None => postcard::to_allocvec(v),
                        // A value without a stamp is not live (as in memory): stamp 0.
                        Some(t) => {
                            postcard::to_allocvec(&(v, t.stamps.get(&k).copied().unwrap_or(0)))
                        }
                    }
                    .map_err(encode_err)?;
                    batch.insert(&self.ks, key.as_slice(), value);
                }
            }
        }
        batch.commit().map_err(|e| self.err(e))
    }

    /// Whether the state has no entry (after a write-back: exact).
    pub(crate) fn is_empty(&mut self, map: &CowMap<K, S>, ttl: Option<&Ttl<K>>) -> Result<bool> {
        self.write_back(map, ttl)?;
        match self.ks.prefix(&self.prefix).next() {
            None => Ok(true),
            Some(guard) => guard.key().map(|_| false).map_err(|e| self.err(e)),
        }
    }

    /// Number of entries (after a write-back; a full scan: tests and tools only).
    pub(crate) fn len(&mut self, map: &CowMap<K, S>, ttl: Option<&Ttl<K>>) -> Result<usize> {
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
        let mut batch = self.store.db.batch().durability(None);
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
            if expired && map.get(&key).is_none() && !self.dirty.contains(&key) {
                if let Some(changes) = &mut self.changes {
                    changes.record(&k, self.capacity);
                }
                batch.remove(&self.ks, k);
            }
        }
        self.sweep_from = next;
        batch.commit().map_err(|e| self.err(e))
    }

    /// Removes every entry of the tier from the LSM (a window's pane dropped whole); the
    /// caller drops the cache.
    pub(crate) fn clear(&mut self) -> Result<()> {
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

    /// Synchronous phase of a snapshot: writes the cache back and pins the LSM at this
    /// point (an MVCC snapshot: later writes are invisible to it). `None` if empty.
    pub(crate) fn snapshot(
        &mut self,
        map: &CowMap<K, S>,
        ttl: Option<&Ttl<K>>,
        range: KeyGroupRange,
    ) -> Result<Option<Box<dyn TableSnapshot>>> {
        if self.is_empty(map, ttl)? {
            return Ok(None);
        }
        Ok(Some(Box::new(DiskView::<S> {
            snapshot: self.store.db.snapshot(),
            ks: self.ks.clone(),
            prefix: self.prefix.clone(),
            dir: self.store.dir.clone(),
            range,
            ttl: ttl.map(|t| (t.cfg, crate::clock::wall_ms())),
            _s: std::marker::PhantomData,
        })))
    }

    /// With incremental checkpoints, at a checkpoint's snapshot (after a write-back): the
    /// keys changed since the previous one, which start again from none. `None` without.
    pub(crate) fn take_changes(
        &mut self,
        map: &CowMap<K, S>,
        ttl: Option<&Ttl<K>>,
    ) -> Result<Option<ChangeSet>> {
        self.write_back(map, ttl)?;
        Ok(self.changes.as_mut().map(std::mem::take))
    }

    /// Synchronous phase of an incremental checkpoint's delta: writes the cache back and
    /// pins the LSM; the view holds, per key group, every key of `sets` with its value at
    /// this point or a tombstone (`postcard((k, Option<v>))`). `None` if no key changed.
    pub(crate) fn delta_snapshot(
        &mut self,
        map: &CowMap<K, S>,
        ttl: Option<&Ttl<K>>,
        sets: Vec<Arc<ChangeSet>>,
        range: KeyGroupRange,
    ) -> Result<Option<Box<dyn TableSnapshot>>> {
        self.write_back(map, ttl)?;
        if sets.iter().all(|s| s.is_empty()) {
            return Ok(None);
        }
        Ok(Some(Box::new(DeltaView::<S> {
            snapshot: self.store.db.snapshot(),
            ks: self.ks.clone(),
            dir: self.store.dir.clone(),
            range,
            ttl: ttl.map(|t| (t.cfg, crate::clock::wall_ms())),
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
        let result = self.restore_inner(what, sections, ttl);
        if result.is_err() {
            self.clear()?;
        }
        result
    }

    fn restore_inner(&mut self, what: &str, sections: &[SharedBytes], ttl: bool) -> Result<()> {
        /// Entries per write batch: bounds the memory a restore holds.
        const BATCH: usize = 1 << 16;
        let err = |e: postcard::Error| Error::StateDecode {
            what: what.to_string(),
            cause: e.to_string(),
        };
        let mut batch = self.store.db.batch().durability(None);
        let mut key = Vec::new();
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
                if batch.len() >= BATCH {
                    let full =
                        std::mem::replace(&mut batch, self.store.db.batch().durability(None));
                    full.commit().map_err(|e| self.err(e))?;
                }
                rest = after_value;
            }
        }
        batch.commit().map_err(|e| self.err(e))
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

/// A disk table's snapshot: a pinned LSM snapshot, read key group by key group (one
/// "shard" per key group of the range) by the writer thread.
struct DiskView<S> {
    snapshot: fjall::Snapshot,
    ks: fjall::Keyspace,
    /// The tier's namespace prefix (before the key group).
    prefix: Vec<u8>,
    dir: PathBuf,
    range: KeyGroupRange,
    /// With TTL: the config and the time of the snapshot (expired entries are left out).
    ttl: Option<(StateTtlConfig, u64)>,
    _s: std::marker::PhantomData<fn() -> S>,
}

impl<S: StateValue> TableSnapshot for DiskView<S> {
    fn shards(&self) -> usize {
        self.range.len() as usize
    }

    fn take_shard(&self, shard: usize) -> Result<EncodedShard> {
        use fjall::Readable;
        let g = self.range.start + shard as u32;
        let mut prefix = self.prefix.clone();
        prefix.extend_from_slice(&(g as u16).to_be_bytes());
        let skip = prefix.len();
        let mut out = EncodedShard::default();
        for guard in self.snapshot.prefix(&self.ks, &prefix) {
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
struct DeltaView<S> {
    snapshot: fjall::Snapshot,
    ks: fjall::Keyspace,
    dir: PathBuf,
    range: KeyGroupRange,
    /// With TTL: the config and the time of the snapshot (expired entries become deletes).
    ttl: Option<(StateTtlConfig, u64)>,
    sets: Vec<Arc<ChangeSet>>,
    /// The sets' keys by key group (index from `range.start`), sorted and deduplicated:
    /// built by the writer at the first shard, off the processing thread.
    groups: std::sync::OnceLock<Vec<Vec<Box<[u8]>>>>,
    _s: std::marker::PhantomData<fn() -> S>,
}

impl<S> DeltaView<S> {
    fn groups(&self) -> &[Vec<Box<[u8]>>] {
        self.groups.get_or_init(|| {
            let mut groups = vec![Vec::new(); self.range.len() as usize];
            for key in self.sets.iter().flat_map(|s| s.keys()) {
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
            for keys in &mut groups {
                keys.sort_unstable();
                keys.dedup();
            }
            groups
        })
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
        for key in &self.groups()[shard] {
            let value = self
                .snapshot
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
