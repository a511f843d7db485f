//! `PROGRAM savepoint check PATH [job flags]`: holds a savepoint or checkpoint against the
//! job this binary builds with these flags, without running it (issue 26) — the CI step
//! before a deploy. Prints one row per operator and state (restorable as is, migrates,
//! incompatible, state without an operator, operator without state) and exits 1 when a
//! run restoring from PATH with these flags would refuse to start, 0 when it would start.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::flags::RunFlags;
use super::{BoxError, BuiltFor, Job, Runner, UsageError};
use crate::api::config::RestoreFrom;
use crate::api::stream::StreamEnvironment;

/// The words that select the check, after the program's name.
const CHECK: [&str; 2] = ["savepoint", "check"];

impl Runner {
    /// Splits `PROGRAM savepoint check PATH [flags]` into the savepoint's path and the
    /// runner for `PROGRAM [flags]`; any other command line is returned as it is.
    pub(super) fn split_savepoint_check(mut self) -> Result<(Runner, Option<PathBuf>), UsageError> {
        let args = self
            .args
            .clone()
            .unwrap_or_else(|| std::env::args_os().collect());
        let selected = args.len() > CHECK.len()
            && args[1..=CHECK.len()]
                .iter()
                .zip(CHECK)
                .all(|(a, w)| a.to_str() == Some(w));
        if !selected {
            return Ok((self, None));
        }
        let Some(path) = args
            .get(CHECK.len() + 1)
            .filter(|p| !p.to_string_lossy().starts_with('-'))
        else {
            return Err(UsageError::new(
                "savepoint check needs the savepoint's folder: savepoint check PATH [job flags]",
            ));
        };
        let path = PathBuf::from(path);
        let rest: Vec<OsString> = std::iter::once(args[0].clone())
            .chain(args[CHECK.len() + 2..].iter().cloned())
            .collect();
        self.args = Some(rest);
        Ok((self, Some(path)))
    }
}

/// Builds the job from `flags` and `args` with `build` and checks the savepoint at `path`
/// against it; prints the table and the refusals, and returns the exit code.
pub(super) fn check_savepoint<A, F>(
    runner: &Runner,
    flags: &RunFlags,
    args: &A,
    build: F,
    path: &Path,
) -> Result<ExitCode, BoxError>
where
    F: FnOnce(&mut Job, &A) -> Result<(), BoxError>,
{
    let (max_parallelism, _) = flags.check(&runner.name)?;
    let mut cfg = flags.config(&runner.name, max_parallelism);
    // Built as the run restoring from `path` would be (the job may depend on it).
    cfg.restore = RestoreFrom::Path(path.to_path_buf());
    let mut job = Job::new(StreamEnvironment::new(cfg), BuiltFor::Check);
    build(&mut job, args)?;
    let report = job.env.check_savepoint(path)?;
    print!("{}", report.table());
    let refusals = report.refusals(flags.allow_non_restored_state);
    if refusals.is_empty() {
        println!(
            "savepoint check: OK — a run of this job with --restore {} would start",
            path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    for r in &refusals {
        println!("refused: {r}");
    }
    println!(
        "savepoint check: a run of this job with --restore {} would refuse to start ({} \
         reason{})",
        path.display(),
        refusals.len(),
        if refusals.len() == 1 { "" } else { "s" }
    );
    Ok(ExitCode::FAILURE)
}
