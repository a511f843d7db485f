//! The interval join of two keyed streams (Flink's `IntervalJoinOperator`): a record `a` of
//! the first input and `b` of the second with the same key are joined when
//! `a.ts + lower <= b.ts <= a.ts + upper`.
//!
//! Both inputs are buffered in keyed map state by timestamp (`left-buffer`,
//! `right-buffer`), so the buffers are checkpointed, restored and rescaled by key group
//! like any keyed state. Each record is joined at its arrival with everything buffered on
//! the other side, then buffered itself until no record of the other side that is not late
//! can still match it; an event-time timer at that time removes it once the watermark (the
//! minimum over both inputs) passes. A record older than the watermark is late and
//! dropped, as in Flink.
//!
//! One difference from Flink: a joined pair carries the timestamp of the record whose
//! arrival produced it (never below the watermark), where Flink gives it the larger of the
//! two timestamps. Keeping the one-input operator's timestamping unchanged keeps its hot
//! loop as it is.

use crate::error::{Error, Result};
use crate::runtime::co_process::KeyedCoProcessFunction;
use crate::runtime::functions::{CheckpointedFunction, Collector};
use crate::state::keyed::{KeyedContext, KeyedStateStore, MapState};
use crate::state::{Key, StateValue, TimeDomain};

/// The timestamps of a joined pair, for the function that builds the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinContext {
    /// The timestamp of the first input's record.
    pub left_timestamp: u64,
    /// The timestamp of the second input's record.
    pub right_timestamp: u64,
}

/// Builds the result of each joined pair (Flink's `ProcessJoinFunction`); may emit any
/// number of records per pair.
pub trait ProcessJoinFunction<I1, I2, O>: Clone + Send + 'static {
    /// Handles one pair: `left` from the first input, `right` from the second.
    fn process_element(
        &mut self,
        left: &I1,
        right: &I2,
        ctx: JoinContext,
        out: &mut Collector<'_, O>,
    ) -> Result<()>;
}

/// Any `Fn(&I1, &I2) -> O` joins each pair into exactly one record.
impl<I1, I2, O, F> ProcessJoinFunction<I1, I2, O> for F
where
    F: Fn(&I1, &I2) -> O + Clone + Send + 'static,
{
    fn process_element(
        &mut self,
        left: &I1,
        right: &I2,
        _ctx: JoinContext,
        out: &mut Collector<'_, O>,
    ) -> Result<()> {
        out.collect(self(left, right));
        Ok(())
    }
}

/// The bounds of an interval join, in milliseconds relative to the first input's
/// timestamp, both inclusive once constructed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinBounds {
    lower: i64,
    upper: i64,
}

impl JoinBounds {
    /// Bounds `[lower, upper]`; `lower` must not be above `upper` (Flink's check).
    pub fn new(lower: i64, upper: i64) -> Result<Self> {
        if lower > upper {
            return Err(Error::InvalidJob(format!(
                "interval join: the lower bound ({lower} ms) is above the upper bound \
                 ({upper} ms); between(lower, upper) needs lower <= upper"
            )));
        }
        Ok(JoinBounds { lower, upper })
    }

    /// The same bounds with the lower one excluded.
    pub fn lower_exclusive(self) -> Self {
        JoinBounds {
            lower: self.lower.saturating_add(1),
            ..self
        }
    }

    /// The same bounds with the upper one excluded.
    pub fn upper_exclusive(self) -> Self {
        JoinBounds {
            upper: self.upper.saturating_sub(1),
            ..self
        }
    }

    /// Whether `right_ts` lies within the bounds around `left_ts`.
    fn contains(self, left_ts: u64, right_ts: u64) -> bool {
        let d = i128::from(right_ts) - i128::from(left_ts);
        i128::from(self.lower) <= d && d <= i128::from(self.upper)
    }

    /// How long after its own timestamp a first-input record can still match.
    fn left_keep(self) -> u64 {
        self.upper.max(0).unsigned_abs()
    }

