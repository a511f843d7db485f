//! Event-time windows: tumbling and sliding, with `reduce` and `aggregate`, against
//! hand-computed truth (late records dropped); exactly once under injected failures; and
//! open windows restored at another parallelism.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::marked::{marked, without_markers, Ev};
use common::recovery::*;
use common::{env_in, StopMidRun};
use weir::prelude::*;

/// The input, in arrival order. Record `(1, 7, 100)` arrives after the watermark 10: late
/// for the window `[0, 10)`, still in time for `[5, 15)`.
const EVENTS: [Ev; 12] = [
    (1, 1, 1),
    (1, 5, 2),
    (2, 3, 10),
    (1, 12, 4),
    (1, 8, 8),
    (99, 10, 0),
    (1, 7, 100),
    (2, 15, 20),
    (1, 19, 40),
    (99, 25, 0),
    (1, 21, 1000),
    (2, 40, 0),
];

/// Runs the events at parallelism 1 (arrival order kept) through `windows` and returns the
/// rows for keys other than the marker's, sorted.
fn run_events<O: weir::state::Data + Ord + std::fmt::Debug>(
    name: &str,
    windows: impl FnOnce(DataStream<Ev>) -> DataStream<(u64, O)>,
) -> Vec<(u64, O)> {
    let dir = tempfile::tempdir().unwrap();
    let env = env_in(name, dir.path());
    let out = CollectSink::new();
    windows(marked(&env, &EVENTS)).add_sink("collect", out.clone());
    env.execute().unwrap();
    without_markers(&out)
}

#[test]
fn tumbling_reduce_by_hand() {
    let rows = run_events("tumbling", |s| {
        s.key_by(|e: &Ev| e.0)
            .window(TumblingEventTimeWindows::of(Duration::from_millis(10)).unwrap())
            .reduce_with_window(
                |a, b| (a.0, a.1.max(b.1), a.2 + b.2),
                |k, w, e| (*k, (w.start, w.end, e.2)),
            )
    });
    // Key 1, [0, 10): 1 + 2 + 8 (100 came after watermark 10: late, dropped).
    // Key 1, [10, 20): 4 + 40; [20, 30): 1000, fired by the end of input.
    assert_eq!(
        rows,
        [
            (1, (0, 10, 11)),
            (1, (10, 20, 44)),
            (1, (20, 30, 1000)),
            (2, (0, 10, 10)),
            (2, (10, 20, 20)),
            (2, (40, 50, 0)),
        ]
    );
}

/// Count and sum per window, as an aggregate with an accumulator of another type.
struct CountSum;

impl AggregateFunction<Ev, (u64, u64), (u64, u64)> for CountSum {
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, e: Ev, acc: &mut (u64, u64)) {
        acc.0 += 1;
        acc.1 += e.2;
    }
    fn get_result(&self, acc: &(u64, u64)) -> (u64, u64) {
        *acc
    }
}

#[test]
fn sliding_aggregate_by_hand() {
    let rows = run_events("sliding", |s| {
        s.key_by(|e: &Ev| e.0)
            .window(
                SlidingEventTimeWindows::of(Duration::from_millis(10), Duration::from_millis(5))
                    .unwrap(),
            )
            .aggregate_with_window(CountSum, |k, w, (count, sum)| {
                (*k, (w.start, w.end, count, sum))
            })
    });
    // Windows of size 10 every 5; [-5, 5) reports its start as 0. Record (1, 7, 100) is
    // late for [0, 10) but not for [5, 15); (1, 21, 1000) late for [15, 25) only.
    assert_eq!(
        rows,
        [
            (1, (0, 5, 1, 1)),
            (1, (0, 10, 3, 11)),
            (1, (5, 15, 4, 114)),
            (1, (10, 20, 2, 44)),
            (1, (15, 25, 1, 40)),
            (1, (20, 30, 1, 1000)),
            (2, (0, 5, 1, 10)),
            (2, (0, 10, 1, 10)),
            (2, (10, 20, 1, 20)),
            (2, (15, 25, 1, 20)),
            (2, (35, 45, 1, 0)),
            (2, (40, 50, 1, 0)),
        ]
    );
}

#[test]
fn a_stream_without_timestamps_gets_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = JobConfig::new("no-timestamps");
    cfg.checkpoint_dir = common::checkpoint_dir(dir.path());
    cfg.restart = RestartStrategy::None;
    let env = StreamEnvironment::new(cfg);
    env.add_source("numbers", GeneratorSource::new(10))
        .key_by(|i| i % 2)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)).unwrap())
        .reduce(|a, b| a + b)
        .add_sink("discard", DiscardSink);
    let e = env.execute().unwrap_err().to_string();
    assert!(e.contains("without a timestamp"), "{e}");
}

// ---- Exactly once and rescaling ----------------------------------------------------

/// Counts records per key and tumbling window: every window's count comes out once.
fn run_counts<S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    opened: &Arc<AtomicU64>,
) -> (Vec<Gathered<u64>>, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let opened = opened.clone();
    let windows = env
        .add_source_with_watermarks("gen", source, strategy(BOUND_MS))
        .uid("gen")
        .key_by(|i: &u64| i % KEYS)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(WINDOW_MS)).unwrap())
        .aggregate_with_window(Counting(opened), |k: &u64, w: TimeWindow, count: u64| {
            (*k, w.start, count)
        })
        .uid("windows");
    gather(windows, &out);
    let r = env.execute();
    (out.take(), r)
}

/// Counts records, and (outside the state) how many accumulators were created.
struct Counting(Arc<AtomicU64>);

impl AggregateFunction<u64, u64, u64> for Counting {
    fn create_accumulator(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed);
        0
    }
    fn add(&self, _: u64, acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
}

#[test]
fn windows_are_exactly_once_under_failures() {
    let n = 100_000;
    let rows = under_failures("windows-failures", n, 4, 9, |cfg| {
        let source = GeneratorSource::new(n).with_rate(Some(100_000.0));
        run_counts(cfg, source, &Arc::default())
    });
    assert_eq!(exactly_once(rows), counts(n, WINDOW_MS));
}

#[test]
fn open_windows_survive_a_restore_at_another_parallelism() {
    let n = 60_000;
    // Stops once a checkpoint after 2 000 records per subtask completed: the watermark is
    // still below every window's end (4 099 - 10 001 < 0), so all windows are open in it.
    let opened_first = Arc::new(AtomicU64::new(0));
    let opened_after = Arc::new(AtomicU64::new(0));
    restored_at_3_and_1(
        "windows-rescale",
        n,
        2_000,
        |cfg, stop| match stop {
            Some(at) => run_counts(
                cfg,
                StopMidRun::new(GeneratorSource::new(n), at),
                &opened_first,
            ),
            None => {
                opened_after.store(0, Ordering::Relaxed);
                run_counts(cfg, GeneratorSource::new(n), &opened_after)
            }
        },
        |_| {
            let opened = opened_first.load(Ordering::Relaxed);
            assert!(opened >= 4 * KEYS, "windows opened: {opened}");
        },
        |p, rows| {
            assert_eq!(exactly_once(rows), counts(n, WINDOW_MS), "parallelism {p}");
            assert_eq!(
                opened_first.load(Ordering::Relaxed) + opened_after.load(Ordering::Relaxed),
                counts(n, WINDOW_MS).len() as u64,
                "parallelism {p}: the checkpoint's windows were restored, not opened again"
            );
        },
    );
}
