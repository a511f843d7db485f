//! Reading back the checkpoint a run or a restart resumes from, on the coordinator side:
//! the notice for a restore that rewinds past newer checkpoints, and a restart's reload
//! under the restart strategy when the checkpoint store is out of reach.
//!
//! Invariant: a checkpoint that reads but not cleanly is never replaced by a guess; the
//! run fails naming it and the way out (`--restore latest`).

use std::time::{Duration, Instant};

use super::restart::{Failure, RestartDecision, RestartTracker};
use crate::checkpoint::restore::{self, RestoredCheckpoint};
use crate::checkpoint::storage::CheckpointStorage;
use crate::error::Error;

/// The notice for a restore from checkpoint or savepoint `restored` while the job's folder
/// holds newer complete checkpoints: the restore rewinds the sources past them, so what
/// transactional sinks committed after `restored` is produced and committed again — as in
/// Flink, where exactly-once holds for resuming from the latest checkpoint. Saying so
/// keeps a user who forks or re-runs from an old point from mistaking the repeat for a bug.
pub(super) fn rewind_notice(storage: &CheckpointStorage, restored: u64) -> Option<String> {
    let newer: Vec<u64> = storage
        .completed_checkpoints()
        .ok()?
        .into_iter()
        .filter(|&id| id > restored)
        .collect();
    let newest = *newer.last()?;
    Some(format!(
        "restoring checkpoint {restored}, older than the {} newer complete checkpoint(s) up to \
         {newest} in {}: the sources replay from checkpoint {restored}, so output that \
         transactional sinks committed after it is written again (restore `latest` to \
         continue without repeating output)",
        newer.len(),
        storage.root().display()
    ))
}

/// Why a restart could not read back the checkpoint it resumes from.
pub(super) enum Reload {
    /// The checkpoint store stayed out of reach longer than the restart strategy waits:
    /// the last error, and why the strategy gave up (empty when it ran out of restarts).
    GaveUp(Error, String),
    /// The checkpoint reads, but not cleanly (damaged, foreign): reading it again cannot
    /// help, and the job refuses to guess another one.
    Unreadable(Error),
}

/// Reads back the checkpoint a restart resumes from. A store out of reach (an outage:
/// [`Error::is_transient`]) is a failure like any other: the restart strategy decides
/// whether and when to try again, with its backoff, so a short outage costs time, not the
/// job. `notice` tells the user about every try that failed.
pub(super) fn reload_checkpoint(
    mut loading: restore::Prefetch,
    restarts: &mut RestartTracker,
    progress: Option<u64>,
    mut notice: impl FnMut(String),
) -> std::result::Result<RestoredCheckpoint, Reload> {
    loop {
        let (path, e) = match loading.wait() {
            Ok(r) => return Ok(r),
            Err(failed) => failed,
        };
        if !e.is_transient() {
            // The checkpoint we wrote no longer reads: refuse to guess; the user decides
            // where to resume from.
            return Err(Reload::Unreadable(Error::Restore(format!(
                "cannot reload checkpoint {} after a failure: {e}; restart with --restore \
                 latest (it skips unreadable checkpoints)",
                path.display()
            ))));
        }
        let decision = restarts.on_failure(Failure {
            at: Instant::now(),
            message: &e.to_string(),
            injected: false,
            transient: true,
            membership: false,
            progress,
            ran_for: Duration::ZERO,
        });
        match decision {
            RestartDecision::Restart(delay) => {
                notice(format!(
                    "cannot reload checkpoint {} (the checkpoint storage is out of reach: {e}); \
                     trying again in {delay:?}",
                    path.display()
                ));
                std::thread::sleep(delay);
                loading = restore::Prefetch::start(path);
            }
            RestartDecision::GiveUp(why) => {
                let last = Error::Restore(format!(
                    "cannot reload checkpoint {} after a failure: {e}; once the checkpoint \
                     storage is back, resume with --restore latest",
                    path.display()
                ));
                return Err(Reload::GaveUp(last, why));
            }
        }
    }
}
