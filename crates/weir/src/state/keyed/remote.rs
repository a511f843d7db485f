//! Keyed state whose durable copy stays in the checkpoint storage (issue 25 item 4): a
//! restore of an incremental checkpoint from remote storage reads no shared file up front;
//! each state's section of a key group is fetched — one ranged read per file of the chain,
//! checked against the checksum the writer recorded for that section — when the key group
//! is first accessed (docs/design-notes.md, "Durable copy in object storage").
//!
//! The writer records, per shared keyed file, where each state's section of each key group
//! lies and its CRC-32C ([`FileIndex`], in `_metadata` layout 8). The checkpoint layer
//! hands each state of a subtask the sections of its key groups still in storage
//! ([`RemoteSection`], in `RestoredState::remote`); the disk tier fetches a group's sections
//! before it first reads a key of it, and every section before it reads the whole state.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::state::StateKind;
use crate::storage::backend::StorageBackend;
use crate::storage::shared_bytes::SharedBytes;

/// Where one state's section of one key group lies in a shared keyed file: its bytes (the
/// section's entries, without their length prefix) from `offset` (from the start of the
/// file, envelope header included) for `len` bytes, and their CRC-32C — what lets a ranged
/// read be checked without reading the whole file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionSpan {
    /// Offset of the section's first byte in the file.
    pub offset: u64,
    /// Its length in bytes (0: the state has no entry in the group).
    pub len: u64,
    /// CRC-32C of its bytes.
    pub crc32c: u32,
}

/// The sections of one key group of a shared keyed file, one per state in the order of
/// [`FileIndex::states`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSpans {
    /// The key group.
    pub group: u32,
    /// One span per state.
    pub sections: Vec<SectionSpan>,
}

/// The index of a shared keyed file (a base or a delta): its header's states and TTL
/// flags and where each key group's sections lie. With it a restore knows a file's shape
/// without reading it, and can read any one section alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileIndex {
    /// `(name, kind)` of each state, as in the file's header.
    pub states: Vec<(String, StateKind)>,
    /// Per state: whether its entries carry a TTL stamp.
    pub ttl: Vec<bool>,
    /// Non-empty key groups, ascending.
    pub groups: Vec<GroupSpans>,
}

/// A shared keyed file left in storage by a restore: where to read it and how to name it.
#[derive(Debug)]
pub struct RemoteFile {
    /// The job folder's storage.
    pub store: Arc<dyn StorageBackend>,
    /// The file's key in `store` (`shared/<uid>/<file>`).
    pub key: String,
    /// The file's full path, for messages.
    pub shown: PathBuf,
    /// The checkpoint the restore started from, for messages.
    pub checkpoint_id: u64,
}

/// Where a subtask's checkpoints write their shared files (the job folder), reported by
/// the writer: key groups still in storage are re-pointed at a new base written there once
/// it is confirmed ([`crate::state::keyed::KeyedStateBackend::notify_complete`]).
#[derive(Debug, Clone)]
pub struct SharedHome {
    /// The job folder's storage.
    pub store: Arc<dyn StorageBackend>,
    /// The job folder's path, for messages.
    pub root: PathBuf,
}

/// The chain of a subtask's newest confirmed checkpoint, as the sections its key groups
/// still in storage point at ([`ConfirmedChain::sections`]). Once a checkpoint is
/// confirmed, retention may delete the files of the chains before it, while its own chain
/// holds each such group unchanged: a group still in storage has not been touched since
/// before that checkpoint's barrier (the tier fetches a group before any access of it).
#[derive(Debug)]
pub(crate) struct ConfirmedChain {
    /// Per file, base first.
    files: Vec<ChainedFile>,
}

/// One file of a [`ConfirmedChain`]: where it lies, its index, and per group of the index
/// the read its states share (`None`: one state has a section there).
type ChainedFile = (Arc<RemoteFile>, Arc<FileIndex>, Vec<Option<Arc<GroupRead>>>);

