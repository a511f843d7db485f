//! The window operator under a [`Trigger`] (Flink's `WindowOperator`): any assigner —
//! fixed-size, merging (sessions) or global, in event or processing time — with any
//! trigger. The default event-time windows do not come here: their trigger is known, and
//! [`WindowAggregate`](super::operator::WindowAggregate) and
//! [`SessionWindowAggregate`](super::sessions::SessionWindowAggregate) run it without the
//! per-window trigger state and callbacks this operator pays for.
//!
//! State per key, both map states keyed by window end:
//! * [`TRIGGER_STATE`]: `end → (start, trigger state)`, every window of the key (the
//!   window registry: a window whose contents were purged stays here until cleaned up, so
//!   a continuous trigger keeps its schedule);
//! * [`TRIGGERED_CONTENTS_STATE`]: `end → accumulator`, the contents since the last purge.
//!
//! A record goes to its windows (those past their cleanup time are gone: the record is
//! late for them); the trigger sees it and decides. Timers are per key, so a firing timer
//! asks the trigger of each of the key's windows (see [`super::triggers`]). Cleanup, as in
//! Flink: an event-time window is removed when the watermark passes its last millisecond
//! plus the allowed lateness, a processing-time window when the processing time reaches
//! its last millisecond, a global window never.

use std::marker::PhantomData;
use std::sync::Arc;

use super::triggers::{Trigger, TriggerContext, TriggerResult, WindowContext};
use super::{TimeWindow, WindowAssigner};
use crate::error::{Error, Result};
use crate::runtime::functions::{CheckpointedFunction, Collector, KeyedProcessFunction};
use crate::state::keyed::{
    AccEvolution, AccShape, AggregateFunction, KeyedContext, KeyedStateStore, MapState, TimeDomain,
};
use crate::state::{Key, StateValue};

/// The map state of a triggered window operator holding each window's start and trigger
/// state, by window end.
pub const TRIGGER_STATE: &str = "window-triggers";

/// The map state of a triggered window operator holding each window's accumulator, by
/// window end.
pub const TRIGGERED_CONTENTS_STATE: &str = "window-trigger-contents";

/// Windows from `assigner` fired by `trigger`, aggregated by `aggregate`, emitted through
/// `window_fn(key, window, result)`; late records go through `late` if set.
pub struct TriggeredWindowAggregate<A, TR: Trigger<T>, AGG, WF, ACC, OUT, T, R> {
    assigner: A,
    trigger: TR,
    aggregate: Arc<AGG>,
    window_fn: Arc<WF>,
    lateness: u64,
    late: Option<fn(T) -> R>,
    #[allow(clippy::type_complexity)]
    states: Option<(MapState<u64, (u64, TR::State)>, MapState<u64, ACC>)>,
    /// The accumulators' declared version and migration function.
    evolution: AccEvolution,
    windows: Vec<TimeWindow>,
    _acc: PhantomData<fn() -> OUT>,
}

impl<A: Clone, TR: Trigger<T>, AGG, WF, ACC, OUT, T, R> Clone
    for TriggeredWindowAggregate<A, TR, AGG, WF, ACC, OUT, T, R>
{
    fn clone(&self) -> Self {
        TriggeredWindowAggregate {
            assigner: self.assigner.clone(),
            trigger: self.trigger.clone(),
            aggregate: self.aggregate.clone(),
            window_fn: self.window_fn.clone(),
            lateness: self.lateness,
            late: self.late,
            states: None,
            evolution: self.evolution.clone(),
            windows: Vec::new(),
            _acc: PhantomData,
        }
    }
}

impl<A, TR: Trigger<T>, AGG, WF, ACC, OUT, T, R>
    TriggeredWindowAggregate<A, TR, AGG, WF, ACC, OUT, T, R>
{
    /// Declares the accumulators' version and migration function (issue 26), which apply
    /// to the window contents (not to the trigger's own state).
    pub(crate) fn with_evolution(mut self, evolution: AccEvolution) -> Self {
        self.evolution = evolution;
        self
    }

    /// The operator; `lateness_ms` applies to event-time windows only (as in Flink).
    pub fn new(
        assigner: A,
        trigger: TR,
        aggregate: Arc<AGG>,
        window_fn: Arc<WF>,
        lateness_ms: u64,
        late: Option<fn(T) -> R>,
    ) -> Self {
        TriggeredWindowAggregate {
            assigner,
            trigger,
            aggregate,
            window_fn,
            lateness: lateness_ms,
            late,
            states: None,
            evolution: AccEvolution::default(),
            windows: Vec::new(),
            _acc: PhantomData,
        }
    }
}

impl<A, TR: Trigger<T>, AGG, WF, ACC, OUT, T, R> CheckpointedFunction
    for TriggeredWindowAggregate<A, TR, AGG, WF, ACC, OUT, T, R>
{
}

