//! Retention of the shared files of incremental checkpoints (the job folder's `shared/`):
//! a shared file is deleted only when no complete checkpoint in the job folder lists it.
//!
//! Guarantees:
//! * The reference counts are derived from the `_metadata` of the complete checkpoints in
//!   storage each time, never kept in memory alone: they are right after a restart, after a
//!   SIGKILL, and whichever run wrote the checkpoints.
//! * [`discard`] removes a checkpoint, then the shared files it listed or wrote that no
//!   remaining complete checkpoint lists (the files of a checkpoint that never completed are
//!   listed by none, so they go with it). While the job runs, retention holds those files
//!   back ([`Deferred`]) until every checkpoint triggered before the discard has finished:
//!   one of them may have been snapshotted on the discarded chain.
//! * [`sweep_orphans`], at the start and the end of a run that owns the job folder, removes
//!   every shared file no complete checkpoint lists: what a SIGKILL left of checkpoints in
//!   flight, what was still held back, what a late writer wrote.
//! * [`check_chain`]: a checkpoint about to complete lists only shared files that still
//!   exist — a file of an earlier checkpoint is removed only when no complete checkpoint
//!   lists it, so one still in storage is listed by a confirmed checkpoint, or was written
//!   for this one.
//! * A `_metadata` that cannot be read for another reason than damage (an I/O error) stops
//!   the deletion: a file is kept rather than removed on a guess.

use std::collections::HashSet;
use std::sync::Mutex;

use super::layout::shared_file_owner;
use super::metadata::{CheckpointMetadata, IncrementalKeyedRef};
use super::storage::{read_metadata, CheckpointStorage, StorageError};

/// The shared files listed by the complete checkpoints of `storage` other than `except`,
/// or `None` when one of their `_metadata` could not be read for another reason than
/// damage (a damaged one lists nothing: it cannot be restored).
fn referenced(storage: &CheckpointStorage, except: Option<u64>) -> Option<HashSet<String>> {
    let mut out = HashSet::new();
    for id in storage.completed_checkpoints().ok()? {
        if Some(id) == except {
            continue;
        }
        match read_metadata(&storage.checkpoint_path(id)) {
            Ok(payload) => {
                if let Ok(meta) = CheckpointMetadata::decode(&payload) {
                    out.extend(meta.shared_files().map(|f| f.path.clone()));
                }
            }
            Err(StorageError::Format(_)) => {}
            // Discarded meanwhile (no _metadata any more): it lists nothing.
            Err(StorageError::NotACheckpoint { .. }) => {}
            Err(_) => return None,
        }
    }
    Some(out)
}

/// The shared files checkpoint `id` lists (empty if it is not complete or unreadable).
fn listed_by(storage: &CheckpointStorage, id: u64) -> Vec<String> {
    if !storage.is_complete(id) {
        return Vec::new();
    }
    read_metadata(&storage.checkpoint_path(id))
        .ok()
        .and_then(|p| CheckpointMetadata::decode(&p).ok())
        .map(|m| m.shared_files().map(|f| f.path.clone()).collect())
        .unwrap_or_default()
}

/// Discards checkpoint `id` (complete or not, [`CheckpointStorage::discard`]) and then
/// every shared file it listed or wrote that no remaining complete checkpoint lists. For
/// a job folder no checkpoint is being written to (the end of a run, tools, tests); a
/// running job holds the files back ([`discard_holding`], [`Deferred`]).
pub fn discard(storage: &CheckpointStorage, id: u64) -> Result<(), StorageError> {
    let candidates = discard_holding(storage, id)?;
    if candidates.is_empty() {
        return Ok(());
    }
    let Some(kept) = referenced(storage, Some(id)) else {
        return Ok(());
    };
    for path in candidates {
        if !kept.contains(&path) {
            storage.delete_shared_file(&path)?;
        }
    }
    Ok(())
}