impl ConfirmedChain {
    /// The chain `chain` of checkpoints written into `home`; `None` if a file of it has
    /// no index (a chain restored from a checkpoint written before indexes were).
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn new(home: &SharedHome, chain: &[super::ChainFile]) -> Option<ConfirmedChain> {
        let mut files = Vec::with_capacity(chain.len());
        for f in chain {
            let index = f.index.clone()?;
            let reads = index
                .groups
                .iter()
                .map(|g| {
                    let wanted = g.sections.iter().filter(|s| s.len > 0).count();
                    GroupRead::new(&g.sections).filter(|_| wanted > 1)
                })
                .collect();
            let file = Arc::new(RemoteFile {
                store: Arc::clone(&home.store),
                key: f.path.clone(),
                shown: home.root.join(&f.path),
                checkpoint_id: f.checkpoint_id,
            });
            files.push((file, index, reads));
        }
        Some(ConfirmedChain { files })
    }

    /// State `name`'s sections of key group `group` in chain order (base, then deltas);
    /// empty if the chain has no entry of it there.
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn sections(&self, name: &str, group: u32) -> Vec<RemoteSection> {
        let mut out = Vec::new();
        for (i, (file, index, reads)) in self.files.iter().enumerate() {
            let Some(state) = index.states.iter().position(|(n, _)| n == name) else {
                continue;
            };
            let Ok(at) = index.groups.binary_search_by_key(&group, |g| g.group) else {
                continue;
            };
            let Some(span) = index.groups[at].sections.get(state).copied() else {
                continue;
            };
            if span.len > 0 {
                out.push(RemoteSection {
                    file: Arc::clone(file),
                    group,
                    span,
                    delta: i > 0,
                    shared: reads[at].clone(),
                });
            }
        }
        out
    }
}

impl ConfirmedChain {
    /// Whether a file of the chain lists state `name`: if none does, the chain says
    /// nothing of it (the state was not declared when it was written).
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    fn lists(&self, name: &str) -> bool {
        (self.files.iter()).any(|(_, index, _)| index.states.iter().any(|(n, _)| n == name))
    }
}

/// The snapshots a subtask took since its newest confirmed checkpoint, with the chains the
/// writer reported for them: what a key group in storage is fetched from when the file it
/// points at is gone (`state/keyed/bound.rs`, "the retention race"). Shared by the
/// subtask's tiers through its [`super::disk::DiskStore`]; kept in step with the
/// incremental tracker's pending snapshots by the backend.
#[derive(Debug, Default)]
pub(crate) struct Unconfirmed {
    /// Ascending by checkpoint id.
    taken: Mutex<Vec<Taken>>,
}

/// One snapshot of [`Unconfirmed`].
#[derive(Debug)]
#[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
struct Taken {
    id: u64,
    /// Filled by the writer once the snapshot's file is written.
    written: super::incremental::ChainSlot,
    /// Where it was written, filled by the writer.
    home: Arc<OnceLock<SharedHome>>,
    /// The chain as sections are read from, once written (built on first need).
    chain: Option<Arc<ConfirmedChain>>,
}

#[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
impl Taken {
    /// The snapshot's chain, if the writer reported it (with an index).
    fn chain(&mut self) -> Option<Arc<ConfirmedChain>> {
        if self.chain.is_none() {
            let written = self
                .written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()?;
            let home = self.home.get()?;
            self.chain = ConfirmedChain::new(home, &written).map(Arc::new);
        }
        self.chain.clone()
    }
}

impl Unconfirmed {
    fn taken(&self) -> std::sync::MutexGuard<'_, Vec<Taken>> {
        self.taken.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checkpoint `id`'s snapshot was taken; the writer reports its chain in `written`
    /// and where it lies in `home`.
    pub(crate) fn snapshot_taken(
        &self,
        id: u64,
        written: super::incremental::ChainSlot,
        home: Arc<OnceLock<SharedHome>>,
    ) {
        self.taken().push(Taken {
            id,
            written,
            home,
            chain: None,
        });
    }

    /// Checkpoint `id` was confirmed: the groups in storage point at its chain from now on,
    /// and the snapshots up to it are no longer newer than the confirmed one.
    pub(crate) fn confirmed(&self, id: u64) {
        self.taken().retain(|t| t.id > id);
    }

