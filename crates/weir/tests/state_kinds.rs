//! Every keyed state kind in one job, under injected failures: the final state must equal
//! the exact expectation (exactly-once), and restoring at another parallelism keeps it.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{assert_resumed_mid_run, assert_stopped_mid_run, config, StopMidRun};
use weir::prelude::*;
use weir::state::{AggregateFunction, AggregatingState, ListState, MapState, ReducingState};

const KEYS: u64 = 50;

/// Summary emitted per key at end of input.
#[derive(Debug, Clone, PartialEq)]
struct Summary {
    key: u64,
    count: u64,
    list_len: usize,
    list_sum: u64,
    map_len: usize,
    map_total: u64,
    max: u64,
    mean: f64,
}

struct Mean;

impl AggregateFunction<u64, (u64, u64), f64> for Mean {
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, value: u64, acc: &mut (u64, u64)) {
        acc.0 += value;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(u64, u64)) -> f64 {
        acc.0 as f64 / acc.1 as f64
    }
}

#[derive(Clone, Default)]
struct AllKinds {
    count: Option<ValueState<u64>>,
    list: Option<ListState<u64>>,
    map: Option<MapState<u64, u64>>,
    max: Option<ReducingState<u64>>,
    mean: Option<AggregatingState<u64, (u64, u64), f64>>,
}

impl CheckpointedFunction for AllKinds {}

impl KeyedProcessFunction<u64, u64, Summary> for AllKinds {
    fn open(&mut self, s: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.count = Some(s.value_state("count")?);
        self.list = Some(s.list_state("values")?);
        self.map = Some(s.map_state("buckets")?);
        self.max = Some(s.reducing_state("max", |a: u64, b: u64| a.max(b))?);
        self.mean = Some(s.aggregating_state("mean", Mean)?);
        Ok(())
    }

    fn process(
        &mut self,
        i: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, Summary>,
    ) -> Result<()> {
        *ctx.get_mut_or_insert_with(self.count.unwrap(), || 0) += 1;
        ctx.list(self.list.as_ref().unwrap()).add(i);
        let bucket = (i / KEYS) % 7;
        let mut m = ctx.map(self.map.as_ref().unwrap());
        let c = m.get(&bucket).copied().unwrap_or(0);
        m.put(bucket, c + 1);
        ctx.reducing(self.max.as_ref().unwrap()).add(i);
        ctx.aggregating(self.mean.as_ref().unwrap()).add(i);
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, Summary>,
    ) -> Result<()> {
        let me = self.clone();
        ctx.apply_to_all_keys(self.count.as_ref().unwrap(), |c| {
            let list = c.list(me.list.as_ref().unwrap()).get().to_vec();
            let m = c.map(me.map.as_ref().unwrap());
            let (map_len, map_total) = (m.entries().count(), m.values().sum());
            out.collect(Summary {
                key: *c.key(),
                count: *c.get(me.count.unwrap()).unwrap(),
                list_len: list.len(),
                list_sum: list.iter().sum(),
                map_len,
                map_total,
                max: *c.reducing(me.max.as_ref().unwrap()).get().unwrap(),
                mean: c.aggregating(me.mean.as_ref().unwrap()).get().unwrap(),
            });
            Ok(())
        })
    }
}

fn expected(n: u64) -> HashMap<u64, Summary> {
    let mut m: HashMap<u64, (Vec<u64>, HashMap<u64, u64>)> = HashMap::new();
    for i in 0..n {
        let e = m.entry(i % KEYS).or_default();
        e.0.push(i);
        *e.1.entry((i / KEYS) % 7).or_default() += 1;
    }
    m.into_iter()
        .map(|(k, (vals, buckets))| {
            let sum: u64 = vals.iter().sum();
            let s = Summary {
                key: k,
                count: vals.len() as u64,
                list_len: vals.len(),
                list_sum: sum,
                map_len: buckets.len(),
                map_total: buckets.values().sum(),
                max: *vals.iter().max().unwrap(),
                mean: sum as f64 / vals.len() as f64,
            };
            (k, s)
        })
        .collect()
}

fn run(cfg: JobConfig, n: u64, rate: Option<f64>) -> (HashMap<u64, Summary>, JobResult) {
    let (got, r) = run_over(
        cfg,
        GeneratorSource::new(n).with_rate(rate.map(common::paced)),
    );
    (got, r.unwrap())
}

/// The job over `source`.
fn run_over<S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
) -> (HashMap<u64, Summary>, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    env.add_source("gen", source)
        .uid("gen")
        .key_by(|i: &u64| i % KEYS)
        .process(AllKinds::default())
        .uid("all-kinds")
        .add_sink("collect", out.clone())
        .uid("sink");
    let r = env.execute();
    let mut got = HashMap::new();
    for s in out.take() {
        assert!(got.insert(s.key, s).is_none(), "a key was emitted twice");
    }
    (got, r)
}

fn assert_matches(got: &HashMap<u64, Summary>, want: &HashMap<u64, Summary>) {
    assert_eq!(got.len(), want.len());
    for (k, w) in want {
        let g = &got[k];
        assert!(
            (g.mean - w.mean).abs() < 1e-6,
            "key {k}: mean {} vs {}",
            g.mean,
            w.mean
        );
        let mut g2 = g.clone();
        g2.mean = w.mean;
        assert_eq!(&g2, w, "key {k}");
    }
}

/// Value, list, map, reducing and aggregating state under 8 injected failures, each after
/// a checkpoint of its attempt: every restart restores one, and the result is exact.
#[test]
fn every_state_kind_is_exactly_once_under_failures() {
    let n = 60_000;
    let want = expected(n);
    for seed in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config("kinds", dir.path(), 2, CheckpointingMode::ExactlyOnce);
        cfg.checkpointing.interval = Some(Duration::from_millis(10));
        cfg.failure_injection = Some(FailureInjection::after_checkpoints(4, seed, n / 4));
        let (got, r) = run(cfg, n, Some(60_000.0));
        assert_eq!(r.injected_failures.unwrap().0, 4, "seed {seed}");
        weir::testing::assert_resumed(&r, n);
        assert_matches(&got, &want);
    }
}

/// Every kind restores at another parallelism (state moves by key group): a run at
/// parallelism 2 stops mid-input, and its last checkpoint is restored at 3 and at 1.
#[test]
fn every_state_kind_restores_at_another_parallelism() {
    let n = 60_000;
    let want = expected(n);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(
        "kinds-rescale",
        dir.path(),
        2,
        CheckpointingMode::ExactlyOnce,
    );
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    let mut first = cfg.clone();
    first.restart = RestartStrategy::None;
    // Each subtask stops after 10 000 of its 30 000 records.
    let (_, r) = run_over(first, StopMidRun::new(GeneratorSource::new(n), 10_000));
    assert_stopped_mid_run(r);
    let (mid, _) = common::newest_checkpoint(dir.path(), "kinds-rescale");
    for p in [3, 1] {
        let mut c = cfg.clone();
        c.parallelism = p;
        c.restore = RestoreFrom::Path(mid.clone());
        let (got, r) = run(c, n, None);
        assert_resumed_mid_run(&r, &mid, n);
        assert_matches(&got, &want);
    }
}
