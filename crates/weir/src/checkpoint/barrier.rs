//! The checkpoint barrier and the checkpointing mode: the vocabulary the coordinator, the
//! tasks and `_metadata` share (docs/architecture.md §2, §3).
//!
//! They live in the checkpoint layer because the checkpoint protocol defines them; the
//! runtime, which carries barriers on its channels ([`crate::runtime::event`]) and aligns
//! them ([`crate::runtime::alignment`]), imports them from here and re-exports them under
//! its own paths.

/// A checkpoint barrier: everything sent before it on a channel belongs to checkpoint `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointBarrier {
    /// The checkpoint this barrier cuts for; strictly increasing within one job attempt.
    pub id: u64,
    /// When the coordinator triggered it (milliseconds since the Unix epoch).
    pub timestamp_ms: u64,
    /// What the snapshot is for; tasks treat a stop differently (they end after it).
    pub kind: BarrierKind,
}

impl CheckpointBarrier {
    /// A periodic checkpoint's barrier.
    pub fn checkpoint(id: u64, timestamp_ms: u64) -> Self {
        CheckpointBarrier {
            id,
            timestamp_ms,
            kind: BarrierKind::Checkpoint,
        }
    }
}

/// Why a barrier was injected (Flink's `SnapshotType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierKind {
    /// A checkpoint: periodic, at end of input, or asked for by the user.
    Checkpoint,
    /// A savepoint the job keeps running after.
    Savepoint,
    /// A savepoint that stops the job (`weir stop`): sources stop after the barrier and
    /// every task ends once the savepoint completed. With `drain`, sources first end their
    /// input, so operators flush what they hold (timers, partial results) into the savepoint's
    /// output; without, the job's state is kept as it is, to be resumed.
    Stop {
        /// End the input before the barrier.
        drain: bool,
    },
}

/// How a task with several inputs treats barriers (the job's checkpointing mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CheckpointingMode {
    /// Align barriers: state counts every record exactly once after recovery.
    ExactlyOnce,
    /// Do not align: cheaper, lower latency; counts may be higher after recovery.
    AtLeastOnce,
}

impl std::fmt::Display for CheckpointingMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CheckpointingMode::ExactlyOnce => "exactly-once",
            CheckpointingMode::AtLeastOnce => "at-least-once",
        })
    }
}
