//! Upgrading a job whose *map state* or *window accumulators* changed (issue 26), as two
//! builds of one program, under a SIGKILL right after the restore. This test binary
//! re-executes itself as the job; `--state` picks the build: a map state of buckets
//! (`map-v1`, `map-added`: a field added with a default, `map-migrated`: a migration
//! function) or a count over one global window per key under a trigger of its own that
//! fires on every record, its accumulator in the trigger's contents map (`window-v1`,
//! `window-added`, `window-migrated`: `.with_version(2).with_migration(…)` on the
//! windowed stream). Either way the job emits `(key, running count)` per record into a
//! two-phase-commit file sink.
//!
//! Deterministic, whatever the machine's speed: with `--hold-after n` every source subtask
//! reads `n` records in its attempt and then holds (reads nothing, never ends), writing a
//! marker file when it starts holding. v1 holds, and once every subtask's marker is there
//! it is stopped with a savepoint (which so covers exactly the records read). Each v2
//! restores that savepoint at another parallelism and holds in turn; the test waits for the
//! restore's first completed checkpoint (the job cannot have ended: its sources hold),
//! SIGKILLs it, and resumes with `--restore latest` to the end. Every key's committed
//! counts must be exactly 1..=n (every record counted once across v1, the migration, the
//! kill and the resume; a migrated value that lost its history would break the sequence),
//! and the resumed run must have restored v2's checkpoint mid-input.

mod common;

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use weir::connectors::files::LinesWith;
use weir::prelude::*;
use weir::runner::{clap, BoxError, Job};
use weir::state::{Key, StateValue};

use common::held::{wait_until_held, Held};
use common::running::Running;
use common::*;

const CHILD: &str = "WEIR_UPGRADE_KILL_TEST_JOB";

child_job::job_process!(CHILD, "upgrade-kill", build);

const EVENTS: u64 = 60_000;
const KEYS: u64 = 11;
/// A key's records go to bucket `(i / KEYS) % BUCKETS` of its map.
const BUCKETS: u64 = 3;

/// The job's flags.
#[derive(clap::Args)]
struct Args {
    /// Events to generate.
    #[arg(long, default_value_t = EVENTS)]
    events: u64,
    /// Folder for the `key,count` lines.
    #[arg(long, default_value = "out")]
    output: PathBuf,
    /// The build: map-v1, map-added, map-migrated, window-v1, window-added or
    /// window-migrated.
    #[arg(long, default_value = "map-v1")]
    state: String,
    /// Each source subtask reads this many records in this attempt, then holds.
    #[arg(long)]
    hold_after: Option<u64>,
    /// Where a holding source subtask writes its marker (`held-<subtask>`).
    #[arg(long, default_value = "held")]
    marks: PathBuf,
}

fn build(job: &mut Job, args: &Args) -> Result<(), BoxError> {
    let source = Held::new(
        GeneratorSource::new(args.events),
        args.hold_after,
        &args.marks,
    );
    let keyed = job
        .add_source("events", source)
        .uid("events")
        .key_by(key as fn(&u64) -> u64);
    let counts = match args.state.as_str() {
        "map-v1" => keyed.process(MapCounter::<BucketV1>::default()),
        "map-added" => keyed.process(MapCounter::<BucketAdded>::default()),
        "map-migrated" => keyed.process(MapCounter::<BucketRetyped>::default()),
        "window-v1" => counted::<TallyV1>(keyed, None),
        "window-added" => counted::<TallyAdded>(keyed, None),
        "window-migrated" => counted(
            keyed,
            Some(|old: TallyV1| TallyRetyped {
                count: old.count.to_string(),
                label_len: old.label.len() as u64,
            }),
        ),
        other => return Err(format!("no build {other}").into()),
    };
    let line = |r: &(u64, u64), l: &mut String| l.push_str(&format!("{},{}", r.0, r.1));
    let sink = TwoPhaseCommit::new(FileSink::new(&args.output, LinesWith::new(line)));
    counts.uid("count").add_sink("out", sink).uid("out");
    Ok(())
}

fn label(key: u64, bucket: u64) -> String {
    format!("key-{key}-bucket-{bucket}")
}

/// v1's bucket.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct BucketV1 {
    count: u64,
    label: String,
}

