//! Whole-process SIGKILL: a job writing into PostgreSQL is killed at random moments, then
//! resumed with `RestoreFrom::Latest` until it finishes; the table ends exactly-once.
//!
//! The job runs in a child process: this test binary re-executed on the entry point
//! `child_job`, which does nothing unless the parent set `WEIR_PG_KILL_URL`.
#![cfg(feature = "postgres")]

#[path = "support/pg.rs"]
mod pg;
#[path = "support/pg_job.rs"]
mod pg_job;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pg::PgServer;
use pg_job::*;
use weir::prelude::*;

const DB: &str = "weir";
const JOB: &str = "killed";
const N: u64 = 60_000;
const KEYS: u64 = 64;

/// The child's job: resumes from the latest checkpoint in `WEIR_PG_KILL_DIR`.
#[test]
fn child_job() {
    let (Ok(url), Ok(dir)) = (
        std::env::var("WEIR_PG_KILL_URL"),
        std::env::var("WEIR_PG_KILL_DIR"),
    ) else {
        return;
    };
    let mut cfg = config(JOB, dir.as_ref(), 2, Duration::from_millis(30));
    cfg.restore = RestoreFrom::Latest;
    run_seq_job(cfg, N, KEYS, Some(40_000.0), &url).unwrap();
}

fn spawn(url: &str, dir: &std::path::Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_job", "--nocapture", "--test-threads=1"])
        .env("WEIR_PG_KILL_URL", url)
        .env("WEIR_PG_KILL_DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("re-run the test binary")
}

#[test]
fn sigkill_at_random_moments_then_resume_is_exactly_once() {
    let s = PgServer::start();
    s.create_database(DB);
    s.exec(
        DB,
        "CREATE TABLE out (k bigint NOT NULL, seq bigint NOT NULL)",
    );
    let url = s.url(DB, "out");
    let dir = tempfile::tempdir().unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let mut rng = seed;
    let mut next = || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        rng >> 33
    };
    let mut lingering = 0;
    let mut committed = Vec::new();
    for kill in 0..4 {
        let delay = Duration::from_millis(250 + next() % 700);
        let mut child = spawn(&url, dir.path());
        std::thread::sleep(delay);
        if child.try_wait().unwrap().is_some() {
            // Finished before the kill (a slow machine would rather kill it early).
            eprintln!("kill {kill}: the job finished within {delay:?}");
            break;
        }
        child.kill().expect("SIGKILL the job");
        child.wait().unwrap();
        lingering += s.prepared(DB, JOB).len();
        let rows: i64 = s
            .client(DB)
            .query_one("SELECT count(*) FROM out", &[])
            .unwrap()
            .get(0);
        committed.push(rows);
        eprintln!("kill {kill} after {delay:?} (seed {seed}): {rows} rows committed");
    }
    // Run to completion.
    let mut child = spawn(&url, dir.path());
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("the resumed job did not finish in 120 s");
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
}
