//! One job across worker processes (issue 24): a coordinator (`weir run … --workers N
//! --cluster-listen 127.0.0.1:0`) and `weir worker` processes on loopback, every port
//! chosen by the system. The input is held (`--hold-at`, `--release-file`) until the test
//! has seen what it waits for — a checkpoint taken mid-input, a worker killed — so nothing
//! depends on the machine's speed; every wait is bounded and says what it waited for.

mod cluster_support;
mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;

use cluster_support::{
    assert_worker_restored, is_registered, keyed_count_verified, restored_held_checkpoint,
    spawn_coordinator, start_worker, wait_for_held, wait_for_line, wait_for_log, HELD, TIMEOUT,
};
use common::*;

/// Events of the job; each of the two generator subtasks holds after
/// [`HOLD_AT`](cluster_support::HOLD_AT) of its own.
const EVENTS: u64 = 200_000;
/// Keys (not a divisor of [`EVENTS`]).
const KEYS: u64 = 97;

/// A cluster of one test: its folder, the coordinator and the workers' logs.
struct Cluster {
    dir: PathBuf,
    coordinator: Child,
    /// The coordinator's stderr (notices, the workers it deployed to).
    coordinator_log: PathBuf,
    /// Its stdout (the run summary, the verdict).
    coordinator_out: PathBuf,
    address: String,
}

/// The coordinator's arguments: keyed-count on `workers` workers, its input held until
/// [`Cluster::release`], a worker silent for `heartbeat` lost, listening on `listen`.
fn coordinator_args(workers: usize, heartbeat: &str, listen: &str) -> Vec<String> {
    let workers = workers.to_string();
    let mut extra = vec!["--restart-delay", "10ms"];
    // Every checkpoint stays: the one the test reads is never deleted under it.
    extra.extend(["--retained-checkpoints", "1000000"]);
    extra.extend(HELD);
    extra.extend(["--workers", &workers, "--cluster-listen", listen]);
    extra.extend(["--heartbeat-timeout", heartbeat]);
    keyed_count_verified(EVENTS, KEYS, &extra)
}

impl Cluster {
    /// Starts the coordinator of keyed-count on `workers` workers, its input held until
    /// [`Cluster::release`], and waits until it listens.
    fn start(dir: &Path, workers: usize) -> Cluster {
        Self::start_with(dir, workers, "30s")
    }

    /// [`Cluster::start`], a worker silent for `heartbeat` counting as lost.
    fn start_with(dir: &Path, workers: usize, heartbeat: &str) -> Cluster {
        let args = coordinator_args(workers, heartbeat, "127.0.0.1:0");
        Self::spawn(dir, &args, "coordinator")
    }

    /// Starts a coordinator with `args`, logging to `<name>.log` and `<name>.out`, and
    /// waits until it listens.
    fn spawn(dir: &Path, args: &[String], name: &str) -> Cluster {
        let log = dir.join(format!("{name}.log"));
        let out = dir.join(format!("{name}.out"));
        let (coordinator, address) = spawn_coordinator(dir, args, &log, &out);
        Cluster {
            dir: dir.to_path_buf(),
            coordinator,
            coordinator_log: log,
            coordinator_out: out,
            address,
        }
    }

    /// Starts a worker and waits until the coordinator registered it: workers get their
    /// ids (and so their subtasks) in the order the test starts them.
    fn registered_worker(&mut self, name: &str) -> Child {
        self.registered_worker_with(name, &[])
    }

    /// [`Cluster::registered_worker`] with `extra` flags.
    fn registered_worker_with(&mut self, name: &str, extra: &[&str]) -> Child {
        let child = self.worker_with(Path::new(BIN), name, extra);
        let what = format!("worker {name} registered");
        let (coordinator, log) = (&mut self.coordinator, &self.coordinator_log);
        wait_for_log(coordinator, log, &what, |l| is_registered(l, name));
        child
    }

    /// Starts `weir worker` named `name` (its log `<name>.log`), from `binary`.
    fn worker_from(&self, binary: &Path, name: &str) -> Child {
        self.worker_with(binary, name, &[])
    }

