//! The type-erased table behind every keyed state kind, and its snapshot.
//!
//! Every kind stores one value per key — the value itself, a list, an accumulator, a map —
//! so one generic [`Table`] over a copy-on-write map serves them all; the kind decides only
//! how functions reach the stored value (see `handles`).

use std::sync::{Arc, Weak};

use super::super::cow_map::CowMap;
use super::super::key_group::KeyGroupRange;
use super::super::{Key, StateKind, StateValue};
use super::disk::DiskTier;
use super::incremental::ChangeSet;
use super::remote::RemoteState;
use super::ttl::Ttl;
use super::view::View;
use crate::error::{Error, Result};
use crate::state::keyed::entries::{Entries, EntryError};
use crate::storage::shared_bytes::SharedBytes;

/// One state table, type-erased so a backend can hold states of different value types.
pub(crate) trait StateTable<K>: Send {
    fn kind(&self) -> StateKind;
    /// Whether entries carry TTL stamps (recorded in the file: it changes the encoding).
    fn has_ttl(&self) -> bool;
    /// Synchronous phase: an immutable view that the asynchronous phase may encode; its
    /// keys belong to key groups `range` of `max_parallelism`. `None` if the table is empty
    /// (an empty table restores as empty without being written).
    fn snapshot(
        &mut self,
        range: KeyGroupRange,
        max_parallelism: u32,
    ) -> Result<Option<Box<dyn TableSnapshot>>>;
    /// Loads the encoded entries of `sections` (one per key group) into the table, then
    /// applies `changes` in order (the deltas of an incremental checkpoint, entries
    /// `(key, Option<value>)`: `None` deletes); on a decode error the table is left empty.
    fn restore(
        &mut self,
        name: &str,
        sections: &[SharedBytes],
        changes: &[SharedBytes],
    ) -> Result<()>;
    /// Incremental checkpoints: at a checkpoint's snapshot, the keys changed since the
    /// previous one (taken: the next call starts from none). `None` if the table cannot
    /// tell (in memory, or a window state): the checkpoint is then written in full.
    fn take_changes(&mut self) -> Result<Option<ChangeSet>> {
        Ok(None)
    }
    /// Incremental checkpoints: a view of the keys of `sets` as they are now (value or
    /// tombstone), for a delta; `None` if none changed. Only called on a table whose
    /// [`StateTable::take_changes`] returned a set.
    fn delta_snapshot(
        &mut self,
        _sets: Vec<Arc<ChangeSet>>,
        _range: KeyGroupRange,
    ) -> Result<Option<Box<dyn TableSnapshot>>> {
        Err(Error::Restore(
            "internal: a delta asked of a state that records no changes (a bug in Weir; \
             please report it)"
                .into(),
        ))
    }
    /// Number of keys with state (on disk: a scan, for tests and tools).
    #[cfg_attr(not(test), allow(dead_code))]
    fn len(&mut self) -> Result<usize>;
    /// Every key that has state in this table (for `apply_to_all_keys`).
    fn keys(&mut self) -> Result<Vec<K>>;
    /// Entries held decoded in memory (on disk: the cache's; in memory: all of them).
    fn memory_entries(&self) -> usize;
    /// Key groups a lazy restore left in storage that this table has not fetched yet.
    #[cfg(all(test, feature = "disk-state"))]
    fn remote_groups(&self) -> usize {
        0
    }
    /// A checkpoint was confirmed: key groups still in storage point at its chain from now
    /// on (`None`: its index is unknown, fetch them now). Only a table on disk has any.
    fn repoint_remote(
        &mut self,
        _name: &str,
        _chain: Option<&super::remote::ConfirmedChain>,
    ) -> Result<()> {
        Ok(())
    }
    /// Over the local disk's bound (`--state-cache-size`): drops key groups of `range`
    /// unchanged since the confirmed checkpoint whose chain is `chain` (`sets`: the changes
    /// of the snapshots taken since) until about `to_free` bytes are; returns the bytes
    /// dropped. Only a table on disk drops any.
    fn evict(
        &mut self,
        _name: &str,
        _chain: &super::remote::ConfirmedChain,
        _sets: &[Arc<ChangeSet>],
        _range: KeyGroupRange,
        _to_free: u64,
    ) -> Result<u64> {
        Ok(0)
    }
}

