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
//! migrates, restored at parallelism 3, and every window is exact — for fixed-size
//! windows, sessions, and windows under a trigger of their own (both kept in map state),
//! and for count windows (`count_window(n).with_migration(…)`). Sliding count windows keep
//! records, not an accumulator: their function migrates each kept record of a changed
//! record type, and every firing is exact.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use common::recovery::*;
use common::upgrade::{assert_refused_by_check_and_run, row, Upgrade};
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
    /// Two sessions' accumulators as one (a record joined them).
    fn merge(self, other: Self) -> Self;
}

impl Tally for TallyV1 {
    fn add(&mut self, i: u64) {
        self.count += 1;
        self.sum += i;
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn merge(self, o: Self) -> Self {
        TallyV1 {
            count: self.count + o.count,
            sum: self.sum + o.sum,
        }
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
    fn merge(self, o: Self) -> Self {
        TallyAdded {
            count: self.count + o.count,
            sum: self.sum + o.sum,
            max: self.max.max(o.max),
        }
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
    fn merge(self, o: Self) -> Self {
        TallyRetyped {
            count: (self.count() + o.count()).to_string(),
            sum: self.sum + o.sum,
        }
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
    fn merge(&self, a: A, b: A) -> Option<A> {
        Some(a.merge(b))
    }
}

/// The window operator a job runs: fixed-size event-time windows under their default
/// trigger (window state), the same windows under a trigger of their own (their contents
/// in a map state), or sessions (a map state of session end → (start, accumulator)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fixed,
    Triggered,
    Sessions,
}

impl Kind {
    /// The keyed state the operator keeps its accumulators in.
    fn state(self) -> &'static str {
        match self {
            Kind::Fixed => WINDOW_STATE,
            Kind::Triggered => "window-trigger-contents",
            Kind::Sessions => "window-sessions",
        }
    }

    /// What every run of the job must emit, each window once: per (key, window start)
    /// its count of records.
    fn expected(self) -> HashMap<(u64, u64), u64> {
        match self {
            Kind::Fixed | Kind::Triggered => counts(N, WINDOW_MS),
            Kind::Sessions => sessions(N),
        }
    }
}

/// Each key's records are at most ~110 ms apart, far within the session gap (`WINDOW_MS`):
/// one session per key, from its earliest timestamp, holding all of its records.
fn sessions(n: u64) -> HashMap<(u64, u64), u64> {
    let mut start = HashMap::new();
    for i in 0..n {
        let s = start.entry(i % KEYS).or_insert(u64::MAX);
        *s = (*s).min(ts(i));
    }
    start.into_iter().map(|(k, s)| ((k, s), n / KEYS)).collect()
}

/// The job with accumulator `A` over `source`, its windows' counts gathered (uid `gather`).
fn job<A: Tally, S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    out: &CollectSink<Gathered<u64>>,
) -> StreamEnvironment {
    job_migrating::<A, S>(Kind::Fixed, cfg, source, None, out)
}

/// [`job`] with windows of `kind`, its accumulators at version 2 with migration function
/// `migrate` when given.
fn job_migrating<A: Tally, S: SourceFunction<u64>>(
    kind: Kind,
    cfg: JobConfig,
    source: S,
    migrate: Option<fn(TallyV1) -> A>,
    out: &CollectSink<Gathered<u64>>,
) -> StreamEnvironment {
    let env = StreamEnvironment::new(cfg);
    let keyed = env
        .add_source_with_watermarks("gen", source, strategy(BOUND_MS))
        .uid("gen")
        .key_by(|i: &u64| i % KEYS);
    // One chain per kind (each windowed stream is a type of its own).
    macro_rules! aggregated {
        ($windowed:expr) => {{
            let windowed = $windowed;
            let windowed = match migrate {
                Some(f) => windowed.with_version(2).with_migration(f),
                None => windowed,
            };
            windowed.aggregate_with_window(
                Counting::<A>(Default::default()),
                |k: &u64, w: TimeWindow, count: u64| (*k, w.start, count),
            )
        }};
    }
    let fixed = || TumblingEventTimeWindows::of(Duration::from_millis(WINDOW_MS)).unwrap();
    let windows = match kind {
        Kind::Fixed => aggregated!(keyed.window(fixed())),
        Kind::Triggered => aggregated!(keyed.window(fixed()).trigger(EventTimeTrigger::create())),
        Kind::Sessions => aggregated!(keyed
            .window(EventTimeSessionWindows::with_gap(Duration::from_millis(WINDOW_MS)).unwrap())),
    };
    gather(windows.uid("windows"), out);
    env
}

fn cfg(dir: &Path) -> JobConfig {
    let mut c = config("upgrade-windows", dir, 2, CheckpointingMode::ExactlyOnce);
    c.auto_watermark_interval = Duration::from_millis(5);
    c
}

/// v2's environment (accumulator `A`, fixed-size windows) restoring v1's checkpoint of
/// `up` at `parallelism`.
fn v2<A: Tally>(
    up: &Upgrade,
    parallelism: u32,
    out: &CollectSink<Gathered<u64>>,
) -> StreamEnvironment {
    let mut c = up.v2();
    c.parallelism = parallelism;
    job::<A, _>(c, GeneratorSource::new(N), out)
}

/// v1 with windows of `kind` stopped mid-input, every window still open.
fn upgrade(kind: Kind) -> Upgrade {
    Upgrade::after_v1(cfg, |c| {
        let source = StopMidRun::new(GeneratorSource::new(N), STOP);
        job_migrating::<TallyV1, _>(kind, c, source, None, &CollectSink::new())
    })
}

#[test]
fn open_windows_whose_accumulator_gained_a_field_migrate_at_3_and_1_and_are_exact() {
    let up = upgrade(Kind::Fixed);
    let mid = &up.mid;
    for p in [3, 1] {
        let out = CollectSink::new();
        let env = v2::<TallyAdded>(&up, p, &out);
        let report = env.check_savepoint(mid).unwrap();
        assert!(report.refusals(false).is_empty(), "{}", report.table());
        let w = row(&report, "windows", WINDOW_STATE);
        assert_eq!(w.verdict, "migrates (serde)", "{}", report.table());
        assert!(w.old.as_ref().unwrap().type_name.contains("TallyV1"));
        assert!(w.new.as_ref().unwrap().type_name.contains("TallyAdded"));
        let r = env.execute().unwrap();
        common::assert_resumed_mid_run(&r, mid, N);
        assert_eq!(
            exactly_once(out.take()),
            counts(N, WINDOW_MS),
            "parallelism {p}: every window once, with v1's part of its count"
        );
    }
}

#[test]
fn an_accumulator_whose_field_changed_type_is_refused_and_check_says_so() {
    let up = upgrade(Kind::Fixed);
    let out = CollectSink::new();
    let env = v2::<TallyRetyped>(&up, 2, &out);
    let report = env.check_savepoint(&up.mid).unwrap();
    let w = row(&report, "windows", WINDOW_STATE);
    assert_eq!(w.verdict, "incompatible", "{}", report.table());
    let parts = [
        "operator 'windows'",
        "state 'window-accumulators'",
        "TallyV1",
        "TallyRetyped",
        "--allow-non-restored-state",
        "fresh",
    ];
    assert_refused_by_check_and_run(env, &up.mid, false, &out, &parts);
}

/// v1 with windows of `kind` stopped mid-input; v2 restores it at parallelism 3 with
/// `count` retyped, which serde cannot read and the windowed stream's migration function
/// can: `savepoint check` says so first, and every window comes out once, exact.
fn a_migration_function_migrates_open_windows_of(kind: Kind) {
    let up = upgrade(kind);
    let mid = &up.mid;
    let out = CollectSink::new();
    let mut c = up.v2();
    c.parallelism = 3;
    // `count` changed type: serde cannot read a u64 as a String, the function can.
    let migrate: fn(TallyV1) -> TallyRetyped = |old| TallyRetyped {
        count: old.count.to_string(),
        sum: old.sum,
    };
    let env = job_migrating(kind, c, GeneratorSource::new(N), Some(migrate), &out);
    let report = env.check_savepoint(mid).unwrap();
    assert!(report.refusals(false).is_empty(), "{}", report.table());
    let w = row(&report, "windows", kind.state());
    assert_eq!(
        w.verdict,
        "migrates (migration function)",
        "{kind:?}: {}",
        report.table()
    );
    assert!(w.old.as_ref().unwrap().type_name.contains("TallyV1"));
    let new = w.new.as_ref().unwrap();
    assert!(new.type_name.contains("TallyRetyped"), "{}", report.table());
    assert_eq!(new.version, 2, "{}", report.table());
    let r = env.execute().unwrap();
    common::assert_resumed_mid_run(&r, mid, N);
    assert_eq!(
        exactly_once(out.take()),
        kind.expected(),
        "{kind:?}: every window once, with v1's part of its count read by the migration"
    );
}

#[test]
fn a_migration_function_on_the_windowed_stream_reads_what_serde_cannot_at_3_and_is_exact() {
    a_migration_function_migrates_open_windows_of(Kind::Fixed);
}

#[test]
fn open_sessions_migrate_through_the_windowed_streams_function_at_3_and_are_exact() {
    a_migration_function_migrates_open_windows_of(Kind::Sessions);
}

#[test]
fn windows_under_a_trigger_of_their_own_migrate_through_the_function_at_3_and_are_exact() {
    a_migration_function_migrates_open_windows_of(Kind::Triggered);
}

/// Count windows (`count_window(SIZE)`) aggregating into accumulator `A`, restoring when
/// `cfg` says so: each window emits its accumulator's count of records.
fn count_windows<A: Tally, S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    migrate: Option<fn(TallyV1) -> A>,
    out: &CollectSink<u64>,
) -> StreamEnvironment {
    let env = StreamEnvironment::new(cfg);
    let windowed = env
        .add_source("gen", source)
        .uid("gen")
        .key_by(|i: &u64| i % KEYS)
        .count_window(COUNT_SIZE)
        .unwrap();
    let windowed = match migrate {
        Some(f) => windowed.with_version(2).with_migration(f),
        None => windowed,
    };
    windowed
        .aggregate(Counting::<A>(Default::default()))
        .uid("windows")
        .add_sink("collect", out.clone())
        .uid("sink");
    env
}

