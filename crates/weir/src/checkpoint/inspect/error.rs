//! [`InspectError`]: every way an inspection can fail, each naming the file and the way out.

use std::path::PathBuf;

use super::super::storage::StorageError;

/// Why a checkpoint could not be inspected. Every message names the checkpoint or file
/// and says what to do, so a tool can print it as one line.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// A file is missing, unreadable, foreign, truncated or corrupted, or the path is not a
    /// complete checkpoint (the storage layer's message says which).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The path is a job's folder (`<checkpoint-dir>/<job>`) rather than one checkpoint in
    /// it; users pass it by mistake often enough to deserve its own hint.
    #[error(
        "{} is a job's checkpoint folder, not a checkpoint; pass one of its complete \
         checkpoints: {} (the newest is {})",
        .path.display(),
        .checkpoints.iter().map(|id| format!("chk-{id}")).collect::<Vec<_>>().join(", "),
        .path.join(format!("chk-{}", .checkpoints.last().copied().unwrap_or_default())).display()
    )]
    JobFolder {
        /// The folder given.
        path: PathBuf,
        /// Ids of the complete checkpoints in it, ascending (never empty).
        checkpoints: Vec<u64>,
    },
    /// An intact file (its checksum matches) whose payload is not in the layout this
    /// build writes: a different Weir version, or a bug.
    #[error(
        "{}: cannot decode {what} ({cause}); the file is intact but not in the layout this \
         Weir writes (written by another version?); inspect it with the Weir that wrote it",
        .path.display()
    )]
    Undecodable {
        /// The file.
        path: PathBuf,
        /// What it should hold ("checkpoint metadata", "keyed state").
        what: &'static str,
        /// The decoder's message.
        cause: String,
    },
    /// The files decode but contradict each other or the metadata.
    #[error(
        "{} is inconsistent: {detail}; the checkpoint is damaged or was not written by \
         Weir, inspect another checkpoint",
        .path.display()
    )]
    Inconsistent {
        /// The file or checkpoint folder.
        path: PathBuf,
        /// What does not add up.
        detail: String,
    },
    /// No operator with this uid has state in the checkpoint.
    #[error(
        "no operator with uid '{uid}' in checkpoint {}; {}",
        .checkpoint.display(), one_of("its operators are", .known)
    )]
    UnknownUid {
        /// The checkpoint folder.
        checkpoint: PathBuf,
        /// The uid asked for.
        uid: String,
        /// The uids that exist, sorted.
        known: Vec<String>,
    },
    /// The operator exists but has no state of this name.
    #[error(
        "operator '{uid}' has no state '{state}' in checkpoint {}; {}",
        .checkpoint.display(), one_of("its states are", .known)
    )]
    UnknownState {
        /// The checkpoint folder.
        checkpoint: PathBuf,
        /// The operator's uid.
        uid: String,
        /// The state asked for.
        state: String,
        /// The states the operator has, sorted.
        known: Vec<String>,
    },
    /// A state's entries do not decode as the types the caller asked for.
    #[error("cannot decode state '{state}' of operator '{uid}' as {as_type}: {cause}")]
    WrongType {
        /// The operator's uid.
        uid: String,
        /// The state's name.
        state: String,
        /// The type the caller tried (for the message).
        as_type: String,
        /// What went wrong.
        cause: String,
    },
}

/// "its states are: a, b" or "it has none".
fn one_of(intro: &str, known: &[String]) -> String {
    if known.is_empty() {
        "it has none".to_string()
    } else {
        format!("{intro}: {}", known.join(", "))
    }
}
