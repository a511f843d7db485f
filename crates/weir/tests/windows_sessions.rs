//! Event-time session windows: merging with a fixed and a per-record gap against
//! hand-computed truth (a record that bridges two sessions, late records); exactly once
//! under injected failures; and open sessions restored at parallelism 3 and 1.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::marked::{marked, without_markers, Ev};
use common::recovery::{exactly_once, gather, restored_at_3_and_1, under_failures, Gathered};
use common::StopMidRun;
use weir::prelude::*;

/// Session sums `(key, start, end, sum)` and late records, both without the markers'.
type Rows = (Vec<(u64, u64, u64, u64)>, Vec<Ev>);

/// Runs `events` in arrival order (parallelism 1) through `assigner` with `lateness` ms,
/// summing the values.
fn run<A: WindowAssigner<Ev>>(events: &'static [Ev], assigner: A, lateness: u64) -> Result<Rows> {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = JobConfig::new("sessions");
    cfg.checkpoint_dir = common::checkpoint_dir(dir.path());
    cfg.restart = RestartStrategy::None;
    let env = StreamEnvironment::new(cfg);
    let (results, late) = (CollectSink::new(), CollectSink::new());
    let out = marked(&env, events)
        .key_by(|e: &Ev| e.0)
        .window(assigner)
        .allowed_lateness(Duration::from_millis(lateness))
        .side_output_late_data()
        .reduce_with_window(
            |a, b| (a.0, a.1, a.2 + b.2),
            |k, w, e| (*k, w.start, w.end, e.2),
        );
    out.late_data.add_sink("late", late.clone());
    out.results.add_sink("results", results.clone());
    env.execute()?;
    Ok((without_markers(&results), without_markers(&late)))
}

/// A gap of 5 ms; one watermark, 9.
const FIXED: [Ev; 10] = [
    (1, 0, 1),
    (1, 3, 2),
    (1, 20, 4),
    (1, 12, 8),
    (1, 16, 16),
    (2, 1, 100),
    (2, 6, 200),
    (99, 9, 0),
    (1, 2, 32),
    (2, 10, 400),
];

#[test]
fn sessions_with_a_fixed_gap_merge_by_hand() {
    let gap = EventTimeSessionWindows::with_gap(Duration::from_millis(5)).unwrap();
    let (rows, late) = run(&FIXED, gap, 0).unwrap();
    // Key 1: [0, 5) and [3, 8) merge into [0, 8) (1 + 2), which fires at watermark 9.
    // [20, 25) and [12, 17) stay apart until (1, 16, 16) opens [16, 21), which overlaps
    // both: one session [12, 25) of 4 + 8 + 16. (1, 2, 32) opens [2, 7), whose session was
    // fired and cleaned up: late. Key 2: [1, 6) and [6, 11) touch and merge, then
    // (2, 10, 400) extends them to [1, 15).
    assert_eq!(rows, [(1, 0, 8, 3), (1, 12, 25, 28), (2, 1, 15, 700)]);
    assert_eq!(late, [(1, 2, 32)]);
}

/// The gap of each record is its value, in ms.
const DYNAMIC: [Ev; 6] = [
    (1, 0, 3),
    (1, 5, 10),
    (1, 2, 1),
    (1, 30, 2),
    (1, 16, 20),
    (1, 14, 2),
];

#[test]
fn sessions_with_a_dynamic_gap_merge_by_hand() {
    let gap = EventTimeSessionWindows::with_dynamic_gap(|e: &Ev| Duration::from_millis(e.2));
    let (rows, late) = run(&DYNAMIC, gap, 0).unwrap();
    // [0, 3) takes (1, 2, 1) as [2, 3): 3 + 1. [5, 15), [30, 32) and [16, 36) (which
    // absorbs [30, 32)) are bridged by (1, 14, 2), [14, 16): one session [5, 36) of
    // 10 + 2 + 20 + 2.
    assert_eq!(rows, [(1, 0, 3, 4), (1, 5, 36, 34)]);
    assert!(late.is_empty());
}

