//! Event-time windows: tumbling and sliding, with `reduce` and `aggregate`, against
//! hand-computed truth (late records dropped); exactly once under injected failures; and
//! open windows restored at another parallelism.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{assert_resumed_mid_run, assert_stopped_mid_run, config, Markers, StopMidRun};
use weir::prelude::*;

/// `(key, timestamp, value)`; key 99 marks a watermark at its timestamp.
type Ev = (u64, u64, u64);

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
    let mut cfg = JobConfig::new(name);
    cfg.checkpoint_dir = common::checkpoint_dir(dir.path());
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let events = env
        .add_source("events", GeneratorSource::new(EVENTS.len() as u64))
        .map(|i| EVENTS[i as usize])
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_generator(|| Markers).with_timestamp_assigner(|e: &Ev, _| e.1),
        );
    windows(events).add_sink("collect", out.clone());
    env.execute().unwrap();
    let mut rows: Vec<(u64, O)> = out.take().into_iter().filter(|r| r.0 != 99).collect();
    rows.sort();
    rows
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

const KEYS: u64 = 10;
const WINDOW_MS: u64 = 1_000;
/// Larger than the jitter and than the lag between two splits a rescaled generator subtask
/// reads alternately.
const BOUND_MS: u64 = 10_000;

fn ts(i: u64) -> u64 {
    i + (i * 7919) % 100
}

/// `(key, window start, count, times it arrived)`.
type Gathered = (u64, u64, u64, u64);

/// `(key, window start, count)` rows gathered into keyed state, emitted once at the end of
/// input with the number of times each row arrived: window output is exactly once in state.
#[derive(Clone, Default)]
struct Gather {
    rows: Option<MapState<u64, (u64, u64)>>,
}

impl CheckpointedFunction for Gather {}

impl KeyedProcessFunction<u64, (u64, u64, u64), Gathered> for Gather {
    fn open(&mut self, s: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.rows = Some(s.map_state("rows")?);
        Ok(())
    }
    fn process(
        &mut self,
        (_, start, count): (u64, u64, u64),
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, Gathered>,
    ) -> Result<()> {
        let mut rows = ctx.map(self.rows.as_ref().unwrap());
        let seen = rows.get(&start).map_or(0, |r| r.1);
        rows.put(start, (count, seen + 1));
        Ok(())
    }
    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, Gathered>,
    ) -> Result<()> {
        let rows = self.rows.unwrap();
        ctx.apply_to_all_keys(&rows, |c| {
            let key = *c.key();
            for (start, (count, seen)) in c.map(&rows).entries() {
                out.collect((key, *start, *count, *seen));
            }
            Ok(())
        })
    }
}

/// Counts records per key and tumbling window: every window's count comes out once.
fn run_counts<S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    opened: &Arc<AtomicU64>,
) -> (Vec<Gathered>, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(BOUND_MS))
        .with_timestamp_assigner(|i: &u64, _| ts(*i));
    let opened = opened.clone();
    env.add_source_with_watermarks("gen", source, strategy)
        .uid("gen")
        .key_by(|i: &u64| i % KEYS)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(WINDOW_MS)).unwrap())
        .aggregate_with_window(Counting(opened), |k: &u64, w: TimeWindow, count: u64| {
            (*k, w.start, count)
        })
        .uid("windows")
        .key_by(|r: &(u64, u64, u64)| r.0)
        .process(Gather::default())
        .uid("gather")
        .add_sink("collect", out.clone())
        .uid("sink");
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

fn truth(n: u64) -> HashMap<(u64, u64), u64> {
    let mut t = HashMap::new();
    for i in 0..n {
        *t.entry((i % KEYS, ts(i) / WINDOW_MS * WINDOW_MS))
            .or_default() += 1;
    }
    t
}

fn assert_exact(rows: &[Gathered], n: u64) {
    let want = truth(n);
    let mut got = HashMap::new();
    for &(k, start, count, seen) in rows {
        assert_eq!(seen, 1, "key {k} window {start} emitted {seen} times");
        assert!(got.insert((k, start), count).is_none());
    }
    assert_eq!(got.len(), want.len(), "windows");
    for (kw, c) in &want {
        assert_eq!(got.get(kw), Some(c), "key {} window {}", kw.0, kw.1);
    }
}

#[test]
fn windows_are_exactly_once_under_failures() {
    let dir = tempfile::tempdir().unwrap();
    let n = 100_000;
    let mut cfg = config(
        "windows-failures",
        dir.path(),
        2,
        CheckpointingMode::ExactlyOnce,
    );
    cfg.auto_watermark_interval = Duration::from_millis(5);
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(4, 9, n / 4));
    let source = GeneratorSource::new(n).with_rate(Some(100_000.0));
    let (rows, r) = run_counts(cfg, source, &Arc::default());
    let r = r.unwrap();
    assert_eq!(r.injected_failures.unwrap().0, 4);
    weir::testing::assert_resumed(&r, n);
    assert_exact(&rows, n);
}

#[test]
fn open_windows_survive_a_restore_at_another_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let n = 60_000;
    let mut cfg = config(
        "windows-rescale",
        dir.path(),
        2,
        CheckpointingMode::ExactlyOnce,
    );
    cfg.auto_watermark_interval = Duration::from_millis(5);
    let mut first = cfg.clone();
    first.restart = RestartStrategy::None;
    // Stops once a checkpoint after 2 000 records per subtask completed: the watermark is
    // still below every window's end (4 099 - 10 001 < 0), so all windows are open in it.
    let opened_first = Arc::new(AtomicU64::new(0));
    let (_, r) = run_counts(
        first,
        StopMidRun::new(GeneratorSource::new(n), 2_000),
        &opened_first,
    );
    assert_stopped_mid_run(r);
    let opened_first = opened_first.load(Ordering::Relaxed);
    assert!(opened_first >= 4 * KEYS, "windows opened: {opened_first}");
    let (mid, _) = common::newest_checkpoint(dir.path(), "windows-rescale");
    for p in [3, 1] {
        let mut c = cfg.clone();
        c.parallelism = p;
        c.restore = RestoreFrom::Path(mid.clone());
        let opened = Arc::new(AtomicU64::new(0));
        let (rows, r) = run_counts(c, GeneratorSource::new(n), &opened);
        assert_resumed_mid_run(&r.unwrap(), &mid, n);
        assert_exact(&rows, n);
        assert_eq!(
            opened_first + opened.load(Ordering::Relaxed),
            truth(n).len() as u64,
            "parallelism {p}: the checkpoint's windows were restored, not opened again"
        );
    }
}
