//! The engine's error type.
//!
//! Every error a user can cause (a bad configuration, a missing input, a corrupt checkpoint)
//! carries a message that names the cause and the way out; the engine never panics on input.

use std::path::PathBuf;

use crate::storage::format::FormatError;
use crate::storage::StorageError;

/// Result alias used across the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while building or running a job.
///
/// Variants are coarse on purpose: callers mostly print them; the few that branch on them
/// (recovery falls back past a corrupt checkpoint) match on `Storage`/`Format`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The job graph or its configuration is invalid (found before anything runs).
    #[error("invalid job: {0}")]
    InvalidJob(String),
    /// A checkpoint file could not be read or written.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A checkpoint file is corrupt, truncated or foreign.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// State bytes in a checkpoint did not decode into the type the job declares.
    #[error("cannot decode {what}: {cause} (was the checkpoint written by a job with other state types?)")]
    StateDecode {
        /// What was being decoded (state name, operator uid).
        what: String,
        /// The decoder's message.
        cause: String,
    },
    /// A restore found a checkpoint that does not fit the job.
    #[error("cannot restore: {0}")]
    Restore(String),
    /// An I/O error outside checkpoint storage (sources, sinks).
    #[error("{op} {path}: {cause}")]
    Io {
        /// What was attempted ("cannot open input file").
        op: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The operating system's error (not a `source`, so it is printed once).
        cause: std::io::Error,
    },
    /// A user function returned an error.
    #[error("{0}")]
    User(String),
    /// A task failed (error or panic); carried to the restart strategy.
    #[error("task {task} failed: {cause}")]
    TaskFailed {
        /// The task's display name (`operator (subtask/parallelism)`).
        task: String,
        /// The error or panic message.
        cause: String,
    },
    /// The job failed and the restart strategy gave up.
    #[error("job failed after {attempts} attempt(s); last failure: {last}{}", giving_up(.why))]
    JobFailed {
        /// Attempts made, including the first.
        attempts: u32,
        /// The failure that ended the job.
        last: Box<Error>,
        /// Why the restart strategy gave up, when it was not simply out of restarts (a
        /// repeating failure, the failure rate); empty otherwise.
        why: String,
    },
    /// Too many consecutive checkpoints failed (`tolerable_failures` exceeded).
    #[error("{0}")]
    CheckpointFailures(String),
    /// The task was cancelled because another task failed; not a root cause.
    #[error("cancelled")]
    Cancelled,
    /// A channel to a subtask on another worker failed: the worker is lost (the message
    /// names it, its address and the way out). A root cause, unlike [`Error::Cancelled`].
    #[error("{0}")]
    PeerLost(String),
    /// The cluster's control plane failed: a coordinator out of reach, a refused worker
    /// (wrong token, another binary or plan), a worker lost (the message says which and
    /// the way out).
    #[error("{0}")]
    Cluster(String),
}

impl Error {
    /// Whether trying again later may succeed where this failed: checkpoint storage out of
    /// reach (see [`StorageError::is_transient`]). The restart strategy waits such a
    /// failure out without counting it as a failure that repeats identically.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Storage(e) if e.is_transient())
    }
    /// Wraps a user-facing message, for functions that want to fail their task.
    pub fn user(msg: impl Into<String>) -> Self {
        Error::User(msg.into())
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, cause: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            cause,
        }
    }
}

fn giving_up(why: &str) -> String {
    if why.is_empty() {
        String::new()
    } else {
        format!("; not restarting: {why}")
    }
}
