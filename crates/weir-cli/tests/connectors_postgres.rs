//! `--sink postgres://…` of the built-in jobs against a real PostgreSQL server (started per
//! test by weir-connectors' support helper): exactly-once rows under injected failures and
//! whole-process SIGKILLs, no prepared transaction left behind, upsert mode, and the errors
//! a user meets first (missing table, server down, wrong password).

mod common;
mod connectors_support;
#[path = "../../weir-connectors/tests/support/pg.rs"]
mod pg;

use std::collections::BTreeMap;

use common::*;
use connectors_support::*;
use pg::{PgServer, COUNTS_TABLE};

/// Every prepared transaction in the server, whoever made it.
fn prepared(pg: &PgServer) -> Vec<String> {
    pg.client("postgres")
        .query("SELECT gid FROM pg_prepared_xacts", &[])
        .expect("list prepared transactions")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// keyed-count `--emit updates` into PostgreSQL with 10 injected failures at parallelism
/// 2: every key's rows are exactly counts 1..n, and no prepared transaction is left.
#[test]
fn postgres_sink_is_exact_under_injected_failures() {
    let pg = PgServer::start();
    pg.exec("postgres", COUNTS_TABLE);
    let tmp = tempfile::tempdir().unwrap();
    let (n, keys) = (300_000u64, 97u64);
    // Each failure follows a checkpoint: on S3, whose checkpoints take longer, slower input.
    let rate = if on_s3() { "300000" } else { "1000000" };
    let extra = [
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "20ms",
        "--rate",
        rate,
        "--inject-failures",
        "10",
        "--seed",
        "5",
    ];
    let url = pg.url("postgres", "counts");
    let run = run(&mut weir(
        tmp.path(),
        keyed_count_updates(&tmp.path().join("chk"), &url, n, keys, &extra),
    ));
    run.assert_success();
    assert!(
        run.stdout.contains("injected failures: 10 of 10"),
        "{}",
        run.describe()
    );
    assert!(
        !run.stdout.contains(pg::PASSWORD),
        "the summary shows the password\n{}",
        run.describe()
    );
    let committed = group(pg.key_counts("counts"));
    assert_updates_exact(&committed, n, keys, "postgres sink");
    assert_eq!(
        prepared(&pg),
        Vec::<String>::new(),
        "prepared transactions left"
    );
}

/// SIGKILL keyed-count (PostgreSQL sink) 4 times at random moments, resuming with
/// `--restore latest`: after every kill the visible rows are a prefix 1..m of every key's
/// counts, and the final run completes them exactly with nothing left prepared.
#[test]
fn postgres_sink_is_exact_after_sigkills_and_restore_latest() {
    let pg = PgServer::start();
    pg.exec("postgres", COUNTS_TABLE);
    let tmp = tempfile::tempdir().unwrap();
    let chk = tmp.path().join("chk");
    // 8 s at the rate: longer than the 4 killed runs together (at most 6.4 s).
    let (n, keys) = (800_000u64, 101u64);
    let url = pg.url("postgres", "counts");
    let args = kill_run_args(&chk, &url, (n, keys), "100000");
    let mut lingering = 0;
    kill_loop(
        tmp.path(),
        &chk.join("keyed-count"),
        // Later than the files test: the debug build needs ~0.5 s for its four SCRAM
        // logins (preflight, two data connections, a control connection).
        (4, (800, 1600)),
        0x5eed_0095,
        &args,
        |i| {
            if let Some(p) = prefix_problem(&group(pg.key_counts("counts"))) {
                panic!("after kill {i}, the committed rows are not exactly-once: {p}");
            }
            lingering += prepared(&pg).len();
        },
    );
    eprintln!("prepared transactions found after the kills: {lingering}");
    let run = run(&mut weir(tmp.path(), args(true)));
    run.assert_success();
    assert!(restored_from(&run.stdout).is_some(), "{}", run.describe());
    let committed = group(pg.key_counts("counts"));
    assert_updates_exact(&committed, n, keys, "postgres after kills");
    assert_eq!(
        prepared(&pg),
        Vec::<String>::new(),
        "prepared transactions left"
    );
}

/// `?mode=upsert&key=key` is idempotent under replay: every record the sink wrote since the
/// restored checkpoint is written again, and the table must still hold one row per key with
/// the exact count.
///
/// 1. keyed-count `--emit updates` is SIGKILLed twice mid-run (each time after a new
///    checkpoint) and resumed with `--restore latest` to the end: the restored runs re-upsert the updates after their checkpoint.
///    After every kill no key is ahead of the truth, and the end is exact.
/// 2. The whole input is then run again from scratch with final counts and injected
///    failures (`--verify`): every key's row is upserted again with the value it already
///    holds. A non-idempotent write (one that adds to the stored count, or inserts a second
///    row) would change the table; it must stay exactly the truth.
#[test]
fn postgres_upsert_mode_is_idempotent_under_replay() {
    let pg = PgServer::start();
    pg.exec(
        "postgres",
        "CREATE TABLE totals (key BIGINT PRIMARY KEY, count BIGINT)",
    );
    let tmp = tempfile::tempdir().unwrap();
    let (n, keys) = (400_000u64, 50u64);
    let url = format!("{}?mode=upsert&key=key", pg.url("postgres", "totals"));
    let want: BTreeMap<u64, u64> = (0..keys).map(|k| (k, expected_count(n, keys, k))).collect();
    let rows_by_key = |what: &str| -> BTreeMap<u64, u64> {
        let rows = pg.key_counts("totals");
        let by_key: BTreeMap<u64, u64> = rows.iter().copied().collect();
        assert_eq!(by_key.len(), rows.len(), "{what}: a key has two rows");
        by_key
    };

    // 1. SIGKILLs mid-run, then resumed to the end.
    let chk = tmp.path().join("chk");
    // 4 s at the rate: each killed run stops soon after its first new checkpoint.
    let args = kill_run_args(&chk, &url, (n, keys), "100000");
    kill_after_new_checkpoints(
        tmp.path(),
        &chk.join("keyed-count"),
        (2, 200),
        0x5eed_0125,
        &args,
        |i| {
            for (k, c) in rows_by_key(&format!("after kill {i}")) {
                let truth = want.get(&k).copied().unwrap_or(0);
                assert!(
                    c <= truth,
                    "after kill {i}, key {k} holds {c}, more than its final count {truth}"
                );
            }
        },
    );
    let resumed = run(&mut weir(tmp.path(), args(true)));
    resumed.assert_success();
    // Upserts of final counts would look the same after a run from the beginning: the
    // summary shows the run resumed at the checkpoint's positions and read only the rest.
    assert_resumed(&resumed, n);
    assert_eq!(rows_by_key("after the restore"), want, "after the restore");

    // 2. The same input again, from scratch, over the rows already there.
    let again = run(&mut weir(
        tmp.path(),
        [
            "run",
            "keyed-count",
            "--events",
            &n.to_string(),
            "--keys",
            &keys.to_string(),
            "--parallelism",
            "2",
            "--sink",
            &url,
            "--inject-failures",
            "3",
            "--restart-delay",
            "5ms",
            "--checkpoint-dir",
            &checkpoint_arg(&tmp.path().join("chk-again")),
            "--verify",
        ],
    ));
    again.assert_success();
    assert!(again.stdout.contains("verify: OK"), "{}", again.describe());
    assert_eq!(
        rows_by_key("after the second run"),
        want,
        "upserting the same input again changed the table"
    );
}

/// The first errors a user meets end the run at once (exit 1), naming the way out: a
/// missing table (with the CREATE TABLE this job needs), a server that is down (its
/// address), a wrong password.
#[test]
fn postgres_errors_name_the_cause_and_the_fix() {
    let pg = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let kc = |sink: &str| {
        run(&mut weir(
            tmp.path(),
            ["run", "keyed-count", "--events", "100", "--sink", sink],
        ))
    };
    let r = kc(&pg.url("postgres", "nope"));
    assert_clean_error(
        &r,
        1,
        &[
            "`nope` does not exist",
            "CREATE TABLE nope (key BIGINT, count BIGINT);",
        ],
    );
    let text = tmp.path().join("a.txt");
    std::fs::write(&text, "some words\n").unwrap();
    let r = run(&mut weir(
        tmp.path(),
        [
            "run",
            "wordcount",
            "--source",
            &format!("files:{}", s(&text)),
            "--sink",
            &format!("{}?mode=upsert&key=word", pg.url("postgres", "words")),
        ],
    ));
    assert_clean_error(
        &r,
        1,
        &["CREATE TABLE words (word TEXT PRIMARY KEY, count BIGINT);"],
    );
    pg.exec("postgres", "CREATE TABLE nokey (key BIGINT, count BIGINT)");
    let r = kc(&format!(
        "{}?mode=upsert&key=key",
        pg.url("postgres", "nokey")
    ));
    assert_clean_error(&r, 1, &["ALTER TABLE nokey ADD PRIMARY KEY (key);"]);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let down = format!("127.0.0.1:{port}");
    let r = kc(&format!("postgres://postgres@{down}/postgres/counts"));
    assert_clean_error(&r, 1, &["cannot connect to PostgreSQL", &down, "running?"]);
    let r = kc(&format!(
        "postgres://postgres:wrong@127.0.0.1:{}/postgres/counts",
        pg.port()
    ));
    assert_clean_error(&r, 1, &["rejected the login", "password"]);
    assert!(
        !r.stderr.contains("wrong@"),
        "the password is shown\n{}",
        r.describe()
    );
    assert!(!tmp.path().join("weir-output").exists());
}
