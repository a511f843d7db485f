//! Loading a checkpoint back: validation, fallback, and each subtask's share of the state.
//!
//! [`load`] reads `_metadata` and every state file it names, verifying each envelope's
//! checksum, so a corrupt checkpoint is rejected as a whole before any task starts — never
//! half-loaded. [`load_latest`] walks complete checkpoints newest first and falls back past
//! the ones that fail to load, reporting each skip (DESIGN.md §6).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::format::FileKind;
use super::metadata::{CheckpointMetadata, KeyedStateFile, OperatorStateFile};
use super::storage::{read_metadata, read_state_file, CheckpointStorage};
use crate::error::{Error, Result};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed::{RestoredKeyedState, RestoredState};
use crate::state::operator::{redistribute, AssignedLists};

/// A fully loaded and verified checkpoint.
pub struct RestoredCheckpoint {
    /// Its folder.
    pub path: PathBuf,
    /// Its metadata.
    pub meta: CheckpointMetadata,
    operator_state: HashMap<String, Vec<Option<OperatorStateFile>>>,
    keyed_state: HashMap<String, Vec<KeyedStateFile>>,
}

fn decode<T: serde::de::DeserializeOwned>(path: &Path, what: &str, bytes: &[u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| Error::StateDecode {
        what: format!("{what} in {}", path.display()),
        cause: e.to_string(),
    })
}

/// Loads and verifies the checkpoint (or savepoint) in folder `path`.
pub fn load(path: &Path) -> Result<RestoredCheckpoint> {
    let meta_bytes = read_metadata(path)?;
    let meta = CheckpointMetadata::decode(&meta_bytes).map_err(|e| Error::StateDecode {
        what: format!(
            "checkpoint metadata in {}",
            path.join("_metadata").display()
        ),
        cause: e.to_string(),
    })?;
    let mut operator_state = HashMap::new();
    let mut keyed_state: HashMap<String, Vec<KeyedStateFile>> = HashMap::new();
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
                let bytes = read_state_file(path, &f.path, FileKind::OperatorState)?;
                per_subtask[st.subtask as usize] =
                    Some(decode(&path.join(&f.path), "operator state", &bytes)?);
            }
            if let Some(k) = &st.keyed_state {
                let bytes = read_state_file(path, &k.file.path, FileKind::KeyedState)?;
                let file: KeyedStateFile = decode(&path.join(&k.file.path), "keyed state", &bytes)?;
                if file.max_parallelism != meta.max_parallelism {
                    return Err(Error::Restore(format!(
                        "{}: written with max parallelism {} but the checkpoint says {}",
                        path.join(&k.file.path).display(),
                        file.max_parallelism,
                        meta.max_parallelism
                    )));
                }
                keyed_state.entry(op.uid.clone()).or_default().push(file);
            }
        }
        operator_state.insert(op.uid.clone(), per_subtask);
    }
    Ok(RestoredCheckpoint {
        path: path.to_path_buf(),
        meta,
        operator_state,
        keyed_state,
    })
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
    /// The uids that have state in this checkpoint.
    pub fn uids(&self) -> impl Iterator<Item = &str> {
        self.meta.operators.iter().map(|o| o.uid.as_str())
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
        for file in self.keyed_state.get(uid).into_iter().flatten() {
            if !file.range.intersects(&mine) {
                continue;
            }
            for section in &file.groups {
                if !mine.contains(section.group) {
                    continue;
                }
                for (i, ((name, kind), bytes)) in
                    file.states.iter().zip(&section.states).enumerate()
                {
                    if !bytes.is_empty() {
                        keyed
                            .entry(name.clone())
                            .or_insert_with(|| RestoredState {
                                kind: *kind,
                                ttl: file.ttl.get(i).copied().unwrap_or(false),
                                sections: Vec::new(),
                            })
                            .sections
                            .push(bytes.clone());
                    }
                }
            }
        }
        Ok((lists, keyed))
    }
}
