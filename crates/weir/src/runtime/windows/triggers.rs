//! Triggers (Flink's `Trigger` and `TriggerResult`): when a window emits its result and
//! when its contents are thrown away, decided per (key, window) on every record and every
//! timer.
//!
//! A trigger keeps its own state per key and window ([`Trigger::State`], e.g. a count or
//! the next time a continuous trigger fires); the window operator stores it in keyed
//! state beside the window's contents, so it is checkpointed, rescaled by key group and
//! shown by `weir state`. Triggers are pure decisions over that state and a
//! [`TriggerContext`] (time and timer registration): they are unit-tested here without a
//! job.
//!
//! Timers in Weir belong to a key, not to a (key, window) pair as in Flink: when a timer
//! fires, the operator asks the trigger of *every* window of the key, so a trigger must
//! check that the time is one it registered (as [`EventTimeTrigger`] checks the window's
//! last millisecond). For the same reason a trigger cannot delete timers — another window
//! of the key may wait for the same time — and a timer left behind by a purged window
//! fires into windows that ignore it.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::TimeWindow;
use crate::state::keyed::{KeyedContext, TimeDomain};
use crate::state::Key;

/// What a trigger decides for its window (Flink's `TriggerResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerResult {
    /// Nothing happens: the window keeps collecting.
    Continue,
    /// The window emits its current result and keeps its contents (a later firing emits
    /// the result updated with the records that arrived since).
    Fire,
    /// The window's contents are dropped without emitting.
    Purge,
    /// The window emits its result, then its contents are dropped (the next record starts
    /// the window afresh).
    FireAndPurge,
}

impl TriggerResult {
    /// Whether the window emits.
    pub fn is_fire(self) -> bool {
        matches!(self, TriggerResult::Fire | TriggerResult::FireAndPurge)
    }

    /// Whether the window's contents are dropped.
    pub fn is_purge(self) -> bool {
        matches!(self, TriggerResult::Purge | TriggerResult::FireAndPurge)
    }
}

/// What a trigger may see and do besides deciding (Flink's `Trigger.TriggerContext`): read
/// both clocks and register timers for the current key. A trait so that triggers are tested
/// without a running job.
pub trait TriggerContext {
    /// The operator's watermark, `None` before the first one.
    fn current_watermark(&self) -> Option<u64>;
    /// The processing time (ms since the Unix epoch) processing-time timers follow.
    fn current_processing_time(&self) -> u64;
    /// Asks for [`Trigger::on_event_time`] when the watermark reaches `time`.
    fn register_event_time_timer(&mut self, time: u64);
    /// Asks for [`Trigger::on_processing_time`] when the processing time reaches `time`.
    fn register_processing_time_timer(&mut self, time: u64);
}

/// The [`TriggerContext`] of the window operator: a key's context, with processing-time
/// timers moved one millisecond on. A processing-time timer at `t` fires once the clock
/// reads `t` or later, while a record processed in millisecond `t` still belongs to a
/// window ending at `t + 1`: a window firing at its last millisecond could take records
/// after it fired. So a trigger's timer at `t` is registered at `t + 1` and reported back
/// as `t` ([`WindowContext::trigger_time`]), firing once millisecond `t` has passed (as
/// Flink delays processing-time timers by one millisecond).
pub(crate) struct WindowContext<'c, 'a, K>(pub(crate) &'c mut KeyedContext<'a, K>);

impl<K> WindowContext<'_, '_, K> {
    /// The time a trigger registered for the processing-time timer firing at `fired`.
    pub(crate) fn trigger_time(fired: u64) -> u64 {
        fired.saturating_sub(1)
    }
}

impl<K: Key> TriggerContext for WindowContext<'_, '_, K> {
    fn current_watermark(&self) -> Option<u64> {
        self.0.current_watermark()
    }
    fn current_processing_time(&self) -> u64 {
        self.0.current_processing_time()
    }
    fn register_event_time_timer(&mut self, time: u64) {
        self.0.register_event_time_timer(time)
    }
    fn register_processing_time_timer(&mut self, time: u64) {
        self.0
            .register_processing_time_timer(time.saturating_add(1))
    }
}

