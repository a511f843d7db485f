//! Windows in processing time — tumbling, sliding, sessions (fixed and per-record gap) and
//! global windows under a continuous processing-time trigger — checked on what does not
//! depend on when records happen to be processed: every record counted in exactly the
//! windows it belongs to, every window aligned and fired once; exactly once under injected
//! failures; and open windows with their timers restored at another parallelism.
//!
//! Processing-time windows do not fire at the end of input (as in Flink), so the source
//! holds the job open until the windows' results, as the exactly-once state downstream
//! holds them, cover the input ([`hold_until_counted`]): no assertion depends on timing.
//! Hand-computed results with a controlled clock are the unit tests of
//! `runtime::windows::triggered`.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{assert_resumed_mid_run, assert_stopped_mid_run, config, StopMidRun};
use weir::prelude::*;
use weir::testing::{Gated, HoldOpen};

const KEYS: u64 = 10;

/// `(key, window start, window end, records)`.
type Row = (u64, u64, u64, u64);

/// Gathers the window results at parallelism 1 in operator state — `(key, start, end) →
/// (records, times the window fired)` — and mirrors the total of records in the current
/// attempt's state into `counted`, which the source watches. Emits the rows at the end of
/// input.
#[derive(Clone)]
struct Tally {
    rows: BTreeMap<(u64, u64, u64), (u64, u64)>,
    counted: Arc<AtomicU64>,
}

/// `(key, start, end, records, firings)`.
type Tallied = (u64, u64, u64, u64, u64);

impl CheckpointedFunction for Tally {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.rows = ctx
            .list::<Tallied>("rows")?
            .into_iter()
            .map(|(k, s, e, n, f)| ((k, s, e), (n, f)))
            .collect();
        let total = self.rows.values().map(|r| r.0).sum();
        self.counted.store(total, Ordering::SeqCst);
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        let rows: Vec<Tallied> = self.tallied().collect();
        ctx.set_operator_list("rows", &rows)
    }
}

impl Tally {
    fn tallied(&self) -> impl Iterator<Item = Tallied> + '_ {
        self.rows
            .iter()
            .map(|(&(k, s, e), &(n, f))| (k, s, e, n, f))
    }
}

impl ProcessFunction<Row, Tallied> for Tally {
    fn process(&mut self, (k, s, e, n): Row, _: &mut Collector<'_, Tallied>) -> Result<()> {
        let r = self.rows.entry((k, s, e)).or_default();
        r.0 += n;
        r.1 += 1;
        self.counted.fetch_add(n, Ordering::SeqCst);
        Ok(())
    }
    fn on_end_of_input(&mut self, out: &mut Collector<'_, Tallied>) -> Result<()> {
        for row in self.tallied() {
            out.collect(row);
        }
        Ok(())
    }
}

/// `inner`, held open once exhausted until the tally of this attempt counts `want` records
/// and a checkpoint of this attempt completed (so every task of the attempt, the tally
/// included, has started and reset the count).
fn hold_until_counted<S>(inner: S, counted: &Arc<AtomicU64>, want: u64) -> Gated<S, HoldOpen> {
    let counted = counted.clone();
    let gate = HoldOpen::until(move || counted.load(Ordering::SeqCst) >= want);
    Gated::new(inner, gate.and_a_checkpoint())
}

struct Count;

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
    fn merge(&self, a: u64, b: u64) -> Option<u64> {
        Some(a + b)
    }
}

/// Counts records per key and window of `windows`, tallied.
fn run<S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    counted: &Arc<AtomicU64>,
    windows: impl FnOnce(KeyedStream<u64, u64, fn(&u64) -> u64>) -> DataStream<Row>,
) -> (Vec<Tallied>, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let key: fn(&u64) -> u64 = |i| i % KEYS;
    let keyed = env.add_source("gen", source).uid("gen").key_by(key);
    let tally = Tally {
        rows: BTreeMap::new(),
        counted: counted.clone(),
    };
    windows(keyed)
        .uid("windows")
        .process(tally)
        .uid("tally")
        .set_parallelism(1)
        .add_sink("collect", out.clone())
        .uid("sink");
    let r = env.execute();
    (out.take(), r)
}

fn row(k: &u64, w: TimeWindow, n: u64) -> Row {
    (*k, w.start, w.end, n)
}