/// The encoded entries of one shard of a table's view, grouped by key group: the writer
/// lays the groups out in key-group order across shards.
#[derive(Debug, Clone, Default)]
pub struct EncodedShard {
    /// The entries, each key group's run after the other.
    pub bytes: Vec<u8>,
    /// `(key group, byte length)` of each run of `bytes`, in ascending key-group order.
    pub runs: Vec<(u32, usize)>,
    /// Number of entries.
    pub entries: u64,
}

/// An immutable view of one table, encoded shard by shard off the processing thread (or
/// by the processing thread, for a shard it must write to before the writer got there:
/// see [`crate::state::cow_map::ShardRelease`]).
pub trait TableSnapshot: Send {
    /// Number of shards; shard `i` of every table of a backend holds the same keys.
    fn shards(&self) -> usize;

    /// Shard `shard`'s live entries, encoded and grouped by key group. Each shard is taken
    /// once: the view lets go of it (so the processing thread writes to it without a copy).
    fn take_shard(&self, shard: usize) -> Result<EncodedShard>;

    /// Appends the entries of each key group in `range` to `out[group - range.start]`,
    /// returning the number of entries written (every shard, taken in memory: for tests
    /// and small states; the writer streams instead).
    #[cfg(test)]
    fn encode_groups(
        &self,
        _max_parallelism: u32,
        range: KeyGroupRange,
        out: &mut [Vec<u8>],
    ) -> Result<u64> {
        let mut written = 0;
        for i in 0..self.shards() {
            let shard = self.take_shard(i)?;
            let mut at = 0;
            for (g, len) in shard.runs {
                out[(g - range.start) as usize].extend_from_slice(&shard.bytes[at..at + len]);
                at += len;
            }
            written += shard.entries;
        }
        Ok(written)
    }
}

/// The stored value `S` of every key, for a state of kind `kind`, with optional TTL and,
/// on the disk backend, the LSM behind the map (which is then a write-back cache).
pub(crate) struct Table<K, S> {
    pub map: CowMap<K, S>,
    pub kind: StateKind,
    pub ttl: Option<Ttl<K>>,
    /// The disk tier (`None` on the memory backend).
    disk: Option<Box<DiskTier<K, S>>>,
    /// `ttl` or `disk` is set: the one branch the memory backend's per-record path pays.
    hooks: bool,
}

impl<K: Key, S: StateValue> Table<K, S> {
    /// A table in memory.
    pub fn new(kind: StateKind, ttl: Option<Ttl<K>>) -> Self {
        let hooks = ttl.is_some();
        Table {
            map: CowMap::default(),
            kind,
            ttl,
            disk: None,
            hooks,
        }
    }

    /// Whether the table's entries live on disk (the map caching them).
    pub fn is_on_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// Hands the disk tier the sections a lazy restore left in storage (state `name`),
    /// fetched by key group on first access. Only called for a table on disk
    /// ([`Table::is_on_disk`]); elsewhere it does nothing.
    pub fn set_remote(&mut self, name: &str, remote: Vec<super::RemoteSection>) {
        if let Some(disk) = &mut self.disk {
            let state = RemoteState::new(name, self.kind, self.ttl.is_some());
            disk.set_remote(state, remote);
        }
    }

    /// A table whose entries live in `disk`, the map caching them.
    #[cfg_attr(any(not(feature = "disk-state"), not(test)), allow(dead_code))]
    pub fn on_disk(kind: StateKind, ttl: Option<Ttl<K>>, disk: DiskTier<K, S>) -> Self {
        Table {
            map: CowMap::default(),
            kind,
            ttl,
            disk: Some(Box::new(disk)),
            hooks: true,
        }
    }

    /// The map, after TTL bookkeeping for an access to `key` (a `write` refreshes it) and,
    /// on disk, after `key`'s entry is loaded into it.
    ///
    /// # Panics
    /// If the disk tier fails to read (an I/O error or a corrupt entry of the LSM, which the
    /// engine wrote itself): state accesses return references, not results, so the task
    /// fails and restarts from its last checkpoint.
    #[inline]
    pub fn access(&mut self, key: &K, write: bool) -> &mut CowMap<K, S> {
        if self.hooks {
            self.access_hooked(key, write);
        }
        &mut self.map
    }

