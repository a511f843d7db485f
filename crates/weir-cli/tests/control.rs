//! The control endpoint of `weir run` and the commands that use it: stop with a savepoint,
//! restore at another parallelism, savepoint again, move a savepoint, status, tokens and
//! folder confinement.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::running::{wait_for_a_checkpoint, Running};
use common::*;

const EVENTS: u64 = 2_000_000;
const KEYS: u64 = 61;

/// A keyed-count run that writes its final counts into `<tmp>/out`.
fn job_args(tmp: &Path, parallelism: u32, rate: Option<&str>, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "keyed-count",
        "--events",
        &EVENTS.to_string(),
        "--keys",
        &KEYS.to_string(),
        "--parallelism",
        &parallelism.to_string(),
        "--checkpoint-interval",
        "200ms",
        "--checkpoint-dir",
        &checkpoint_arg(&tmp.join("ck")),
        "--savepoint-dir",
        &checkpoint_arg(&tmp.join("sp")),
        "--output",
        &s(&tmp.join("out")),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(r) = rate {
        a.extend(["--rate".to_string(), r.to_string()]);
    }
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// Starts `weir` with `args` in the background, its output in `tmp/<name>.log`.
fn start(tmp: &Path, args: Vec<String>, name: &str) -> Running {
    Running::start(&mut weir(tmp, &args), tmp.join(format!("{name}.log")))
}

/// Waits until the job has made progress (its first checkpoint completed).
fn wait_running(tmp: &Path) {
    wait_for_a_checkpoint(&tmp.join("ck/keyed-count"));
}

fn control(tmp: &Path, args: &[&str]) -> Run {
    run(&mut weir(tmp, args))
}

#[test]
fn stop_rescale_savepoint_again_and_finish_with_exact_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // Parallelism 2, stopped with a savepoint.
    let job = start(t, job_args(t, 2, Some("400000"), &["--verify"]), "p2");
    wait_running(t);
    let status = control(t, &["status", "--job", &job.addr]);
    status.assert_success();
    assert!(status.stdout.contains("running"), "{}", status.describe());
    assert!(
        status.stdout.contains("parallelism 2"),
        "{}",
        status.describe()
    );
    let stop = control(t, &["stop", "--job", &job.addr]);
    stop.assert_success();
    let sp1 = PathBuf::from(stop.stdout.trim());
    assert!(
        sp1.starts_with(checkpoint_dir(&t.join("sp"))) && is_object(&sp1.join("_metadata")),
        "{sp1:?}"
    );
    let (code, log) = job.finish();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("stopped with savepoint"), "{log}");
    assert!(!t.join("out").exists(), "a stopped run publishes no output");

    // Restored at parallelism 3: a savepoint (moved elsewhere later), then a stop.
    let restore = s(&sp1);
    let job = start(
        t,
        job_args(t, 3, Some("400000"), &["--restore", &restore]),
        "p3",
    );
    let sp2 = control(t, &["savepoint", "--job", &job.addr, "--dir", "nightly"]);
    sp2.assert_success();
    let sp2 = PathBuf::from(sp2.stdout.trim());
    assert!(
        sp2.starts_with(checkpoint_dir(&t.join("sp")).join("nightly")),
        "{sp2:?}"
    );
    let stop = control(t, &["stop", "--job", &job.addr]);
    stop.assert_success();
    let (code, log) = job.finish();
    assert_eq!(code, Some(0), "{log}");
    // It resumed from sp1's source positions, not from the beginning.
    let first = attempts(&log).into_iter().next();
    let (_, pos, from) = first
        .and_then(|a| a.restored)
        .unwrap_or_else(|| panic!("the p3 run did not restore\n{log}"));
    assert_eq!(from, sp1, "{log}");
    assert!(pos > 0 && pos < EVENTS, "{log}");

    // The intermediate savepoint, moved to another folder, restores at parallelism 1.
    let moved = checkpoint_dir(&t.join("moved")).join("sp");
    move_folder(&sp2, &moved);
    let r = run(&mut weir(
        t,
        job_args(t, 1, None, &["--restore", &s(&moved), "--verify"]),
    ));
    r.assert_success();
    assert!(r.stdout.contains("verify: OK"), "{}", r.describe());
    assert_eq!(
        restored_from(&r.stdout),
        Some(moved.clone()),
        "{}",
        r.describe()
    );
    assert_resumed(&r, EVENTS);
    assert_keyed_count_exact(&t.join("out"), EVENTS, KEYS);
    std::fs::remove_dir_all(t.join("out")).unwrap();

    // And the final savepoint of the p3 run, at parallelism 1 too.
    let sp3 = PathBuf::from(stop.stdout.trim());
    let r = run(&mut weir(
        t,
        job_args(t, 1, None, &["--restore", &s(&sp3), "--verify"]),
    ));
    r.assert_success();
    assert!(r.stdout.contains("verify: OK"), "{}", r.describe());
    assert_eq!(
        restored_from(&r.stdout),
        Some(sp3.clone()),
        "{}",
        r.describe()
    );
    assert_resumed(&r, EVENTS);
    assert_keyed_count_exact(&t.join("out"), EVENTS, KEYS);
    assert!(
        is_object(&sp1.join("_metadata")),
        "restores never delete a savepoint"
    );
}

