//! A subtask's acknowledgement on the control stream (issue 24): the state handles a worker
//! wrote ([`TaskAck`]) as the `Ack` message carries them, and back. Pure: no I/O, so both
//! directions are unit-tested here and the two roles only call them.
//!
//! What crosses: per operator its files (path, size, crc32c), key-group range, entries,
//! parallelism and state sizes; channel state; timings; the source's position; whether the
//! snapshot froze the subtask's state. What does not: the frozen snapshot itself (the worker
//! keeps it, [`Frozen::OnWorker`]) and the phase instants of the dashboard's timeline. Every
//! file is recorded under the checkpoint it was written for and the coordinator's run id,
//! which the worker wrote it with (`Deploy.run_id`), exactly as `_metadata` lists files
//! written in one process.

use crate::checkpoint::metadata::{
    ChannelStateRef, FileOrigin, FileRef, KeyedFileRef, SubtaskStateMeta, TaskCheckpointStats,
};
use crate::checkpoint::writer::{Frozen, OperatorAck, StateBytes, TaskAck};
use crate::state::key_group::KeyGroupRange;

use super::proto;

/// Which subtask acknowledges, as both roles name it (the plan's tasks are the same on
/// every process: the fingerprint made sure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtaskRef {
    /// The uid of the task's head operator.
    pub task_uid: String,
    /// The subtask index.
    pub subtask: u32,
    /// The task's parallelism (the receiving operator's, for channel state).
    pub parallelism: u32,
}

/// `ack` (task `of`, checkpoint `checkpoint` of attempt `attempt`) as the worker sends it.
pub fn to_proto(attempt: u32, checkpoint: u64, of: &SubtaskRef, ack: &TaskAck) -> proto::Ack {
    let crc = |path: &str| {
        ack.files
            .iter()
            .find(|f| f.path == path)
            .map_or(0, |f| f.crc32c)
    };
    let file = |f: &FileRef| proto::FileHandle {
        path: f.path.clone(),
        size: f.size,
        crc32c: crc(&f.path),
    };
    let operators = ack
        .operators
        .iter()
        .map(|op| proto::OperatorStateHandle {
            uid: op.uid.clone(),
            operator_state: op.state.operator_state.as_ref().map(file),
            keyed_state: op.state.keyed_state.as_ref().map(|k| file(&k.file)),
            key_groups: op.state.keyed_state.as_ref().map(|k| proto::KeyGroupRange {
                start: k.range.start,
                end: k.range.end,
            }),
            keyed_entries: op.state.keyed_state.as_ref().map_or(0, |k| k.entries),
            source_records: 0,
            parallelism: op.parallelism,
            states: op
                .states
                .iter()
                .map(|s| proto::StateSize {
                    name: s.name.clone(),
                    keyed: s.keyed,
                    bytes: s.bytes,
                })
                .collect(),
        })
        .collect();
    let channel_state = ack
        .channel_state
        .iter()
        .map(|c| proto::ChannelStateHandle {
            edge: c.edge,
            channel: c.channel,
            sender: c.sender,
            records: c.records,
            in_flight_bytes: c.in_flight_bytes,
            file: Some(file(&c.file)),
        })
        .collect();
    let (is_source, source_uid, source_records) = match &ack.source {
        Some((uid, records)) => (true, uid.clone(), *records),
        None => (false, String::new(), 0),
    };
    proto::Ack {
        attempt: u64::from(attempt),
        checkpoint_id: checkpoint,
        task_uid: of.task_uid.clone(),
        subtask: of.subtask,
        operators,
        channel_state,
        timings: Some(proto::SnapshotTimings {
            alignment_micros: ack.stats.alignment_micros,
            sync_micros: ack.stats.sync_micros,
            async_micros: ack.stats.async_micros,
            bytes: ack.stats.bytes,
            unaligned: ack.unaligned,
        }),
        frozen: ack.frozen.is_some(),
        is_source,
        source_uid,
        source_records,
    }
}

