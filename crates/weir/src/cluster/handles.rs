//! A subtask's acknowledgement on the control stream (issue 24): the state handles a worker
//! wrote ([`TaskAck`]) as the `Ack` message carries them, and back. Pure: no I/O, so both
//! directions are unit-tested here and the two roles only call them.
//!
//! What crosses: per operator its files (path, size, crc32c), key-group range, entries,
//! parallelism and state sizes; with incremental checkpoints the chain of shared files its
//! keyed state is (base and ordered deltas, each with its owner checkpoint, run, size and
//! crc32c: `_metadata` lists them as they come) and each file's index of key-group sections,
//! which a restore from remote storage fetches one key group at a time by; channel state; timings; the source's
//! position; whether the snapshot froze the subtask's state. What does not: the frozen snapshot itself (the worker
//! keeps it, [`Frozen::OnWorker`]) and the phase instants of the dashboard's timeline. Every
//! file is recorded under the checkpoint it was written for and the coordinator's run id,
//! which the worker wrote it with (`Deploy.run_id`), exactly as `_metadata` lists files
//! written in one process.

use crate::checkpoint::metadata::{
    ChannelStateRef, FileOrigin, FileRef, IncrementalKeyedRef, KeyedFileRef, SharedFile,
    SubtaskStateMeta, TaskCheckpointStats,
};
use crate::checkpoint::writer::{Frozen, OperatorAck, StateBytes, TaskAck};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed::{FileIndex, GroupSpans, LocalStateSize, SectionSpan};
use crate::state::StateKind;

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
            incremental: op
                .incremental
                .as_ref()
                .map(|chain| proto::IncrementalChain {
                    base: Some(shared_to_proto(&chain.base)),
                    deltas: chain.deltas.iter().map(shared_to_proto).collect(),
                    index: (op.incremental_index.iter().flatten())
                        .map(index_to_proto)
                        .collect(),
                }),
            local_disk_bytes: op.local.disk_bytes,
            memory_entries: op.local.memory_entries,
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
        let incremental = match &op.incremental {
            None => None,
            Some(chain) => Some(chain_from_proto(chain, ack, of, &op.uid)?),
        };
        let keyed_state = match (&op.keyed_state, &op.key_groups, &incremental) {
            // An incremental snapshot's keyed file names its chain's base in `shared/` (as
            // the writer in one process does), which `_metadata` lists in the chain with
            // its own owner and run, not among the files written for this checkpoint.
            (Some(_), Some(r), Some(chain)) => Some(KeyedFileRef {
                file: FileRef {
                    path: format!("../{}", chain.base.path),
                    size: chain.base.size,
                },
                range: KeyGroupRange {
                    start: r.start,
                    end: r.end,
                },
                entries: op.keyed_entries,
            }),
            (Some(f), Some(r), None) => Some(KeyedFileRef {
                file: record(f),
                range: KeyGroupRange {
                    start: r.start,
                    end: r.end,
                },
                entries: op.keyed_entries,
            }),
            (None, None, None) => None,
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
            incremental_index: match (&op.incremental, &incremental) {
                (Some(wire), Some(chain)) if !wire.index.is_empty() => {
                    Some(index_from_proto(&wire.index, chain, ack, of)?)
                }
                _ => None,
            },
            incremental,
            local: LocalStateSize {
                disk_bytes: op.local_disk_bytes,
                memory_entries: op.memory_entries,
            },
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

/// A shared file of a chain as the Ack carries it.
fn shared_to_proto(f: &SharedFile) -> proto::SharedFileHandle {
    proto::SharedFileHandle {
        path: f.path.clone(),
        size: f.size,
        crc32c: f.crc32c,
        checkpoint_id: f.checkpoint_id,
        run_id: f.run_id.clone(),
    }
}

/// The chain of operator `uid` in `ack` (subtask `of`) as `_metadata` lists it. A chain
/// without its base, or naming a file outside `shared/`, is refused naming the subtask:
/// `_metadata` must never list a chain a restore cannot read.
fn chain_from_proto(
    chain: &proto::IncrementalChain,
    ack: &proto::Ack,
    of: &SubtaskRef,
    uid: &str,
) -> Result<IncrementalKeyedRef, String> {
    let refused = |what: &str| {
        format!(
            "the acknowledgement of {}[{}] for checkpoint {} has an incremental keyed state of \
             operator '{uid}' {what}",
            of.task_uid, of.subtask, ack.checkpoint_id
        )
    };
    let shared = |h: &proto::SharedFileHandle| {
        let inside = h
            .path
            .starts_with(&format!("{}/", crate::storage::SHARED_DIR))
            && !h.path.split('/').any(|c| c == ".." || c.is_empty());
        if !inside {
            return Err(refused(&format!(
                "naming {:?}, which is not a file of the job folder's {}/",
                h.path,
                crate::storage::SHARED_DIR
            )));
        }
        Ok(SharedFile {
            path: h.path.clone(),
            size: h.size,
            crc32c: h.crc32c,
            checkpoint_id: h.checkpoint_id,
            run_id: h.run_id.clone(),
        })
    };
    let base = chain
        .base
        .as_ref()
        .ok_or_else(|| refused("without its base"))?;
    Ok(IncrementalKeyedRef {
        uid: uid.to_string(),
        subtask: ack.subtask,
        base: shared(base)?,
        deltas: chain.deltas.iter().map(shared).collect::<Result<_, _>>()?,
    })
}

/// One shared file's index (issue 25 item 4) as the Ack carries it.
fn index_to_proto(index: &FileIndex) -> proto::SharedFileIndex {
    proto::SharedFileIndex {
        states: (index.states.iter().zip(&index.ttl))
            .map(|((name, kind), ttl)| proto::IndexedState {
                name: name.clone(),
                kind: kind.name().to_string(),
                ttl: *ttl,
            })
            .collect(),
        groups: (index.groups.iter())
            .map(|g| proto::KeyGroupSections {
                group: g.group,
                sections: (g.sections.iter())
                    .map(|s| proto::SectionSpan {
                        offset: s.offset,
                        len: s.len,
                        crc32c: s.crc32c,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The indexes of `chain`'s files from the Ack. One per file of the chain, each state of a
/// known kind and each key group with a section per state, or the ack is refused naming
/// the subtask: `_metadata` must never list an index a restore would misread (a restore
/// without one reads the files whole, so a worker sends none rather than a partial one).
fn index_from_proto(
    wire: &[proto::SharedFileIndex],
    chain: &IncrementalKeyedRef,
    ack: &proto::Ack,
    of: &SubtaskRef,
) -> Result<Vec<FileIndex>, String> {
    let refused = |what: String| {
        format!(
            "the acknowledgement of {}[{}] for checkpoint {} has an index of operator '{}' \
             {what}",
            of.task_uid, of.subtask, ack.checkpoint_id, chain.uid
        )
    };
    let files = 1 + chain.deltas.len();
    if wire.len() != files {
        return Err(refused(format!(
            "for {} file(s), but its chain has {files}",
            wire.len()
        )));
    }
    wire.iter()
        .map(|f| {
            let mut states = Vec::with_capacity(f.states.len());
            for s in &f.states {
                let kind = StateKind::from_name(&s.kind)
                    .ok_or_else(|| refused(format!("with a state of unknown kind {:?}", s.kind)))?;
                states.push((s.name.clone(), kind));
            }
            let mut groups = Vec::with_capacity(f.groups.len());
            for g in &f.groups {
                if g.sections.len() != states.len() {
                    return Err(refused(format!(
                        "whose key group {} has {} section(s) for {} state(s)",
                        g.group,
                        g.sections.len(),
                        states.len()
                    )));
                }
                groups.push(GroupSpans {
                    group: g.group,
                    sections: (g.sections.iter())
                        .map(|s| SectionSpan {
                            offset: s.offset,
                            len: s.len,
                            crc32c: s.crc32c,
                        })
                        .collect(),
                });
            }
            Ok(FileIndex {
                ttl: f.states.iter().map(|s| s.ttl).collect(),
                states,
                groups,
            })
        })
        .collect()
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
                local: LocalStateSize {
                    disk_bytes: 4096,
                    memory_entries: 3,
                },
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
        assert_eq!(
            got.operators[0].local, sent.operators[0].local,
            "the dashboard's"
        );
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

    /// An incremental snapshot's ack as the writer makes it: the keyed file names the
    /// chain's base outside the checkpoint folder and is not among the files written.
    fn incremental_ack() -> TaskAck {
        let shared = |path: &str, owner, run: &str| SharedFile {
            path: path.into(),
            size: 50 + owner,
            crc32c: 0x1000 + owner as u32,
            checkpoint_id: owner,
            run_id: run.into(),
        };
        let mut a = ack();
        let chain = IncrementalKeyedRef {
            uid: "count".into(),
            subtask: 1,
            base: shared("shared/count/chk-3-kg-64-128", 3, "run-b"),
            deltas: vec![
                shared("shared/count/chk-5-kgd-64-128", 5, "run-c"),
                shared("shared/count/chk-7-kgd-64-128", 7, "run-c"),
            ],
        };
        let op = &mut a.operators[0];
        op.state.keyed_state.as_mut().unwrap().file = FileRef {
            path: format!("../{}", chain.base.path),
            size: chain.base.size,
        };
        op.incremental = Some(chain);
        a.files.retain(|f| f.path == "count/op-1");
        a
    }

    #[test]
    fn an_incremental_chain_crosses_with_its_owners_runs_sizes_and_checksums() {
        let sent = incremental_ack();
        let wire = to_proto(3, 7, &subtask(), &sent);
        let got = from_proto(&wire, &subtask(), "run-c").unwrap();
        assert_eq!(got.operators[0].incremental, sent.operators[0].incremental);
        assert_eq!(got.operators[0].state, sent.operators[0].state);
        // The base is listed by the chain, not as a file written for this checkpoint.
        let paths: Vec<&str> = got.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["count/op-1"]);
    }

    /// The index of one file of [`incremental_ack`]'s chain: two states, two key groups.
    fn file_index(seed: u64) -> FileIndex {
        let span = |i: u64| SectionSpan {
            offset: seed * 100 + i * 10,
            len: i,
            crc32c: (seed + i) as u32,
        };
        FileIndex {
            states: vec![
                ("count".into(), StateKind::Value),
                ("timers".into(), StateKind::EventTimers),
            ],
            ttl: vec![true, false],
            groups: vec![
                GroupSpans {
                    group: 64,
                    sections: vec![span(1), span(0)],
                },
                GroupSpans {
                    group: 100,
                    sections: vec![span(2), span(3)],
                },
            ],
        }
    }

    #[test]
    fn a_chains_index_crosses_whole_or_is_refused_naming_the_subtask() {
        let mut sent = incremental_ack();
        sent.operators[0].incremental_index = Some((0..3).map(file_index).collect());
        let wire = to_proto(3, 7, &subtask(), &sent);
        let got = from_proto(&wire, &subtask(), "run-c").unwrap();
        assert_eq!(
            got.operators[0].incremental_index,
            sent.operators[0].incremental_index
        );
        // Without an index, none (a restore reads the files whole).
        let plain = to_proto(3, 7, &subtask(), &incremental_ack());
        let got = from_proto(&plain, &subtask(), "run-c").unwrap();
        assert_eq!(got.operators[0].incremental_index, None);
        // One index short of the chain's files.
        let mut short = wire.clone();
        short.operators[0].incremental.as_mut().unwrap().index.pop();
        let e = from_proto(&short, &subtask(), "run-c").unwrap_err();
        assert!(e.contains("count[1]") && e.contains("2 file(s)"), "{e}");
        // A key group with a section short, and a kind this binary does not know.
        let mut torn = wire.clone();
        let index = &mut torn.operators[0].incremental.as_mut().unwrap().index;
        index[1].groups[0].sections.pop();
        let e = from_proto(&torn, &subtask(), "run-c").unwrap_err();
        assert!(e.contains("key group 64 has 1 section(s)"), "{e}");
        let mut foreign = wire;
        let index = &mut foreign.operators[0].incremental.as_mut().unwrap().index;
        index[2].states[0].kind = "queue".into();
        let e = from_proto(&foreign, &subtask(), "run-c").unwrap_err();
        assert!(e.contains("unknown kind \"queue\""), "{e}");
    }

    #[test]
    fn every_state_kind_is_read_back_by_its_name() {
        for kind in StateKind::ALL {
            // Exhaustive: a new kind fails to compile here until it is listed.
            match kind {
                StateKind::Value
                | StateKind::OperatorList
                | StateKind::UnionList
                | StateKind::List
                | StateKind::Reducing
                | StateKind::Aggregating
                | StateKind::Map
                | StateKind::ProcessingTimers
                | StateKind::Broadcast
                | StateKind::EventTimers
                | StateKind::Window => {}
            }
            let back = StateKind::ALL
                .into_iter()
                .filter(|k| k.name() == kind.name());
            assert_eq!(back.collect::<Vec<_>>(), [kind]);
            assert_eq!(StateKind::from_name(kind.name()), Some(kind));
        }
    }

    #[test]
    fn a_chain_without_its_base_or_outside_shared_is_refused_naming_the_subtask() {
        let mut wire = to_proto(1, 7, &subtask(), &incremental_ack());
        let chain = wire.operators[0].incremental.as_mut().unwrap();
        chain.deltas[0].path = "../../etc/passwd".into();
        let e = from_proto(&wire, &subtask(), "run-c").unwrap_err();
        assert!(e.contains("count[1]") && e.contains("shared/"), "{e}");
        let chain = wire.operators[0].incremental.as_mut().unwrap();
        chain.base = None;
        let e = from_proto(&wire, &subtask(), "run-c").unwrap_err();
        assert!(e.contains("without its base"), "{e}");
    }
}
