//! Triggers on windows: count, purging, continuous and custom triggers on tumbling,
//! session and global windows against hand-computed truth; exactly once under injected
//! failures; and the triggers' state restored at another parallelism.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::marked::{marked, Ev};
use common::recovery::*;
use common::{env_in, StopMidRun};
use weir::prelude::*;

/// The input, in arrival order. `(1, 5, 64)` arrives after the watermark 10: late for the
/// event-time windows `[0, 10)`, in time for `[0, 20)`.
const EVENTS: [Ev; 12] = [
    (1, 1, 1),
    (1, 2, 2),
    (1, 3, 4),
    (2, 4, 10),
    (1, 12, 8),
    (2, 5, 20),
    (1, 14, 32),
    (99, 10, 0),
    (1, 5, 64),
    (1, 15, 128),
    (2, 18, 256),
    (1, 16, 512),
];

/// Runs the events at parallelism 1 (arrival order kept) through `windows` and returns the
/// rows, sorted.
fn run_events<O: weir::state::Data + Ord + std::fmt::Debug>(
    name: &str,
    windows: impl FnOnce(DataStream<Ev>) -> DataStream<O>,
) -> Result<Vec<O>> {
    let dir = tempfile::tempdir().unwrap();
    let env = env_in(name, dir.path());
    let out = CollectSink::new();
    let events = marked(&env, &EVENTS).filter(|e| e.0 != 99);
    windows(events).add_sink("collect", out.clone());
    env.execute()?;
    let mut rows = out.take();
    rows.sort();
    Ok(rows)
}

type Row = (u64, u64, u64, u64);

fn sums(
    name: &str,
    windowed: impl FnOnce(DataStream<Ev>) -> DataStream<Row>,
) -> Vec<(u64, u64, u64, u64)> {
    run_events(name, windowed).unwrap()
}

fn sum(k: &u64, w: TimeWindow, e: Ev) -> Row {
    (*k, w.start, w.end, e.2)
}

fn add(a: Ev, b: Ev) -> Ev {
    (a.0, a.1.max(b.1), a.2 + b.2)
}

/// The sums per key of the tumbling windows of `size_ms` fired by `trigger`.
fn tumbling_sums<TR: Trigger<Ev>>(name: &str, size_ms: u64, trigger: TR) -> Vec<Row> {
    sums(name, |s| {
        s.key_by(|e: &Ev| e.0)
            .window(TumblingEventTimeWindows::of(Duration::from_millis(size_ms)).unwrap())
            .trigger(trigger)
            .reduce_with_window(add, sum)
    })
}

#[test]
fn count_trigger_on_tumbling_windows_by_hand() {
    let rows = tumbling_sums("count-trigger", 10, CountTrigger::of(2).unwrap());
    // Key 1, [0, 10): 1 + 2 fires; 4 waits, and the window is cleaned up unfired at the
    // watermark 10; (1, 5, 64) is late. [10, 20): 8 + 32, then 128 + 512 fires with all
    // four (a count trigger does not purge). Key 2, [0, 10): 10 + 20; [10, 20): 256 waits.
    assert_eq!(
        rows,
        [
            (1, 0, 10, 3),
            (1, 10, 20, 40),
            (1, 10, 20, 680),
            (2, 0, 10, 30)
        ]
    );
    let rows = tumbling_sums(
        "purging-count-trigger",
        10,
        PurgingTrigger::of(CountTrigger::of(2).unwrap()),
    );
    assert_eq!(
        rows,
        [
            (1, 0, 10, 3),
            (1, 10, 20, 40),
            (1, 10, 20, 640),
            (2, 0, 10, 30)
        ]
    );
}

