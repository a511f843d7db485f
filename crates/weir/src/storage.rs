//! Checkpoint storage: the lowest layer of the engine.
//!
//! It knows objects, folders and bytes, not checkpoints' meaning, and imports nothing else
//! of the crate (see the layer map in the crate docs):
//!
//! * [`backend`] — the storage trait ([`StorageBackend`]): streamed put, get by range,
//!   list, delete, create-if-absent, one owner per job folder; implemented by [`local`]
//!   (a local disk), [`memory`] (tests) and, with the `s3` feature, `S3Backend`
//!   (S3-compatible object storage). [`open_backend`] picks one by location
//!   (`/a/folder`, `s3://bucket/prefix`, `mem://store/prefix`).
//! * internal: `format` (the checksummed envelope of every file), `shared_bytes` (ranges
//!   of a loaded file, handed out without copying) and `CheckpointStorage` (the checkpoint
//!   layout on any backend).
//!
//! Public, for tools: the backend trait and its implementations, [`open_backend`],
//! [`StorageError`] and the names of the layout ([`METADATA_FILE_NAME`],
//! [`parse_checkpoint_dir_name`]). Everything else is the engine's.
//!
//! **Not an extension point yet.** The engine opens every location through
//! [`open_backend`], which knows local paths, `s3://` and `mem://`; neither the runner nor
//! `JobConfig` takes a backend of your own, so implementing [`StorageBackend`] gives you
//! something that nothing calls. Making it pluggable means a registry of schemes shared by
//! the engine, `--restore`, savepoints and the inspect tools; until then the trait may
//! change between minor versions.
//!
//! ```text
//! <checkpoint-dir>/<job-id>/chk-<n>/_metadata            written last; present ⇔ complete
//! <checkpoint-dir>/<job-id>/chk-<n>/<uid>/<file-name>    state files
//! <checkpoint-dir>/<job-id>/shared/<uid>/<file-name>     incremental checkpoints' keyed
//!                                                        state, shared between checkpoints
//! ```
//!
//! Guarantees: every file is written whole or not at all (locally: temp name in the same
//! directory, fsync, rename; the temp file is removed on error), so a crash never leaves a
//! half-written file under a real name. `_metadata` is written after the state files, with
//! create-if-absent, so a checkpoint listed as complete has all its files stored. Discarding
//! removes `_metadata` first, so a half-discarded checkpoint is never mistaken for a
//! complete one. Reading works on any checkpoint folder (it may have been copied elsewhere)
//! and treats the metadata as untrusted: relative paths from it cannot leave the folder.
//! Every error names the path, the cause and the way out.

use self::backend::{Ownership, StorageBackend};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[cfg(feature = "cluster")]
mod announce;
pub mod backend;
mod confined;
pub(crate) mod format;
pub mod local;
mod mapped;
pub mod memory;
mod read;
#[cfg(feature = "s3")]
pub(crate) mod s3;
pub(crate) mod shared_bytes;
mod streamed;
pub use format::{FileKind, FormatError};
pub(crate) use read::{read_metadata, read_state_file, read_state_payload};
#[cfg(feature = "s3")]
pub use s3::{open_with_endpoint, transfers, S3Backend, Transfers, LEASE_OBJECT};
use streamed::write_streamed;
pub(crate) use streamed::{PayloadWriter, SpillFile};

/// The file in a job's checkpoint folder that its running owner holds locked; it records
/// who holds it. A lock (not the file's presence) is what counts, so a run killed with
/// SIGKILL leaves nothing to clean up: the operating system releases its lock.
pub(crate) const LOCK_FILE_NAME: &str = "_lock";

/// Name of the file whose presence makes a checkpoint complete; reserved, so no uid may use it.
pub const METADATA_FILE_NAME: &str = "_metadata";

/// The folder of a job's checkpoint directory that holds the state files shared between
/// incremental checkpoints (`<checkpoint-dir>/<job>/shared/<uid>/<file>`).
pub const SHARED_DIR: &str = "shared";

/// [`SHARED_DIR`] with its separator: what every shared file's job-relative path starts with.
const SHARED_PREFIX: &str = "shared/";

/// Longest uid, job id or file name accepted, leaving room for the temp-file decoration
/// within the usual 255-byte file-name limit.
pub(crate) const MAX_NAME_LEN: usize = 200;

const WRITE_HINT: &str =
    "check that the folder is writable and the disk is not full, or pass --checkpoint-dir";
