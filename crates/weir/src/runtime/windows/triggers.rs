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
use crate::error::{Error, Result};
use crate::state::keyed::KeyedContext;
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

    /// Called when an event-time timer of the key fires at `time`.
    fn on_event_time<C: TriggerContext>(
        &self,
        time: u64,
        window: TimeWindow,
        state: &mut Self::State,
        ctx: &mut C,
    ) -> TriggerResult;

    /// Called when a processing-time timer of the key fires at `time`.
    fn on_processing_time<C: TriggerContext>(
        &self,
        time: u64,
        window: TimeWindow,
        state: &mut Self::State,
        ctx: &mut C,
    ) -> TriggerResult;

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

/// Fires a window once the watermark passes its last millisecond, and again at once for
/// every record added after that within the allowed lateness (Flink's `EventTimeTrigger`,
/// the default of the event-time assigners).
#[derive(Debug, Clone, Copy, Default)]
pub struct EventTimeTrigger;

impl EventTimeTrigger {
    /// The trigger (Flink's `EventTimeTrigger.create()`).
    pub fn create() -> Self {
        EventTimeTrigger
    }
}

impl<T> Trigger<T> for EventTimeTrigger {
    type State = ();
    fn on_element<C: TriggerContext>(
        &self,
        _: &T,
        _: u64,
        window: TimeWindow,
        _: &mut (),
        ctx: &mut C,
    ) -> TriggerResult {
        if ctx
            .current_watermark()
            .is_some_and(|wm| window.max_timestamp() <= wm)
        {
            TriggerResult::Fire // a late firing
        } else {
            ctx.register_event_time_timer(window.max_timestamp());
            TriggerResult::Continue
        }
    }
    fn on_event_time<C: TriggerContext>(
        &self,
        time: u64,
        window: TimeWindow,
        _: &mut (),
        _: &mut C,
    ) -> TriggerResult {
        fire_if(time == window.max_timestamp())
    }
    fn on_processing_time<C: TriggerContext>(
        &self,
        _: u64,
        _: TimeWindow,
        _: &mut (),
        _: &mut C,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    fn can_merge(&self) -> bool {
        true
    }
    fn on_merge<C: TriggerContext>(&self, window: TimeWindow, _: &mut (), _: (), ctx: &mut C) {
        if ctx
            .current_watermark()
            .is_none_or(|wm| window.max_timestamp() > wm)
        {
            ctx.register_event_time_timer(window.max_timestamp());
        }
    }
}

/// Fires a window when the processing time reaches its last millisecond (Flink's
/// `ProcessingTimeTrigger`, the default of the processing-time assigners).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessingTimeTrigger;

impl ProcessingTimeTrigger {
    /// The trigger (Flink's `ProcessingTimeTrigger.create()`).
    pub fn create() -> Self {
        ProcessingTimeTrigger
    }
}

impl<T> Trigger<T> for ProcessingTimeTrigger {
    type State = ();
    fn on_element<C: TriggerContext>(
        &self,
        _: &T,
        _: u64,
        window: TimeWindow,
        _: &mut (),
        ctx: &mut C,
    ) -> TriggerResult {
        ctx.register_processing_time_timer(window.max_timestamp());
        TriggerResult::Continue
    }
    fn on_event_time<C: TriggerContext>(
        &self,
        _: u64,
        _: TimeWindow,
        _: &mut (),
        _: &mut C,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    fn on_processing_time<C: TriggerContext>(
        &self,
        time: u64,
        window: TimeWindow,
        _: &mut (),
        _: &mut C,
    ) -> TriggerResult {
        fire_if(time == window.max_timestamp())
    }
    fn can_merge(&self) -> bool {
        true
    }
    fn on_merge<C: TriggerContext>(&self, window: TimeWindow, _: &mut (), _: (), ctx: &mut C) {
        if window.max_timestamp() > ctx.current_processing_time() {
            ctx.register_processing_time_timer(window.max_timestamp());
        }
    }
}

/// Never fires: the default of [`GlobalWindows`](super::GlobalWindows), which emit only
/// under a trigger the job sets (Flink's `GlobalWindows.NeverTrigger`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverTrigger;

impl<T> Trigger<T> for NeverTrigger {
    type State = ();
    fn on_element<C: TriggerContext>(
        &self,
        _: &T,
        _: u64,
        _: TimeWindow,
        _: &mut (),
        _: &mut C,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    fn on_event_time<C: TriggerContext>(
        &self,
        _: u64,
        _: TimeWindow,
        _: &mut (),
        _: &mut C,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    fn on_processing_time<C: TriggerContext>(
        &self,
        _: u64,
        _: TimeWindow,
        _: &mut (),
        _: &mut C,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    fn can_merge(&self) -> bool {
        true
    }
}

/// Fires a window every `n` records added to it (Flink's `CountTrigger`); its state is the
/// count since the last firing. It does not purge: wrap it in [`PurgingTrigger`] for
/// windows of `n` records each.
#[derive(Debug, Clone, Copy)]
pub struct CountTrigger {
    n: u64,
}

impl CountTrigger {
    /// Fires every `n` records; 0 is an error (the window would never fire).
    pub fn of(n: u64) -> Result<Self> {
        if n == 0 {
            return Err(Error::InvalidJob(
                "CountTrigger::of(0): a count trigger fires every n records, and n must be \
                 at least 1"
                    .into(),
            ));
        }
        Ok(CountTrigger { n })
    }
}

impl<T> Trigger<T> for CountTrigger {
    type State = u64;
    fn on_element<C: TriggerContext>(
        &self,
        _: &T,
        _: u64,
        _: TimeWindow,
        count: &mut u64,
        _: &mut C,
    ) -> TriggerResult {
        *count += 1;
        if *count >= self.n {
            *count = 0;
            TriggerResult::Fire
        } else {
            TriggerResult::Continue
        }
    }
    fn on_event_time<C: TriggerContext>(
        &self,
        _: u64,
        _: TimeWindow,
        _: &mut u64,
        _: &mut C,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    fn on_processing_time<C: TriggerContext>(
        &self,
        _: u64,
        _: TimeWindow,
        _: &mut u64,
        _: &mut C,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    fn can_merge(&self) -> bool {
        true
    }
    /// The merged session's count is the sum of its sessions' counts (it fires at the next
    /// record if that reaches `n`, as in Flink).
    fn on_merge<C: TriggerContext>(&self, _: TimeWindow, count: &mut u64, other: u64, _: &mut C) {
        *count += other;
    }
}

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
        if next.is_none() {
            let at = next_fire(timestamp, self.interval, window);
            ctx.register_event_time_timer(at);
            *next = Some(at);
        }
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
        if *next == Some(time) {
            let at = next_fire(time, self.interval, window);
            ctx.register_event_time_timer(at);
            *next = Some(at);
            return TriggerResult::Fire;
        }
        TriggerResult::Continue
    }
    fn on_processing_time<C: TriggerContext>(
        &self,
        _: u64,
        _: TimeWindow,
        _: &mut Option<u64>,
        _: &mut C,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    fn can_merge(&self) -> bool {
        true
    }
    /// The merged session fires at the earliest of its sessions' next times.
    fn on_merge<C: TriggerContext>(
        &self,
        window: TimeWindow,
        next: &mut Option<u64>,
        other: Option<u64>,
        ctx: &mut C,
    ) {
        *next = match (*next, other) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = *next {
            ctx.register_event_time_timer(at);
        }
        if ctx
            .current_watermark()
            .is_none_or(|wm| window.max_timestamp() > wm)
        {
            ctx.register_event_time_timer(window.max_timestamp());
        }
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
        if next.is_none() {
            let at = next_fire(ctx.current_processing_time(), self.interval, window);
            ctx.register_processing_time_timer(at);
            *next = Some(at);
        }
        TriggerResult::Continue
    }
    fn on_event_time<C: TriggerContext>(
        &self,
        _: u64,
        _: TimeWindow,
        _: &mut Option<u64>,
        _: &mut C,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    fn on_processing_time<C: TriggerContext>(
        &self,
        time: u64,
        window: TimeWindow,
        next: &mut Option<u64>,
        ctx: &mut C,
    ) -> TriggerResult {
        if *next != Some(time) {
            return TriggerResult::Continue;
        }
        *next = None;
        if time < window.max_timestamp() {
            let at = next_fire(time, self.interval, window);
            ctx.register_processing_time_timer(at);
            *next = Some(at);
        }
        TriggerResult::Fire
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
        *next = match (*next, other) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = *next {
            ctx.register_processing_time_timer(at);
        }
    }
}

/// Makes every firing of `trigger` also purge the window (Flink's `PurgingTrigger`): e.g.
/// `PurgingTrigger::of(CountTrigger::of(n)?)` cuts a window into batches of `n` records.
#[derive(Debug, Clone, Copy)]
pub struct PurgingTrigger<TR> {
    inner: TR,
}

impl<TR> PurgingTrigger<TR> {
    /// `trigger`, purging whenever it fires.
    pub fn of(trigger: TR) -> Self {
        PurgingTrigger { inner: trigger }
    }
}

fn purging(r: TriggerResult) -> TriggerResult {
    if r.is_fire() {
        TriggerResult::FireAndPurge
    } else {
        r
    }
}

fn fire_if(fire: bool) -> TriggerResult {
    if fire {
        TriggerResult::Fire
    } else {
        TriggerResult::Continue
    }
}

impl<T, TR: Trigger<T>> Trigger<T> for PurgingTrigger<TR> {
    type State = TR::State;
    fn on_element<C: TriggerContext>(
        &self,
        record: &T,
        timestamp: u64,
        window: TimeWindow,
        state: &mut TR::State,
        ctx: &mut C,
    ) -> TriggerResult {
        purging(self.inner.on_element(record, timestamp, window, state, ctx))
    }
    fn on_event_time<C: TriggerContext>(
        &self,
        time: u64,
        window: TimeWindow,
        state: &mut TR::State,
        ctx: &mut C,
    ) -> TriggerResult {
        purging(self.inner.on_event_time(time, window, state, ctx))
    }
    fn on_processing_time<C: TriggerContext>(
        &self,
        time: u64,
        window: TimeWindow,
        state: &mut TR::State,
        ctx: &mut C,
    ) -> TriggerResult {
        purging(self.inner.on_processing_time(time, window, state, ctx))
    }
    fn can_merge(&self) -> bool {
        self.inner.can_merge()
    }
    fn on_merge<C: TriggerContext>(
        &self,
        window: TimeWindow,
        state: &mut TR::State,
        other: TR::State,
        ctx: &mut C,
    ) {
        self.inner.on_merge(window, state, other, ctx)
    }
    fn clear<C: TriggerContext>(&self, window: TimeWindow, state: &mut TR::State, ctx: &mut C) {
        self.inner.clear(window, state, ctx)
    }
}

#[cfg(test)]
mod tests;
