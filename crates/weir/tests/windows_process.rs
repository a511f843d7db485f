//! Process-window functions: all the records of a window with its bounds, against
//! hand-computed truth for tumbling windows (with a late firing and late data) and merged
//! sessions; and exactly once under injected failures.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::env_in;
use common::marked::{marked, without_markers, Ev};
use common::recovery::*;
use weir::prelude::*;

/// `(key, start, end, values)`.
type Row = (u64, u64, u64, Vec<u64>);

/// Emits the window's values, sorted; for a window of 3 records or more also their sum.
fn values(k: &u64, w: TimeWindow, elements: &[Ev], out: &mut Collector<'_, Row>) {
    let mut v: Vec<u64> = elements.iter().map(|e| e.2).collect();
    v.sort();
    if v.len() >= 3 {
        out.collect((*k, w.start, w.end, vec![v.iter().sum()]));
    }
    out.collect((*k, w.start, w.end, v));
}

/// Runs `events` in arrival order (parallelism 1) through `assigner` with lateness 5 ms
/// and [`values`]; returns the rows and late records without the markers'.
fn run<A: WindowAssigner<Ev>>(events: &'static [Ev], assigner: A) -> (Vec<Row>, Vec<Ev>) {
    let dir = tempfile::tempdir().unwrap();
    let env = env_in("windows-process", dir.path());
    let (results, late) = (CollectSink::new(), CollectSink::new());
    let out = marked(&env, events)
        .key_by(|e: &Ev| e.0)
        .window(assigner)
        .allowed_lateness(Duration::from_millis(5))
        .side_output_late_data()
        .process(values);
    out.late_data.add_sink("late", late.clone());
    out.results.add_sink("results", results.clone());
    env.execute().unwrap();
    (without_markers(&results), without_markers(&late))
}

/// Watermarks 10 and 15.
const TUMBLING: [Ev; 8] = [
    (1, 1, 1),
    (1, 8, 2),
    (2, 3, 5),
    (99, 10, 0),
    (1, 5, 10),
    (1, 12, 100),
    (99, 15, 0),
    (1, 6, 1000),
];

#[test]
fn tumbling_windows_with_a_process_function_by_hand() {
    let ms = Duration::from_millis;
    let (rows, late) = run(&TUMBLING, TumblingEventTimeWindows::of(ms(10)).unwrap());
    // Key 1, [0, 10): fires at watermark 10 with 1 and 2, again for (1, 5, 10) with three
    // records (and their sum); cleaned up at 15 (9 + 5 <= 15), so (1, 6, 1000) is late.
    assert_eq!(
        rows,
        [
            (1, 0, 10, vec![1, 2]),
            (1, 0, 10, vec![1, 2, 10]),
            (1, 0, 10, vec![13]),
            (1, 10, 20, vec![100]),
            (2, 0, 10, vec![5]),
        ]
    );
    assert_eq!(late, [(1, 6, 1000)]);
}

const SESSIONS: [Ev; 5] = [(1, 0, 1), (1, 20, 4), (1, 12, 8), (2, 3, 7), (1, 16, 16)];

#[test]
fn merged_sessions_hand_all_their_records_to_the_process_function() {
    let gap = EventTimeSessionWindows::with_gap(Duration::from_millis(5)).unwrap();
    let (rows, late) = run(&SESSIONS, gap);
    // (1, 16, 16) bridges [12, 17) and [20, 25): one session of three records.
    assert_eq!(
        rows,
        [
            (1, 0, 5, vec![1]),
            (1, 12, 25, vec![4, 8, 16]),
            (1, 12, 25, vec![28]),
            (2, 3, 8, vec![7]),
        ]
    );
    assert!(late.is_empty());
}

// ---- Exactly once ------------------------------------------------------------------

#[test]
fn process_windows_are_exactly_once_under_failures() {
    let n = 60_000;
    let rows = under_failures("windows-process-failures", n, 3, 9, |cfg| {
        let env = StreamEnvironment::new(cfg);
        let out = CollectSink::new();
        let source = GeneratorSource::new(n).with_rate(Some(common::paced(100_000.0)));
        let windows = env
            .add_source_with_watermarks("gen", source, strategy(BOUND_MS))
            .uid("gen")
            .key_by(|i: &u64| i % KEYS)
            .window(TumblingEventTimeWindows::of(Duration::from_millis(WINDOW_MS)).unwrap())
            .process(
                |k: &u64,
                 w: TimeWindow,
                 e: &[u64],
                 out: &mut Collector<'_, (u64, u64, (u64, u64))>| {
                    out.collect((*k, w.start, (e.len() as u64, e.iter().sum())))
                },
            )
            .uid("windows");
        gather(windows, &out);
        let r = env.execute();
        (out.take(), r)
    });
    let mut want: HashMap<(u64, u64), (u64, u64)> = HashMap::new();
    for i in 0..n {
        let w = want
            .entry((i % KEYS, ts(i) / WINDOW_MS * WINDOW_MS))
            .or_default();
        w.0 += 1;
        w.1 += i;
    }
    assert_eq!(exactly_once(rows), want);
}
