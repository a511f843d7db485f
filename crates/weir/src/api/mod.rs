//! The DataStream API: how a user describes a job, runs it and looks at the result. It is
//! the top layer of the engine: it imports the runtime, and nothing below imports it.
//!
//! * [`config`] — job-wide settings: checkpointing, mode, restarts, restore, failure
//!   injection.
//! * [`functions`] — the traits user code implements and their state hooks.
//! * [`stream`] — the environment, `DataStream` and `KeyedStream`.
//! * [`connected`] — two streams of different types processed together (`connect`).
//! * [`join`] — joins of two keyed streams (the interval join).
//! * [`two_phase_commit`] — exactly-once sinks: the two-phase-commit protocol.
//! * [`execution`] — what a run returns, and the handle that controls a running job.
//! * [`time`] — event time: watermark strategies and window assigners.
//! * [`windowed`] — event-time windows on keyed streams, aggregated incrementally.
//!
//! The types in `config`, `functions` and `execution` are owned by the runtime (which runs
//! the functions under the configuration) and the checkpoint protocol; they are re-exported
//! here, where users look for them. The runtime itself is internal.

/// The traits user code implements: sources, sinks, process functions and their state
/// hooks.
///
/// # The state-hook contract ([`CheckpointedFunction`](functions::CheckpointedFunction))
///
/// Every hook of one function instance runs on that instance's task thread, never
/// concurrently with `process`/`poll`/`invoke`, so functions need no locks:
/// 1. `initialize_state` — once per attempt, before the first record; tells whether the job
///    restores (and hands over the operator state assigned to this subtask) or starts fresh.
/// 2. `snapshot_state` — when a checkpoint barrier passes the operator: everything processed
///    before it is in, nothing after. It must be quick: it runs on the processing thread.
/// 3. `notify_checkpoint_complete(n)` — after checkpoint `n` (and so every earlier one) is
///    durable. It may arrive late or, after a failure, not at all: never rely on it for
///    correctness of state, only for side effects that may be repeated (committing output).
/// 4. `notify_checkpoint_aborted(n)` — checkpoint `n` will never complete.
///
/// An `Err` from any hook (or a panic) fails the task and with it the job attempt; the
/// restart strategy then restores the latest completed checkpoint.
///
/// Owned by the runtime, which calls the functions; re-exported here.
pub mod functions {
    pub use crate::runtime::co_process::{CoProcessFunction, KeyedCoProcessFunction};
    pub use crate::runtime::functions::{
        BroadcastProcessFunction, CheckpointedFunction, Collector, KeyedProcessFunction,
        ProcessFunction, SinkFunction, SourceFunction, SourceStatus,
    };
    pub use crate::runtime::interval_join::{JoinContext, ProcessJoinFunction};
}
pub mod connected;
pub mod join;
pub mod stream;
pub mod two_phase_commit;
pub mod windowed;

/// Jobs spread over workers hosted in one process (issue 24): they are built with this API
/// and run through the runtime's placement, so the tests sit in the API's layer, above the
/// runtime (`tests/layers.rs`).
#[cfg(all(test, feature = "cluster"))]
mod placement_tests;

/// The worker's relay (`runtime/worker/relay.rs`) on a job built with this API, which is
/// why its tests sit in the API's layer (with the cluster's side of a frozen snapshot).
#[cfg(all(test, feature = "cluster"))]
mod relay_tests;

/// Job-wide settings a job runs under: one [`JobConfig`](config::JobConfig) holds them all.
///
/// Re-exported from the runtime and the checkpoint protocol, which own them, so a job names
/// every setting from one place.
pub mod config {
    pub use crate::checkpoint::barrier::CheckpointingMode;
    pub use crate::checkpoint::coordinator::CheckpointConfig;
    pub use crate::runtime::config::{DiskStateMemory, JobConfig, RestoreFrom};
    pub use crate::runtime::coordinator::restart::RestartStrategy;
    pub use crate::runtime::fault::FailureInjection;
    pub use crate::runtime::state_backend::StateBackend;
}

/// Running a job: what [`StreamEnvironment::execute`](crate::api::stream::StreamEnvironment::execute)
/// returns, and the [`JobControl`](execution::JobControl) handle that takes savepoints, checkpoints and stops a
/// job while it runs.
///
/// Re-exported from the runtime, which fills them in; the runner builds its summary and
/// the control endpoint from nothing else, so a job run by hand can do the same.
pub mod execution {
    pub use crate::runtime::control::{
        AttemptStatus, CheckpointRecord, CheckpointStatus, ControlError, ControlErrorKind,
        DurationHistogram, InputStatus, JobControl, JobStatus, OperatorFigures, OperatorStateSize,
        OperatorStatus, SnapshotDone, StateSize, StateSizes, StreamStatus, SubtaskPhases,
        SubtaskTimeline, TaskStatus, WorkerStatus, WorkerSubtask,
    };
    pub use crate::runtime::result::{
        AttemptSummary, CompletedCheckpointStats, JobMetrics, JobResult, RestoreInfo,
    };
    pub use crate::runtime::schema_check::{SchemaReport, SchemaRow};
}

/// Event time: how records get timestamps and watermarks ([`WatermarkStrategy`](time::WatermarkStrategy)),
/// which windows a record belongs to ([`WindowAssigner`](time::WindowAssigner), in event or
/// processing time), when a window fires ([`Trigger`](time::Trigger)), and which clock
/// fired a timer ([`TimeDomain`](time::TimeDomain)).
///
/// Owned by the runtime (watermarks travel with the data, windows run as keyed operators)
/// and by keyed state (timers); re-exported here, where jobs name them.
pub mod time {
    pub use crate::runtime::watermark::{
        BoundedOutOfOrderness, TimestampAssigner, WatermarkGenerator, WatermarkOutput,
        WatermarkStrategy, MAX_WATERMARK,
    };
    pub use crate::runtime::windows::{
        ContinuousEventTimeTrigger, ContinuousProcessingTimeTrigger, CountTrigger,
        DynamicEventTimeSessionWindows, DynamicProcessingTimeSessionWindows,
        EventTimeSessionWindows, EventTimeTrigger, GlobalWindows, NeverTrigger,
        ProcessingTimeSessionWindows, ProcessingTimeTrigger, PurgingTrigger,
        SlidingEventTimeWindows, SlidingProcessingTimeWindows, TimeWindow, Trigger, TriggerContext,
        TriggerResult, TumblingEventTimeWindows, TumblingProcessingTimeWindows, WindowAssigner,
    };
    pub use crate::state::TimeDomain;
}