#[test]
fn requests_outside_the_savepoint_dir_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let job = start(t, job_args(t, 1, Some("300000"), &[]), "job");
    for bad in ["../escape", "/tmp", "a/../../b"] {
        let r = control(t, &["savepoint", "--job", &job.addr, "--dir", bad]);
        assert_eq!(r.code(), Some(1), "{}", r.describe());
        assert!(
            r.stderr.contains("outside the job's savepoint directory"),
            "{}",
            r.describe()
        );
    }
    assert!(!t.join("escape").exists());
    control(t, &["stop", "--job", &job.addr]).assert_success();
    assert_eq!(job.finish().0, Some(0));
}

#[test]
fn beyond_loopback_the_endpoint_demands_its_token() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let token = t.join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let args = job_args(
        t,
        1,
        Some("300000"),
        &["--control", "0.0.0.0:0", "--control-token-file", &s(&token)],
    );
    let job = start(t, args, "job");
    let port = job.addr.rsplit(':').next().unwrap().to_string();
    let addr = format!("127.0.0.1:{port}");
    let r = control(t, &["status", "--job", &addr]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("refused") && r.stderr.contains("token"),
        "{}",
        r.describe()
    );
    let wrong = t.join("wrong");
    std::fs::write(&wrong, "guess").unwrap();
    let r = control(t, &["stop", "--job", &addr, "--token-file", &s(&wrong)]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    control(t, &["status", "--job", &addr, "--token-file", &s(&token)]).assert_success();
    control(t, &["stop", "--job", &addr, "--token-file", &s(&token)]).assert_success();
    assert_eq!(job.finish().0, Some(0));
}

#[test]
fn a_job_that_is_gone_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    // A port nobody listens on (bound then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let r = control(tmp.path(), &["savepoint", "--job", &addr]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("cannot reach the job's control endpoint"),
        "{}",
        r.describe()
    );
    assert!(r.stderr.lines().count() <= 2, "{}", r.describe());
}

#[test]
fn a_truncated_or_foreign_savepoint_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let job = start(t, job_args(t, 2, Some("300000"), &[]), "job");
    let stop = control(t, &["stop", "--job", &job.addr]);
    stop.assert_success();
    job.finish();
    let sp = PathBuf::from(stop.stdout.trim());
    let meta = sp.join("_metadata");
    let bytes = read_object(&meta);
    for (what, content) in [
        ("truncated", bytes[..bytes.len() / 2].to_vec()),
        ("foreign", b"{\"not\": \"weir\"}".to_vec()),
    ] {
        write_object(&meta, &content);
        let r = run(&mut weir(t, job_args(t, 2, None, &["--restore", &s(&sp)])));
        assert_eq!(r.code(), Some(1), "{what}\n{}", r.describe());
        assert!(r.stderr.contains("_metadata"), "{what}\n{}", r.describe());
        assert!(!r.stderr.contains("panicked"), "{what}\n{}", r.describe());
    }
}

/// Issue 10: the endpoint made a thread per connection before checking the token (500
/// half-open connections made 496 threads). Now a fixed pool holds any number of idle
/// connections (past its queue they get a 503 at once), closes them when their request
/// deadline passes, and answers again.
#[test]
fn half_open_connections_neither_add_threads_nor_silence_the_endpoint() {
    if !Path::new("/proc/self/task").exists() {
        return; // threads are counted through Linux's /proc
    }
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // 40 s of input at the rate: the job outlives the flood, its 5 s request deadline and
    // the stop below however slow the machine (the rate bounds the run from below).
    let job = start(t, job_args(t, 1, Some("50000"), &[]), "job");
    wait_running(t);
    let tasks = format!("/proc/{}/task", job.child.id());
    let threads = || std::fs::read_dir(&tasks).unwrap().count();
    let before = threads();
    let flood: Vec<std::net::TcpStream> = (0..300)
        .map(|_| std::net::TcpStream::connect(&job.addr).unwrap())
        .collect();
    // Threads are counted once the endpoint has taken the whole flood: the last connection
    // has its answer (a 503 past the queue, or its close at the request deadline), so
    // every earlier one was accepted — not after a sleep a loaded machine may outlast.
    let mut last = &flood[flood.len() - 1];
    last.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut byte = [0u8; 1];
    if let Err(e) = std::io::Read::read(&mut last, &mut byte) {
        use std::io::ErrorKind::{TimedOut, WouldBlock};
        assert!(
            !matches!(e.kind(), TimedOut | WouldBlock),
            "the endpoint never took the flood's last connection: {e}"
        );
    }
    let during = threads();
    eprintln!("job threads: {before} before, {during} with 300 idle connections");
    assert!(
        during < before + 10,
        "{before} threads before, {during} with 300 idle connections"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = control(t, &["status", "--job", &job.addr]);
        if r.code() == Some(0) {
            break;
        }
        assert!(Instant::now() < deadline, "{}", r.describe());
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(flood);
    control(t, &["stop", "--job", &job.addr]).assert_success();
    assert_eq!(job.finish().0, Some(0));
}

/// A peer that accepts the connection and then says nothing (not a Weir job, or a hung
/// one): `weir status` gives up after its timeout with one error naming the address,
/// instead of waiting for ever.
#[test]
fn status_against_a_peer_that_never_answers_times_out_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    // Accept and hold every connection without reading or answering.
    let holder = std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming().take(4) {
            held.push(conn);
        }
        std::thread::sleep(Duration::from_secs(60));
    });
    let r = control(tmp.path(), &["status", "--job", &addr]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains(&addr), "{}", r.describe());
    assert!(r.stderr.lines().count() <= 2, "{}", r.describe());
    drop(holder); // detached: it ends with the test process
}
