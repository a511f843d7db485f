//! The two recovery proofs every event-time window and join test makes, written once:
//!
//! * [`under_failures`]: a run with panics injected after checkpoints at random records
//!   that resumed from a checkpoint after each one (not from scratch), whose result the
//!   caller then compares with exact truth;
//! * [`restored_at_3_and_1`]: a run stopped mid-input once a checkpoint covers part of it,
//!   then restored from that checkpoint at parallelism 3 and at 1, each resuming mid-run.
//!
//! Beside them, what the window tests gather their results with: the event times of the
//! generated input ([`ts`]), a count aggregate ([`Count`]), and [`Gather`], which keeps
//! every result a window emitted in keyed state so that [`exactly_once`] can prove each
//! window came out once.

use std::collections::HashMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::time::Duration;

use weir::prelude::*;
use weir::state::StateValue;

use super::{assert_resumed_mid_run, assert_stopped_mid_run, config, newest_checkpoint};

/// The keys of the generated input: record `i` has key `i % KEYS`.
pub const KEYS: u64 = 10;
/// The tumbling windows' size.
pub const WINDOW_MS: u64 = 1_000;
/// The out-of-orderness bound: larger than [`ts`]'s jitter and than the lag between two
/// splits a rescaled generator subtask reads alternately, so no record is late and the
/// result is deterministic.
pub const BOUND_MS: u64 = 10_000;

/// Record `i`'s event time: `i` ms, jittered by up to 99 ms (out of order).
pub fn ts(i: u64) -> u64 {
    i + (i * 7919) % 100
}

/// The bounded-out-of-orderness strategy over [`ts`] with `bound_ms`.
pub fn strategy(bound_ms: u64) -> WatermarkStrategy<u64> {
    WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(bound_ms))
        .with_timestamp_assigner(|i: &u64, _| ts(*i))
}

/// The records per `(key, window start)` of `0..n` in tumbling windows of `window_ms`.
pub fn counts(n: u64, window_ms: u64) -> HashMap<(u64, u64), u64> {
    let mut t = HashMap::new();
    for i in 0..n {
        *t.entry((i % KEYS, ts(i) / window_ms * window_ms))
            .or_default() += 1;
    }
    t
}

/// Counts records.
pub struct Count;

impl AggregateFunction<u64, u64, u64> for Count {
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: u64, acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// `(key, window start, every value emitted for it in arrival order)`.
pub type Gathered<V> = (u64, u64, Vec<V>);

/// The window results `(key, window start, value)` gathered into keyed state and emitted
/// once at the end of input, all values of a window together: what a window emitted,
/// and how often, survives every restore exactly once or the test sees it.
#[derive(Clone)]
pub struct Gather<V> {
    rows: Option<MapState<u64, Vec<V>>>,
}

impl<V> Default for Gather<V> {
    fn default() -> Self {
        Gather { rows: None }
    }
}

impl<V> CheckpointedFunction for Gather<V> {}

impl<V: StateValue> KeyedProcessFunction<u64, (u64, u64, V), Gathered<V>> for Gather<V> {
    fn open(&mut self, s: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.rows = Some(s.map_state("rows")?);
        Ok(())
    }
    fn process(
        &mut self,
        (_, start, value): (u64, u64, V),
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, Gathered<V>>,
    ) -> Result<()> {
        let mut rows = ctx.map(self.rows.as_ref().unwrap());
        let mut values = rows.get(&start).cloned().unwrap_or_default();
        values.push(value);
        rows.put(start, values);
        Ok(())
    }
    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, Gathered<V>>,
    ) -> Result<()> {
        let rows = self.rows.unwrap();
        ctx.apply_to_all_keys(&rows, |c| {
            let key = *c.key();
            for (start, values) in c.map(&rows).entries() {
                out.collect((key, *start, values.clone()));
            }
            Ok(())
        })
    }
}

/// Ends `results` in [`Gather`] (uid `gather`) and a sink (uid `sink`) into `out`.
pub fn gather<V: StateValue>(results: DataStream<(u64, u64, V)>, out: &CollectSink<Gathered<V>>) {
    results
        .key_by(|r: &(u64, u64, V)| r.0)
        .process(Gather::default())
        .uid("gather")
        .add_sink("collect", out.clone())
        .uid("sink");
}