    /// Starts `weir worker` named `name` from `binary` with `extra` flags.
    fn worker_with(&self, binary: &Path, name: &str, extra: &[&str]) -> Child {
        start_worker(&self.dir, binary, &self.address, name, extra)
    }

    /// Waits until the coordinator's log has a line holding `needle`; returns that line.
    fn wait_for(&mut self, needle: &str) -> String {
        let rest = wait_for_line(&mut self.coordinator, &self.coordinator_log, needle);
        format!("{needle}{rest}")
    }

    fn worker(&self, name: &str) -> Child {
        self.worker_from(Path::new(BIN), name)
    }

    fn job_dir(&self) -> PathBuf {
        self.dir.join("chk").join("keyed-count")
    }

    /// Lets the held input go on.
    fn release(&self) {
        fs::write(self.dir.join("release"), b"go").unwrap();
    }

    /// Waits for the coordinator to end: its exit code, stdout and stderr.
    fn finish(mut self) -> (i32, String, String) {
        let status = wait_deadline(&mut self.coordinator, TIMEOUT, "the coordinator");
        let out = fs::read_to_string(&self.coordinator_out).unwrap_or_default();
        (status.code().unwrap_or(-1), out, self.log())
    }

    /// [`Cluster::finish`], asserting that the coordinator exited 0, verified, and that the
    /// output holds the exact count of every key: its stdout and stderr.
    fn finish_exact(self) -> (String, String) {
        let dir = self.dir.clone();
        let (code, out, log) = self.finish();
        assert_eq!(code, 0, "the coordinator failed:\n{out}\n{log}");
        assert!(out.contains("verify: OK"), "{out}\n{log}");
        assert_keyed_count_exact(&dir.join("out"), EVENTS, KEYS);
        (out, log)
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.coordinator_log).unwrap_or_default()
    }
}

/// Sends `signal` to `child` (SIGSTOP: the process hangs, its sockets stay open).
fn signal(child: &mut Child, signal: libc::c_int, what: &str) {
    if let Some(st) = child.try_wait().expect("try_wait") {
        panic!("{what} exited ({st}) before it could be signalled; the run is too short");
    }
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    // SAFETY: kill(2) on our own child, which has not been reaped (try_wait said it runs).
    let r = unsafe { libc::kill(pid, signal) };
    assert_eq!(r, 0, "kill({pid}, {signal}) failed");
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.coordinator.kill();
        let _ = self.coordinator.wait();
    }
}

/// Waits until a complete checkpoint of keyed-count was taken while both generator
/// subtasks held (its sources at `2 × HOLD_AT`); returns its id.
fn wait_for_held_checkpoint(c: &mut Cluster) -> u64 {
    let job_dir = c.job_dir();
    wait_for_held(&mut c.coordinator, &c.coordinator_log, &job_dir, 2)
}

/// Waits for a worker to end and returns its exit code and log.
fn finish_worker(dir: &Path, mut worker: Child, name: &str) -> (i32, String) {
    let st = wait_deadline(&mut worker, TIMEOUT, name);
    let log = fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
    (st.code().unwrap_or(-1), log)
}

/// Waits for each worker to exit 0 and asserts that its log says it restored the
/// checkpoint at `path` (proof that the worker itself resumed from it); returns the logs.
fn assert_workers_restored(dir: &Path, workers: Vec<(Child, &str)>, path: &Path) -> Vec<String> {
    workers
        .into_iter()
        .map(|(w, name)| {
            let (code, wlog) = finish_worker(dir, w, name);
            assert_worker_restored(name, code.into(), &wlog, path);
            wlog
        })
        .collect()
}

/// Which subtasks the coordinator's log says `worker` ran in `attempt`.
fn ran_on(log: &str, attempt: u32, worker: &str) -> String {
    let prefix = format!("weir: attempt {attempt} runs on ");
    log.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .find(|l| l.contains(&format!("({worker})")))
        .and_then(|l| l.rsplit_once(": ").map(|(_, s)| s.to_string()))
        .unwrap_or_else(|| panic!("no `{prefix}… ({worker})` line in\n{log}"))
}

