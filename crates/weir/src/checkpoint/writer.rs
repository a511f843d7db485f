//! The asynchronous phase of a snapshot: encoding a task's captured state and writing it.
//!
//! A task captures an immutable view of its state at the barrier (the synchronous phase,
//! on the processing thread) and hands it here as a [`SnapshotJob`]; a writer thread encodes
//! it per key group and writes the files while the task goes on processing records.

use std::time::{Duration, Instant};

use super::format::FileKind;
use super::metadata::{
    FileRef, KeyGroupSection, KeyedFileRef, KeyedStateFile, SubtaskStateMeta, TaskCheckpointStats,
};
use super::storage::CheckpointStorage;
use crate::error::{Error, Result};
use crate::runtime::output::TaskSnapshot;

/// A task's captured state, on its way to storage.
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
    /// The captured state.
    pub snapshot: TaskSnapshot,
    /// How long the capture blocked the task.
    pub sync: Duration,
    /// How long the barriers took to align.
    pub alignment: Duration,
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
}

fn encode<T: serde::Serialize>(what: &str, v: &T) -> Result<Vec<u8>> {
    postcard::to_stdvec(v).map_err(|e| Error::StateDecode {
        what: format!("{what} (encoding)"),
        cause: e.to_string(),
    })
}

/// Writes every file of `job`; the acknowledgement lists them.
pub fn write_snapshot(storage: &CheckpointStorage, job: SnapshotJob) -> Result<TaskAck> {
    let started = Instant::now();
    let mut ack = TaskAck::default();
    let id = job.checkpoint_id;
    for part in job.snapshot.parts {
        let mut meta = SubtaskStateMeta {
            subtask: job.subtask,
            operator_state: None,
            keyed_state: None,
        };
        if !part.operator_state.is_empty() {
            let payload = encode("operator state", &part.operator_state)?;
            let name = format!("op-{}", job.subtask);
            let (path, size) = storage.write_state_file(
                id,
                &part.uid,
                &name,
                FileKind::OperatorState,
                &payload,
            )?;
            ack.stats.bytes += size;
            meta.operator_state = Some(FileRef { path, size });
        }
        if let Some(keyed) = part.keyed {
            let range = keyed.range;
            let mut per_state: Vec<Vec<Vec<u8>>> = Vec::with_capacity(keyed.tables.len());
            let mut entries = 0;
            for (_, _, table) in &keyed.tables {
                let mut groups = vec![Vec::new(); range.len() as usize];
                entries += table.encode_groups(keyed.max_parallelism, range, &mut groups)?;
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
                    .map(|(n, k, _)| (n.clone(), *k))
                    .collect(),
                groups: sections,
            };
            let payload = encode("keyed state", &file)?;
            let name = format!("kg-{}-{}", range.start, range.end);
            let (path, size) =
                storage.write_state_file(id, &part.uid, &name, FileKind::KeyedState, &payload)?;
            ack.stats.bytes += size;
            meta.keyed_state = Some(KeyedFileRef {
                file: FileRef { path, size },
                range,
                entries,
            });
        }
        ack.operators.push(OperatorAck {
            uid: part.uid,
            parallelism: job.parallelism,
            state: meta,
        });
    }
    ack.stats.sync_micros = job.sync.as_micros() as u64;
    ack.stats.alignment_micros = job.alignment.as_micros() as u64;
    ack.stats.async_micros = started.elapsed().as_micros() as u64;
    Ok(ack)
}
