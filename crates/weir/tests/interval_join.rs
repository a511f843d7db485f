//! Interval joins: hand-computed truth with out-of-order and late arrivals and exclusive
//! bounds; exactly once under injected failures; join buffers restored at another
//! parallelism, and cleaned up once the watermark passes them.

mod common;

use std::collections::HashMap;

use common::env_in;
use common::joins::{execute_sorted, input, summarise, timed, Ev, Truth, FAST_RIGHT, SLOW_LEFT};
use common::recovery::{restored_at_3_and_1, ts, under_failures, Summary};
use common::StopMidRun;
use weir::prelude::*;

// ---- By hand -----------------------------------------------------------------------------

/// The hand-computed joins before `process`.
type Joined = IntervalJoined<u64, Ev, Ev, fn(&Ev) -> u64, fn(&Ev) -> u64>;

/// Joins `left` and `right` (the slow one as said) within `[-2, 3]`, bounds made
/// exclusive by `exclusive`, into `(key, left ts, right ts)` rows, sorted.
fn run_join(
    left: &'static [Ev],
    right: &'static [Ev],
    left_slow: bool,
    exclusive: fn(Joined) -> Joined,
) -> Vec<(u64, u64, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let env = env_in("join-by-hand", dir.path());
    let out = CollectSink::new();
    let key: fn(&Ev) -> u64 = |e| e.0;
    let l = input(&env, "left", left, left_slow).key_by(key);
    let r = input(&env, "right", right, !left_slow).key_by(key);
    exclusive(l.interval_join(r).between(-2, 3).unwrap())
        .process(|l: &Ev, r: &Ev| (l.0, l.1, r.1))
        .add_sink("collect", out.clone());
    env.execute().unwrap();
    let mut rows = out.take();
    rows.sort();
    rows
}

#[test]
fn joins_within_inclusive_bounds_and_drops_late_records() {
    let got = run_join(&SLOW_LEFT, &FAST_RIGHT, true, |j| j);
    // (1, 12) meets (1, 10) at exactly the lower bound, (2, 5) meets (2, 8) at exactly
    // the upper; (1, 10) is still buffered when (1, 12) comes (its cleanup time is 12).
    let want = vec![
        (1, 4, 5),
        (1, 9, 10),
        (1, 12, 10),
        (1, 12, 13),
        (2, 5, 7),
        (2, 5, 8),
    ];
    assert_eq!(got, want);
}

#[test]
fn exclusive_bounds_drop_the_pairs_on_them() {
    let got = run_join(&SLOW_LEFT, &FAST_RIGHT, true, |j| {
        j.lower_bound_exclusive().upper_bound_exclusive()
    });
    assert_eq!(got, vec![(1, 4, 5), (1, 9, 10), (1, 12, 13), (2, 5, 7)]);
}

const FAST_LEFT: [Ev; 4] = [(1, 4), (1, 9), (2, 5), (1, 12)];
/// Out of order; `(1, 10)` and `(2, 7)` arrive after the watermark 11: late, dropped.
const SLOW_RIGHT: [Ev; 6] = [(1, 5), (2, 8), (99, 11), (1, 10), (1, 13), (2, 7)];

#[test]
fn buffered_left_records_meet_later_right_ones() {
    let got = run_join(&FAST_LEFT, &SLOW_RIGHT, false, |j| j);
    assert_eq!(got, vec![(1, 4, 5), (1, 12, 13), (2, 5, 8)]);
}

#[test]
fn bounds_in_the_wrong_order_are_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let env = env_in("join-bad-bounds", dir.path());
    let a = env.add_source("a", GeneratorSource::new(1)).key_by(|i| *i);
    let b = env.add_source("b", GeneratorSource::new(1)).key_by(|i| *i);
    let Err(e) = a.interval_join(b).between(5, -5) else {
        panic!("between(5, -5) was accepted");
    };
    let msg = e.to_string();
    assert!(
        msg.contains("lower bound (5 ms) is above the upper bound (-5 ms)"),
        "{msg}"
    );
}

#[test]
fn inputs_without_timestamps_are_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let env = env_in("join-no-timestamps", dir.path());
    let a = env.add_source("a", GeneratorSource::new(3)).key_by(|i| *i);
    let b = env.add_source("b", GeneratorSource::new(3)).key_by(|i| *i);
    a.interval_join(b)
        .between(0, 1)
        .unwrap()
        .process(|a: &u64, b: &u64| a + b)
        .add_sink("out", DiscardSink);
    let e = env.execute().unwrap_err().to_string();
    assert!(e.contains("without an event timestamp"), "{e}");
}

// ---- Exactly once and rescaling -----------------------------------------------------------

