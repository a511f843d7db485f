//! The PostgreSQL sink driven directly through its two-phase-commit methods against a real
//! server: crashes between the phases, visibility, recovery, upserts and clear errors.
#![cfg(feature = "postgres")]

#[path = "support/pg.rs"]
mod pg;

use pg::PgServer;
use weir::prelude::*;
use weir_connectors::postgres::{
    PostgresSink, PostgresSinkConfig, PreparedTransaction, SqlValue, WriteMode,
};

type Row = (i64, i64);

const DB: &str = "weir";

fn server() -> PgServer {
    let s = PgServer::start();
    s.create_database(DB);
    s.exec(
        DB,
        "CREATE TABLE out (k bigint NOT NULL, seq integer NOT NULL)",
    );
    s
}

fn sink(url: &str) -> PostgresSink<Row> {
    let config = PostgresSinkConfig::parse(url).unwrap();
    PostgresSink::new(config, &["k", "seq"], |r: &Row| {
        Ok(vec![SqlValue::BigInt(r.0), SqlValue::BigInt(r.1)])
    })
}

fn ctx(job: &str, subtask: u32) -> TransactionContext {
    TransactionContext {
        job_name: job.into(),
        uid: "pg".into(),
        subtask,
        parallelism: 2,
    }
}

fn rows(n: i64, from: i64) -> Vec<Row> {
    (from..from + n).map(|i| (i % 3, i)).collect()
}

/// `(rows, distinct seq)`: equal iff no duplicates.
fn rows_and_distinct(s: &PgServer) -> (i64, i64) {
    let r = s
        .client(DB)
        .query_one("SELECT count(*), count(DISTINCT seq) FROM out", &[])
        .unwrap();
    (r.get(0), r.get(1))
}

/// Opens a sink as a subtask (recovering on subtask 0 with `pending`).
fn open(
    s: &PgServer,
    c: &TransactionContext,
    pending: Vec<PreparedTransaction>,
) -> PostgresSink<Row> {
    let mut k = sink(&s.url(DB, "out"));
    k.open(c).unwrap();
    if c.subtask == 0 {
        k.recover(c, pending).unwrap();
    }
    k
}

/// Begin, write `batch`, pre-commit for `checkpoint`.
fn epoch(
    k: &mut PostgresSink<Row>,
    c: &TransactionContext,
    batch: Vec<Row>,
    checkpoint: u64,
) -> PreparedTransaction {
    let mut txn = k.begin(c).unwrap();
    let mut batch = batch;
    k.write(&mut txn, &mut batch).unwrap();
    assert!(batch.is_empty(), "write drains the batch");
    k.pre_commit(c, txn, checkpoint)
        .unwrap()
        .expect("rows written")
}

#[test]
fn pre_committed_rows_stay_invisible_until_commit_and_commit_is_idempotent() {
    let s = server();
    let c = ctx("vis", 0);
    let mut k = open(&s, &c, vec![]);
    let p = epoch(&mut k, &c, rows(500, 0), 1);
    assert_eq!(p.gid, "vis~pg~0-1");
    assert_eq!(p.rows, 500);
    // Another session sees nothing of a prepared transaction.
    assert_eq!(s.count(DB, "out"), 0);
    assert_eq!(s.prepared(DB, "vis~pg~"), ["vis~pg~0-1"]);
    // The next epoch is open on the data connection while the commit runs.
    let mut txn = k.begin(&c).unwrap();
    k.write(&mut txn, &mut rows(10, 500)).unwrap();
    k.commit(p.clone()).unwrap();
    assert_eq!(s.count(DB, "out"), 500);
    // A second commit (recovery, retries) finds the name gone: done, not an error.
    k.commit(p).unwrap();
    assert_eq!(s.count(DB, "out"), 500);
    let p2 = k.pre_commit(&c, txn, 2).unwrap().unwrap();
    assert_eq!(s.count(DB, "out"), 500);
    k.commit(p2).unwrap();
    assert_eq!(rows_and_distinct(&s), (510, 510));
    assert!(s.prepared(DB, "vis~pg~").is_empty());
}