const READ_HINT: &str =
    "check the checkpoint path and its permissions, or restore from another checkpoint";

/// Why a checkpoint could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A file-system operation failed.
    #[error("cannot {op} {}: {} ({hint})", .path.display(), short_io(.cause))]
    Io {
        /// What was being done, e.g. "create checkpoint directory".
        op: &'static str,
        /// The file or folder it was done to.
        path: PathBuf,
        /// The OS error (kept out of `source()` because the message already shows it).
        cause: io::Error,
        /// The way out.
        hint: &'static str,
    },
    /// A file exists but is not a valid checkpoint file of the expected kind.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A uid, job id or file name cannot be used as a single folder or file name.
    #[error(
        "invalid {what} {name:?}: {reason}; pick a name of letters, digits, '-', '_' or \
         '.' (not leading), at most {MAX_NAME_LEN} bytes"
    )]
    InvalidName {
        /// Which name, e.g. "operator uid".
        what: &'static str,
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// Another run holds the job's checkpoint folder (docs/architecture.md §6, "one owner").
    #[error(
        "the checkpoint folder {} is in use by another run ({holder}); stop that run, or give \
         this one another --job-name or --checkpoint-dir",
        .root.display()
    )]
    InUse {
        /// The job's checkpoint folder.
        root: PathBuf,
        /// Who holds it, as the holder recorded (process id, start time).
        holder: String,
    },
    /// A state-file path read from metadata would leave the checkpoint folder.
    #[error(
        "refusing to read state file {relative:?} of checkpoint {}: {reason}; the metadata \
         is damaged or was not written by Weir, restore from another checkpoint",
        .checkpoint.display()
    )]
    UnsafePath {
        /// The checkpoint folder.
        checkpoint: PathBuf,
        /// The path as found in the metadata.
        relative: String,
        /// Why it is unsafe.
        reason: &'static str,
    },
    /// The path given as a checkpoint folder is missing, not a folder, or has no `_metadata`
    /// (the checkpoint never completed).
    #[error(
        "not a complete checkpoint ({reason}): {}; pass a chk-<n> folder that holds {}, or \
         restore another checkpoint (--restore latest picks the newest complete one)",
        .path.display(), METADATA_FILE_NAME
    )]
    NotACheckpoint {
        /// The path given.
        path: PathBuf,
        /// "no _metadata", "no such folder" or "not a folder".
        reason: &'static str,
    },
    /// An intact state file that is not the one the checkpoint's `_metadata` recorded: it
    /// was written for another checkpoint or run (copied in), or replaced since.
    #[error(
        "state file {} does not belong to this checkpoint: its checksum is {found:#010x}, but \
         the checkpoint's _metadata recorded {expected:#010x} for it (it was copied in from \
         another checkpoint or run, or replaced); restore from another checkpoint",
        .path.display()
    )]
    ForeignFile {
        /// The file.
        path: PathBuf,
        /// Its checksum (the CRC-32C in its trailer).
        found: u32,
        /// The one recorded in the metadata.
        expected: u32,
    },
    /// A checkpoint location (`--checkpoint-dir`, `--restore`, `--savepoint-dir`) that
    /// cannot be used as given: an unknown scheme, a feature not built in, a bad URL.
    #[error("cannot use {location:?} for checkpoints: {reason}; {hint}")]
    Location {
        /// The location as given.
        location: String,
        /// What is wrong with it.
        reason: String,
        /// The way out.
        hint: &'static str,
    },
    /// Remote storage refused or failed a request after the client's own retries: wrong
    /// credentials or a missing bucket (which no retry fixes), or a server that could not
    /// be reached or answered with an error of its own (which a later try may get past).
    #[error("cannot {op} {location}: {cause}; {hint}")]
    Remote {
        /// What was being done.
        op: &'static str,
        /// The object or prefix, as a URL.
        location: String,
        /// The cause, as the server or client said it.
        cause: String,
        /// The way out.
        hint: String,
        /// Whether trying again later may succeed: the server was unreachable, timed out
        /// or failed on its side, as in an outage ([`StorageError::is_transient`]).
        transient: bool,
    },
    /// This run owned the job folder, and another run took it over (its S3 lease expired
    /// while this run stalled, or the conditional renewal found a new holder). Retrying or
    /// restarting cannot fix it: the run must stop, writing nothing more there.
    #[error(
        "this run lost the checkpoint folder {location}: its lease ({lease}) was taken over \
         by {holder}, so the run stops and writes nothing more there (the run holding the \
         lease goes on); if this run was only stalled, give runs a longer lease with \
         WEIR_S3_LEASE_SECONDS"
    )]
    OwnershipLost {
        /// The job folder, as a URL.
        location: String,
        /// The lease object, as a URL.
        lease: String,
        /// The new holder, as its lease records it.
        holder: String,
    },
}