/// v2, a field added with a default.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct BucketAdded {
    count: u64,
    label: String,
    #[serde(default)]
    added: u64,
}

/// v2, `count` retyped and `label` replaced by its length: only a function reads v1's.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct BucketRetyped {
    count: String,
    label_len: u64,
}

/// A map value type: a count, and what a migration must carry over.
trait Bucket: StateValue {
    fn fresh(key: u64, bucket: u64) -> Self;
    fn bump(&mut self);
    /// The count, or `u64::MAX` when the value is not what its history says.
    fn checked_count(&self, key: u64, bucket: u64) -> u64;
    fn declare<UK: Key>(states: &mut KeyedStateStore<'_, u64>) -> Result<MapState<UK, Self>> {
        states.map_state("buckets")
    }
}

fn checked(ok: bool, count: u64) -> u64 {
    if ok {
        count
    } else {
        u64::MAX
    }
}

impl Bucket for BucketV1 {
    fn fresh(key: u64, bucket: u64) -> Self {
        BucketV1 {
            count: 0,
            label: label(key, bucket),
        }
    }
    fn bump(&mut self) {
        self.count += 1;
    }
    fn checked_count(&self, key: u64, bucket: u64) -> u64 {
        checked(self.label == label(key, bucket), self.count)
    }
}

impl Bucket for BucketAdded {
    fn fresh(key: u64, bucket: u64) -> Self {
        BucketAdded {
            count: 0,
            label: label(key, bucket),
            added: 0,
        }
    }
    fn bump(&mut self) {
        self.count += 1;
        self.added += 1;
    }
    fn checked_count(&self, key: u64, bucket: u64) -> u64 {
        // Restored values start `added` at its default, 0: then it stays below `count`.
        checked(
            self.label == label(key, bucket) && self.added <= self.count,
            self.count,
        )
    }
}

impl Bucket for BucketRetyped {
    fn fresh(key: u64, bucket: u64) -> Self {
        BucketRetyped {
            count: "0".into(),
            label_len: label(key, bucket).len() as u64,
        }
    }
    fn bump(&mut self) {
        let n: u64 = self.count.parse().unwrap_or(u64::MAX - 1);
        self.count = (n + 1).to_string();
    }
    fn checked_count(&self, key: u64, bucket: u64) -> u64 {
        let n = self.count.parse().unwrap_or(u64::MAX);
        checked(self.label_len == label(key, bucket).len() as u64, n)
    }
    fn declare<UK: Key>(states: &mut KeyedStateStore<'_, u64>) -> Result<MapState<UK, Self>> {
        states
            .with_version(2)
            .with_migration(|old: BucketV1| BucketRetyped {
                count: old.count.to_string(),
                label_len: old.label.len() as u64,
            })
            .map_state("buckets")
    }
}

/// Counts each key's records in buckets of a map state; emits `(key, total)` per record.
#[derive(Clone)]
struct MapCounter<B> {
    state: Option<MapState<u64, B>>,
    _b: PhantomData<fn() -> B>,
}

impl<B> Default for MapCounter<B> {
    fn default() -> Self {
        MapCounter {
            state: None,
            _b: PhantomData,
        }
    }
}

impl<B> CheckpointedFunction for MapCounter<B> {}

impl<B: Bucket> KeyedProcessFunction<u64, u64, (u64, u64)> for MapCounter<B> {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.state = Some(B::declare(states)?);
        Ok(())
    }

    fn process(
        &mut self,
        record: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let key = *ctx.key();
        let bucket = (record / KEYS) % BUCKETS;
        let state = self.state.as_ref().expect("declared in open");
        ctx.map(state)
            .get_mut_or_insert_with(bucket, || B::fresh(key, bucket))
            .bump();
        let total = ctx
            .map(state)
            .entries()
            .map(|(b, v)| v.checked_count(key, *b))
            .fold(0u64, u64::saturating_add);
        out.collect((key, total));
        Ok(())
    }
}

/// v1's window accumulator.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct TallyV1 {
    count: u64,
    label: String,
}

/// v2, a field added with a default.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct TallyAdded {
    count: u64,
    label: String,
    #[serde(default)]
    added: u64,
}

/// v2, `count` retyped: only the windowed stream's migration function reads v1's.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct TallyRetyped {
    count: String,
    label_len: u64,
}

