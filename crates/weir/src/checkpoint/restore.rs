//! Loading a checkpoint back: validation, fallback, and each subtask's share of the state.
//!
//! [`load`] reads `_metadata` and every state file it names, verifying each envelope's
//! checksum, so a corrupt checkpoint is rejected as a whole before any task starts — never
//! half-loaded. [`load_latest`] walks complete checkpoints newest first and falls back past
//! the ones that fail to load, reporting each skip (docs/architecture.md §6).
//!
//! Keyed state is not copied after the read: each file stays one buffer, its envelope and
//! layout checked, and every key-group section handed to a subtask is a range of it
//! ([`SharedBytes`]). The entries themselves are decoded when the operator declares the
//! state (`Table::restore`), where their types are known.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::layout::{self, ChannelStateFile, KeyedStateFileRef, OperatorStateFile};
use super::metadata::{CheckpointMetadata, IncrementalKeyedRef, SharedFile};
use super::shared_bytes::SharedBytes;
use super::storage::{read_metadata, read_state_file, read_state_payload, CheckpointStorage};
use crate::error::{Error, Result};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed::{
    self as remote, FileIndex, GroupRead, RemoteFile, RemoteSection, RestoredKeyedState,
    RestoredState,
};
use crate::state::operator::{redistribute, AssignedLists};
use crate::state::schema::StateSchema;
use crate::state::StateKind;
use crate::storage::format::{HEADER_LEN, TRAILER_LEN};

/// A fully loaded and verified checkpoint.
pub struct RestoredCheckpoint {
    /// Its folder.
    pub path: PathBuf,
    /// Its metadata.
    pub meta: CheckpointMetadata,
    operator_state: HashMap<String, Vec<Option<OperatorStateFile>>>,
    keyed_state: HashMap<String, Vec<LoadedKeyedFile>>,
    /// The deltas of incremental checkpoints, by operator: each subtask's chain in order
    /// (applied after `keyed_state`, key group by key group).
    keyed_deltas: HashMap<String, Vec<LoadedKeyedFile>>,
    /// Channel state (unaligned checkpoints) by receiving operator: its parallelism when
    /// the checkpoint was taken and its files, decoded and checked.
    channel_state: HashMap<String, (u32, Vec<ChannelStateFile>)>,
    /// Keyed states (uid, name) a run drops rather than restores: incompatible with the
    /// job's new types, dropped because `--allow-non-restored-state` said so.
    dropped: std::collections::HashSet<(String, String)>,
    /// Chains of incremental checkpoints left in storage by a lazy restore, by operator
    /// (issue 25 item 4): their files were checked by size, not read.
    remote_chains: HashMap<String, Vec<RemoteChain>>,
}

/// One subtask's chain left in the checkpoint storage: each file with its index, base
/// first.
struct RemoteChain {
    range: KeyGroupRange,
    files: Vec<(Arc<RemoteFile>, Arc<FileIndex>, bool)>,
}

/// Whether a restore leaves the shared files of incremental checkpoints in storage and
/// fetches key groups on first access: by default when the checkpoint storage is remote
/// (an object store, where reading the whole state first is what costs), as Flink's ForSt
/// backend does; `WEIR_LAZY_RESTORE=true|false` forces it either way (tests, benchmarks).
fn lazy_restore(store: &dyn crate::storage::backend::StorageBackend) -> bool {
    match std::env::var("WEIR_LAZY_RESTORE").as_deref() {
        Ok("true" | "1") => true,
        Ok("false" | "0") => false,
        _ => store
            .local_file(crate::storage::METADATA_FILE_NAME)
            .is_none(),
    }
}

/// A keyed-state file ([`KeyedStateFile`](super::layout::KeyedStateFile)) as loaded: its header fields,
/// and per key group one range of the file's buffer per state.
struct LoadedKeyedFile {
    range: KeyGroupRange,
    states: Vec<(String, StateKind)>,
    ttl: Vec<bool>,
    groups: Vec<(u32, Vec<SharedBytes>)>,
}