impl StorageError {
    /// Whether this run lost the ownership of its job folder to another run
    /// ([`StorageError::OwnershipLost`]): the job then ends at once instead of restarting.
    pub fn is_ownership_lost(&self) -> bool {
        matches!(self, StorageError::OwnershipLost { .. })
    }

    /// Whether trying the same operation again later may succeed: the store could not be
    /// reached, timed out or failed on its side (an outage), as opposed to data that is
    /// wrong, a name that is invalid or settings that are refused. A restart reloading its
    /// checkpoint treats the first kind as a failure for the restart strategy to wait out.
    pub fn is_transient(&self) -> bool {
        match self {
            StorageError::Remote { transient, .. } => *transient,
            StorageError::Io { cause, .. } => matches!(
                cause.kind(),
                io::ErrorKind::TimedOut
                    | io::ErrorKind::Interrupted
                    | io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::NotConnected
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::WouldBlock
            ),
            _ => false,
        }
    }

    /// Whether the object or file was not there (so a caller can treat absence as a
    /// state, e.g. an incomplete checkpoint, rather than as a failure).
    pub fn is_not_found(&self) -> bool {
        matches!(self, StorageError::Io { cause, .. } if cause.kind() == io::ErrorKind::NotFound)
    }

    /// Whether a create-if-absent found the object already there.
    pub fn is_already_exists(&self) -> bool {
        matches!(self, StorageError::Io { cause, .. }
            if cause.kind() == io::ErrorKind::AlreadyExists)
    }

    /// Whether a path component was a file where a folder was expected (a `--restore`
    /// path inside a file).
    fn is_not_a_directory(&self) -> bool {
        matches!(self, StorageError::Io { cause, .. }
            if cause.kind() == io::ErrorKind::NotADirectory)
    }

    /// The same I/O failure told as `op` with the way out `hint`, for a caller that knows
    /// better than the backend what was being done.
    fn reframed(self, op: &'static str, hint: &'static str) -> StorageError {
        match self {
            StorageError::Io { path, cause, .. } => StorageError::Io {
                op,
                path,
                cause,
                hint,
            },
            other => other,
        }
    }
}

/// Renders an io::Error without the "(os error N)" suffix that users do not need.
fn short_io(e: &io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => s[..i].to_string(),
        _ => s,
    }
}

fn io_err(
    op: &'static str,
    path: &Path,
    hint: &'static str,
) -> impl FnOnce(io::Error) -> StorageError {
    let path = path.to_path_buf();
    move |cause| StorageError::Io {
        op,
        path,
        cause,
        hint,
    }
}

/// Checks that `name` is one safe path component, so user strings (uids, job ids, file
/// names) can never reach outside their folder or collide with temp and metadata files.
/// `what` names the thing in the error (e.g. "operator uid"). Call it early (when the job
/// graph is built) to fail before the first checkpoint.
pub(crate) fn validate_name(what: &'static str, name: &str) -> Result<(), StorageError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("it is too long")
    } else if name.contains(['/', '\\']) {
        Some("it contains a path separator")
    } else if name.chars().any(char::is_control) {
        Some("it contains a control character")
    } else if name.contains('~') {
        Some("'~' is reserved: it separates job name and uid in transaction names")
    } else if name.starts_with('.') {
        Some("names starting with '.' are reserved for temporary files")
    } else if name == METADATA_FILE_NAME {
        Some("the name is reserved for checkpoint metadata")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StorageError::InvalidName {
            what,
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Who this run is, as recorded for a second run refused by [`StorageError::InUse`]:
/// process id and start time (and host, where the holder may be on another machine).
pub(crate) fn holder_description() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "process {} since {since} (seconds since the Unix epoch)",
        std::process::id()
    )
}

/// Parses a `chk-<n>` folder name (canonical decimal only, so `chk-<n>` and the id map one
/// to one); anything else in the job folder is ignored by listings.
pub fn parse_checkpoint_dir_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("chk-")?;
    let canonical = digits == "0" || !digits.starts_with('0');
    let decimal = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    if canonical && decimal {
        digits.parse().ok()
    } else {
        None
    }
}