/// Records per count window: v1 stops with every key's first window still open (each key
/// has ~`2 * STOP / KEYS` records by then), and each key's `N / KEYS` records fill whole
/// windows.
const COUNT_SIZE: u64 = 1_000;

#[test]
fn open_count_windows_migrate_through_a_function_at_3_and_every_window_is_whole() {
    let v1_out = CollectSink::new();
    let up = Upgrade::after_v1(cfg, |c| {
        let source = StopMidRun::new(GeneratorSource::new(N), STOP);
        count_windows::<TallyV1, _>(c, source, None, &v1_out)
    });
    let mid = &up.mid;
    assert!(
        v1_out.take().is_empty(),
        "v1 stops before any window is full"
    );
    let mut c = up.v2();
    c.parallelism = 3;
    let migrate: fn(TallyV1) -> TallyRetyped = |old| TallyRetyped {
        count: old.count.to_string(),
        sum: old.sum,
    };
    let out = CollectSink::new();
    let env = count_windows(c, GeneratorSource::new(N), Some(migrate), &out);
    let report = env.check_savepoint(mid).unwrap();
    assert!(report.refusals(false).is_empty(), "{}", report.table());
    let w = row(&report, "windows", "count-window");
    assert_eq!(
        w.verdict,
        "migrates (migration function)",
        "{}",
        report.table()
    );
    assert_eq!(w.new.as_ref().unwrap().version, 2, "{}", report.table());
    let r = env.execute().unwrap();
    common::assert_resumed_mid_run(&r, mid, N);
    // A window open at the stop counts v1's records only if the migration read them.
    assert_eq!(
        out.take(),
        vec![COUNT_SIZE; (N / COUNT_SIZE) as usize],
        "every window whole, once"
    );
}