impl LoadedKeyedFile {
    /// Decodes the keyed-state file payload `payload` (read from `path`), keeping its
    /// sections as ranges of `payload`'s buffer, and checks its shape against a checkpoint
    /// of `max_parallelism` key groups ([`layout::check_keyed_file`]).
    fn decode(path: &Path, payload: &SharedBytes, max_parallelism: u32) -> Result<LoadedKeyedFile> {
        let file: KeyedStateFileRef<'_> = decode(path, "keyed state", payload)?;
        file.check(max_parallelism)
            .map_err(|e| Error::Restore(format!("{}: {e}", path.display())))?;
        let share = |bytes: &[u8]| {
            payload
                .slice_ref(bytes)
                .expect("postcard borrows sections from the payload it decodes")
        };
        Ok(LoadedKeyedFile {
            range: file.range,
            states: file.states,
            ttl: file.ttl,
            groups: file
                .groups
                .into_iter()
                .map(|s| (s.group, s.states.into_iter().map(share).collect()))
                .collect(),
        })
    }
}

fn decode<'a, T: Deserialize<'a>>(path: &Path, what: &str, bytes: &'a [u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| Error::StateDecode {
        what: format!("{what} in {}", path.display()),
        cause: e.to_string(),
    })
}

/// The CRC-32C the metadata ties the file at `relative` to (see
/// [`CheckpointMetadata::expected_crc`]); a file it does not tie to this checkpoint makes
/// the whole checkpoint unusable, like a corrupted one.
fn expected_crc(path: &Path, meta: &CheckpointMetadata, relative: &str) -> Result<Option<u32>> {
    meta.expected_crc(relative).map_err(|reason| {
        Error::Restore(format!(
            "refusing state file {}: {reason}; the checkpoint was assembled from other \
             checkpoints' files or its metadata is damaged, restore from another checkpoint",
            path.join(relative).display()
        ))
    })
}

/// Loads and verifies the checkpoint (or savepoint) in folder `path`. The shared files of
/// an incremental checkpoint on remote storage are checked by size and left there, their
/// key groups fetched on first access ([`lazy_restore`]).
pub fn load(path: &Path) -> Result<RestoredCheckpoint> {
    load_with(path, None)
}

/// [`load`], with a lazy restore forced on or off (`lazy`), or decided as [`load`] does
/// (`None`).
pub(crate) fn load_with(path: &Path, lazy: Option<bool>) -> Result<RestoredCheckpoint> {
    let meta_bytes = read_metadata(path)?;
    let meta = CheckpointMetadata::decode(&meta_bytes).map_err(|e| Error::StateDecode {
        what: format!(
            "checkpoint metadata in {}",
            path.join("_metadata").display()
        ),
        cause: e.to_string(),
    })?;
    let mut operator_state = HashMap::new();
    let mut keyed_state: HashMap<String, Vec<LoadedKeyedFile>> = HashMap::new();
    let mut keyed_deltas: HashMap<String, Vec<LoadedKeyedFile>> = HashMap::new();
    let mut remote_chains: HashMap<String, Vec<RemoteChain>> = HashMap::new();
    let mut lazy_store = None;
    for op in &meta.operators {
        let mut per_subtask: Vec<Option<OperatorStateFile>> = vec![None; op.parallelism as usize];
        for st in &op.subtasks {
            if st.subtask >= op.parallelism {
                return Err(Error::Restore(format!(
                    "{}: operator '{}' lists subtask {} but has parallelism {}; the metadata is inconsistent",
                    path.display(), op.uid, st.subtask, op.parallelism
                )));
            }
            if let Some(f) = &st.operator_state {
                let crc = expected_crc(path, &meta, &f.path)?;
                let bytes = read_state_file(path, &f.path, layout::OPERATOR_STATE_KIND, crc)?;
                let lists = layout::decode_operator_state_file(&bytes).map_err(|cause| {
                    Error::StateDecode {
                        what: format!("operator state in {}", path.join(&f.path).display()),
                        cause,
                    }
                })?;
                per_subtask[st.subtask as usize] = Some(lists);
            }
            if let Some(chain) = meta.incremental_of(&op.uid, st.subtask) {
                if let Some(index) = meta.incremental_index_of(chain) {
                    let store = match &lazy_store {
                        Some(s) => Some(Arc::clone(s)),
                        None => {
                            let job = job_folder(path)?;
                            let store: Arc<dyn crate::storage::backend::StorageBackend> =
                                Arc::from(crate::storage::open_backend(job)?);
                            lazy.unwrap_or_else(|| lazy_restore(&*store)).then(|| {
                                lazy_store = Some(Arc::clone(&store));
                                store
                            })
                        }
                    };
                    if let Some(store) = store {
                        let remote = check_remote_chain(path, &meta, chain, index, store)?;
                        remote_chains
                            .entry(op.uid.clone())
                            .or_default()
                            .push(remote);
                        continue;
                    }
                }
                let (base, deltas) = load_chain(path, &meta, chain)?;
                keyed_state.entry(op.uid.clone()).or_default().push(base);
                keyed_deltas
                    .entry(op.uid.clone())
                    .or_default()
                    .extend(deltas);
            } else if let Some(k) = &st.keyed_state {
                let crc = expected_crc(path, &meta, &k.file.path)?;
                let payload =
                    read_state_payload(path, &k.file.path, layout::KEYED_STATE_KIND, crc)?;
                let file = LoadedKeyedFile::decode(
                    &path.join(&k.file.path),
                    &payload,
                    meta.max_parallelism,
                )?;
                keyed_state.entry(op.uid.clone()).or_default().push(file);
            }
        }
        operator_state.insert(op.uid.clone(), per_subtask);
    }
    let channel_state = load_channel_state(path, &meta)?;
    Ok(RestoredCheckpoint {
        path: path.to_path_buf(),
        meta,
        operator_state,
        keyed_state,
        keyed_deltas,
        channel_state,
        dropped: Default::default(),
        remote_chains,
    })
}