    /// Checkpoint `id` was aborted: its files may be deleted.
    pub(crate) fn aborted(&self, id: u64) {
        self.taken().retain(|t| t.id != id);
    }

    /// State `name`'s key group `g` from the newest snapshot's chain that can be read
    /// whole (each section read alone, in chain order, each with whether it is a delta's);
    /// `None` if none can. Exact whichever it is: a group still in storage has not been
    /// touched since before the confirmed checkpoint's barrier (`state/keyed/bound.rs`), so
    /// every snapshot taken since holds it as it is.
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn fetch_group(&self, name: &str, g: u32) -> Option<Vec<(bool, SharedBytes)>> {
        let chains: Vec<Arc<ConfirmedChain>> = self
            .taken()
            .iter_mut()
            .rev()
            .filter_map(Taken::chain)
            .collect();
        chains.iter().filter(|c| c.lists(name)).find_map(|chain| {
            let alone: Vec<RemoteSection> = (chain.sections(name, g).into_iter())
                .map(|s| RemoteSection { shared: None, ..s })
                .collect();
            try_fetch_group(&alone).ok()
        })
    }
}

/// One state's section of one key group still in storage: applied (a base's) or applied
/// on top (a delta's, in chain order) when fetched.
#[derive(Debug, Clone)]
pub struct RemoteSection {
    /// The file holding it.
    pub file: Arc<RemoteFile>,
    /// The key group.
    pub group: u32,
    /// Where it lies.
    pub span: SectionSpan,
    /// Whether it is a delta's (entries `(key, Option<value>)`).
    pub delta: bool,
    /// The read of its key group's sections of every state of the subtask that needs one
    /// (`None`: read alone).
    pub shared: Option<Arc<GroupRead>>,
}

/// The state a table's key groups in storage belong to: its `name` finds their sections in
/// a chain's index, `what` names it in messages, and `ttl` says whether its entries carry
/// a TTL stamp (how to decode them). Built by the state's table, in one place, where it
/// hands its disk tier groups in storage (a lazy restore, an eviction), and held in an
/// `Arc` by the tier: fetching a group, or capturing the groups at a barrier, then clones
/// no string.
#[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
pub(crate) struct RemoteState {
    /// The state's name, as the chains' indexes list it.
    pub name: String,
    /// The state, for messages (`keyed value state 'x'`).
    pub what: String,
    /// Whether its entries carry TTL stamps.
    pub ttl: bool,
}

impl RemoteState {
    /// State `name` of `kind`, with TTL stamps if `ttl`.
    pub(crate) fn new(name: &str, kind: StateKind, ttl: bool) -> Arc<RemoteState> {
        Arc::new(RemoteState {
            name: name.to_string(),
            what: format!("keyed {} state '{name}'", kind.name()),
            ttl,
        })
    }
}

/// One key group's sections in one file, for every state of a subtask that needs one:
/// read with one ranged GET by the first state that needs its section, the others taking
/// theirs from the same buffer (a record usually touches every state of its key, so the
/// states of a key group are wanted together). The buffer is freed once every section
/// holding this read was loaded (or dropped).
#[derive(Debug)]
pub struct GroupRead {
    /// The bytes of the file covering every wanted section.
    range: std::ops::Range<u64>,
    /// What the read gave: the bytes, or why it failed and whether the file is bad.
    read: OnceLock<ReadResult>,
}

/// A ranged read's bytes, or why it failed.
type ReadResult = std::result::Result<Arc<Vec<u8>>, Failed>;

/// Why a section could not be fetched, before it becomes an error ([`Failed::into_error`]):
/// kept apart so that a file missing because retention deleted it can be read from a newer
/// chain instead ([`Unconfirmed::fetch_group`]) without the file being reported bad.
#[derive(Debug, Clone)]
pub(crate) struct Failed {
    /// What went wrong.
    why: String,
    /// The file is missing or damaged, rather than the store out of reach.
    bad: bool,
    /// The file is not in storage at all.
    missing: bool,
}

impl Failed {
    fn damaged(why: String) -> Failed {
        Failed {
            why,
            bad: true,
            missing: false,
        }
    }

