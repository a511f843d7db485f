//! Finalizing a checkpoint once every task acknowledged it: assembling its `_metadata`
//! from the acknowledgements (pure, [`assemble`]) and writing it, which completes the
//! checkpoint ([`write()`]). Flink's `PendingCheckpoint::finalizeCheckpoint`.
//!
//! Guarantees of the assembly: each operator lists its subtasks in subtask order whatever
//! order the acknowledgements came in; sizes are summed and durations are the maximum over
//! tasks; each source's position is where the attempt restored it plus what its subtasks
//! emitted before the barrier, so it counts from the job's first start across restarts.

use crate::checkpoint::barrier::CheckpointingMode;
use crate::checkpoint::metadata::{
    ChainIndex, CheckpointMetadata, OperatorMeta, SnapshotKind, SourceProgress,
    TaskCheckpointStats, TaskStatsMeta,
};
use crate::checkpoint::storage::CheckpointStorage;
use crate::checkpoint::writer::TaskAck;
use crate::error::{Error, Result};

/// What a checkpoint's `_metadata` records besides its acknowledgements.
#[derive(Debug, Clone)]
pub struct CheckpointInfo<'a> {
    /// The checkpoint id.
    pub id: u64,
    /// The job's name.
    pub job_name: &'a str,
    /// When the barrier was triggered (ms since the Unix epoch).
    pub trigger_ms: u64,
    /// When the last acknowledgement arrived (ms since the Unix epoch).
    pub completed_ms: u64,
    /// The job's checkpointing mode.
    pub mode: CheckpointingMode,
    /// The job's max parallelism.
    pub max_parallelism: u32,
    /// Checkpoint or savepoint.
    pub snapshot: SnapshotKind,
    /// The run writing it.
    pub run_id: &'a str,
    /// Each task's display name, in task order (the order of the acknowledgements).
    pub task_names: &'a [&'a str],
    /// Where the attempt restored its sources to (empty when it started fresh).
    pub baseline: &'a [SourceProgress],
}

/// A checkpoint's metadata, with the figures the executor reports about it.
#[derive(Debug, Clone)]
pub struct Finalized {
    /// The content of `_metadata`.
    pub meta: CheckpointMetadata,
    /// Bytes summed and durations maximal over tasks (as in `meta.stats`).
    pub stats: TaskCheckpointStats,
    /// Records all sources had emitted up to the barrier, since the job first started.
    pub source_records: u64,
}

/// Assembles the metadata of checkpoint `info.id` from `acks`, one per task in task order.
pub fn assemble(info: &CheckpointInfo<'_>, acks: &[TaskAck]) -> Finalized {
    let mut operators: Vec<OperatorMeta> = Vec::new();
    // Each source's position: where the attempt restored it, plus what its subtasks
    // emitted in this attempt before the barrier.
    let mut sources = info.baseline.to_vec();
    for (uid, records) in acks.iter().filter_map(|a| a.source.as_ref()) {
        match sources.iter_mut().find(|s| &s.uid == uid) {
            Some(s) => s.records += records,
            None => sources.push(SourceProgress {
                uid: uid.clone(),
                records: *records,
            }),
        }
    }
    let mut stats = TaskCheckpointStats::default();
    for ack in acks {
        stats.bytes += ack.stats.bytes;
        stats.sync_micros = stats.sync_micros.max(ack.stats.sync_micros);
        stats.async_micros = stats.async_micros.max(ack.stats.async_micros);
        stats.alignment_micros = stats.alignment_micros.max(ack.stats.alignment_micros);
        for op in &ack.operators {
            match operators.iter_mut().find(|o| o.uid == op.uid) {
                Some(o) => o.subtasks.push(op.state.clone()),
                None => operators.push(OperatorMeta {
                    uid: op.uid.clone(),
                    parallelism: op.parallelism,
                    subtasks: vec![op.state.clone()],
                }),
            }
        }
    }
    for o in &mut operators {
        o.subtasks.sort_by_key(|s| s.subtask);
    }
    let source_records = sources.iter().map(|s| s.records).sum();
    let meta = CheckpointMetadata {
        checkpoint_id: info.id,
        job_name: info.job_name.to_string(),
        trigger_timestamp_ms: info.trigger_ms,
        completed_timestamp_ms: info.completed_ms,
        mode: info.mode,
        max_parallelism: info.max_parallelism,
        operators,
        stats,
        tasks: acks
            .iter()
            .zip(info.task_names)
            .map(|(a, name)| TaskStatsMeta {
                task: name.to_string(),
                stats: a.stats,
            })
            .collect(),
        snapshot: info.snapshot,
        weir_version: env!("CARGO_PKG_VERSION").to_string(),
        sources,
        run_id: info.run_id.to_string(),
        files: acks.iter().flat_map(|a| a.files.iter().cloned()).collect(),
        channel_state: acks
            .iter()
            .flat_map(|a| a.channel_state.iter().cloned())
            .collect(),
        unaligned_tasks: acks.iter().filter(|a| a.unaligned).count() as u32,
        schemas: Vec::new(),
        incremental: acks
            .iter()
            .flat_map(|a| &a.operators)
            .filter_map(|op| op.incremental.clone())
            .collect(),
        incremental_index: acks
            .iter()
            .flat_map(|a| &a.operators)
            .filter_map(|op| {
                let chain = op.incremental.as_ref()?;
                Some(ChainIndex {
                    uid: chain.uid.clone(),
                    subtask: chain.subtask,
                    files: op.incremental_index.clone()?,
                })
            })
            .collect(),
    };
    Finalized {
        meta,
        stats,
        source_records,
    }
}