    #[inline(never)]
    fn access_hooked(&mut self, key: &K, write: bool) {
        // The clock is read only under TTL: a disk tier without one has no use for it, and
        // reading it was ~1.5 % of a disk-backend run's CPU (W1, perf).
        let now = self.ttl.is_some().then(crate::clock::wall_ms);
        if let Some(disk) = &mut self.disk {
            if let Err(e) = disk.fault_in(&mut self.map, self.ttl.as_mut(), key, write) {
                panic!("keyed state on disk: {e}");
            }
            if let (Some(ttl), Some(now)) = (&self.ttl, now) {
                if let Err(e) = disk.maybe_sweep(&self.map, ttl, now) {
                    panic!("keyed state on disk: {e}");
                }
            }
        }
        if let (Some(ttl), Some(now)) = (&mut self.ttl, now) {
            ttl.on_access(&mut self.map, key, write, now);
        }
    }

    /// Whether `key`'s entry is live (not expired) — always, without TTL.
    pub fn live(&self, key: &K, now: u64) -> bool {
        self.ttl.as_ref().is_none_or(|t| t.live(key, now))
    }

    /// On disk: removes every entry from the LSM (the table is being dropped whole).
    pub fn clear_disk(&mut self) -> Result<()> {
        match &mut self.disk {
            Some(disk) => disk.clear(),
            None => Ok(()),
        }
    }

    /// Every `(key, value)` live at `now`, cloned from the map in memory; on disk decoded
    /// from the LSM as the iterator advances (one entry in memory at a time).
    ///
    /// # Panics
    /// On disk, if the LSM fails to read (see [`Table::access`]).
    pub fn entries(&mut self, now: u64) -> impl Iterator<Item = (K, S)> + '_ {
        match &mut self.disk {
            Some(disk) => match disk.stream(&self.map, self.ttl.as_ref(), now) {
                Ok(stream) => Either::Disk(stream),
                Err(e) => panic!("keyed state on disk: {e}"),
            },
            None => {
                let (map, ttl) = (&self.map, self.ttl.as_ref());
                Either::Memory(
                    map.iter()
                        .filter(move |(k, _)| ttl.is_none_or(|t| t.live(k, now)))
                        .map(|(k, v)| (k.clone(), v.clone())),
                )
            }
        }
    }

    /// Calls `f` with every entry live at `now` (all of them, without TTL): from the map
    /// in memory; on disk streamed from the LSM, one entry in memory at a time.
    pub fn for_each_entry(&mut self, now: u64, mut f: impl FnMut(&K, &S)) -> Result<()> {
        match &mut self.disk {
            Some(disk) => {
                let ttl_ms = self.ttl.as_ref().map(|t| t.cfg.ttl_ms());
                disk.for_each(&self.map, self.ttl.as_ref(), |k, v, stamp| {
                    let live = match (ttl_ms, stamp) {
                        (Some(ttl), Some(stamp)) => now < stamp.saturating_add(ttl),
                        _ => true,
                    };
                    if live {
                        f(k, v);
                    }
                })
            }
            None => {
                for (k, v) in self.map.iter() {
                    if self.live(k, now) {
                        f(k, v);
                    }
                }
                Ok(())
            }
        }
    }
}