/// Decides when a window of records of type `T` fires and purges (Flink's `Trigger`).
///
/// Set one with [`WindowedStream::trigger`](crate::api::windowed::WindowedStream::trigger);
/// without, each assigner has its default ([`EventTimeTrigger`], [`ProcessingTimeTrigger`]
/// or, for global windows, [`NeverTrigger`]). Timer callbacks run for every window of the
/// key (see the module documentation): return [`TriggerResult::Continue`] for a time this
/// trigger did not register for `window`.
pub trait Trigger<T>: Clone + Send + Sync + 'static {
    /// The trigger's state per key and window, kept in keyed state (`()` for none). A
    /// new window starts with `Default::default()`; a purge resets it.
    type State: Clone + Default + Send + Sync + Serialize + DeserializeOwned + 'static;

    /// Called for every record added to `window` (at `timestamp`: its event time, or the
    /// processing time for processing-time windows).
    fn on_element<C: TriggerContext>(
        &self,
        record: &T,
        timestamp: u64,
        window: TimeWindow,
        state: &mut Self::State,
        ctx: &mut C,
    ) -> TriggerResult;

    /// Called when an event-time timer of the key fires at `time`. The default,
    /// `Continue`, suits a trigger that registers no event-time timer (timers are per key:
    /// another window's may still arrive here).
    fn on_event_time<C: TriggerContext>(
        &self,
        time: u64,
        window: TimeWindow,
        state: &mut Self::State,
        ctx: &mut C,
    ) -> TriggerResult {
        let _ = (time, window, state, ctx);
        TriggerResult::Continue
    }

    /// Called when a processing-time timer of the key fires at `time`. The default,
    /// `Continue`, suits a trigger that registers no processing-time timer.
    fn on_processing_time<C: TriggerContext>(
        &self,
        time: u64,
        window: TimeWindow,
        state: &mut Self::State,
        ctx: &mut C,
    ) -> TriggerResult {
        let _ = (time, window, state, ctx);
        TriggerResult::Continue
    }

    /// Whether the trigger works with merging (session) windows: if not, using it with a
    /// session assigner is an error when the job is built.
    fn can_merge(&self) -> bool {
        false
    }

    /// Called when sessions merge into `window`: folds the state of one absorbed session,
    /// `other`, into `state` (which starts as the default) and re-registers the timers the
    /// merged window needs.
    fn on_merge<C: TriggerContext>(
        &self,
        window: TimeWindow,
        state: &mut Self::State,
        other: Self::State,
        ctx: &mut C,
    ) {
        let _ = (window, state, other, ctx);
    }

    /// Called when `window` is removed (purged or cleaned up), before its state is dropped.
    fn clear<C: TriggerContext>(&self, window: TimeWindow, state: &mut Self::State, ctx: &mut C) {
        let _ = (window, state, ctx);
    }
}

/// `Fire` if `fire`, else `Continue`.
pub(crate) fn fire_if(fire: bool) -> TriggerResult {
    if fire {
        TriggerResult::Fire
    } else {
        TriggerResult::Continue
    }
}

/// The time of `domain` a trigger compares its timers with: the watermark (`None` before
/// the first) or the processing time. With [`register_timer`], what lets a trigger be
/// written once for both domains.
pub(crate) fn current_time<C: TriggerContext>(domain: TimeDomain, ctx: &C) -> Option<u64> {
    match domain {
        TimeDomain::EventTime => ctx.current_watermark(),
        TimeDomain::ProcessingTime => Some(ctx.current_processing_time()),
    }
}

/// Registers a timer at `time` in `domain`.
pub(crate) fn register_timer<C: TriggerContext>(domain: TimeDomain, ctx: &mut C, time: u64) {
    match domain {
        TimeDomain::EventTime => ctx.register_event_time_timer(time),
        TimeDomain::ProcessingTime => ctx.register_processing_time_timer(time),
    }
}

/// Registers the timer at `window`'s last millisecond in `domain`, unless that time has
/// passed (a merged window that is already complete needs none).
pub(crate) fn register_end_if_open<C: TriggerContext>(
    domain: TimeDomain,
    window: TimeWindow,
    ctx: &mut C,
) {
    if current_time(domain, ctx).is_none_or(|now| window.max_timestamp() > now) {
        register_timer(domain, ctx, window.max_timestamp());
    }
}

mod basic;
mod continuous;

pub use basic::{
    CountTrigger, EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger, PurgingTrigger,
};
pub use continuous::{ContinuousEventTimeTrigger, ContinuousProcessingTimeTrigger};

#[cfg(test)]
mod tests;