/// The job folder of the checkpoint folder `path`, where the shared files of incremental
/// checkpoints live.
fn job_folder(path: &Path) -> Result<&Path> {
    path.parent().ok_or_else(|| {
        Error::Restore(format!(
            "{}: an incremental checkpoint's shared files live in its job folder, and this \
             path has none; restore from the checkpoint folder inside its job folder",
            path.display()
        ))
    })
}

/// Checks one subtask's chain without reading it (a lazy restore): every file must exist
/// with the size `_metadata` recorded and must not have failed a fetch earlier in this
/// process, and its index must fit its size and the checkpoint's key groups. What this
/// cannot see (a file damaged in place) is found by each section's checksum when fetched.
fn check_remote_chain(
    path: &Path,
    meta: &CheckpointMetadata,
    chain: &IncrementalKeyedRef,
    index: &[FileIndex],
    store: Arc<dyn crate::storage::backend::StorageBackend>,
) -> Result<RemoteChain> {
    let job = job_folder(path)?;
    let mut files = Vec::with_capacity(index.len());
    let mut range = None;
    for (i, (f, idx)) in chain.files().zip(index).enumerate() {
        let shown = job.join(&f.path);
        let fail = |why: String| {
            Error::Restore(format!(
                "shared state file {} of checkpoint {} (written for checkpoint {}): {why}; \
                 restore from another checkpoint",
                shown.display(),
                meta.checkpoint_id,
                f.checkpoint_id
            ))
        };
        if remote::is_known_bad(&shown) {
            return Err(fail(
                "a fetch of its key groups failed earlier in this run (see above)".into(),
            ));
        }
        let size = store.size(&f.path).map_err(|e| {
            if e.is_not_found() {
                fail(
                    "it is missing: the checkpoint is incomplete or its shared files were \
                      deleted"
                        .into(),
                )
            } else {
                fail(e.to_string())
            }
        })?;
        if size != f.size {
            return Err(fail(format!(
                "it has {size} bytes where the checkpoint recorded {}: it is damaged or was \
                 replaced",
                f.size
            )));
        }
        let body_end = f.size.saturating_sub(TRAILER_LEN as u64);
        let states = idx.states.len();
        for g in &idx.groups {
            let bad = g.sections.len() != states
                || g.group >= meta.max_parallelism
                || g.sections.iter().any(|s| {
                    s.offset < HEADER_LEN as u64 || s.offset.saturating_add(s.len) > body_end
                });
            if bad {
                return Err(fail(format!(
                    "its index in _metadata does not fit the file (key group {}); the \
                     metadata is damaged",
                    g.group
                )));
            }
        }
        let file_range = idx.groups.first().zip(idx.groups.last());
        if i == 0 {
            range = file_range.map(|(a, b)| (a.group, b.group));
        }
        files.push((
            Arc::new(RemoteFile {
                store: Arc::clone(&store),
                key: f.path.clone(),
                shown,
                checkpoint_id: meta.checkpoint_id,
            }),
            Arc::new(idx.clone()),
            i > 0,
        ));
    }
    // The chain's range: what its subtask owned (the keyed file reference records it).
    let range = meta
        .operators
        .iter()
        .find(|o| o.uid == chain.uid)
        .and_then(|o| o.subtasks.iter().find(|s| s.subtask == chain.subtask))
        .and_then(|s| s.keyed_state.as_ref())
        .map(|k| k.range)
        .or_else(|| {
            range.map(|(a, b)| KeyGroupRange {
                start: a,
                end: b + 1,
            })
        })
        .unwrap_or(KeyGroupRange { start: 0, end: 0 });
    Ok(RemoteChain { range, files })
}