/// The backend for a checkpoint location as users give it: `s3://bucket/prefix` (with the
/// `s3` feature), `mem://store/prefix` (a registered [`memory::MemoryStore`]) or a local
/// path. Any other `scheme://` is refused rather than taken for a folder named `scheme:`.
pub fn open_backend(location: &Path) -> Result<Box<dyn StorageBackend>, StorageError> {
    let Some(text) = location.to_str() else {
        return Ok(Box::new(local::LocalBackend::new(location.to_path_buf())));
    };
    let Some((scheme, rest)) = text.split_once("://") else {
        scheme_typo(text)?;
        return Ok(Box::new(local::LocalBackend::new(location.to_path_buf())));
    };
    match scheme {
        "mem" => Ok(Box::new(memory::open(text, rest)?)),
        #[cfg(feature = "s3")]
        "s3" => Ok(Box::new(s3::open(text, rest)?)),
        #[cfg(not(feature = "s3"))]
        "s3" => Err(StorageError::Location {
            location: text.to_string(),
            reason: "this Weir was built without S3 support".into(),
            hint: "rebuild with `--features s3`, or use a local folder",
        }),
        "file" => Ok(Box::new(local::LocalBackend::new(PathBuf::from(rest)))),
        _ => Err(StorageError::Location {
            location: text.to_string(),
            reason: format!("unknown storage scheme {scheme:?}"),
            hint: "use a local folder or an s3://bucket/prefix URL",
        }),
    }
}

/// The URL schemes [`open_backend`] knows.
const SCHEMES: &[&str] = &["s3", "mem", "file"];

/// Checks a location as a user typed it (`--checkpoint-dir`, `--savepoint-dir`), before
/// anything is appended to it: `s3://` or `mem://` with no bucket would otherwise take
/// the first folder appended (the job's name) for the bucket, and a scheme typo (`s3:b/x`,
/// `s3:/b/x`) would silently become a local folder named `s3:b`.
pub fn check_location(location: &Path) -> Result<(), StorageError> {
    let Some(text) = location.to_str() else {
        return Ok(());
    };
    match text.split_once("://") {
        Some((scheme @ ("s3" | "mem"), rest)) if rest.split('/').next() == Some("") => {
            let what = if scheme == "s3" { "bucket" } else { "store" };
            Err(StorageError::Location {
                location: text.to_string(),
                reason: format!("no {what} named after {scheme}://"),
                hint: "write s3://bucket/prefix (the job's folder goes under the prefix)",
            })
        }
        Some(_) => Ok(()),
        None => scheme_typo(text),
    }
}

/// Refuses `scheme:rest` without `//` for a scheme [`open_backend`] knows, naming the URL
/// the user most likely meant; `./s3:x` still names a local folder of that name.
fn scheme_typo(text: &str) -> Result<(), StorageError> {
    let Some((scheme, rest)) = text.split_once(':') else {
        return Ok(());
    };
    if !SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme)) {
        return Ok(());
    }
    let intended = format!(
        "{}://{}",
        scheme.to_ascii_lowercase(),
        rest.trim_start_matches('/')
    );
    Err(StorageError::Location {
        location: text.to_string(),
        reason: format!(
            "`{scheme}:` without `//` is not a URL (it would be a local folder named \
             {:?}); did you mean {intended}?",
            text.split('/').next().unwrap_or(text)
        ),
        hint: "write scheme://bucket/prefix, or ./ before the name for a local folder",
    })
}

/// Whether `location` names remote or in-memory storage (`scheme://…`) rather than a
/// local folder, so callers know not to use file-system calls on it.
pub fn is_remote(location: &Path) -> bool {
    location
        .to_str()
        .and_then(|t| t.split_once("://"))
        .is_some_and(|(scheme, _)| scheme != "file")
}

/// `location` made absolute for a reply to someone in another folder: local paths against
/// the current directory; URLs are absolute already.
pub(crate) fn absolute_location(location: &Path) -> PathBuf {
    if is_remote(location) {
        location.to_path_buf()
    } else {
        std::path::absolute(location).unwrap_or_else(|_| location.to_path_buf())
    }
}

/// `path` relative to `base`, as spelt, absolutely or canonically (the spellings
/// `runtime::control::confine` accepts); `None` when it is not below `base`.
fn relative_to(base: &Path, path: &Path) -> Option<PathBuf> {
    let spellings = [
        Some(base.to_path_buf()),
        std::path::absolute(base).ok(),
        base.canonicalize().ok(),
    ];
    spellings
        .into_iter()
        .flatten()
        .find_map(|b| path.strip_prefix(&b).ok().map(Path::to_path_buf))
        .filter(|r| !r.as_os_str().is_empty())
}