#[test]
fn two_workers_count_exactly_and_each_checkpoint_holds_both_workers_state() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(tmp.path(), 2);
    let w1 = c.registered_worker("w1");
    let w2 = c.registered_worker("w2");
    let held = wait_for_held_checkpoint(&mut c);
    // Every subtask of the checkpoint taken mid-input wrote its own files, and each
    // worker ran one subtask of each operator.
    let described = weir::inspect::describe(&c.job_dir().join(format!("chk-{held}")))
        .expect("the held checkpoint reads back, every file checked");
    for uid in ["generator", "count"] {
        let op = described
            .operators
            .iter()
            .find(|o| o.uid == uid)
            .unwrap_or_else(|| panic!("no operator {uid} in checkpoint {held}"));
        assert_eq!(op.parallelism, 2, "{uid}");
        assert_eq!(
            op.files, 2,
            "{uid}: one state file per subtask, from both workers"
        );
    }
    c.release();
    let dir = c.dir.clone();
    let (out, log) = c.finish_exact();
    // The workers' reports add up to what their sources read.
    assert_eq!(records_read(&out), EVENTS, "{out}");
    assert_eq!(ran_on(&log, 1, "w1"), "generator[0], count[0]", "{log}");
    assert_eq!(ran_on(&log, 1, "w2"), "generator[1], count[1]", "{log}");
    for (w, name) in [(w1, "w1"), (w2, "w2")] {
        let (code, wlog) = finish_worker(&dir, w, name);
        assert_eq!(code, 0, "worker {name} failed:\n{wlog}");
        assert!(wlog.contains("the job finished"), "{name}:\n{wlog}");
    }
}

#[test]
fn a_worker_of_another_binary_is_refused_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(tmp.path(), 1);
    // The same program, one byte longer: another build, as a worker of another version is.
    let other = tmp.path().join("weir-other");
    let mut bytes = fs::read(BIN).unwrap();
    bytes.push(0);
    fs::write(&other, bytes).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&other, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let w = c.worker_from(&other, "odd");
    let (code, log) = finish_worker(tmp.path(), w, "odd");
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("refused"), "{log}");
    // Both binaries named: the worker's copy and the coordinator's program.
    assert!(log.contains("(weir-other, crc32c "), "{log}");
    assert!(log.contains("(weir, crc32c "), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn a_worker_killed_mid_input_is_replaced_and_the_job_resumes_exactly_from_its_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(tmp.path(), 2);
    let w1 = c.registered_worker("w1");
    let mut w2 = c.registered_worker("w2");
    // The input holds until released: the kill lands mid-input, after a checkpoint of it.
    let held = wait_for_held_checkpoint(&mut c);
    sigkill_running(&mut w2, "worker w2");
    c.release();
    let again = c.worker("w2-again");
    let dir = c.dir.clone();
    let (out, log) = c.finish_exact();
    // The loss named the worker and its address, and the restart restored the checkpoint
    // taken mid-input (or a newer one of the held input), not the beginning.
    assert!(
        log.lines()
            .any(|l| l.contains("lost worker 2 (w2) at 127.0.0.1:")),
        "{log}"
    );
    let (n, path) = restored_held_checkpoint(&out, held);
    assert!(n >= 2, "{out}");
    // The replacement registered under a new id and restored that checkpoint itself, as
    // did w1, which ran the first attempt.
    let logs = assert_workers_restored(&dir, vec![(again, "w2-again"), (w1, "w1")], &path);
    assert!(logs[1].contains("runs attempt 1"), "{}", logs[1]);
}