/// Reads and checks one subtask's chain of an incremental checkpoint (in the job folder's
/// `shared/`, beside the checkpoint folder at `path`): its base and its deltas, each against
/// the checksum `_metadata` recorded. A missing or damaged file fails the whole checkpoint,
/// naming the file, so [`load_latest`] falls back to an earlier one.
fn load_chain(
    path: &Path,
    meta: &CheckpointMetadata,
    chain: &IncrementalKeyedRef,
) -> Result<(LoadedKeyedFile, Vec<LoadedKeyedFile>)> {
    let job = job_folder(path)?;
    let read = |f: &SharedFile, kind| -> Result<LoadedKeyedFile> {
        let payload = read_state_payload(job, &f.path, kind, Some(f.crc32c)).map_err(|e| {
            Error::Restore(format!(
                "shared state file {} of checkpoint {} (written for checkpoint {}): {e}",
                job.join(&f.path).display(),
                meta.checkpoint_id,
                f.checkpoint_id
            ))
        })?;
        LoadedKeyedFile::decode(&job.join(&f.path), &payload, meta.max_parallelism)
    };
    let base = read(&chain.base, layout::KEYED_STATE_KIND)?;
    let mut deltas = Vec::with_capacity(chain.deltas.len());
    for d in &chain.deltas {
        let delta = read(d, layout::KEYED_DELTA_KIND)?;
        if delta.range != base.range {
            return Err(Error::Restore(format!(
                "{}: a delta for key groups {}..{} chained on a base for {}..{}; the \
                 checkpoint's metadata is damaged, restore from another checkpoint",
                job.join(&d.path).display(),
                delta.range.start,
                delta.range.end,
                base.range.start,
                base.range.end
            )));
        }
        deltas.push(delta);
    }
    Ok((base, deltas))
}

/// Reads, verifies and decodes every channel-state file `meta` names (metadata layout 5),
/// so that a damaged one rejects the checkpoint before any task starts, like any other
/// state file.
fn load_channel_state(
    path: &Path,
    meta: &CheckpointMetadata,
) -> Result<HashMap<String, (u32, Vec<ChannelStateFile>)>> {
    let mut out: HashMap<String, (u32, Vec<ChannelStateFile>)> = HashMap::new();
    for r in &meta.channel_state {
        let crc = expected_crc(path, meta, &r.file.path)?;
        let bytes = read_state_file(path, &r.file.path, layout::CHANNEL_STATE_KIND, crc)?;
        let shown = path.join(&r.file.path);
        let file = ChannelStateFile::decode(&bytes, &shown.display().to_string())?;
        if (file.subtask, file.channel) != (r.subtask, r.channel) || r.subtask >= r.parallelism {
            return Err(Error::Restore(format!(
                "{}: holds subtask {} channel {}, but the metadata names it for subtask {} \
                 channel {} of {}; the checkpoint is inconsistent, restore from another one",
                shown.display(),
                file.subtask,
                file.channel,
                r.subtask,
                r.channel,
                r.parallelism
            )));
        }
        let entry = out
            .entry(r.uid.clone())
            .or_insert((r.parallelism, Vec::new()));
        entry.1.push(file);
    }
    Ok(out)
}

/// A checkpoint being loaded on a background thread, so that reading and verifying it
/// overlaps other work: after a failure, the teardown of the failed attempt and the restart
/// delay (with 1 GB of state, reading it back is most of a restart's time).
pub struct Prefetch {
    path: PathBuf,
    loading: Option<std::thread::JoinHandle<Result<RestoredCheckpoint>>>,
}

impl Prefetch {
    /// Starts loading the checkpoint in folder `path` (on the caller's thread at
    /// [`Prefetch::wait`] instead, if no thread can be started).
    pub fn start(path: PathBuf) -> Prefetch {
        let for_thread = path.clone();
        let loading = std::thread::Builder::new()
            .name("weir-restore".into())
            .spawn(move || load(&for_thread))
            .ok();
        Prefetch { path, loading }
    }

