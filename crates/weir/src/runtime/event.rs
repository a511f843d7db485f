//! What flows on a channel between two subtasks (DESIGN.md §2).
//!
//! One enum carries data and control in a single ordered stream, so a barrier can never
//! overtake the records sent before it: the channel's FIFO order *is* the consistency cut.

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

/// One element on a channel.
#[derive(Debug)]
pub enum Event<T> {
    /// A batch of records (never empty). Batching amortises the channel's cost per record.
    Batch(Vec<T>),
    /// A checkpoint barrier; the sender flushed its open batch first.
    Barrier(CheckpointBarrier),
    /// The sender has no more records. Barriers may still follow (the final checkpoint):
    /// the channel's end is its disconnection, which is orderly only after `EndOfInput` or a
    /// stopping barrier ([`BarrierKind::Stop`]); any other disconnection is a failure.
    EndOfInput,
}
