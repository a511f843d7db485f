//! Jobs on a cluster of worker processes (issue 24, tests 1 and 6): a coordinator (`weir
//! run … --workers N --cluster-listen 127.0.0.1:0`) and `weir worker` processes on
//! loopback, every port chosen by the system.
//!
//! * W1 (keyed-count) and Nexmark q5 on 3 workers give exactly what one process gives.
//! * A savepoint (and a stop with a savepoint) of a job on 3 workers resumes on 2 workers
//!   and in one process at another parallelism, exactly, from the savepoint.
//!
//! Savepoints are taken while keyed-count's input is held (`--hold-at`,
//! `--release-file`), so their source positions are known and nothing depends on the
//! machine's speed; every wait is bounded and says what it waited for.

mod cluster_support;
mod common;

use std::fs;
use std::path::{Path, PathBuf};

use cluster_support::{Cluster, HELD, HOLD_AT};
use common::nexmark::{reference_csv, run_args};
use common::*;
use weir::inspect::SnapshotKind;

/// Events of the keyed-count jobs.
const EVENTS: u64 = 300_000;
/// Keys (not a divisor of [`EVENTS`]).
const KEYS: u64 = 97;
/// keyed-count over [`EVENTS`] events at parallelism `p`, checkpoints every 50 ms into
/// `chk`, savepoints into `sp`, output into `out`, verified; plus `extra`.
fn keyed_count(p: u32, extra: &[&str]) -> Vec<String> {
    let (events, keys, p) = (EVENTS.to_string(), KEYS.to_string(), p.to_string());
    let mut a: Vec<String> = ["run", "keyed-count", "--events", &events, "--keys", &keys]
        .into_iter()
        .chain(["--parallelism", &p, "--checkpoint-interval", "50ms"])
        .chain(["--checkpoint-dir", "chk", "--savepoint-dir", "sp"])
        .chain(["--output", "out", "--verify", "--restart-delay", "10ms"])
        .map(String::from)
        .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// `weir savepoint|stop --job ADDR`: the savepoint folder it prints.
fn control(dir: &Path, verb: &str, addr: &str) -> PathBuf {
    let r = run(&mut weir(dir, [verb, "--job", addr]));
    r.assert_success();
    PathBuf::from(r.stdout.trim())
}

/// Asserts that savepoint `sp` is of `kind` and holds every subtask of keyed-count's
/// operators at parallelism `p` (one state file each, written by the workers) with the
/// sources at `position`, and that its files went only to its own folder (no `chk-<id>`
/// of it in the job folder).
fn assert_savepoint(sp: &Path, kind: SnapshotKind, job_dir: &Path, p: u32, position: u64) {
    assert_savepoint_of(
        sp,
        kind,
        job_dir,
        &[("generator", p), ("count", p)],
        position,
    );
}

/// [`assert_savepoint`] for operators (uid, parallelism) `ops`.
fn assert_savepoint_of(
    sp: &Path,
    kind: SnapshotKind,
    job_dir: &Path,
    ops: &[(&str, u32)],
    position: u64,
) {
    let d = weir::inspect::describe(sp)
        .unwrap_or_else(|e| panic!("savepoint {} does not read back: {e}", sp.display()));
    assert_eq!(d.snapshot, kind, "{sp:?}");
    for &(uid, p) in ops {
        let op = (d.operators.iter().find(|o| o.uid == uid))
            .unwrap_or_else(|| panic!("no operator {uid} in {}", sp.display()));
        assert_eq!(op.parallelism, p, "{uid}");
        assert_eq!(op.files, u64::from(p), "{uid}: one state file per subtask");
    }
    let sources = weir::inspect::source_progress(sp).unwrap();
    assert_eq!(sources.iter().map(|s| s.records).sum::<u64>(), position);
    let chk = job_dir.join(format!("chk-{}", d.checkpoint_id));
    assert!(!chk.exists(), "savepoint files went to {}", chk.display());
}

/// Issue 24, test 6: a savepoint of a job on 3 workers (taken mid-input), then a stop
/// with a savepoint; the stop's savepoint resumes on 2 workers, the first one in a single
/// process at parallelism 1, both exact and both from their savepoint.
#[test]
fn a_savepoint_on_three_workers_resumes_on_two_workers_and_in_one_process_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let job_dir = dir.join("chk/keyed-count");
    let mut c = Cluster::start(dir, &keyed_count(3, &HELD), 3, "a");
    let addr = c.control_address();
    c.wait_until_held(&job_dir, 3);
    let mid = control(dir, "savepoint", &addr);
    assert!(mid.starts_with(dir.join("sp")), "{}", mid.display());
    assert_savepoint(&mid, SnapshotKind::Savepoint, &job_dir, 3, 3 * HOLD_AT);
    let stopped = control(dir, "stop", &addr);
    assert_ne!(stopped, mid);
    let stop = SnapshotKind::StopSavepoint;
    assert_savepoint(&stopped, stop, &job_dir, 3, 3 * HOLD_AT);
    let ended = c.finish();
    assert_eq!(ended.code, 0, "{}\n{}", ended.out, ended.log);
    assert!(
        ended.out.contains("stopped with savepoint")
            || ended.log.contains("stopped with savepoint"),
        "{}\n{}",
        ended.out,
        ended.log
    );
    // Every worker ended cleanly with the job, and the three ran one subtask each.
    ended.assert_workers_succeeded();
    for (i, (name, _, _)) in ended.workers.iter().enumerate() {
        let line = format!("weir: attempt 1 runs on worker {} ({name})", i + 1);
        assert!(ended.log.contains(&line), "{line}:\n{}", ended.log);
    }
    assert!(
        !dir.join("out").exists(),
        "a stopped run publishes no output"
    );

    // The stop's savepoint on 2 workers (parallelism 2: the key groups and the source
    // positions of 3 subtasks rescaled onto 2).
    let restore = s(&stopped);
    let c = Cluster::start(dir, &keyed_count(2, &["--restore", &restore]), 2, "b");
    let ended = c.finish();
    ended.assert_verified();
    assert_keyed_count_exact(&dir.join("out"), EVENTS, KEYS);
    let first = attempts(&ended.out).into_iter().next();
    let (_, position, from) = first
        .and_then(|a| a.restored)
        .unwrap_or_else(|| panic!("the run on 2 workers did not restore:\n{}", ended.out));
    assert_eq!(
        (from, position),
        (stopped.clone(), 3 * HOLD_AT),
        "{}",
        ended.out
    );
    // Each worker restored it itself, and read only what the savepoint had not covered.
    for (name, _, log) in &ended.workers {
        let restored = format!("restored from {}", stopped.display());
        assert!(log.contains(&restored), "{name} did not restore it:\n{log}");
    }
    assert_eq!(
        records_read(&ended.out),
        EVENTS - 3 * HOLD_AT,
        "{}",
        ended.out
    );
    fs::remove_dir_all(dir.join("out")).unwrap();

    // The mid-input savepoint in one process, at parallelism 1.
    let r = run(&mut weir(dir, keyed_count(1, &["--restore", &s(&mid)])));
    r.assert_success();
    assert!(r.stdout.contains("verify: OK"), "{}", r.describe());
    assert_eq!(
        restored_from(&r.stdout),
        Some(mid.clone()),
        "{}",
        r.describe()
    );
    assert_resumed(&r, EVENTS);
    assert_keyed_count_exact(&dir.join("out"), EVENTS, KEYS);
    assert!(
        mid.join("_metadata").is_file() && stopped.join("_metadata").is_file(),
        "restores never delete a savepoint"
    );
}

