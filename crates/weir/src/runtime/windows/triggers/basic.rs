//! The one-shot triggers: the assigners' defaults (event time, processing time, never),
//! the count trigger, and the purging wrapper.

use super::{fire_if, register_end_if_open, Trigger, TriggerContext, TriggerResult};
use crate::error::{Error, Result};
use crate::runtime::windows::TimeWindow;
use crate::state::keyed::TimeDomain;

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
    fn can_merge(&self) -> bool {
        true
    }
    fn on_merge<C: TriggerContext>(&self, window: TimeWindow, _: &mut (), _: (), ctx: &mut C) {
        register_end_if_open(TimeDomain::EventTime, window, ctx);
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
        register_end_if_open(TimeDomain::ProcessingTime, window, ctx);
    }
}

/// Never fires: the default of [`GlobalWindows`](crate::runtime::windows::GlobalWindows), which emit only
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
    fn can_merge(&self) -> bool {
        true
    }
    /// The merged session's count is the sum of its sessions' counts (it fires at the next
    /// record if that reaches `n`, as in Flink).
    fn on_merge<C: TriggerContext>(&self, _: TimeWindow, count: &mut u64, other: u64, _: &mut C) {
        *count += other;
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
