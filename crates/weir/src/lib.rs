//! # Weir — stateful stream processing with exactly-once checkpoints
//!
//! A job is a graph of operators built with the DataStream API ([`api::stream`]). The
//! engine chains operators, runs each parallel subtask on its own thread, and moves
//! batches of records over bounded channels. A checkpoint coordinator injects barriers at
//! the sources; every operator snapshots its state when the barrier passes; the checkpoint
//! is complete when its `_metadata` is written. After a failure the job restarts from the
//! latest complete checkpoint and the sources replay from their checkpointed positions, so
//! the state counts every record exactly once (aligned barriers) or at least once
//! (barriers not aligned).
//!
//! ```
//! use weir::prelude::*;
//!
//! # fn main() -> weir::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let mut config = JobConfig::new("counts");
//! config.parallelism = 2;
//! # config.checkpoint_dir = dir.path().join("checkpoints");
//! let env = StreamEnvironment::new(config);
//! let out = CollectSink::new();
//! env.add_source("events", GeneratorSource::new(10_000))
//!     .uid("events")
//!     .map(|i: u64| (i % 10, 1u64))
//!     .key_by(|r: &(u64, u64)| r.0)
//!     .reduce(|a, b| (a.0, a.1 + b.1))
//!     .uid("count")
//!     .add_sink("out", out.clone());
//! let result = env.execute()?;
//! assert_eq!(result.attempts, 1);
//! // reduce emits a running count per event: each key's last count is 1 000.
//! let records = out.take();
//! assert_eq!(records.len(), 10_000);
//! assert_eq!(records.iter().filter(|r| r.1 == 1_000).count(), 10);
//! # Ok(())
//! # }
//! ```
//!
//! To turn such a job into a command-line program with every operational flag, the
//! control endpoint (`weir status|savepoint|stop --job ADDR`), the progress line and the
//! exit codes, hand its graph-building function to [`runner::Runner`].
//!
//! # The public API
//!
//! What a job is written with, and what we change only deliberately, saying so:
//!
//! * [`prelude`] — the names most jobs need, in one `use`.
//! * [`api`] — the DataStream API ([`api::stream`]), the function traits and their state
//!   hooks ([`api::functions`]), job settings ([`api::config`]), exactly-once sinks by
//!   two-phase commit ([`api::two_phase_commit`]), and what a run returns and the handle
//!   that controls it ([`api::execution`]).
//! * [`state`] — keyed, operator and broadcast state, and the key-group arithmetic.
//! * [`connectors`] — sources and sinks that need no server (generator, files, collect).
//! * `runner` (feature `runner`, on by default) — a job as a command-line program.
//! * [`testing`] — helpers for tests that prove a job's exactly-once behaviour.
//! * [`Error`] and [`Result`].
//!
//! Public but not yet stable (real APIs whose shape follows work still under way):
//!
//! * [`inspect`] — reading checkpoints and savepoints from tools.
//! * [`storage`] — the storage backend trait, [`storage::open_backend`] and the local,
//!   in-memory and S3 backends. **Storage is not an extension point yet:** the engine and
//!   the tools pick the backend from the location (`--checkpoint-dir`, `--restore`,
//!   `--savepoint-dir`: a path, `s3://…` or `mem://…`), and neither the runner nor
//!   [`JobConfig`](api::config::JobConfig) accepts a backend of your own. Implementing
//!   [`StorageBackend`](storage::backend::StorageBackend) compiles, but nothing would use it.
//!
//! Extension points are traits: [`SourceFunction`](api::functions::SourceFunction) and
//! [`SinkFunction`](api::functions::SinkFunction) for connectors,
//! [`TwoPhaseCommitSink`](api::two_phase_commit::TwoPhaseCommitSink) for exactly-once
//! output, and the process functions and
//! [`CheckpointedFunction`](api::functions::CheckpointedFunction) for logic and state.
//! Checkpoint storage is not one of them yet (see [`storage`] above).
//!
//! The engine itself (the runtime's tasks and channels, the checkpoint coordinator, the
//! snapshot writer and restore, the file formats) is internal (`pub(crate)`), so it can
//! change without breaking jobs.
//!
//! # Layers
//!
//! Imports go one way, from the top down; a module never imports a layer above its own
//! (`tests/layers.rs` checks it, `docs/architecture.md` explains it, and module docs state
//! each module's guarantees):
//!
//! ```text
//! runner → api, connectors, testing, inspect → runtime → checkpoint → state → error
//!        → storage → clock
//! ```
//!
//! `runtime` (tasks, channels, attempts, restarts) and `checkpoint` (the protocol,
//! metadata, writing, restoring) are internal; `api` re-exports what jobs use of them.