/// Every key's records counted `copies` times (the windows each record belongs to), every
/// window fired once; returns the number of windows.
fn assert_counted(rows: &[Tallied], n: u64, copies: u64) -> usize {
    let mut per_key: HashMap<u64, u64> = HashMap::new();
    for &(k, s, e, count, firings) in rows {
        assert_eq!(
            firings, 1,
            "key {k} window [{s}, {e}) fired {firings} times"
        );
        assert!(s < e, "window [{s}, {e})");
        *per_key.entry(k).or_default() += count;
    }
    let want: HashMap<u64, u64> = weir::testing::expected_counts(n, KEYS)
        .into_iter()
        .map(|(k, c)| (k, c * copies))
        .collect();
    assert_eq!(per_key, want);
    rows.len()
}

fn job(name: &str, dir: &std::path::Path) -> JobConfig {
    config(name, dir, 2, CheckpointingMode::ExactlyOnce)
}

const N: u64 = 30_000;
const RATE: Option<f64> = Some(60_000.0);

#[test]
fn tumbling_processing_time_windows_count_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let counted = Arc::new(AtomicU64::new(0));
    let source = hold_until_counted(GeneratorSource::new(N).with_rate(RATE), &counted, N);
    let (rows, r) = run(job("pt-tumbling", dir.path()), source, &counted, |k| {
        k.window(TumblingProcessingTimeWindows::of(Duration::from_millis(40)).unwrap())
            .aggregate_with_window(Count, row)
    });
    r.unwrap();
    for &(k, s, e, ..) in &rows {
        assert_eq!(
            (e - s, s % 40),
            (40, 0),
            "key {k}: window [{s}, {e}) misaligned"
        );
    }
    // At most 60 000 records a second: half a second at least, over a dozen windows.
    let windows = assert_counted(&rows, N, 1);
    assert!(windows > 2 * KEYS as usize, "{windows} windows");
}

#[test]
fn sliding_processing_time_windows_count_every_record_in_each_of_its_windows() {
    let dir = tempfile::tempdir().unwrap();
    let counted = Arc::new(AtomicU64::new(0));
    let source = hold_until_counted(GeneratorSource::new(N).with_rate(RATE), &counted, 3 * N);
    let (rows, r) = run(job("pt-sliding", dir.path()), source, &counted, |k| {
        let ms = Duration::from_millis;
        k.window(SlidingProcessingTimeWindows::of(ms(60), ms(20)).unwrap())
            .aggregate_with_window(Count, row)
    });
    r.unwrap();
    for &(k, s, e, ..) in &rows {
        assert_eq!(
            (e - s, s % 20),
            (60, 0),
            "key {k}: window [{s}, {e}) misaligned"
        );
    }
    assert_counted(&rows, N, 3);
}

#[test]
fn processing_time_sessions_count_every_record_once() {
    for dynamic in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let counted = Arc::new(AtomicU64::new(0));
        let source = hold_until_counted(GeneratorSource::new(N).with_rate(RATE), &counted, N);
        let (rows, r) = run(job("pt-sessions", dir.path()), source, &counted, |k| {
            let gap = Duration::from_millis(30);
            if dynamic {
                k.window(ProcessingTimeSessionWindows::with_dynamic_gap(
                    move |_: &u64| gap,
                ))
                .aggregate_with_window(Count, row)
            } else {
                k.window(ProcessingTimeSessionWindows::with_gap(gap).unwrap())
                    .aggregate_with_window(Count, row)
            }
        });
        r.unwrap();
        // A key's records come every few hundred microseconds: its sessions span the run,
        // broken only where the machine stalled the job for more than the gap.
        for &(k, s, e, ..) in &rows {
            assert!(
                e - s >= 30,
                "key {k}: session [{s}, {e}) shorter than the gap"
            );
        }
        assert_counted(&rows, N, 1);
    }
}

