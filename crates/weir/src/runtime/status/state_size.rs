//! State size per operator and state, from the newest completed checkpoint or savepoint:
//! what the dashboard's state table, `/api/state` and the `weir_state_size_bytes` gauge
//! show (issue 14).
//!
//! The sizes come with the tasks' acknowledgements (the writers count each state's encoded
//! bytes while they write it), so nothing reads the checkpoint back to learn them. They
//! are the encoded entries' bytes, summed over subtasks; the files add a little framing.
//!
//! Per operator they come with what the checkpoint's files cost (issue 25 item 6): the
//! bytes it wrote, and with incremental checkpoints the bytes of earlier checkpoints'
//! shared files it lists instead of writing them again; and where the state lived at the
//! barrier: the disk backend's LSM on local disk, and the entries held decoded in memory.

use serde::Serialize;

use crate::checkpoint::writer::{OperatorAck, TaskAck};
use crate::runtime::control::JobStatus;

/// The state sizes of one completed checkpoint.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StateSizes {
    /// The checkpoint or savepoint they are of; `None` before the first completed one.
    pub checkpoint_id: Option<u64>,
    /// Per operator that has state, in the order its first subtask acknowledged.
    pub operators: Vec<OperatorStateSize>,
}

/// One operator's state in a checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorStateSize {
    /// Its uid: what its state is matched by on restore.
    pub uid: String,
    /// Its states' bytes together.
    pub bytes: u64,
    /// Bytes of the files this checkpoint wrote for it (a full checkpoint's files, or an
    /// incremental one's new base or delta, and operator state), summed over subtasks.
    pub new_bytes: u64,
    /// Bytes of earlier checkpoints' shared files its incremental chains list (written
    /// once, not uploaded again), summed over subtasks; 0 for a full checkpoint.
    pub shared_bytes: u64,
    /// Bytes its keyed state's LSMs occupied on local disk at the barrier (the disk
    /// backend; 0 in memory), summed over subtasks.
    pub local_disk_bytes: u64,
    /// Keyed-state entries held decoded in memory at the barrier (on disk: the write-back
    /// caches'), summed over subtasks.
    pub memory_entries: u64,
    /// Per state, by name.
    pub states: Vec<StateSize>,
}

/// One state of one operator, over all its subtasks.
#[derive(Debug, Clone, Serialize)]
pub struct StateSize {
    /// Its name as declared (timers: `__event_timers`, `__processing_timers`).
    pub name: String,
    /// `keyed` or `operator` (a list of operator state).
    pub scope: String,
    /// Its encoded entries' bytes, summed over subtasks.
    pub bytes: u64,
}

impl JobStatus {
    /// Checkpoint `id` completed with these acknowledgements: its sizes replace the last.
    pub(crate) fn on_state_sizes(&mut self, id: u64, acks: &[TaskAck]) {
        self.state_sizes = state_sizes(id, acks);
    }
}

/// The sizes of checkpoint `id` from its acknowledgements.
fn state_sizes(id: u64, acks: &[TaskAck]) -> StateSizes {
    let mut operators: Vec<OperatorStateSize> = Vec::new();
    for op in acks.iter().flat_map(|a| &a.operators) {
        let i = match operators.iter().position(|o| o.uid == op.uid) {
            Some(i) => i,
            None => {
                operators.push(OperatorStateSize {
                    uid: op.uid.clone(),
                    bytes: 0,
                    new_bytes: 0,
                    shared_bytes: 0,
                    local_disk_bytes: 0,
                    memory_entries: 0,
                    states: Vec::new(),
                });
                operators.len() - 1
            }
        };
        let o = &mut operators[i];
        let (new, shared) = file_bytes(id, op);
        o.new_bytes += new;
        o.shared_bytes += shared;
        o.local_disk_bytes += op.local.disk_bytes;
        o.memory_entries += op.local.memory_entries;
        for s in &op.states {
            let scope = if s.keyed { "keyed" } else { "operator" };
            o.bytes += s.bytes;
            match o
                .states
                .iter_mut()
                .find(|t| t.name == s.name && t.scope == scope)
            {
                Some(t) => t.bytes += s.bytes,
                None => o.states.push(StateSize {
                    name: s.name.clone(),
                    scope: scope.into(),
                    bytes: s.bytes,
                }),
            }
        }
    }
    StateSizes {
        checkpoint_id: Some(id),
        operators,
    }
}

