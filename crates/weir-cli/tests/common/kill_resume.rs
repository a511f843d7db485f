//! One SIGKILL after a checkpoint, then a resume with `--restore latest`: the step that the
//! per-job tests (`kill_every_job.rs`) and the per-example test (`examples.rs`) share. The
//! kill lands after a checkpoint the run completed itself, so the restore has something to
//! resume from however fast the machine is; the extra delay puts it at a seeded random moment
//! past that checkpoint.

use std::path::Path;
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use super::{
    completed_checkpoints, restored_from, run, sigkill_running, spawn_logged, wait_for_dead_lease,
    Run,
};

/// Where and when to kill, and how to name the run in a failure.
pub struct Kill<'a> {
    /// The job's checkpoint folder (`<checkpoint dir>/<job name>`).
    pub job_dir: &'a Path,
    /// The killed run's stdout and stderr go here (read when it fails early).
    pub log: &'a Path,
    /// Kill once a checkpoint with at least this id completed…
    pub after_checkpoint: u64,
    /// …and this many milliseconds more.
    pub delay_ms: u64,
    /// The run as a failure names it.
    pub what: &'a str,
}

/// Starts `killed` and SIGKILLs it as `kill` says, then waits for its lease to die. Returns
/// the id of its newest completed checkpoint, the one a resume must restore.
pub fn kill_after_checkpoint(killed: &mut Command, kill: &Kill<'_>) -> u64 {
    let mut child = spawn_logged(killed, kill.log);
    wait_for_checkpoint_id(&mut child, kill.job_dir, kill.after_checkpoint);
    thread::sleep(Duration::from_millis(kill.delay_ms));
    sigkill_running(
        &mut child,
        &format!(
            "{} (killed {} ms after its checkpoint {})",
            kill.what, kill.delay_ms, kill.after_checkpoint
        ),
    );
    wait_for_dead_lease();
    *completed_checkpoints(kill.job_dir)
        .last()
        .expect("the killed run completed a checkpoint")
}

/// Runs `resumed` (which must carry `--restore latest`) to its end and asserts it succeeded
/// and restored checkpoint `newest`; returns it for the caller's checks of the output.
pub fn resume_from(resumed: &mut Command, newest: u64, what: &str) -> Run {
    let run = run(resumed);
    run.assert_success();
    let from = restored_from(&run.stdout).unwrap_or_else(|| {
        panic!(
            "{what}: the resumed run did not restore\n{}",
            run.describe()
        )
    });
    assert!(
        from.ends_with(format!("chk-{newest}")),
        "{what}: restored {} instead of the newest checkpoint chk-{newest}\n{}",
        from.display(),
        run.describe()
    );
    run
}

/// Polls until `job_dir` holds a complete checkpoint with an id of at least `id` (older
/// ones may be gone: only the newest are retained); panics if `child` exits first. The
/// 120 s limit is a safety net, not a pass condition.
pub fn wait_for_checkpoint_id(child: &mut Child, job_dir: &Path, id: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while completed_checkpoints(job_dir).last().copied().unwrap_or(0) < id {
        if let Some(st) = child.try_wait().expect("try_wait") {
            panic!(
                "the run exited ({st}) before checkpoint {id} completed in {}",
                job_dir.display()
            );
        }
        assert!(
            Instant::now() < deadline,
            "checkpoint {id} did not complete in {} within 120 s",
            job_dir.display()
        );
        thread::sleep(Duration::from_millis(5));
    }
}
