//! `weir transactions list|settle` against a real PostgreSQL server: keyed-count is
//! SIGKILLed after a checkpoint, its prepared transactions are listed with what the latest
//! completed checkpoint says of each and settled accordingly, orphans are left alone until
//! `--abort-orphans`, a second settle does nothing, and the resumed job is still exact.

mod common;
mod connectors_support;
#[path = "../../weir-connectors/tests/support/pg.rs"]
mod pg;

use common::*;
use connectors_support::*;
use pg::{PgServer, COUNTS_TABLE};

const PREFIX: &str = "keyed-count~";
/// A transaction of the job's sink pre-committed for a checkpoint that never completed:
/// the checkpoint says abort (its records are replayed from the checkpoint).
const AFTER_CHECKPOINT: &str = "keyed-count~sink-postgres~0-999999";
/// The job's prefix but a sink the checkpoint does not know: an orphan.
const ORPHAN: &str = "keyed-count~old-sink~0-1";
/// Another job's: never listed, never touched.
const FOREIGN: &str = "other-job~sink-postgres~0-1";

/// Prepares a transaction holding one row `(key, 1)` under `gid`.
fn prepare(pg: &PgServer, gid: &str, key: u64) {
    pg.exec(
        "postgres",
        &format!("BEGIN; INSERT INTO counts VALUES ({key}, 1); PREPARE TRANSACTION '{gid}'"),
    );
}

#[test]
fn transactions_are_listed_and_settled_as_the_checkpoint_says() {
    let pg = PgServer::start();
    pg.exec("postgres", COUNTS_TABLE);
    let tmp = tempfile::tempdir().unwrap();
    let chk = tmp.path().join("chk");
    let (n, keys) = (400_000u64, 37u64);
    let url = pg.url("postgres", "counts");
    let args = killed_after_a_checkpoint(tmp.path(), &chk, &url, (n, keys), 0x7a);
    let killed_open = pg.prepared("postgres", PREFIX);
    eprintln!("prepared transactions of the job after the kill: {killed_open:?}");
    prepare(&pg, AFTER_CHECKPOINT, 888_888);
    prepare(&pg, ORPHAN, 999_999);
    prepare(&pg, FOREIGN, 777_777);

    let chk_arg = checkpoint_arg(&chk);
    let by_job = ["--job", "keyed-count"];
    let list = transactions(tmp.path(), "list", &chk_arg, &url, &by_job);
    list.assert_success();
    let line = |gid: &str| {
        list.stdout
            .lines()
            .find(|l| l.contains(gid))
            .unwrap_or_else(|| panic!("{gid} not listed\n{}", list.describe()))
            .to_string()
    };
    assert!(line(AFTER_CHECKPOINT).trim_end().ends_with("abort"));
    assert!(line(ORPHAN).trim_end().ends_with("orphan"));
    assert!(!list.stdout.contains(FOREIGN), "{}", list.describe());
    for gid in &killed_open {
        let l = line(gid);
        assert!(l.ends_with("commit") || l.ends_with("abort"), "{gid}: {l}");
    }
    assert!(
        !list.stdout.contains(pg::PASSWORD),
        "the listing shows the password\n{}",
        list.describe()
    );

    // Without --yes and with no answer on stdin: nothing happens.
    let settle = |extra: &[&str]| transactions(tmp.path(), "settle", &chk_arg, &url, extra);
    let unconfirmed = settle(&[]);
    assert_eq!(unconfirmed.code(), Some(1), "{}", unconfirmed.describe());
    assert!(unconfirmed.stdout.contains("nothing settled"));
    assert_eq!(pg.prepared("postgres", PREFIX).len(), killed_open.len() + 2);

    let settled = settle(&["--yes"]);
    settled.assert_success();
    assert!(settled
        .stdout
        .contains(&format!("rolled back {AFTER_CHECKPOINT}")));
    assert!(settled.stdout.contains("1 orphan(s) left alone"));
    assert_eq!(pg.prepared("postgres", PREFIX), vec![ORPHAN.to_string()]);
    assert_eq!(
        pg.prepared("postgres", "other-job~"),
        vec![FOREIGN.to_string()]
    );
    let visible = pg.key_counts("counts");
    assert!(
        !visible.iter().any(|r| r.0 == 888_888),
        "an aborted row is visible"
    );
    if let Some(p) = prefix_problem(&group(visible)) {
        panic!("after settle, the committed rows are not exactly-once: {p}");
    }

    // Idempotent: the second settle finds nothing to do.
    let again = settle(&["--yes"]);
    again.assert_success();
    assert!(
        again.stdout.contains("nothing to settle"),
        "{}",
        again.describe()
    );
    assert_eq!(pg.prepared("postgres", PREFIX), vec![ORPHAN.to_string()]);

    // The job resumes from its checkpoint and ends exact: nothing committed twice.
    resume_exact(
        &mut weir(tmp.path(), args(true)),
        || pg.key_counts("counts"),
        n,
        keys,
        "postgres after settle and resume",
    );

    // Orphans only go with --abort-orphans; another job's transaction stays.
    let orphans = settle(&["--yes", "--abort-orphans"]);
    orphans.assert_success();
    assert!(orphans.stdout.contains(&format!("rolled back {ORPHAN}")));
    assert!(pg.prepared("postgres", PREFIX).is_empty());
    assert_eq!(
        pg.prepared("postgres", "other-job~"),
        vec![FOREIGN.to_string()]
    );
    pg.exec("postgres", &format!("ROLLBACK PREPARED '{FOREIGN}'"));
}

