//! Controlling a running job from another thread: savepoints, checkpoints on demand,
//! stop-with-savepoint and status (what Flink's REST API offers; `weir-cli` puts HTTP in
//! front of it).
//!
//! A [`JobControl`] is a cheap handle, taken from the environment before `execute`. Its
//! requests are queued to the executor, which answers when the snapshot completed or
//! failed; status reads a board the executor keeps up to date, so it never waits.
//!
//! Every folder a request names goes through [`confine`]: a control request can only write
//! inside the savepoint directory the job was configured with.

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender};
use serde::Serialize;

pub use crate::runtime::operator_metrics::OperatorFigures;
use crate::runtime::status::TaskCounters;
pub use crate::runtime::status::{
    AttemptStatus, CheckpointRecord, DurationHistogram, InputStatus, OperatorStateSize,
    OperatorStatus, StateSize, StateSizes, StreamStatus, SubtaskPhases, SubtaskTimeline,
    TaskStatus, WorkerStatus, WorkerSubtask,
};
use crate::runtime::status::{Board, WorkerBoard};

/// What a control request asks the executor for.
#[derive(Debug)]
pub(crate) enum Request {
    /// A savepoint into `dir` (confined); the job goes on.
    Savepoint { dir: Option<PathBuf>, reply: Reply },
    /// A checkpoint now, whatever the interval.
    Checkpoint { reply: Reply },
    /// A savepoint into `dir`, then the job ends.
    Stop {
        dir: Option<PathBuf>,
        drain: bool,
        reply: Reply,
    },
}

/// Where the executor answers a request.
pub(crate) type Reply = Sender<Result<SnapshotDone, ControlError>>;

/// Why a control request was not carried out; the kind lets a front end choose its answer
/// (an HTTP status) without reading the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlError {
    /// What went wrong, in kinds a caller acts on differently.
    pub kind: ControlErrorKind,
    /// The cause and the way out, for people.
    pub message: String,
}

/// The kinds of [`ControlError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlErrorKind {
    /// The request itself is wrong (a folder outside the savepoint directory).
    BadRequest,
    /// The job cannot take it now: it ended, is finishing or is stopping.
    NotRunning,
    /// The snapshot was started and did not complete (or no answer came in time).
    Failed,
}

