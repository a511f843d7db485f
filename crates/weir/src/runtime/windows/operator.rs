//! The window operator: a keyed function that keeps one accumulator per (key, window) in a
//! map state (window end → accumulator) and an event-time timer at each window's last
//! millisecond. When the watermark reaches the timer the window's result is emitted (its
//! timestamp is the window's last millisecond).
//!
//! Lateness (Flink's `allowedLateness` and `EventTimeTrigger`): a window stays in state
//! until the watermark passes its last millisecond plus the allowed lateness, its *cleanup
//! time*. A record for a window the watermark already fired but not cleaned up is added and
//! the window fires again at once with the updated result (a *late firing*, timestamped
//! with the late record's time). With a lateness of 0 (the default) the firing timer is the
//! cleanup timer and one timer per window is all there is; otherwise a second timer at the
//! cleanup time removes the window without emitting.
//!
//! A record all of whose windows are past their cleanup time is late: dropped, or, when the
//! job asked for it, emitted as a late-data record (`side_output_late_data`) through a
//! function that wraps it into the operator's output type.

use std::marker::PhantomData;
use std::sync::Arc;

use super::{TimeWindow, WindowAssigner};
use crate::error::Result;
use crate::runtime::functions::{CheckpointedFunction, Collector, KeyedProcessFunction};
use crate::state::keyed::{AggregateFunction, KeyedContext, KeyedStateStore, MapState, TimeDomain};
use crate::state::{Key, StateValue};

/// The name of the map state holding the window accumulators.
pub const WINDOW_STATE: &str = "window-contents";

/// Aggregates the windows of a keyed stream with `aggregate` and turns each window's result
/// into the output with `window_fn(key, window, result)`; late records go to `late` if set.
pub struct WindowAggregate<A, AGG, WF, ACC, OUT, T, R> {
    assigner: A,
    aggregate: Arc<AGG>,
    window_fn: Arc<WF>,
    /// The allowed lateness in milliseconds.
    lateness: u64,
    /// Wraps a late record into the output (the late-data side output); `None` drops it.
    late: Option<fn(T) -> R>,
    state: Option<MapState<u64, ACC>>,
    windows: Vec<TimeWindow>,
    _acc: PhantomData<fn() -> (ACC, OUT)>,
}

impl<A: Clone, AGG, WF, ACC, OUT, T, R> Clone for WindowAggregate<A, AGG, WF, ACC, OUT, T, R> {
    fn clone(&self) -> Self {
        WindowAggregate {
            assigner: self.assigner.clone(),
            aggregate: self.aggregate.clone(),
            window_fn: self.window_fn.clone(),
            lateness: self.lateness,
            late: self.late,
            state: None,
            windows: Vec::new(),
            _acc: PhantomData,
        }
    }
}

impl<A, AGG, WF, ACC, OUT, T, R> WindowAggregate<A, AGG, WF, ACC, OUT, T, R> {
    /// Windows from `assigner`, aggregated by `aggregate`, emitted through `window_fn`; no
    /// lateness, late records dropped.
    pub fn new(assigner: A, aggregate: AGG, window_fn: WF) -> Self {
        WindowAggregate {
            assigner,
            aggregate: Arc::new(aggregate),
            window_fn: Arc::new(window_fn),
            lateness: 0,
            late: None,
            state: None,
            windows: Vec::new(),
            _acc: PhantomData,
        }
    }

    /// Keeps each window `lateness_ms` after the watermark passed it, firing again for
    /// every record that arrives in that time.
    pub fn with_lateness(mut self, lateness_ms: u64) -> Self {
        self.lateness = lateness_ms;
        self
    }

    /// Emits the records too late for all their windows as `late(record)` instead of
    /// dropping them.
    pub fn with_late_output(mut self, late: fn(T) -> R) -> Self {
        self.late = Some(late);
        self
    }
}

impl<A, AGG, WF, ACC, OUT, T, R> CheckpointedFunction
    for WindowAggregate<A, AGG, WF, ACC, OUT, T, R>
{
}

impl<K, T, ACC, OUT, R, A, AGG, WF> KeyedProcessFunction<K, T, R>
    for WindowAggregate<A, AGG, WF, ACC, OUT, T, R>
