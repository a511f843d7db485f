//! Exactly-once and at-least-once under injected task failures (panics), in one process.

mod common;

use common::*;
use weir::prelude::*;
use weir::testing::{Admit, Gated, SourceGate};

#[test]
fn counts_are_exact_without_failures() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config("plain", dir.path(), 2, CheckpointingMode::ExactlyOnce);
    let (counts, result) = run_keyed_count(cfg, 200_000, 1000, None).unwrap();
    assert_eq!(counts, expected(200_000, 1000));
    assert_eq!(result.attempts, 1);
}

#[test]
fn exactly_once_survives_many_injected_failures() {
    let mut total_failures = 0;
    for seed in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config("eo", dir.path(), 2, CheckpointingMode::ExactlyOnce);
        let n = 400_000;
        cfg.failure_injection = Some(FailureInjection::after_checkpoints(5, seed, n / 4));
        // Each failure waits for a checkpoint of its attempt, which takes longer on a
        // loaded machine: a paced input leaves time for all of them.
        let (counts, result) = run_keyed_count(cfg, n, 1000, Some(paced(250_000.0))).unwrap();
        weir::testing::assert_resumed(&result, n);
        let (fired, planned) = result.injected_failures.unwrap();
        assert_eq!(fired, planned, "seed {seed}: every planned failure fired");
        // Two tasks may hit their failure in the same attempt.
        assert!(result.attempts > 1 && result.attempts as usize <= fired + 1);
        assert_eq!(counts, expected(n, 1000), "seed {seed}: exact counts");
        total_failures += fired;
    }
    assert!(total_failures >= 20);
}

/// At-least-once restores checkpoints too: the sources rewind exactly to the checkpoint's
/// positions (so the restore checks of `assert_resumed` hold), only the counts may be high.
#[test]
fn at_least_once_never_undercounts() {
    for seed in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config("alo", dir.path(), 2, CheckpointingMode::AtLeastOnce);
        let n = 300_000;
        cfg.failure_injection = Some(FailureInjection::after_checkpoints(4, seed, n / 4));
        let (counts, result) = run_keyed_count(cfg, n, 500, Some(paced(300_000.0))).unwrap();
        assert_eq!(result.injected_failures.unwrap().0, 4, "seed {seed}");
        weir::testing::assert_resumed(&result, n);
        let want = expected(n, 500);
        assert_eq!(counts.len(), want.len());
        for (k, c) in &want {
            assert!(
                counts[k] >= *c,
                "seed {seed}: key {k} counted {} < {c}",
                counts[k]
            );
        }
    }
}

/// Source A is fast; source B goes through a slow, separate task, so B's barriers reach the
/// keyed stage late. Aligned mode holds A's channel back meanwhile; at-least-once mode lets
/// A's post-barrier records into the snapshot, and after a failure they are replayed.
fn skewed_job(
    mode: CheckpointingMode,
    seed: u64,
    dir: &std::path::Path,
) -> (Vec<(u64, u64)>, JobResult) {
    let n_a = 600_000u64;
    let n_b = 30_000u64;
    let keys = 64u64;
    let mut cfg = config("skew", dir, 1, mode);
    cfg.checkpointing.interval = Some(std::time::Duration::from_millis(30));
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(3, seed, 400_000));
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let a = env
        .add_source(
            "fast",
            GeneratorSource::new(n_a).with_rate(Some(1_000_000.0)),
        )
        .uid("fast");
    let b = env
        .add_source("slow", GeneratorSource::new(n_b).with_rate(Some(50_000.0)))
        .uid("slow")
        .rebalance()
        .map(move |i| {
            if i % 64 == 0 {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            i + n_a
        })
        .uid("slow-map");
    a.union(b)
        .key_by(move |i: &u64| i % keys)
        .process(CountPerKey::default())
        .uid("count")
        .add_sink("collect", out.clone())
        .uid("sink");
    let result = env.execute().unwrap();
    assert!(result.injected_failures.unwrap().0 > 0, "seed {seed}");
    weir::testing::assert_resumed(&result, n_a + n_b);
    let truth = expected(n_a + n_b, keys);
    let mut diffs: Vec<(u64, u64)> = out.take();
    diffs.retain(|(k, c)| truth[k] != *c);
    (diffs, result)
}

#[test]
fn at_least_once_overcounts_on_a_multi_input_task_where_exactly_once_is_exact() {
    for seed in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let (diffs, _) = skewed_job(CheckpointingMode::ExactlyOnce, seed, dir.path());
        assert!(
            diffs.is_empty(),
            "exactly-once seed {seed}: wrong counts {diffs:?}"
        );
    }
    // An over-count needs a restore from a checkpoint whose snapshot took post-barrier
    // records of the fast input — likely for each failure (each restores a checkpoint),
    // not certain: try seeds until one shows it.
    let mut alo_over = 0;
    for seed in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let (diffs, _) = skewed_job(CheckpointingMode::AtLeastOnce, seed, dir.path());
        let truth = expected(630_000, 64);
        for (k, c) in &diffs {
            assert!(
                *c > truth[k],
                "at-least-once seed {seed}: key {k} undercounted"
            );
        }
        alo_over += diffs.len();
        if alo_over > 0 {
            break;
        }
    }
    assert!(
        alo_over > 0,
        "at-least-once never overcounted in 10 runs: is it secretly aligning?"
    );
}

