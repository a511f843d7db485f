//! Count windows: windows of a number of records per key, against hand-computed truth,
//! and exactly once under injected failures.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::config;
use weir::prelude::*;

#[test]
fn count_windows_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = JobConfig::new("count-windows");
    cfg.checkpoint_dir = common::checkpoint_dir(dir.path());
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    env.add_source("numbers", GeneratorSource::new(10))
        .key_by(|i: &u64| i % 2)
        .count_window(3)
        .unwrap()
        .reduce(|a, b| a + b)
        .add_sink("collect", out.clone());
    env.execute().unwrap();
    let mut sums = out.take();
    sums.sort();
    // Key 0: 0 + 2 + 4, then 6 and 8 never fill a window; key 1: 1 + 3 + 5, then 7, 9.
    assert_eq!(sums, [6, 9]);
}

#[test]
fn a_count_window_of_zero_records_is_a_clear_error() {
    let env = StreamEnvironment::new(JobConfig::new("count-zero"));
    let e = env
        .add_source("numbers", GeneratorSource::new(10))
        .key_by(|i: &u64| i % 2)
        .count_window(0)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("count window size is 0"), "{e}");
}

/// Flink's `countWindow(size, slide)`: every `slide` records of a key, its last `size`.
#[test]
fn sliding_count_windows_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = JobConfig::new("sliding-count-windows");
    cfg.checkpoint_dir = common::checkpoint_dir(dir.path());
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    env.add_source("numbers", GeneratorSource::new(10))
        .key_by(|i: &u64| i % 2)
        .count_window_sliding(3, 2)
        .unwrap()
        .reduce(|a, b| a + b)
        .add_sink("collect", out.clone());
    env.execute().unwrap();
    let mut sums = out.take();
    sums.sort();
    // Key 0 (0, 2, 4, 6, 8): after 2 records 0 + 2, after 4 the last three 2 + 4 + 6; 8
    // alone does not fire. Key 1 (1, 3, 5, 7, 9): 1 + 3, then 3 + 5 + 7.
    assert_eq!(sums, [2, 4, 12, 15]);
}

#[test]
fn bad_sliding_count_windows_are_clear_errors() {
    let env = StreamEnvironment::new(JobConfig::new("sliding-count-bad"));
    let numbers = env.add_source("numbers", GeneratorSource::new(10));
    let err = |size, slide| {
        numbers
            .clone()
            .key_by(|i: &u64| i % 2)
            .count_window_sliding(size, slide)
            .err()
            .unwrap()
            .to_string()
    };
    assert!(err(0, 1).contains("count window size is 0"));
    let e = err(3, 0);
    assert!(e.contains("slide is 0"), "{e}");
    let e = err(3, 4);
    assert!(e.contains("slide 4 is larger than its size 3"), "{e}");
}

const KEYS: u64 = 10;
const SIZE: u64 = 100;

/// Per key: `(windows, total of their sums)`, in keyed state, emitted at the end of input.
#[derive(Clone, Default)]
struct Totals {
    state: Option<ValueState<(u64, u64)>>,
}

impl CheckpointedFunction for Totals {}

impl KeyedProcessFunction<u64, (u64, u64), (u64, u64, u64)> for Totals {
    fn open(&mut self, s: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.state = Some(s.value_state("totals")?);
        Ok(())
    }
    fn process(
        &mut self,
        (_, sum): (u64, u64),
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, (u64, u64, u64)>,
    ) -> Result<()> {
        let t = ctx.get_mut_or_insert_with(self.state.unwrap(), || (0, 0));
        t.0 += 1;
        t.1 += sum;
        Ok(())
    }
    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64, u64)>,
    ) -> Result<()> {
        for (k, t) in ctx.entries(self.state.unwrap()) {
            out.collect((*k, t.0, t.1));
        }
        Ok(())
    }
}

#[test]
fn count_windows_are_exactly_once_under_failures() {
    let dir = tempfile::tempdir().unwrap();
    let n = 60_000;
    let mut cfg = config(
        "count-windows-failures",
        dir.path(),
        2,
        CheckpointingMode::ExactlyOnce,
    );
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(3, 9, n / 4));
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    // Which records share a window depends on how the two sources interleave; how many
    // windows each key fills, and the total of their sums, do not.
    env.add_source(
        "gen",
        GeneratorSource::new(n).with_rate(Some(common::paced(100_000.0))),
    )
    .uid("gen")
    .map(|i| (i % KEYS, i))
    .uid("pairs")
    .key_by(|r: &(u64, u64)| r.0)
    .count_window(SIZE)
    .unwrap()
    .reduce(|a, b| (a.0, a.1 + b.1))
    .uid("windows")
    .key_by(|r: &(u64, u64)| r.0)
    .process(Totals::default())
    .uid("totals")
    .add_sink("collect", out.clone())
    .uid("sink");
    let r = env.execute().unwrap();
    assert_eq!(r.injected_failures.unwrap().0, 3);
    weir::testing::assert_resumed(&r, n);
    let mut want: HashMap<u64, (u64, u64)> = HashMap::new();
    for i in 0..n {
        want.entry(i % KEYS).or_default().1 += i;
    }
    for w in want.values_mut() {
        w.0 = n / KEYS / SIZE;
    }
    let got: HashMap<u64, (u64, u64)> = out
        .take()
        .into_iter()
        .map(|(k, w, s)| (k, (w, s)))
        .collect();
    assert_eq!(got, want);
}

/// Sliding count windows keep the last records of every key and the count since the last
/// firing in keyed state: exactly once under failures only if both survive each restore.
/// One source subtask, so that each key's records arrive in order and every window's
/// content is known.
#[test]
fn sliding_count_windows_are_exactly_once_under_failures() {
    const SLIDE: u64 = 7;
    let n = 30_000;
    let rows = common::recovery::under_failures("sliding-count-failures", n, 3, 9, |cfg| {
        let env = StreamEnvironment::new(cfg);
        let out = CollectSink::new();
        env.add_source(
            "gen",
            GeneratorSource::new(n).with_rate(Some(common::paced(100_000.0))),
        )
        .set_parallelism(1)
        .uid("gen")
        .map(|i| (i % KEYS, i))
        .set_parallelism(1)
        .uid("pairs")
        .key_by(|r: &(u64, u64)| r.0)
        .count_window_sliding(SIZE, SLIDE)
        .unwrap()
        .reduce(|a, b| (a.0, a.1 + b.1))
        .uid("windows")
        .key_by(|r: &(u64, u64)| r.0)
        .process(Totals::default())
        .uid("totals")
        .add_sink("collect", out.clone())
        .uid("sink");
        let r = env.execute();
        (out.take(), r)
    });
    // Key k's j-th record is k + KEYS * j; after every SLIDE-th, the last SIZE fire.
    let mut want: HashMap<u64, (u64, u64)> = HashMap::new();
    for k in 0..KEYS {
        let records: Vec<u64> = (0..n / KEYS).map(|j| k + KEYS * j).collect();
        let w = want.entry(k).or_default();
        for fired in (SLIDE as usize..=records.len()).step_by(SLIDE as usize) {
            w.0 += 1;
            w.1 += records[fired.saturating_sub(SIZE as usize)..fired]
                .iter()
                .sum::<u64>();
        }
    }
    let got: HashMap<u64, (u64, u64)> = rows.into_iter().map(|(k, w, s)| (k, (w, s))).collect();
    assert_eq!(got, want);
}