    /// How long after its own timestamp a second-input record can still match.
    fn right_keep(self) -> u64 {
        self.lower.min(0).unsigned_abs()
    }
}

/// The interval join as a keyed two-input function over the two buffers.
#[derive(Clone)]
pub struct IntervalJoinFunction<I1, I2, F> {
    bounds: JoinBounds,
    f: F,
    left: Option<MapState<u64, Vec<I1>>>,
    right: Option<MapState<u64, Vec<I2>>>,
}

impl<I1, I2, F> IntervalJoinFunction<I1, I2, F> {
    /// Joins within `bounds`, building results with `f`.
    pub fn new(bounds: JoinBounds, f: F) -> Self {
        IntervalJoinFunction {
            bounds,
            f,
            left: None,
            right: None,
        }
    }
}

impl<I1, I2, F> CheckpointedFunction for IntervalJoinFunction<I1, I2, F> {}

/// Whether a record of time `ts` is late: older than the watermark (Flink drops it).
fn is_late<K: Key>(ctx: &KeyedContext<'_, K>, ts: u64) -> bool {
    ctx.current_watermark().is_some_and(|w| ts < w)
}

impl<K, I1, I2, O, F> KeyedCoProcessFunction<K, I1, I2, O> for IntervalJoinFunction<I1, I2, F>
where
    K: Key,
    I1: StateValue,
    I2: StateValue,
    F: ProcessJoinFunction<I1, I2, O>,
{
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> Result<()> {
        self.left = Some(states.map_state("left-buffer")?);
        self.right = Some(states.map_state("right-buffer")?);
        Ok(())
    }

    fn process_element1(
        &mut self,
        record: I1,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<()> {
        let ts = ctx.event_timestamp("interval join")?;
        if is_late(ctx, ts) {
            return Ok(());
        }
        let (left, right) = (self.left.unwrap(), self.right.unwrap());
        for (&rts, rs) in ctx.map(&right).entries() {
            if self.bounds.contains(ts, rts) {
                let jc = JoinContext {
                    left_timestamp: ts,
                    right_timestamp: rts,
                };
                for r in rs {
                    self.f.process_element(&record, r, jc, out)?;
                }
            }
        }
        ctx.map(&left)
            .get_mut_or_insert_with(ts, Vec::new)
            .push(record);
        ctx.register_event_time_timer(ts.saturating_add(self.bounds.left_keep()));
        Ok(())
    }

    fn process_element2(
        &mut self,
        record: I2,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<()> {
        let ts = ctx.event_timestamp("interval join")?;
        if is_late(ctx, ts) {
            return Ok(());
        }
        let (left, right) = (self.left.unwrap(), self.right.unwrap());
        for (&lts, ls) in ctx.map(&left).entries() {
            if self.bounds.contains(lts, ts) {
                let jc = JoinContext {
                    left_timestamp: lts,
                    right_timestamp: ts,
                };
                for l in ls {
                    self.f.process_element(l, &record, jc, out)?;
                }
            }
        }
        ctx.map(&right)
            .get_mut_or_insert_with(ts, Vec::new)
            .push(record);
        ctx.register_event_time_timer(ts.saturating_add(self.bounds.right_keep()));
        Ok(())
    }

    /// A cleanup time passed: the records buffered for exactly this time on either side
    /// can no longer match anything that is not late.
    fn on_timer(
        &mut self,
        time: u64,
        ctx: &mut KeyedContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<()> {
        if ctx.time_domain() != Some(TimeDomain::EventTime) {
            return Ok(());
        }
        let (left, right) = (self.left.unwrap(), self.right.unwrap());
        if let Some(ts) = time.checked_sub(self.bounds.left_keep()) {
            ctx.map(&left).remove(&ts);
        }
        if let Some(ts) = time.checked_sub(self.bounds.right_keep()) {
            ctx.map(&right).remove(&ts);
        }
        Ok(())
    }
}