    /// Whether the file is not in storage at all.
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn missing(&self) -> bool {
        self.missing
    }

    /// The error for `section`, naming its file and the way out. A missing or damaged
    /// file is remembered ([`is_known_bad`]) so that the restart that follows does not
    /// restore from it again.
    pub(crate) fn into_error(self, section: &RemoteSection) -> Error {
        let file = &section.file;
        if self.bad {
            known_bad()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(file.shown.clone());
        }
        let way_out = if self.bad {
            "the checkpoint cannot be restored from: restore from an earlier one \
             (--restore latest skips checkpoints whose files are missing)"
        } else {
            "the checkpoint storage may be out of reach: the task restarts and fetches again"
        };
        Error::Restore(format!(
            "shared state file {} of checkpoint {} (key group {}, fetched on first access): \
             {}; {way_out}",
            file.shown.display(),
            file.checkpoint_id,
            section.group,
            self.why
        ))
    }
}

impl GroupRead {
    /// A read of `spans`' key group, not yet made.
    pub fn new(spans: &[SectionSpan]) -> Option<Arc<GroupRead>> {
        let wanted = spans.iter().filter(|s| s.len > 0);
        let start = wanted.clone().map(|s| s.offset).min()?;
        let end = wanted.map(|s| s.offset + s.len).max()?;
        Some(Arc::new(GroupRead {
            range: start..end,
            read: OnceLock::new(),
        }))
    }
}

/// Most bytes one read of [`coalesce`] covers: what a read of every remaining key group
/// holds in memory at once.
const COALESCED_READ_BYTES: u64 = 8 << 20;

/// One read [`coalesce`] plans: the file's bytes it covers, and the sections in it (by
/// index of group, then of section).
type Plan = (std::ops::Range<u64>, Vec<(usize, usize)>);

/// Re-plans the reads of `groups` (sections per key group, in chain order) for fetching
/// them all, as before a read of the whole state: per file, the sections of consecutive
/// groups share one ranged read of up to [`COALESCED_READ_BYTES`] (a file lays its groups
/// out in order) instead of one read per group — thousands of requests for a state of many
/// key groups, each a round trip. Each buffer is freed once its sections are loaded.
#[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
pub(crate) fn coalesce(groups: &mut [Vec<RemoteSection>]) {
    // Per file (by its key): the read being planned and the sections in it.
    let mut open: std::collections::HashMap<String, Plan> = Default::default();
    let mut plans: Vec<Plan> = Vec::new();
    for (g, sections) in groups.iter().enumerate() {
        for (i, s) in sections.iter().enumerate() {
            if s.span.len == 0 {
                continue;
            }
            let (start, end) = (s.span.offset, s.span.offset + s.span.len);
            let entry = open
                .entry(s.file.key.clone())
                .or_insert_with(|| (start..end, Vec::new()));
            let merged = entry.0.start.min(start)..entry.0.end.max(end);
            if merged.end - merged.start > COALESCED_READ_BYTES && !entry.1.is_empty() {
                plans.push(std::mem::replace(entry, (start..end, Vec::new())));
            } else {
                entry.0 = merged;
            }
            entry.1.push((g, i));
        }
    }
    plans.extend(open.into_values());
    for (range, members) in plans {
        let read = Arc::new(GroupRead {
            range,
            read: OnceLock::new(),
        });
        for (g, i) in members {
            groups[g][i].shared = Some(Arc::clone(&read));
        }
    }
}

/// Bytes fetched on demand by this process, and key-group sections fetched (for the
/// run's report and the tests).
static FETCHED_BYTES: AtomicU64 = AtomicU64::new(0);
static FETCHED_SECTIONS: AtomicU64 = AtomicU64::new(0);
/// Ranged reads made for them.
static FETCH_REQUESTS: AtomicU64 = AtomicU64::new(0);
/// Time spent in those fetches (microseconds, summed over threads).
static FETCH_MICROS: AtomicU64 = AtomicU64::new(0);
/// [`FETCHED_BYTES`] when the first key group was fetched because a key of it was
/// accessed (`u64::MAX`: not yet): what was read before any record touched the state.
static BEFORE_FIRST_ACCESS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Shared files a fetch found missing or damaged in this process: a restart must not
/// restore a checkpoint listing them again (its restore would fail the same way, over and
/// over), so [`is_known_bad`] makes the checkpoint unusable, as a damaged file found by an
/// eager restore does.
fn known_bad() -> &'static Mutex<HashSet<PathBuf>> {
    static BAD: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    BAD.get_or_init(Default::default)
}