#[test]
fn a_gap_of_zero_is_a_clear_error() {
    let e = EventTimeSessionWindows::with_gap(Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert!(e.contains("session gap is 0"), "{e}");
    static ZERO: [Ev; 1] = [(1, 7, 0)];
    let gap = EventTimeSessionWindows::with_dynamic_gap(|e: &Ev| Duration::from_millis(e.2));
    let e = run(&ZERO, gap, 0).unwrap_err().to_string();
    assert!(
        e.contains("dynamic session gap of a record at 7 ms") && e.contains("gap is 0"),
        "{e}"
    );
}

/// A gap of 5 ms; watermarks 6, 13 and 23.
const LATE: [Ev; 8] = [
    (1, 0, 1),
    (99, 6, 0),
    (1, 8, 2),
    (1, 4, 4),
    (99, 13, 0),
    (1, 2, 8),
    (99, 23, 0),
    (1, 3, 16),
];

#[test]
fn sessions_with_allowed_lateness_by_hand() {
    let gap = EventTimeSessionWindows::with_gap(Duration::from_millis(5)).unwrap();
    let (rows, late) = run(&LATE, gap, 10).unwrap();
    // Lateness 10. [0, 5) fires at watermark 6 and is kept; (1, 4, 4) bridges it with the
    // open [8, 13): [0, 13) of 1 + 2 + 4 fires at 13. (1, 2, 8) falls in it: a late firing
    // (15). The watermark 23 passes its cleanup time (12 + 10), so (1, 3, 16) is late.
    assert_eq!(rows, [(1, 0, 5, 1), (1, 0, 13, 7), (1, 0, 13, 15)]);
    assert_eq!(late, [(1, 3, 16)]);
}

/// Sums without a merge.
struct SumNoMerge;

impl AggregateFunction<Ev, u64, u64> for SumNoMerge {
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, e: Ev, acc: &mut u64) {
        *acc += e.2;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
}

#[test]
fn merging_sessions_of_an_aggregate_without_merge_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = JobConfig::new("sessions-no-merge");
    cfg.checkpoint_dir = common::checkpoint_dir(dir.path());
    cfg.restart = RestartStrategy::None;
    let env = StreamEnvironment::new(cfg);
    marked(&env, &FIXED)
        .key_by(|e: &Ev| e.0)
        .window(EventTimeSessionWindows::with_gap(Duration::from_millis(5)).unwrap())
        .aggregate(SumNoMerge)
        .add_sink("discard", DiscardSink);
    let e = env.execute().unwrap_err().to_string();
    assert!(e.contains("implement AggregateFunction::merge"), "{e}");
}

// ---- Exactly once and rescaling ----------------------------------------------------

const KEYS: u64 = 10;
const GAP_MS: u64 = 100;
/// Records per block: a key's records within a block are at most 60 ms apart (one
/// session), and 500 ms separate two blocks (two sessions).
const BLOCK: u64 = 1_000;
/// Larger than the jitter and than the lag between two splits a rescaled generator subtask
/// reads alternately (timestamps advance 1.5 ms a record): no record is late.
const BOUND_MS: u64 = 30_000;

fn ts(i: u64) -> u64 {
    i + (i / BLOCK) * 500 + (i * 7919) % 50
}

/// `(key, start) → (end, count)` of every session.
fn truth(n: u64) -> HashMap<(u64, u64), (u64, u64)> {
    let mut blocks: HashMap<(u64, u64), (u64, u64, u64)> = HashMap::new();
    for i in 0..n {
        let s = blocks
            .entry((i % KEYS, i / BLOCK))
            .or_insert((u64::MAX, 0, 0));
        s.0 = s.0.min(ts(i));
        s.1 = s.1.max(ts(i) + GAP_MS);
        s.2 += 1;
    }
    blocks
        .into_iter()
        .map(|((k, _), (start, end, count))| ((k, start), (end, count)))
        .collect()
}

/// Counts records per key and session: every session `(end, count)` comes out once.
fn run_sessions<S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
) -> (Vec<Gathered<(u64, u64)>>, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(BOUND_MS))
        .with_timestamp_assigner(|i: &u64, _| ts(*i));
    let sessions = env
        .add_source_with_watermarks("gen", source, strategy)
        .uid("gen")
        .map(|i: u64| (i % KEYS, 1u64))
        .uid("pairs")
        .key_by(|r: &(u64, u64)| r.0)
        .window(EventTimeSessionWindows::with_gap(Duration::from_millis(GAP_MS)).unwrap())
        .reduce_with_window(
            |a, b| (a.0, a.1 + b.1),
            |k, w: TimeWindow, r| (*k, w.start, (w.end, r.1)),
        )
        .uid("sessions");
    gather(sessions, &out);
    let r = env.execute();
    (out.take(), r)
}

#[test]
fn sessions_are_exactly_once_under_failures() {
    let n = 100_000;
    let rows = under_failures("sessions-failures", n, 4, 9, |cfg| {
        let source = GeneratorSource::new(n).with_rate(Some(common::paced(100_000.0)));
        run_sessions(cfg, source)
    });
    assert_eq!(exactly_once(rows), truth(n));
}

#[test]
fn open_sessions_survive_a_restore_at_another_parallelism() {
    let n = 60_000;
    // Stops once a checkpoint after 2 000 records per subtask completed: the watermark is
    // still below every session's end (about 6 000 - 30 001 < 0), so every session is open
    // in it, some half filled (a block holds 1 000 records).
    restored_at_3_and_1(
        "sessions-rescale",
        n,
        2_000,
        |cfg, stop| match stop {
            Some(at) => run_sessions(cfg, StopMidRun::new(GeneratorSource::new(n), at)),
            None => run_sessions(cfg, GeneratorSource::new(n)),
        },
        |_| {},
        // The sources resume mid-input: the counts are right only if the checkpoint's open
        // sessions were restored and merged with what came after.
        |p, rows| assert_eq!(exactly_once(rows), truth(n), "parallelism {p}"),
    );
}