#[test]
fn bad_cluster_flags_are_refused_naming_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let job = |extra: &[&str]| {
        let mut a = keyed_count_args(1000, 7, extra, false);
        a.extend(["--checkpoint-dir", "chk", "--output", "out"].map(String::from));
        run(&mut weir(tmp.path(), a))
    };
    let cases: [(&[&str], &[&str]); 4] = [
        (&["--workers", "2"], &["--workers needs --cluster-listen"]),
        (
            &["--cluster-listen", "127.0.0.1:0"],
            &["--cluster-listen applies", "add --workers N"],
        ),
        (
            &["--workers", "2", "--cluster-listen", "0.0.0.0:0"],
            &["--cluster-token is needed"],
        ),
        (
            &["--workers", "0", "--cluster-listen", "127.0.0.1:0"],
            &["--workers", "at least 1"],
        ),
    ];
    for (flags, needles) in cases {
        assert_clean_error(&job(flags), 2, needles);
    }
    // A worker: its own flags.
    let worker = |flags: &[&str]| {
        let args = ["worker", "--coordinator", "127.0.0.1:1"]
            .iter()
            .chain(flags);
        run(&mut weir(tmp.path(), args))
    };
    let w = worker(&["--listen", "0.0.0.0:0"]);
    assert_clean_error(&w, 2, &["--cluster-token is needed", "--listen"]);
    let w = worker(&["--listen", "0.0.0.0:0", "--cluster-token", "t"]);
    assert_clean_error(&w, 2, &["--listen 0.0.0.0:0", "own address"]);
    let w = worker(&["--slots", "0"]);
    assert_clean_error(&w, 2, &["--slots", "at least 1"]);
    // A coordinator out of reach is named with the way out.
    let w = worker(&["--connect-timeout", "soon"]);
    assert_clean_error(&w, 2, &["--connect-timeout", "'soon'"]);
    // A coordinator out of reach is named with the way out (no retries with 0s).
    let w = worker(&["--connect-timeout", "0s"]);
    assert_clean_error(
        &w,
        1,
        &[
            "cannot reach the coordinator at 127.0.0.1:1",
            "--coordinator",
            "--connect-timeout 0s",
        ],
    );
    assert!(!tmp.path().join("out").exists());
}

#[test]
fn a_hung_worker_is_detected_by_its_heartbeat_replaced_and_the_job_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::start_with(tmp.path(), 2, "2s");
    let w1 = c.registered_worker("w1");
    let mut w2 = c.registered_worker("w2");
    let held = wait_for_held_checkpoint(&mut c);
    // Hung, not dead: its process and sockets stay, it only stops answering.
    signal(&mut w2, libc::SIGSTOP, "worker w2");
    let lost = c.wait_for("lost worker 2 (w2) at 127.0.0.1:");
    assert!(lost.contains("no heartbeat for 2s"), "{lost}");
    c.release();
    let again = c.worker("w2-again");
    let dir = c.dir.clone();
    let (out, _) = c.finish_exact();
    let (_, path) = restored_held_checkpoint(&out, held);
    assert_workers_restored(&dir, vec![(again, "w2-again"), (w1, "w1")], &path);
    w2.kill().expect("SIGKILL the stopped worker");
    let _ = w2.wait();
}

