//! Reading a checkpoint's files for inspection: `_metadata`, and every state file it names,
//! each checked against the metadata (as a restore checks them) before it is described.

use std::path::Path;

use super::super::layout::{self, KeyedStateFile, OperatorStateFile};
use super::super::metadata::{CheckpointMetadata, OperatorMeta};
use super::super::storage::{
    parse_checkpoint_dir_name, read_metadata, read_state_file, StorageError, METADATA_FILE_NAME,
};
use super::{InspectError, Result};

/// Reads and decodes `_metadata`; returns it with the file's size. A job folder given by
/// mistake gets a hint naming its checkpoints.
pub(super) fn read_meta(path: &Path) -> Result<(CheckpointMetadata, u64)> {
    let payload = match read_metadata(path) {
        Ok(p) => p,
        Err(e @ StorageError::NotACheckpoint { .. }) => {
            let checkpoints = complete_checkpoints_in(path);
            return Err(if checkpoints.is_empty() {
                e.into()
            } else {
                InspectError::JobFolder {
                    path: path.to_path_buf(),
                    checkpoints,
                }
            });
        }
        Err(e) => return Err(e.into()),
    };
    let file = path.join(METADATA_FILE_NAME);
    let meta = CheckpointMetadata::decode(&payload).map_err(|e| InspectError::Undecodable {
        path: file.clone(),
        what: "checkpoint metadata",
        cause: e.to_string(),
    })?;
    let size = payload.len() as u64 + envelope_len();
    for op in &meta.operators {
        for st in &op.subtasks {
            if st.subtask >= op.parallelism {
                return Err(InspectError::Inconsistent {
                    path: file,
                    detail: format!(
                        "operator '{}' lists subtask {} but has parallelism {}",
                        op.uid, st.subtask, op.parallelism
                    ),
                });
            }
        }
    }
    Ok((meta, size))
}

pub(super) fn envelope_len() -> u64 {
    (super::super::format::HEADER_LEN + super::super::format::TRAILER_LEN) as u64
}

/// Ids of the complete checkpoints directly under `dir` (a local folder or an `s3://`
/// prefix: read through its storage backend), ascending; empty if unreadable.
pub(super) fn complete_checkpoints_in(dir: &Path) -> Vec<u64> {
    let Ok(backend) = crate::storage::open_backend(dir) else {
        return Vec::new();
    };
    let mut ids: Vec<u64> = backend
        .list("")
        .unwrap_or_default()
        .iter()
        .filter_map(|name| {
            let id = parse_checkpoint_dir_name(name)?;
            let meta = format!("{name}/{METADATA_FILE_NAME}");
            backend.size(&meta).is_ok().then_some(id)
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// One operator's decoded state files.
pub(super) struct OpFiles {
    pub(super) operator: Vec<OpFile>,
    pub(super) keyed: Vec<KeyedFile>,
    /// Sum of the file sizes, envelopes included.
    pub(super) bytes: u64,
}

pub(super) struct OpFile {
    pub(super) subtask: u32,
    pub(super) lists: OperatorStateFile,
}

pub(super) struct KeyedFile {
    pub(super) subtask: u32,
    /// Entries across all its states, from the metadata.
    pub(super) entries: u64,
    pub(super) content: KeyedStateFile,
    /// Incremental: the deltas applied on top of this base (whose entries the metadata
    /// does not count), oldest first; empty for a full file.
    pub(super) deltas: Vec<KeyedStateFile>,
}

/// Reads, verifies and decodes every state file of `op`, checking that keyed files agree
/// with the metadata and are well formed (so callers may index sections by state).
pub(super) fn op_files(
    path: &Path,
    meta: &CheckpointMetadata,
    op: &OperatorMeta,
) -> Result<OpFiles> {
    let mut out = OpFiles {
        operator: Vec::new(),
        keyed: Vec::new(),
        bytes: 0,
    };
    for st in &op.subtasks {
        if let Some(f) = &st.operator_state {
            let crc = expected_crc(path, meta, &f.path)?;
            let payload = read_state_file(path, &f.path, layout::OPERATOR_STATE_KIND, crc)?;
            out.bytes += payload.len() as u64 + envelope_len();
            let lists: OperatorStateFile =
                layout::decode_operator_state_file(&payload).map_err(|cause| {
                    InspectError::Undecodable {
                        path: path.join(&f.path),
                        what: "operator state",
                        cause,
                    }
                })?;
            out.operator.push(OpFile {
                subtask: st.subtask,
                lists,
            });
        }
        if let Some(chain) = meta.incremental_of(&op.uid, st.subtask) {
            // The base and the deltas, in the job folder's shared/, each checked against
            // its recorded checksum; the base describes the states.
            let job = path.parent().unwrap_or(path);
            let mut content = None;
            let mut deltas = Vec::with_capacity(chain.deltas.len());
            for (n, f) in chain.files().enumerate() {
                let kind = if n == 0 {
                    layout::KEYED_STATE_KIND
                } else {
                    layout::KEYED_DELTA_KIND
                };
                let payload = read_state_file(job, &f.path, kind, Some(f.crc32c))?;
                out.bytes += payload.len() as u64 + envelope_len();
                let file = job.join(&f.path);
                let decoded: KeyedStateFile =
                    postcard::from_bytes(&payload).map_err(|e| InspectError::Undecodable {
                        path: file.clone(),
                        what: "keyed state",
                        cause: e.to_string(),
                    })?;
                check_keyed(&file, meta, &decoded)?;
                if n == 0 {
                    content = Some(decoded);
                } else {
                    deltas.push(decoded);
                }
            }
            if let Some(content) = content {
                out.keyed.push(KeyedFile {
                    subtask: st.subtask,
                    entries: 0,
                    content,
                    deltas,
                });
            }
        } else if let Some(k) = &st.keyed_state {
            let file = path.join(&k.file.path);
            let crc = expected_crc(path, meta, &k.file.path)?;
            let payload = read_state_file(path, &k.file.path, layout::KEYED_STATE_KIND, crc)?;
            out.bytes += payload.len() as u64 + envelope_len();
            let content: KeyedStateFile =
                postcard::from_bytes(&payload).map_err(|e| InspectError::Undecodable {
                    path: file.clone(),
                    what: "keyed state",
                    cause: e.to_string(),
                })?;
            check_keyed(&file, meta, &content)?;
            out.keyed.push(KeyedFile {
                subtask: st.subtask,
                entries: k.entries,
                content,
                deltas: Vec::new(),
            });
        }
    }
    Ok(out)
}

/// The CRC-32C the metadata ties the file at `relative` to; a file it does not tie to this
/// checkpoint is reported as an inconsistency, as a restore would refuse it.
fn expected_crc(path: &Path, meta: &CheckpointMetadata, relative: &str) -> Result<Option<u32>> {
    meta.expected_crc(relative)
        .map_err(|detail| InspectError::Inconsistent {
            path: path.join(relative),
            detail,
        })
}

/// The layout's shape checks ([`layout::check_keyed_file`]), reported as an inconsistency
/// of `file`.
pub(super) fn check_keyed(
    file: &Path,
    meta: &CheckpointMetadata,
    content: &KeyedStateFile,
) -> Result<()> {
    content
        .check(meta.max_parallelism)
        .map_err(|detail| InspectError::Inconsistent {
            path: file.to_path_buf(),
            detail,
        })
}
