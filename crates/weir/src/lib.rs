//! # Weir — stateful stream processing with exactly-once checkpoints
//!
//! A job is a graph of operators built with the DataStream API ([`api::stream`]). The
//! engine chains operators, runs each parallel subtask on its own thread, and moves
//! batches of records over bounded channels ([`runtime`]). A checkpoint coordinator
//! injects barriers at the sources; every operator snapshots its state when the barrier
//! passes; the checkpoint is complete when its `_metadata` is written ([`checkpoint`]).
//! After a failure the job restarts from the latest complete checkpoint and the sources
//! replay from their checkpointed positions, so the state counts every record exactly
//! once (aligned barriers) or at least once (barriers not aligned). State lives in [`state`].
//!
//! `docs/architecture.md` in the repository is the map of the parts and what each
//! guarantees; module docs state each module's guarantees.
//!
//! # Layers
//!
//! Imports go one way, from the top down; a module never imports a layer above its own
//! (`tests/layers.rs` checks it, `docs/architecture.md` explains it):
//!
//! ```text
//! runner → api, connectors, testing → runtime → checkpoint → state → error → storage → clock
//! ```
//!
//! * `runner` (feature `runner`, on by default) — turns a job into a command-line program:
//!   flags, control endpoint, progress, summary, exit codes.
//! * [`api`], [`connectors`], [`testing`] — what jobs are written with.
//! * [`runtime`] — executes jobs; it owns the user-function traits, [`JobConfig`] and the
//!   job graph, which [`api`] re-exports under `api::functions` and `api::config`.
//! * [`checkpoint`] — the protocol; it owns the barrier, the checkpointing mode and the
//!   task snapshot, which the runtime re-exports from `runtime::{event, alignment, output}`.
//! * [`state`] — what operators remember.
//! * [`error`] — the engine's error, which wraps storage's.
//! * [`storage`] — checkpoint files on disk, their envelope format and shared byte ranges
//!   (still reachable under `checkpoint::{storage, format, shared_bytes}`).
//! * `clock` — the wall clock (internal).
//!
//! [`JobConfig`]: runtime::config::JobConfig

#![deny(missing_docs)]

pub mod api;
pub mod checkpoint;
mod clock;
pub mod connectors;
pub mod error;
#[cfg(feature = "runner")]
pub mod runner;
pub mod runtime;
pub mod state;
pub mod storage;
pub mod testing;

pub use error::{Error, Result};

/// The names most jobs need.
pub mod prelude {
    pub use crate::api::config::{JobConfig, RestoreFrom};
    pub use crate::api::functions::{
        BroadcastProcessFunction, CheckpointedFunction, Collector, KeyedProcessFunction,
        ProcessFunction, SinkFunction, SourceFunction, SourceStatus,
    };
    pub use crate::api::stream::{
        BroadcastConnectedStream, DataStream, KeyedStream, StreamEnvironment,
    };
    pub use crate::api::two_phase_commit::{
        TransactionContext, TwoPhaseCommit, TwoPhaseCommitSink,
    };
    pub use crate::api::windowed::WindowedStream;
    pub use crate::checkpoint::coordinator::CheckpointConfig;
    pub use crate::connectors::collect::{CollectSink, DiscardSink};
    pub use crate::connectors::files::{FileLineSource, FileSink, FileSource, TextFileSink};
    pub use crate::connectors::generator::GeneratorSource;
    pub use crate::runtime::alignment::CheckpointingMode;
    pub use crate::runtime::control::{
        ControlError, ControlErrorKind, JobControl, JobStatus, SnapshotDone,
    };
    pub use crate::runtime::executor::{AttemptSummary, JobResult, RestoreInfo};
    pub use crate::runtime::fault::FailureInjection;
    pub use crate::runtime::restart::RestartStrategy;
    pub use crate::runtime::watermark::{
        BoundedOutOfOrderness, WatermarkGenerator, WatermarkOutput, WatermarkStrategy,
    };
    pub use crate::runtime::windows::{
        SlidingEventTimeWindows, TimeWindow, TumblingEventTimeWindows, WindowAssigner,
    };
    pub use crate::state::broadcast::{
        BroadcastContext, BroadcastState, BroadcastStateStore, ReadOnlyBroadcastContext,
    };
    pub use crate::state::keyed::{
        AggregateFunction, AggregatingState, KeyedContext, KeyedEndContext, KeyedStateStore,
        ListState, MapState, ReducingState, StateHandle, StateTtlConfig, TimeDomain, TtlUpdate,
        ValueState,
    };
    pub use crate::state::operator::{InitContext, OperatorIdentity, SnapshotContext};
    pub use crate::{Error, Result};
}
