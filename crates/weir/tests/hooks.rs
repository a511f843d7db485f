//! Function state hooks: operator list state through `snapshot_state`/`initialize_state`,
//! completion notifications, and restart strategies.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use weir::prelude::*;

/// Counts records in operator (non-keyed) list state, like Flink's `BufferingSink` example:
/// restore reads the list, snapshot rewrites it. Emits its total at end of input.
#[derive(Clone, Default)]
struct CountingProcess {
    seen: u64,
    restored: Arc<Mutex<u32>>,
}

impl CheckpointedFunction for CountingProcess {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        let saved: Vec<u64> = ctx.list("seen")?;
        self.seen = saved.iter().sum();
        if ctx.is_restored() {
            *self.restored.lock().unwrap() += 1;
        }
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        ctx.set_operator_list("seen", &[self.seen])
    }
}

impl ProcessFunction<u64, u64> for CountingProcess {
    fn process(&mut self, _r: u64, _out: &mut Collector<'_, u64>) -> Result<()> {
        self.seen += 1;
        Ok(())
    }
    fn on_end_of_input(&mut self, out: &mut Collector<'_, u64>) -> Result<()> {
        out.collect(self.seen);
        Ok(())
    }
}

/// Records the checkpoint ids each subtask was told about.
#[derive(Clone, Default)]
struct NotifiedSink {
    subtask: u32,
    completed: Arc<Mutex<Vec<BTreeSet<u64>>>>,
}

impl CheckpointedFunction for NotifiedSink {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.subtask = ctx.subtask_index();
        let mut c = self.completed.lock().unwrap();
        c.resize(ctx.parallelism() as usize, BTreeSet::new());
        Ok(())
    }
    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<()> {
        self.completed.lock().unwrap()[self.subtask as usize].insert(id);
        Ok(())
    }
}

impl SinkFunction<u64> for NotifiedSink {
    fn invoke(&mut self, batch: &mut Vec<u64>) -> Result<()> {
        batch.clear();
        Ok(())
    }
}

/// Operator list state restores exactly: the per-subtask counters sum to N after failures,
/// each after a checkpoint of its attempt.
#[test]
fn operator_list_state_is_exactly_once_under_failures() {
    let dir = tempfile::tempdir().unwrap();
    let n = 300_000;
    let mut cfg = config("oplist", dir.path(), 2, CheckpointingMode::ExactlyOnce);
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(5, 11, n / 2));
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let f = CountingProcess::default();
    let restored = f.restored.clone();
    env.add_source("gen", GeneratorSource::new(n).with_rate(Some(300_000.0)))
        .uid("gen")
        .rebalance()
        .process(f)
        .uid("counting")
        .add_sink("collect", out.clone());
    let result = env.execute().unwrap();
    assert_eq!(result.injected_failures.unwrap().0, 5);
    weir::testing::assert_resumed(&result, n);
    assert!(*restored.lock().unwrap() > 0, "some attempt restored state");
    assert_eq!(out.take().iter().sum::<u64>(), n);
}

/// Every subtask hears `checkpoint complete` for every completed checkpoint.
#[test]
fn completion_notifications_reach_every_subtask() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config("notify", dir.path(), 3, CheckpointingMode::ExactlyOnce);
    let env = StreamEnvironment::new(cfg);
    let sink = NotifiedSink::default();
    let completed = sink.completed.clone();
    // Each subtask pauses for a checkpoint after every 50 000 of its 200 000 records: three
    // checkpoints complete mid-run by construction, not because the input outlasted them.
    env.add_source(
        "gen",
        PauseForCheckpoints::new(
            GeneratorSource::new(600_000).with_rate(Some(2_000_000.0)),
            50_000,
        ),
    )
    .rebalance()
    .add_sink("notified", sink);
    let result = env.execute().unwrap();
    assert!(
        result.checkpoints.len() >= 3,
        "{:?}",
        result.checkpoints.len()
    );
    let ids: BTreeSet<u64> = result.checkpoints.iter().map(|c| c.id).collect();
    let completed = completed.lock().unwrap();
    assert_eq!(completed.len(), 3);
    for (s, seen) in completed.iter().enumerate() {
        // The notification of the very last checkpoint may race with end of input.
        let missing: Vec<_> = ids.difference(seen).collect();
        assert!(missing.len() <= 1, "subtask {s} missed {missing:?}");
        assert!(
            seen.is_subset(&ids),
            "subtask {s} told of unknown checkpoints"
        );
    }
}

/// With the `none` restart strategy the first failure fails the job, naming the cause.
#[test]
fn restart_strategy_none_fails_on_first_failure() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("nostart", dir.path(), 1, CheckpointingMode::ExactlyOnce);
    cfg.restart = RestartStrategy::None;
    cfg.failure_injection = Some(FailureInjection {
        failures: 1,
        seed: 1,
        horizon: 1000,
        after_checkpoint: false,
    });
    let err = run_keyed_count(cfg, 100_000, 10, None)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("injected failure 1"), "{err}");
    assert!(err.contains("1 attempt"), "{err}");
}

/// A fixed-delay strategy gives up after its attempts.
#[test]
fn fixed_delay_gives_up_after_its_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("fixed", dir.path(), 1, CheckpointingMode::ExactlyOnce);
    cfg.restart = RestartStrategy::FixedDelay {
        attempts: 2,
        delay: Duration::from_millis(1),
    };
    cfg.failure_injection = Some(FailureInjection {
        failures: 5,
        seed: 2,
        horizon: 1000,
        after_checkpoint: false,
    });
    let err = run_keyed_count(cfg, 100_000, 10, None)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("after 3 attempt"), "{err}");
}

/// Restoring a checkpoint at another parallelism hands every key to its new owner.
#[test]
fn keyed_state_restores_at_another_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    // Run 1 at parallelism 2 stops mid-input (each of its 4 source subtasks after 40 000
    // of its 100 000 records), leaving a mid-run checkpoint; run 2 restores it at
    // parallelism 3 and stops mid-input too; run 3 restores run 2's newest at 1 and
    // finishes. Each restore resumes from a mid-run cut and must end exact.
    let n = 400_000;
    let mut cfg = config("rescale", dir.path(), 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    cfg.restart = RestartStrategy::None;
    assert_stopped_mid_run(run_keyed_count_stopping(cfg.clone(), n, 777, 40_000));
    let (mid1, at1) = newest_checkpoint(dir.path(), "rescale");
    assert!(at1 > 0 && at1 < n, "run 1 stopped at {at1} records");

    let mut c = cfg.clone();
    c.parallelism = 3;
    c.restore = RestoreFrom::Path(mid1.clone());
    // At parallelism 3 the source subtasks share the 2 splits of each source and stop
    // after 10 000 more records each.
    assert_stopped_mid_run(run_keyed_count_stopping(c, n, 777, 10_000));
    let (mid2, at2) = newest_checkpoint(dir.path(), "rescale");
    assert_ne!(mid2, mid1, "run 2 completed a checkpoint");
    assert!(
        at2 > at1 && at2 < n,
        "run 2 resumed at {at1}, stopped at {at2}"
    );

    let mut c = cfg.clone();
    c.parallelism = 1;
    c.restore = RestoreFrom::Latest;
    let (counts, r) = run_keyed_count(c, n, 777, None).unwrap();
    assert_resumed_mid_run(&r, &mid2, n);
    assert_eq!(counts, expected(n, 777), "parallelism 3, then 1");
}
