//! State size per operator and state, from the newest completed checkpoint or savepoint:
//! what the dashboard's state table, `/api/state` and the `weir_state_size_bytes` gauge
//! show (issue 14).
//!
//! The sizes come with the tasks' acknowledgements (the writers count each state's encoded
//! bytes while they write it), so nothing reads the checkpoint back to learn them. They
//! are the encoded entries' bytes, summed over subtasks; the files add a little framing.

use serde::Serialize;

use crate::checkpoint::writer::TaskAck;
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
        let mut operators: Vec<OperatorStateSize> = Vec::new();
        for op in acks.iter().flat_map(|a| &a.operators) {
            let i = match operators.iter().position(|o| o.uid == op.uid) {
                Some(i) => i,
                None => {
                    operators.push(OperatorStateSize {
                        uid: op.uid.clone(),
                        bytes: 0,
                        states: Vec::new(),
                    });
                    operators.len() - 1
                }
            };
            let o = &mut operators[i];
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
        self.state_sizes = StateSizes {
            checkpoint_id: Some(id),
            operators,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::metadata::SubtaskStateMeta;
    use crate::checkpoint::writer::{OperatorAck, StateBytes};

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
}
