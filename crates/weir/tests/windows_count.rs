//! Count windows: windows of a number of records per key, against hand-computed truth,
//! and exactly once under injected failures.

mod common;

use std::collections::HashMap;

use common::recovery::under_failures;
use weir::prelude::*;

/// The numbers `0..10` keyed by parity through count windows of `size` records (sliding
/// by `slide` if given), summed; the sums sorted.
fn sums_by_hand(name: &str, size: u64, slide: Option<u64>) -> Vec<u64> {
    let dir = tempfile::tempdir().unwrap();
    let env = common::env_in(name, dir.path());
    let out = CollectSink::new();
    let keyed = env
        .add_source("numbers", GeneratorSource::new(10))
        .key_by(|i: &u64| i % 2);
    let sums = match slide {
        None => keyed.count_window(size).unwrap().reduce(|a, b| a + b),
        Some(s) => keyed
            .count_window_sliding(size, s)
            .unwrap()
            .reduce(|a, b| a + b),
    };
    sums.add_sink("collect", out.clone());
    env.execute().unwrap();
    let mut sums = out.take();
    sums.sort();
    sums
}

#[test]
fn count_windows_by_hand() {
    let sums = sums_by_hand("count-windows", 3, None);
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
    let sums = sums_by_hand("sliding-count-windows", 3, Some(2));
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
            out.collect((k, t.0, t.1));
        }
        Ok(())
    }
}

/// `n` paced records `(i % KEYS, i)` through count windows of [`SIZE`] records (sliding
/// by `slide` if given, read by one source subtask then), summed per window, and the sums
/// per key in [`Totals`]: `key → (windows, total of their sums)`.
fn run_totals(
    cfg: JobConfig,
    n: u64,
    slide: Option<u64>,
) -> (HashMap<u64, (u64, u64)>, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    fn one_subtask<T: weir::state::Data>(s: DataStream<T>, one: bool) -> DataStream<T> {
        if one {
            s.set_parallelism(1)
        } else {
            s
        }
    }
    let one = slide.is_some();
    let gen = env.add_source(
        "gen",
        GeneratorSource::new(n).with_rate(Some(common::paced(100_000.0))),
    );
    let keyed = one_subtask(one_subtask(gen, one).uid("gen").map(|i| (i % KEYS, i)), one)
        .uid("pairs")
        .key_by(|r: &(u64, u64)| r.0);
    let windows = match slide {
        None => keyed
            .count_window(SIZE)
            .unwrap()
            .reduce(|a, b| (a.0, a.1 + b.1)),
        Some(s) => keyed
            .count_window_sliding(SIZE, s)
            .unwrap()
            .reduce(|a, b| (a.0, a.1 + b.1)),
    };
    windows
        .uid("windows")
        .key_by(|r: &(u64, u64)| r.0)
        .process(Totals::default())
        .uid("totals")
        .add_sink("collect", out.clone())
        .uid("sink");
    let r = env.execute();
    let got = out
        .take()
        .into_iter()
        .map(|(k, w, s)| (k, (w, s)))
        .collect();
    (got, r)
}

#[test]
fn count_windows_are_exactly_once_under_failures() {
    let n = 60_000;
    // Which records share a window depends on how the two sources interleave; how many
    // windows each key fills, and the total of their sums, do not.
    let got = under_failures("count-windows-failures", n, 3, 9, |cfg| {
        run_totals(cfg, n, None)
    });
    let mut want: HashMap<u64, (u64, u64)> = HashMap::new();
    for i in 0..n {
        want.entry(i % KEYS).or_default().1 += i;
    }
    for w in want.values_mut() {
        w.0 = n / KEYS / SIZE;
    }
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
    let got = under_failures("sliding-count-failures", n, 3, 9, |cfg| {
        run_totals(cfg, n, Some(SLIDE))
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
    assert_eq!(got, want);
}