impl<K: Key, S: StateValue> StateTable<K> for Table<K, S> {
    #[cfg(all(test, feature = "disk-state"))]
    fn remote_groups(&self) -> usize {
        self.disk.as_ref().map_or(0, |d| d.remote_groups())
    }
    fn repoint_remote(
        &mut self,
        name: &str,
        chain: Option<&super::remote::ConfirmedChain>,
    ) -> Result<()> {
        match &mut self.disk {
            Some(disk) => disk.repoint_remote(name, chain),
            None => Ok(()),
        }
    }
    fn evict(
        &mut self,
        name: &str,
        chain: &super::remote::ConfirmedChain,
        sets: &[Arc<ChangeSet>],
        range: KeyGroupRange,
        to_free: u64,
    ) -> Result<u64> {
        match &mut self.disk {
            Some(disk) => {
                let state = RemoteState::new(name, self.kind, self.ttl.is_some());
                let ttl = self.ttl.as_mut();
                disk.evict(&mut self.map, ttl, &state, chain, sets, range, to_free)
            }
            None => Ok(0),
        }
    }
    fn kind(&self) -> StateKind {
        self.kind
    }
    fn has_ttl(&self) -> bool {
        self.ttl.is_some()
    }
    fn snapshot(
        &mut self,
        range: KeyGroupRange,
        max_parallelism: u32,
    ) -> Result<Option<Box<dyn TableSnapshot>>> {
        if let Some(disk) = &mut self.disk {
            return disk.snapshot(&mut self.map, self.ttl.as_mut(), range);
        }
        if self.map.is_empty() {
            return Ok(None);
        }
        let now = crate::clock::wall_ms();
        let map = self.map.snapshot();
        let ttl = self.ttl.as_mut().map(|t| (t.stamps.snapshot(), t.cfg, now));
        let view = Arc::new(View::new(map, ttl, range, max_parallelism));
        let weak: Weak<View<K, S>> = Arc::downgrade(&view);
        self.map.watch(weak.clone());
        if let Some(t) = &mut self.ttl {
            t.stamps.watch(weak);
        }
        Ok(Some(Box::new(TableView(view))))
    }
    fn take_changes(&mut self) -> Result<Option<ChangeSet>> {
        match &mut self.disk {
            Some(disk) => disk.take_changes(&mut self.map, self.ttl.as_mut()),
            None => Ok(None),
        }
    }
    fn delta_snapshot(
        &mut self,
        sets: Vec<Arc<ChangeSet>>,
        range: KeyGroupRange,
    ) -> Result<Option<Box<dyn TableSnapshot>>> {
        match &mut self.disk {
            Some(disk) => disk.delta_snapshot(&mut self.map, self.ttl.as_mut(), sets, range),
            None => Ok(None),
        }
    }
    fn restore(
        &mut self,
        name: &str,
        sections: &[SharedBytes],
        changes: &[SharedBytes],
    ) -> Result<()> {
        let what = format!("keyed {} state '{name}'", self.kind.name());
        if let Some(disk) = &mut self.disk {
            let ttl = self.ttl.is_some();
            return disk.restore_chain(&what, sections, changes, ttl);
        }
        self.restore_memory(&what, sections)?;
        let applied = self.apply_changes_memory(&what, changes);
        if applied.is_err() {
            self.map = Default::default();
            if let Some(ttl) = &mut self.ttl {
                ttl.stamps = Default::default();
            }
        }
        applied
    }
    fn len(&mut self) -> Result<usize> {
        match &mut self.disk {
            Some(disk) => disk.len(&self.map, self.ttl.as_ref()),
            None => Ok(self.map.len()),
        }
    }
    fn keys(&mut self) -> Result<Vec<K>> {
        match &mut self.disk {
            Some(disk) => disk.keys(&self.map, self.ttl.as_ref()),
            None => Ok(self.map.iter().map(|(k, _)| k.clone()).collect()),
        }
    }
    fn memory_entries(&self) -> usize {
        self.map.len()
    }
}

impl<K: Key, S: StateValue> Table<K, S> {
    /// Loads full sections into the map (memory backend).
    fn restore_memory(&mut self, what: &str, sections: &[SharedBytes]) -> Result<()> {
        let err = |e: postcard::Error| Error::StateDecode {
            what: what.to_string(),
            cause: e.to_string(),
        };
        let threads = restore_threads(sections);
        match &mut self.ttl {
            None => {
                let decoded = decode_sections::<(K, S)>(sections, threads).map_err(err)?;
                self.map.reserve(decoded.iter().map(Vec::len).sum());
                for (k, v) in decoded.into_iter().flatten() {
                    self.map.insert(k, v);
                }
            }
            Some(ttl) => {
                let decoded = decode_sections::<(K, (S, u64))>(sections, threads).map_err(err)?;
                let n = decoded.iter().map(Vec::len).sum();
                self.map.reserve(n);
                ttl.stamps.reserve(n);
                for (k, (v, stamp)) in decoded.into_iter().flatten() {
                    ttl.stamps.insert(k.clone(), stamp);
                    self.map.insert(k, v);
                }
            }
        }
        Ok(())
    }