#[test]
fn purging_count_trigger_on_global_windows_of_the_whole_stream() {
    let rows = sums("global-count", |s| {
        s.window_all(GlobalWindows::create())
            .trigger(PurgingTrigger::of(CountTrigger::of(4).unwrap()))
            .reduce_with_window(add, |_, w, e| (0, w.start, w.end, e.2))
    });
    // In arrival order: 1 2 4 10 | 8 20 32 64 | 128 256 512 (three never fire).
    let end = TimeWindow::GLOBAL.end;
    assert_eq!(rows, [(0, 0, end, 17), (0, 0, end, 124)]);
}

#[test]
fn global_windows_without_a_trigger_never_fire() {
    let rows = sums("global-never", |s| {
        s.key_by(|e: &Ev| e.0)
            .window(GlobalWindows::create())
            .reduce_with_window(add, sum)
    });
    assert_eq!(rows, []);
}

#[test]
fn count_trigger_on_merging_sessions_by_hand() {
    let rows = sums("session-count", |s| {
        s.key_by(|e: &Ev| e.0)
            .window(EventTimeSessionWindows::with_gap(Duration::from_millis(5)).unwrap())
            .trigger(CountTrigger::of(3).unwrap())
            .reduce_with_window(add, sum)
    });
    // Key 1: 1, 2, 3 make [1, 8) with 3 records: fires 7. 12 and 14 make [12, 19) (2
    // records); the watermark 10 cleans [1, 8) up; (1, 5, 64) would open [5, 10), already
    // past: late. 15 joins [12, 20): the merged count is 3, fires 8 + 32 + 128; 16 counts
    // 1 again. Key 2: [4, 10) with 2 records is cleaned up unfired; 18 counts 1.
    assert_eq!(rows, [(1, 1, 8, 7), (1, 12, 20, 168)]);
}

/// Where each result lands in event time: per key, the start of the 1 ms window that
/// holds its timestamp, and how many results landed there (a result behind the watermark
/// fires its window again, with the count so far: allowed lateness).
fn result_times(windowed: DataStream<Row>) -> DataStream<(u64, u64, u64)> {
    windowed
        .map(|r: Row| (r.0, 1u64))
        .key_by(|x: &(u64, u64)| x.0)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(1)).unwrap())
        .allowed_lateness(Duration::from_millis(20))
        .reduce_with_window(|a, b| (a.0, a.1 + b.1), |k, w, v| (*k, w.start, v.1))
}

/// Every firing of a window carries the window's last millisecond as its timestamp, as in
/// Flink's window operator, whatever fired it: a continuous trigger's early firings at 5,
/// 10 and 15 land downstream where the on-time one does (19 for `[0, 20)`), and so does a
/// late firing under allowed lateness (9 for `[0, 10)`, fired again by the late record
/// `(1, 5, 64)` at watermark 10), not at the timer's or the late record's time.
#[test]
fn every_firing_carries_the_windows_last_millisecond() {
    let every_5 = ContinuousEventTimeTrigger::of(Duration::from_millis(5)).unwrap();
    let rows = run_events("firing-times-continuous", |s| {
        result_times(
            s.key_by(|e: &Ev| e.0)
                .window(TumblingEventTimeWindows::of(Duration::from_millis(20)).unwrap())
                .trigger(every_5)
                .reduce_with_window(add, sum),
        )
    })
    .unwrap();
    assert_eq!(rows, [(1, 19, 4), (2, 19, 4)]);
    let rows = run_events("firing-times-late", |s| {
        result_times(
            s.key_by(|e: &Ev| e.0)
                .window(TumblingEventTimeWindows::of(Duration::from_millis(10)).unwrap())
                .allowed_lateness(Duration::from_millis(10))
                .reduce_with_window(add, sum),
        )
    })
    .unwrap();
    // Key 1: [0, 10) on time, then late (behind the watermark downstream too, so its 1 ms
    // window fires again with both), [10, 20) at 19; key 2: one result each.
    assert_eq!(
        rows,
        [(1, 9, 1), (1, 9, 2), (1, 19, 1), (2, 9, 1), (2, 19, 1)]
    );
}

