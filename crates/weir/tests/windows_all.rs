//! `window_all`: windows over a whole stream, not keyed, at parallelism 1, against
//! hand-computed truth while the rest of the job runs at parallelism 2.

mod common;

use std::time::Duration;

use weir::prelude::*;

/// Numbers `0..n` at time `i` ms from a source at parallelism 2, through `windows`.
fn run<O: weir::state::Data + Ord>(
    name: &str,
    n: u64,
    windows: impl FnOnce(DataStream<u64>) -> DataStream<O>,
) -> Vec<O> {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = JobConfig::new(name);
    cfg.checkpoint_dir = common::checkpoint_dir(dir.path());
    cfg.parallelism = 2;
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let strategy =
        WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|i: &u64, _| *i);
    let numbers = env.add_source_with_watermarks("numbers", GeneratorSource::new(n), strategy);
    windows(numbers).add_sink("collect", out.clone());
    env.execute().unwrap();
    let mut rows = out.take();
    rows.sort();
    rows
}

#[test]
fn tumbling_window_all_sums_the_whole_stream() {
    let rows = run("window-all", 25, |s| {
        s.window_all(TumblingEventTimeWindows::of(Duration::from_millis(10)).unwrap())
            .reduce_with_window(|a, b| a + b, |_, w, sum| (w.start, w.end, sum))
    });
    // 0 + … + 9, 10 + … + 19, 20 + … + 24.
    assert_eq!(rows, [(0, 10, 45), (10, 20, 145), (20, 30, 110)]);
}

#[test]
fn window_all_with_a_process_function_sees_every_record() {
    let rows = run("window-all-process", 20, |s| {
        s.window_all(
            SlidingEventTimeWindows::of(Duration::from_millis(10), Duration::from_millis(5))
                .unwrap(),
        )
        .process(
            |_: &(), w: TimeWindow, e: &[u64], out: &mut Collector<'_, (u64, u64, usize)>| {
                out.collect((w.start, w.end, e.len()))
            },
        )
    });
    // Windows [-5, 5) (start reported 0), [0, 10), [5, 15), [10, 20), [15, 25).
    assert_eq!(
        rows,
        [
            (0, 5, 5),
            (0, 10, 10),
            (5, 15, 10),
            (10, 20, 10),
            (15, 25, 5)
        ]
    );
}