    /// The loaded checkpoint, or the folder and why it did not load.
    pub fn wait(self) -> std::result::Result<RestoredCheckpoint, (PathBuf, Error)> {
        let loaded = match self.loading {
            None => load(&self.path),
            Some(thread) => thread.join().unwrap_or_else(|_| {
                Err(Error::Restore(
                    "loading the checkpoint panicked (a bug in Weir; please report it)".into(),
                ))
            }),
        };
        loaded.map_err(|e| (self.path, e))
    }
}

/// The newest complete checkpoint in `storage` that loads cleanly, with one message per
/// newer checkpoint that was skipped and why. `None` if there is no usable checkpoint.
pub fn load_latest(
    storage: &CheckpointStorage,
) -> Result<(Option<RestoredCheckpoint>, Vec<String>)> {
    let mut skipped = Vec::new();
    for id in storage.completed_checkpoints()?.into_iter().rev() {
        let path = storage.checkpoint_path(id);
        match load(&path) {
            Ok(c) => return Ok((Some(c), skipped)),
            Err(e) => skipped.push(format!(
                "skipping checkpoint {id} ({}): {e}",
                path.display()
            )),
        }
    }
    Ok((None, skipped))
}

impl RestoredCheckpoint {
    /// Whether a job whose operators have `uids` and `max_parallelism` key groups can start
    /// from this checkpoint, checked before any thread starts: the key groups must be the
    /// same (they cannot be remapped), and state of an operator the job no longer has is
    /// dropped only when `allow_non_restored_state` says so (Flink's
    /// `--allowNonRestoredState`). Returns the notice to show when state is dropped.
    pub fn check_compatible(
        &self,
        uids: &[String],
        max_parallelism: u32,
        allow_non_restored_state: bool,
    ) -> Result<Option<String>> {
        if self.meta.max_parallelism != max_parallelism {
            return Err(Error::Restore(format!(
                "{} was taken with max parallelism {}, the job uses {}; run with --max-parallelism {}",
                self.path.display(),
                self.meta.max_parallelism,
                max_parallelism,
                self.meta.max_parallelism
            )));
        }
        let unmatched: Vec<&str> = self
            .uids()
            .filter(|u| !uids.iter().any(|p| p == u))
            .collect();
        if unmatched.is_empty() {
            return Ok(None);
        }
        if !allow_non_restored_state {
            return Err(Error::Restore(format!(
                "{} holds state for operators this job does not have (uids: {}); \
                 give the operators their old uids, or pass --allow-non-restored-state to drop that state",
                self.path.display(),
                unmatched.join(", ")
            )));
        }
        Ok(Some(format!(
            "dropping state of operators no longer in the job: {}",
            unmatched.join(", ")
        )))
    }

    /// Operator `uid`'s operator-state lists (operator, union and broadcast state), each
    /// with the element schema it was written with (`None`: written before schemas).
    pub fn operator_lists(&self, uid: &str) -> BTreeMap<String, Option<StateSchema>> {
        let mut out = BTreeMap::new();
        for file in self.operator_state.get(uid).into_iter().flatten().flatten() {
            for (name, list) in file {
                let e = out.entry(name.clone()).or_insert(None);
                if e.is_none() {
                    *e = list.schema.clone();
                }
            }
        }
        out
    }

    /// Whether any subtask stored elements in operator `uid`'s list `name` (a list with
    /// none restores whatever its type, as `decode_elements` reads it).
    pub fn operator_list_has_elements(&self, uid: &str, name: &str) -> bool {
        let files = self.operator_state.get(uid).into_iter().flatten().flatten();
        files
            .filter_map(|file| file.iter().find(|(n, _)| n.as_str() == name))
            .any(|(_, list)| !list.elements.is_empty())
    }

    /// The uids that have state in this checkpoint (channel state included).
    pub fn uids(&self) -> impl Iterator<Item = &str> {
        let stateless = self
            .channel_state
            .keys()
            .filter(|u| !self.meta.operators.iter().any(|o| &o.uid == *u));
        self.meta
            .operators
            .iter()
            .map(|o| o.uid.as_str())
            .chain(stateless.map(String::as_str))
    }

    /// Operator `uid`'s channel state (unaligned checkpoints): its parallelism when the
    /// checkpoint was taken and every subtask's files, or `None` when it has none.
    pub fn channel_state_of(&self, uid: &str) -> Option<(u32, &[ChannelStateFile])> {
        self.channel_state
            .get(uid)
            .map(|(p, files)| (*p, files.as_slice()))
    }

