//! What flows on a channel between two subtasks (docs/architecture.md §2).
//!
//! One enum carries data and control in a single ordered stream, so a barrier can never
//! overtake the records sent before it: the channel's FIFO order *is* the consistency cut.
//!
//! The barrier itself is checkpoint vocabulary, owned by [`crate::checkpoint::barrier`] and
//! re-exported here, where the channel carries it.

pub use crate::checkpoint::barrier::{BarrierKind, CheckpointBarrier};

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