    /// Applies the deltas of an incremental checkpoint, in order (memory backend): each
    /// entry `(key, Some(value))` puts, `(key, None)` deletes.
    fn apply_changes_memory(&mut self, what: &str, changes: &[SharedBytes]) -> Result<()> {
        let err = |e: EntryError| Error::StateDecode {
            what: what.to_string(),
            cause: format!("byte {} of a delta's section: {}", e.at, e.cause),
        };
        for section in changes {
            match &mut self.ttl {
                None => {
                    for entry in Entries::<K, S>::delta(section) {
                        let entry = entry.map_err(err)?;
                        match entry.value {
                            Some((v, _)) => self.map.insert(entry.key, v),
                            None => self.map.remove(&entry.key),
                        };
                    }
                }
                Some(ttl) => {
                    for entry in Entries::<K, (S, u64)>::delta(section) {
                        let entry = entry.map_err(err)?;
                        match entry.value {
                            Some(((v, stamp), _)) => {
                                ttl.stamps.insert(entry.key.clone(), stamp);
                                self.map.insert(entry.key, v);
                            }
                            None => {
                                ttl.stamps.remove(&entry.key);
                                self.map.remove(&entry.key);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// One of two iterators over the same items (memory or disk), without a dynamic call per
/// item: the memory backend's end-of-input loops stay as fast as a plain map iteration.
enum Either<M, D> {
    Memory(M),
    Disk(D),
}

impl<T, M: Iterator<Item = T>, D: Iterator<Item = T>> Iterator for Either<M, D> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        match self {
            Either::Memory(m) => m.next(),
            Either::Disk(d) => d.next(),
        }
    }
}

/// A table's view on its way to storage (see [`View`]).
struct TableView<K, S>(Arc<View<K, S>>);

impl<K: Key, S: StateValue> TableSnapshot for TableView<K, S> {
    fn shards(&self) -> usize {
        self.0.shards()
    }

    fn take_shard(&self, shard: usize) -> Result<EncodedShard> {
        self.0.take(shard)
    }
}

/// Sections smaller than this in total are decoded on the calling thread: a thread costs
/// tens of microseconds to start, about what decoding this much takes.
const PARALLEL_RESTORE_BYTES: usize = 1 << 20;

/// Most threads one table's restore uses (besides being bounded by the cores).
const MAX_RESTORE_THREADS: usize = 4;

/// How many threads should decode `sections`: one for small state, else one per core.
pub(super) fn restore_threads(sections: &[SharedBytes]) -> usize {
    let bytes: usize = sections.iter().map(|s| s.len()).sum();
    if bytes < PARALLEL_RESTORE_BYTES || sections.len() < 2 {
        return 1;
    }
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_RESTORE_THREADS)
        .min(sections.len())
}

/// Decodes every entry of one section.
fn decode_section<T: serde::de::DeserializeOwned>(
    mut bytes: &[u8],
) -> std::result::Result<Vec<T>, postcard::Error> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (entry, rest) = postcard::take_from_bytes(bytes)?;
        out.push(entry);
        bytes = rest;
    }
    Ok(out)
}

/// The entries of each section, in section order, decoded on `threads` threads (the
/// caller's and `threads - 1` more), each taking the next undecoded section. Decoding —
/// allocating and copying every key and value — is most of a restore's time, and sections
/// decode independently; inserting into the table stays on the caller's thread.
///
/// On failure returns the error of the first bad section in section order, the same error
/// a sequential decode reports; sections after a bad one are not started.
pub(super) fn decode_sections<T: serde::de::DeserializeOwned + Send>(
    sections: &[SharedBytes],
    threads: usize,
) -> std::result::Result<Vec<Vec<T>>, postcard::Error> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    type Decoded<T> = Vec<(usize, std::result::Result<Vec<T>, postcard::Error>)>;
    if threads <= 1 {
        return sections.iter().map(|s| decode_section(s)).collect();
    }
    let next = AtomicUsize::new(0);
    // Index of the first bad section seen so far (usize::MAX: none): no section after it
    // is started, every one before it was already claimed and finishes.
    let first_bad = AtomicUsize::new(usize::MAX);
    let work = || {
        let mut done: Decoded<T> = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= sections.len() || i > first_bad.load(Ordering::Relaxed) {
                return done;
            }
            let result = decode_section(&sections[i]);
            if result.is_err() {
                first_bad.fetch_min(i, Ordering::Relaxed);
            }
            done.push((i, result));
        }
    };
    let mut slots: Vec<Option<std::result::Result<Vec<T>, postcard::Error>>> =
        (0..sections.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mine = work();
        let theirs = helpers.into_iter().flat_map(|h| match h.join() {
            Ok(done) => done,
            // Decoding does not panic on any input; if it ever did, fail like a
            // sequential restore would rather than hide it.
            Err(panic) => std::panic::resume_unwind(panic),
        });
        for (i, result) in mine.into_iter().chain(theirs) {
            slots[i] = Some(result);
        }
    });
    let mut out = Vec::with_capacity(sections.len());
    for slot in slots {
        match slot {
            Some(Ok(entries)) => out.push(entries),
            Some(Err(e)) => return Err(e),
            None => unreachable!("every section before the first bad one is decoded"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::key_group::key_group;

    /// `keys` entries `(k, "v{k}")`, encoded into one section per key group of 16.
    fn sections(keys: u64) -> Vec<SharedBytes> {
        let mut groups = vec![Vec::new(); 16];
        for k in 0..keys {
            let g = key_group(&k, 16) as usize;
            groups[g] =
                postcard::to_extend(&(k, format!("v{k}")), std::mem::take(&mut groups[g])).unwrap();
        }
        groups.into_iter().map(Into::into).collect()
    }

    fn table() -> Table<u64, String> {
        Table::new(StateKind::Value, None)
    }

    fn sorted(t: &Table<u64, String>) -> Vec<(u64, String)> {
        let mut all: Vec<_> = t.map.iter().map(|(k, v)| (*k, v.clone())).collect();
        all.sort();
        all
    }

    #[test]
    fn parallel_decode_gives_the_sequential_result() {
        let secs = sections(5000);
        let sequential = decode_sections::<(u64, String)>(&secs, 1).unwrap();
        for threads in [2, 3, 16] {
            let parallel = decode_sections::<(u64, String)>(&secs, threads).unwrap();
            assert_eq!(parallel, sequential, "{threads} threads");
        }
        let mut t = table();
        t.restore("s", &secs, &[]).unwrap();
        assert_eq!(t.len().unwrap(), 5000);
        let want: Vec<_> = (0..5000).map(|k| (k, format!("v{k}"))).collect();
        assert_eq!(sorted(&t), want);
    }

    #[test]
    fn a_corrupt_section_is_rejected_whatever_the_threads() {
        let mut secs = sections(2000);
        // Cut the sixth section inside its last entry, and garble the tenth.
        let cut = secs[5][..secs[5].len() - 1].to_vec();
        secs[5] = cut.into();
        let mut garbled = secs[9].to_vec();
        garbled[1] = 0xFF;
        garbled[2] = 0xFF;
        secs[9] = garbled.into();
        let sequential = decode_sections::<(u64, String)>(&secs, 1).unwrap_err();
        for threads in [2, 3, 16] {
            let parallel = decode_sections::<(u64, String)>(&secs, threads).unwrap_err();
            assert_eq!(
                parallel, sequential,
                "{threads} threads: the first bad section"
            );
        }
        let mut t = table();
        let err = t.restore("s", &secs, &[]).unwrap_err().to_string();
        assert!(err.contains("keyed value state 's'"), "{err}");
        assert_eq!(t.len().unwrap(), 0, "nothing half-restored");
    }

    #[test]
    fn small_state_is_decoded_on_the_calling_thread() {
        assert_eq!(restore_threads(&sections(100)), 1);
        let big: Vec<SharedBytes> = (0..8).map(|_| vec![0u8; 1 << 18].into()).collect();
        assert!(restore_threads(&big) >= 1 && restore_threads(&big) <= MAX_RESTORE_THREADS);
        assert_eq!(restore_threads(&big[..1]), 1);
    }
}