    /// The channel state subtask `subtask` of `parallelism` of a *non-keyed* operator
    /// `uid` replays before any new input: at the checkpoint's parallelism its own files,
    /// at another the files of the old subtasks `j` with `j % parallelism == subtask` (any
    /// subtask may take a non-keyed record). A keyed operator's records must reach the
    /// owner of their key group instead, which takes their key: the graph re-partitions
    /// them (`EdgeFactory::reroute_keyed`).
    pub fn channel_state_for(
        &self,
        uid: &str,
        subtask: u32,
        parallelism: u32,
    ) -> Vec<ChannelStateFile> {
        let Some((old, files)) = self.channel_state_of(uid) else {
            return Vec::new();
        };
        files
            .iter()
            .filter(|f| {
                if old == parallelism {
                    f.subtask == subtask
                } else {
                    f.subtask % parallelism == subtask
                }
            })
            .cloned()
            .collect()
    }

    /// Subtask `subtask` of `parallelism`'s share of operator `uid`'s state: its operator
    /// state lists (redistributed) and the keyed-state sections of its key groups.
    pub fn state_for(
        &self,
        uid: &str,
        subtask: u32,
        parallelism: u32,
        max_parallelism: u32,
    ) -> Result<(AssignedLists, RestoredKeyedState)> {
        if max_parallelism != self.meta.max_parallelism {
            return Err(Error::Restore(format!(
                "{} was taken with max parallelism {}, the job uses {}; key groups cannot be \
                 remapped, so run with --max-parallelism {}",
                self.path.display(),
                self.meta.max_parallelism,
                max_parallelism,
                self.meta.max_parallelism
            )));
        }
        let lists = match self.operator_state.get(uid) {
            Some(old) => {
                let refs: Vec<_> = old.iter().map(|o| o.as_ref()).collect();
                redistribute(&refs, subtask, parallelism)
            }
            None => BTreeMap::new(),
        };
        let mut keyed: RestoredKeyedState = BTreeMap::new();
        let mine = KeyGroupRange::for_subtask(subtask, parallelism, max_parallelism);
        // The full snapshots' sections first, then each chain's deltas, oldest first, for
        // the same key groups.
        self.collect_keyed(&mut keyed, uid, mine, &self.keyed_state, |s| {
            &mut s.sections
        });
        self.collect_keyed(&mut keyed, uid, mine, &self.keyed_deltas, |s| {
            &mut s.changes
        });
        self.collect_remote(&mut keyed, uid, mine);
        Ok((lists, keyed))
    }

    /// Appends to `keyed` the sections of operator `uid`'s chains left in storage for the
    /// key groups of `mine`: per key group, the base's then each delta's, in chain order.
    fn collect_remote(&self, keyed: &mut RestoredKeyedState, uid: &str, mine: KeyGroupRange) {
        for chain in self.remote_chains.get(uid).into_iter().flatten() {
            if !layout::file_holds_groups_of(chain.range, mine) {
                continue;
            }
            for group in mine.start..mine.end {
                for (file, index, delta) in &chain.files {
                    let Ok(at) = index.groups.binary_search_by_key(&group, |g| g.group) else {
                        continue;
                    };
                    let spans = &index.groups[at].sections;
                    let wanted: Vec<_> = index
                        .states
                        .iter()
                        .zip(spans)
                        .enumerate()
                        .filter(|(_, ((name, _), span))| {
                            span.len > 0 && !self.is_dropped(uid, name)
                        })
                        .collect();
                    // One read of the group for every state that wants a section of it.
                    let wanted_spans: Vec<_> = wanted.iter().map(|(_, (_, s))| **s).collect();
                    let shared = GroupRead::new(&wanted_spans).filter(|_| wanted.len() > 1);
                    for (i, ((name, kind), span)) in wanted {
                        let ttl = index.ttl.get(i).copied().unwrap_or(false);
                        let state = self.restored_state(keyed, uid, ttl, name, *kind);
                        state.remote.push(RemoteSection {
                            file: Arc::clone(file),
                            group,
                            span: *span,
                            delta: *delta,
                            shared: shared.clone(),
                        });
                    }
                }
            }
        }
    }