/// A savepoint through a symbolic link is refused by the coordinator, as in one process
/// (`weir savepoint --dir NAME`, NAME a link out of the savepoint directory), nothing is
/// written through it, and the job goes on: the next savepoint and the end are exact.
#[test]
fn a_savepoint_through_a_link_is_refused_and_the_job_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let job_dir = dir.join("chk/keyed-count");
    let mut c = Cluster::start(dir, &keyed_count(2, &HELD), 2, "w");
    let addr = c.control_address();
    c.wait_until_held(&job_dir, 2);
    let outside = dir.join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::create_dir_all(dir.join("sp")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("sp/link")).unwrap();
    let r = run(&mut weir(
        dir,
        ["savepoint", "--job", &addr, "--dir", "link"],
    ));
    assert_ne!(r.code(), Some(0), "{}", r.describe());
    assert!(
        r.stderr.contains("outside the job's savepoint directory"),
        "{}",
        r.describe()
    );
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    // The job goes on, and a savepoint into a real folder works.
    let sp = control(dir, "savepoint", &addr);
    assert_savepoint(&sp, SnapshotKind::Savepoint, &job_dir, 2, 2 * HOLD_AT);
    c.release();
    let ended = c.finish();
    ended.assert_verified();
    assert_keyed_count_exact(&dir.join("out"), EVENTS, KEYS);
}

