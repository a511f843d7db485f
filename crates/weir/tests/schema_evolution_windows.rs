//! Upgrading a job whose *window* accumulator changed type (issue 26): the engine keeps
//! each open window's accumulator in keyed window state (`window-accumulators`), recorded
//! with its schema like any keyed state. v1 aggregates tumbling event-time windows into
//! `TallyV1` and stops mid-input with every window still open; v2 aggregates into a
//! changed struct. A field added with a default migrates through serde, restored at
//! parallelism 3 and at 1, and every window comes out once with its exact count (proof
//! that the open windows' accumulators were read, migrated and kept); a field whose type
//! changed is refused before anything runs, and `check_savepoint` says both beforehand.
//! The same change with a migration function attached on the windowed stream
//! (`with_version(2).with_migration(|old: TallyV1| …)`, what serde alone cannot do)
//! migrates, restored at parallelism 3, and every window is exact.

mod common;

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use common::recovery::*;
use common::upgrade::{assert_names, row};
use common::{config, StopMidRun};
use weir::prelude::*;
use weir::state::StateValue;

/// Records of the input.
const N: u64 = 60_000;
/// Each of v1's two source subtasks stops after this many records: the watermark is then
/// still below every window's end (as in `windows.rs`), so all windows are open in v1's
/// checkpoint.
const STOP: u64 = 2_000;
/// The name of the engine's window state (`runtime/windows/operator.rs`).
const WINDOW_STATE: &str = "window-accumulators";

/// v1's accumulator: a count and a sum.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct TallyV1 {
    count: u64,
    sum: u64,
}

/// v2: a field added with a default.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct TallyAdded {
    count: u64,
    sum: u64,
    #[serde(default)]
    max: u64,
}

/// v2: a field whose type changed, no migration possible: incompatible.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct TallyRetyped {
    count: String,
    sum: u64,
}

/// What the aggregate needs of its accumulator.
trait Tally: StateValue + Default {
    fn add(&mut self, i: u64);
    fn count(&self) -> u64;
}

impl Tally for TallyV1 {
    fn add(&mut self, i: u64) {
        self.count += 1;
        self.sum += i;
    }
    fn count(&self) -> u64 {
        self.count
    }
}

impl Tally for TallyAdded {
    fn add(&mut self, i: u64) {
        self.count += 1;
        self.sum += i;
        self.max = self.max.max(i);
    }
    fn count(&self) -> u64 {
        self.count
    }
}

impl Tally for TallyRetyped {
    fn add(&mut self, i: u64) {
        let n: u64 = self.count.parse().unwrap_or(0);
        self.count = (n + 1).to_string();
        self.sum += i;
    }
    fn count(&self) -> u64 {
        self.count.parse().unwrap_or(0)
    }
}

/// Counts a window's records in accumulator `A`.
struct Counting<A>(std::marker::PhantomData<fn() -> A>);

impl<A: Tally> AggregateFunction<u64, A, u64> for Counting<A> {
    fn create_accumulator(&self) -> A {
        A::default()
    }
    fn add(&self, i: u64, acc: &mut A) {
        acc.add(i);
    }
    fn get_result(&self, acc: &A) -> u64 {
        acc.count()
    }
}

/// The job with accumulator `A` over `source`, its windows' counts gathered (uid `gather`).
fn job<A: Tally, S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    out: &CollectSink<Gathered<u64>>,
) -> StreamEnvironment {
    job_migrating::<A, S>(cfg, source, None, out)
}

/// [`job`], its accumulators at version 2 with migration function `migrate` when given.
fn job_migrating<A: Tally, S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    migrate: Option<fn(TallyV1) -> A>,
    out: &CollectSink<Gathered<u64>>,
) -> StreamEnvironment {
    let env = StreamEnvironment::new(cfg);
    let windowed = env
        .add_source_with_watermarks("gen", source, strategy(BOUND_MS))
        .uid("gen")
        .key_by(|i: &u64| i % KEYS)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(WINDOW_MS)).unwrap());
    let windowed = match migrate {
        Some(f) => windowed.with_version(2).with_migration(f),
        None => windowed,
    };
    let windows = windowed
        .aggregate_with_window(
            Counting::<A>(Default::default()),
            |k: &u64, w: TimeWindow, count: u64| (*k, w.start, count),
        )
        .uid("windows");
    gather(windows, out);
    env
}

fn cfg(dir: &Path) -> JobConfig {
    let mut c = config("upgrade-windows", dir, 2, CheckpointingMode::ExactlyOnce);
    c.auto_watermark_interval = Duration::from_millis(5);
    c
}

/// v2's environment (accumulator `A`) restoring `mid` at `parallelism`.
fn v2<A: Tally>(
    dir: &Path,
    mid: &Path,
    parallelism: u32,
    out: &CollectSink<Gathered<u64>>,
) -> StreamEnvironment {
    let mut c = cfg(dir);
    c.parallelism = parallelism;
    c.restore = RestoreFrom::Path(mid.to_path_buf());
    c.restart = RestartStrategy::None;
    job::<A, _>(c, GeneratorSource::new(N), out)
}

