//! The window join of two keyed streams (Flink's `a.join(b).where(..).equalTo(..)
//! .window(..).apply(..)`): every pair of records with the same key in the same window is
//! joined when the window fires.
//!
//! A keyed co-process function: each side's records are buffered per window in keyed map
//! state (`window-join`: window end → both sides' records), an event-time timer at the
//! window's last millisecond joins them (the pairs get that millisecond as timestamp) and
//! clears the window. A record is dropped for windows the watermark has already passed
//! (allowed lateness 0), like the window operator.

use crate::error::{Error, Result};
use crate::runtime::co_process::KeyedCoProcessFunction;
use crate::runtime::functions::{CheckpointedFunction, Collector};
use crate::runtime::windows::{TimeWindow, WindowAssigner};
use crate::state::keyed::{KeyedContext, KeyedStateStore, MapState};
use crate::state::{Key, StateValue, TimeDomain};

/// The buffered records of one window: the first input's and the second's.
type Sides<I1, I2> = (Vec<I1>, Vec<I2>);

/// The window join as a keyed two-input function: `f` builds the result of each pair.
#[derive(Clone)]
pub struct WindowJoinFunction<I1, I2, A, F> {
    assigner: A,
    f: F,
    windows: Option<MapState<u64, Sides<I1, I2>>>,
    scratch: Vec<TimeWindow>,
}

impl<I1, I2, A, F> WindowJoinFunction<I1, I2, A, F> {
    /// Joins the pairs of each window of `assigner` with `f`.
    pub fn new(assigner: A, f: F) -> Self {
        WindowJoinFunction {
            assigner,
            f,
            windows: None,
            scratch: Vec::new(),
        }
    }
}

impl<I1, I2, A, F> CheckpointedFunction for WindowJoinFunction<I1, I2, A, F> {}

impl<I1: StateValue, I2: StateValue, A: WindowAssigner<()>, F> WindowJoinFunction<I1, I2, A, F> {
    /// Adds the record at the context's timestamp to each of its windows not yet fired.
    fn add<K: Key>(
        &mut self,
        ctx: &mut KeyedContext<'_, K>,
        add: impl Fn(&mut Sides<I1, I2>),
    ) -> Result<()> {
        let ts = ctx.event_timestamp("window join")?;
        let watermark = ctx.current_watermark();
        self.scratch.clear();
        // Tumbling and sliding windows depend on the timestamp alone, not on the record.
        self.assigner.assign_windows(&(), ts, &mut self.scratch)?;
        let windows = self.windows.unwrap();
        for w in &self.scratch {
            let last = w.end - 1;
            if watermark.is_some_and(|wm| last <= wm) {
                continue; // this window has fired: late for it
            }
            add(ctx
                .map(&windows)
                .get_mut_or_insert_with(w.end, || (Vec::new(), Vec::new())));
            ctx.register_event_time_timer(last);
        }
        Ok(())
    }
}

impl<K, I1, I2, O, A, F> KeyedCoProcessFunction<K, I1, I2, O> for WindowJoinFunction<I1, I2, A, F>
where
    K: Key,
    I1: StateValue,
    I2: StateValue,
    A: WindowAssigner<()>,
    F: Fn(&I1, &I2) -> O + Clone + Send + 'static,
{
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> Result<()> {
        if self.assigner.size_ms().is_none() {
            return Err(Error::InvalidJob(
                "window join: session windows are not supported yet (their windows merge); \
                 join over tumbling or sliding windows, or use an interval join"
                    .into(),
            ));
        }
        if self.assigner.is_global() || self.assigner.time_domain() != TimeDomain::EventTime {
            return Err(Error::InvalidJob(
                "window join: only event-time tumbling and sliding windows are supported \
                 (processing-time and global windows are not): give both inputs timestamps \
                 and join over TumblingEventTimeWindows or SlidingEventTimeWindows, or use an \
                 interval join"
                    .into(),
            ));
        }
        self.windows = Some(states.map_state("window-join")?);
        Ok(())
    }

    fn process_element1(
        &mut self,
        record: I1,
        ctx: &mut KeyedContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<()> {
        self.add(ctx, |s| s.0.push(record.clone()))
    }

    fn process_element2(
        &mut self,
        record: I2,
        ctx: &mut KeyedContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<()> {
        self.add(ctx, |s| s.1.push(record.clone()))
    }

    /// The window ending after `time` fires: every pair in it, then it is cleared.
    fn on_timer(
        &mut self,
        time: u64,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<()> {
        if ctx.time_domain() != Some(TimeDomain::EventTime) {
            return Ok(());
        }
        let Some(end) = time.checked_add(1) else {
            return Ok(());
        };
        let Some((left, right)) = ctx.map(&self.windows.unwrap()).remove(&end) else {
            return Ok(());
        };
        for l in &left {
            for r in &right {
                out.collect((self.f)(l, r));
            }
        }
        Ok(())
    }
}
