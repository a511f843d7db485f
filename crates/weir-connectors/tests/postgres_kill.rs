//! Whole-process SIGKILL: a job writing into PostgreSQL is killed mid-run four times (each
//! time after it completed a new checkpoint, and before it finished), then resumed with
//! `RestoreFrom::Latest` until it finishes; the table ends exactly-once, and the last run
//! restored the newest checkpoint and read fewer than all the records (it resumed, it did
//! not start over).
//!
//! The job runs in a child process: this test binary re-executed on the `#[ignore]`d helper
//! `child_job` with `--ignored --exact`, which does nothing unless the parent set
//! `WEIR_PG_KILL_URL`. Kill moments are random but reproducible: the seed is printed, and
//! `WEIR_TEST_SEED` overrides it.
#![cfg(feature = "postgres")]

#[path = "support/pg_job.rs"]
mod pg_job;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pg_job::*;
use weir::prelude::*;

const DB: &str = "weir";
const JOB: &str = "killed";
/// 5 s of input at [`RATE`]: far more than four killed runs read (each is killed at most
/// [`EXTRA_MS`]'s upper end after its first new checkpoint).
const N: u64 = 200_000;
const RATE: f64 = 40_000.0;
const KEYS: u64 = 64;
const KILLS: usize = 4;
/// After a run completed a new checkpoint, it is killed a random number of milliseconds
/// in this range later.
const EXTRA_MS: (u64, u64) = (20, 300);
/// Seed of the kill moments unless `WEIR_TEST_SEED` is set.
const DEFAULT_SEED: u64 = 0x5eed_4b11;
/// Longest any wait may take (a checkpoint to appear, the last run to finish).
const DEADLINE: Duration = Duration::from_secs(120);
/// The file where the child writes its job result (restored checkpoint, records read).
const RESULT_FILE: &str = "result";

/// Not a test: the job the parent test runs in a child process and kills. It resumes from
/// the latest checkpoint in `WEIR_PG_KILL_DIR` and, when it finishes, writes what it
/// restored and read to `WEIR_PG_KILL_DIR/result`. Ignored so that it never counts as a
/// passing test; run on its own (`--ignored`) without the parent's variables, it does
/// nothing.
#[test]
#[ignore = "helper of sigkill_mid_run_then_resume_is_exactly_once, run by it in a child"]
fn child_job() {
    let (Ok(url), Ok(dir), Ok(checkpoints)) = (
        std::env::var("WEIR_PG_KILL_URL"),
        std::env::var("WEIR_PG_KILL_DIR"),
        std::env::var("WEIR_PG_KILL_CHECKPOINTS"),
    ) else {
        return;
    };
    let dir = PathBuf::from(dir);
    // The parent's checkpoint location (its S3 twin already, on S3: no server started here).
    let mut cfg = config(JOB, Path::new(&checkpoints), 2, Duration::from_millis(30));
    cfg.restore = RestoreFrom::Latest;
    let result = run_seq_job(cfg, N, KEYS, Some(RATE), &url).unwrap();
    let restored = result
        .restored_from
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    std::fs::write(
        dir.join(RESULT_FILE),
        format!("{restored}\n{}\n", result.source_records),
    )
    .unwrap();
}

fn spawn(url: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_job",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WEIR_PG_KILL_URL", url)
        .env("WEIR_PG_KILL_DIR", dir)
        .env(
            "WEIR_PG_KILL_CHECKPOINTS",
            test_checkpoints::checkpoint_dir(dir),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("re-run the test binary")
}

/// Ids of the complete checkpoints of the job folder `job_dir` (a local path or an `s3://`
/// URL), through the storage trait.
fn completed(job_dir: &Path) -> Vec<u64> {
    test_checkpoints::complete_checkpoint_ids(job_dir)
}