impl ControlError {
    pub(crate) fn new(kind: ControlErrorKind, message: impl Into<String>) -> Self {
        ControlError {
            kind,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ControlError {}

fn not_running() -> ControlError {
    ControlError::new(ControlErrorKind::NotRunning, "the job is no longer running")
}

/// A completed snapshot asked for through [`JobControl`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotDone {
    /// Its id (checkpoints and savepoints share one sequence).
    pub id: u64,
    /// Its folder: what `--restore` takes.
    pub path: PathBuf,
}

/// Where a job stands, as [`JobControl::status`] reports it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct JobStatus {
    /// The job's name.
    pub job: String,
    /// `created`, `running`, `restarting`, `stopping`, `finished`, `stopped` or `failed`.
    pub state: String,
    /// The current attempt (1 + restarts).
    pub attempt: u32,
    /// Parallelism per operator uid, in graph order.
    pub operators: Vec<(String, u32)>,
    /// The newest completed checkpoints (at most 10), oldest first.
    pub checkpoints: Vec<CheckpointStatus>,
    /// The savepoints taken so far in this run.
    pub savepoints: Vec<PathBuf>,
    /// Records emitted by the sources so far (replays included).
    pub source_records: u64,
    /// The operators with their names, uids, parallelism, chains and inputs.
    pub graph: Vec<OperatorStatus>,
    /// Every task (chain × subtask) with its record counter.
    pub tasks: Vec<TaskStatus>,
    /// The attempts that ended, with what failed them.
    pub attempts: Vec<AttemptStatus>,
    /// Restarts after a failure so far (attempts started after the first).
    pub restarts: u32,
    /// The newest checkpoints and savepoints, in progress, completed, failed or aborted
    /// (at most 200), oldest first.
    pub history: Vec<CheckpointRecord>,
    /// Checkpoints and savepoints completed so far.
    pub checkpoints_completed: u64,
    /// Checkpoints and savepoints that failed (not those a newer one subsumed).
    pub checkpoints_failed: u64,
    /// Bytes of state of the newest completed checkpoint or savepoint.
    pub last_checkpoint_bytes: u64,
    /// End-to-end durations of every completed checkpoint and savepoint.
    pub checkpoint_durations: DurationHistogram,
    /// State size per operator and state in the newest completed checkpoint or savepoint.
    pub state_sizes: StateSizes,
    /// Whether the job runs on a cluster's workers (`false`: in this one process).
    pub cluster: bool,
    /// The workers running the job, with their subtasks: the cluster's, or this process as
    /// one `local` worker.
    pub workers: Vec<WorkerStatus>,
}

/// One completed checkpoint in [`JobStatus`].
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointStatus {
    /// Its id.
    pub id: u64,
    /// Its folder.
    pub path: PathBuf,
    /// Trigger to completion, in milliseconds.
    pub duration_ms: u64,
    /// Bytes of state.
    pub bytes: u64,
    /// Whether any task took it unaligned (its barriers overtook queued records).
    pub unaligned: bool,
    /// Longest alignment of any task, in milliseconds: under backpressure the time an
    /// aligned checkpoint waits for queues, or an unaligned one waited before switching.
    pub alignment_ms: u64,
    /// Encoded bytes of the records in flight it saved (unaligned checkpoints).
    pub in_flight_bytes: u64,
}

/// The shared side of a job's control: the request queue and the status board.
#[derive(Debug)]
pub(crate) struct ControlHub {
    /// `None` once the job ended. Requests are sent while holding the lock, so after
    /// [`ControlHub::close`] took it no request can be left unanswered in the queue.
    requests_tx: Mutex<Option<Sender<Request>>>,
    pub(crate) requests: Receiver<Request>,
    pub(crate) status: Mutex<JobStatus>,
    /// The tasks' record counters, read into the status when it is asked for.
    pub(crate) counters: Mutex<TaskCounters>,
    /// What a cluster's coordinator knows of its workers, read into the status likewise.
    pub(crate) board: Mutex<Board>,
}

impl Default for ControlHub {
    fn default() -> Self {
        let (requests_tx, requests) = crossbeam_channel::unbounded();
        ControlHub {
            requests_tx: Mutex::new(Some(requests_tx)),
            requests,
            status: Mutex::new(JobStatus {
                state: "created".into(),
                ..Default::default()
            }),
            counters: Mutex::default(),
            board: Mutex::default(),
        }
    }
}

impl ControlHub {
    pub(crate) fn update(&self, f: impl FnOnce(&mut JobStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// A cluster's coordinator: the status lists `board`'s workers from now on.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn set_board(&self, board: Arc<dyn WorkerBoard>) {
        *self.board.lock().unwrap_or_else(|p| p.into_inner()) = Board(Some(board));
    }

    /// The job ended: refuse new requests and answer the queued ones.
    pub(crate) fn close(&self) {
        self.requests_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        for r in self.requests.try_iter() {
            let reply = match r {
                Request::Savepoint { reply, .. }
                | Request::Checkpoint { reply }
                | Request::Stop { reply, .. } => reply,
            };
            let _ = reply.send(Err(not_running()));
        }
    }
}

/// A handle on a running job, usable from any thread (see the module docs).
#[derive(Debug, Clone)]
pub struct JobControl {
    pub(crate) hub: Arc<ControlHub>,
}

/// Longest a request waits for its snapshot before giving up (the snapshot itself goes on).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

impl JobControl {
    fn ask(&self, make: impl FnOnce(Reply) -> Request) -> Result<SnapshotDone, ControlError> {
        let (tx, rx) = bounded(1);
        {
            let sender = self
                .hub
                .requests_tx
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let sent = sender.as_ref().map(|s| s.send(make(tx)));
            if !matches!(sent, Some(Ok(()))) {
                return Err(not_running());
            }
        }
        match rx.recv_timeout(REQUEST_TIMEOUT) {
            Ok(r) => r,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(ControlError::new(
                ControlErrorKind::Failed,
                format!(
                    "no answer within {}s; the snapshot may still complete",
                    REQUEST_TIMEOUT.as_secs()
                ),
            )),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(ControlError::new(
                ControlErrorKind::NotRunning,
                "the job ended before the snapshot completed",
            )),
        }
    }

    /// Takes a savepoint into `dir` (inside the job's savepoint directory; `None` for that
    /// directory itself) and waits until it is complete. The job keeps running.
    pub fn trigger_savepoint(&self, dir: Option<PathBuf>) -> Result<SnapshotDone, ControlError> {
        self.ask(|reply| Request::Savepoint { dir, reply })
    }

    /// Takes a checkpoint now and waits until it is complete.
    pub fn trigger_checkpoint(&self) -> Result<SnapshotDone, ControlError> {
        self.ask(|reply| Request::Checkpoint { reply })
    }

    /// Stops the job with a savepoint: sources stop, the savepoint is taken, sinks commit,
    /// the job ends. With `drain`, sources first end their input so that operators emit what
    /// they hold (timers, partial results). Waits until the savepoint is complete.
    pub fn stop_with_savepoint(
        &self,
        dir: Option<PathBuf>,
        drain: bool,
    ) -> Result<SnapshotDone, ControlError> {
        self.ask(|reply| Request::Stop { dir, drain, reply })
    }

