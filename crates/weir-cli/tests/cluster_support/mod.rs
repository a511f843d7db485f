//! A cluster of one test (issue 24): a coordinator (`weir run … --workers N
//! --cluster-listen 127.0.0.1:0`) and `weir worker` processes on loopback, every port
//! chosen by the system, each process's output in a log of the test's folder. Every wait
//! is bounded and says what it waited for.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// Events per generator subtask before keyed-count's input holds ([`HELD`]).
pub const HOLD_AT: u64 = 20_000;
/// keyed-count's input held after [`HOLD_AT`] events per generator subtask, until the
/// test creates `release` ([`Cluster::release`]).
pub const HELD: [&str; 4] = ["--hold-at", "20000", "--release-file", "release"];

/// A safety net for a hang, never a pace.
pub const TIMEOUT: Duration = Duration::from_secs(180);

/// A coordinator and its workers, started by one test.
pub struct Cluster {
    pub dir: PathBuf,
    pub coordinator: Child,
    /// The coordinator's stderr (notices, the workers it deployed to, its endpoints).
    pub log: PathBuf,
    /// Its stdout (the run summary, the verdict).
    pub out: PathBuf,
    /// The workers and their names (`w1`, `w2`, …; logs `<name>.log`).
    pub workers: Vec<(String, Child)>,
    /// The coordinator's cluster address, for workers.
    pub address: String,
    /// Each worker's own flags, by its name (TLS certificates).
    worker_flags: fn(&Path, &str) -> Vec<String>,
}

/// How a cluster's run ended: the coordinator's exit code, stdout and stderr, and each
/// worker's name, exit code and log.
pub struct Ended {
    pub code: i32,
    pub out: String,
    pub log: String,
    pub workers: Vec<(String, i32, String)>,
}

impl Cluster {
    /// Starts the coordinator of `args` (a `run` command without the cluster flags) and
    /// `n` workers of one slot each, named `<prefix>1…`, each registered before the next
    /// starts (so worker ids follow the names).
    pub fn start(dir: &Path, args: &[String], n: usize, prefix: &str) -> Cluster {
        Self::start_with(dir, args, n, prefix, |_, _| Vec::new())
    }

    /// [`Cluster::start`], each worker also given `worker_flags(dir, its name)`.
    pub fn start_with(
        dir: &Path,
        args: &[String],
        n: usize,
        prefix: &str,
        worker_flags: fn(&Path, &str) -> Vec<String>,
    ) -> Cluster {
        let mut args = args.to_vec();
        args.extend(
            [
                "--workers",
                &n.to_string(),
                "--cluster-listen",
                "127.0.0.1:0",
                "--heartbeat-timeout",
                "60s",
            ]
            .map(String::from),
        );
        let log = dir.join(format!("{prefix}-coordinator.log"));
        let out = dir.join(format!("{prefix}-coordinator.out"));
        let (coordinator, address) = spawn_coordinator(dir, &args, &log, &out);
        let mut c = Cluster {
            dir: dir.to_path_buf(),
            coordinator,
            log,
            out,
            workers: Vec::new(),
            address,
            worker_flags,
        };
        for i in 1..=n {
            let name = format!("{prefix}{i}");
            c.add_worker(&name);
            c.wait_until(&format!("worker {name} registered"), |log| {
                is_registered(log, &name)
            });
        }
        c
    }

    /// Starts a worker of one slot named `name` (its log `<name>.log`).
    pub fn add_worker(&mut self, name: &str) {
        let flags = (self.worker_flags)(&self.dir, name);
        let child = start_worker(&self.dir, Path::new(BIN), &self.address, name, flags);
        self.workers.push((name.to_string(), child));
    }

    /// SIGKILLs worker `name` (asserting it was still running) and forgets it.
    pub fn kill_worker(&mut self, name: &str) {
        let i = (self.workers.iter().position(|(n, _)| n == name))
            .unwrap_or_else(|| panic!("no worker {name}"));
        let (_, mut child) = self.workers.remove(i);
        sigkill_running(&mut child, &format!("worker {name}"));
    }

    /// Lets keyed-count's held input ([`HELD`]) go on.
    pub fn release(&self) {
        fs::write(self.dir.join("release"), b"go").unwrap();
    }

