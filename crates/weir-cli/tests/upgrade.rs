//! Upgrading a job (issue 26) with two builds of one program: this test binary re-executes
//! itself as the job, whose `--state` flag picks the state type — `v1`, or a v2 that adds
//! a field with a default, removes one, renames one with an alias, needs a migration
//! function, changes a field's type (unmigratable) or changes the key type. v1 is stopped
//! with a savepoint; `savepoint check` judges each v2 against it beforehand (exit 0, or 1
//! when a run would refuse); each migrating v2 restores it at another parallelism, is
//! SIGKILLed after its first checkpoint, and resumes with `--restore latest` to an exactly
//! once output: every key's running counts, committed by a two-phase-commit file sink
//! across v1 and v2, are exactly 1..=n. Both v1 and the killed v2 run sources that hold
//! after a few records (`common::held`): v1's savepoint is taken once they all hold, and
//! v2 cannot end before the kill, on any machine. Map-state and window migrations under
//! the same kill are in `upgrade_kill.rs`.

mod common;

use std::marker::PhantomData;
use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};
use weir::connectors::files::LinesWith;
use weir::prelude::*;
use weir::runner::{clap, BoxError, Job};
use weir::state::StateValue;

use common::held::{wait_until_held, Held};
use common::running::Running;
use common::*;

const CHILD: &str = "WEIR_UPGRADE_TEST_JOB";

child_job::job_process!(CHILD, "upgrade", build);

const EVENTS: u64 = 200_000;
const KEYS: u64 = 13;

/// The job's flags.
#[derive(clap::Args)]
struct Args {
    /// Events to generate.
    #[arg(long, default_value_t = EVENTS)]
    events: u64,
    /// Each source subtask reads this many records in this attempt, then holds.
    #[arg(long)]
    hold_after: Option<u64>,
    /// Where a holding source subtask writes its marker (`held-<subtask>`).
    #[arg(long, default_value = "held")]
    marks: std::path::PathBuf,
    /// Folder for the `key,count` lines.
    #[arg(long, default_value = "out")]
    output: std::path::PathBuf,
    /// The build: v1, added, removed, renamed, migrated, retyped or string-key.
    #[arg(long, default_value = "v1")]
    state: String,
}