/// Waits until `child` completed a checkpoint newer than `after`; panics if it exits first
/// or [`DEADLINE`] passes. Returns the new checkpoint's id.
fn wait_for_checkpoint_after(child: &mut Child, job_dir: &Path, after: u64, run: usize) -> u64 {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(&id) = completed(job_dir).last().filter(|&&id| id > after) {
            return id;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("run {run} exited ({st}) before completing a checkpoint after chk-{after}");
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("run {run} completed no checkpoint after chk-{after} within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A tiny xorshift64, so kill moments are random but reproducible.
fn rng(seed: u64) -> impl FnMut(u64, u64) -> u64 {
    let mut x = seed.max(1);
    move |lo, hi| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        lo + x % (hi - lo + 1)
    }
}

#[test]
fn sigkill_mid_run_then_resume_is_exactly_once() {
    let s = seq_server(DB, &["out"]);
    let url = s.url(DB, "out");
    let dir = tempfile::tempdir().unwrap();
    let job_dir = test_checkpoints::checkpoint_dir(dir.path()).join(JOB);
    let seed = std::env::var("WEIR_TEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    eprintln!("kill-moment seed: {seed} (set WEIR_TEST_SEED to change)");
    let mut range = rng(seed);
    let (mut lingering, mut newest) = (0, 0u64);
    let mut committed = Vec::new();
    for kill in 0..KILLS {
        let mut child = spawn(&url, dir.path());
        // A kill lands mid-run: after this run (a restore, from the second on) completed a
        // checkpoint of its own, and before it finished.
        newest = wait_for_checkpoint_after(&mut child, &job_dir, newest, kill);
        let extra = Duration::from_millis(range(EXTRA_MS.0, EXTRA_MS.1));
        std::thread::sleep(extra);
        if let Some(st) = child.try_wait().unwrap() {
            panic!(
                "run {kill} finished ({st}) before its kill, {extra:?} after chk-{newest}: \
                 the kill would not have landed mid-run (seed {seed})"
            );
        }
        child.kill().expect("SIGKILL the job");
        let st = child.wait().unwrap();
        assert!(
            st.code().is_none(),
            "run {kill} was not ended by the kill: {st}"
        );
        assert!(
            !dir.path().join(RESULT_FILE).exists(),
            "run {kill} wrote its result: it finished before the kill"
        );
        test_checkpoints::wait_for_dead_lease();
        lingering += s.prepared(DB, JOB).len();
        let rows = s.count(DB, "out");
        assert!(
            (rows as u64) < N,
            "kill {kill}: all {N} rows were committed already; the kill was not mid-run"
        );
        committed.push(rows);
        eprintln!("kill {kill}, {extra:?} after chk-{newest} (seed {seed}): {rows} rows committed");
        // The next run restores the newest complete checkpoint, whichever the kill left.
        newest = completed(&job_dir).last().copied().unwrap_or(newest);
    }
    // Run to completion.
    let mut child = spawn(&url, dir.path());
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the resumed job did not finish in {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "the resumed job failed: {status}");
    assert!(
        committed.windows(2).all(|w| w[0] <= w[1]),
        "committed output never shrinks: {committed:?}"
    );
    eprintln!("prepared transactions found after kills: {lingering}");
    assert_exactly_once(&s, DB, "out", JOB, N, KEYS);
    // The last run resumed from the newest checkpoint the killed runs completed, so it read
    // fewer than all the records: a fresh start would have read N.
    let result = std::fs::read_to_string(dir.path().join(RESULT_FILE))
        .expect("the finished run writes its result");
    let mut lines = result.lines();
    let restored = lines.next().unwrap_or_default();
    let read: u64 = lines
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or(u64::MAX);
    let want = format!("chk-{newest}");
    assert!(
        Path::new(restored).ends_with(&want),
        "the last run restored {restored:?}, not the killed runs' newest checkpoint {want}"
    );
    assert!(
        read < N,
        "the last run read {read} records: a restore from chk-{newest} reads fewer than {N}"
    );
}