/// The known gap of before (docs/cluster.md): with a heartbeat timeout far longer than the
/// exchange's keep-alive (3 s), the surviving worker reports the frozen one lost first; had
/// every restart deployed onto it again, each would fail the same way (w1 cannot reach it:
/// its dial's keep-alive times out after 3 s) and the default identical-failure limit (5 in
/// a row) would give the job up long before the 30 s timeout. Now no attempt goes to it
/// after the report, so only the attempt it was in fails; the heartbeat timeout drops it,
/// and the job resumes from the held checkpoint on a replacement, exactly.
#[test]
fn a_frozen_worker_a_peer_reported_lost_gets_no_deploy_and_the_job_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::start_with(tmp.path(), 2, "30s");
    let w1 = c.registered_worker("w1");
    let mut w2 = c.registered_worker("w2");
    let held = wait_for_held_checkpoint(&mut c);
    signal(&mut w2, libc::SIGSTOP, "worker w2");
    let lost = c.wait_for("lost worker 2 (w2) at 127.0.0.1:");
    assert!(lost.contains("no heartbeat for 30s"), "{lost}");
    let log = c.log();
    let report = log
        .lines()
        .position(|l| l.contains("(w1) at 127.0.0.1:") && l.contains("reported worker 2 lost"))
        .unwrap_or_else(|| panic!("the surviving worker did not report w2 lost first:\n{log}"));
    assert!(
        log.lines()
            .skip(report)
            .any(|l| l.contains("waiting for worker 2 (w2)")),
        "{log}"
    );
    c.release();
    let again = c.worker("w2-again");
    let dir = c.dir.clone();
    let (out, log) = c.finish_exact();
    // Only the first attempt ran on the frozen worker, and only it failed.
    let failed: Vec<&str> = (log.lines())
        .filter(|l| l.starts_with("weir: attempt ") && l.contains(" failed: "))
        .collect();
    assert_eq!(failed.len(), 1, "{log}");
    assert!(failed[0].starts_with("weir: attempt 1 failed: "), "{log}");
    let on_w2: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("weir: attempt ") && l.contains("(w2) at"))
        .collect();
    assert_eq!(on_w2.len(), 1, "{log}");
    assert!(on_w2[0].starts_with("weir: attempt 1 runs on "), "{log}");
    let (_, path) = restored_held_checkpoint(&out, held);
    assert_workers_restored(&dir, vec![(again, "w2-again"), (w1, "w1")], &path);
    w2.kill().expect("SIGKILL the stopped worker");
    let _ = w2.wait();
}

/// `--inject-failures` across workers: the coordinator plants each failure on one worker,
/// which fires it inside a task once a checkpoint with progress completed in its attempt;
/// the restart strategy counts them as injected, every restart resumes from a checkpoint
/// with progress, and the counts stay exact.
#[test]
fn injected_failures_on_workers_restart_from_checkpoints_and_stay_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let mut extra = vec!["--restart-delay", "10ms", "--inject-failures", "3"];
    extra.extend([
        "--seed",
        "5",
        "--workers",
        "2",
        "--cluster-listen",
        "127.0.0.1:0",
    ]);
    let args = keyed_count_verified(EVENTS, KEYS, &extra);
    let mut c = Cluster::spawn(tmp.path(), &args, "coordinator");
    let w1 = c.registered_worker("w1");
    let w2 = c.registered_worker("w2");
    let dir = c.dir.clone();
    let (out, log) = c.finish_exact();
    assert!(out.contains("injected failures: 3 of 3"), "{out}\n{log}");
    assert!(out.contains("restarts: 3"), "{out}\n{log}");
    for k in 1..=3 {
        let planted = format!("plants injected failure {k} of 3 on worker ");
        assert!(log.contains(&planted), "{log}");
        assert!(
            log.contains(&format!("injected failure {k} of 3 (task")),
            "{log}"
        );
    }
    // One failure per attempt, each after a checkpoint with progress: every restart
    // resumed from one, further into the input than the start.
    let all = attempts(&out);
    assert_eq!(all.len(), 4, "{out}");
    let mut restored = Vec::new();
    for a in &all[1..] {
        let (id, position, path) = a
            .restored
            .clone()
            .unwrap_or_else(|| panic!("attempt {} started over from the beginning:\n{out}", a.n));
        assert!(position > 0 && position < EVENTS, "{out}");
        assert!(path.ends_with(format!("chk-{id}")), "{out}");
        restored.push(path);
    }
    let last = restored.last().expect("three restarts");
    assert_workers_restored(&dir, vec![(w1, "w1"), (w2, "w2")], last);
}