    pub fn text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls the coordinator's log until `done` holds; panics with the log if the
    /// coordinator exits first or [`TIMEOUT`] passes.
    pub fn wait_until(&mut self, what: &str, done: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let text = self.text();
            if done(&text) {
                return;
            }
            if let Some(st) = self.coordinator.try_wait().expect("try_wait") {
                panic!(
                    "the coordinator exited ({st}) before {what}:\n{text}{}",
                    self.worker_logs()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {TIMEOUT:?}:\n{text}{}",
                self.worker_logs()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Every worker's log, for a failure's message.
    fn worker_logs(&self) -> String {
        (self.workers.iter())
            .map(|(name, _)| {
                let log = fs::read_to_string(self.dir.join(format!("{name}.log")));
                format!("\n--- {name}.log:\n{}", log.unwrap_or_default())
            })
            .collect()
    }

    /// What follows `needle` on the first complete line of the coordinator's log that holds it.
    pub fn wait_for_line(&mut self, needle: &str) -> String {
        let done = |t: &str| after_on_complete_line(t, needle).is_some();
        self.wait_until(&format!("`{needle}`"), done);
        let text = self.text();
        let rest = after_on_complete_line(&text, needle);
        rest.expect("checked above").to_string()
    }

    /// The coordinator's control endpoint (`weir savepoint|stop --job ADDR`).
    pub fn control_address(&mut self) -> String {
        let rest = self.wait_for_line("control endpoint ");
        rest.split_whitespace()
            .next()
            .expect("an address")
            .to_string()
    }

    /// Waits until a complete checkpoint in `job_dir` was taken while every one of the
    /// `p` generator subtasks held (its sources at `p × HOLD_AT`): the input is held
    /// everywhere from then on.
    pub fn wait_until_held(&mut self, job_dir: &Path, p: u64) {
        wait_for_held(&mut self.coordinator, &self.log, job_dir, p);
    }

    /// Waits for the coordinator and every worker to end.
    pub fn finish(mut self) -> Ended {
        let status = wait_deadline(&mut self.coordinator, TIMEOUT, "the coordinator");
        let out = fs::read_to_string(&self.out).unwrap_or_default();
        let log = self.text();
        let workers = std::mem::take(&mut self.workers)
            .into_iter()
            .map(|(name, mut child)| {
                let st = wait_deadline(&mut child, TIMEOUT, &name);
                let wlog = fs::read_to_string(self.dir.join(format!("{name}.log")));
                (name, st.code().unwrap_or(-1), wlog.unwrap_or_default())
            })
            .collect();
        Ended {
            code: status.code().unwrap_or(-1),
            out,
            log,
            workers,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.coordinator.kill();
        let _ = self.coordinator.wait();
        for (_, w) in &mut self.workers {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

impl Ended {
    /// Asserts that the coordinator and every worker exited 0, the run verified.
    pub fn assert_verified(&self) {
        assert_eq!(
            self.code, 0,
            "the coordinator failed:\n{}\n{}",
            self.out, self.log
        );
        assert!(
            self.out.contains("verify: OK"),
            "{}\n{}",
            self.out,
            self.log
        );
        self.assert_workers_succeeded();
    }

    pub fn assert_workers_succeeded(&self) {
        for (name, code, log) in &self.workers {
            assert_eq!(*code, 0, "worker {name} failed:\n{log}");
            assert!(!log.contains("panicked"), "{name}:\n{log}");
        }
    }
}

/// keyed-count at parallelism 2 over `events` events and `keys` keys, a checkpoint every
/// 50 ms into `chk`, its output into `out`, verified, then `extra`: the job of the cluster
/// tests, spelled once (the cluster flags are the caller's, or [`Cluster::start`]'s).
pub fn keyed_count_verified(events: u64, keys: u64, extra: &[&str]) -> Vec<String> {
    let flags = [
        "--checkpoint-interval",
        "50ms",
        "--checkpoint-dir",
        "chk",
        "--output",
        "out",
        "--verify",
    ];
    let mut args = keyed_count_args(events, keys, &flags, false);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Starts `weir worker` of one slot named `name` (its log `<name>.log` in `dir`) from
/// `binary`, dialing the coordinator at `address`, with `extra` flags.
pub fn start_worker<I, S>(dir: &Path, binary: &Path, address: &str, name: &str, extra: I) -> Child
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(binary);
    cmd.args(["worker", "--coordinator", address, "--slots", "1"])
        .args(["--name", name])
        .args(extra)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .stdin(std::process::Stdio::null());
    spawn_logged(&mut cmd, &dir.join(format!("{name}.log")))
}

/// Polls `log` (the output of `child`) until `done` holds for its text; returns the text.
/// Panics, with the log, if `child` exits first or [`TIMEOUT`] passes (`what` says what
/// the test waited for).
pub fn wait_for_log(
    child: &mut Child,
    log: &Path,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let text = fs::read_to_string(log).unwrap_or_default();
        if done(&text) {
            return text;
        }
        if let Some(st) = child.try_wait().expect("try_wait") {
            panic!("{} exited ({st}) before {what}:\n{text}", log.display());
        }
        assert!(
            Instant::now() < deadline,
            "{}: no {what} within {TIMEOUT:?}:\n{text}",
            log.display()
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Polls `log` (the output of `child`) until a complete line holds `needle`; returns what
/// follows it. Panics, with the log, if `child` exits first or [`TIMEOUT`] passes.
pub fn wait_for_line(child: &mut Child, log: &Path, needle: &str) -> String {
    let what = format!("printing `{needle}`");
    let text = wait_for_log(child, log, &what, |t| {
        after_on_complete_line(t, needle).is_some()
    });
    let rest = after_on_complete_line(&text, needle);
    rest.expect("checked above").to_string()
}

/// Whether the coordinator's log `log` says it registered worker `name` (on loopback).
pub fn is_registered(log: &str, name: &str) -> bool {
    let needle = format!("({name}) at 127.0.0.1:");
    log.lines()
        .any(|l| l.contains(&needle) && l.contains(" registered "))
}

/// Waits until a complete checkpoint in `job_dir` was taken while every one of the `p`
/// generator subtasks held (its sources at `p × HOLD_AT`); returns the newest such
/// checkpoint's id. Panics, with the coordinator's log `log`, if the coordinator exits
/// first or [`TIMEOUT`] passes.
pub fn wait_for_held(coordinator: &mut Child, log: &Path, job_dir: &Path, p: u64) -> u64 {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let held = completed_checkpoints(job_dir).into_iter().rev().find(|id| {
            let path = job_dir.join(format!("chk-{id}"));
            weir::inspect::source_progress(&path)
                .is_ok_and(|s| s.iter().map(|s| s.records).sum::<u64>() == p * HOLD_AT)
        });
        if let Some(id) = held {
            return id;
        }
        let text = || fs::read_to_string(log).unwrap_or_default();
        if let Some(st) = coordinator.try_wait().expect("try_wait") {
            panic!("the coordinator exited ({st}):\n{}", text());
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint of the held input within {TIMEOUT:?}:\n{}",
            text()
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Starts the coordinator of `args` (a `run` command with its cluster flags) in `dir`, its
/// stderr into `log` and its stdout into `out`, and waits until it listens: the process
/// and its cluster address, for workers.
pub fn spawn_coordinator(dir: &Path, args: &[String], log: &Path, out: &Path) -> (Child, String) {
    let mut coordinator = weir(dir, args)
        .stdout(fs::File::create(out).unwrap())
        .stderr(fs::File::create(log).unwrap())
        .spawn()
        .expect("cannot start the weir binary");
    let address = wait_for_line(&mut coordinator, log, "coordinator listening on ")
        .split(' ')
        .next()
        .map(|a| a.trim_end_matches(':').to_string())
        .expect("an address after `coordinator listening on`");
    (coordinator, address)
}

/// The restart that followed a lost worker or coordinator, from the run's stdout `out`: the
/// last attempt that restored a checkpoint, checked to be the one taken while both
/// generator subtasks held at [`HOLD_AT`] (`held`, or a newer one of the held input);
/// returns the attempt's number and the checkpoint's folder.
pub fn restored_held_checkpoint(out: &str, held: u64) -> (u32, PathBuf) {
    let restored: Vec<_> = attempts(out)
        .into_iter()
        .filter_map(|a| a.restored.map(|r| (a.n, r)))
        .collect();
    let (n, (id, position, path)) = restored
        .last()
        .cloned()
        .unwrap_or_else(|| panic!("no attempt restored a checkpoint:\n{out}"));
    assert!(
        id >= held,
        "restored checkpoint {id}, older than {held}:\n{out}"
    );
    assert_eq!(position, 2 * HOLD_AT, "{out}");
    (n, path)
}

/// Asserts that worker `name` exited 0 (`code`) and that its log says it restored the
/// checkpoint at `path`: proof that the worker itself resumed from it.
pub fn assert_worker_restored(name: &str, code: i64, log: &str, path: &Path) {
    assert_eq!(code, 0, "worker {name} failed:\n{log}");
    assert!(
        log.contains(&format!("restored from {}", path.display())),
        "worker {name} did not restore {}:\n{log}",
        path.display()
    );
}
