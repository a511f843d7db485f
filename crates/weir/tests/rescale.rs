//! Broadcast state and union list state, under failures and restored at parallelism 3 and
//! 1 from a job checkpointed at parallelism 2.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{assert_resumed_mid_run, assert_stopped_mid_run, config, StopMidRun};
use weir::prelude::*;

const RULES: u64 = 20;

/// Stores the broadcast "rules" (r → r²); counts main records in union list state (on
/// restore subtask 0 takes the union's total, the others start at 0, so the sum is
/// preserved at any parallelism); emits `(rules, seen)` per subtask at end of input.
#[derive(Clone, Default)]
struct Rules {
    rules: Option<BroadcastState<u64, u64>>,
    seen: u64,
}

impl CheckpointedFunction for Rules {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        let all: Vec<u64> = ctx.list("seen")?;
        self.seen = if ctx.subtask_index() == 0 {
            all.iter().sum()
        } else {
            0
        };
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        ctx.set_union_list("seen", &[self.seen])
    }
}

impl BroadcastProcessFunction<u64, u64, (Vec<(u64, u64)>, u64)> for Rules {
    fn open(&mut self, states: &mut BroadcastStateStore<'_>) -> Result<()> {
        self.rules = Some(states.map_state("rules")?);
        Ok(())
    }
    fn process_element(
        &mut self,
        _: u64,
        _: &ReadOnlyBroadcastContext<'_>,
        _: &mut Collector<'_, (Vec<(u64, u64)>, u64)>,
    ) -> Result<()> {
        self.seen += 1;
        Ok(())
    }
    fn process_broadcast_element(
        &mut self,
        r: u64,
        ctx: &mut BroadcastContext<'_>,
        _: &mut Collector<'_, (Vec<(u64, u64)>, u64)>,
    ) -> Result<()> {
        ctx.get_mut(self.rules.unwrap()).insert(r, r * r);
        Ok(())
    }
    fn on_end_of_input(
        &mut self,
        ctx: &ReadOnlyBroadcastContext<'_>,
        out: &mut Collector<'_, (Vec<(u64, u64)>, u64)>,
    ) -> Result<()> {
        let rules: BTreeMap<u64, u64> = ctx
            .get(self.rules.unwrap())
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        out.collect((rules.into_iter().collect(), self.seen));
        Ok(())
    }
}

/// Per subtask: its broadcast rules and its share of the count.
type Summaries = Vec<(Vec<(u64, u64)>, u64)>;

fn run(cfg: JobConfig, n: u64, rate: Option<f64>) -> (Summaries, JobResult) {
    let (got, r) = run_over(cfg, GeneratorSource::new(n).with_rate(rate));
    (got, r.unwrap())
}

/// The job with `events` as its main source.
fn run_over<S: SourceFunction<u64>>(cfg: JobConfig, events: S) -> (Summaries, Result<JobResult>) {
    let p = cfg.parallelism;
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let rules = env
        .add_source("rules", GeneratorSource::new(RULES))
        .uid("rules")
        .set_parallelism(1);
    env.add_source("events", events)
        .uid("events")
        .connect_broadcast(rules)
        .process(Rules::default())
        .uid("rules-fn")
        .set_parallelism(p)
        .add_sink("collect", out.clone())
        .uid("sink");
    let r = env.execute();
    (out.take(), r)
}

fn check(got: &[(Vec<(u64, u64)>, u64)], n: u64, p: u32) {
    assert_eq!(got.len(), p as usize, "one summary per subtask");
    let want: Vec<(u64, u64)> = (0..RULES).map(|r| (r, r * r)).collect();
    for (rules, _) in got {
        assert_eq!(
            rules, &want,
            "broadcast state identical and complete on every subtask"
        );
    }
    assert_eq!(
        got.iter().map(|g| g.1).sum::<u64>(),
        n,
        "union list state kept the count"
    );
}

/// Broadcast and union list state are exactly-once under injected failures, each after a
/// checkpoint of its attempt (so every restart restores both, and the rules are not read
/// again: the rules source's position is restored at its end).
#[test]
fn broadcast_and_union_state_survive_failures() {
    let dir = tempfile::tempdir().unwrap();
    let n = 200_000;
    let mut cfg = config("bcast", dir.path(), 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(4, 5, n / 4));
    let (got, r) = run(cfg, n, Some(200_000.0));
    assert_eq!(r.injected_failures.unwrap().0, 4);
    weir::testing::assert_resumed(&r, n + RULES);
    check(&got, n, 2);
}

/// Checkpointed at parallelism 2 mid-input, restored at 3 and (the same checkpoint) at 1:
/// broadcast state reaches every new subtask, union list state is complete, the
/// generator's even-split splits resume where they were.
#[test]
fn broadcast_union_and_split_state_rescale() {
    let dir = tempfile::tempdir().unwrap();
    let n = 200_000;
    let mut cfg = config(
        "bcast-rescale",
        dir.path(),
        2,
        CheckpointingMode::ExactlyOnce,
    );
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    let mut first = cfg.clone();
    first.restart = RestartStrategy::None;
    // Each events subtask stops after 30 000 of its 100 000 records.
    let (_, r) = run_over(first, StopMidRun::new(GeneratorSource::new(n), 30_000));
    assert_stopped_mid_run(r);
    let (mid, _) = common::newest_checkpoint(dir.path(), "bcast-rescale");
    for p in [3, 1] {
        let mut c = cfg.clone();
        c.parallelism = p;
        c.restore = RestoreFrom::Path(mid.clone());
        let (got, r) = run(c, n, None);
        assert_resumed_mid_run(&r, &mid, n + RULES);
        check(&got, n, p);
    }
}
