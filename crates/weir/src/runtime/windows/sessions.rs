//! Session windows in event time (Flink's `EventTimeSessionWindows` and
//! `DynamicEventTimeSessionWindows`) and the operator that merges them.
//!
//! A record at `t` opens the window `[t, t + gap)`; windows of one key that overlap or
//! touch merge into one session, whose accumulator is the merge of theirs (the aggregate's
//! [`merge`](AggregateFunction::merge)). A record that falls between two sessions and
//! reaches both bridges them into one. A session fires when the watermark passes its last
//! millisecond, as the other windows do, with the same allowed lateness and late data.
//!
//! State: a map state from session end to `(session start, accumulator)` per key, and an
//! event-time timer at each session's last millisecond (plus one at its cleanup time with
//! lateness). A merge leaves the timers of the sessions it absorbed: such a timer finds no
//! session ending where it points and does nothing.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::assigners::millis;
use super::{TimeWindow, WindowAssigner};
use crate::error::{Error, Result};
use crate::runtime::functions::{CheckpointedFunction, Collector, KeyedProcessFunction};
use crate::state::keyed::{
    AccEvolution, AccShape, AggregateFunction, KeyedContext, KeyedStateStore, MapState, TimeDomain,
};
use crate::state::{Key, StateValue};

/// Sessions of records with a fixed gap: a key's session ends when no record arrives for
/// `gap` of event time.
#[derive(Debug, Clone, Copy)]
pub struct EventTimeSessionWindows {
    gap: u64,
}

impl EventTimeSessionWindows {
    /// Sessions closed by a gap of `gap`; a gap of 0 is an error.
    pub fn with_gap(gap: Duration) -> Result<Self> {
        Ok(EventTimeSessionWindows {
            gap: millis("session gap", gap)?,
        })
    }

    /// Sessions whose gap each record sets with `gap(record)` (Flink's `withDynamicGap`):
    /// a record opens `[t, t + gap(record))`. A record whose gap is 0 fails the job with an
    /// error saying so.
    pub fn with_dynamic_gap<T, G>(gap: G) -> DynamicEventTimeSessionWindows<G>
    where
        G: Fn(&T) -> Duration + Clone + Send + Sync + 'static,
    {
        DynamicEventTimeSessionWindows { gap }
    }
}

impl<T> WindowAssigner<T> for EventTimeSessionWindows {
    fn assign_windows(&self, _: &T, timestamp: u64, out: &mut Vec<TimeWindow>) -> Result<()> {
        out.push(TimeWindow {
            start: timestamp,
            end: timestamp.saturating_add(self.gap),
        });
        Ok(())
    }
    fn size_ms(&self) -> Option<u64> {
        None
    }
}

/// Sessions whose gap comes from each record ([`EventTimeSessionWindows::with_dynamic_gap`]).
#[derive(Clone)]
pub struct DynamicEventTimeSessionWindows<G> {
    gap: G,
}

impl<T, G> WindowAssigner<T> for DynamicEventTimeSessionWindows<G>
where
    G: Fn(&T) -> Duration + Clone + Send + Sync + 'static,
{
    fn assign_windows(&self, record: &T, timestamp: u64, out: &mut Vec<TimeWindow>) -> Result<()> {
        let gap = millis("session gap", (self.gap)(record)).map_err(|e| {
            Error::InvalidJob(format!(
                "the dynamic session gap of a record at {timestamp} ms: {e}"
            ))
        })?;
        out.push(TimeWindow {
            start: timestamp,
            end: timestamp.saturating_add(gap),
        });
        Ok(())
    }
    fn size_ms(&self) -> Option<u64> {
        None
    }
}

/// The name of the map state holding the sessions: session end → (start, accumulator).
pub const SESSION_STATE: &str = "window-sessions";

/// Aggregates the sessions of a keyed stream: the merging counterpart of
/// [`WindowAggregate`](super::operator::WindowAggregate), with the same lateness and
/// late-data rules.
pub struct SessionWindowAggregate<A, AGG, WF, ACC, OUT, T, R> {
    assigner: A,
    aggregate: Arc<AGG>,
    window_fn: Arc<WF>,
    lateness: u64,
    late: Option<fn(T) -> R>,
    state: Option<MapState<u64, (u64, ACC)>>,
    /// The accumulators' declared version and migration function.
    evolution: AccEvolution,
    windows: Vec<TimeWindow>,
    _acc: PhantomData<fn() -> (ACC, OUT)>,
}

impl<A: Clone, AGG, WF, ACC, OUT, T, R> Clone
    for SessionWindowAggregate<A, AGG, WF, ACC, OUT, T, R>
{
    fn clone(&self) -> Self {
        SessionWindowAggregate {
            assigner: self.assigner.clone(),
            aggregate: self.aggregate.clone(),
            window_fn: self.window_fn.clone(),
            lateness: self.lateness,
            late: self.late,
            state: None,
            evolution: self.evolution.clone(),
            windows: Vec::new(),
            _acc: PhantomData,
        }
    }
}

