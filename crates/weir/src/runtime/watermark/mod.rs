//! Event time: watermark strategies, the watermark state machine of a task with several
//! inputs, and the operator that assigns timestamps and generates watermarks
//! (docs/architecture.md §6a).
//!
//! Event time is milliseconds since the Unix epoch, as `u64` (like Weir's processing time).
//! A watermark `w` says "no record with a timestamp `<= w` follows"; event-time timers at
//! `t <= w` fire when it arrives. Watermarks travel in-band on the channels, between the
//! batches and the barriers, and are never checkpointed: after a restore every task starts
//! again from [`MIN_WATERMARK`], as in Flink.
//!
//! * [`strategy`] — [`WatermarkStrategy`], [`WatermarkGenerator`] and the built-in
//!   generators (bounded out-of-orderness, monotonous timestamps, idleness).
//! * [`valve`] — a task's watermark: the minimum over its inputs that are not idle, never
//!   going backwards (Flink's `StatusWatermarkValve`); pure, tested without threads.
//! * [`operator`] — the operator a strategy becomes, at a source or after any operator.
//! * `alignment` — watermark alignment: a source split running ahead of its group pauses.

pub(crate) mod alignment;
pub mod operator;
pub mod strategy;
pub mod valve;

pub use strategy::{
    BoundedOutOfOrderness, TimestampAssigner, WatermarkGenerator, WatermarkOutput,
    WatermarkStrategy,
};
pub use valve::StatusWatermarkValve;

/// The watermark every task starts from: nothing is known about event time yet (Flink's
/// `Long.MIN_VALUE`). It is never sent: a watermark must rise above it, and functions see it
/// as no watermark (`KeyedContext::current_watermark` is `None`).
pub const MIN_WATERMARK: u64 = 0;

/// The watermark that ends event time: a bounded input emits it when it is exhausted, so
/// that every event-time timer fires (Flink's `Watermark.MAX_WATERMARK`).
pub const MAX_WATERMARK: u64 = u64::MAX;

/// Whether a stream currently produces watermarks (Flink's `WatermarkStatus`). An idle
/// input (a source split without data for the idleness timeout) does not hold back the
/// watermark of the tasks it feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatermarkStatus {
    /// The stream produces records and watermarks; its watermark counts.
    Active,
    /// The stream is idle: it is left out of its consumers' watermark minimum.
    Idle,
}