/// Writes `meta` as checkpoint `meta.checkpoint_id`'s `_metadata` (create-if-absent, after
/// every state file): from then on the checkpoint is complete.
pub fn write(storage: &CheckpointStorage, meta: &CheckpointMetadata) -> Result<()> {
    let payload = postcard::to_stdvec(meta).map_err(|e| Error::StateDecode {
        what: "checkpoint metadata (encoding)".into(),
        cause: e.to_string(),
    })?;
    storage.write_metadata(meta.checkpoint_id, &payload)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::barrier::BarrierKind;
    use crate::checkpoint::metadata::{FileOrigin, FileRef, SubtaskStateMeta};
    use crate::checkpoint::writer::OperatorAck;

    fn ack(uid: &str, subtask: u32, bytes: u64, sync: u64, source: Option<u64>) -> TaskAck {
        let path = format!("{uid}/op-{subtask}");
        TaskAck {
            operators: vec![OperatorAck {
                uid: uid.into(),
                parallelism: 2,
                state: SubtaskStateMeta {
                    subtask,
                    operator_state: Some(FileRef {
                        path: path.clone(),
                        size: bytes,
                    }),
                    keyed_state: None,
                },
                states: Vec::new(),
                incremental: None,
                incremental_index: None,
                local: Default::default(),
            }],
            stats: TaskCheckpointStats {
                sync_micros: sync,
                async_micros: 10 * sync,
                alignment_micros: 0,
                bytes,
            },
            frozen: None,
            source: source.map(|n| (uid.to_string(), n)),
            files: vec![FileOrigin {
                path,
                crc32c: subtask,
                checkpoint_id: 4,
                run_id: "r".into(),
            }],
            times: Default::default(),
            channel_state: Vec::new(),
            unaligned: false,
        }
    }

    #[test]
    fn assembles_operators_in_subtask_order_and_sources_from_their_baseline() {
        let names = ["src (2/2)", "src (1/2)", "sink (1/1)"];
        let baseline = [SourceProgress {
            uid: "src".into(),
            records: 1000,
        }];
        let info = CheckpointInfo {
            id: 4,
            job_name: "job",
            trigger_ms: 1,
            completed_ms: 2,
            mode: CheckpointingMode::ExactlyOnce,
            max_parallelism: 128,
            snapshot: SnapshotKind::of(BarrierKind::Stop { drain: false }),
            run_id: "r",
            task_names: &names,
            baseline: &baseline,
        };
        let acks = [
            ack("src", 1, 5, 7, Some(30)),
            ack("src", 0, 6, 3, Some(12)),
            ack("sink", 0, 1, 9, None),
        ];
        let f = assemble(&info, &acks);
        assert_eq!(f.source_records, 1042);
        assert_eq!(f.meta.source_records("src"), 1042);
        assert_eq!(f.meta.snapshot, SnapshotKind::StopSavepoint);
        let src = &f.meta.operators[0];
        assert_eq!(src.uid, "src");
        let order: Vec<u32> = src.subtasks.iter().map(|s| s.subtask).collect();
        assert_eq!(order, [0, 1]);
        assert_eq!(f.meta.operators[1].uid, "sink");
        assert_eq!((f.stats.bytes, f.stats.sync_micros), (12, 9));
        assert_eq!(f.stats.async_micros, 90);
        assert_eq!(f.meta.stats, f.stats);
        let tasks: Vec<&str> = f.meta.tasks.iter().map(|t| t.task.as_str()).collect();
        assert_eq!(tasks, names);
        assert_eq!(f.meta.files.len(), 3);
        assert_eq!(f.meta.expected_crc("src/op-0"), Ok(Some(0)));
    }

    #[test]
    fn a_source_missing_from_the_baseline_starts_at_zero() {
        let info = CheckpointInfo {
            id: 4,
            job_name: "job",
            trigger_ms: 1,
            completed_ms: 2,
            mode: CheckpointingMode::AtLeastOnce,
            max_parallelism: 128,
            snapshot: SnapshotKind::Checkpoint,
            run_id: "r",
            task_names: &["a", "b"],
            baseline: &[],
        };
        let f = assemble(
            &info,
            &[ack("new", 0, 1, 1, Some(5)), ack("new", 1, 1, 1, Some(6))],
        );
        assert_eq!(f.meta.sources.len(), 1);
        assert_eq!(f.source_records, 11);
    }
}
