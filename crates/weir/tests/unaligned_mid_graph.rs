//! Unaligned checkpoints in a three-stage job (issue 13): source → a middle task → a slow
//! last stage, each its own task. Under backpressure the middle task spends its time
//! blocked sending into the last stage's full channel; an announced barrier must reach it
//! there (the blocked send gives way, the task snapshots, and the batch it could not send
//! goes out ahead of the marker), or every unaligned checkpoint would wait for the slow
//! stage to make room. Checked by a checkpoint that can only complete that way, and by
//! exact counts after injected panics.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use weir::prelude::*;

/// Settings of an unaligned job checkpointing every 100 ms.
fn unaligned_config(name: &str, dir: &Path, p: u32, timeout: Option<Duration>) -> JobConfig {
    let mut cfg = config(name, dir, p, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(100));
    cfg.checkpointing.unaligned = true;
    cfg.checkpointing.aligned_checkpoint_timeout = timeout;
    cfg
}

/// The middle stage: passes records on and notes each snapshot it takes.
#[derive(Clone)]
struct Middle {
    snapshots: Arc<AtomicU64>,
}

impl CheckpointedFunction for Middle {
    fn snapshot_state(&mut self, _ctx: &mut SnapshotContext) -> Result<()> {
        self.snapshots.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

impl ProcessFunction<u64, u64> for Middle {
    fn process(&mut self, record: u64, out: &mut Collector<'_, u64>) -> Result<()> {
        out.collect(record);
        Ok(())
    }
}

/// The last stage: holds its first batch until the middle task has snapshotted, then
/// counts what it receives. While it holds, nothing downstream of the middle task makes
/// room, so the middle task can snapshot only from inside its blocked send. `gave_up`: it
/// stopped holding after a minute without that snapshot (the test then fails rather than
/// hang).
#[derive(Clone)]
struct HoldingSink {
    middle_snapshots: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
    gave_up: Arc<AtomicBool>,
    held: bool,
}

impl CheckpointedFunction for HoldingSink {}

impl SinkFunction<u64> for HoldingSink {
    fn invoke(&mut self, batch: &mut Vec<u64>) -> Result<()> {
        if !self.held {
            self.held = true;
            let start = Instant::now();
            while self.middle_snapshots.load(Ordering::SeqCst) == 0 {
                if start.elapsed() > Duration::from_secs(60) {
                    self.gave_up.store(true, Ordering::SeqCst);
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.received
            .fetch_add(batch.len() as u64, Ordering::SeqCst);
        batch.clear();
        Ok(())
    }
}

/// The middle task, blocked sending into the channel of a last stage that holds its first
/// batch, takes its unaligned snapshot when the barrier is announced; only then does the
/// last stage go on, and the checkpoint completes. Before the blocked send gave way, the
/// middle task waited for the last stage and the last stage for the middle task's
/// snapshot.
#[test]
fn a_checkpoint_completes_while_the_middle_task_is_blocked_sending() {
    for timeout in [None, Some(Duration::from_millis(20))] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = unaligned_config("blocked", dir.path(), 1, timeout);
        let env = StreamEnvironment::new(cfg);
        let n = 400_000;
        let snapshots = Arc::new(AtomicU64::new(0));
        let sink = HoldingSink {
            middle_snapshots: snapshots.clone(),
            received: Arc::default(),
            gave_up: Arc::default(),
            held: false,
        };
        env.add_source("events", GeneratorSource::new(n))
            .uid("events")
            .rebalance()
            .process(Middle {
                snapshots: snapshots.clone(),
            })
            .uid("middle")
            .rebalance()
            .add_sink("holding", sink.clone())
            .uid("holding");
        let r = env.execute().unwrap();
        assert!(
            !sink.gave_up.load(Ordering::SeqCst),
            "timeout {timeout:?}: the middle task never snapshotted while its output was \
             blocked: {r:#?}"
        );
        assert_eq!(
            sink.received.load(Ordering::SeqCst),
            n,
            "timeout {timeout:?}"
        );
        let first = r.checkpoints.first().expect("a checkpoint completed");
        assert!(
            first.unaligned_tasks > 0 && first.in_flight_records > 0,
            "timeout {timeout:?}: the first checkpoint was taken unaligned, with the \
             blocked records in flight: {first:#?}"
        );
    }
}

/// Records per second the last stage processes, over all its subtasks.
const SINK_RATE: f64 = 40_000.0;

#[path = "support/slow_count.rs"]
mod slow_count;
use slow_count::SlowCount;

/// Generator at ten times [`SINK_RATE`] → rebalance → a middle map → `key_by` → the slow
/// count → collected, at parallelism 2 (three tasks per subtask). Returns the counts.
fn run_three_stages(cfg: JobConfig, n: u64, keys: u64) -> (HashMap<u64, u64>, JobResult) {
    let p = cfg.parallelism;
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    env.add_source(
        "events",
        GeneratorSource::new(n).with_rate(Some(10.0 * SINK_RATE)),
    )
    .uid("events")
    .rebalance()
    .map(|i: u64| i)
    .uid("middle")
    .key_by(move |i: &u64| i % keys)
    .process(SlowCount::new(SINK_RATE, p))
    .uid("count")
    .add_sink("collect", out.clone())
    .uid("sink");
    let result = env.execute().unwrap();
    (final_counts(out.take()), result)
}

/// Injected panics in any task of the three-stage job under backpressure, unaligned and
/// with the aligned-checkpoint timeout: resumed from checkpoints, exact counts, records in
/// flight saved.
#[test]
fn three_stages_under_backpressure_count_exactly_after_injected_panics() {
    for (seed, timeout) in [(0, None), (1, Some(Duration::from_millis(20)))] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = unaligned_config("three", dir.path(), 2, timeout);
        // 4.5 s of the slow count's work, two failures in its first half: room for both to
        // fire (each waits for a checkpoint of its attempt) on a loaded machine, where
        // three in 3 s did not always.
        let n = 180_000;
        cfg.failure_injection = Some(FailureInjection::after_checkpoints(2, seed, n / 2));
        let (counts, r) = run_three_stages(cfg, n, 500);
        weir::testing::assert_resumed(&r, n);
        let (fired, planned) = r.injected_failures.unwrap();
        assert_eq!(fired, planned, "seed {seed}: every planned failure fired");
        assert_eq!(counts, expected(n, 500), "seed {seed}: exact counts");
        let saved: u64 = r.checkpoints.iter().map(|c| c.in_flight_records).sum();
        assert!(saved > 0, "seed {seed}: no records in flight saved: {r:#?}");
    }
}
