//! Count windows (Flink's `countWindow(size)`: global windows with a purging count
//! trigger): each key's records are cut into windows of `size` records in arrival order;
//! a window fires and is purged when its `size`-th record arrives. A window still short of
//! `size` records at the end of input never fires, as in Flink.
//!
//! Sliding count windows (Flink's `countWindow(size, slide)`: a count evictor and a count
//! trigger): every `slide` records, the last `size` records of the key.
//!
//! State: one value state per key, `(records so far, accumulator)` for count windows,
//! `(records since the last firing, the last size records)` for sliding ones.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::runtime::functions::{CheckpointedFunction, Collector, KeyedProcessFunction};
use crate::state::keyed::{
    AccEvolution, AccShape, AggregateFunction, KeyedContext, KeyedStateStore, ValueState,
};
use crate::state::{Key, StateValue};

/// The name of the value state holding each key's open count window.
pub const COUNT_WINDOW_STATE: &str = "count-window";

/// Checks a count window's size: 0 records would never fire.
pub fn check_size(size: u64) -> Result<u64> {
    if size == 0 {
        return Err(Error::InvalidJob(
            "count window size is 0: it must be at least 1 record".into(),
        ));
    }
    Ok(size)
}

/// Aggregates tumbling count windows of `size` records per key with `aggregate`.
pub struct CountWindowAggregate<AGG, ACC, OUT> {
    size: u64,
    aggregate: Arc<AGG>,
    state: Option<ValueState<(u64, ACC)>>,
    /// The accumulators' declared version and migration function.
    evolution: AccEvolution,
    _acc: PhantomData<fn() -> OUT>,
}

impl<AGG, ACC, OUT> Clone for CountWindowAggregate<AGG, ACC, OUT> {
    fn clone(&self) -> Self {
        CountWindowAggregate {
            size: self.size,
            aggregate: self.aggregate.clone(),
            state: None,
            evolution: self.evolution.clone(),
            _acc: PhantomData,
        }
    }
}

impl<AGG, ACC, OUT> CountWindowAggregate<AGG, ACC, OUT> {
    /// Windows of `size` records (checked by [`check_size`]) aggregated by `aggregate`.
    pub fn new(size: u64, aggregate: AGG) -> Self {
        CountWindowAggregate {
            size,
            aggregate: Arc::new(aggregate),
            state: None,
            evolution: AccEvolution::default(),
            _acc: PhantomData,
        }
    }

    /// Declares the accumulators' version and migration function (issue 26): a key's
    /// `(records so far, accumulator)` is migrated as `(records so far, migrate(old))`.
    pub(crate) fn with_evolution(mut self, evolution: AccEvolution) -> Self {
        self.evolution = evolution;
        self
    }
}

impl<AGG, ACC, OUT> CheckpointedFunction for CountWindowAggregate<AGG, ACC, OUT> {}

impl<K, T, ACC, OUT, AGG> KeyedProcessFunction<K, T, OUT> for CountWindowAggregate<AGG, ACC, OUT>
where
    K: Key,
    ACC: StateValue,
    OUT: 'static,
    AGG: AggregateFunction<T, ACC, OUT> + 'static,
{
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> Result<()> {
        states.with_window_evolution::<ACC>(&self.evolution, AccShape::Counted)?;
        self.state = Some(states.value_state(COUNT_WINDOW_STATE)?);
        Ok(())
    }

    fn process(
        &mut self,
        record: T,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, OUT>,
    ) -> Result<()> {
        let state = self.state.expect("open() declares the state");
        let aggregate = &self.aggregate;
        let window = ctx.get_mut_or_insert_with(state, || (0, aggregate.create_accumulator()));
        aggregate.add(record, &mut window.1);
        window.0 += 1;
        if window.0 >= self.size {
            out.collect(aggregate.get_result(&window.1));
            ctx.clear(state); // the purging trigger
        }
        Ok(())
    }
}

/// The name of the value state holding each key's sliding count window: the records since
/// the last firing and the last `size` records.
pub const SLIDING_COUNT_WINDOW_STATE: &str = "sliding-count-window";