/// `weir stop --drain` on a cluster: the input ends after the barrier on every worker,
/// the job finishes with the final savepoint, and every worker exits 0.
#[test]
fn a_draining_stop_ends_the_job_on_every_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let job_dir = dir.join("chk/keyed-count");
    let mut c = Cluster::start(dir, &keyed_count(2, &HELD), 2, "w");
    let addr = c.control_address();
    c.wait_until_held(&job_dir, 2);
    let r = run(&mut weir(dir, ["stop", "--job", &addr, "--drain"]));
    r.assert_success();
    let sp = PathBuf::from(r.stdout.trim());
    let stop = SnapshotKind::StopSavepoint;
    assert_savepoint(&sp, stop, &job_dir, 2, 2 * HOLD_AT);
    let ended = c.finish();
    assert_eq!(ended.code, 0, "{}\n{}", ended.out, ended.log);
    ended.assert_workers_succeeded();
}

/// A worker that runs no source hears of a savepoint from the coordinator (its Trigger
/// only announces where the files go), while the barrier reaches its subtask through the
/// exchange: its state lands in the savepoint's folder, and nowhere else.
#[test]
fn a_worker_without_a_source_writes_its_state_into_the_savepoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let job_dir = dir.join("chk/keyed-count");
    let mut args = keyed_count(2, &HELD);
    args.extend(["--source-parallelism", "1"].map(String::from));
    let mut c = Cluster::start(dir, &args, 2, "w");
    let addr = c.control_address();
    c.wait_until_held(&job_dir, 1);
    let sp = control(dir, "savepoint", &addr);
    let ops = [("generator", 1), ("count", 2)];
    assert_savepoint_of(&sp, SnapshotKind::Savepoint, &job_dir, &ops, HOLD_AT);
    c.release();
    let ended = c.finish();
    ended.assert_verified();
    let second = "weir: attempt 1 runs on worker 2 (w2) at ";
    let line = (ended.log.lines().find(|l| l.starts_with(second)))
        .unwrap_or_else(|| panic!("no `{second}…` in\n{}", ended.log));
    assert!(line.ends_with(": count[1]"), "{line}");
    assert_keyed_count_exact(&dir.join("out"), EVENTS, KEYS);
}

/// Issue 24, test 1 for W1: keyed-count on 3 workers counts exactly what one process
/// counts (both verified, and their published outputs equal).
#[test]
fn keyed_count_on_three_workers_equals_one_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let c = Cluster::start(dir, &keyed_count(3, &[]), 3, "w");
    let ended = c.finish();
    ended.assert_verified();
    assert_eq!(records_read(&ended.out), EVENTS, "{}", ended.out);
    let on_cluster = keyed_counts(&dir.join("out"));
    fs::remove_dir_all(dir.join("out")).unwrap();
    let one = run(&mut weir(dir, keyed_count(3, &[])));
    one.assert_success();
    assert!(one.stdout.contains("verify: OK"), "{}", one.describe());
    assert_eq!(keyed_counts(&dir.join("out")), on_cluster);
    assert_keyed_count_exact(&dir.join("out"), EVENTS, KEYS);
}

/// Issue 24, test 1 for Nexmark q5 (sliding windows, then a second windowed stage, over
/// event time): on 3 workers, the published rows equal one process's and the reference
/// evaluator's.
#[test]
fn nexmark_q5_on_three_workers_equals_one_process_and_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let input = ["--events", "200000", "--tps", "5000"];
    let args = |o: &str, d: &str| {
        let extra = ["--checkpoint-interval", "100ms", "--verify"];
        run_args("q5", 3, &input, &dir.join(d), &dir.join(o), &extra)
    };
    let c = Cluster::start(dir, &args("out-cluster", "chk-cluster"), 3, "w");
    let ended = c.finish();
    ended.assert_verified();
    let one = run(&mut weir(dir, args("out-one", "chk-one")));
    one.assert_success();
    let read = |o: &str| fs::read_to_string(dir.join(o).join("q5.csv")).unwrap();
    let (cluster, single) = (read("out-cluster"), read("out-one"));
    assert!(dir.join("out-cluster/_SUCCESS").exists());
    if let Err(m) = weir_nexmark::reference::compare_csv(&single, &cluster) {
        panic!("q5 on 3 workers differs from one process: {m}");
    }
    let want = reference_csv(dir, "q5", &input);
    assert!(
        want.lines().count() > 10,
        "the reference has too few rows:\n{want}"
    );
    if let Err(m) = weir_nexmark::reference::compare_csv(&want, &cluster) {
        panic!("q5 on 3 workers differs from the reference: {m}");
    }
}
