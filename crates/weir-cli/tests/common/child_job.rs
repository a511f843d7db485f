//! A test binary that re-executes itself as a job built on `weir::runner`: the parent runs
//! the ignored test `job_process` in a child process with the job's arguments in an
//! environment variable, so a job compiled into the test (an example, the README's job)
//! runs as a program of its own that can be killed, stopped and resumed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

/// Separates the arguments in the environment variable (ASCII unit separator).
const SEP: char = '\u{1f}';

/// The child's arguments, if this process is a child started by [`command`] with `var`
/// set (the first is the job's name); `None` in a normal test run.
pub fn args(var: &str) -> Option<Vec<String>> {
    let spec = std::env::var(var).ok()?;
    Some(
        spec.split(SEP)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect(),
    )
}

/// Ends the child with the job's exit status.
pub fn exit(code: ExitCode) -> ! {
    let code = (0..=255u8)
        .find(|c| ExitCode::from(*c) == code)
        .unwrap_or(1);
    std::process::exit(i32::from(code));
}

/// This test binary as the job `name` with `args`, run in `cwd`: it runs only the ignored
/// test `job_process`, which reads `var`.
pub fn command(var: &str, name: &str, cwd: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("the test binary"));
    let spec: Vec<&str> = std::iter::once(name).chain(args.iter().copied()).collect();
    c.args([
        "--ignored",
        "--exact",
        "job_process",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(var, spec.join(&SEP.to_string()))
    .env("RUST_BACKTRACE", "0")
    .current_dir(cwd)
    .stdin(Stdio::null());
    c
}

/// Defines the ignored test `job_process`: when the test binary is re-executed by
/// [`command`] with the variable `$var` set, it runs the job `$name` built by `$build` on
/// `weir::runner` with the child's arguments, and exits with its status.
#[allow(unused_macros)]
macro_rules! job_process {
    ($var:expr, $name:expr, $build:path) => {
        /// Not a test (ignored, so a normal run neither runs nor counts it): the job's
        /// `main` when the binary is re-executed with its variable set.
        #[test]
        #[ignore = "the job's process, run by the other tests in a child"]
        fn job_process() {
            if let Some(args) = $crate::common::child_job::args($var) {
                $crate::common::child_job::exit(
                    weir::runner::Runner::new($name).args(args).run($build),
                );
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use job_process;

/// Every committed `key,count` line in `dir`, by key: the visible part files a child job's
/// file sink committed (hidden in-progress and pending files are skipped, as readers do).
pub fn committed(dir: &Path) -> BTreeMap<u64, Vec<u64>> {
    let mut by_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("the output folder") {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for line in std::fs::read_to_string(e.path()).unwrap().lines() {
            let (k, c) = line.split_once(',').expect("key,count");
            by_key
                .entry(k.parse().unwrap())
                .or_default()
                .push(c.parse().unwrap());
        }
    }
    by_key
}