    /// Where the job stands now (never waits for the job).
    pub fn status(&self) -> JobStatus {
        let mut status = self
            .hub
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.hub
            .counters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .fill(&mut status);
        let board = self
            .hub
            .board
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        board.fill(&mut status);
        // Every attempt after the first is a restart (a failed last attempt is not one).
        status.restarts = status.attempt.saturating_sub(1);
        status
    }
}

/// Resolves the folder a control request names against the job's savepoint directory
/// `base`: `None` is `base`; a relative path is taken inside `base`; an absolute path must
/// lie inside `base`. `..` is refused everywhere, so a request can never reach outside.
pub fn confine(base: &Path, requested: Option<&Path>) -> Result<PathBuf, ControlError> {
    let Some(req) = requested else {
        return Ok(base.to_path_buf());
    };
    // No file system takes a NUL in a name: refused as the caller's mistake here, not
    // failed later as a checkpoint that could not be written.
    if req.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(ControlError::new(
            ControlErrorKind::BadRequest,
            format!(
                "{req:?} contains a NUL byte, which no folder name may hold; name another \
                 folder"
            ),
        ));
    }
    let outside = || {
        let message = format!(
            "{} is outside the job's savepoint directory {}; name a folder inside it \
             (or restart the job with another --savepoint-dir)",
            req.display(),
            base.display()
        );
        ControlError::new(ControlErrorKind::BadRequest, message)
    };
    if req
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
    {
        return Err(outside());
    }
    let candidate = if req.is_relative() {
        base.join(req)
    } else {
        lexically_inside(base, req).ok_or_else(outside)?
    };
    // A symbolic link inside the savepoint directory must not lead out of it: resolve the
    // part of the path that exists and check where it really is.
    if !really_inside(base, &candidate) {
        return Err(outside());
    }
    Ok(candidate)
}

/// `req` (absolute) if it lies inside `base` as spelt, absolutely or canonically.
fn lexically_inside(base: &Path, req: &Path) -> Option<PathBuf> {
    let absolute_base = std::path::absolute(base).ok()?;
    let canonical_base = base.canonicalize().ok();
    let inside =
        req.starts_with(&absolute_base) || canonical_base.is_some_and(|c| req.starts_with(c));
    inside.then(|| req.to_path_buf())
}

/// Whether the deepest existing ancestor of `candidate` (itself included), with every
/// symbolic link resolved, lies inside `base` resolved the same way. A base that does not
/// exist yet holds no link, so anything under it is inside.
fn really_inside(base: &Path, candidate: &Path) -> bool {
    let Ok(canonical_base) = base.canonicalize() else {
        return true;
    };
    let mut existing = Some(candidate);
    while let Some(p) = existing {
        if p.symlink_metadata().is_ok() {
            return p
                .canonicalize()
                .is_ok_and(|real| real.starts_with(&canonical_base));
        }
        existing = p.parent();
    }
    false
}

/// A savepoint's folder name: unique (id and a random suffix), and naming its job.
pub(crate) fn savepoint_folder_name(job: &str, id: u64) -> String {
    format!("savepoint-{job}-{id}-{:06x}", fastrand::u32(..0x100_0000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_stay_inside_the_savepoint_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("sp");
        std::fs::create_dir_all(&base).unwrap();
        assert_eq!(confine(&base, None).unwrap(), base);
        assert_eq!(
            confine(&base, Some(Path::new("nightly"))).unwrap(),
            base.join("nightly")
        );
        assert_eq!(
            confine(&base, Some(&base.join("a/b"))).unwrap(),
            base.join("a/b")
        );
        for bad in ["../x", "a/../../x", "/etc", "/tmp"] {
            let e = confine(&base, Some(Path::new(bad)))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("outside the job's savepoint directory"),
                "{bad}: {e}"
            );
        }
        let sneaky = base.join("../other");
        assert!(confine(&base, Some(&sneaky)).is_err());
        // A NUL byte is the caller's mistake (a 400), not a checkpoint that failed later.
        for nul in ["a\0b", "\0"] {
            let e = confine(&base, Some(Path::new(nul))).unwrap_err();
            assert_eq!(e.kind, ControlErrorKind::BadRequest, "{nul:?}");
            assert!(e.to_string().contains("NUL byte"), "{e}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_cannot_lead_a_request_out() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("sp");
        let outside = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, base.join("link")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("gone"), base.join("dangling")).unwrap();
        for bad in ["link", "link/deeper/still", "dangling"] {
            let e = confine(&base, Some(Path::new(bad)))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("outside the job's savepoint directory"),
                "{bad}: {e}"
            );
            let abs = base.join(bad);
            assert!(confine(&base, Some(&abs)).is_err(), "{}", abs.display());
        }
        // A link that stays inside is fine, and so is a folder not created yet.
        std::fs::create_dir_all(base.join("real")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("alias")).unwrap();
        assert!(confine(&base, Some(Path::new("alias/x"))).is_ok());
        assert!(confine(&base, Some(Path::new("new/folder"))).is_ok());
    }

    #[test]
    fn a_relative_base_accepts_its_absolute_spelling() {
        let cwd = std::env::current_dir().unwrap();
        let base = Path::new("weir-savepoints-test-rel");
        let abs = cwd.join(base).join("x");
        assert_eq!(confine(base, Some(&abs)).unwrap(), abs);
    }

    #[test]
    fn folder_names_carry_job_and_id() {
        let n = savepoint_folder_name("wc", 42);
        assert!(n.starts_with("savepoint-wc-42-"), "{n}");
        assert_eq!(n.len(), "savepoint-wc-42-".len() + 6);
    }
}
