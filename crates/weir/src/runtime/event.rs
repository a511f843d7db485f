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
}

/// One element on a channel.
#[derive(Debug)]
pub enum Event<T> {
    /// A batch of records (never empty). Batching amortises the channel's cost per record.
    Batch(Vec<T>),
    /// A checkpoint barrier; the sender flushed its open batch first.
    Barrier(CheckpointBarrier),
    /// The sender has no more records; the last event on the channel.
    EndOfInput,
}