/// Checks a sliding count window's `slide` against its `size` (checked by [`check_size`]):
/// 0 would never fire, and a slide past the size would skip records between windows.
pub fn check_slide(size: u64, slide: u64) -> Result<u64> {
    if slide == 0 {
        return Err(Error::InvalidJob(
            "count window slide is 0: it must be at least 1 record".into(),
        ));
    }
    if slide > size {
        return Err(Error::InvalidJob(format!(
            "count window slide {slide} is larger than its size {size}: records between two \
             windows would belong to none; use a slide of at most the size"
        )));
    }
    Ok(slide)
}

/// Aggregates sliding count windows per key (Flink's `countWindow(size, slide)`: global
/// windows with a `CountEvictor` of `size` and a `CountTrigger` of `slide`): every `slide`
/// records of a key, the aggregate of its last `size` records (fewer while the key has
/// fewer) is emitted. An evictor needs the records themselves, not an accumulator: the
/// state holds up to `size` records per key and each firing aggregates them afresh, as in
/// Flink.
pub struct SlidingCountWindowAggregate<AGG, T, ACC, OUT> {
    size: u64,
    slide: u64,
    aggregate: Arc<AGG>,
    state: Option<ValueState<(u64, VecDeque<T>)>>,
    /// The records' declared version and migration function.
    evolution: AccEvolution,
    _acc: PhantomData<fn() -> (ACC, OUT)>,
}

impl<AGG, T, ACC, OUT> Clone for SlidingCountWindowAggregate<AGG, T, ACC, OUT> {
    fn clone(&self) -> Self {
        SlidingCountWindowAggregate {
            size: self.size,
            slide: self.slide,
            aggregate: self.aggregate.clone(),
            state: None,
            evolution: self.evolution.clone(),
            _acc: PhantomData,
        }
    }
}

impl<AGG, T, ACC, OUT> SlidingCountWindowAggregate<AGG, T, ACC, OUT> {
    /// Windows of the last `size` records every `slide` records (checked by [`check_size`]
    /// and [`check_slide`]), aggregated by `aggregate`.
    pub fn new(size: u64, slide: u64, aggregate: AGG) -> Self {
        SlidingCountWindowAggregate {
            size,
            slide,
            aggregate: Arc::new(aggregate),
            state: None,
            evolution: AccEvolution::default(),
            _acc: PhantomData,
        }
    }

    /// Declares the kept records' version and migration function (issue 26): a key's
    /// `(records since the last firing, last records)` is migrated record by record.
    pub(crate) fn with_evolution(mut self, evolution: AccEvolution) -> Self {
        self.evolution = evolution;
        self
    }
}

impl<AGG, T, ACC, OUT> CheckpointedFunction for SlidingCountWindowAggregate<AGG, T, ACC, OUT> {}

impl<K, T, ACC, OUT, AGG> KeyedProcessFunction<K, T, OUT>
    for SlidingCountWindowAggregate<AGG, T, ACC, OUT>
where
    K: Key,
    T: StateValue,
    ACC: 'static,
    OUT: 'static,
    AGG: AggregateFunction<T, ACC, OUT> + 'static,
{
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> Result<()> {
        states.with_window_evolution::<T>(&self.evolution, AccShape::Records)?;
        self.state = Some(states.value_state(SLIDING_COUNT_WINDOW_STATE)?);
        Ok(())
    }

    fn process(
        &mut self,
        record: T,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, OUT>,
    ) -> Result<()> {
        let state = self.state.expect("open() declares the state");
        let (since_fired, records) = ctx.get_mut_or_insert_with(state, Default::default);
        records.push_back(record);
        if records.len() as u64 > self.size {
            records.pop_front(); // the count evictor
        }
        *since_fired += 1;
        if *since_fired >= self.slide {
            *since_fired = 0; // the count trigger fires (and does not purge)
            let mut acc = self.aggregate.create_accumulator();
            for r in records.iter() {
                self.aggregate.add(r.clone(), &mut acc);
            }
            out.collect(self.aggregate.get_result(&acc));
        }
        Ok(())
    }
}
