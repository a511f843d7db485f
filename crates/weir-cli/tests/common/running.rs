//! A job started in the background (the `weir` command or a test binary re-executed as a
//! job), with the control address it printed: what the tests of `weir status`,
//! `savepoint` and `stop` drive.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::{completed_checkpoints, spawn_logged, wait_deadline, RUN_TIMEOUT};

/// A running job, its output going to the file `log`; `addr` is its control endpoint.
pub struct Running {
    pub child: Child,
    pub addr: String,
    pub log: PathBuf,
}

impl Drop for Running {
    /// A failing test must not leave its job running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// Starts `cmd` with its output in `log` and waits for the control endpoint it prints.
    // The child is waited for by `finish` or by `Drop`.
    #[allow(clippy::zombie_processes)]
    pub fn start(cmd: &mut Command, log: PathBuf) -> Running {
        let child = spawn_logged(cmd, &log);
        let deadline = Instant::now() + RUN_TIMEOUT;
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(addr) = text
                .lines()
                .filter(|l| l.contains(" (weir status"))
                .find_map(|l| l.split("control endpoint ").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
            {
                // Bound to every interface (`--control-addr 0.0.0.0:…`), it is reached on
                // loopback.
                let addr = addr.replace("0.0.0.0:", "127.0.0.1:");
                return Running { child, addr, log };
            }
            assert!(Instant::now() < deadline, "no control address in\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The URL of `path` on the job's control endpoint (REST API, dashboard).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Waits for the job to exit; returns its exit code and everything it printed.
    pub fn finish(mut self) -> (Option<i32>, String) {
        let status = wait_deadline(&mut self.child, RUN_TIMEOUT, "the job");
        (status.code(), std::fs::read_to_string(&self.log).unwrap())
    }
}

/// Waits until the job whose checkpoints are in `job` has made progress: its first
/// checkpoint completed.
pub fn wait_for_a_checkpoint(job: &Path) {
    let deadline = Instant::now() + RUN_TIMEOUT;
    while completed_checkpoints(job).is_empty() {
        assert!(Instant::now() < deadline, "no checkpoint completed");
        std::thread::sleep(Duration::from_millis(20));
    }
}
