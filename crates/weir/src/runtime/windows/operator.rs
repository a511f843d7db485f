//! The window operator: a keyed function that keeps one accumulator per (key, window) in
//! window state (`state::keyed` window tables: one table per window, entries by key) and
//! fires a window for all its keys at once when the watermark passes its last millisecond.
//! Each result is timestamped with the window's last millisecond.
//!
//! Lateness (Flink's `allowedLateness` and `EventTimeTrigger`): a window stays in state
//! until the watermark passes its last millisecond plus the allowed lateness, its *cleanup
//! time*, and is then removed whole without emitting. A record for a window the watermark
//! already fired but not cleaned up is added and the window fires again at once with the
//! updated result (a *late firing*, timestamped with the late record's time).
//!
//! Each entry records whether its window is still to fire for that key (Flink registers an
//! event-time timer per record instead; the effect is the same): a record of a window the
//! watermark has not passed marks it, firing clears it. After a restore, which resets the
//! watermark, a record for a window that fired before the checkpoint marks it again, so it
//! fires again with the updated result.
//!
//! A record all of whose windows are past their cleanup time is late: dropped, or, when the
//! job asked for it, emitted as a late-data record (`side_output_late_data`) through a
//! function that wraps it into the operator's output type.
//!
//! Checkpoints of earlier versions kept the windows in a keyed map state
//! ([`LEGACY_WINDOW_STATE`]) with an event-time timer per (key, window); `open` moves such
//! a restored state into the window state, keeping which windows were still to fire.

use std::marker::PhantomData;
use std::sync::Arc;

use super::{TimeWindow, WindowAssigner};
use crate::error::Result;
use crate::runtime::functions::{CheckpointedFunction, Collector, KeyedProcessFunction};
use crate::state::keyed::AccEvolution;
use crate::state::keyed::{
    AggregateFunction, KeyedContext, KeyedEndContext, KeyedStateStore, MapState, WindowState,
};
use crate::state::StateKind;
use crate::state::{Key, StateValue};

/// The name of the window state holding the window accumulators (a keyed *window* state:
/// per key and window end, the accumulator).
pub const WINDOW_STATE: &str = "window-accumulators";

/// The name of the map state (window end → accumulator) in which checkpoints taken before
/// the window state existed kept the accumulators; restored and moved into [`WINDOW_STATE`].
pub const LEGACY_WINDOW_STATE: &str = "window-contents";

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
    state: Option<WindowState<ACC>>,
    /// The accumulators' declared version and migration function.
    evolution: AccEvolution,
    windows: Vec<TimeWindow>,
    /// The (timestamp, watermark) `windows` were assigned and filtered at, when the
    /// assigner places records by timestamp alone: the next record with both the same
    /// reuses them (a batch holds runs of records with one timestamp).
    assigned_at: Option<(u64, Option<u64>)>,
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
            evolution: self.evolution.clone(),
            windows: Vec::new(),
            assigned_at: None,
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
            evolution: AccEvolution::default(),
            windows: Vec::new(),
            assigned_at: None,
            _acc: PhantomData,
        }
    }

    /// Keeps each window `lateness_ms` after the watermark passed it, firing again for
    /// every record that arrives in that time.
    pub fn with_lateness(mut self, lateness_ms: u64) -> Self {
        self.lateness = lateness_ms;
        self
    }

    /// Declares the accumulators' version and migration function (issue 26).
    pub(crate) fn with_evolution(mut self, evolution: AccEvolution) -> Self {
        self.evolution = evolution;
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
        let state = states.window_state(WINDOW_STATE, &self.evolution)?;
        if states.restored_kind(LEGACY_WINDOW_STATE) == Some(StateKind::Map) {
            let legacy: MapState<u64, ACC> = states.map_state(LEGACY_WINDOW_STATE)?;
            states.migrate_window_map(&legacy, state, self.lateness)?;
        }
        self.state = Some(state);
        Ok(())
    }

    fn process(
        &mut self,
        record: T,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, R>,
    ) -> Result<()> {
        let timestamp = ctx.event_timestamp("event-time window")?;
        let state = self.state.expect("open() declares the state");
        let watermark = ctx.current_watermark();
        let lateness = self.lateness;
        if self.assigned_at != Some((timestamp, watermark)) {
            self.windows.clear();
            self.assigner
                .assign_windows(&record, timestamp, &mut self.windows)?;
            // A window past its cleanup time is gone: the record is late for it.
            self.windows.retain(|w| {
                watermark.is_none_or(|wm| w.max_timestamp().saturating_add(lateness) > wm)
            });
            self.assigned_at = self
                .assigner
                .by_timestamp_only()
                .then_some((timestamp, watermark));
        }
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
            // A window the watermark has not passed is (still) to fire for this key.
            let (acc, _) =
                ctx.window_accumulator(state, w.end, !fired, || aggregate.create_accumulator());
            aggregate.add(value, acc);
            // A late firing: the window already fired, emit its updated result.
            if fired {
                // Stamped with the window's last millisecond, like its on-time result.
                let result = aggregate.get_result(acc);
                out.collect_at((self.window_fn)(ctx.key(), w, result), w.max_timestamp());
            }
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: u64,
        ctx: &mut KeyedEndContext<'_, K>,
        out: &mut Collector<'_, R>,
    ) -> Result<Option<u64>> {
        let state = self.state.expect("open() declares the state");
        let size = self.assigner.size_ms().unwrap_or(0);
        let (aggregate, window_fn) = (&self.aggregate, &self.window_fn);
        Ok(
            ctx.fire_next_window(state, watermark, self.lateness, |key, end, acc| {
                let window = TimeWindow {
                    start: end.saturating_sub(size),
                    end,
                };
                // Stamped here (the window's last millisecond, which `fire_next_window`
                // returns too) rather than after the call: the keyed operator hands the
                // results downstream as they fill batches, before the call returns.
                let result = window_fn(key, window, aggregate.get_result(acc));
                out.collect_at(result, end.saturating_sub(1));
            }),
        )
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