fn build(job: &mut Job, args: &Args) -> Result<(), BoxError> {
    let events = job
        .add_source(
            "events",
            Held::new(
                GeneratorSource::new(args.events),
                args.hold_after,
                &args.marks,
            ),
        )
        .uid("events");
    let line = |r: &(u64, u64), l: &mut String| l.push_str(&format!("{},{}", r.0, r.1));
    let sink = TwoPhaseCommit::new(FileSink::new(&args.output, LinesWith::new(line)));
    if args.state == "string-key" {
        let counts = events
            .key_by(|i: &u64| (i % KEYS).to_string())
            .process(StringKeyed::default());
        counts.uid("count").add_sink("out", sink).uid("out");
        return Ok(());
    }
    let keyed = events.key_by(|i: &u64| i % KEYS);
    let counts = match args.state.as_str() {
        "v1" => keyed.process(Counter::<AccV1>::default()),
        "added" => keyed.process(Counter::<AccAdded>::default()),
        "removed" => keyed.process(Counter::<AccRemoved>::default()),
        "renamed" => keyed.process(Counter::<AccRenamed>::default()),
        "migrated" => keyed.process(Counter::<AccMigrated>::default()),
        "retyped" => keyed.process(Counter::<AccRetyped>::default()),
        other => return Err(format!("no build {other}").into()),
    };
    counts.uid("count").add_sink("out", sink).uid("out");
    job.expect_records(args.events * 2);
    Ok(())
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccV1 {
    count: u64,
    label: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccAdded {
    count: u64,
    label: String,
    #[serde(default)]
    added: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccRemoved {
    count: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccRenamed {
    #[serde(alias = "count")]
    seen: u64,
    label: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccMigrated {
    count: u64,
    label_len: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccRetyped {
    count: String,
}

/// A state type: a count per key, plus what a migration must carry over.
trait Acc: StateValue {
    fn fresh(key: u64) -> Self;
    /// Counts one more record; the count, or `u64::MAX` if the value is inconsistent.
    fn bump(&mut self, key: u64) -> u64;
    fn declare(states: &mut KeyedStateStore<'_, u64>) -> Result<ValueState<Self>> {
        states.value_state("acc")
    }
}

fn label(key: u64) -> String {
    format!("key-{key}")
}

fn checked(ok: bool, count: u64) -> u64 {
    if ok {
        count
    } else {
        u64::MAX
    }
}

impl Acc for AccV1 {
    fn fresh(key: u64) -> Self {
        AccV1 {
            count: 0,
            label: label(key),
        }
    }
    fn bump(&mut self, key: u64) -> u64 {
        self.count += 1;
        checked(self.label == label(key), self.count)
    }
}

impl Acc for AccAdded {
    fn fresh(key: u64) -> Self {
        AccAdded {
            count: 0,
            label: label(key),
            added: 0,
        }
    }
    fn bump(&mut self, key: u64) -> u64 {
        self.count += 1;
        self.added += 1;
        checked(
            self.label == label(key) && self.added <= self.count,
            self.count,
        )
    }
}

impl Acc for AccRemoved {
    fn fresh(_: u64) -> Self {
        AccRemoved { count: 0 }
    }
    fn bump(&mut self, _: u64) -> u64 {
        self.count += 1;
        self.count
    }
}

impl Acc for AccRenamed {
    fn fresh(key: u64) -> Self {
        AccRenamed {
            seen: 0,
            label: label(key),
        }
    }
    fn bump(&mut self, key: u64) -> u64 {
        self.seen += 1;
        checked(self.label == label(key), self.seen)
    }
}

impl Acc for AccMigrated {
    fn fresh(key: u64) -> Self {
        AccMigrated {
            count: 0,
            label_len: label(key).len() as u64,
        }
    }
    fn bump(&mut self, key: u64) -> u64 {
        self.count += 1;
        checked(self.label_len == label(key).len() as u64, self.count)
    }
    fn declare(states: &mut KeyedStateStore<'_, u64>) -> Result<ValueState<Self>> {
        states
            .with_version(2)
            .with_migration(|old: AccV1| AccMigrated {
                count: old.count,
                label_len: old.label.len() as u64,
            })
            .value_state("acc")
    }
}

impl Acc for AccRetyped {
    fn fresh(_: u64) -> Self {
        AccRetyped { count: "0".into() }
    }
    fn bump(&mut self, _: u64) -> u64 {
        let n = self.count.parse::<u64>().unwrap_or(u64::MAX - 1) + 1;
        self.count = n.to_string();
        n
    }
}

/// Emits `(key, running count)` for every record.
#[derive(Clone)]
struct Counter<A> {
    state: Option<ValueState<A>>,
    _a: PhantomData<fn() -> A>,
}

impl<A> Default for Counter<A> {
    fn default() -> Self {
        Counter {
            state: None,
            _a: PhantomData,
        }
    }
}

impl<A> CheckpointedFunction for Counter<A> {}

impl<A: Acc> KeyedProcessFunction<u64, u64, (u64, u64)> for Counter<A> {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.state = Some(A::declare(states)?);
        Ok(())
    }

    fn process(
        &mut self,
        _: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let state = self.state.expect("declared in open");
        let key = *ctx.key();
        let n = ctx
            .get_mut_or_insert_with(state, || A::fresh(key))
            .bump(key);
        out.collect((key, n));
        Ok(())
    }
}

/// v1's state under a `String` key.
#[derive(Clone, Default)]
struct StringKeyed {
    state: Option<ValueState<AccV1>>,
}

impl CheckpointedFunction for StringKeyed {}

impl KeyedProcessFunction<String, u64, (u64, u64)> for StringKeyed {
    fn open(&mut self, states: &mut KeyedStateStore<'_, String>) -> Result<()> {
        self.state = Some(states.value_state("acc")?);
        Ok(())
    }

    fn process(
        &mut self,
        _: u64,
        _: &mut KeyedContext<'_, String>,
        _: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        Ok(())
    }
}

/// The job as a command run in `cwd` with `args`.
fn job(cwd: &Path, args: &[&str]) -> Command {
    child_job::command(CHILD, "upgrade", cwd, args)
}

/// Each key's committed counts are exactly 1..=n: every event counted once, across v1's
/// savepoint, the migration, a SIGKILL and the resume, and every migrated value consistent.
fn assert_exact(dir: &Path) {
    let got = child_job::committed(dir);
    assert_eq!(got.len() as u64, KEYS, "keys in {}", dir.display());
    for (k, mut counts) in got {
        counts.sort_unstable();
        let n = expected_count(EVENTS, KEYS, k);
        let want: Vec<u64> = (1..=n).collect();
        assert!(
            counts == want,
            "key {k}: {} counts, want 1..={n} (first {:?})",
            counts.len(),
            &counts[..counts.len().min(5)]
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

/// Runs v1 until both source subtasks hold, stops it with a savepoint (which so covers
/// exactly the records read); returns the savepoint.
fn v1_savepoint(t: &Path) -> String {
    let args = [
        "--state",
        "v1",
        "--hold-after",
        "20000",
        "--marks",
        "held-v1",
        "--parallelism",
        "2",
        "--checkpoint-dir",
        "ck-v1",
        "--checkpoint-interval",
        "100ms",
        "--output",
        "out-v1",
    ];
    let mut running = Running::start(&mut job(t, &args), t.join("v1.log"));
    wait_until_held(&mut running.child, &t.join("held-v1"), 2);
    let stop = run(&mut weir(t, ["stop", "--job", &running.addr]));
    stop.assert_success();
    let (code, log) = running.finish();
    assert_eq!(code, Some(0), "{log}");
    stop.stdout.trim().to_string()
}

/// `savepoint check` of build `state` against `sp`: its run.
fn check(t: &Path, sp: &str, state: &str) -> Run {
    run(&mut job(
        t,
        &[
            "savepoint",
            "check",
            sp,
            "--state",
            state,
            "--output",
            "out-check",
        ],
    ))
}

#[test]
fn each_migrating_build_checks_restores_rescaled_survives_a_sigkill_and_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let sp = v1_savepoint(t);
    for (state, verdict) in [
        ("added", "migrates (serde)"),
        ("removed", "migrates (serde)"),
        ("renamed", "migrates (serde)"),
        ("migrated", "migrates (migration function)"),
    ] {
        let c = check(t, &sp, state);
        c.assert_success();
        assert!(
            c.stdout
                .lines()
                .any(|l| l.contains(" acc ") && l.contains(verdict)),
            "{state}: {}",
            c.describe()
        );
        let out = format!("out-{state}");
        let ck = format!("ck-{state}");
        copy_dir(&t.join("out-v1"), &t.join(&out));
        let flags = [
            "--state",
            state,
            "--output",
            &out,
            "--checkpoint-dir",
            &ck,
            "--checkpoint-interval",
            "100ms",
            "--parallelism",
            "3",
        ];
        // Restore the savepoint; the sources hold after a few records, so the job still
        // runs when its first checkpoint completed: SIGKILL then.
        let marks = format!("held-{state}");
        let mut first: Vec<&str> = flags.to_vec();
        first.extend(["--restore", &sp, "--hold-after", "10000", "--marks", &marks]);
        let mut child = spawn_logged(&mut job(t, &first), &t.join(format!("{state}.log")));
        wait_for_checkpoints(&mut child, &t.join(&ck).join("upgrade"), 1, RUN_TIMEOUT);
        sigkill_running(&mut child, state);
        // Resume from v2's own checkpoint, unthrottled, to the end.
        let mut resume: Vec<&str> = flags.to_vec();
        resume.extend(["--restore", "latest"]);
        let r = run(&mut job(t, &resume));
        r.assert_success();
        assert_resumed(&r, EVENTS);
        assert_exact(&t.join(&out));
    }
}

#[test]
fn an_unmigratable_change_and_a_key_type_change_are_refused_and_check_says_so_first() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let sp = v1_savepoint(t);
    let wanted = [
        (
            "retyped",
            vec![
                "operator 'count', state 'acc'",
                "AccV1",
                "AccRetyped",
                "--allow-non-restored-state",
                "with_migration",
            ],
        ),
        (
            "string-key",
            vec![
                "operator 'count'",
                "key type changed",
                "alloc::string::String",
            ],
        ),
    ];
    for (state, needles) in wanted {
        let c = check(t, &sp, state);
        assert_eq!(c.code(), Some(1), "{state}: {}", c.describe());
        assert!(c.stdout.contains("incompatible"), "{}", c.describe());
        for n in &needles {
            assert!(c.stdout.contains(n), "{state}: '{n}' in {}", c.describe());
        }
        let out = format!("out-{state}");
        let r = run(&mut job(
            t,
            &[
                "--state",
                state,
                "--restore",
                &sp,
                "--output",
                &out,
                "--checkpoint-dir",
                "ck-x",
            ],
        ));
        assert_clean_error(&r, 1, &needles);
        assert!(!t.join(&out).exists(), "the refused run published output");
    }
}

#[test]
fn savepoint_check_names_a_bad_path_and_a_missing_one() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let r = run(&mut job(t, &["savepoint", "check", "no-such-savepoint"]));
    assert_clean_error(&r, 1, &["no-such-savepoint"]);
    let r = run(&mut job(t, &["savepoint", "check"]));
    assert_clean_error(&r, 2, &["savepoint check PATH"]);
    let r = run(&mut weir(t, ["savepoint", "check", "nowhere"]));
    assert_clean_error(&r, 2, &["weir savepoint check PATH JOB"]);
}

#[test]
fn weir_savepoint_check_holds_a_checkpoint_against_a_built_in_job() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let ck = checkpoint_arg(&t.join("ck"));
    let first = [
        "run",
        "keyed-count",
        "--events",
        "20000",
        "--keys",
        "7",
        "--checkpoint-dir",
        &ck,
        "--checkpoint-interval",
        "10ms",
        "--output",
        "out",
    ];
    run(&mut weir(t, first)).assert_success();
    let job_dir = checkpoint_dir(&t.join("ck")).join("keyed-count");
    let id = *completed_checkpoints(&t.join("ck/keyed-count"))
        .last()
        .expect("a checkpoint");
    let chk = job_dir.join(format!("chk-{id}"));
    let chk = chk.to_string_lossy();
    let same = run(&mut weir(
        t,
        ["savepoint", "check", &chk, "keyed-count", "--keys", "7"],
    ));
    same.assert_success();
    assert!(
        same.stdout.contains("restorable as is"),
        "{}",
        same.describe()
    );
    // Another job: the checkpoint's operators have none to go to.
    std::fs::write(t.join("words.txt"), "a b a\n").unwrap();
    let other = run(&mut weir(
        t,
        [
            "savepoint",
            "check",
            &chk,
            "wordcount",
            "--input",
            "words.txt",
        ],
    ));
    assert_eq!(other.code(), Some(1), "{}", other.describe());
    for row in ["state without an operator", "operator without state"] {
        assert!(other.stdout.contains(row), "{row}: {}", other.describe());
    }
    assert!(
        other.stdout.contains("--allow-non-restored-state"),
        "the way out: {}",
        other.describe()
    );
    // Its `count` operator keys by word: a changed key type, refused too.
    assert!(
        other.stdout.contains("key type changed") && other.stdout.contains("(2 reasons)"),
        "{}",
        other.describe()
    );
    // --allow-non-restored-state drops the state without an operator, but never keyed
    // state under a changed key type: one reason left, still exit 1.
    let allowed = run(&mut weir(
        t,
        [
            "savepoint",
            "check",
            &chk,
            "wordcount",
            "--input",
            "words.txt",
            "--allow-non-restored-state",
        ],
    ));
    assert_eq!(allowed.code(), Some(1), "{}", allowed.describe());
    assert!(
        allowed.stdout.contains("(1 reason)") && allowed.stdout.contains("key type changed"),
        "{}",
        allowed.describe()
    );
}