#[test]
fn a_worker_hung_before_it_dialled_its_peers_does_not_hold_up_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::start_with(tmp.path(), 2, "2s");
    // w1 dials the workers above it; once `pause` exists it waits before dialing, so the
    // test can stop it exactly there.
    let mut w1 = c.registered_worker_with("w1", &["--pause-before-dial", "pause"]);
    let mut w2 = c.registered_worker("w2");
    let held = wait_for_held_checkpoint(&mut c);
    fs::write(c.dir.join("pause"), b"").unwrap();
    sigkill_running(&mut w2, "worker w2");
    c.wait_for("lost worker 2 (w2) at 127.0.0.1:");
    c.release();
    // The next attempt goes to w1 and w3; w1 hangs before it dials w3, whose subtasks then
    // wait for channels to w1 that never open. (Which attempt that is depends on whether
    // the coordinator saw w2's loss before w1's exchange reported it: an attempt deployed
    // to the dead w2 fails at once.)
    let mut w3 = c.registered_worker("w3");
    let dir = c.dir.clone();
    wait_for_line(
        &mut w1,
        &dir.join("w1.log"),
        "pauses before dialing its peers",
    );
    signal(&mut w1, libc::SIGSTOP, "worker w1");
    wait_for_line(&mut w3, &dir.join("w3.log"), "runs attempt ");
    // w1's silence fails attempt 2; w3 leaves it (its waiting senders woken) and takes the
    // next attempt with a replacement.
    let lost = c.wait_for("lost worker 1 (w1) at 127.0.0.1:");
    assert!(lost.contains("no heartbeat for 2s"), "{lost}");
    let w4 = c.worker("w4");
    let (out, _) = c.finish_exact();
    let (_, path) = restored_held_checkpoint(&out, held);
    assert_workers_restored(&dir, vec![(w3, "w3"), (w4, "w4")], &path);
    w1.kill().expect("SIGKILL the stopped worker");
    let _ = w1.wait();
}

#[test]
fn a_worker_started_before_its_coordinator_joins_once_it_listens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A port nothing listens on yet: the coordinator takes it later.
    let address = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut w1 = start_worker(dir, Path::new(BIN), &address, "w1", [] as [&str; 0]);
    wait_for_line(
        &mut w1,
        &dir.join("w1.log"),
        &format!("cannot reach the coordinator at {address}"),
    );
    let mut c = Cluster::spawn(dir, &coordinator_args(2, "30s", &address), "coordinator");
    let w2 = c.registered_worker("w2");
    c.release();
    let (_, log) = c.finish_exact();
    assert!(log.contains("(w1) at 127.0.0.1:"), "{log}");
    let (code, wlog) = finish_worker(dir, w2, "w2");
    assert_eq!(code, 0, "{wlog}");
    let (code, wlog) = finish_worker(dir, w1, "w1");
    assert_eq!(code, 0, "{wlog}");
    assert!(wlog.contains("trying again in"), "{wlog}");
    assert!(wlog.contains("(for up to --connect-timeout 60s)"), "{wlog}");
}

#[test]
fn a_killed_coordinator_restarted_on_its_checkpoints_resumes_the_job_exactly_with_the_same_workers()
{
    let tmp = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(tmp.path(), 2);
    let mut w1 = c.registered_worker("w1");
    let mut w2 = c.registered_worker("w2");
    let held = wait_for_held_checkpoint(&mut c);
    sigkill_running(&mut c.coordinator, "the coordinator");
    let dir = c.dir.clone();
    // Both workers lose it and keep trying to reach it.
    for (w, name) in [(&mut w1, "w1"), (&mut w2, "w2")] {
        let log = dir.join(format!("{name}.log"));
        wait_for_line(w, &log, "lost the coordinator at");
        wait_for_line(w, &log, "cannot reach the coordinator at");
    }
    // Restarted on the same address and checkpoint folder (it takes the folder's lock
    // over: the killed one's went with its process), from the latest checkpoint.
    let mut args = coordinator_args(2, "30s", &c.address);
    args.extend(["--restore", "latest"].map(String::from));
    c.release();
    let c2 = Cluster::spawn(&dir, &args, "coordinator-2");
    drop(c);
    let (out, _) = c2.finish_exact();
    let (_, path) = restored_held_checkpoint(&out, held);
    let logs = assert_workers_restored(&dir, vec![(w1, "w1"), (w2, "w2")], &path);
    for (name, wlog) in ["w1", "w2"].iter().zip(&logs) {
        assert!(wlog.contains("registering again"), "{name}:\n{wlog}");
    }
}