#![deny(missing_docs)]

pub mod api;
pub(crate) mod checkpoint;
mod clock;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub mod connectors;
pub mod error;
pub mod inspect;
#[cfg(feature = "runner")]
pub mod runner;
pub(crate) mod runtime;
pub mod state;
pub mod storage;
pub mod testing;

pub use error::{Error, Result};

/// The names most jobs need, in one `use weir::prelude::*;`: the DataStream API, the
/// function traits, state, settings, the built-in sources and sinks, two-phase commit and
/// what a run returns. Every name is re-exported from its public module ([`api`],
/// [`state`], [`connectors`]), where its documentation lives.
pub mod prelude {
    pub use crate::api::config::{
        CheckpointConfig, CheckpointingMode, FailureInjection, JobConfig, RestartStrategy,
        RestoreFrom, StateBackend,
    };
    pub use crate::api::connected::{ConnectedStreams, KeyedConnectedStreams};
    pub use crate::api::execution::{
        AttemptSummary, ControlError, ControlErrorKind, JobControl, JobResult, JobStatus,
        RestoreInfo, SnapshotDone,
    };
    pub use crate::api::functions::{
        BroadcastProcessFunction, CheckpointedFunction, CoProcessFunction, Collector, JoinContext,
        KeyedCoProcessFunction, KeyedProcessFunction, ProcessFunction, ProcessJoinFunction,
        SinkFunction, SourceFunction, SourceStatus,
    };
    pub use crate::api::join::{
        IntervalJoin, IntervalJoined, JoinEqual, JoinWhere, JoinedStreams, WindowedJoin,
    };
    pub use crate::api::stream::{
        BroadcastConnectedStream, DataStream, KeyedStream, StreamEnvironment,
    };
    pub use crate::api::time::{
        BoundedOutOfOrderness, ContinuousEventTimeTrigger, ContinuousProcessingTimeTrigger,
        CountTrigger, DynamicEventTimeSessionWindows, DynamicProcessingTimeSessionWindows,
        EventTimeSessionWindows, EventTimeTrigger, GlobalWindows, ProcessingTimeSessionWindows,
        ProcessingTimeTrigger, PurgingTrigger, SlidingEventTimeWindows,
        SlidingProcessingTimeWindows, TimeDomain, TimeWindow, Trigger, TriggerContext,
        TriggerResult, TumblingEventTimeWindows, TumblingProcessingTimeWindows, WatermarkGenerator,
        WatermarkOutput, WatermarkStrategy, WindowAssigner,
    };
    pub use crate::api::two_phase_commit::{
        TransactionContext, TwoPhaseCommit, TwoPhaseCommitSink,
    };
    pub use crate::api::windowed::{
        CountWindowedStream, DefaultTrigger, LateDataWindowedStream, ProcessWindowFunction,
        SlidingCountWindowedStream, WindowOutputs, WindowedStream, WithTrigger,
    };
    pub use crate::connectors::collect::{CollectSink, DiscardSink};
    pub use crate::connectors::files::{FileLineSource, FileSink, FileSource, TextFileSink};
    pub use crate::connectors::generator::GeneratorSource;
    pub use crate::state::schema::OperatorListDeclaration;
    pub use crate::state::{
        AggregateFunction, AggregatingState, BroadcastContext, BroadcastState, BroadcastStateStore,
        InitContext, KeyedContext, KeyedEndContext, KeyedStateStore, ListState, MapState,
        OperatorIdentity, ReadOnlyBroadcastContext, ReducingState, SnapshotContext, StateHandle,
        StateTtlConfig, TtlUpdate, ValueState,
    };
    pub use crate::{Error, Result};
}
