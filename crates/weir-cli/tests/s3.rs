//! The `weir` command with `--checkpoint-dir s3://…` against a moto S3 server the test
//! starts on loopback: a run killed with SIGKILL resumes from S3 with `--restore latest`
//! (proven from the summary: it restored a checkpoint and read only the rest) once the dead
//! run's lease has expired, and `weir checkpoints list` reads the job's checkpoints from the
//! bucket.
#![cfg(feature = "s3")]

mod common;
#[path = "../../weir/tests/support/moto.rs"]
mod moto;

use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use weir::storage::open_backend;

/// How long the killed run's lease on the job folder lasts (renewed every third of it).
const LEASE_SECONDS: u64 = 10;

/// Complete checkpoints of the job folder at `url` (ids), read through the storage backend.
fn complete_on_s3(url: &str) -> Vec<u64> {
    let store = open_backend(std::path::Path::new(url)).expect("the S3 location opens");
    let mut ids: Vec<u64> = store
        .list("")
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.strip_prefix("chk-")?.parse().ok())
        .filter(|id| store.size(&format!("chk-{id}/_metadata")).is_ok())
        .collect();
    ids.sort_unstable();
    ids
}

#[test]
fn a_run_killed_with_sigkill_resumes_from_s3_and_lists_its_checkpoints() {
    moto::make_bucket("cli-kill");
    let tmp = tempfile::tempdir().unwrap();
    let dir = "s3://cli-kill/chk";
    let job = format!("{dir}/keyed-count");
    let (n, keys) = (600_000u64, 100u64);
    let args = |restore: bool| {
        let extra = [
            "--rate",
            if restore { "2000000" } else { "100000" },
            "--checkpoint-interval",
            "100ms",
            "--checkpoint-dir",
            dir,
        ];
        keyed_count_args(n, keys, &extra, restore)
    };

    // 6 s of input at the rate: killed once two checkpoints are complete on S3.
    let mut child = weir(tmp.path(), args(false))
        .envs(moto::child_env())
        .env("WEIR_S3_LEASE_SECONDS", LEASE_SECONDS.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("weir starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while complete_on_s3(&job).len() < 2 {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("weir exited ({st}) before two checkpoints completed on S3");
        }
        assert!(
            Instant::now() < deadline,
            "no two checkpoints on S3 in 60 s"
        );
        thread::sleep(Duration::from_millis(20));
    }
    sigkill_running(&mut child, "the run checkpointing to S3");
    let killed_at = Instant::now();
    let before = complete_on_s3(&job);
    // The killed run's lease on the job folder is still live: a resume right away is
    // refused, naming the holder, instead of writing beside a run that may still be alive.
    let early = run(weir(tmp.path(), args(true)).envs(moto::child_env()));
    assert_clean_error(&early, 1, &["is in use by another run", "lease"]);

    let list = run(weir(tmp.path(), ["checkpoints", "list", job.as_str()]).envs(moto::child_env()));
    list.assert_success();
    for id in &before {
        assert!(
            list.stdout.contains(&format!("chk-{id}")) || list.stdout.contains(&id.to_string()),
            "checkpoint {id} not listed\n{}",
            list.describe()
        );
    }
    assert!(list.stdout.contains("complete"), "{}", list.describe());

    // Once the dead run's lease has expired it is taken over (no run could renew it).
    let expired = killed_at + Duration::from_secs(LEASE_SECONDS) + Duration::from_millis(500);
    thread::sleep(expired.saturating_duration_since(Instant::now()));
    let resumed = run(weir(tmp.path(), args(true)).envs(moto::child_env()));
    resumed.assert_success();
    assert!(
        resumed.stdout.contains("verify: OK"),
        "{}",
        resumed.describe()
    );
    let attempts = assert_resumed(&resumed, n);
    let (id, _, path) = attempts[0]
        .restored
        .clone()
        .expect("the first attempt restored a checkpoint");
    assert!(before.contains(&id), "restored {id}, not one of {before:?}");
    assert!(
        path.to_string_lossy().starts_with("s3://cli-kill/chk/"),
        "{}",
        path.display()
    );
}

/// A `weir run` checkpointing to `dir` with `env`: it must fail before running.
fn refused_run(dir: &str, env: Vec<(&'static str, String)>) -> (Run, Duration) {
    let tmp = tempfile::tempdir().unwrap();
    let args = keyed_count_args(1000, 10, &["--checkpoint-dir", dir], false);
    let started = Instant::now();
    let r = run(weir(tmp.path(), args).envs(env));
    (r, started.elapsed())
}

#[test]
fn wrong_credentials_fail_the_run_at_once_with_the_way_out() {
    let auth = moto::Moto::start_with_auth();
    let (r, took) = refused_run("s3://creds/chk", auth.env());
    assert_clean_error(
        &r,
        1,
        &[
            "s3://creds/chk/keyed-count",
            "InvalidAccessKeyId",
            "the server refused the credentials: check AWS_ACCESS_KEY_ID",
        ],
    );
    assert_eq!(r.stderr.matches("error:").count(), 1, "{}", r.describe());
    assert!(took < Duration::from_secs(10), "retried for {took:?}");
}

#[test]
fn a_missing_bucket_fails_the_run_at_once_with_the_way_out() {
    let (r, took) = refused_run("s3://no-such-bucket/chk", moto::child_env());
    assert_clean_error(
        &r,
        1,
        &[
            "s3://no-such-bucket/chk/keyed-count",
            "the bucket does not exist: create it, or fix the bucket in the s3:// URL",
        ],
    );
    assert_eq!(r.stderr.matches("error:").count(), 1, "{}", r.describe());
    assert!(took < Duration::from_secs(10), "retried for {took:?}");
}

#[test]
fn no_credentials_at_all_fail_the_run_naming_the_variables() {
    let env: Vec<_> = moto::child_env()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("AWS_ACCESS") && !k.starts_with("AWS_SECRET"))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let args = keyed_count_args(1000, 10, &["--checkpoint-dir", "s3://nocreds/chk"], false);
    let r = run(weir(tmp.path(), args)
        .envs(env)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_PROFILE"));
    assert_clean_error(&r, 1, &["s3://nocreds/chk", "set AWS_ACCESS_KEY_ID"]);
}