/// Discards checkpoint `id` like [`discard`], but returns the shared files it released
/// (listed or written by it, listed by no remaining complete checkpoint) instead of
/// deleting them: a running job holds them in [`Deferred`] until no checkpoint in flight
/// can still build on them.
pub fn discard_holding(storage: &CheckpointStorage, id: u64) -> Result<Vec<String>, StorageError> {
    let all = storage.shared_files()?;
    if all.is_empty() {
        storage.discard(id)?;
        return Ok(Vec::new());
    }
    let mut candidates = listed_by(storage, id);
    storage.discard(id)?;
    candidates.extend(
        all.into_iter()
            .filter(|p| p.rsplit('/').next().and_then(shared_file_owner) == Some(id)),
    );
    Ok(candidates)
}

/// Shared files retention released while the job runs, each batch held until every
/// checkpoint triggered before its release has finished: a task may have taken such a
/// checkpoint's snapshot on the chain of a checkpoint retention has just discarded (it had
/// not heard of the newer one yet), and the files must outlive that snapshot. Checkpoints
/// triggered later build on the newer chain ([`check_chain`] catches the rest).
#[derive(Debug, Default)]
pub struct Deferred {
    /// `(guard, files)`: released when no checkpoint below `guard` is in flight.
    held: Mutex<Vec<(u64, Vec<String>)>>,
}

impl Deferred {
    /// Holds `files` until every checkpoint with an id below `next_id` has finished.
    pub fn hold(&self, next_id: u64, files: Vec<String>) {
        if !files.is_empty() {
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            held.push((next_id, files));
        }
    }

    /// Deletes the held files whose checkpoints have all finished (`oldest_pending` is the
    /// oldest checkpoint still in flight) and that no complete checkpoint lists now.
    pub fn release(
        &self,
        storage: &CheckpointStorage,
        oldest_pending: Option<u64>,
    ) -> Result<(), StorageError> {
        let due: Vec<String> = {
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut *held)
                .into_iter()
                .partition(|(guard, _)| oldest_pending.is_none_or(|p| p >= *guard));
            *held = keep;
            due.into_iter().flat_map(|(_, files)| files).collect()
        };
        if due.is_empty() {
            return Ok(());
        }
        let Some(kept) = referenced(storage, None) else {
            return Ok(());
        };
        for path in due {
            if !kept.contains(&path) {
                storage.delete_shared_file(&path)?;
            }
        }
        Ok(())
    }
}

/// Removes the empty `shared/<uid>/` folders and `shared/` itself once empty (local
/// storage; object storage has no folders). Only when no checkpoint is being written.
pub fn prune_empty_folders(storage: &CheckpointStorage) -> Result<(), StorageError> {
    storage.prune_shared_folders()
}

/// Removes every shared file no complete checkpoint lists, and every half-written one (a
/// temp file a writer killed mid-file left: no run writes any more to a folder whose owner
/// sweeps it); returns how many. Only for a run that owns the job folder and has no
/// checkpoint in flight (its start): a file being written for a checkpoint in flight is
/// listed by none yet.
pub fn sweep_orphans(storage: &CheckpointStorage) -> Result<usize, StorageError> {
    let mut removed = 0;
    for temp in storage.shared_temp_files()? {
        storage.delete_shared_file(&temp)?;
        removed += 1;
    }
    let all = storage.shared_files()?;
    if all.is_empty() {
        return Ok(removed);
    }
    let Some(kept) = referenced(storage, None) else {
        return Ok(removed);
    };
    for path in all {
        if !kept.contains(&path) {
            storage.delete_shared_file(&path)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Before checkpoint `id`'s `_metadata` is written: every shared file its `chains` list
/// that an earlier checkpoint wrote must still be in storage (retention may have removed
/// the files of a chain that a snapshot taken before the news of a newer base still built
/// on). `Err` names the first missing one: the checkpoint then fails, and the next one
/// builds on the confirmed chain.
pub fn check_chain<'a>(
    storage: &CheckpointStorage,
    id: u64,
    chains: impl IntoIterator<Item = &'a IncrementalKeyedRef>,
) -> Result<(), String> {
    for chain in chains {
        for f in chain.files().filter(|f| f.checkpoint_id != id) {
            if !storage.shared_file_exists(&f.path) {
                return Err(format!(
                    "its keyed state of operator '{}' subtask {} builds on {} (written for \
                     checkpoint {}), which retention removed (a newer checkpoint replaced \
                     it); the next checkpoint builds on the newer one",
                    chain.uid, chain.subtask, f.path, f.checkpoint_id
                ));
            }
        }
    }
    Ok(())
}