/// Where checkpoint `id`'s files go: a backend and the key prefix in it.
struct Target {
    backend: Arc<dyn StorageBackend>,
    prefix: String,
}

impl Target {
    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

/// A savepoint's own folder, and the backend rooted there.
type Redirect = (PathBuf, Arc<dyn StorageBackend>);

/// A state file as stored: what the metadata records of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredFile {
    /// Path relative to the checkpoint folder (`"<uid>/<file_name>"`, '/'-separated).
    pub path: String,
    /// Size in bytes, envelope included.
    pub size: u64,
    /// The file's checksum: the CRC-32C of all its bytes before the trailer (the trailer
    /// holds it), which ties it to the checkpoint that records it.
    pub crc32c: u32,
}

/// Checkpoints of one job on a [`StorageBackend`]; `root` is `<checkpoint-dir>/<job-id>`.
///
/// A savepoint is a checkpoint written elsewhere: [`CheckpointStorage::redirect`] sends one
/// checkpoint id to its own folder, and every clone of the storage (the writer threads')
/// follows.
#[derive(Debug, Clone)]
pub(crate) struct CheckpointStorage {
    root: PathBuf,
    backend: Arc<dyn StorageBackend>,
    redirects: Arc<Mutex<HashMap<u64, Redirect>>>,
    /// This run's id, recorded with every file it writes.
    run_id: Arc<str>,
    /// The job folder's ownership (a lock, a lease), held while any clone lives.
    _owner: Arc<Ownership>,
    /// On a worker, the checkpoints its coordinator announced (where their files go);
    /// `None` where the checkpoint coordinator runs in this process.
    #[cfg(feature = "cluster")]
    announced: Option<Arc<announce::Announcements>>,
}

impl CheckpointStorage {
    /// Opens `<dir>/<job_id>` (a local folder, created if needed, or a prefix in object
    /// storage), proves it writable (writes and removes a probe) so a bad
    /// `--checkpoint-dir` fails at start, not at the first checkpoint, and takes ownership
    /// of it for this run.
    pub fn open(checkpoint_dir: &Path, job_id: &str) -> Result<Self, StorageError> {
        validate_name("job id", job_id)?;
        check_location(checkpoint_dir)?;
        let root = checkpoint_dir.join(job_id);
        let backend: Arc<dyn StorageBackend> = Arc::from(open_backend(&root)?);
        let hint = "check that the folder is writable or pass --checkpoint-dir";
        if let Some(dir) = backend.local_dir("") {
            dir.map_err(|e| e.reframed("create checkpoint directory", hint))?;
        }
        static PROBES: AtomicU64 = AtomicU64::new(0);
        let n = PROBES.fetch_add(1, Ordering::Relaxed);
        let probe = format!(".write-probe-{}-{n}", std::process::id());
        let written = backend.put(&probe).and_then(|mut w| {
            w.write(b"probe")?;
            w.commit(&[])
        });
        let removed = backend.delete(&probe);
        written.map_err(|e| match e {
            StorageError::Io { cause, .. } => StorageError::Io {
                op: "write to checkpoint directory",
                path: root.clone(),
                cause,
                hint,
            },
            other => other,
        })?;
        removed.map_err(|e| e.reframed("remove probe file", hint))?;
        let owner = backend.take_ownership()?;
        Ok(CheckpointStorage {
            run_id: new_run_id().into(),
            root,
            backend,
            redirects: Arc::default(),
            _owner: Arc::new(owner),
            #[cfg(feature = "cluster")]
            announced: None,
        })
    }