/// When `window` is removed from state, in `domain`'s time: `None` for never.
fn cleanup_time(window: TimeWindow, domain: TimeDomain, lateness: u64) -> Option<u64> {
    if window.is_global() {
        return None;
    }
    Some(match domain {
        TimeDomain::EventTime => window.max_timestamp().saturating_add(lateness),
        TimeDomain::ProcessingTime => window.max_timestamp(),
    })
}

impl<T, ACC, OUT, R, A, TR, AGG, WF> TriggeredWindowAggregate<A, TR, AGG, WF, ACC, OUT, T, R>
where
    ACC: StateValue,
    A: WindowAssigner<T>,
    TR: Trigger<T>,
    TR::State: StateValue,
    AGG: AggregateFunction<T, ACC, OUT> + 'static,
{
    /// Acts on the trigger's decision for `window`: emit its result, drop its contents.
    fn act<K: Key>(
        &self,
        result: TriggerResult,
        window: TimeWindow,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, R>,
    ) where
        WF: Fn(&K, TimeWindow, OUT) -> R,
    {
        let contents = &self.states.as_ref().expect("open() declares the state").1;
        if result.is_fire() {
            if let Some(acc) = ctx.map(contents).get(&window.end) {
                let value = self.aggregate.get_result(acc);
                // Early, on-time or late, a firing carries the window's last millisecond.
                out.collect_at(
                    (self.window_fn)(ctx.key(), window, value),
                    window.max_timestamp(),
                );
            }
        }
        if result.is_purge() {
            ctx.map(contents).remove(&window.end);
        }
    }

    /// Registers the timer that removes `window`, if it is ever removed.
    fn register_cleanup<K: Key>(&self, window: TimeWindow, ctx: &mut KeyedContext<'_, K>) {
        let domain = self.assigner.time_domain();
        match (cleanup_time(window, domain, self.lateness), domain) {
            (Some(t), TimeDomain::EventTime) => ctx.register_event_time_timer(t),
            (Some(t), TimeDomain::ProcessingTime) => {
                WindowContext(ctx).register_processing_time_timer(t)
            }
            (None, _) => {}
        }
    }

    /// The session `new` makes with the key's windows it overlaps or touches: merged into
    /// one window. Returns the merged window, a fresh trigger state for it and the ends of
    /// the windows it absorbs ([`Self::fold_absorbed`] folds their states in).
    fn merge<K: Key>(
        &self,
        new: TimeWindow,
        ctx: &mut KeyedContext<'_, K>,
    ) -> (TimeWindow, TR::State, Vec<u64>) {
        let (triggers, _) = self.states.as_ref().expect("open() declares the state");
        let mut merged = new;
        let mut absorbed = Vec::new();
        for (&end, &(start, _)) in ctx.map(triggers).entries() {
            if start <= new.end && end >= new.start {
                merged.start = merged.start.min(start);
                merged.end = merged.end.max(end);
                absorbed.push(end);
            }
        }
        (merged, TR::State::default(), absorbed)
    }

    /// Folds the absorbed windows (by end) into `merged`.
    fn fold_absorbed<K: Key>(
        &self,
        merged: TimeWindow,
        state: &mut TR::State,
        absorbed: &[u64],
        ctx: &mut KeyedContext<'_, K>,
    ) -> Result<()> {
        let (triggers, contents) = self.states.as_ref().expect("open() declares the state");
        let mut acc: Option<ACC> = None;
        for end in absorbed {
            let (_, other) = ctx
                .map(triggers)
                .remove(end)
                .expect("found in this key's windows");
            self.trigger
                .on_merge(merged, state, other, &mut WindowContext(ctx));
            if let Some(other) = ctx.map(contents).remove(end) {
                acc = Some(match acc {
                    None => other,
                    Some(a) => self.aggregate.merge(a, other).ok_or_else(|| {
                        Error::InvalidJob(
                            "session windows merge accumulators when a record joins two \
                             sessions, and this aggregate has no merge: implement \
                             AggregateFunction::merge"
                                .into(),
                        )
                    })?,
                });
            }
        }
        if let Some(acc) = acc {
            ctx.map(contents).put(merged.end, acc);
        }
        Ok(())
    }
}

impl<K, T, ACC, OUT, R, A, TR, AGG, WF> KeyedProcessFunction<K, T, R>
    for TriggeredWindowAggregate<A, TR, AGG, WF, ACC, OUT, T, R>
