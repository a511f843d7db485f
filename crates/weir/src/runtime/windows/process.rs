//! Process-window functions (Flink's `ProcessWindowFunction`): instead of folding a window
//! into one accumulator, the window keeps all its records, and when it fires a function sees
//! them all at once with the window's bounds and emits any number of results.
//!
//! The records are buffered in the window state as a list per window ([`ElementsAggregate`]
//! is the aggregate whose accumulator is that list), so windows of every kind, allowed
//! lateness, late data and merging sessions (whose lists are concatenated) work as they do
//! for `reduce` and `aggregate`.

use super::TimeWindow;
use crate::runtime::functions::Collector;
use crate::state::keyed::AggregateFunction;

/// A function over all the records of a window (Flink's `ProcessWindowFunction`), called
/// once per firing: when the watermark passes the window, and again for each late firing
/// with allowed lateness. It costs a copy of every record in state, so prefer `reduce` or
/// `aggregate` when a running value is enough.
pub trait ProcessWindowFunction<K, T, O>: Send + Sync + 'static {
    /// Emits into `out` the results of the window `window` of `key`, whose records are
    /// `elements`, in the order they arrived (for a merged session, each merged session's
    /// records in turn, the sessions in no set order).
    fn process(&self, key: &K, window: TimeWindow, elements: &[T], out: &mut Collector<'_, O>);
}

impl<K, T, O, F> ProcessWindowFunction<K, T, O> for F
where
    F: Fn(&K, TimeWindow, &[T], &mut Collector<'_, O>) + Send + Sync + 'static,
{
    fn process(&self, key: &K, window: TimeWindow, elements: &[T], out: &mut Collector<'_, O>) {
        self(key, window, elements, out)
    }
}

/// The aggregate behind a process-window function: the accumulator is the window's records.
pub struct ElementsAggregate;

impl<T: Clone> AggregateFunction<T, Vec<T>, Vec<T>> for ElementsAggregate {
    fn create_accumulator(&self) -> Vec<T> {
        Vec::new()
    }
    fn add(&self, value: T, acc: &mut Vec<T>) {
        acc.push(value);
    }
    fn get_result(&self, acc: &Vec<T>) -> Vec<T> {
        acc.clone()
    }
    fn merge(&self, mut a: Vec<T>, b: Vec<T>) -> Option<Vec<T>> {
        a.extend(b);
        Some(a)
    }
}

/// Runs `f` over a fired window's records and returns what it emitted.
pub fn run_process_window<K, T, O, P: ProcessWindowFunction<K, T, O>>(
    f: &P,
    key: &K,
    window: TimeWindow,
    elements: Vec<T>,
) -> Vec<O> {
    let mut out = Vec::new();
    f.process(key, window, &elements, &mut Collector::new(&mut out));
    out
}