#[test]
fn continuous_processing_time_trigger_on_global_windows_emits_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let counted = Arc::new(AtomicU64::new(0));
    let source = hold_until_counted(GeneratorSource::new(N).with_rate(RATE), &counted, N);
    let (rows, r) = run(job("pt-global", dir.path()), source, &counted, |k| {
        let every = ContinuousProcessingTimeTrigger::of(Duration::from_millis(25)).unwrap();
        k.window(GlobalWindows::create())
            .trigger(PurgingTrigger::of(every))
            .aggregate_with_window(Count, row)
    });
    r.unwrap();
    // One global window per key, fired many times, each firing the records since the last.
    let mut per_key: HashMap<u64, (u64, u64)> = HashMap::new();
    for &(k, s, e, count, firings) in &rows {
        assert_eq!((s, e), (0, TimeWindow::GLOBAL.end));
        let t = per_key.entry(k).or_default();
        t.0 += count;
        t.1 += firings;
    }
    assert_eq!(
        per_key
            .iter()
            .map(|(k, t)| (*k, t.0))
            .collect::<HashMap<_, _>>(),
        weir::testing::expected_counts(N, KEYS)
    );
    assert!(
        per_key.values().all(|t| t.1 > 1),
        "fired once only: {per_key:?}"
    );
}

#[test]
fn processing_time_windows_are_exactly_once_under_failures() {
    let dir = tempfile::tempdir().unwrap();
    let n = 60_000;
    let mut cfg = job("pt-failures", dir.path());
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(3, 3, n / 4));
    let counted = Arc::new(AtomicU64::new(0));
    let source = hold_until_counted(GeneratorSource::new(n).with_rate(RATE), &counted, n);
    let (rows, r) = run(cfg, source, &counted, |k| {
        k.window(TumblingProcessingTimeWindows::of(Duration::from_millis(20)).unwrap())
            .aggregate_with_window(Count, row)
    });
    let r = r.unwrap();
    assert_eq!(r.injected_failures.unwrap().0, 3);
    weir::testing::assert_resumed(&r, n);
    assert_counted(&rows, n, 1);
}

#[test]
fn open_processing_time_windows_survive_a_restore_at_another_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let n = 40_000;
    let cfg = job("pt-rescale", dir.path());
    // Windows of 2 s: the first run (a fraction of that) leaves its records in windows
    // that are open in its checkpoint, or fired into the tally's state; either way only
    // the restored state holds them, as the restore does not read them again.
    let windows = |k: KeyedStream<u64, u64, fn(&u64) -> u64>| {
        k.window(TumblingProcessingTimeWindows::of(Duration::from_secs(2)).unwrap())
            .aggregate_with_window(Count, row)
    };
    let mut first = cfg.clone();
    first.restart = RestartStrategy::None;
    let counted = Arc::new(AtomicU64::new(0));
    let (_, r) = run(
        first,
        StopMidRun::new(GeneratorSource::new(n), 2_000),
        &counted,
        windows,
    );
    assert_stopped_mid_run(r);
    let (mid, _) = common::newest_checkpoint(dir.path(), "pt-rescale");
    for p in [3, 1] {
        let mut c = cfg.clone();
        c.parallelism = p;
        c.restore = RestoreFrom::Path(mid.clone());
        let counted = Arc::new(AtomicU64::new(0));
        let source = hold_until_counted(GeneratorSource::new(n), &counted, n);
        let (rows, r) = run(c, source, &counted, windows);
        assert_resumed_mid_run(&r.unwrap(), &mid, n);
        assert_counted(&rows, n, 1);
    }
}

/// A window join pairs records by event time: over processing-time windows it is refused
/// with the reason and the alternatives, not run over the wrong clock.
#[test]
fn a_processing_time_window_join_is_refused_naming_the_alternatives() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = JobConfig::new("pt-window-join");
    cfg.checkpoint_dir = common::checkpoint_dir(dir.path());
    cfg.restart = RestartStrategy::None;
    let env = StreamEnvironment::new(cfg);
    let a = env.add_source("a", GeneratorSource::new(10));
    let b = env.add_source("b", GeneratorSource::new(10));
    a.join(b)
        .where_key(|i: &u64| i % 2)
        .equal_to(|i: &u64| i % 2)
        .window(TumblingProcessingTimeWindows::of(Duration::from_millis(10)).unwrap())
        .apply(|a: &u64, b: &u64| (*a, *b))
        .add_sink("collect", CollectSink::new());
    let err = env.execute().unwrap_err().to_string();
    assert!(
        err.contains("only event-time tumbling and sliding windows")
            && err.contains("interval join"),
        "{err}"
    );
}