#[test]
fn continuous_event_time_trigger_by_hand() {
    let every_5 = || ContinuousEventTimeTrigger::of(Duration::from_millis(5)).unwrap();
    let rows = tumbling_sums("continuous", 20, every_5());
    // Key 1, [0, 20): the watermark 10 fires at 5 and at 10 (1+2+4+8+32 = 47); 64, 128
    // and 512 come; the end of input fires at 15 and at the window's end, 19.
    // Key 2: 10 + 20 at 5 and 10; 256 comes; 286 at 15 and 19.
    assert_eq!(
        rows,
        [
            (1, 0, 20, 47),
            (1, 0, 20, 47),
            (1, 0, 20, 751),
            (1, 0, 20, 751),
            (2, 0, 20, 30),
            (2, 0, 20, 30),
            (2, 0, 20, 286),
            (2, 0, 20, 286),
        ]
    );
    let rows = tumbling_sums("continuous-purging", 20, PurgingTrigger::of(every_5()));
    // Purging: a firing emits what came since the last one, and nothing if nothing did.
    assert_eq!(
        rows,
        [
            (1, 0, 20, 47),
            (1, 0, 20, 704),
            (2, 0, 20, 30),
            (2, 0, 20, 256)
        ]
    );
}

/// A user's trigger: fires on records whose value is odd, and cannot merge.
#[derive(Clone)]
struct OnOdd;

