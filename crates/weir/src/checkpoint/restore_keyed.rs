//! The keyed side of a restore: the keyed-state files and chains a checkpoint lists, read
//! and checked, and each subtask's share of them — the sections of its key groups, per
//! state, with the deltas to apply after them and what a lazy restore left in storage.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::{decode, job_folder, RestoredCheckpoint};
use crate::checkpoint::layout::{self, KeyedStateFileRef};
use crate::checkpoint::metadata::{CheckpointMetadata, IncrementalKeyedRef, SharedFile};
use crate::checkpoint::shared_bytes::SharedBytes;
use crate::checkpoint::storage::read_state_payload;
use crate::error::{Error, Result};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed::{RestoredKeyedState, RestoredState};
use crate::state::operator::{redistribute, AssignedLists};
use crate::state::StateKind;

/// A keyed-state file ([`KeyedStateFile`](super::layout::KeyedStateFile)) as loaded: its header fields,
/// and per key group one range of the file's buffer per state.
pub(super) struct LoadedKeyedFile {
    pub(super) range: KeyGroupRange,
    pub(super) states: Vec<(String, StateKind)>,
    pub(super) ttl: Vec<bool>,
    pub(super) groups: Vec<(u32, Vec<SharedBytes>)>,
}

impl LoadedKeyedFile {
    /// Decodes the keyed-state file payload `payload` (read from `path`), keeping its
    /// sections as ranges of `payload`'s buffer, and checks its shape against a checkpoint
    /// of `max_parallelism` key groups ([`layout::check_keyed_file`]).
    pub(super) fn decode(
        path: &Path,
        payload: &SharedBytes,
        max_parallelism: u32,
    ) -> Result<LoadedKeyedFile> {
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

/// Reads and checks one subtask's chain of an incremental checkpoint (in the job folder's
/// `shared/`, beside the checkpoint folder at `path`): its base and its deltas, each against
/// the checksum `_metadata` recorded. A missing or damaged file fails the whole checkpoint,
/// naming the file, so [`load_latest`] falls back to an earlier one.
pub(super) fn load_chain(
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

impl RestoredCheckpoint {
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
    pub(super) fn restored_state<'k>(
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

    pub(super) fn is_dropped(&self, uid: &str, name: &str) -> bool {
        !self.dropped.is_empty() && self.dropped.contains(&(uid.to_string(), name.to_string()))
    }
}
