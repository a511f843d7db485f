//! Parallelism costs memory in proportion to the data in flight, not to p² (issue 23): the
//! peak RSS of `weir run keyed-count` at p = 512 over 10 events stays under [`P512_BOUND`]
//! (it was 1.48 GB: a whole batch was allocated up front for each of the 262,144
//! channels), and a plan whose channels alone cannot fit is refused before anything is
//! allocated, with the estimate and the way out. Peak RSS is the child's own, from
//! `wait4`'s resource usage: no timing is involved.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

/// The bound on the peak RSS of keyed-count at p = 512 over 10 events: 262,144 idle
/// channels at about 1.4 kB each, 1,024 task threads at about 60 KiB, and the process
/// itself (measured: 454 MiB, debug build).
const P512_BOUND: u64 = 640 << 20;

/// Runs `weir args` in `dir`: whether it exited 0, its peak RSS in bytes, its stderr.
// The child is reaped by `wait4` (which returns its own resource usage), not `Child::wait`.
#[allow(clippy::zombie_processes)]
fn run_measured(dir: &Path, args: &[&str]) -> (bool, u64, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the weir binary starts");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr is piped")
        .read_to_string(&mut stderr)
        .expect("stderr is read");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: `rusage` is plain data, filled by wait4 for the child just spawned (not
    // waited for by anything else: `child` is never waited on).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(
        waited,
        pid,
        "wait4 failed: {}",
        std::io::Error::last_os_error()
    );
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (ok, usage.ru_maxrss as u64 * 1024, stderr)
}

fn keyed_count(parallelism: &str) -> Vec<&str> {
    vec![
        "run",
        "keyed-count",
        "--events",
        "10",
        "--keys",
        "5",
        "--parallelism",
        parallelism,
        "--max-parallelism",
        parallelism,
        "--checkpoint-interval",
        "off",
        "--discard-output",
        "--control",
        "off",
    ]
}

#[test]
fn p512_over_a_tiny_input_stays_within_its_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, rss, stderr) = run_measured(tmp.path(), &keyed_count("512"));
    assert!(ok, "the run failed:\n{stderr}");
    assert!(
        rss < P512_BOUND,
        "peak RSS {} MiB at p = 512 over 10 events, bound {} MiB",
        rss >> 20,
        P512_BOUND >> 20
    );
    eprintln!("p = 512 over 10 events: peak RSS {} MiB", rss >> 20);
}

#[test]
fn a_plan_that_cannot_fit_is_refused_before_anything_is_allocated() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, rss, stderr) = run_measured(tmp.path(), &keyed_count("32768"));
    assert!(!ok, "p = 32768 ran:\n{stderr}");
    for part in [
        "channels between subtasks",
        "lower the parallelism",
        "32768 now",
    ] {
        assert!(stderr.contains(part), "stderr lacks {part:?}:\n{stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(rss < 128 << 20, "refused only after {} MiB", rss >> 20);
}
