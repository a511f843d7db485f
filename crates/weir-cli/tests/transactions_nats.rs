//! `weir transactions list|settle` against a real `nats-server -js`: keyed-count's
//! JetStream sink (write-ahead two-phase commit) completes a checkpoint whose commit cannot
//! publish, the job is SIGKILLed, its pending commits are listed with what is missing from
//! the stream and settled by publishing exactly that, a second settle does nothing, and the
//! resumed job is still exact — nothing published twice.
//!
//! How the commit is made to fail, whatever the machine's speed: the generator is held
//! (`--hold-at`) until every record before the hold is in the stream; then the stream stops
//! capturing the sink's subject (a misconfiguration a user can make), the generator is
//! released, and the next checkpoint with records completes but its commit fails, as does
//! the reconnect of the restart; once the log shows the failed commit, the job is SIGKILLed
//! (or has ended by itself, refused by the stream: the same state, nothing published).

mod common;
mod connectors_support;
mod nats_support;

use std::time::{Duration, Instant};

use common::*;
use connectors_support::*;
use nats_support::{free_port, read_counts, NatsServer};

/// The safety net of the waits below: generous, for a loaded machine (each wait ends as
/// soon as its condition holds).
const WAIT: Duration = Duration::from_secs(180);

/// Polls `done` every 20 ms until it holds; panics naming `what` after `limit`.
fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn jetstream_commits_are_listed_and_settled_as_the_checkpoint_says() {
    let server = NatsServer::start();
    let client = server.client();
    client.create_stream("counts", Duration::from_secs(300));
    let tmp = tempfile::tempdir().unwrap();
    let chk = tmp.path().join("chk");
    let job_dir = chk.join("keyed-count");
    let (n, keys, hold) = (60_000u64, 37u64, 10_000u64);
    let sink = format!("{}/counts?subject=counts.out", server.url());
    let release = tmp.path().join("release");
    let args = |restore: bool| {
        let (hold, release) = (hold.to_string(), release.display().to_string());
        let mut extra = vec![
            "--parallelism",
            "2",
            "--checkpoint-interval",
            "50ms",
            "--rate",
            "100000",
            "--hold-at",
            &hold,
            "--release-file",
            &release,
            "--identical-failure-limit",
            "off",
        ];
        if restore {
            extra.extend(["--restore", "latest"]);
        }
        keyed_count_updates(&chk, &sink, n, keys, &extra)
    };

    // 1. Every record before the hold (each of the 2 generator subtasks holds after
    //    `hold` events) is committed: the stream holds them all.
    let log = tmp.path().join("run.log");
    let mut child = spawn_logged(&mut weir(tmp.path(), args(false)), &log);
    wait_until("the records before the hold reach the stream", WAIT, || {
        client.count("counts") == 2 * hold
    });
    // 2. The stream stops capturing the sink's subject; the next checkpoint's commit fails.
    client.set_subjects("counts", &["parked.>"]);
    let before = completed_checkpoints(&job_dir).last().copied().unwrap_or(0);
    std::fs::write(&release, b"").unwrap();
    // Its commit fails; the restart's reconnect is refused too (the stream no longer
    // captures the subject), which ends the process — unless the SIGKILL below comes first.
    // Either way the process is gone with the checkpoint's commits pending.
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("a commit fails after a checkpoint completed", WAIT, || {
        let done = completed_checkpoints(&job_dir).last().copied().unwrap_or(0) > before;
        done && log_text().contains("committing transaction")
    });
    // The process may end by itself at any moment now, even between a check that it runs
    // and the kill: a kill of one that already exited is harmless, and either end counts
    // (a signal, or a failure exit), never a clean one.
    let _ = child.kill();
    let st = child.wait().expect("wait for the job whose commits fail");
    assert!(
        st.code().is_none() || !st.success(),
        "the job ended well:\n{}",
        log_text()
    );
    let newest = *completed_checkpoints(&job_dir).last().unwrap();
    assert!(newest > before, "no checkpoint completed after the release");
    assert_eq!(
        client.count("counts"),
        2 * hold,
        "nothing new was published"
    );
    client.set_subjects("counts", &["counts.>"]);

    // 3. The checkpoint's pending commits are listed, with their missing messages.
    let chk_arg = checkpoint_arg(&chk);
    let list = transactions(tmp.path(), "list", &chk_arg, &sink, &[]);
    list.assert_success();
    let rows: Vec<&str> = list
        .stdout
        .lines()
        .filter(|l| l.contains("keyed-count~"))
        .collect();
    assert!(
        !rows.is_empty(),
        "no pending commit listed\n{}",
        list.describe()
    );
    for r in &rows {
        assert!(
            r.contains("commit (publish ") && r.contains(&format!("chk-{newest}")),
            "{r}\n{}",
            list.describe()
        );
    }

    // 4. Settle publishes exactly the missing messages; a second settle finds nothing.
    let settle = || transactions(tmp.path(), "settle", &chk_arg, &sink, &["--yes"]);
    let settled = settle();
    settled.assert_success();
    assert_eq!(
        settled.stdout.matches("message(s) published").count(),
        rows.len(),
        "{}",
        settled.describe()
    );
    let after = read_counts(&server, "counts");
    assert!(after.len() as u64 > 2 * hold, "settle published nothing");
    if let Some(p) = prefix_problem(&group(after.clone())) {
        panic!("after settle, the stream is not exactly-once: {p}");
    }
    let again = settle();
    again.assert_success();
    assert!(
        again.stdout.contains("nothing to settle"),
        "{}",
        again.describe()
    );
    assert_eq!(
        read_counts(&server, "counts"),
        after,
        "a second settle published"
    );

    // 5. The job resumes from its checkpoint (its recovery commits the same handles, which
    //    the stream's duplicate window drops) and ends exact.
    resume_exact(
        &mut weir(tmp.path(), args(true)),
        || read_counts(&server, "counts"),
        n,
        keys,
        "nats after settle and resume",
    );
}

#[test]
fn a_nats_sink_that_cannot_be_reached_is_named_with_the_way_out() {
    let tmp = tempfile::tempdir().unwrap();
    let chk = tmp.path().join("chk");
    // A checkpoint to judge by: a short run with a files sink.
    let out = tmp.path().join("out");
    let sink = format!("files:{}", out.display());
    let ran = run(&mut weir(
        tmp.path(),
        keyed_count_updates(&chk, &sink, 2_000, 7, &["--checkpoint-interval", "50ms"]),
    ));
    ran.assert_success();
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}/counts");
    let list = transactions(tmp.path(), "list", &checkpoint_arg(&chk), &url, &[]);
    assert!(!list.status.success(), "{}", list.describe());
    assert!(
        list.stderr.contains(&format!("127.0.0.1:{port}")) && list.stderr.contains("nats-server"),
        "{}",
        list.describe()
    );
}