/// Why the shared file `shown` cannot be used, if a fetch of this process found it missing
/// or damaged.
pub fn is_known_bad(shown: &std::path::Path) -> bool {
    known_bad()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(shown)
}

/// What this process fetched on demand (for the run's report and the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchStats {
    /// Sections fetched (one state's part of one key group of one file each).
    pub sections: u64,
    /// Ranged reads made for them (one per key group and file, shared by its states).
    pub requests: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Time spent fetching them, in microseconds.
    pub micros: u64,
    /// Bytes fetched before the first key group was fetched for an access of one of its
    /// keys (`None`: none was).
    pub before_first_access: Option<u64>,
}

/// What this process fetched on demand so far.
pub fn fetch_stats() -> FetchStats {
    let before = BEFORE_FIRST_ACCESS.load(Ordering::Relaxed);
    FetchStats {
        sections: FETCHED_SECTIONS.load(Ordering::Relaxed),
        requests: FETCH_REQUESTS.load(Ordering::Relaxed),
        bytes: FETCHED_BYTES.load(Ordering::Relaxed),
        micros: FETCH_MICROS.load(Ordering::Relaxed),
        before_first_access: (before != u64::MAX).then_some(before),
    }
}

/// What the run reports at its end about a lazy restore (`None`: nothing was fetched on
/// demand): sections, bytes, reads and time, and the bytes fetched before any record
/// touched a key group — zero unless timers or a migrating state needed theirs first.
pub fn fetch_report() -> Option<String> {
    let f = fetch_stats();
    (f.sections > 0).then(|| {
        format!(
            "lazy restore: fetched {} key-group sections ({} bytes in {} reads, {} ms) from \
             the checkpoint storage on demand; {} bytes before the first access of a key group",
            f.sections,
            f.bytes,
            f.requests,
            f.micros / 1000,
            f.before_first_access.unwrap_or(f.bytes)
        )
    })
}

/// Records that a key group is being fetched because one of its keys was accessed.
#[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
pub(crate) fn note_access_fetch() {
    let now = FETCHED_BYTES.load(Ordering::Relaxed);
    let _ =
        BEFORE_FIRST_ACCESS.compare_exchange(u64::MAX, now, Ordering::Relaxed, Ordering::Relaxed);
}

/// Reads `section` from storage (one ranged read) and checks it against its recorded
/// checksum. A missing or damaged file fails with an error naming it and the way out, and
/// is remembered ([`is_known_bad`]) so the restart that follows does not restore from it
/// again.
pub fn fetch(section: &RemoteSection) -> Result<SharedBytes> {
    try_fetch(section).map_err(|f| f.into_error(section))
}