/// v2's record type (v1's is a bare `u64`): what a sliding count window keeps.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Reading {
    value: u64,
}

/// Counts a window's records, whatever their type.
struct CountRecords;

impl<R> AggregateFunction<R, u64, u64> for CountRecords {
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: R, acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// A sliding count window fires every `SLIDE` records of a key over its last `COUNT_SIZE`.
const SLIDE: u64 = 500;

/// A sliding count window keeps records, not an accumulator: when the record type changes
/// (`u64` → `Reading`), its migration function maps each kept record. v1 stops before any
/// key fired; v2, at parallelism 3, fires every window over exactly the records it must
/// have, v1's migrated ones included.
#[test]
fn sliding_count_windows_migrate_their_kept_records_through_a_function_at_3() {
    let v1_out = CollectSink::new();
    let up = Upgrade::after_v1(cfg, |c| {
        let env = StreamEnvironment::new(c);
        env.add_source("gen", StopMidRun::new(GeneratorSource::new(N), STOP))
            .uid("gen")
            .key_by(|i: &u64| i % KEYS)
            .count_window_sliding(COUNT_SIZE, SLIDE)
            .unwrap()
            .aggregate(CountRecords)
            .uid("windows")
            .add_sink("collect", v1_out.clone())
            .uid("sink");
        env
    });
    let mid = &up.mid;
    assert!(v1_out.take().is_empty(), "v1 stops before any key fired");
    let mut c = up.v2();
    c.parallelism = 3;
    let env = StreamEnvironment::new(c);
    let out = CollectSink::new();
    env.add_source("gen", GeneratorSource::new(N))
        .uid("gen")
        .map(|value: u64| Reading { value })
        .key_by(|r: &Reading| r.value % KEYS)
        .count_window_sliding(COUNT_SIZE, SLIDE)
        .unwrap()
        .with_version(2)
        .with_migration(|value: u64| Reading { value })
        .aggregate(CountRecords)
        .uid("windows")
        .add_sink("collect", out.clone())
        .uid("sink");
    let report = env.check_savepoint(mid).unwrap();
    assert!(report.refusals(false).is_empty(), "{}", report.table());
    let w = row(&report, "windows", "sliding-count-window");
    assert_eq!(
        w.verdict,
        "migrates (migration function)",
        "{}",
        report.table()
    );
    let r = env.execute().unwrap();
    common::assert_resumed_mid_run(&r, mid, N);
    // Per key: a first firing over SLIDE records, then every SLIDE records a full window.
    let per_key = N / KEYS / SLIDE;
    let mut want = vec![SLIDE; KEYS as usize];
    want.extend(vec![COUNT_SIZE; (KEYS * (per_key - 1)) as usize]);
    let mut got = out.take();
    got.sort();
    assert_eq!(
        got, want,
        "every firing over exactly the records it must have"
    );
}
