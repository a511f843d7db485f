//! Broadcast state and union list state, under failures and restored at parallelism 3 and
//! 1 from a job checkpointed at parallelism 2.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::config;
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
    let p = cfg.parallelism;
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let rules = env
        .add_source("rules", GeneratorSource::new(RULES))
        .uid("rules")
        .set_parallelism(1);
    env.add_source("events", GeneratorSource::new(n).with_rate(rate))
        .uid("events")
        .connect_broadcast(rules)
        .process(Rules::default())
        .uid("rules-fn")
        .set_parallelism(p)
        .add_sink("collect", out.clone())
        .uid("sink");
    let r = env.execute().unwrap();
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

/// Broadcast and union list state are exactly-once under injected failures.
#[test]
fn broadcast_and_union_state_survive_failures() {
    let dir = tempfile::tempdir().unwrap();
    let n = 200_000;
    let mut cfg = config("bcast", dir.path(), 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    cfg.failure_injection = Some(FailureInjection {
        failures: 4,
        seed: 5,
        horizon: n / 4,
        after_checkpoint: false,
    });
    let (got, r) = run(cfg, n, Some(1_000_000.0));
    assert_eq!(r.injected_failures.unwrap().0, 4);
    assert!(!r.checkpoints.is_empty());
    check(&got, n, 2);
}

/// Checkpointed at parallelism 2, restored at 3 and then at 1: broadcast state reaches
/// every new subtask, union list state is complete, the generator's even-split splits
/// resume where they were.
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
    let (got, r) = run(cfg.clone(), n, Some(1_000_000.0));
    assert!(!r.checkpoints.is_empty());
    check(&got, n, 2);
    for p in [3, 1] {
        let mut c = cfg.clone();
        c.parallelism = p;
        c.restore = RestoreFrom::Latest;
        let (got, r) = run(c, n, None);
        assert!(r.restored_from.is_some());
        check(&got, n, p);
    }
}