/// v1 stopped mid-input with every window open; its newest checkpoint.
fn v1_checkpoint(dir: &Path) -> std::path::PathBuf {
    let mut c = cfg(dir);
    c.restart = RestartStrategy::None;
    let out = CollectSink::new();
    let env = job::<TallyV1, _>(c, StopMidRun::new(GeneratorSource::new(N), STOP), &out);
    common::upgrade::stop_mid_run(env, dir, "upgrade-windows")
}

#[test]
fn open_windows_whose_accumulator_gained_a_field_migrate_at_3_and_1_and_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    for p in [3, 1] {
        let out = CollectSink::new();
        let env = v2::<TallyAdded>(dir.path(), &mid, p, &out);
        let report = env.check_savepoint(&mid).unwrap();
        assert!(report.refusals(false).is_empty(), "{}", report.table());
        let w = row(&report, "windows", WINDOW_STATE);
        assert_eq!(w.verdict, "migrates (serde)", "{}", report.table());
        assert!(w.old.as_ref().unwrap().type_name.contains("TallyV1"));
        assert!(w.new.as_ref().unwrap().type_name.contains("TallyAdded"));
        let r = env.execute().unwrap();
        common::assert_resumed_mid_run(&r, &mid, N);
        assert_eq!(
            exactly_once(out.take()),
            counts(N, WINDOW_MS),
            "parallelism {p}: every window once, with v1's part of its count"
        );
    }
}

#[test]
fn an_accumulator_whose_field_changed_type_is_refused_and_check_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    let out = CollectSink::new();
    let env = v2::<TallyRetyped>(dir.path(), &mid, 2, &out);
    let report = env.check_savepoint(&mid).unwrap();
    let w = row(&report, "windows", WINDOW_STATE);
    assert_eq!(w.verdict, "incompatible", "{}", report.table());
    let refusals = report.refusals(false);
    assert_eq!(refusals.len(), 1, "{}", report.table());
    let e = env.execute().unwrap_err().to_string();
    let parts = [
        "operator 'windows'",
        "state 'window-accumulators'",
        "TallyV1",
        "TallyRetyped",
        "--allow-non-restored-state",
        "fresh",
    ];
    assert_names(&e, &parts);
    assert_names(refusals[0], &parts);
    assert!(out.take().is_empty(), "nothing may run");
}

#[test]
fn a_migration_function_on_the_windowed_stream_reads_what_serde_cannot_at_3_and_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    let out = CollectSink::new();
    let mut c = cfg(dir.path());
    c.parallelism = 3;
    c.restore = RestoreFrom::Path(mid.clone());
    c.restart = RestartStrategy::None;
    // `count` changed type: serde cannot read a u64 as a String, the function can.
    let migrate: fn(TallyV1) -> TallyRetyped = |old| TallyRetyped {
        count: old.count.to_string(),
        sum: old.sum,
    };
    let env = job_migrating(c, GeneratorSource::new(N), Some(migrate), &out);
    let report = env.check_savepoint(&mid).unwrap();
    assert!(report.refusals(false).is_empty(), "{}", report.table());
    let w = row(&report, "windows", WINDOW_STATE);
    assert_eq!(
        w.verdict,
        "migrates (migration function)",
        "{}",
        report.table()
    );
    assert!(w.old.as_ref().unwrap().type_name.contains("TallyV1"));
    let new = w.new.as_ref().unwrap();
    assert!(new.type_name.contains("TallyRetyped"), "{}", report.table());
    assert_eq!(new.version, 2, "{}", report.table());
    let r = env.execute().unwrap();
    common::assert_resumed_mid_run(&r, &mid, N);
    assert_eq!(
        exactly_once(out.take()),
        counts(N, WINDOW_MS),
        "every window once, with v1's part of its count read by the migration"
    );
}

#[test]
fn session_windows_refuse_a_migration_function_at_start_naming_the_ways_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.restart = RestartStrategy::None;
    let env = StreamEnvironment::new(c);
    let out = CollectSink::new();
    let migrate: fn(TallyV1) -> TallyRetyped = |old| TallyRetyped {
        count: old.count.to_string(),
        sum: old.sum,
    };
    let windows = env
        .add_source_with_watermarks("gen", GeneratorSource::new(N), strategy(BOUND_MS))
        .uid("gen")
        .key_by(|i: &u64| i % KEYS)
        .window(EventTimeSessionWindows::with_gap(Duration::from_millis(WINDOW_MS)).unwrap())
        .with_migration(migrate)
        .aggregate_with_window(
            Counting::<TallyRetyped>(Default::default()),
            |k: &u64, w: TimeWindow, count: u64| (*k, w.start, count),
        )
        .uid("windows");
    gather(windows, &out);
    let e = env.execute().unwrap_err().to_string();
    assert_names(
        &e,
        &[
            "session windows",
            "map state",
            "serde",
            "--allow-non-restored-state",
        ],
    );
    assert!(out.take().is_empty(), "nothing may run");
}