impl Trigger<Ev> for OnOdd {
    type State = ();
    fn on_element<C: TriggerContext>(
        &self,
        e: &Ev,
        _: u64,
        _: TimeWindow,
        _: &mut (),
        _: &mut C,
    ) -> TriggerResult {
        if e.2 % 2 == 1 {
            TriggerResult::FireAndPurge
        } else {
            TriggerResult::Continue
        }
    }
    fn on_event_time<C: TriggerContext>(
        &self,
        _: u64,
        _: TimeWindow,
        _: &mut (),
        _: &mut C,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
    fn on_processing_time<C: TriggerContext>(
        &self,
        _: u64,
        _: TimeWindow,
        _: &mut (),
        _: &mut C,
    ) -> TriggerResult {
        TriggerResult::Continue
    }
}

#[test]
fn a_users_trigger_runs_and_one_that_cannot_merge_is_refused_on_sessions() {
    let rows = sums("custom", |s| {
        s.window_all(GlobalWindows::create())
            .trigger(OnOdd)
            .reduce_with_window(add, |_, _, e| (0, 0, 0, e.2))
    });
    assert_eq!(rows, [(0, 0, 0, 1)], "only the first value is odd");
    let e = run_events("custom-sessions", |s| {
        s.key_by(|e: &Ev| e.0)
            .window(EventTimeSessionWindows::with_gap(Duration::from_millis(5)).unwrap())
            .trigger(OnOdd)
            .reduce_with_window(add, sum)
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("cannot merge") && e.contains("can_merge"), "{e}");
}

#[test]
fn bad_trigger_arguments_are_clear_errors() {
    let e = CountTrigger::of(0).unwrap_err().to_string();
    assert!(e.contains("CountTrigger::of(0)"), "{e}");
    let e = ContinuousEventTimeTrigger::of(Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert!(e.contains("interval is 0"), "{e}");
    let e = ContinuousProcessingTimeTrigger::of(Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert!(e.contains("interval is 0"), "{e}");
}

/// The count trigger's n: windows hold about 100 records per key, so most leave a rest
/// that never fires.
const EVERY: u64 = 7;

/// Counts records per key and tumbling window under `trigger`, gathered: per window, the
/// count of each firing.
fn run_counts<S: SourceFunction<u64>, TR: Trigger<u64>>(
    cfg: JobConfig,
    source: S,
    window_ms: u64,
    trigger: TR,
) -> (Vec<Gathered<u64>>, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let windows = env
        .add_source_with_watermarks("gen", source, strategy(BOUND_MS))
        .uid("gen")
        .key_by(|i: &u64| i % KEYS)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(window_ms)).unwrap())
        .trigger(trigger)
        .aggregate_with_window(Count, |k: &u64, w: TimeWindow, count: u64| {
            (*k, w.start, count)
        })
        .uid("windows");
    gather(windows, &out);
    let r = env.execute();
    (out.take(), r)
}

/// `(key, window start) → (firings, records emitted over them)`.
fn firings(rows: Vec<Gathered<u64>>) -> HashMap<(u64, u64), (u64, u64)> {
    let got: HashMap<_, _> = rows
        .iter()
        .map(|(k, s, counts)| ((*k, *s), (counts.len() as u64, counts.iter().sum())))
        .collect();
    assert_eq!(got.len(), rows.len(), "a window gathered twice");
    got
}

/// Under a purging count trigger of [`EVERY`], each window fires `count / EVERY` times with
/// `EVERY` records each, whatever the order the records arrived in — but only if its count
/// since the last firing survived every restore.
fn assert_purging_counts(rows: Vec<Gathered<u64>>, n: u64) {
    let mut want = HashMap::new();
    for ((k, start), c) in counts(n, WINDOW_MS) {
        if c >= EVERY {
            want.insert((k, start), (c / EVERY, c / EVERY * EVERY));
        }
    }
    assert_eq!(firings(rows), want);
}

#[test]
fn count_triggers_are_exactly_once_under_failures() {
    let n = 100_000;
    let rows = under_failures("trigger-failures", n, 4, 11, |cfg| {
        let source = GeneratorSource::new(n).with_rate(Some(100_000.0));
        let trigger = PurgingTrigger::of(CountTrigger::of(EVERY).unwrap());
        run_counts(cfg, source, WINDOW_MS, trigger)
    });
    assert_purging_counts(rows, n);
}

#[test]
fn continuous_triggers_are_exactly_once_under_failures() {
    let n = 100_000;
    // Purging: the firings of a window emit each of its records exactly once, in however
    // many firings the watermarks made. Windows longer than the out-of-orderness bound, so
    // that early firings see part of them.
    let window_ms = 30_000;
    let rows = under_failures("continuous-failures", n, 3, 5, |cfg| {
        let source = GeneratorSource::new(n).with_rate(Some(100_000.0));
        let every = ContinuousEventTimeTrigger::of(Duration::from_millis(2_000)).unwrap();
        run_counts(cfg, source, window_ms, PurgingTrigger::of(every))
    });
    let got = firings(rows);
    assert!(
        got.values().any(|&(f, _)| f > 1),
        "no window fired early: the continuous trigger did nothing"
    );
    let totals: HashMap<_, _> = got.into_iter().map(|(w, (_, t))| (w, t)).collect();
    assert_eq!(totals, counts(n, window_ms));
}

#[test]
fn trigger_state_survives_a_restore_at_another_parallelism() {
    let n = 60_000;
    let trigger = || PurgingTrigger::of(CountTrigger::of(EVERY).unwrap());
    // Stops once a checkpoint after 2 000 records per subtask completed: every window is
    // open in it, most with a count short of a firing.
    restored_at_3_and_1(
        "trigger-rescale",
        n,
        2_000,
        |cfg, stop| match stop {
            Some(at) => run_counts(
                cfg,
                StopMidRun::new(GeneratorSource::new(n), at),
                WINDOW_MS,
                trigger(),
            ),
            None => run_counts(cfg, GeneratorSource::new(n), WINDOW_MS, trigger()),
        },
        |mid| {
            // `weir state ls` lists the triggers' state beside the windows' contents.
            let described = weir::inspect::describe(mid).unwrap();
            let windows = described.operators.iter().find(|o| o.uid == "windows");
            let names: Vec<&str> = windows
                .unwrap()
                .states
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            assert!(
                names.contains(&"window-triggers") && names.contains(&"window-trigger-contents"),
                "states of the window operator: {names:?}"
            );
        },
        |_, rows| assert_purging_counts(rows, n),
    );
}