/// The gathered rows as `(key, window start) → value`, asserting that every window
/// emitted exactly one value exactly once.
pub fn exactly_once<V: Debug>(rows: Vec<Gathered<V>>) -> HashMap<(u64, u64), V> {
    let mut got = HashMap::new();
    for (k, start, mut values) in rows {
        assert_eq!(
            values.len(),
            1,
            "key {k} window {start} emitted {} times: {values:?}",
            values.len()
        );
        let v = values.pop().unwrap();
        assert!(
            got.insert((k, start), v).is_none(),
            "key {k} window {start} gathered twice"
        );
    }
    got
}

/// The settings of both proofs: parallelism 2, exactly-once checkpoints, watermarks every
/// 5 ms.
fn recovery_config(name: &str, dir: &Path) -> JobConfig {
    let mut cfg = config(name, dir, 2, CheckpointingMode::ExactlyOnce);
    cfg.auto_watermark_interval = Duration::from_millis(5);
    cfg
}

/// Runs job `name` (over `records` input records in all) with `failures` panics planned
/// from `seed` in the first quarter of the input, each after a checkpoint, checkpoints
/// every 10 ms; asserts that every failure fired and that each attempt resumed from a
/// checkpoint, and returns what `run` gathered for the caller to compare with truth.
pub fn under_failures<T>(
    name: &str,
    records: u64,
    failures: usize,
    seed: u64,
    run: impl FnOnce(JobConfig) -> (T, Result<JobResult>),
) -> T {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = recovery_config(name, dir.path());
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(
        failures,
        seed,
        records / 4,
    ));
    let (gathered, r) = run(cfg);
    let r = r.unwrap();
    assert_eq!(r.injected_failures.unwrap().0, failures, "failures fired");
    weir::testing::assert_resumed(&r, records);
    gathered
}

/// Runs job `name` with `run(config, Some(stop_at))`, whose sources must stop mid-input
/// ([`StopMidRun`](super::StopMidRun) after `stop_at` records per subtask) so that the
/// run fails leaving a mid-run checkpoint; `at_checkpoint` may look into that checkpoint.
/// Then restores it at parallelism 3 and at 1 with `run(config, None)` (sources reading
/// all `records`), asserts each resumed mid-run, and hands its parallelism and result to
/// `check`.
pub fn restored_at_3_and_1<T>(
    name: &str,
    records: u64,
    stop_at: u64,
    mut run: impl FnMut(JobConfig, Option<u64>) -> (T, Result<JobResult>),
    at_checkpoint: impl FnOnce(&PathBuf),
    mut check: impl FnMut(u32, T),
) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = recovery_config(name, dir.path());
    let mut first = cfg.clone();
    first.restart = RestartStrategy::None;
    let (_, r) = run(first, Some(stop_at));
    assert_stopped_mid_run(r);
    let (mid, _) = newest_checkpoint(dir.path(), name);
    at_checkpoint(&mid);
    for p in [3, 1] {
        let mut c = cfg.clone();
        c.parallelism = p;
        c.restore = RestoreFrom::Path(mid.clone());
        let (gathered, r) = run(c, None);
        assert_resumed_mid_run(&r.unwrap(), &mid, records);
        check(p, gathered);
    }
}

/// `(key, pairs, checksum of the pairs)`: what a join test compares with truth per key.
pub type Summary = (u64, u64, u64);

/// A pair's contribution to a [`Summary`]'s checksum (order-independent when summed).
pub fn pair_sum(l: u64, r: u64) -> u64 {
    l.wrapping_mul(1_000_003).wrapping_add(r)
}

/// Counts a join's pairs `(left, right)` per key in keyed state and emits each key's
/// [`Summary`] at the end of input: a pair emitted twice or lost changes it.
#[derive(Clone, Default)]
pub struct Summarise {
    acc: Option<ValueState<(u64, u64)>>,
}

impl CheckpointedFunction for Summarise {}

impl KeyedProcessFunction<u64, (u64, u64), Summary> for Summarise {
    fn open(&mut self, s: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.acc = Some(s.value_state("acc")?);
        Ok(())
    }
    fn process(
        &mut self,
        (l, r): (u64, u64),
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, Summary>,
    ) -> Result<()> {
        let acc = ctx.get_mut_or_insert_with(self.acc.unwrap(), || (0, 0));
        acc.0 += 1;
        acc.1 = acc.1.wrapping_add(pair_sum(l, r));
        Ok(())
    }
    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, Summary>,
    ) -> Result<()> {
        let acc = self.acc.unwrap();
        ctx.apply_to_all_keys(&acc, |c| {
            let k = *c.key();
            let (n, s) = *c.get(acc).unwrap();
            out.collect((k, n, s));
            Ok(())
        })
    }
}