/// The bytes of the files checkpoint `id` lists for one operator subtask: `(written for
/// it, shared from earlier checkpoints)`. An incremental chain's files were written for
/// the checkpoint they name (its keyed-state reference names the chain's base, so only the
/// chain is counted); any other file is this checkpoint's own.
fn file_bytes(id: u64, op: &OperatorAck) -> (u64, u64) {
    let mut new = op.state.operator_state.as_ref().map_or(0, |f| f.size);
    let mut shared = 0;
    match &op.incremental {
        Some(chain) => {
            for f in chain.files() {
                if f.checkpoint_id == id {
                    new += f.size;
                } else {
                    shared += f.size;
                }
            }
        }
        None => new += op.state.keyed_state.as_ref().map_or(0, |k| k.file.size),
    }
    (new, shared)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::metadata::SubtaskStateMeta;
    use crate::checkpoint::metadata::{FileRef, IncrementalKeyedRef, KeyedFileRef, SharedFile};
    use crate::checkpoint::writer::StateBytes;
    use crate::state::key_group::KeyGroupRange;
    use crate::state::keyed::LocalStateSize;

    /// A state: name, keyed, bytes.
    type State<'a> = (&'a str, bool, u64);
    /// One operator's part of an ack: uid, states.
    type Part<'a> = (&'a str, &'a [State<'a>]);
    /// An operator's sizes flattened: uid, bytes, (name, scope, bytes) per state.
    type Flat<'a> = (&'a str, u64, Vec<(&'a str, &'a str, u64)>);

    fn ack(subtask: u32, parts: &[Part<'_>]) -> TaskAck {
        TaskAck {
            operators: parts
                .iter()
                .map(|(uid, states)| OperatorAck {
                    uid: uid.to_string(),
                    parallelism: 2,
                    state: SubtaskStateMeta {
                        subtask,
                        operator_state: None,
                        keyed_state: None,
                    },
                    states: states
                        .iter()
                        .map(|&(name, keyed, bytes)| StateBytes {
                            name: name.into(),
                            keyed,
                            bytes,
                        })
                        .collect(),
                    incremental: None,
                    incremental_index: None,
                    local: LocalStateSize::default(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn sizes_add_up_per_operator_and_state_over_subtasks() {
        let mut s = JobStatus::default();
        s.on_state_sizes(
            4,
            &[
                ack(0, &[("source", &[("offsets", false, 8)])]),
                ack(1, &[("source", &[("offsets", false, 8)])]),
                ack(
                    0,
                    &[(
                        "count",
                        &[("count", true, 100), ("__event_timers", true, 5)],
                    )],
                ),
                ack(1, &[("count", &[("count", true, 50)])]),
            ],
        );
        let z = &s.state_sizes;
        assert_eq!(z.checkpoint_id, Some(4));
        let flat: Vec<Flat<'_>> = z
            .operators
            .iter()
            .map(|o| {
                let states = o
                    .states
                    .iter()
                    .map(|t| (t.name.as_str(), t.scope.as_str(), t.bytes))
                    .collect();
                (o.uid.as_str(), o.bytes, states)
            })
            .collect();
        assert_eq!(
            flat,
            [
                ("source", 16, vec![("offsets", "operator", 16)]),
                (
                    "count",
                    155,
                    vec![("count", "keyed", 150), ("__event_timers", "keyed", 5)]
                ),
            ]
        );
        // The next checkpoint replaces them.
        s.on_state_sizes(5, &[]);
        assert_eq!(s.state_sizes.checkpoint_id, Some(5));
        assert!(s.state_sizes.operators.is_empty());
    }

    /// A keyed file of `size` bytes in the checkpoint's own folder, or shared (written for
    /// checkpoint `owner`).
    fn keyed(size: u64) -> Option<KeyedFileRef> {
        Some(KeyedFileRef {
            file: FileRef {
                path: "count/kg-0-64".into(),
                size,
            },
            range: KeyGroupRange { start: 0, end: 64 },
            entries: 1,
        })
    }

    fn shared(owner: u64, size: u64) -> SharedFile {
        SharedFile {
            path: format!("shared/count/kg-{owner}"),
            size,
            crc32c: 0,
            checkpoint_id: owner,
            run_id: "r".into(),
        }
    }

    #[test]
    fn new_and_shared_bytes_split_a_chain_by_the_checkpoint_its_files_were_written_for() {
        // Subtask 0: a chain of a base of checkpoint 3 and deltas of 5 and 7 (this one),
        // its keyed reference naming the base; operator state too. Subtask 1: a full
        // checkpoint's keyed file. Both report where their state lived.
        let mut a = ack(0, &[("count", &[("count", true, 900)])]);
        let op = &mut a.operators[0];
        op.state.operator_state = Some(FileRef {
            path: "count/op-0".into(),
            size: 7,
        });
        op.state.keyed_state = keyed(1000);
        op.incremental = Some(IncrementalKeyedRef {
            uid: "count".into(),
            subtask: 0,
            base: shared(3, 1000),
            deltas: vec![shared(5, 200), shared(7, 30)],
        });
        op.local = LocalStateSize {
            disk_bytes: 1 << 20,
            memory_entries: 10,
        };
        let mut b = ack(1, &[("count", &[("count", true, 400)])]);
        b.operators[0].state.keyed_state = keyed(410);
        b.operators[0].local = LocalStateSize {
            disk_bytes: 1 << 10,
            memory_entries: 5,
        };
        let z = state_sizes(7, &[a, b]);
        let o = &z.operators[0];
        assert_eq!(o.bytes, 1300);
        assert_eq!(
            o.new_bytes,
            7 + 30 + 410,
            "operator state, the delta, the full file"
        );
        assert_eq!(o.shared_bytes, 1000 + 200, "the base and the earlier delta");
        assert_eq!(o.local_disk_bytes, (1 << 20) + (1 << 10));
        assert_eq!(o.memory_entries, 15);
        // As `/api/state` and the dashboard read them.
        let v = serde_json::to_value(&z).unwrap();
        assert_eq!(v["operators"][0]["shared_bytes"], 1200);
        assert_eq!(v["operators"][0]["new_bytes"], 447);
        assert_eq!(v["operators"][0]["local_disk_bytes"], (1 << 20) + (1 << 10));
        assert_eq!(v["operators"][0]["memory_entries"], 15);
    }
}