/// A source that finishes at once (tiny input) does not stop checkpointing: its final
/// state acknowledges later checkpoints, and recovery from them is still exact.
#[test]
fn checkpoints_go_on_after_a_source_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(
        "early-finish",
        dir.path(),
        2,
        CheckpointingMode::ExactlyOnce,
    );
    let (n_a, n_b, keys) = (1_000u64, 400_000u64, 100u64);
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(4, 3, n_b / 4));
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let a = env
        .add_source("tiny", GeneratorSource::new(n_a))
        .uid("tiny");
    let b = env
        .add_source(
            "long",
            GeneratorSource::new(n_b).with_rate(Some(paced(400_000.0))),
        )
        .uid("long")
        .map(move |i| i + n_a);
    a.union(b)
        .key_by(move |i: &u64| i % keys)
        .process(CountPerKey::default())
        .uid("count")
        .add_sink("collect", out.clone());
    let result = env.execute().unwrap();
    assert_eq!(result.injected_failures.unwrap().0, 4);
    weir::testing::assert_resumed(&result, n_a + n_b);
    assert!(
        result.checkpoints.len() >= 3,
        "only {} checkpoints completed",
        result.checkpoints.len()
    );
    let counts: std::collections::HashMap<u64, u64> = out.take().into_iter().collect();
    assert_eq!(counts, expected(n_a + n_b, keys));
}

/// Counts every record its source emits (replays included) in `emitted`.
#[derive(Clone)]
struct Counted {
    emitted: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl SourceGate for Counted {
    fn admit(&mut self) -> Result<Admit> {
        Ok(Admit::ALL)
    }
    fn polled(&mut self, emitted: u64, status: SourceStatus) -> Result<SourceStatus> {
        self.emitted
            .fetch_add(emitted, std::sync::atomic::Ordering::Relaxed);
        Ok(status)
    }
}

/// The job's count of source records equals what the sources emitted, replays included:
/// each attempt adds only its own records (task counters outlive attempts).
#[test]
fn source_records_count_every_attempt_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::config("counted", dir.path(), 2, CheckpointingMode::ExactlyOnce);
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(4, 3, 100_000));
    let emitted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    env.add_source(
        "events",
        Gated::new(
            GeneratorSource::new(200_000).with_rate(Some(200_000.0)),
            Counted {
                emitted: emitted.clone(),
            },
        ),
    )
    .key_by(|i: &u64| i % 10)
    .process(common::CountPerKey::default())
    .add_sink("collect", out.clone());
    let result = env.execute().unwrap();
    assert_eq!(result.injected_failures.map(|f| f.0), Some(4));
    weir::testing::assert_resumed(&result, 200_000);
    let emitted = emitted.load(std::sync::atomic::Ordering::Relaxed);
    assert!(emitted > 200_000, "failures replayed some records");
    assert_eq!(result.source_records, emitted);
    let per_attempt: u64 = result.history.iter().map(|a| a.source_records).sum();
    assert_eq!(per_attempt, emitted, "the attempts' records add up");
    let mut counts: Vec<(u64, u64)> = out.take();
    counts.sort_unstable();
    assert_eq!(counts, (0..10).map(|k| (k, 20_000)).collect::<Vec<_>>());
}

/// Admits nothing until `idle_checkpoints` checkpoints have completed (they cover no
/// progress at all): released by their completion, not by a time that a loaded machine
/// may spend before its first checkpoint.
#[derive(Clone)]
struct SlowStart {
    idle_checkpoints: u64,
    completed: u64,
}

impl SourceGate for SlowStart {
    fn completed(&mut self, _: u64) {
        self.completed += 1;
    }
    fn admit(&mut self) -> Result<Admit> {
        Ok(if self.completed < self.idle_checkpoints {
            Admit::HOLD
        } else {
            Admit::ALL
        })
    }
}

/// A failure that waits for a checkpoint waits for one with progress: checkpoints taken
/// before the sources emitted anything (position 0) do not arm it, so the restart restores
/// a position past 0, never the beginning in disguise.
#[test]
fn a_failure_after_checkpoints_waits_for_one_past_the_beginning() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("slow-start", dir.path(), 1, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(std::time::Duration::from_millis(5));
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(1, 1, 10));
    let n = 50_000;
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    env.add_source(
        "events",
        Gated::new(
            GeneratorSource::new(n).with_rate(Some(100_000.0)),
            SlowStart {
                idle_checkpoints: 3,
                completed: 0,
            },
        ),
    )
    .uid("events")
    .key_by(|i: &u64| i % 10)
    .process(CountPerKey::default())
    .uid("count")
    .add_sink("collect", out.clone());
    let result = env.execute().unwrap();
    assert_eq!(result.injected_failures, Some((1, 1)));
    weir::testing::assert_resumed(&result, n);
    let counts: std::collections::HashMap<u64, u64> = out.take().into_iter().collect();
    assert_eq!(counts, expected(n, 10));
}