#[test]
fn a_crash_after_pre_commit_is_committed_by_recovery_and_later_epochs_rolled_back() {
    let s = server();
    // Two subtasks pre-commit checkpoint 1 and 2; the job crashes after checkpoint 1
    // completed but before anyone committed; checkpoint 2 never completed.
    let (c0, c1) = (ctx("crash", 0), ctx("crash", 1));
    let mut k0 = open(&s, &c0, vec![]);
    let mut k1 = open(&s, &c1, vec![]);
    let p0 = epoch(&mut k0, &c0, rows(100, 0), 1);
    let p1 = epoch(&mut k1, &c1, rows(100, 100), 1);
    epoch(&mut k0, &c0, rows(50, 200), 2);
    epoch(&mut k1, &c1, rows(50, 250), 2);
    // An open, never prepared transaction dies with its connection.
    let mut open_txn = k0.begin(&c0).unwrap();
    k0.write(&mut open_txn, &mut rows(7, 300)).unwrap();
    drop((k0, k1, open_txn));
    assert_eq!(s.count(DB, "out"), 0);
    assert_eq!(s.prepared(DB, "crash~pg~").len(), 4);

    // The restart restores checkpoint 1: subtask 0 recovers with its pending handles.
    let _k0 = open(&s, &c0, vec![p0.clone(), p1.clone()]);
    assert_eq!(rows_and_distinct(&s), (200, 200));
    assert!(
        s.prepared(DB, "crash~pg~").is_empty(),
        "checkpoint 2's transactions are rolled back"
    );
    // A second recovery from the same checkpoint (another crash) changes nothing.
    let _again = open(&s, &c0, vec![p0, p1]);
    assert_eq!(rows_and_distinct(&s), (200, 200));
}

#[test]
fn a_crash_after_commit_before_the_engine_learned_of_it_is_exactly_once() {
    let s = server();
    let c = ctx("late", 0);
    let mut k = open(&s, &c, vec![]);
    let p = epoch(&mut k, &c, rows(300, 0), 4);
    k.commit(p.clone()).unwrap();
    drop(k);
    // The restored checkpoint still lists the handle: recovery commits it again.
    let _k = open(&s, &c, vec![p]);
    assert_eq!(rows_and_distinct(&s), (300, 300));
    assert!(s.prepared(DB, "late~pg~").is_empty());
}

#[test]
fn recovery_leaves_other_sinks_and_jobs_alone() {
    let s = server();
    let mine = ctx("job", 0);
    let mut other_uid = ctx("job", 0);
    other_uid.uid = "pg-2".into();
    let other_job = ctx("job2", 0);
    for c in [&mine, &other_uid, &other_job] {
        let mut k = open(&s, c, vec![]);
        epoch(&mut k, c, rows(5, 0), 3);
    }
    assert_eq!(s.prepared(DB, "job").len(), 3);
    // A fresh start of `job`/`pg` settles only its own names.
    let _k = open(&s, &mine, vec![]);
    assert_eq!(s.prepared(DB, "job"), ["job2~pg~0-3", "job~pg-2~0-3"]);
    assert_eq!(s.count(DB, "out"), 0);
    for c in [&other_uid, &other_job] {
        let _k = open(&s, c, vec![]);
    }
    assert!(s.prepared(DB, "job").is_empty());
}

#[test]
fn upsert_mode_overwrites_replayed_rows() {
    let s = server();
    s.exec(
        DB,
        "CREATE TABLE latest (k bigint PRIMARY KEY, seq bigint, note text)",
    );
    let mut config =
        PostgresSinkConfig::parse(&format!("{}?mode=upsert&key=k", s.url(DB, "latest"))).unwrap();
    config.application_name = "upsert-test".into();
    assert!(matches!(config.mode, WriteMode::Upsert { .. }));
    let mut k = PostgresSink::new(config, &["k", "seq", "note"], |r: &Row| {
        Ok(vec![
            r.0.into(),
            r.1.into(),
            (r.1 % 2 == 0).then(|| format!("even {}", r.1)).into(),
        ])
    });
    let c = ctx("ups", 0);
    k.open(&c).unwrap();
    k.recover(&c, vec![]).unwrap();
    // 2500 rows over 3 keys: one statement may not touch a key twice, so the batch keeps
    // each key's last row (and spans several statements).
    let batch: Vec<Row> = (0..2500).map(|i| (i % 3, i)).collect();
    for replay in 0..2 {
        let mut txn = k.begin(&c).unwrap();
        k.write(&mut txn, &mut batch.clone()).unwrap();
        assert!(k.pre_commit(&c, txn, replay + 1).unwrap().is_none());
    }
    let mut txn = k.begin(&c).unwrap();
    k.write(&mut txn, &mut (3000..5000).map(|i| (i, i)).collect())
        .unwrap();
    // Upserts commit at pre-commit: visible without any commit call.
    k.pre_commit(&c, txn, 3).unwrap();
    let got: Vec<(i64, i64, Option<String>)> = s
        .client(DB)
        .query(
            "SELECT k, seq, note FROM latest WHERE k < 3 ORDER BY k",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        got,
        [
            (0, 2499, None),
            (1, 2497, None),
            (2, 2498, Some("even 2498".into()))
        ]
    );
    assert_eq!(s.count(DB, "latest"), 2003);
    assert!(s.prepared(DB, "ups~pg~").is_empty());
}