where
    K: Key,
    ACC: StateValue,
    OUT: 'static,
    A: WindowAssigner<T>,
    AGG: AggregateFunction<T, ACC, OUT> + 'static,
    WF: Fn(&K, TimeWindow, OUT) -> R + Send + Sync + 'static,
    T: Clone + 'static,
    R: 'static,
{
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> Result<()> {
        self.state = Some(states.map_state(WINDOW_STATE)?);
        Ok(())
    }

    fn process(
        &mut self,
        record: T,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, R>,
    ) -> Result<()> {
        let timestamp = ctx.event_timestamp("event-time window")?;
        let state = self.state.as_ref().expect("open() declares the state");
        let watermark = ctx.current_watermark();
        let lateness = self.lateness;
        self.windows.clear();
        self.assigner
            .assign_windows(&record, timestamp, &mut self.windows)?;
        // A window past its cleanup time is gone: the record is late for it.
        self.windows
            .retain(|w| watermark.is_none_or(|wm| w.max_timestamp().saturating_add(lateness) > wm));
        if self.windows.is_empty() {
            if let Some(late) = self.late {
                out.collect(late(record));
            }
            return Ok(());
        }
        let last = self.windows.len() - 1;
        let mut record = Some(record);
        for i in 0..self.windows.len() {
            let w = self.windows[i];
            // The last window takes the record itself: no clone for tumbling windows.
            let value = if i == last {
                record.take().expect("taken by the last window only")
            } else {
                record.clone().expect("taken by the last window only")
            };
            let fired = watermark.is_some_and(|wm| w.max_timestamp() <= wm);
            let aggregate = &self.aggregate;
            let mut created = false;
            let acc = ctx.map(state).get_mut_or_insert_with(w.end, || {
                created = true;
                aggregate.create_accumulator()
            });
            aggregate.add(value, acc);
            // A late firing: the window already fired, emit its updated result.
            let result = fired.then(|| aggregate.get_result(acc));
            // With lateness, a window may have fired before a restore that reset the
            // watermark: every record re-registers its firing (Flink's `EventTimeTrigger`),
            // so a window updated after the restore fires again. Without, a fired window is
            // gone and a record for it creates it anew.
            if !fired && (created || lateness > 0) {
                ctx.register_event_time_timer(w.max_timestamp());
            }
            if created && lateness > 0 {
                ctx.register_event_time_timer(w.max_timestamp().saturating_add(lateness));
            }
            if let Some(result) = result {
                out.collect((self.window_fn)(ctx.key(), w, result));
            }
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        time: u64,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, R>,
    ) -> Result<()> {
        if ctx.time_domain() != Some(TimeDomain::EventTime) {
            return Ok(()); // windows only register event-time timers
        }
        let state = self.state.as_ref().expect("open() declares the state");
        let lateness = self.lateness;
        // The timer at `time` fires the window ending at `time + 1` ...
        if let Some(end) = time.checked_add(1) {
            let aggregate = &self.aggregate;
            let mut windows = ctx.map(state);
            let result = if lateness == 0 {
                // Fired and cleaned up at once.
                windows.remove(&end).map(|acc| aggregate.get_result(&acc))
            } else {
                windows.get(&end).map(|acc| aggregate.get_result(acc))
            };
            if let Some(result) = result {
                let size = self.assigner.size_ms().unwrap_or(0);
                let window = TimeWindow {
                    start: end.saturating_sub(size),
                    end,
                };
                out.collect((self.window_fn)(ctx.key(), window, result));
            }
        }
        // ... and cleans up the one whose last millisecond is `lateness` earlier.
        if lateness > 0 && time >= lateness {
            ctx.map(state).remove(&(time - lateness + 1));
        }
        Ok(())
    }
}

/// The aggregate function behind `reduce`: the accumulator is the running value.
pub struct ReduceAggregate<F>(pub F);

impl<T: Clone, F: Fn(T, T) -> T + Send + Sync> AggregateFunction<T, Option<T>, T>
    for ReduceAggregate<F>
{
    fn merge(&self, a: Option<T>, b: Option<T>) -> Option<Option<T>> {
        Some(match (a, b) {
            (Some(a), Some(b)) => Some((self.0)(a, b)),
            (a, b) => a.or(b),
        })
    }
    fn create_accumulator(&self) -> Option<T> {
        None
    }
    fn add(&self, value: T, acc: &mut Option<T>) {
        *acc = Some(match acc.take() {
            Some(a) => (self.0)(a, value),
            None => value,
        });
    }
    fn get_result(&self, acc: &Option<T>) -> T {
        acc.clone()
            .expect("a window's accumulator holds a value once a record was added")
    }
}