/// What the aggregate needs of its accumulator. The label is the key's, set by the first
/// record (the accumulator is created without the key).
trait Tally: StateValue + Default {
    fn add(&mut self, key: u64);
    /// The count, or `u64::MAX` when the value is not what its history says.
    fn checked_count(&self, key: u64) -> u64;
}

fn tally_label(key: u64) -> String {
    format!("key-{key}")
}

impl Tally for TallyV1 {
    fn add(&mut self, key: u64) {
        self.count += 1;
        self.label = tally_label(key);
    }
    fn checked_count(&self, key: u64) -> u64 {
        checked(self.label == tally_label(key), self.count)
    }
}

impl Tally for TallyAdded {
    fn add(&mut self, key: u64) {
        // A restored accumulator's label must have come over from v1: never rewritten.
        if self.count == 0 {
            self.label = tally_label(key);
        }
        self.count += 1;
        self.added += 1;
    }
    fn checked_count(&self, key: u64) -> u64 {
        checked(
            self.label == tally_label(key) && self.added <= self.count,
            self.count,
        )
    }
}

impl Tally for TallyRetyped {
    fn add(&mut self, key: u64) {
        let n: u64 = self.count.parse().unwrap_or(0);
        if n == 0 {
            self.label_len = tally_label(key).len() as u64;
        }
        self.count = (n + 1).to_string();
    }
    fn checked_count(&self, key: u64) -> u64 {
        let n = self.count.parse().unwrap_or(u64::MAX);
        checked(self.label_len == tally_label(key).len() as u64, n)
    }
}

/// Counts a window's records in accumulator `A`; its result is the accumulator, checked
/// against the key by the window function (an aggregate does not know the key).
struct Counting<A>(PhantomData<fn() -> A>);

impl<A: Tally> AggregateFunction<u64, A, A> for Counting<A> {
    fn create_accumulator(&self) -> A {
        A::default()
    }
    fn add(&self, i: u64, acc: &mut A) {
        acc.add(key(&i));
    }
    fn get_result(&self, acc: &A) -> A {
        acc.clone()
    }
    fn merge(&self, _: A, _: A) -> Option<A> {
        None
    }
}

/// A record's key.
fn key(i: &u64) -> u64 {
    i % KEYS
}

/// One global window per key, firing on every record (a trigger of its own, so the
/// accumulators live in its contents map), emitting `(key, running count)`; the
/// accumulator at version 2 with `migrate` when given.
fn counted<A: Tally>(
    keyed: KeyedStream<u64, u64, fn(&u64) -> u64>,
    migrate: Option<fn(TallyV1) -> A>,
) -> DataStream<(u64, u64)> {
    let windowed = keyed
        .window(GlobalWindows::create())
        .trigger(CountTrigger::of(1).expect("1 is a count"));
    let windowed = match migrate {
        Some(f) => windowed.with_version(2).with_migration(f),
        None => windowed,
    };
    windowed.aggregate_with_window(
        Counting::<A>(PhantomData),
        |k: &u64, _: TimeWindow, acc: A| (*k, acc.checked_count(*k)),
    )
}

/// The job as a command run in `cwd` with `args`.
fn job(cwd: &Path, args: &[&str]) -> Command {
    child_job::command(CHILD, "upgrade-kill", cwd, args)
}

