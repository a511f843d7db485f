//! Windows on keyed streams (Flink's `WindowedStream`): an assigner puts every record into
//! windows by its timestamp; each (key, window) keeps one accumulator in keyed state; when
//! the watermark passes the window's last millisecond the result is emitted and the window
//! cleared.
//!
//! * [`assigners`] — [`TimeWindow`], the [`WindowAssigner`] trait, tumbling and sliding
//!   event-time windows.
//! * [`count`] — count windows (a purging count trigger on global windows) and sliding
//!   count windows (a count evictor and a count trigger).
//! * [`operator`] — the keyed function that aggregates windows (`reduce`, `aggregate`).
//! * [`process`] — process-window functions, which see all the records of a window.
//! * [`processing`] — tumbling, sliding and session windows in processing time, and global
//!   windows.
//! * [`sessions`] — session windows (fixed and dynamic gap) and the operator that merges
//!   them.
//! * [`triggers`] — the [`Trigger`] trait and Flink's built-in triggers.
//! * [`triggered`] — the window operator under any trigger, for any assigner.
//!
//! The default event-time path (`window(..)` with an event-time assigner and no
//! `.trigger(..)`) runs [`operator`] or [`sessions`], whose event-time trigger is built in;
//! every other combination runs [`triggered`], which keeps per-window trigger state.
//!
//! Window contents are keyed state, so they are checkpointed, rescaled by key group and
//! shown by `weir state`: [`operator`] keeps a window state (`window-accumulators`: per
//! key and window end, the accumulator) and fires whole windows from `on_watermark`; the
//! other operators keep map states plus event-time timers per (key, window).

pub mod assigners;
pub mod count;
pub mod operator;
pub mod process;
pub mod processing;
pub mod sessions;
pub mod triggered;
pub mod triggers;

pub use assigners::{
    SlidingEventTimeWindows, TimeWindow, TumblingEventTimeWindows, WindowAssigner,
};
pub use process::ProcessWindowFunction;
pub use processing::{
    DynamicProcessingTimeSessionWindows, GlobalWindows, ProcessingTimeSessionWindows,
    SlidingProcessingTimeWindows, TumblingProcessingTimeWindows,
};
pub use sessions::{DynamicEventTimeSessionWindows, EventTimeSessionWindows};
pub use triggers::{
    ContinuousEventTimeTrigger, ContinuousProcessingTimeTrigger, CountTrigger, EventTimeTrigger,
    NeverTrigger, ProcessingTimeTrigger, PurgingTrigger, Trigger, TriggerContext, TriggerResult,
};
