//! State: what operators remember between records, and how it is snapshotted and restored.
//!
//! * [`keyed`]: state scoped to the current key after `key_by`, stored per key group.
//! * [`operator`]: state that belongs to one parallel subtask (sources' positions, buffers),
//!   as named lists that are redistributed when parallelism changes.
//! * [`broadcast`]: maps kept identical on every subtask by a broadcast input.
//! * [`key_group`]: the stable hash and the key-group arithmetic both depend on.
//! * [`cow_map`]: the copy-on-write map that keeps the synchronous snapshot phase short.

pub mod broadcast;
pub mod cow_map;
pub mod key_group;
pub mod keyed;
pub mod operator;

use serde::{de::DeserializeOwned, Serialize};

/// A record type: plain Rust values that can be cloned, sent between threads and encoded.
///
/// Records are never boxed or serialized between chained operators or on local channels;
/// `Serialize` is needed only when a value ends up in state (keys, state values).
pub trait Data: Clone + Send + 'static {}
impl<T: Clone + Send + 'static> Data for T {}

/// A key type for `key_by`: hashed with the stable hasher to find its key group, and encoded
/// into keyed-state snapshots.
pub trait Key: Data + std::hash::Hash + Eq + Serialize + DeserializeOwned + Sync {}
impl<T: Data + std::hash::Hash + Eq + Serialize + DeserializeOwned + Sync> Key for T {}

/// A value that can live in state: encoded with postcard in snapshots, and shared
/// read-only with the thread that writes a snapshot (hence `Sync`).
pub trait StateValue: Data + Serialize + DeserializeOwned + Sync {}
impl<T: Data + Serialize + DeserializeOwned + Sync> StateValue for T {}

/// The kinds of state a snapshot can hold; recorded in files so tools can describe them.
///
/// Encoded by variant index: new kinds are only ever appended, so old files stay readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StateKind {
    /// Keyed value state: one value per key.
    Value,
    /// Operator list state, split evenly among subtasks on rescale.
    OperatorList,
    /// Operator list state, given whole to every subtask on restore.
    UnionList,
    /// Keyed list state: a list per key.
    List,
    /// Keyed reducing state: a value per key, folded by a reduce function.
    Reducing,
    /// Keyed aggregating state: an accumulator per key.
    Aggregating,
    /// Keyed map state: a map per key.
    Map,
    /// Processing-time timers of a keyed operator: timestamps per key.
    ProcessingTimers,
    /// Broadcast state: a map identical on every subtask.
    Broadcast,
    /// Event-time timers of a keyed operator: timestamps per key.
    EventTimers,
}

impl StateKind {
    /// A short lowercase name for messages and tools.
    pub fn name(self) -> &'static str {
        match self {
            StateKind::Value => "value",
            StateKind::OperatorList => "operator list",
            StateKind::UnionList => "union list",
            StateKind::List => "list",
            StateKind::Reducing => "reducing",
            StateKind::Aggregating => "aggregating",
            StateKind::Map => "map",
            StateKind::ProcessingTimers => "processing-time timers",
            StateKind::Broadcast => "broadcast",
            StateKind::EventTimers => "event-time timers",
        }
    }
}
