//! Jobs writing into PostgreSQL through the two-phase-commit sink: the output is
//! exactly-once under many injected task failures, checked with SQL.
#![cfg(feature = "postgres")]

#[path = "support/pg_job.rs"]
mod pg_job;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pg_job::*;
use weir::prelude::*;

const DB: &str = "weir";

#[test]
fn output_is_exactly_once_under_injected_failures() {
    let s = seq_server(DB, &["out"]);
    let (n, keys) = (40_000u64, 100u64);
    let mut fired = 0;
    for seed in 0..2 {
        s.exec(DB, "TRUNCATE out");
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config("eo", dir.path(), 2, Duration::from_millis(25));
        cfg.failure_injection = Some(FailureInjection::after_checkpoints(6, seed, n));
        let url = s.url(DB, "out");
        // A reader in another session, while the job runs, must only ever see whole
        // committed checkpoints: every key's rows are 1..=m, without gaps or duplicates
        // (a key's rows all come from one sink subtask, committed in checkpoint order).
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (stop, mut client) = (stop.clone(), s.client(DB));
            std::thread::spawn(move || {
                let (mut reads, mut rows_seen) = (0, 0i64);
                while !stop.load(Ordering::Relaxed) {
                    let bad = client
                        .query(
                            "SELECT k, count(*), count(DISTINCT seq), max(seq) FROM out \
                             GROUP BY k HAVING count(*) <> max(seq) \
                             OR count(*) <> count(DISTINCT seq) OR min(seq) <> 1",
                            &[],
                        )
                        .unwrap();
                    if let Some(r) = bad.first() {
                        let (k, c, d, m): (i64, i64, i64, i64) =
                            (r.get(0), r.get(1), r.get(2), r.get(3));
                        panic!("a reader saw key {k} with {c} rows, {d} distinct, max {m}");
                    }
                    let total: i64 = client
                        .query_one("SELECT count(*) FROM out", &[])
                        .unwrap()
                        .get(0);
                    rows_seen = rows_seen.max(total);
                    reads += 1;
                    std::thread::sleep(Duration::from_millis(15));
                }
                (reads, rows_seen)
            })
        };
        let r = run_seq_job(cfg, n, keys, Some(test_checkpoints::paced(80_000.0)), &url);
        stop.store(true, Ordering::Relaxed);
        let (reads, rows_seen) = reader
            .join()
            .expect("the reader saw only whole checkpoints");
        assert!(
            reads > 10 && rows_seen > 0,
            "the reader ran ({reads} reads)"
        );
        let r = r.unwrap();
        let (f, planned) = r.injected_failures.unwrap();
        assert_eq!(f, planned, "seed {seed}: every planned failure fired");
        // Every restart resumed from a checkpoint's positions, not from the beginning.
        weir::testing::assert_resumed(&r, n);
        assert_exactly_once(&s, DB, "out", "eo", n, keys);
        fired += f;
    }
    assert!(fired >= 10, "only {fired} failures fired");
}

/// `rate` for a job of a few tens of thousands of records that must outlast several
/// checkpoints (each failure follows one): a tenth of it on S3, where the first checkpoint
/// waits for the lease and every one takes several requests to a loopback server.
fn short_run_rate(rate: f64) -> f64 {
    if test_checkpoints::on_s3() {
        rate / 10.0
    } else {
        rate
    }
}

#[test]
fn upsert_output_has_no_duplicates_under_injected_failures() {
    let s = seq_server(DB, &[]);
    s.exec(
        DB,
        "CREATE TABLE ups (k bigint, seq bigint, PRIMARY KEY (k, seq))",
    );
    let (n, keys) = (20_000u64, 50u64);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("ups", dir.path(), 2, Duration::from_millis(25));
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(4, 7, n));
    let url = format!("{}?mode=upsert&key=k,seq", s.url(DB, "ups"));
    let r = run_seq_job(cfg, n, keys, Some(short_run_rate(80_000.0)), &url).unwrap();
    assert_eq!(r.injected_failures.unwrap().0, 4);
    // Idempotent upserts hide a replay from the table, so the restore is checked here.
    weir::testing::assert_resumed(&r, n);
    assert_exactly_once(&s, DB, "ups", "ups", n, keys);
}

#[test]
fn without_checkpoints_the_end_of_input_commits_once() {
    let s = seq_server(DB, &["out"]);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("nochk", dir.path(), 2, Duration::from_millis(25));
    cfg.checkpointing.interval = None;
    cfg.failure_injection = Some(FailureInjection {
        failures: 2,
        seed: 1,
        horizon: 20_000,
        after_checkpoint: false,
    });
    let url = s.url(DB, "out");
    let r = run_seq_job(cfg, 20_000, 30, None, &url).unwrap();
    assert_eq!(r.injected_failures.unwrap().0, 2);
    // No checkpoint before the end of input: both restarts begin again from the start.
    assert!(
        r.history.iter().all(|a| a.restored.is_none()),
        "{:#?}",
        r.history
    );
    assert_exactly_once(&s, DB, "out", "nochk", 20_000, 30);
}

/// Needs the engine's final checkpoint at end of input: a bounded job with periodic
/// checkpoints ends with its last transaction committed.
#[test]
fn a_bounded_job_with_checkpoints_ends_fully_committed() {
    let s = seq_server(DB, &["out"]);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("final", dir.path(), 2, Duration::from_millis(25));
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(3, 5, 30_000));
    let url = s.url(DB, "out");
    let r = run_seq_job(cfg, 30_000, 40, Some(short_run_rate(100_000.0)), &url).unwrap();
    assert_eq!(r.injected_failures.unwrap().0, 3);
    weir::testing::assert_resumed(&r, 30_000);
    assert_exactly_once(&s, DB, "out", "final", 30_000, 40);
}
