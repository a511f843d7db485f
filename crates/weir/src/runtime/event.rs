//! What flows on a channel between two subtasks (docs/architecture.md §2).
//!
//! One enum carries data and control in a single ordered stream, so a barrier can never
//! overtake the records sent before it: the channel's FIFO order *is* the consistency cut.
//!
//! The barrier itself is checkpoint vocabulary, owned by [`crate::checkpoint::barrier`] and
//! re-exported here, where the channel carries it.

pub use crate::checkpoint::barrier::{BarrierKind, CheckpointBarrier};
pub use crate::runtime::watermark::WatermarkStatus;

/// One element on a channel.
#[derive(Debug)]
pub enum Event<T> {
    /// A batch of records (never empty). Batching amortises the channel's cost per record.
    Batch(Vec<T>),
    /// A batch of records with their event timestamps (`timestamps[i]` is `records[i]`'s):
    /// only streams in event time pay for the column.
    TimestampedBatch(Vec<T>, Vec<u64>),
    /// The sender's watermark rose: no record with a timestamp at or below it follows. The
    /// sender flushed its open batch first, so it never overtakes a record.
    Watermark(u64),
    /// The sender became idle or active again ([`WatermarkStatus`]).
    WatermarkStatus(WatermarkStatus),
    /// A checkpoint barrier; the sender flushed its open batch first.
    Barrier(CheckpointBarrier),
    /// The sender has no more records. Barriers may still follow (the final checkpoint):
    /// the channel's end is its disconnection, which is orderly only after `EndOfInput` or a
    /// stopping barrier ([`BarrierKind::Stop`]); any other disconnection is a failure.
    EndOfInput,
}
