//! What a job reports: live counters while it runs ([`JobMetrics`]) and, when it ends, its
//! [`JobResult`] — completed checkpoints, restarts, and per attempt the checkpoint it
//! restored and the records its sources read ([`AttemptSummary`]), which is what shows a
//! recovery resumed rather than started over.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

/// Live counters of a running job, readable from any thread (for progress lines).
#[derive(Debug, Default)]
pub struct JobMetrics {
    /// Records emitted by sources (replays after a recovery included).
    pub source_records: AtomicU64,
    /// Checkpoints completed.
    pub checkpoints_completed: AtomicU64,
    /// Duration of the last completed checkpoint, in microseconds.
    pub last_checkpoint_micros: AtomicU64,
    /// Restarts so far.
    pub restarts: AtomicU64,
    /// Notices not yet taken by [`JobMetrics::take_notices`].
    pending_notices: Mutex<Vec<String>>,
}

impl JobMetrics {
    /// Notices (skipped checkpoints, failed attempts, fresh starts) raised since the last
    /// call, so a front end can show them while the job runs; all of them also end up in
    /// [`JobResult::notices`].
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(
            &mut *self
                .pending_notices
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    pub(crate) fn notice(&self, result: &mut JobResult, msg: String) {
        self.pending_notices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(msg.clone());
        result.notices.push(msg);
    }
}

/// Statistics of one completed checkpoint.
#[derive(Debug, Clone)]
pub struct CompletedCheckpointStats {
    /// Its id.
    pub id: u64,
    /// Trigger to metadata written.
    pub duration: Duration,
    /// Bytes of state written.
    pub bytes: u64,
    /// Longest synchronous pause of any task.
    pub max_sync: Duration,
    /// Longest alignment of any task.
    pub max_alignment: Duration,
    /// Records the sources had emitted up to its barrier, since the job first started
    /// (summed over sources): how far the input a restore from it resumes.
    pub source_records: u64,
    /// Tasks that took their snapshot unaligned (zero: the checkpoint was aligned).
    pub unaligned_tasks: u32,
    /// Records in flight saved as channel state (unaligned checkpoints).
    pub in_flight_records: u64,
    /// Encoded bytes of those records: the checkpoint's persisted in-flight data.
    pub in_flight_bytes: u64,
}

/// What a finished job reports.
#[derive(Debug, Clone, Default)]
pub struct JobResult {
    /// Attempts run (1 + restarts).
    pub attempts: u32,
    /// The checkpoint the job started from, if any.
    pub restored_from: Option<PathBuf>,
    /// Completed checkpoints, in order.
    pub checkpoints: Vec<CompletedCheckpointStats>,
    /// Checkpoints aborted for a failure (timeouts, write errors); not subsumed ones.
    pub failed_checkpoints: u64,
    /// Failures injected (when injection is configured) and planned.
    pub injected_failures: Option<(usize, usize)>,
    /// Wall time of the whole job.
    pub duration: Duration,
    /// Records emitted by sources in total (replays included).
    pub source_records: u64,
    /// Messages worth showing the user (skipped corrupt checkpoints, fresh starts).
    pub notices: Vec<String>,
    /// Savepoints taken during the run (the stopping one included).
    pub savepoints: Vec<PathBuf>,
    /// The savepoint the job stopped with (`JobControl::stop_with_savepoint`), if it did.
    pub stopped_with_savepoint: Option<PathBuf>,
    /// One entry per attempt, in order: where it started from and what it read. This is
    /// what shows that a recovery resumed from a checkpoint's positions and did not start
    /// over (which, over a bounded input, would give the same final counts).
    pub history: Vec<AttemptSummary>,
}

/// One attempt of a job: the checkpoint it restored, the records its sources read, and
/// how it ended.
#[derive(Debug, Clone, Default)]
pub struct AttemptSummary {
    /// The attempt's number (1 for the first).
    pub attempt: u32,
    /// The checkpoint or savepoint it started from; `None` for a start from the beginning.
    pub restored: Option<RestoreInfo>,
    /// Records the sources emitted during this attempt (replays of what a failed attempt
    /// had read included).
    pub source_records: u64,
    /// Why it failed; `None` if it finished (or stopped with a savepoint).
    pub failure: Option<String>,
}

/// A restore: which checkpoint, and how far into their input the sources resumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreInfo {
    /// The checkpoint's id.
    pub checkpoint_id: u64,
    /// Its folder.
    pub path: PathBuf,
    /// Records the job's sources had emitted before the restored positions (summed over
    /// the sources the job still has). Those records are not read again; 0 means the
    /// checkpoint recorded no progress (or predates layout 3 of the metadata).
    pub source_records: u64,
}

impl JobResult {
    /// Records the sources had already read at the checkpoint the job started from: what
    /// a resumed run skips (0 for a fresh start).
    pub fn records_restored(&self) -> u64 {
        self.history
            .first()
            .and_then(|a| a.restored.as_ref())
            .map_or(0, |r| r.source_records)
    }

    /// The restore the last attempt started from, if any.
    pub fn last_restore(&self) -> Option<&RestoreInfo> {
        self.history.last().and_then(|a| a.restored.as_ref())
    }
}
