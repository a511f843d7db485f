//! The window operator: a keyed function that keeps one accumulator per (key, window) in a
//! map state (window end → accumulator) and an event-time timer at each window's last
//! millisecond. When the watermark reaches the timer the window's result is emitted (its
//! timestamp is the window's last millisecond) and its state cleared.
//!
//! A record all of whose windows the watermark already passed is late and dropped (Flink's
//! default allowed lateness of 0); the others go to their windows that are still open.

use std::marker::PhantomData;
use std::sync::Arc;

use super::{TimeWindow, WindowAssigner};
use crate::error::{Error, Result};
use crate::runtime::functions::{CheckpointedFunction, Collector, KeyedProcessFunction};
use crate::state::keyed::{AggregateFunction, KeyedContext, KeyedStateStore, MapState, TimeDomain};
use crate::state::{Key, StateValue};

/// The name of the map state holding the window accumulators.
pub const WINDOW_STATE: &str = "window-contents";

/// Aggregates the windows of a keyed stream with `aggregate` and turns each window's result
/// into the output with `window_fn(key, window, result)`.
pub struct WindowAggregate<A, AGG, WF, ACC, OUT> {
    assigner: A,
    aggregate: Arc<AGG>,
    window_fn: Arc<WF>,
    state: Option<MapState<u64, ACC>>,
    windows: Vec<TimeWindow>,
    _acc: PhantomData<fn() -> (ACC, OUT)>,
}

impl<A: Clone, AGG, WF, ACC, OUT> Clone for WindowAggregate<A, AGG, WF, ACC, OUT> {
    fn clone(&self) -> Self {
        WindowAggregate {
            assigner: self.assigner.clone(),
            aggregate: self.aggregate.clone(),
            window_fn: self.window_fn.clone(),
            state: None,
            windows: Vec::new(),
            _acc: PhantomData,
        }
    }
}

impl<A, AGG, WF, ACC, OUT> WindowAggregate<A, AGG, WF, ACC, OUT> {
    /// Windows from `assigner`, aggregated by `aggregate`, emitted through `window_fn`.
    pub fn new(assigner: A, aggregate: AGG, window_fn: WF) -> Self {
        WindowAggregate {
            assigner,
            aggregate: Arc::new(aggregate),
            window_fn: Arc::new(window_fn),
            state: None,
            windows: Vec::new(),
            _acc: PhantomData,
        }
    }
}

impl<A, AGG, WF, ACC, OUT> CheckpointedFunction for WindowAggregate<A, AGG, WF, ACC, OUT> {}

impl<K, T, ACC, OUT, R, A, AGG, WF> KeyedProcessFunction<K, T, R>
    for WindowAggregate<A, AGG, WF, ACC, OUT>
where
    K: Key,
    ACC: StateValue,
    OUT: 'static,
    A: WindowAssigner,
    AGG: AggregateFunction<T, ACC, OUT> + 'static,
    WF: Fn(&K, TimeWindow, OUT) -> R + Send + Sync + 'static,
    T: Clone,
{
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> Result<()> {
        self.state = Some(states.map_state(WINDOW_STATE)?);
        Ok(())
    }

    fn process(
        &mut self,
        record: T,
        ctx: &mut KeyedContext<'_, K>,
        _: &mut Collector<'_, R>,
    ) -> Result<()> {
        let timestamp = ctx.timestamp().ok_or_else(|| {
            Error::InvalidJob(
                "an event-time window got a record without a timestamp: give the stream \
                 timestamps and watermarks first (assign_timestamps_and_watermarks or \
                 add_source_with_watermarks)"
                    .into(),
            )
        })?;
        let state = self.state.as_ref().expect("open() declares the state");
        let watermark = ctx.current_watermark();
        self.windows.clear();
        self.assigner.assign_windows(timestamp, &mut self.windows);
        let last = self.windows.len().saturating_sub(1);
        let aggregate = &self.aggregate;
        for i in 0..self.windows.len() {
            let w = self.windows[i];
            if watermark.is_some_and(|wm| w.max_timestamp() <= wm) {
                continue; // late for this window
            }
            let mut created = false;
            let acc = ctx.map(state).get_mut_or_insert_with(w.end, || {
                created = true;
                aggregate.create_accumulator()
            });
            if i == last {
                // The last window takes the record itself: no clone for tumbling windows.
                aggregate.add(record, acc);
                if created {
                    ctx.register_event_time_timer(w.max_timestamp());
                }
                return Ok(());
            }
            aggregate.add(record.clone(), acc);
            if created {
                ctx.register_event_time_timer(w.max_timestamp());
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
        let end = time + 1;
        let Some(acc) = ctx.map(state).remove(&end) else {
            return Ok(()); // a window already emitted
        };
        let size = self.assigner.size_ms();
        let window = TimeWindow {
            start: end.saturating_sub(size),
            end,
        };
        let result = self.aggregate.get_result(&acc);
        out.collect((self.window_fn)(ctx.key(), window, result));
        Ok(())
    }
}

/// The aggregate function behind `reduce`: the accumulator is the running value.
pub struct ReduceAggregate<F>(pub F);

impl<T: Clone, F: Fn(T, T) -> T + Send + Sync> AggregateFunction<T, Option<T>, T>
    for ReduceAggregate<F>
{
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