/// Many keys keep each key's buffers, which every record scans, short.
const KEYS: u64 = 100;
const LOWER: i64 = -30;
const UPPER: i64 = 50;
/// Larger than the jitter and than the lag between two splits a rescaled generator subtask
/// reads alternately (up to two polls of 4 096 records).
const BOUND_MS: u64 = 10_000;
/// The bound when restoring at parallelism 1: one subtask then reads two splits that the
/// checkpoint may have left thousands of records apart (each input's stop waits only for
/// its own subtasks), on top of a poll's worth of lag.
const RESCALE_BOUND_MS: u64 = 30_000;
/// Records per second of each source, over all its subtasks.
const RATE: f64 = 40_000.0;

fn paced(n: u64) -> GeneratorSource {
    common::joins::paced(n, RATE)
}

/// Every pair `(l, r)` of `0..n1` and `0..n2` with equal keys and `ts(r) - ts(l)` within
/// the bounds, summarised per key.
fn truth(n1: u64, n2: u64) -> Vec<Summary> {
    let mut by_key: HashMap<u64, Vec<u64>> = HashMap::new();
    for r in 0..n2 {
        by_key.entry(r % KEYS).or_default().push(r);
    }
    let mut t = Truth::default();
    for l in 0..n1 {
        let lo = ts(l) as i64 + LOWER;
        let hi = ts(l) as i64 + UPPER;
        // Right records whose ts can be in range: ts(r) is within [r, r + 99].
        let first = (lo - 100).max(0) as u64;
        for &r in by_key.get(&(l % KEYS)).into_iter().flatten() {
            if r < first || r as i64 > hi {
                continue;
            }
            let d = ts(r) as i64;
            if lo <= d && d <= hi {
                t.pair(l % KEYS, l, r);
            }
        }
    }
    t.rows()
}

fn run_pairs<S1: SourceFunction<u64>, S2: SourceFunction<u64>>(
    cfg: JobConfig,
    bound_ms: u64,
    left: S1,
    right: S2,
) -> (Vec<Summary>, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let l = timed(&env, "left", left, bound_ms).key_by(|i: &u64| i % KEYS);
    let r = timed(&env, "right", right, bound_ms).key_by(|i: &u64| i % KEYS);
    let pairs = l
        .interval_join(r)
        .between(LOWER, UPPER)
        .unwrap()
        .process(|l: &u64, r: &u64| (*l, *r))
        .uid("join");
    summarise(pairs, KEYS, &out);
    execute_sorted(env, &out)
}

#[test]
fn interval_join_is_exactly_once_under_failures() {
    let (n1, n2) = (40_000, 30_000);
    let rows = under_failures("join-failures", n1 + n2, 4, 5, |cfg| {
        run_pairs(cfg, BOUND_MS, paced(n1), paced(n2))
    });
    assert_eq!(rows, truth(n1, n2));
}

/// The timestamps of the records in a join buffer of the checkpoint at `path`.
fn buffered(path: &std::path::Path, buffer: &str) -> Vec<u64> {
    let raw = weir::inspect::raw_state(path, "join", buffer).unwrap();
    let entries = raw.keyed_entries::<u64, Vec<(u64, Vec<u64>)>>().unwrap();
    let mut out = Vec::new();
    for e in entries {
        for (t, records) in e.value {
            out.extend(records.iter().map(|_| t));
        }
    }
    out
}

#[test]
fn join_buffers_restore_at_another_parallelism_and_are_cleaned_up() {
    let (n1, n2) = (50_000, 50_000);
    // Each subtask stops after 20 000 records (values up to ~40 000), past the bound: the
    // watermark has passed the cleanup time of the older records, not of the newer ones.
    restored_at_3_and_1(
        "join-rescale",
        n1 + n2,
        20_000,
        |cfg, stop| match stop {
            Some(at) => run_pairs(
                cfg,
                RESCALE_BOUND_MS,
                StopMidRun::new(paced(n1), at),
                StopMidRun::new(paced(n2), at),
            ),
            None => run_pairs(cfg, RESCALE_BOUND_MS, paced(n1), paced(n2)),
        },
        |mid| {
            let (left, right) = (buffered(mid, "left-buffer"), buffered(mid, "right-buffer"));
            let newest = left.iter().chain(&right).max().copied().unwrap();
            for (name, b) in [("left", &left), ("right", &right)] {
                assert!(
                    !b.is_empty(),
                    "the {name} buffer is empty: nothing to restore"
                );
                // The watermark lags the newest record by the bound (and by what the slower
                // input and the join's backlog hold back): only the records older than that
                // are gone.
                let oldest = *b.iter().min().unwrap();
                assert!(
                    oldest >= 5_000 && b.len() < 36_000,
                    "the {name} buffer holds {} records from time {oldest} (newest {newest}): \
                     the oldest were not cleaned up",
                    b.len()
                );
            }
        },
        |p, rows| assert_eq!(rows, truth(n1, n2), "parallelism {p}"),
    );
}
