//! Checkpoint and savepoint inspection, for tools: what a checkpoint holds, read from
//! outside any job.
//!
//! This is what `weir state ls|dump` and `weir checkpoints list|inspect` are built on, and
//! what a test or an operations script uses to look into a checkpoint without knowing its
//! file formats: [`describe`] lists the operators, their states, kinds and sizes and the
//! per-task statistics (and verifies every file); [`raw_state`] loads one state's entries,
//! still encoded, for the caller to decode with the types it knows ([`RawState`]);
//! [`source_progress`] says how far each source had read, i.e. where a restore resumes.
//!
//! Every function treats the checkpoint as untrusted input: a damaged, foreign or partial
//! checkpoint is an [`InspectError`] naming the file and the way out, never a panic.
//! The file formats themselves (metadata layout, state files) are internal.

use std::path::Path;

pub use crate::checkpoint::inspect::{
    describe, kind_name, raw_state, CheckpointDescription, InspectError, KeyedEntry, ListElement,
    OperatorDescription, RawEntries, RawKeyGroup, RawList, RawState, Result, StateDescription,
    StateScope,
};
pub use crate::checkpoint::metadata::{
    IncrementalKeyedRef, SharedFile, SnapshotKind, SourceProgress, TaskCheckpointStats,
    TaskStatsMeta,
};
pub use crate::state::StateKind;

use crate::checkpoint::metadata::CheckpointMetadata;
use crate::storage::{read_metadata, METADATA_FILE_NAME};

/// How many records each source had emitted up to the checkpoint (or savepoint) in folder
/// `path`, as its `_metadata` records them: the position a restore resumes from, which is
/// what a user about to resume wants to see. Empty for checkpoints written before Weir
/// recorded it (metadata layouts 1 and 2).
///
/// Cheaper than [`describe`]: it reads `_metadata` only, not the state files.
pub fn source_progress(path: &Path) -> Result<Vec<SourceProgress>> {
    let payload = read_metadata(path)?;
    let meta = CheckpointMetadata::decode(&payload).map_err(|e| InspectError::Undecodable {
        path: path.join(METADATA_FILE_NAME),
        what: "checkpoint metadata",
        cause: e.to_string(),
    })?;
    Ok(meta.sources)
}

/// The incremental chains of the checkpoint in folder `path`: per keyed operator subtask,
/// the base and the deltas (in the job folder's `shared/`) its keyed state is made of.
/// Empty for a full checkpoint or a savepoint. Reads `_metadata` only.
pub fn incremental_chains(path: &Path) -> Result<Vec<IncrementalKeyedRef>> {
    Ok(crate::checkpoint::inspect::metadata(path)?.incremental)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_without_metadata_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = source_progress(dir.path()).unwrap_err().to_string();
        assert!(err.contains(&dir.path().display().to_string()), "{err}");
    }

    #[test]
    fn undecodable_metadata_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(METADATA_FILE_NAME), b"not a weir file").unwrap();
        assert!(source_progress(dir.path()).is_err());
    }
}
