//! Allowed lateness and late data of event-time windows: late firings, cleanup at the
//! window's end plus the lateness, and the late-data side output, against hand-computed
//! truth; and exactly once under injected failures with windows kept for their lateness.

mod common;

use std::time::Duration;

use common::env_in;
use common::marked::{marked, without_markers, Ev};
use common::recovery::*;
use weir::prelude::*;

/// Window results `(key, start, end, sum)` and late records, both without the markers'.
type Rows = (Vec<(u64, u64, u64, u64)>, Vec<Ev>);

/// Runs `events` in arrival order (parallelism 1) through tumbling or sliding windows
/// summing the values, with `lateness`, and with the late data kept if `side_output`.
fn run(events: &'static [Ev], slide: Option<u64>, lateness: u64, side_output: bool) -> Rows {
    let dir = tempfile::tempdir().unwrap();
    let env = env_in("windows-late", dir.path());
    let (results, late) = (CollectSink::new(), CollectSink::new());
    let keyed = marked(&env, events).key_by(|e: &Ev| e.0);
    let sum = |a: Ev, b: Ev| (a.0, a.1, a.2 + b.2);
    let row = |k: &u64, w: TimeWindow, e: Ev| (*k, w.start, w.end, e.2);
    let lateness = Duration::from_millis(lateness);
    macro_rules! windowed {
        ($assigner:expr) => {{
            let w = keyed.window($assigner).allowed_lateness(lateness);
            if side_output {
                let out = w.side_output_late_data().reduce_with_window(sum, row);
                out.late_data.add_sink("late", late.clone());
                out.results
            } else {
                w.reduce_with_window(sum, row)
            }
        }};
    }
    let ms = Duration::from_millis;
    let rows = match slide {
        None => windowed!(TumblingEventTimeWindows::of(ms(10)).unwrap()),
        Some(s) => windowed!(SlidingEventTimeWindows::of(ms(10), ms(s)).unwrap()),
    };
    rows.add_sink("results", results.clone());
    env.execute().unwrap();
    (without_markers(&results), without_markers(&late))
}

/// Tumbling windows of 10 ms; watermarks 10, 14 and 22 from the markers.
const TUMBLING: [Ev; 12] = [
    (1, 1, 1),
    (1, 8, 2),
    (99, 10, 0),
    (1, 5, 10),
    (1, 12, 100),
    (99, 14, 0),
    (1, 9, 1000),
    (2, 7, 7),
    (1, 19, 10000),
    (99, 22, 0),
    (1, 15, 3),
    (1, 21, 4),
];

#[test]
fn late_firings_update_the_result_until_the_lateness_ends() {
    // Lateness 5: [0, 10) fires at watermark 10 (1 + 2), again for (1, 5, 10) at once
    // (13), and is cleaned up at watermark 14, so (1, 9, 1000) and (2, 7, 7) are late
    // data. [10, 20) fires at 22 (100 + 10 000), again for (1, 15, 3); [20, 30) at the end.
    let (rows, late) = run(&TUMBLING, None, 5, true);
    assert_eq!(
        rows,
        [
            (1, 0, 10, 3),
            (1, 0, 10, 13),
            (1, 10, 20, 10100),
            (1, 10, 20, 10103),
            (1, 20, 30, 4),
        ]
    );
    assert_eq!(late, [(1, 9, 1000), (2, 7, 7)]);
    // Without the side output the same results come out and the late records are dropped.
    let (dropped, late) = run(&TUMBLING, None, 5, false);
    assert_eq!(dropped, rows);
    assert!(late.is_empty());
}

#[test]
fn without_lateness_every_record_after_the_firing_is_late_data() {
    let (rows, late) = run(&TUMBLING, None, 0, true);
    assert_eq!(rows, [(1, 0, 10, 3), (1, 10, 20, 10100), (1, 20, 30, 4)]);
    assert_eq!(late, [(1, 5, 10), (1, 9, 1000), (1, 15, 3), (2, 7, 7)]);
}

/// Sliding windows of 10 ms every 5; watermarks 8, 11 and 12.
const SLIDING: [Ev; 9] = [
    (1, 2, 1),
    (99, 8, 0),
    (1, 3, 10),
    (99, 11, 0),
    (1, 4, 100),
    (1, 7, 1000),
    (99, 12, 0),
    (1, 6, 5),
    (1, 1, 7),
];

#[test]
fn sliding_windows_late_for_some_windows_only() {
    // Lateness 3. [-5, 5) (reported as [0, 5)) fires at watermark 8 and is cleaned up at
    // the same watermark (4 + 3 <= 8): (1, 3, 10) goes to [0, 10) only, on time.
    // [0, 10) fires at 11 (11), then late for (1, 4, 100) (111) and (1, 7, 1000) (1111),
    // which also opens [5, 15) on time; cleaned up at 12, so (1, 6, 5) goes to [5, 15)
    // only and (1, 1, 7), late for both its windows, is late data.
    let (rows, late) = run(&SLIDING, Some(5), 3, true);
    assert_eq!(
        rows,
        [
            (1, 0, 5, 1),
            (1, 0, 10, 11),
            (1, 0, 10, 111),
            (1, 0, 10, 1111),
            (1, 5, 15, 1005),
        ]
    );
    assert_eq!(late, [(1, 1, 7)]);
}

// ---- Exactly once ------------------------------------------------------------------

#[test]
fn windows_kept_for_their_lateness_are_exactly_once_under_failures() {
    let n = 100_000;
    let late = CollectSink::new();
    let rows = under_failures("windows-late-failures", n, 4, 9, |cfg| {
        let env = StreamEnvironment::new(cfg);
        let results = CollectSink::new();
        let source = GeneratorSource::new(n).with_rate(Some(common::paced(100_000.0)));
        // Windows stay three windows long after they fire: open and fired-but-kept windows
        // are both in the checkpoints the failures restore.
        let out = env
            .add_source_with_watermarks("gen", source, strategy(BOUND_MS))
            .uid("gen")
            .key_by(|i: &u64| i % KEYS)
            .window(TumblingEventTimeWindows::of(Duration::from_millis(WINDOW_MS)).unwrap())
            .allowed_lateness(Duration::from_millis(3 * WINDOW_MS))
            .side_output_late_data()
            .aggregate_with_window(Count, |k: &u64, w: TimeWindow, c: u64| (*k, w.start, c))
            .uid("windows");
        out.late_data.add_sink("late", late.clone()).uid("late");
        gather(out.results, &results);
        let r = env.execute();
        (results.take(), r)
    });
    assert_eq!(exactly_once(rows), counts(n, WINDOW_MS));
    assert!(late.take().is_empty(), "no record is later than the bound");
}