/// [`fetch`], failing with why rather than an error.
pub(crate) fn try_fetch(section: &RemoteSection) -> std::result::Result<SharedBytes, Failed> {
    let span = section.span;
    let file = &section.file;
    if span.len == 0 {
        return Ok(SharedBytes::from(Vec::new()));
    }
    // One ranged read; counted (bytes, time) once however many sections share it.
    let read = |range: std::ops::Range<u64>| {
        let started = std::time::Instant::now();
        let len = range.end - range.start;
        let got = file.store.get(&file.key, Some(range)).map_err(|e| {
            // Missing: not the store out of reach, which a restart waits out.
            let missing = e.is_not_found();
            Failed {
                why: e.to_string(),
                bad: missing,
                missing,
            }
        })?;
        if got.len() as u64 != len {
            return Err(Failed::damaged(format!(
                "read {} bytes where the checkpoint recorded {len}: the file is truncated",
                got.len()
            )));
        }
        let micros = started.elapsed().as_micros().try_into().unwrap_or(u64::MAX);
        FETCH_MICROS.fetch_add(micros, Ordering::Relaxed);
        FETCHED_BYTES.fetch_add(len, Ordering::Relaxed);
        FETCH_REQUESTS.fetch_add(1, Ordering::Relaxed);
        Ok(got)
    };
    let bytes = match &section.shared {
        Some(group) => {
            let buf = group
                .read
                .get_or_init(|| read(group.range.clone()).map(Arc::new))
                .clone()?;
            let at = span.offset.checked_sub(group.range.start);
            let within = at.and_then(|at| {
                let at = usize::try_from(at).ok()?;
                SharedBytes::new(buf, at..at.checked_add(usize::try_from(span.len).ok()?)?)
            });
            within.ok_or_else(|| {
                Failed::damaged(
                    "the section lies outside its key group's read (the index is damaged)".into(),
                )
            })?
        }
        None => SharedBytes::from(read(span.offset..span.offset + span.len)?),
    };
    if bytes.len() as u64 != span.len {
        return Err(Failed::damaged(format!(
            "read {} bytes where the checkpoint recorded {}: the file is truncated",
            bytes.len(),
            span.len
        )));
    }
    let crc = crc32c::crc32c(&bytes);
    if crc != span.crc32c {
        return Err(Failed::damaged(format!(
            "the section's checksum is {crc:08x}, the checkpoint recorded {:08x}: the \
             file is damaged or was replaced",
            span.crc32c
        )));
    }
    FETCHED_SECTIONS.fetch_add(1, Ordering::Relaxed);
    Ok(bytes)
}

/// One key group's sections fetched (in chain order), each with whether it is a delta's;
/// or the first that failed (its index in `sections`) and why. Nothing is applied before
/// every section is in: a group is loaded from one chain whole, never partly from two.
#[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
pub(crate) fn try_fetch_group(
    sections: &[RemoteSection],
) -> std::result::Result<Vec<(bool, SharedBytes)>, (usize, Failed)> {
    sections
        .iter()
        .enumerate()
        .map(|(i, s)| try_fetch(s).map(|b| (s.delta, b)).map_err(|f| (i, f)))
        .collect()
}

/// Fetches every section of `remote` (in their order), splitting them into a base's and
/// the deltas' — what an eager restore hands a table: for the memory backend, and for a
/// state whose schema migrates (its bytes are re-encoded before loading).
pub fn fetch_all(remote: &[RemoteSection]) -> Result<(Vec<SharedBytes>, Vec<SharedBytes>)> {
    let (mut sections, mut changes) = (Vec::new(), Vec::new());
    for s in remote {
        let bytes = fetch(s)?;
        if bytes.is_empty() {
            continue;
        }
        if s.delta {
            changes.push(bytes);
        } else {
            sections.push(bytes);
        }
    }
    Ok((sections, changes))
}

impl<K: crate::state::Key> super::KeyedStateBackend<K> {
    /// Takes the sections `restored` left in storage, before the state is decided and
    /// loaded: returns them when the table will fetch them by key group on access (`lazy`:
    /// a table on disk); otherwise fetches them now into `restored`'s sections and
    /// changes — for the memory backend, a window state, and a state whose schema differs
    /// from the recorded one (a migration re-encodes every entry before loading). A probe
    /// loads nothing, so fetches nothing.
    pub(super) fn take_remote<S: crate::state::StateValue>(
        &mut self,
        restored: &mut Option<super::RestoredState>,
        version: u32,
        lazy: bool,
    ) -> Result<Vec<RemoteSection>> {
        let Some(r) = restored.as_mut().filter(|r| !r.remote.is_empty()) else {
            return Ok(Vec::new());
        };
        if self.probing {
            r.remote.clear();
            return Ok(Vec::new());
        }
        let same_schema = r
            .schema
            .as_ref()
            .is_none_or(|old| *old == crate::state::schema::schema_of::<S>(version));
        if lazy && self.disk.is_some() && same_schema {
            return Ok(std::mem::take(&mut r.remote));
        }
        let (sections, changes) = fetch_all(&r.remote)?;
        r.remote.clear();
        r.sections.extend(sections);
        r.changes.extend(changes);
        Ok(Vec::new())
    }
}