    /// The notice of a lazy restore: how much keyed state stays in `shared` (the job's
    /// shared folder) to be fetched on first access; `None` if the restore read it all.
    pub fn lazy_notice(&self, shared: &Path) -> Option<String> {
        let remote = self.remote_bytes();
        (remote > 0).then(|| {
            format!(
                "restoring lazily: {remote} bytes of keyed state stay in {} and are fetched \
                 by key group on first access",
                shared.display()
            )
        })
    }

    /// Bytes of shared files a lazy restore left in storage (0: it read everything).
    pub fn remote_bytes(&self) -> u64 {
        self.remote_chains
            .values()
            .flatten()
            .flat_map(|c| &c.files)
            .map(|(_, index, _)| {
                index
                    .groups
                    .iter()
                    .flat_map(|g| &g.sections)
                    .map(|s| s.len)
                    .sum::<u64>()
            })
            .sum()
    }

    /// Appends to `keyed` the bytes `files` hold for operator `uid` in the key groups of
    /// `mine`, each state's into the list `into` picks (full sections or deltas): one walk
    /// for both, so a base and its chain always select the same key groups and states.
    fn collect_keyed(
        &self,
        keyed: &mut RestoredKeyedState,
        uid: &str,
        mine: KeyGroupRange,
        files: &HashMap<String, Vec<LoadedKeyedFile>>,
        into: fn(&mut RestoredState) -> &mut Vec<SharedBytes>,
    ) {
        for file in files.get(uid).into_iter().flatten() {
            if !layout::file_holds_groups_of(file.range, mine) {
                continue;
            }
            for (group, sections) in &file.groups {
                if !mine.contains(*group) {
                    continue;
                }
                for (i, ((name, kind), bytes)) in file.states.iter().zip(sections).enumerate() {
                    if !bytes.is_empty() && !self.is_dropped(uid, name) {
                        let ttl = file.ttl.get(i).copied().unwrap_or(false);
                        let state = self.restored_state(keyed, uid, ttl, name, *kind);
                        into(state).push(bytes.clone());
                    }
                }
            }
        }
    }

    /// The entry of `keyed` for state `name` (of `kind`, with TTL stamps if `ttl`), made
    /// if missing.
    fn restored_state<'k>(
        &self,
        keyed: &'k mut RestoredKeyedState,
        uid: &str,
        ttl: bool,
        name: &str,
        kind: StateKind,
    ) -> &'k mut RestoredState {
        keyed
            .entry(name.to_string())
            .or_insert_with(|| RestoredState {
                kind,
                ttl,
                sections: Vec::new(),
                changes: Vec::new(),
                schema: self.meta.state_schema(uid, name).cloned(),
                remote: Vec::new(),
            })
    }
}

impl RestoredCheckpoint {
    /// Every keyed state the checkpoint holds for operator `uid`, with its kind, TTL and
    /// recorded schema but no entries: what a probe backend declares against to decide
    /// each state before any task starts.
    pub fn recorded_keyed_states(&self, uid: &str) -> RestoredKeyedState {
        let mut out: RestoredKeyedState = BTreeMap::new();
        let deltas = self.keyed_deltas.get(uid).into_iter().flatten();
        for file in self
            .keyed_state
            .get(uid)
            .into_iter()
            .flatten()
            .chain(deltas)
        {
            for (i, (name, kind)) in file.states.iter().enumerate() {
                let ttl = file.ttl.get(i).copied().unwrap_or(false);
                self.restored_state(&mut out, uid, ttl, name, *kind);
            }
        }
        let remote = self.remote_chains.get(uid).into_iter().flatten();
        for (_, index, _) in remote.flat_map(|c| &c.files) {
            for (i, (name, kind)) in index.states.iter().enumerate() {
                let ttl = index.ttl.get(i).copied().unwrap_or(false);
                self.restored_state(&mut out, uid, ttl, name, *kind);
            }
        }
        out
    }

    /// Drops keyed state `name` of operator `uid` from what subtasks are handed: it starts
    /// empty (an incompatible state under `--allow-non-restored-state`).
    pub fn drop_state(&mut self, uid: &str, name: &str) {
        self.dropped.insert((uid.to_string(), name.to_string()));
    }

    fn is_dropped(&self, uid: &str, name: &str) -> bool {
        !self.dropped.is_empty() && self.dropped.contains(&(uid.to_string(), name.to_string()))
    }
}

#[path = "restore_claim.rs"]
mod claim;

#[cfg(test)]
#[path = "restore_tests.rs"]
mod tests;
