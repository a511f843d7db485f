//! Count windows (Flink's `countWindow(size)`: global windows with a purging count
//! trigger): each key's records are cut into windows of `size` records in arrival order;
//! a window fires and is purged when its `size`-th record arrives. A window still short of
//! `size` records at the end of input never fires, as in Flink.
//!
//! State: one value state per key, `(records so far, accumulator)`.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::runtime::functions::{CheckpointedFunction, Collector, KeyedProcessFunction};
use crate::state::keyed::{AggregateFunction, KeyedContext, KeyedStateStore, ValueState};
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
    _acc: PhantomData<fn() -> OUT>,
}

impl<AGG, ACC, OUT> Clone for CountWindowAggregate<AGG, ACC, OUT> {
    fn clone(&self) -> Self {
        CountWindowAggregate {
            size: self.size,
            aggregate: self.aggregate.clone(),
            state: None,
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
            _acc: PhantomData,
        }
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