    /// A worker's view of the job folder its coordinator owns (issue 24): state files are
    /// written into the coordinator's checkpoints under the coordinator's run id (so the
    /// `_metadata` it writes accepts them), and no ownership is taken — the coordinator
    /// holds the folder's lock or lease; a worker taking it too would lock its own
    /// coordinator out. Probes the folder like [`CheckpointStorage::open`], so a worker
    /// that cannot write there fails at its deploy, naming the folder.
    #[cfg(feature = "cluster")]
    pub fn join(checkpoint_dir: &Path, job_id: &str, run_id: &str) -> Result<Self, StorageError> {
        validate_name("job id", job_id)?;
        check_location(checkpoint_dir)?;
        let root = checkpoint_dir.join(job_id);
        let backend: Arc<dyn StorageBackend> = Arc::from(open_backend(&root)?);
        let hint = "check that the folder is writable from this worker, and that every worker \
                    reaches the coordinator's --checkpoint-dir";
        if let Some(dir) = backend.local_dir("") {
            dir.map_err(|e| e.reframed("create checkpoint directory", hint))?;
        }
        Ok(CheckpointStorage {
            run_id: run_id.into(),
            root,
            backend,
            redirects: Arc::default(),
            _owner: Arc::new(Box::new(()) as Ownership),
            announced: Some(Arc::default()),
        })
    }

    /// The job's folder, for messages and for tools that inspect it.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The job folder's storage: where a subtask reads back the shared files it wrote
    /// (a lazy restore's key groups re-pointed at a new base, `state/keyed/remote.rs`).
    pub fn backend(&self) -> &Arc<dyn StorageBackend> {
        &self.backend
    }

    /// This run's id: unique per [`CheckpointStorage::open`], recorded in the metadata with
    /// every file, so files of another run are told apart from this one's.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Where checkpoint `id`'s files are written; a worker first waits until its
    /// coordinator said where (see `announce`).
    fn write_target(&self, id: u64) -> Result<Target, StorageError> {
        #[cfg(feature = "cluster")]
        self.await_announced(id)?;
        Ok(self.target(id))
    }

    fn target(&self, id: u64) -> Target {
        let redirects = self.redirects.lock().unwrap_or_else(|p| p.into_inner());
        match redirects.get(&id) {
            Some((_, backend)) => Target {
                backend: backend.clone(),
                prefix: String::new(),
            },
            None => Target {
                backend: self.backend.clone(),
                prefix: format!("chk-{id}/"),
            },
        }
    }

    /// Why this run no longer owns its job folder, once another run took it over (see
    /// [`StorageBackend::ownership_lost`]); the executor polls it to stop the job at once.
    pub fn ownership_lost(&self) -> Option<StorageError> {
        self.backend.ownership_lost()
    }

    /// Folder of checkpoint `id` (`root/chk-<id>`, or a savepoint's own folder), the path a
    /// user passes to `--restore`.
    pub fn checkpoint_path(&self, id: u64) -> PathBuf {
        let redirects = self.redirects.lock().unwrap_or_else(|p| p.into_inner());
        match redirects.get(&id) {
            Some((folder, _)) => folder.clone(),
            None => self.root.join(format!("chk-{id}")),
        }
    }

