//! Windows on keyed streams (Flink's `WindowedStream`): an assigner puts every record into
//! windows by its timestamp; each (key, window) keeps one accumulator in keyed state; an
//! event-time timer at the window's last millisecond emits the result when the watermark
//! passes it and clears the window.
//!
//! * [`assigners`] — [`TimeWindow`], the [`WindowAssigner`] trait, tumbling and sliding
//!   event-time windows.
//! * [`count`] — count windows (a purging count trigger on global windows).
//! * [`operator`] — the keyed function that aggregates windows (`reduce`, `aggregate`).
//! * [`process`] — process-window functions, which see all the records of a window.
//! * [`sessions`] — session windows (fixed and dynamic gap) and the operator that merges
//!   them.
//!
//! Window contents are keyed state (a map state `__window_contents`-like name chosen by the
//! API, from window start to accumulator) plus event-time timers, so they are checkpointed,
//! rescaled by key group and shown by `weir state`.

pub mod assigners;
pub mod count;
pub mod operator;
pub mod process;
pub mod sessions;

pub use assigners::{
    SlidingEventTimeWindows, TimeWindow, TumblingEventTimeWindows, WindowAssigner,
};
pub use process::ProcessWindowFunction;
pub use sessions::{DynamicEventTimeSessionWindows, EventTimeSessionWindows};