/// Each key's committed counts in `dir` are exactly 1..=n.
fn assert_exact(dir: &Path, what: &str) {
    let got = child_job::committed(dir);
    assert_eq!(got.len() as u64, KEYS, "{what}: keys in {}", dir.display());
    for (k, mut counts) in got {
        counts.sort_unstable();
        let n = expected_count(EVENTS, KEYS, k);
        let want: Vec<u64> = (1..=n).collect();
        assert!(
            counts == want,
            "{what}: key {k}: {} counts, want 1..={n} (first {:?}, last {:?})",
            counts.len(),
            &counts[..counts.len().min(5)],
            counts.last()
        );
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Runs build `v1` at parallelism 2 until both source subtasks hold, stops it with a
/// savepoint (so it covers exactly the records read); returns the savepoint.
fn v1_savepoint(t: &Path, v1: &str) -> String {
    let (ck, out, marks) = (
        format!("ck-{v1}"),
        format!("out-{v1}"),
        format!("held-{v1}"),
    );
    let args = [
        "--state",
        v1,
        "--hold-after",
        "4000",
        "--marks",
        &marks,
        "--parallelism",
        "2",
        "--checkpoint-dir",
        &ck,
        "--checkpoint-interval",
        "100ms",
        "--output",
        &out,
    ];
    let mut running = Running::start(&mut job(t, &args), t.join(format!("{v1}.log")));
    wait_until_held(&mut running.child, &t.join(&marks), 2);
    let stop = run(&mut weir(t, ["stop", "--job", &running.addr]));
    stop.assert_success();
    let (code, log) = running.finish();
    assert_eq!(code, Some(0), "{log}");
    stop.stdout.trim().to_string()
}

/// Build `v2` restores `sp` (after `savepoint check` says `verdict` for `state`) at
/// parallelism 3, holds, is SIGKILLed once its first checkpoint completed, and resumes to
/// the end from that checkpoint: exactly once, and restored mid-input.
fn restores_survives_a_sigkill_and_is_exact(
    t: &Path,
    sp: &str,
    v1: &str,
    v2: &str,
    state: &str,
    verdict: &str,
) {
    let c = run(&mut job(
        t,
        &[
            "savepoint",
            "check",
            sp,
            "--state",
            v2,
            "--output",
            "out-check",
        ],
    ));
    c.assert_success();
    assert!(
        c.stdout
            .lines()
            .any(|l| l.contains(&format!(" {state} ")) && l.contains(verdict)),
        "{v2}: {}",
        c.describe()
    );
    let (out, ck, marks) = (
        format!("out-{v2}"),
        format!("ck-{v2}"),
        format!("held-{v2}"),
    );
    copy_dir(&t.join(format!("out-{v1}")), &t.join(&out));
    let flags = [
        "--state",
        v2,
        "--output",
        &out,
        "--checkpoint-dir",
        &ck,
        "--checkpoint-interval",
        "100ms",
        "--parallelism",
        "3",
    ];
    // Restore the savepoint; the sources hold after a few records, so the job is still
    // running when its first checkpoint (the migrated state) has completed: SIGKILL then.
    let mut first: Vec<&str> = flags.to_vec();
    first.extend(["--restore", sp, "--hold-after", "2000", "--marks", &marks]);
    let mut child = spawn_logged(&mut job(t, &first), &t.join(format!("{v2}.log")));
    wait_for_checkpoints(
        &mut child,
        &t.join(&ck).join("upgrade-kill"),
        1,
        RUN_TIMEOUT,
    );
    sigkill_running(&mut child, v2);
    // Resume from v2's own checkpoint, not holding, to the end.
    let mut resume: Vec<&str> = flags.to_vec();
    resume.extend(["--restore", "latest"]);
    let r = run(&mut job(t, &resume));
    r.assert_success();
    let attempts = assert_resumed(&r, EVENTS);
    let (_, _, from) = attempts[0]
        .restored
        .as_ref()
        .expect("checked by assert_resumed");
    assert!(
        from.starts_with(&ck) || from.starts_with(t.join(&ck)),
        "{v2} resumed from {}, not its own checkpoint\n{}",
        from.display(),
        r.describe()
    );
    assert_exact(&t.join(&out), v2);
}

#[test]
fn map_state_migrations_restore_rescaled_survive_a_sigkill_right_after_and_are_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let sp = v1_savepoint(t, "map-v1");
    for (v2, verdict) in [
        ("map-added", "migrates (serde)"),
        ("map-migrated", "migrates (migration function)"),
    ] {
        restores_survives_a_sigkill_and_is_exact(t, &sp, "map-v1", v2, "buckets", verdict);
    }
}

#[test]
fn window_migrations_under_a_trigger_of_their_own_survive_a_sigkill_right_after_and_are_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let sp = v1_savepoint(t, "window-v1");
    for (v2, verdict) in [
        ("window-added", "migrates (serde)"),
        ("window-migrated", "migrates (migration function)"),
    ] {
        restores_survives_a_sigkill_and_is_exact(
            t,
            &sp,
            "window-v1",
            v2,
            "window-trigger-contents",
            verdict,
        );
    }
}