    /// Writes checkpoint `id` into `folder` (a savepoint's) instead of `root/chk-<id>`.
    /// The folder must not exist yet (no savepoint is ever overwritten). `folder` lies in
    /// the savepoint directory `base` (the caller confined it there); on a local disk it is
    /// created from `base` opened first, one component at a time, refusing any symbolic
    /// link on the way, and every file is then written relative to the folder held open
    /// ([`confined`]), so a link swapped in later cannot lead a file out of `base`.
    pub fn redirect(&self, id: u64, base: &Path, folder: PathBuf) -> Result<(), StorageError> {
        let hint = "check that the savepoint directory is writable";
        let backend: Arc<dyn StorageBackend> = if is_remote(&folder) {
            let backend: Arc<dyn StorageBackend> = Arc::from(open_backend(&folder)?);
            if backend.folder_problem()?.is_none() {
                let exists = io::ErrorKind::AlreadyExists.into();
                return Err(io_err("create savepoint folder", &folder, hint)(exists));
            }
            backend
        } else {
            let relative = relative_to(base, &folder).ok_or_else(|| StorageError::Io {
                op: "create savepoint folder",
                path: folder.clone(),
                cause: io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "it is not inside the savepoint directory {}",
                        base.display()
                    ),
                ),
                hint: "name a folder inside the savepoint directory",
            })?;
            Arc::new(confined::create_confined(base, &relative)?)
        };
        self.redirects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (folder, backend));
        Ok(())
    }

    /// Writes one state file atomically, creating `chk-<id>/<uid>/` as needed. Returns its
    /// path relative to the checkpoint folder (for the metadata), its size (envelope
    /// included) and its checksum.
    pub fn write_state_file(
        &self,
        id: u64,
        uid: &str,
        file_name: &str,
        kind: FileKind,
        payload: &[u8],
    ) -> Result<StoredFile, StorageError> {
        validate_name("operator uid", uid)?;
        // Streamed in one piece rather than wrapped in its envelope in memory: a frozen
        // task's keyed state is written this way, and may be large.
        self.write_state_file_streamed(id, uid, file_name, kind, |w| w.write(payload))
    }

    /// Writes one state file atomically like [`CheckpointStorage::write_state_file`], but
    /// with the payload streamed by `payload` into a [`PayloadWriter`] rather than held in
    /// memory whole: large keyed state is encoded key group by key group straight to
    /// storage. The file is byte for byte what `write_state_file` writes for the same
    /// payload.
    pub fn write_state_file_streamed<E: From<StorageError>>(
        &self,
        id: u64,
        uid: &str,
        file_name: &str,
        kind: FileKind,
        payload: impl FnOnce(&mut PayloadWriter) -> Result<(), E>,
    ) -> Result<StoredFile, E> {
        validate_name("operator uid", uid)?;
        validate_name("state file name", file_name)?;
        let target = self.write_target(id)?;
        let path = format!("{uid}/{file_name}");
        let writer = target.backend.put(&target.key(&path))?;
        let (size, crc32c) = write_streamed(writer, kind, payload)?;
        Ok(StoredFile { path, size, crc32c })
    }

    /// Writes one *shared* state file atomically into the job folder's `shared/<uid>/`
    /// folder rather than a checkpoint's: the files of incremental checkpoints, which later
    /// checkpoints reference too, so discarding the checkpoint that wrote one must not
    /// remove it (retention removes it once no retained checkpoint needs it). Returns its
    /// path relative to the *job* folder (`shared/<uid>/<file name>`), size and checksum.
    pub fn write_shared_file_streamed<E: From<StorageError>>(
        &self,
        uid: &str,
        file_name: &str,
        kind: FileKind,
        payload: impl FnOnce(&mut PayloadWriter) -> Result<(), E>,
    ) -> Result<StoredFile, E> {
        validate_name("operator uid", uid)?;
        validate_name("state file name", file_name)?;
        let path = format!("{SHARED_DIR}/{uid}/{file_name}");
        let writer = self.backend.put(&path)?;
        let (size, crc32c) = write_streamed(writer, kind, payload)?;
        Ok(StoredFile { path, size, crc32c })
    }

    /// Every shared state file of the job (paths relative to the job folder, as
    /// [`CheckpointStorage::write_shared_file_streamed`] returns them); files being written
    /// (temp names) are left out.
    pub fn shared_files(&self) -> Result<Vec<String>, StorageError> {
        let mut out = Vec::new();
        for uid in self.backend.list(SHARED_DIR)? {
            if uid.starts_with('.') {
                continue;
            }
            for name in self.backend.list(&format!("{SHARED_DIR}/{uid}"))? {
                if !name.starts_with('.') {
                    out.push(format!("{SHARED_DIR}/{uid}/{name}"));
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The temp files of shared state files being written (`.<name>.tmp-<pid>-<n>` on local
    /// storage), or left half-written by a writer that was killed mid-file.
    pub fn shared_temp_files(&self) -> Result<Vec<String>, StorageError> {
        let mut out = Vec::new();
        for uid in self.backend.list(SHARED_DIR)? {
            if uid.starts_with('.') {
                continue;
            }
            for name in self.backend.list(&format!("{SHARED_DIR}/{uid}"))? {
                if name.starts_with('.') {
                    out.push(format!("{SHARED_DIR}/{uid}/{name}"));
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Removes the empty folders under `shared/`, and `shared/` itself once empty, so a job
    /// folder without incremental checkpoints looks as before. Only when nothing is being
    /// written there (a writer creates its uid's folder on its first file).
    pub fn prune_shared_folders(&self) -> Result<(), StorageError> {
        let uids = self.backend.list(SHARED_DIR)?;
        let mut left = 0;
        for uid in &uids {
            let folder = format!("{SHARED_DIR}/{uid}");
            if self.backend.list(&folder)?.is_empty() {
                self.backend.delete_all(&folder)?;
            } else {
                left += 1;
            }
        }
        if left == 0 && self.backend.list("")?.iter().any(|n| n == SHARED_DIR) {
            self.backend.delete_all(SHARED_DIR)?;
        }
        Ok(())
    }

    /// Whether the shared file at `path` (relative to the job folder) exists.
    pub fn shared_file_exists(&self, path: &str) -> bool {
        path.starts_with(SHARED_PREFIX) && self.backend.size(path).is_ok()
    }

    /// Removes the shared file at `path` (relative to the job folder); missing is fine.
    /// Only paths under `shared/` are touched.
    pub fn delete_shared_file(&self, path: &str) -> Result<(), StorageError> {
        if !path.starts_with(SHARED_PREFIX) || path.split('/').any(|c| c == ".." || c.is_empty()) {
            return Ok(());
        }
        self.backend.delete(path)
    }

    /// A scratch file for checkpoint `id`'s operator `uid`, for a writer that produces data
    /// in another order than the file needs it (keyed state is encoded shard by shard and
    /// laid out key group by key group): on disk rather than in memory, so a checkpoint's
    /// memory does not grow with the state. Locally it sits in the checkpoint's folder;
    /// with remote storage, in the local temp folder. Nothing is left behind: the file is
    /// removed when dropped — on Unix at once, while it stays open.
    pub fn spill_file(&self, id: u64, uid: &str) -> Result<SpillFile, StorageError> {
        validate_name("operator uid", uid)?;
        let target = self.write_target(id)?;
        match target.backend.local_dir(&target.key(uid)) {
            Some(dir) => SpillFile::create(&dir?),
            None => SpillFile::create(&std::env::temp_dir()),
        }
    }

    /// A scratch file outside every checkpoint (so discarding one never touches it), for
    /// data that outlives a checkpoint: a finished task's encoded state. Like
    /// [`CheckpointStorage::spill_file`], it leaves nothing behind.
    pub fn scratch_file(&self) -> Result<SpillFile, StorageError> {
        match self.backend.local_dir("") {
            Some(dir) => SpillFile::create(&dir?),
            None => SpillFile::create(&std::env::temp_dir()),
        }
    }

    /// Writes `chk-<id>/_metadata` LAST, with create-if-absent (so it is never overwritten
    /// and completion is atomic on every backend). Once it returns, the checkpoint is
    /// complete and durable. Returns the checkpoint folder path.
    pub fn write_metadata(&self, id: u64, payload: &[u8]) -> Result<PathBuf, StorageError> {
        let target = self.target(id);
        let bytes = format::encode(FileKind::Metadata, payload);
        target
            .backend
            .put_if_absent(&target.key(METADATA_FILE_NAME), &bytes)?;
        Ok(self.checkpoint_path(id))
    }

    /// Ids of complete checkpoints (those whose `_metadata` exists), ascending. Whether they
    /// also read cleanly is for the caller to find out with [`read_metadata`].
    pub fn completed_checkpoints(&self) -> Result<Vec<u64>, StorageError> {
        let mut ids: Vec<u64> = self
            .list_ids()?
            .into_iter()
            .filter(|&id| self.is_complete(id))
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// Whether checkpoint `id` has its `_metadata` (the mark of a complete checkpoint).
    pub fn is_complete(&self, id: u64) -> bool {
        let target = self.target(id);
        target.backend.size(&target.key(METADATA_FILE_NAME)).is_ok()
    }

    /// Highest checkpoint id with any folder (complete or not), so a new run never reuses
    /// an id. 0 if none.
    pub fn max_checkpoint_id(&self) -> Result<u64, StorageError> {
        Ok(self.list_ids()?.into_iter().max().unwrap_or(0))
    }

    /// Removes `chk-<id>` entirely; missing is fine. `_metadata` goes first (and that is
    /// made durable), so a crash mid-way leaves an incomplete checkpoint, never a broken
    /// "complete" one.
    pub fn discard(&self, id: u64) -> Result<(), StorageError> {
        let target = self.target(id);
        target.backend.delete(&target.key(METADATA_FILE_NAME))?;
        target
            .backend
            .delete_all(target.prefix.trim_end_matches('/'))
    }

    /// Ids of every `chk-<n>` entry in the job folder, unordered. A job folder removed
    /// behind our back simply has no checkpoints.
    fn list_ids(&self) -> Result<Vec<u64>, StorageError> {
        let names = self.backend.list("")?;
        Ok(names
            .iter()
            .filter_map(|n| parse_checkpoint_dir_name(n))
            .collect())
    }
}

/// A run id: unique enough that two runs never share one (time, process, randomness).
fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!(
        "{nanos:016x}-{:x}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    )
}

/// A temp name that cannot be mistaken for a real file: real names never start with '.'.
fn temp_path(dir: &Path, name: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

#[cfg(test)]
mod tests;
