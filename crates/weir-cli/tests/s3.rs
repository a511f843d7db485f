//! The `weir` command with `--checkpoint-dir s3://…` against a moto S3 server the test
//! starts on loopback: a run killed with SIGKILL resumes from S3 with `--restore latest`
//! (proven from the summary: it restored a checkpoint and read only the rest) once the dead
//! run's lease has expired, and `weir checkpoints list` reads the job's checkpoints from the
//! bucket; wrong credentials, a missing bucket and no credentials fail the run at once with
//! the way out; the server killed mid-run fails checkpoints while the job goes on, exactly;
//! savepoints go to S3 and restore from there or from a local copy, and the inspection
//! tools read them.
#![cfg(feature = "s3")]

mod common;

use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use common::moto;
use common::outage;
use common::*;
use weir::storage::backend::StorageBackend;
use weir::storage::open_backend;

/// How long the killed run's lease on the job folder lasts (renewed every third of it).
const LEASE_SECONDS: u64 = 10;

/// Complete checkpoints of the job folder at `url` (ids), read through the storage backend.
fn complete_on_s3(url: &str) -> Vec<u64> {
    let store = open_backend(std::path::Path::new(url)).expect("the S3 location opens");
    complete_in(&*store)
}

/// Complete checkpoints (ids) of the job folder `store` is rooted at.
fn complete_in(store: &dyn StorageBackend) -> Vec<u64> {
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

/// Another run takes the job folder's lease over while the job runs (here: the lease
/// object is overwritten with a live lease of a rival, as a run that took over an expired
/// lease leaves it). The job stops at once with one error naming the rival and exit code 1
/// — no restart, though its restart strategy (the default, unbounded) and
/// `--tolerable-checkpoint-failures` would allow many — completes no more checkpoints, and
/// leaves the rival's lease in place.
#[test]
fn a_run_whose_lease_is_taken_over_while_running_stops_at_once() {
    moto::make_bucket("lost-lease");
    let tmp = tempfile::tempdir().unwrap();
    let job = "s3://lost-lease/chk/keyed-count";
    // Far more input than the test waits for: only losing the lease ends this run.
    let extra = [
        "--rate",
        "50000",
        "--checkpoint-interval",
        "100ms",
        "--tolerable-checkpoint-failures",
        "1000",
        "--checkpoint-dir",
        "s3://lost-lease/chk",
    ];
    let args = keyed_count_args(100_000_000, 50, &extra, false);
    let log = tmp.path().join("run.log");
    let mut child = spawn_logged(
        weir(tmp.path(), args)
            .envs(moto::child_env())
            .env("WEIR_S3_LEASE_SECONDS", "3"),
        &log,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while complete_on_s3(job).len() < 2 {
        if let Some(st) = child.try_wait().unwrap() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("weir exited ({st}) before two checkpoints completed on S3\n{text}");
        }
        assert!(
            Instant::now() < deadline,
            "no two checkpoints on S3 in 60 s"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let store = open_backend(std::path::Path::new(job)).unwrap();
    let rival = format!("{} a rival run (pid 1)", u64::MAX / 2);
    let mut w = store.put("_lease").unwrap();
    w.write(rival.as_bytes()).unwrap();
    w.commit(&[]).unwrap();
    let taken_over = complete_on_s3(job);

    // The lease is renewed every second and before each checkpoint completes, so the run
    // finds out within about a second; a minute means it went on.
    let status = wait_deadline(
        &mut child,
        Duration::from_secs(60),
        "the run that lost its lease",
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{text}");
    for needle in [
        "lost the checkpoint folder s3://lost-lease/chk/keyed-count",
        "taken over by a rival run (pid 1)",
        "not restarting",
        "job failed after 1 attempt(s)",
    ] {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }
    assert!(!text.contains("restarting from"), "it restarted\n{text}");
    assert!(!text.contains("panicked"), "{text}");
    // No checkpoint completed after the takeover (one whose lease renewal just preceded
    // the overwrite may still have landed), and the rival's lease is untouched.
    let after = complete_on_s3(job);
    assert!(
        after.iter().filter(|id| !taken_over.contains(id)).count() <= 1,
        "checkpoints completed after the takeover: {taken_over:?} then {after:?}\n{text}"
    );
    let lease = store.get("_lease", None).unwrap();
    assert_eq!(String::from_utf8_lossy(&lease), rival);
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

/// With no credentials and `AWS_EC2_METADATA_DISABLED=true`, the client never goes to the
/// instance-metadata address: the run is refused at once, naming the variable.
#[test]
fn metadata_disabled_without_credentials_never_asks_the_instance_metadata_service() {
    let tmp = tempfile::tempdir().unwrap();
    let args = keyed_count_args(1000, 10, &["--checkpoint-dir", "s3://nocreds/chk"], false);
    let mut cmd = weir(tmp.path(), args);
    for k in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_SKIP_SIGNATURE",
    ] {
        cmd.env_remove(k);
    }
    let r = run(cmd
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1"));
    assert_clean_error(
        &r,
        1,
        &[
            "s3://nocreds/chk",
            "AWS_EC2_METADATA_DISABLED",
            "set AWS_ACCESS_KEY_ID",
        ],
    );
    assert!(
        !r.stderr.contains("error sending request"),
        "{}",
        r.describe()
    );
}

/// The S3 server is killed while the job checkpoints to it, and started again (empty:
/// moto keeps everything in memory) 1.5 s later. Checkpoints fail meanwhile and the job
/// goes on under `--tolerable-checkpoint-failures`; once the server is back, checkpoints
/// complete again. Nothing already committed is lost (the `files:` sink's part files
/// committed before the outage are all there, unchanged), and the committed output is
/// exact (`--verify`).
#[test]
fn the_server_stopped_mid_checkpoint_fails_checkpoints_and_the_job_goes_on_exactly() {
    moto::server(); // this process's AWS_* keys, for reading the bucket
    let mut m = moto::Moto::start();
    m.make_bucket("outage");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("sink");
    let sink = format!("files:{}", s(&out));
    let (n, keys) = (600_000u64, 50u64);
    let extra = [
        "--emit",
        "updates",
        "--rate",
        "100000",
        "--checkpoint-interval",
        "100ms",
        "--tolerable-checkpoint-failures",
        "1000",
        "--checkpoint-dir",
        "s3://outage/chk",
        "--sink",
        &sink,
        "--verify",
    ];
    let args = keyed_count_args(n, keys, &extra, false);
    let log = tmp.path().join("run.log");
    let mut child = spawn_logged(weir(tmp.path(), args).envs(m.env()), &log);
    let store =
        weir::storage::open_with_endpoint("s3://outage/chk/keyed-count", &m.endpoint()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while complete_in(&store).len() < 2 {
        assert!(child.try_wait().unwrap().is_none(), "weir exited early");
        assert!(
            Instant::now() < deadline,
            "no two checkpoints on S3 in 60 s"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let committed = committed_parts(&out);
    assert!(!committed.is_empty(), "nothing committed before the outage");

    m.stop();
    thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the job died with the server"
    );
    m.restart();
    m.make_bucket("outage");
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(&log).unwrap();
            panic!("the run through the outage did not finish in time\n{text}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("verify: OK"), "{text}");
    let failed: u64 = text
        .split(" failed")
        .next()
        .and_then(|t| t.rsplit(", ").next())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("no failed-checkpoint count in\n{text}"));
    assert!(
        failed >= 1,
        "no checkpoint failed during the outage\n{text}"
    );
    assert!(
        !complete_in(&store).is_empty(),
        "no checkpoint completed once the server was back\n{text}"
    );
    let after = committed_parts(&out);
    for (name, bytes) in &committed {
        assert_eq!(after.get(name), Some(bytes), "{name} lost or changed");
    }
}

/// The committed part files (`part-*`) of a `files:` sink folder, by name.
fn committed_parts(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                .filter(|(name, _)| name.starts_with("part-"))
                .map(|(name, p)| (name, std::fs::read(p).unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

/// Copies every object under `url` into the local folder `to`.
fn copy_to_local(url: &str, to: &std::path::Path) {
    fn walk(store: &dyn StorageBackend, key: &str, to: &std::path::Path) {
        for name in store.list(key).unwrap() {
            let child = if key.is_empty() {
                name.clone()
            } else {
                format!("{key}/{name}")
            };
            if store.size(&child).is_ok() {
                std::fs::create_dir_all(to.join(key)).unwrap();
                std::fs::write(to.join(&child), store.get(&child, None).unwrap()).unwrap();
            } else {
                walk(store, &child, to);
            }
        }
    }
    let store = open_backend(std::path::Path::new(url)).unwrap();
    walk(&*store, "", to);
}

/// The control address a `weir run` printed into `log`.
fn control_address(child: &mut std::process::Child, log: &std::path::Path) -> String {
    let deadline = Instant::now() + RUN_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(addr) = after_on_complete_line(&text, "control endpoint ")
            .and_then(|rest| rest.split_whitespace().next())
        {
            return addr.to_string();
        }
        assert!(child.try_wait().unwrap().is_none(), "weir exited\n{text}");
        assert!(Instant::now() < deadline, "no control address in\n{text}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// `--savepoint-dir s3://…`: `weir savepoint` and `weir stop` write savepoints to S3; the
/// job restores from the S3 savepoint and from a local copy of one, exactly; `weir state
/// ls/dump` and `weir checkpoints inspect` read the S3 savepoint and tell the same as on
/// the local copy.
#[test]
fn savepoints_go_to_s3_and_restore_from_s3_or_a_local_copy() {
    moto::make_bucket("savepoints");
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (n, keys) = (1_000_000u64, 61u64);
    let job_args = |chk: &str, rate: &str, restore: Option<&str>| {
        let mut extra = vec!["--rate", rate, "--checkpoint-interval", "200ms"];
        extra.extend([
            "--checkpoint-dir",
            chk,
            "--savepoint-dir",
            "s3://savepoints/saves",
        ]);
        let mut a = keyed_count_args(n, keys, &extra, false);
        if let Some(r) = restore {
            a.extend(["--restore", r, "--verify"].map(String::from));
        }
        a
    };
    let log = t.join("first.log");
    let mut child = spawn_logged(
        weir(t, job_args("s3://savepoints/chk", "200000", None)).envs(moto::child_env()),
        &log,
    );
    let addr = control_address(&mut child, &log);
    let deadline = Instant::now() + RUN_TIMEOUT;
    while complete_on_s3("s3://savepoints/chk/keyed-count").is_empty() {
        assert!(Instant::now() < deadline, "no checkpoint on S3");
        thread::sleep(Duration::from_millis(20));
    }
    let sp = run(weir(t, ["savepoint", "--job", &addr]).envs(moto::child_env()));
    sp.assert_success();
    let sp1 = sp.stdout.trim().to_string();
    assert!(
        sp1.starts_with("s3://savepoints/saves/"),
        "{}",
        sp.describe()
    );
    let stop = run(weir(t, ["stop", "--job", &addr]).envs(moto::child_env()));
    stop.assert_success();
    let sp2 = stop.stdout.trim().to_string();
    assert!(
        sp2.starts_with("s3://savepoints/saves/"),
        "{}",
        stop.describe()
    );
    let status = wait_deadline(&mut child, RUN_TIMEOUT, "the stopped run");
    assert_eq!(
        status.code(),
        Some(0),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    for p in [&sp1, &sp2] {
        let store = open_backend(std::path::Path::new(p)).unwrap();
        assert!(store.size("_metadata").is_ok(), "{p} has no _metadata");
    }

    // Restored from the S3 savepoint (into a local checkpoint folder).
    let here = t.join("from-s3");
    std::fs::create_dir_all(&here).unwrap();
    let r = run(weir(&here, job_args("chk", "5000000", Some(&sp2))).envs(moto::child_env()));
    r.assert_success();
    assert!(r.stdout.contains("verify: OK"), "{}", r.describe());
    // One attempt, from the savepoint mid-input, reading only the rest (`assert_resumed`
    // looks for `_metadata` on the local disk).
    let all = attempts(&r.stdout);
    assert_eq!(all.len(), 1, "{}", r.describe());
    let (_, pos, path) = all[0].restored.clone().expect("restored the savepoint");
    assert_eq!(path.to_string_lossy(), sp2, "{}", r.describe());
    assert!(pos > 0 && pos + all[0].read == n, "{}", r.describe());

    // Copied to a local folder, the first savepoint restores too.
    let copy = t.join("copied-savepoint");
    copy_to_local(&sp1, &copy);
    let here = t.join("from-copy");
    std::fs::create_dir_all(&here).unwrap();
    let r = run(weir(&here, job_args("chk", "5000000", Some(&s(&copy)))).envs(moto::child_env()));
    r.assert_success();
    assert!(r.stdout.contains("verify: OK"), "{}", r.describe());
    assert_resumed(&r, n);

    // The inspection tools read the S3 savepoint, and say what they say of the copy.
    let tool = |args: &[&str]| {
        let r = run(weir(t, args).envs(moto::child_env()));
        r.assert_success();
        r.stdout
    };
    let local = s(&copy);
    let dump = ["state", "dump", "--uid", "count", "--state", "count"];
    let dump_s3 = tool(&[&dump[..], &[&sp1, "--format", "json"]].concat());
    let dump_local = tool(&[&dump[..], &[&local, "--format", "json"]].concat());
    assert!(dump_s3.contains("\"key\""), "{dump_s3}");
    assert_eq!(dump_s3, dump_local.replace(&local, &sp1));
    let ls_s3 = tool(&["state", "ls", &sp1]);
    let ls_local = tool(&["state", "ls", &local]);
    assert!(ls_s3.contains("count"), "{ls_s3}");
    assert_eq!(ls_s3, ls_local.replace(&local, &sp1));
    let inspect_s3 = tool(&["checkpoints", "inspect", &sp1, "--format", "json"]);
    let inspect_local = tool(&["checkpoints", "inspect", &local, "--format", "json"]);
    assert!(inspect_s3.contains("records"), "{inspect_s3}");
    assert_eq!(inspect_s3, inspect_local.replace(&local, &sp1));
}

/// Starts keyed-count (`n` events at 100 000 per second, checkpoints every 100 ms into
/// `s3://<bucket>/chk`) through a relay to a fresh moto server, waits for two complete
/// checkpoints, and cuts the relay: the checkpoint store is out of reach from then on, the
/// server keeping its data. Returns the server, the relay, the running child and its log.
fn run_into_an_outage(
    tmp: &std::path::Path,
    bucket: &str,
    n: u64,
    extra: &[&str],
) -> (
    moto::Moto,
    outage::Relay,
    std::process::Child,
    std::path::PathBuf,
) {
    moto::server(); // this process's AWS_* keys, for reading the bucket
    let m = moto::Moto::start();
    m.make_bucket(bucket);
    let relay = outage::Relay::start(m.port);
    let dir = format!("s3://{bucket}/chk");
    let out = s(&tmp.join("out"));
    let mut flags = vec![
        "--rate",
        "100000",
        "--checkpoint-interval",
        "100ms",
        "--checkpoint-dir",
        &dir,
        "--output",
        &out,
    ];
    flags.extend(extra);
    let args = keyed_count_args(n, 50, &flags, false);
    let log = tmp.join("run.log");
    let mut child = spawn_logged(weir(tmp, args).envs(moto::env_for(relay.port)), &log);
    let store =
        weir::storage::open_with_endpoint(&format!("{dir}/keyed-count"), &m.endpoint()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while complete_in(&store).len() < 2 {
        assert!(child.try_wait().unwrap().is_none(), "weir exited early");
        assert!(
            Instant::now() < deadline,
            "no two checkpoints on S3 in 60 s"
        );
        thread::sleep(Duration::from_millis(20));
    }
    relay.cut();
    (m, relay, child, log)
}

/// Waits for `child` to end (at most [`RUN_TIMEOUT`] plus `more`) and returns its status
/// and log.
fn finish(
    mut child: std::process::Child,
    log: &std::path::Path,
    more: Duration,
) -> (std::process::ExitStatus, String) {
    let status = wait_deadline(&mut child, RUN_TIMEOUT + more, "the run through the outage");
    (status, std::fs::read_to_string(log).unwrap())
}

/// The checkpoint store out of reach for 7 s mid-run, with every setting at its default
/// (no tolerated checkpoint failures, the exponential-delay restart strategy): the
/// failed checkpoint fails the attempt, the restart cannot read its checkpoint back while
/// the store is away and tries again with the strategy's backoff instead of ending the
/// job, and once the store is back the run resumes from that checkpoint and ends exact.
#[test]
fn a_seven_second_outage_of_the_store_is_waited_out_and_the_run_ends_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 700_000u64;
    let (_m, relay, mut child, log) = run_into_an_outage(tmp.path(), "blip", n, &["--verify"]);
    thread::sleep(Duration::from_secs(7));
    if let Some(status) = child.try_wait().unwrap() {
        let text = std::fs::read_to_string(&log).unwrap();
        panic!("the job ended ({status}) during a 7 s outage of its store\n{text}");
    }
    relay.restore();
    let (status, text) = finish(child, &log, Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("verify: OK"), "{text}");
    assert!(
        text.contains("(the checkpoint storage is out of reach")
            && text.contains("trying again in"),
        "the restart never found its store away\n{text}"
    );
    let from = text
        .lines()
        .find_map(|l| l.split(" from checkpoint ").nth(1))
        .unwrap_or_else(|| panic!("no attempt resumed from a checkpoint\n{text}"));
    assert!(
        text.contains("s3://blip/chk/keyed-count/chk-"),
        "resumed from {from}\n{text}"
    );
    assert_keyed_count_exact(&tmp.path().join("out"), n, 50);
}

/// An outage longer than the restart strategy waits ends the job with an error that names
/// the store, the checkpoint it could not read back, and the way out.
#[test]
fn an_outage_longer_than_the_restart_strategy_waits_ends_with_the_store_named() {
    let tmp = tempfile::tempdir().unwrap();
    let strategy = [
        "--restart-strategy",
        "fixed-delay",
        "--restart-attempts",
        "3",
        "--restart-delay",
        "100ms",
    ];
    let (_m, _relay, child, log) = run_into_an_outage(tmp.path(), "gone", 700_000, &strategy);
    let (status, text) = finish(child, &log, Duration::ZERO);
    assert_eq!(status.code(), Some(1), "{text}");
    for needle in [
        "error: ",
        "cannot reload checkpoint s3://gone/chk/keyed-count/chk-",
        "the server cannot be reached",
    ] {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }
    assert!(!text.contains("panicked"), "{text}");
    assert!(
        !tmp.path().join("out").exists(),
        "a failed run published its output"
    );
}