where
    K: Key,
    ACC: StateValue,
    OUT: 'static,
    A: WindowAssigner<T>,
    TR: Trigger<T>,
    TR::State: StateValue,
    AGG: AggregateFunction<T, ACC, OUT> + 'static,
    WF: Fn(&K, TimeWindow, OUT) -> R + Send + Sync + 'static,
    T: Clone + 'static,
    R: 'static,
{
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> Result<()> {
        let merging = self.assigner.size_ms().is_none();
        if merging && !self.trigger.can_merge() {
            return Err(Error::InvalidJob(
                "a session window assigner merges windows, and this trigger cannot merge its \
                 state (Trigger::can_merge is false): implement can_merge and on_merge, or \
                 use a window assigner that does not merge"
                    .into(),
            ));
        }
        let triggers = states.map_state(TRIGGER_STATE)?;
        states.with_window_evolution::<ACC>(&self.evolution, AccShape::Plain)?;
        self.states = Some((triggers, states.map_state(TRIGGERED_CONTENTS_STATE)?));
        Ok(())
    }

    fn process(
        &mut self,
        record: T,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, R>,
    ) -> Result<()> {
        let domain = self.assigner.time_domain();
        let (time, timestamp) = match domain {
            TimeDomain::EventTime => {
                let t = ctx.event_timestamp("event-time window")?;
                (t, t)
            }
            TimeDomain::ProcessingTime => {
                let now = ctx.current_processing_time();
                (now, ctx.timestamp().unwrap_or(now))
            }
        };
        self.windows.clear();
        self.assigner
            .assign_windows(&record, time, &mut self.windows)?;
        let watermark = ctx.current_watermark();
        let lateness = self.lateness;
        if domain == TimeDomain::EventTime {
            // A window past its cleanup time is gone: the record is late for it.
            self.windows.retain(|w| {
                watermark.is_none_or(|wm| w.max_timestamp().saturating_add(lateness) > wm)
            });
        }
        let merging = self.assigner.size_ms().is_none();
        let mut merges = Vec::new();
        if merging {
            if let Some(&new) = self.windows.first() {
                let (merged, state, absorbed) = self.merge(new, ctx);
                let late = domain == TimeDomain::EventTime
                    && watermark
                        .is_some_and(|wm| merged.max_timestamp().saturating_add(lateness) <= wm);
                if late {
                    self.windows.clear();
                } else {
                    self.windows[0] = merged;
                    merges.push((state, absorbed));
                }
            }
        }
        if self.windows.is_empty() {
            if let Some(late) = self.late {
                out.collect(late(record));
            }
            return Ok(());
        }
        let (triggers, contents) = self.states.expect("open() declares the state");
        let windows = std::mem::take(&mut self.windows);
        for &w in &windows {
            // The window's trigger state, taken out of its slot (not removed: removing a
            // key's last entry drops the key's map, and putting it back allocates it anew).
            let (mut state, new) = match merges.pop() {
                Some((mut state, absorbed)) => {
                    self.fold_absorbed(w, &mut state, &absorbed, ctx)?;
                    (state, true)
                }
                None => {
                    let mut new = false;
                    let slot = ctx.map(&triggers).get_mut_or_insert_with(w.end, || {
                        new = true;
                        (w.start, TR::State::default())
                    });
                    (std::mem::take(&mut slot.1), new)
                }
            };
            let aggregate = &self.aggregate;
            let acc = ctx
                .map(&contents)
                .get_mut_or_insert_with(w.end, || aggregate.create_accumulator());
            // The last window could take the record itself; windows under a trigger are
            // not the hot path, so every window gets a clone.
            aggregate.add(record.clone(), acc);
            let result =
                self.trigger
                    .on_element(&record, timestamp, w, &mut state, &mut WindowContext(ctx));
            *ctx.map(&triggers)
                .get_mut_or_insert_with(w.end, || (w.start, TR::State::default())) =
                (w.start, state);
            if new {
                // Timers are checkpointed with the window: once per window is enough.
                self.register_cleanup(w, ctx);
            }
            self.act(result, w, ctx, out);
        }
        self.windows = windows;
        Ok(())
    }

    fn on_timer(
        &mut self,
        time: u64,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, R>,
    ) -> Result<()> {
        let Some(domain) = ctx.time_domain() else {
            return Ok(());
        };
        let time = match domain {
            TimeDomain::EventTime => time,
            TimeDomain::ProcessingTime => WindowContext::<K>::trigger_time(time),
        };
        let (triggers, contents) = self.states.expect("open() declares the state");
        let windows: Vec<(u64, u64)> = ctx
            .map(&triggers)
            .entries()
            .map(|(&end, &(start, _))| (end, start))
            .collect();
        let assigner_domain = self.assigner.time_domain();
        for (end, start) in windows {
            let w = TimeWindow { start, end };
            let Some(mut state) = ctx.map(&triggers).get(&end).map(|(_, s)| s.clone()) else {
                continue;
            };
            let mut wctx = WindowContext(ctx);
            let result = match domain {
                TimeDomain::EventTime => self.trigger.on_event_time(time, w, &mut state, &mut wctx),
                TimeDomain::ProcessingTime => self
                    .trigger
                    .on_processing_time(time, w, &mut state, &mut wctx),
            };
            self.act(result, w, ctx, out);
            let cleanup =
                domain == assigner_domain && cleanup_time(w, domain, self.lateness) == Some(time);
            if cleanup {
                self.trigger.clear(w, &mut state, &mut WindowContext(ctx));
                ctx.map(&contents).remove(&end);
                ctx.map(&triggers).remove(&end);
            } else {
                ctx.map(&triggers).put(end, (start, state));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