/// The acknowledgement the coordinator's checkpoint coordinator records for `ack`, whose
/// files the worker wrote under `run_id` (the coordinator's); `of` names the task as the
/// coordinator's plan has it (for channel state). A handle without a file is refused,
/// naming the subtask: `_metadata` must never list a file that was not written.
pub fn from_proto(ack: &proto::Ack, of: &SubtaskRef, run_id: &str) -> Result<TaskAck, String> {
    let mut files = Vec::new();
    let mut record = |h: &proto::FileHandle| {
        files.push(FileOrigin {
            path: h.path.clone(),
            crc32c: h.crc32c,
            checkpoint_id: ack.checkpoint_id,
            run_id: run_id.to_string(),
        });
        FileRef {
            path: h.path.clone(),
            size: h.size,
        }
    };
    let mut operators = Vec::with_capacity(ack.operators.len());
    for op in &ack.operators {
        let keyed_state = match (&op.keyed_state, &op.key_groups) {
            (Some(f), Some(r)) => Some(KeyedFileRef {
                file: record(f),
                range: KeyGroupRange {
                    start: r.start,
                    end: r.end,
                },
                entries: op.keyed_entries,
            }),
            (None, None) => None,
            _ => {
                return Err(format!(
                    "the acknowledgement of {}[{}] for checkpoint {} has keyed state of \
                     operator '{}' without its file or its key groups",
                    of.task_uid, of.subtask, ack.checkpoint_id, op.uid
                ))
            }
        };
        operators.push(OperatorAck {
            uid: op.uid.clone(),
            parallelism: op.parallelism,
            state: SubtaskStateMeta {
                subtask: ack.subtask,
                operator_state: op.operator_state.as_ref().map(&mut record),
                keyed_state,
            },
            states: op
                .states
                .iter()
                .map(|s| StateBytes {
                    name: s.name.clone(),
                    keyed: s.keyed,
                    bytes: s.bytes,
                })
                .collect(),
            // Workers take full checkpoints only (their state backends are built without
            // incremental checkpoints, and a coordinator refuses the flag): no chain crosses.
            incremental: None,
            incremental_index: None,
        });
    }
    let mut channel_state = Vec::with_capacity(ack.channel_state.len());
    for c in &ack.channel_state {
        let Some(f) = &c.file else {
            return Err(format!(
                "the acknowledgement of {}[{}] for checkpoint {} has channel state without \
                 its file",
                of.task_uid, of.subtask, ack.checkpoint_id
            ));
        };
        channel_state.push(ChannelStateRef {
            uid: of.task_uid.clone(),
            subtask: ack.subtask,
            parallelism: of.parallelism,
            channel: c.channel,
            edge: c.edge,
            sender: c.sender,
            records: c.records,
            in_flight_bytes: c.in_flight_bytes,
            file: record(f),
        });
    }
    let timings = ack.timings.unwrap_or_default();
    Ok(TaskAck {
        operators,
        stats: TaskCheckpointStats {
            sync_micros: timings.sync_micros,
            async_micros: timings.async_micros,
            alignment_micros: timings.alignment_micros,
            bytes: timings.bytes,
        },
        frozen: ack.frozen.then_some(Frozen::OnWorker),
        source: ack
            .is_source
            .then(|| (ack.source_uid.clone(), ack.source_records)),
        files,
        times: Default::default(),
        channel_state,
        unaligned: timings.unaligned,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subtask() -> SubtaskRef {
        SubtaskRef {
            task_uid: "count".into(),
            subtask: 1,
            parallelism: 2,
        }
    }

    /// An acknowledgement as a writer makes it: keyed and operator state, a source
    /// position, a frozen snapshot.
    fn ack() -> TaskAck {
        let origin = |path: &str, crc32c| FileOrigin {
            path: path.into(),
            crc32c,
            checkpoint_id: 7,
            run_id: "run-c".into(),
        };
        TaskAck {
            operators: vec![OperatorAck {
                uid: "count".into(),
                parallelism: 2,
                state: SubtaskStateMeta {
                    subtask: 1,
                    operator_state: Some(FileRef {
                        path: "count/op-1".into(),
                        size: 10,
                    }),
                    keyed_state: Some(KeyedFileRef {
                        file: FileRef {
                            path: "count/kg-64-128".into(),
                            size: 99,
                        },
                        range: KeyGroupRange {
                            start: 64,
                            end: 128,
                        },
                        entries: 5,
                    }),
                },
                states: vec![StateBytes {
                    name: "count".into(),
                    keyed: true,
                    bytes: 40,
                }],
                incremental: None,
                incremental_index: None,
            }],
            stats: TaskCheckpointStats {
                sync_micros: 1,
                async_micros: 2,
                alignment_micros: 3,
                bytes: 109,
            },
            frozen: None,
            source: Some(("numbers".into(), 1234)),
            files: vec![origin("count/op-1", 0xAB), origin("count/kg-64-128", 0xCD)],
            times: Default::default(),
            channel_state: Vec::new(),
            unaligned: false,
        }
    }

    #[test]
    fn an_ack_crosses_the_control_stream_with_every_handle_metadata_records() {
        let sent = ack();
        let wire = to_proto(3, 7, &subtask(), &sent);
        assert_eq!((wire.attempt, wire.checkpoint_id, wire.subtask), (3, 7, 1));
        let got = from_proto(&wire, &subtask(), "run-c").unwrap();
        // Everything `_metadata` is assembled from arrives as written.
        assert_eq!(got.operators[0].state, sent.operators[0].state);
        assert_eq!(got.operators[0].states, sent.operators[0].states);
        assert_eq!(got.operators[0].parallelism, 2);
        let mut files = got.files.clone();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut want = sent.files.clone();
        want.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(files, want);
        assert_eq!(got.stats, sent.stats);
        assert_eq!(got.source, sent.source);
        assert!(got.frozen.is_none());
    }

    #[test]
    fn a_frozen_snapshot_stays_on_its_worker() {
        let mut sent = ack();
        let wire = to_proto(1, 7, &subtask(), &sent);
        assert!(!wire.frozen);
        sent.frozen = Some(Frozen::OnWorker);
        let wire = to_proto(1, 7, &subtask(), &sent);
        assert!(wire.frozen);
        let got = from_proto(&wire, &subtask(), "run-c").unwrap();
        assert!(matches!(got.frozen, Some(Frozen::OnWorker)));
    }

    #[test]
    fn a_keyed_handle_without_its_range_is_refused_naming_the_subtask() {
        let mut wire = to_proto(1, 7, &subtask(), &ack());
        wire.operators[0].key_groups = None;
        let e = from_proto(&wire, &subtask(), "run-c").unwrap_err();
        assert!(e.contains("count[1]"), "{e}");
        assert!(e.contains("checkpoint 7"), "{e}");
        assert!(e.contains("key groups"), "{e}");
    }
}
