//! State: what operators remember between records, and how it is snapshotted and restored.
//!
//! What a function uses is re-exported here (and the common part in the prelude):
//!
//! * keyed state, scoped to the current key after `key_by` and stored per key group:
//!   [`ValueState`], [`ListState`], [`MapState`], [`ReducingState`], [`AggregatingState`],
//!   declared through the [`KeyedStateStore`] and read through the [`KeyedContext`], with
//!   an optional [`StateTtlConfig`];
//! * operator state, belonging to one parallel subtask (sources' positions, buffers): named
//!   lists handed out by the [`InitContext`] and filled through the [`SnapshotContext`],
//!   redistributed when parallelism changes;
//! * broadcast state, maps kept identical on every subtask by a broadcast input
//!   ([`BroadcastState`]);
//! * the key-group arithmetic rescaling rests on ([`key_group`], [`KeyGroupRange`]).
//!
//! How state is stored, snapshotted and restored (the state tables, the copy-on-write map,
//! the snapshot structures) is internal and may change.

pub(crate) mod after_ack;
pub(crate) mod broadcast;
// A self-contained data structure whose full API (len, get, iter…) its unit tests use.
pub(crate) mod cow_map;
pub(crate) mod key_group;
pub(crate) mod keyed;
pub(crate) mod operator;
pub mod schema;

pub use broadcast::{
    BroadcastContext, BroadcastMap, BroadcastState, BroadcastStateStore, ReadOnlyBroadcastContext,
};
pub use key_group::{
    key_group, key_group_of_hash, operator_index, stable_hash, KeyGroupRange, StableHasher,
    DEFAULT_MAX_PARALLELISM, MAX_MAX_PARALLELISM,
};
pub use keyed::{
    AggregateFunction, AggregatingAccess, AggregatingState, KeyedContext, KeyedEndContext,
    KeyedStateStore, ListAccess, ListState, MapAccess, MapState, ReducingAccess, ReducingState,
    StateHandle, StateTtlConfig, TimeDomain, TtlUpdate, ValueState,
};
pub use operator::{InitContext, OperatorIdentity, SnapshotContext};

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
    /// Window accumulators of a keyed window operator: one entry per (key, window end),
    /// grouped in memory by window so that a whole window fires and is removed at once.
    Window,
}

impl StateKind {
    /// Every kind, in variant order: to read one back by its [`name`](Self::name) where a
    /// format carries the name (the cluster's `Ack`), and to test that names stay distinct.
    pub const ALL: [StateKind; 11] = [
        StateKind::Value,
        StateKind::OperatorList,
        StateKind::UnionList,
        StateKind::List,
        StateKind::Reducing,
        StateKind::Aggregating,
        StateKind::Map,
        StateKind::ProcessingTimers,
        StateKind::Broadcast,
        StateKind::EventTimers,
        StateKind::Window,
    ];

    /// The kind whose [`name`](Self::name) is `name`, if any.
    pub fn from_name(name: &str) -> Option<StateKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

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
            StateKind::Window => "window",
        }
    }
}