impl<A, AGG, WF, ACC, OUT, T, R> SessionWindowAggregate<A, AGG, WF, ACC, OUT, T, R> {
    /// Declares the accumulators' version and migration function (issue 26): a session's
    /// `(start, accumulator)` is migrated as `(start, migrate(old))`.
    pub(crate) fn with_evolution(mut self, evolution: AccEvolution) -> Self {
        self.evolution = evolution;
        self
    }

    /// Sessions from `assigner` aggregated by `aggregate` (which must merge), emitted
    /// through `window_fn`, kept `lateness_ms` after they fire, late records through `late`.
    pub fn new(
        assigner: A,
        aggregate: Arc<AGG>,
        window_fn: Arc<WF>,
        lateness_ms: u64,
        late: Option<fn(T) -> R>,
    ) -> Self {
        SessionWindowAggregate {
            assigner,
            aggregate,
            window_fn,
            lateness: lateness_ms,
            late,
            state: None,
            evolution: AccEvolution::default(),
            windows: Vec::new(),
            _acc: PhantomData,
        }
    }
}

impl<A, AGG, WF, ACC, OUT, T, R> CheckpointedFunction
    for SessionWindowAggregate<A, AGG, WF, ACC, OUT, T, R>
{
}

impl<K, T, ACC, OUT, R, A, AGG, WF> KeyedProcessFunction<K, T, R>
    for SessionWindowAggregate<A, AGG, WF, ACC, OUT, T, R>
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
        states.with_window_evolution::<ACC>(&self.evolution, AccShape::Counted)?;
        self.state = Some(states.map_state(SESSION_STATE)?);
        Ok(())
    }

    fn process(
        &mut self,
        record: T,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, R>,
    ) -> Result<()> {
        let timestamp = ctx.event_timestamp("event-time session window")?;
        self.windows.clear();
        self.assigner
            .assign_windows(&record, timestamp, &mut self.windows)?;
        let Some(&new) = self.windows.first() else {
            return Ok(());
        };
        let state = self.state.as_ref().expect("open() declares the state");
        let watermark = ctx.current_watermark();
        let lateness = self.lateness;
        // The session the record makes: its window and every session it overlaps or touches.
        let mut merged = new;
        let mut absorbed = Vec::new();
        for (&end, &(start, _)) in ctx.map(state).entries() {
            if start <= new.end && end >= new.start {
                merged.start = merged.start.min(start);
                merged.end = merged.end.max(end);
                absorbed.push(end);
            }
        }
        if watermark.is_some_and(|wm| merged.max_timestamp().saturating_add(lateness) <= wm) {
            // The session was cleaned up already: the record is late.
            if let Some(late) = self.late {
                out.collect(late(record));
            }
            return Ok(());
        }
        let aggregate = &self.aggregate;
        let mut sessions = ctx.map(state);
        let mut acc: Option<ACC> = None;
        for end in absorbed {
            let (_, other) = sessions.remove(&end).expect("found in this key's sessions");
            acc = Some(match acc {
                None => other,
                Some(a) => aggregate.merge(a, other).ok_or_else(|| {
                    Error::InvalidJob(
                        "session windows merge accumulators when a record joins two \
                         sessions, and this aggregate has no merge: implement \
                         AggregateFunction::merge"
                            .into(),
                    )
                })?,
            });
        }
        let mut acc = acc.unwrap_or_else(|| aggregate.create_accumulator());
        aggregate.add(record, &mut acc);
        let fired = watermark.is_some_and(|wm| merged.max_timestamp() <= wm);
        // A late firing: the session already fired (or is made of sessions that did).
        let result = fired.then(|| aggregate.get_result(&acc));
        sessions.put(merged.end, (merged.start, acc));
        if !fired {
            ctx.register_event_time_timer(merged.max_timestamp());
        }
        if lateness > 0 {
            ctx.register_event_time_timer(merged.max_timestamp().saturating_add(lateness));
        }
        if let Some(result) = result {
            // A late firing: stamped with the session's last millisecond, like the first.
            out.collect_at(
                (self.window_fn)(ctx.key(), merged, result),
                merged.max_timestamp(),
            );
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
            return Ok(()); // sessions only register event-time timers
        }
        let state = self.state.as_ref().expect("open() declares the state");
        let lateness = self.lateness;
        // The timer at `time` fires the session ending at `time + 1` ...
        if let Some(end) = time.checked_add(1) {
            let aggregate = &self.aggregate;
            let mut sessions = ctx.map(state);
            let fired = if lateness == 0 {
                sessions
                    .remove(&end)
                    .map(|(start, acc)| (start, aggregate.get_result(&acc)))
            } else {
                sessions
                    .get(&end)
                    .map(|(start, acc)| (*start, aggregate.get_result(acc)))
            };
            if let Some((start, result)) = fired {
                let window = TimeWindow { start, end };
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
