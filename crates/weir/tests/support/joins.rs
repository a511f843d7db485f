//! What the two-input tests (interval joins, window joins, connected streams) build their
//! jobs from, written once: hand-written inputs whose lateness is deterministic, event-time
//! inputs over the generator, and the per-key [`Summary`] of a join's pairs.

use std::collections::HashMap;

use weir::prelude::*;

use super::recovery::{pair_sum, strategy, Summarise, Summary};
use super::Markers;

/// `(key, timestamp)`; key 99 marks a watermark at its timestamp.
pub type Ev = (u64, u64);

/// The fast input of the hand-computed joins.
pub const FAST_RIGHT: [Ev; 5] = [(1, 5), (1, 10), (2, 7), (2, 8), (1, 13)];
/// The slow input of the hand-computed joins, out of order: `(1, 8)` and `(2, 9)` arrive
/// after the watermark 11 (late for an interval join, and for the window `[0, 10)`).
pub const SLOW_LEFT: [Ev; 7] = [(1, 4), (1, 9), (2, 5), (99, 11), (1, 8), (1, 12), (2, 9)];

/// One hand-written input, in arrival order: `slow` inputs deliver 10 records a second, so
/// that the other (fast) input has ended, and its watermark reached the maximum, before
/// their first record: the join's watermark is then the slow input's, and lateness is
/// deterministic.
pub fn input(
    env: &StreamEnvironment,
    name: &str,
    events: &'static [Ev],
    slow: bool,
) -> DataStream<Ev> {
    let rate = slow.then_some(10.0);
    env.add_source(
        name,
        GeneratorSource::new(events.len() as u64).with_rate(rate),
    )
    .map(move |i| events[i as usize])
    .assign_timestamps_and_watermarks(
        WatermarkStrategy::for_generator(|| Markers).with_timestamp_assigner(|e: &Ev, _| e.1),
    )
}

/// `n` generated records at `rate` records a second over all subtasks (slower on S3, see
/// [`paced`](super::paced)).
pub fn paced(n: u64, rate: f64) -> GeneratorSource {
    GeneratorSource::new(n).with_rate(Some(super::paced(rate)))
}

/// Source `name` (uid `name`) with the event times [`ts`](super::recovery::ts) under an
/// out-of-orderness bound of `bound_ms`.
pub fn timed<S: SourceFunction<u64>>(
    env: &StreamEnvironment,
    name: &str,
    source: S,
    bound_ms: u64,
) -> DataStream<u64> {
    env.add_source_with_watermarks(name, source, strategy(bound_ms))
        .uid(name)
}

/// Ends a join's pairs `(left, right)` in [`Summarise`] per key `left % keys` (uid
/// `summarise`) and a sink (uid `sink`) into `out`.
pub fn summarise(pairs: DataStream<(u64, u64)>, keys: u64, out: &CollectSink<Summary>) {
    pairs
        .key_by(move |p: &(u64, u64)| p.0 % keys)
        .process(Summarise::default())
        .uid("summarise")
        .add_sink("collect", out.clone())
        .uid("sink");
}

/// Runs `env` and returns what `out` collected, sorted, beside the job's result.
pub fn execute_sorted<T: Clone + Ord>(
    env: StreamEnvironment,
    out: &CollectSink<T>,
) -> (Vec<T>, Result<JobResult>) {
    let r = env.execute();
    let mut rows = out.take();
    rows.sort();
    (rows, r)
}

/// A join's exact truth, built pair by pair: `key → (pairs, checksum)`.
#[derive(Default)]
pub struct Truth(HashMap<u64, (u64, u64)>);

impl Truth {
    /// Counts the pair `(l, r)` for `key`.
    pub fn pair(&mut self, key: u64, l: u64, r: u64) {
        let e = self.0.entry(key).or_default();
        e.0 += 1;
        e.1 = e.1.wrapping_add(pair_sum(l, r));
    }

    /// The truth as sorted [`Summary`] rows, as [`Summarise`] emits them.
    pub fn rows(self) -> Vec<Summary> {
        let mut rows: Vec<Summary> = self.0.into_iter().map(|(k, (c, s))| (k, c, s)).collect();
        rows.sort();
        rows
    }
}
