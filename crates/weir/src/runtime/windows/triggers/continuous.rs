//! The continuous triggers: periodic early firings of a window, in event or processing
//! time.

use super::{register_end_if_open, register_timer, Trigger, TriggerContext, TriggerResult};
use crate::error::{Error, Result};
use crate::runtime::windows::TimeWindow;
use crate::state::keyed::TimeDomain;

fn interval_ms(what: &str, interval: std::time::Duration) -> Result<u64> {
    match u64::try_from(interval.as_millis()) {
        Ok(0) => Err(Error::InvalidJob(format!(
            "{what}::of({interval:?}): the interval is 0 ms; a continuous trigger fires every \
             interval, which must be at least 1 ms"
        ))),
        Ok(ms) => Ok(ms),
        Err(_) => Err(Error::InvalidJob(format!(
            "{what}::of({interval:?}): the interval is too large"
        ))),
    }
}

/// The next time a continuous trigger fires after `time`: a multiple of `interval`, but
/// never after the window's last millisecond.
fn next_fire(time: u64, interval: u64, window: TimeWindow) -> u64 {
    (time - time % interval)
        .saturating_add(interval)
        .min(window.max_timestamp())
}

/// Schedules the first firing of a window at the multiple of `interval` after `from`
/// (the record's event time, or the processing time), unless one is scheduled.
fn schedule_first<C: TriggerContext>(
    domain: TimeDomain,
    from: u64,
    interval: u64,
    window: TimeWindow,
    next: &mut Option<u64>,
    ctx: &mut C,
) {
    if next.is_none() {
        let at = next_fire(from, interval, window);
        register_timer(domain, ctx, at);
        *next = Some(at);
    }
}

/// A timer at `time` fired: if it is the window's scheduled firing, fires and schedules the
/// next one (none after the window's last millisecond).
fn on_scheduled<C: TriggerContext>(
    domain: TimeDomain,
    time: u64,
    interval: u64,
    window: TimeWindow,
    next: &mut Option<u64>,
    ctx: &mut C,
) -> TriggerResult {
    if *next != Some(time) {
        return TriggerResult::Continue;
    }
    *next = None;
    if time < window.max_timestamp() {
        let at = next_fire(time, interval, window);
        register_timer(domain, ctx, at);
        *next = Some(at);
    }
    TriggerResult::Fire
}

/// Sessions merged: the merged window fires at the earliest of its sessions' next times.
fn merge_next<C: TriggerContext>(
    domain: TimeDomain,
    next: &mut Option<u64>,
    other: Option<u64>,
    ctx: &mut C,
) {
    *next = match (*next, other) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(at) = *next {
        register_timer(domain, ctx, at);
    }
}

/// Fires a window every `interval` of event time while it is open, and when the watermark
/// passes its end (Flink's `ContinuousEventTimeTrigger`): early results of a long window,
/// or periodic results of a global one. Its state is the next time it fires.
#[derive(Debug, Clone, Copy)]
pub struct ContinuousEventTimeTrigger {
    interval: u64,
}

impl ContinuousEventTimeTrigger {
    /// Fires every `interval` of event time (aligned to multiples of it); 0 is an error.
    pub fn of(interval: std::time::Duration) -> Result<Self> {
        Ok(ContinuousEventTimeTrigger {
            interval: interval_ms("ContinuousEventTimeTrigger", interval)?,
        })
    }
}

impl<T> Trigger<T> for ContinuousEventTimeTrigger {
    type State = Option<u64>;
    fn on_element<C: TriggerContext>(
        &self,
        _: &T,
        timestamp: u64,
        window: TimeWindow,
        next: &mut Option<u64>,
        ctx: &mut C,
    ) -> TriggerResult {
        if ctx
            .current_watermark()
            .is_some_and(|wm| window.max_timestamp() <= wm)
        {
            return TriggerResult::Fire; // the window is complete: fire at once
        }
        ctx.register_event_time_timer(window.max_timestamp());
        schedule_first(
            TimeDomain::EventTime,
            timestamp,
            self.interval,
            window,
            next,
            ctx,
        );
        TriggerResult::Continue
    }
    fn on_event_time<C: TriggerContext>(
        &self,
        time: u64,
        window: TimeWindow,
        next: &mut Option<u64>,
        ctx: &mut C,
    ) -> TriggerResult {
        if time == window.max_timestamp() {
            return TriggerResult::Fire;
        }
        on_scheduled(
            TimeDomain::EventTime,
            time,
            self.interval,
            window,
            next,
            ctx,
        )
    }
    fn can_merge(&self) -> bool {
        true
    }
    /// The merged session fires at the earliest of its sessions' next times, and at its
    /// end.
    fn on_merge<C: TriggerContext>(
        &self,
        window: TimeWindow,
        next: &mut Option<u64>,
        other: Option<u64>,
        ctx: &mut C,
    ) {
        merge_next(TimeDomain::EventTime, next, other, ctx);
        register_end_if_open(TimeDomain::EventTime, window, ctx);
    }
}

/// Fires a window every `interval` of processing time after its first record (Flink's
/// `ContinuousProcessingTimeTrigger`), aligned to multiples of the interval and at the
/// window's last millisecond at the latest. Its state is the next time it fires.
#[derive(Debug, Clone, Copy)]
pub struct ContinuousProcessingTimeTrigger {
    interval: u64,
}

impl ContinuousProcessingTimeTrigger {
    /// Fires every `interval` of processing time; 0 is an error.
    pub fn of(interval: std::time::Duration) -> Result<Self> {
        Ok(ContinuousProcessingTimeTrigger {
            interval: interval_ms("ContinuousProcessingTimeTrigger", interval)?,
        })
    }
}

impl<T> Trigger<T> for ContinuousProcessingTimeTrigger {
    type State = Option<u64>;
    fn on_element<C: TriggerContext>(
        &self,
        _: &T,
        _: u64,
        window: TimeWindow,
        next: &mut Option<u64>,
        ctx: &mut C,
    ) -> TriggerResult {
        let now = ctx.current_processing_time();
        schedule_first(
            TimeDomain::ProcessingTime,
            now,
            self.interval,
            window,
            next,
            ctx,
        );
        TriggerResult::Continue
    }
    fn on_processing_time<C: TriggerContext>(
        &self,
        time: u64,
        window: TimeWindow,
        next: &mut Option<u64>,
        ctx: &mut C,
    ) -> TriggerResult {
        on_scheduled(
            TimeDomain::ProcessingTime,
            time,
            self.interval,
            window,
            next,
            ctx,
        )
    }
    fn can_merge(&self) -> bool {
        true
    }
    /// The merged session fires at the earliest of its sessions' next times.
    fn on_merge<C: TriggerContext>(
        &self,
        _: TimeWindow,
        next: &mut Option<u64>,
        other: Option<u64>,
        ctx: &mut C,
    ) {
        merge_next(TimeDomain::ProcessingTime, next, other, ctx);
    }
}