fn open_err(url: &str, c: &TransactionContext) -> String {
    sink(url).open(c).unwrap_err().to_string()
}

#[test]
fn errors_name_the_cause_and_the_way_out() {
    let s = server();
    let c = ctx("err", 0);
    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = open_err(&format!("postgres://u@127.0.0.1:{port}/db/t"), &c);
    assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
    assert!(e.contains("is the server running"), "{e}");

    let e = open_err(
        &format!("postgres://postgres:wrong@127.0.0.1:{}/{DB}/out", s.port()),
        &c,
    );
    assert!(e.contains("rejected the login of user `postgres`"), "{e}");
    assert!(e.contains("password"), "{e}");

    let e = open_err(&s.url("nodb", "out"), &c);
    assert!(e.contains("no database `nodb`"), "{e}");

    let e = open_err(&s.url(DB, "missing"), &c);
    assert!(e.contains("table `missing` does not exist"), "{e}");

    let mut k = PostgresSink::new(
        PostgresSinkConfig::parse(&s.url(DB, "out")).unwrap(),
        &["k", "nope"],
        |r: &Row| Ok(vec![r.0.into(), r.1.into()]),
    );
    let e = k.open(&c).unwrap_err().to_string();
    assert!(e.contains("nope") && e.contains("does not exist"), "{e}");

    // Records that do not convert fail the batch, naming the column and the value.
    let mut k = sink(&s.url(DB, "out"));
    k.open(&c).unwrap();
    let mut txn = k.begin(&c).unwrap();
    let e = k
        .write(&mut txn, &mut vec![(1, 2), (1, 3_000_000_000)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("record 1"), "{e}");
    assert!(
        e.contains("column `seq`: 3000000000 is out of range for int4"),
        "{e}"
    );
    k.abort(txn).unwrap();
    let mut k = PostgresSink::new(
        PostgresSinkConfig::parse(&s.url(DB, "out")).unwrap(),
        &["k", "seq"],
        |r: &Row| {
            if r.1 < 0 {
                return Err(format!("negative sequence {}", r.1));
            }
            Ok(vec![r.0.into()])
        },
    );
    k.open(&c).unwrap();
    let mut txn = k.begin(&c).unwrap();
    let e = k
        .write(&mut txn, &mut vec![(1, -4)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("negative sequence -4"), "{e}");
    let e = k
        .write(&mut txn, &mut vec![(1, 4)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("returned 1 values for 2 columns"), "{e}");
    // NOT NULL is the server's to enforce; its message comes through.
    let mut k = PostgresSink::new(
        PostgresSinkConfig::parse(&s.url(DB, "out")).unwrap(),
        &["k", "seq"],
        |r: &Row| Ok(vec![r.0.into(), SqlValue::Null]),
    );
    k.open(&c).unwrap();
    let mut txn = k.begin(&c).unwrap();
    let e = k
        .write(&mut txn, &mut vec![(1, 4)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("null value in column \"seq\""), "{e}");
    // The sink recovers from a failed write: the next transaction works.
    let mut txn = k.begin(&c).unwrap();
    k.abort(txn).unwrap();
    txn = k.begin(&c).unwrap();
    k.abort(txn).unwrap();
}

#[test]
fn zero_max_prepared_transactions_is_refused_at_open() {
    let s = PgServer::start_with(&[("max_prepared_transactions", "0")]);
    s.create_database(DB);
    s.exec(DB, "CREATE TABLE out (k bigint, seq integer)");
    let e = open_err(&s.url(DB, "out"), &ctx("zero", 0));
    assert!(e.contains("max_prepared_transactions = 0"), "{e}");
    assert!(e.contains("postgresql.conf"), "{e}");
    assert!(e.contains("mode=upsert"), "{e}");
    // The upsert mode needs no prepared transactions.
    s.exec(DB, "CREATE TABLE kv (k bigint PRIMARY KEY, seq integer)");
    let mut k = sink(&format!("{}?mode=upsert&key=k", s.url(DB, "kv")));
    k.open(&ctx("zero", 0)).unwrap();
}
