//! The asynchronous phase of a snapshot: encoding a task's captured state and writing it.
//!
//! A task captures an immutable view of its state at the barrier (the synchronous phase,
//! on the processing thread) and hands it here as a [`SnapshotJob`]; a writer thread encodes
//! it per key group and writes the files while the task goes on processing records.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::format::FileKind;
use super::metadata::{
    FileRef, KeyGroupSection, KeyedFileRef, KeyedStateFile, SubtaskStateMeta, TaskCheckpointStats,
};
use super::storage::CheckpointStorage;
use crate::error::{Error, Result};
use crate::runtime::output::TaskSnapshot;
use crate::state::key_group::KeyGroupRange;

/// A task's state on its way to storage: captured at a barrier (encoded by the writer
/// thread), or already encoded — the final state of a finished source, which stands in for
/// it in every later checkpoint.
pub enum SnapshotPayload {
    /// Captured synchronously at a barrier; encoding happens on the writer thread.
    Captured(TaskSnapshot),
    /// Encoded once, written into each checkpoint that needs it.
    Encoded(Arc<EncodedSnapshot>),
}

/// A task's state, on its way to storage.
pub struct SnapshotJob {
    /// The job attempt the task belongs to (acks of older attempts are ignored).
    pub attempt: u32,
    /// The task's global index.
    pub task: usize,
    /// The task's subtask index.
    pub subtask: u32,
    /// The parallelism of the task's operators.
    pub parallelism: u32,
    /// The checkpoint.
    pub checkpoint_id: u64,
    /// The state.
    pub snapshot: SnapshotPayload,
    /// How long the capture blocked the task.
    pub sync: Duration,
    /// How long the barriers took to align.
    pub alignment: Duration,
    /// The task's state is frozen (its input ended or it is stopping): the encoded snapshot
    /// comes back with the acknowledgement, to stand in for the task once it exits.
    pub frozen: bool,
}

/// One operator's encoded state files (payloads before the envelope).
pub struct EncodedPart {
    uid: String,
    operator_state: Option<Vec<u8>>,
    keyed: Option<(Vec<u8>, KeyGroupRange, u64)>,
}

/// A task's state, encoded and ready to be written into any checkpoint folder.
pub struct EncodedSnapshot {
    parts: Vec<EncodedPart>,
}

impl std::fmt::Debug for EncodedSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let uids: Vec<&str> = self.parts.iter().map(|p| p.uid.as_str()).collect();
        f.debug_struct("EncodedSnapshot")
            .field("operators", &uids)
            .finish()
    }
}

/// One operator's part of a task acknowledgement.
#[derive(Debug, Clone)]
pub struct OperatorAck {
    /// The operator's uid.
    pub uid: String,
    /// Its parallelism.
    pub parallelism: u32,
    /// The files written.
    pub state: SubtaskStateMeta,
}

/// A task's acknowledgement of a checkpoint: where its state went.
#[derive(Debug, Clone, Default)]
pub struct TaskAck {
    /// Per-operator file references.
    pub operators: Vec<OperatorAck>,
    /// Timing and size.
    pub stats: TaskCheckpointStats,
    /// The encoded state, when the task's state was frozen ([`SnapshotJob::frozen`]).
    pub frozen: Option<Arc<EncodedSnapshot>>,
}

fn encode<T: serde::Serialize>(what: &str, v: &T) -> Result<Vec<u8>> {
    postcard::to_stdvec(v).map_err(|e| Error::StateDecode {
        what: format!("{what} (encoding)"),
        cause: e.to_string(),
    })
}

/// Encodes a captured snapshot: keyed state split per key group, operator state as is.
pub fn encode_snapshot(snapshot: TaskSnapshot) -> Result<EncodedSnapshot> {
    let mut parts = Vec::with_capacity(snapshot.parts.len());
    for part in snapshot.parts {
        let operator_state = if part.operator_state.is_empty() {
            None
        } else {
            Some(encode("operator state", &part.operator_state)?)
        };
        let keyed = match part.keyed {
            None => None,
            Some(keyed) => {
                let range = keyed.range;
                let mut per_state: Vec<Vec<Vec<u8>>> = Vec::with_capacity(keyed.tables.len());
                let mut entries = 0;
                for t in &keyed.tables {
                    let mut groups = vec![Vec::new(); range.len() as usize];
                    entries += t
                        .view
                        .encode_groups(keyed.max_parallelism, range, &mut groups)?;
                    per_state.push(groups);
                }
                let mut sections = Vec::new();
                for g in 0..range.len() as usize {
                    if per_state.iter().any(|s| !s[g].is_empty()) {
                        sections.push(KeyGroupSection {
                            group: range.start + g as u32,
                            states: per_state
                                .iter_mut()
                                .map(|s| std::mem::take(&mut s[g]))
                                .collect(),
                        });
                    }
                }
                let file = KeyedStateFile {
                    range,
                    max_parallelism: keyed.max_parallelism,
                    states: keyed
                        .tables
                        .iter()
                        .map(|t| (t.name.clone(), t.kind))
                        .collect(),
                    groups: sections,
                    ttl: keyed.tables.iter().map(|t| t.ttl).collect(),
                };
                Some((encode("keyed state", &file)?, range, entries))
            }
        };
        parts.push(EncodedPart {
            uid: part.uid,
            operator_state,
            keyed,
        });
    }
    Ok(EncodedSnapshot { parts })
}

/// Writes every file of `job` (encoding it first if needed); the acknowledgement lists them.
pub fn write_snapshot(storage: &CheckpointStorage, job: SnapshotJob) -> Result<TaskAck> {
    let started = Instant::now();
    let encoded = match job.snapshot {
        SnapshotPayload::Captured(s) => Arc::new(encode_snapshot(s)?),
        SnapshotPayload::Encoded(e) => e,
    };
    let mut ack = TaskAck::default();
    let id = job.checkpoint_id;
    for part in &encoded.parts {
        let mut meta = SubtaskStateMeta {
            subtask: job.subtask,
            operator_state: None,
            keyed_state: None,
        };
        if let Some(payload) = &part.operator_state {
            let name = format!("op-{}", job.subtask);
            let (path, size) =
                storage.write_state_file(id, &part.uid, &name, FileKind::OperatorState, payload)?;
            ack.stats.bytes += size;
            meta.operator_state = Some(FileRef { path, size });
        }
        if let Some((payload, range, entries)) = &part.keyed {
            let name = format!("kg-{}-{}", range.start, range.end);
            let (path, size) =
                storage.write_state_file(id, &part.uid, &name, FileKind::KeyedState, payload)?;
            ack.stats.bytes += size;
            meta.keyed_state = Some(KeyedFileRef {
                file: FileRef { path, size },
                range: *range,
                entries: *entries,
            });
        }
        ack.operators.push(OperatorAck {
            uid: part.uid.clone(),
            parallelism: job.parallelism,
            state: meta,
        });
    }
    ack.stats.sync_micros = job.sync.as_micros() as u64;
    ack.stats.alignment_micros = job.alignment.as_micros() as u64;
    ack.stats.async_micros = started.elapsed().as_micros() as u64;
    if job.frozen {
        ack.frozen = Some(encoded);
    }
    Ok(ack)
}