#[test]
fn transactions_errors_name_the_cause_and_the_way_out() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("chk");
    std::fs::create_dir_all(empty.join("keyed-count/chk-1")).unwrap();
    let url = "postgres://weir@127.0.0.1:1/db/counts";
    let no_checkpoint = transactions(tmp.path(), "list", &s(&empty), url, &[]);
    assert_clean_error(
        &no_checkpoint,
        1,
        &["no completed checkpoint", "keyed-count"],
    );

    // A completed checkpoint, but the server is down.
    let pg = PgServer::start();
    pg.exec("postgres", COUNTS_TABLE);
    let chk = tmp.path().join("real");
    let done = run(&mut weir(
        tmp.path(),
        keyed_count_updates(&chk, &pg.url("postgres", "counts"), 1000, 7, &[]),
    ));
    done.assert_success();
    let down = transactions(tmp.path(), "list", &s(&chk), url, &[]);
    assert_clean_error(
        &down,
        1,
        &[
            "cannot connect to PostgreSQL at 127.0.0.1:1",
            "is the server running",
        ],
    );
    let other = transactions(
        tmp.path(),
        "list",
        &s(&chk),
        "kafka://127.0.0.1:1/topic",
        &[],
    );
    assert_clean_error(
        &other,
        1,
        &[
            "kafka://127.0.0.1:1/topic",
            "PostgreSQL sinks",
            "file sinks",
            "JetStream sinks",
        ],
    );
    let no_job = transactions(tmp.path(), "list", &s(&chk), url, &["--job", "nope"]);
    assert_clean_error(&no_job, 1, &["no completed checkpoint of job `nope`"]);
}

/// A job abandoned between pre-commit and commit, deterministically: the sink's role may
/// hold three connections, which is what parallelism 2 opens up front (two data
/// connections, subtask 0's control connection for recovery). Subtask 1's control
/// connection, opened for its first `COMMIT PREPARED` after a completed checkpoint, is
/// refused, and with `--restart-strategy none` the job fails for good: that checkpoint
/// lists a transaction still prepared. `settle` commits it; the resumed run's recovery
/// commits the same name again, which must count as done, and the end is exact.
#[test]
fn a_transaction_the_checkpoint_lists_is_committed_once() {
    let pg = PgServer::start();
    pg.exec(
        "postgres",
        "CREATE TABLE counts (key BIGINT, count BIGINT); \
         CREATE ROLE sink LOGIN PASSWORD 'sink-pw' CONNECTION LIMIT 3; \
         GRANT ALL ON counts TO sink",
    );
    let tmp = tempfile::tempdir().unwrap();
    let chk = tmp.path().join("chk");
    let (n, keys) = (200_000u64, 29u64);
    let url = format!(
        "postgres://sink:sink-pw@127.0.0.1:{}/postgres/counts",
        pg.port()
    );
    let base = |restore: bool| {
        let mut extra = vec![
            "--parallelism",
            "2",
            "--checkpoint-interval",
            "50ms",
            "--rate",
            "100000",
        ];
        if restore {
            extra.extend(["--restore", "latest"]);
        } else {
            extra.extend(["--restart-strategy", "none"]);
        }
        keyed_count_updates(&chk, &url, n, keys, &extra)
    };
    let abandoned = run(&mut weir(tmp.path(), base(false)));
    assert_ne!(abandoned.code(), Some(0), "{}", abandoned.describe());
    assert!(
        abandoned.stderr.contains("too many connections")
            || abandoned.stdout.contains("too many connections"),
        "the job failed for another reason\n{}",
        abandoned.describe()
    );
    let open = pg.prepared("postgres", PREFIX);
    let chk_arg = checkpoint_arg(&chk);
    let list = transactions(tmp.path(), "list", &chk_arg, &url, &[]);
    list.assert_success();
    let commits: Vec<&str> = list
        .stdout
        .lines()
        .filter(|l| l.contains("~sink-postgres~1-") && l.trim_end().ends_with("commit"))
        .collect();
    assert!(
        !commits.is_empty(),
        "no listed transaction of subtask 1\n{}\nopen: {open:?}",
        list.describe()
    );

    let settled = transactions(tmp.path(), "settle", &chk_arg, &url, &["--yes"]);
    settled.assert_success();
    assert!(
        settled
            .stdout
            .contains("committed keyed-count~sink-postgres~1-"),
        "{}",
        settled.describe()
    );
    assert!(pg.prepared("postgres", PREFIX).is_empty());
    if let Some(p) = prefix_problem(&group(pg.key_counts("counts"))) {
        panic!("after settle, the committed rows are not exactly-once: {p}");
    }

    pg.exec("postgres", "ALTER ROLE sink CONNECTION LIMIT -1");
    resume_exact(
        &mut weir(tmp.path(), base(true)),
        || pg.key_counts("counts"),
        n,
        keys,
        "postgres after settle and resume",
    );
}
