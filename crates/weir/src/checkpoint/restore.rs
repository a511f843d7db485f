//! Loading a checkpoint back: validation, fallback, and each subtask's share of the state.
//!
//! [`load`] reads `_metadata` and every state file it names, verifying each envelope's
//! checksum, so a corrupt checkpoint is rejected as a whole before any task starts — never
//! half-loaded. [`load_latest`] walks complete checkpoints newest first and falls back past
//! the ones that fail to load, reporting each skip (docs/architecture.md §6).
//!
//! Keyed state is not copied after the read: each file stays one buffer, its envelope and
//! layout checked, and every key-group section handed to a subtask is a range of it
//! ([`SharedBytes`](super::shared_bytes::SharedBytes)). The entries themselves are decoded
//! when the operator declares the state (`Table::restore`), where their types are known.
//!
//! Here: loading, fallback and what is not keyed state; `restore_keyed.rs` reads the keyed
//! files and chains and hands each subtask its key groups, `restore_lazy.rs` checks the
//! chains a lazy restore leaves in storage, `restore_claim.rs` picks the chain a subtask
//! continues.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::layout::{self, ChannelStateFile, OperatorStateFile};
use super::metadata::CheckpointMetadata;
use super::storage::{read_metadata, read_state_file, read_state_payload, CheckpointStorage};
use crate::error::{Error, Result};
use crate::state::schema::StateSchema;
use keyed::{load_chain, LoadedKeyedFile};
use lazy::{check_remote_chain, lazy_restore, RemoteChain};

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

/// The max parallelism of a checkpoint or savepoint folder, read from its `_metadata` alone,
/// without taking the folder or creating anything: so that a job whose `--max-parallelism`
/// was not given takes its key groups from the state it restores, which fixes them (as
/// Flink does). `None`: nothing readable there (the restore itself then reports why).
pub fn max_parallelism_at(path: &Path) -> Option<u32> {
    let bytes = read_metadata(path).ok()?;
    Some(CheckpointMetadata::decode(&bytes).ok()?.max_parallelism)
}

/// [`max_parallelism_at`] of the newest readable checkpoint of job folder
/// `<checkpoint_dir>/<job>` (what `--restore latest` starts from). `None`: no checkpoint
/// there (the run starts fresh).
pub fn latest_max_parallelism(checkpoint_dir: &Path, job: &str) -> Option<u32> {
    crate::storage::validate_name("job id", job).ok()?;
    let root = checkpoint_dir.join(job);
    let backend = crate::storage::open_backend(&root).ok()?;
    let mut ids: Vec<u64> = (backend.list("").ok()?.iter())
        .filter_map(|n| crate::storage::parse_checkpoint_dir_name(n))
        .collect();
    ids.sort_unstable();
    ids.iter()
        .rev()
        .find_map(|id| max_parallelism_at(&root.join(format!("chk-{id}"))))
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
}

#[path = "restore_claim.rs"]
mod claim;
#[path = "restore_keyed.rs"]
mod keyed;
#[path = "restore_lazy.rs"]
mod lazy;

#[cfg(test)]
#[path = "restore_tests.rs"]
mod tests;
