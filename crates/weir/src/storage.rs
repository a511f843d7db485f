//! Checkpoint storage in a local directory: the lowest layer of the engine.
//!
//! It knows files, folders and bytes, not checkpoints' meaning, and imports nothing else
//! of the crate (see the layer map in the crate docs):
//!
//! * [`format`](mod@format) — the checksummed envelope of every file.
//! * [`shared_bytes`] — ranges of a loaded file, handed out without copying.
//! * this module — the folder layout on a local disk, atomic writes.
//!
//! ```text
//! <checkpoint-dir>/<job-id>/chk-<n>/_metadata            written last; present ⇔ complete
//! <checkpoint-dir>/<job-id>/chk-<n>/<uid>/<file-name>    state files
//! ```
//!
//! Guarantees: every file is written whole or not at all (temp name in the same directory,
//! fsync, rename; the temp file is removed on error), so a crash never leaves a half-written
//! file under a real name. `_metadata` is written after the state files and its directory is
//! fsynced, so a checkpoint listed as complete has all its files on disk. Discarding removes
//! `_metadata` first, so a half-discarded checkpoint is never mistaken for a complete one.
//! Reading works on any checkpoint folder (it may have been copied elsewhere) and treats the
//! metadata as untrusted: relative paths from it cannot leave the folder. Every error names
//! the path, the cause and the way out.

use self::format::{FileKind, FormatError, HEADER_LEN, TRAILER_LEN};
use self::shared_bytes::SharedBytes;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub mod format;
pub mod shared_bytes;
mod streamed;
use streamed::write_streamed;
pub use streamed::{PayloadWriter, SpillFile};

/// The file in a job's checkpoint folder that its running owner holds locked; it records
/// who holds it. A lock (not the file's presence) is what counts, so a run killed with
/// SIGKILL leaves nothing to clean up: the operating system releases its lock.
pub const LOCK_FILE_NAME: &str = "_lock";

/// Name of the file whose presence makes a checkpoint complete; reserved, so no uid may use it.
pub const METADATA_FILE_NAME: &str = "_metadata";

/// Longest uid, job id or file name accepted, leaving room for the temp-file decoration
/// within the usual 255-byte file-name limit.
pub const MAX_NAME_LEN: usize = 200;

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
pub fn validate_name(what: &'static str, name: &str) -> Result<(), StorageError> {
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

/// Locks `root`'s [`LOCK_FILE_NAME`] for this process, or names the run that holds it.
/// Two runs writing one job folder would mix their checkpoints (one run's state with the
/// other's source positions) and delete each other's through retention.
fn take_ownership(root: &Path) -> Result<File, StorageError> {
    let path = root.join(LOCK_FILE_NAME);
    let hint = "check that the folder is writable or pass --checkpoint-dir";
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io_err("open the lock file", &path, hint))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = io::Read::read_to_string(&mut file, &mut holder);
            let holder = holder.trim();
            return Err(StorageError::InUse {
                root: root.to_path_buf(),
                holder: if holder.is_empty() {
                    "it has not said who it is yet".into()
                } else {
                    holder.to_string()
                },
            });
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(io_err("lock", &path, hint)(e));
        }
    }
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let me = format!(
        "process {} since {since} (seconds since the Unix epoch)",
        std::process::id()
    );
    file.set_len(0)
        .and_then(|()| io::Seek::rewind(&mut file))
        .and_then(|()| file.write_all(me.as_bytes()))
        .map_err(io_err("write the lock file", &path, hint))?;
    Ok(file)
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

/// Checkpoints of one job in a local directory; `root` is `<checkpoint-dir>/<job-id>`.
///
/// A savepoint is a checkpoint written elsewhere: [`CheckpointStorage::redirect`] sends one
/// checkpoint id to its own folder, and every clone of the storage (the writer threads')
/// follows.
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    root: PathBuf,
    redirects: Arc<Mutex<HashMap<u64, PathBuf>>>,
    /// The job folder's lock, held while any clone lives ([`LOCK_FILE_NAME`]).
    _owner: Arc<File>,
}

impl CheckpointStorage {
    /// Creates `<dir>/<job_id>` if needed and proves it writable (create+remove a probe file)
    /// so a bad `--checkpoint-dir` fails at start, not at the first checkpoint.
    pub fn open(checkpoint_dir: &Path, job_id: &str) -> Result<Self, StorageError> {
        validate_name("job id", job_id)?;
        let root = checkpoint_dir.join(job_id);
        let hint = "check that the folder is writable or pass --checkpoint-dir";
        fs::create_dir_all(&root).map_err(io_err("create checkpoint directory", &root, hint))?;
        let probe = temp_path(&root, "write-probe");
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .and_then(|mut file| file.write_all(b"probe"));
        let removed = fs::remove_file(&probe);
        written.map_err(io_err("write to checkpoint directory", &root, hint))?;
        removed.map_err(io_err("remove probe file", &probe, hint))?;
        let owner = take_ownership(&root)?;
        Ok(CheckpointStorage {
            root,
            redirects: Arc::default(),
            _owner: Arc::new(owner),
        })
    }

    /// The job's folder, for messages and for tools that inspect it.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Folder of checkpoint `id` (`root/chk-<id>`, or a savepoint's own folder), the path a
    /// user passes to `--restore`.
    pub fn checkpoint_path(&self, id: u64) -> PathBuf {
        let redirects = self.redirects.lock().unwrap_or_else(|p| p.into_inner());
        match redirects.get(&id) {
            Some(folder) => folder.clone(),
            None => self.root.join(format!("chk-{id}")),
        }
    }

    /// Writes checkpoint `id` into `folder` (a savepoint's) instead of `root/chk-<id>`.
    /// The folder must not exist yet (no savepoint is ever overwritten); its parent is
    /// created.
    pub fn redirect(&self, id: u64, folder: PathBuf) -> Result<(), StorageError> {
        let hint = "check that the savepoint directory is writable";
        if folder.exists() {
            let exists = io::ErrorKind::AlreadyExists.into();
            return Err(io_err("create savepoint folder", &folder, hint)(exists));
        }
        if let Some(parent) = folder.parent() {
            fs::create_dir_all(parent).map_err(io_err(
                "create savepoint directory",
                parent,
                hint,
            ))?;
        }
        self.redirects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, folder);
        Ok(())
    }

    /// Writes one state file atomically (temp name in the same dir + fsync + rename),
    /// creating `chk-<id>/<uid>/` as needed. Returns the path relative to the checkpoint
    /// folder (`"<uid>/<file_name>"`, always '/'-separated, for the metadata) and the byte
    /// size written (envelope included, i.e. the file size).
    pub fn write_state_file(
        &self,
        id: u64,
        uid: &str,
        file_name: &str,
        kind: FileKind,
        payload: &[u8],
    ) -> Result<(String, u64), StorageError> {
        validate_name("operator uid", uid)?;
        // Streamed in one piece rather than wrapped in its envelope in memory: a frozen
        // task's keyed state is written this way, and may be large.
        self.write_state_file_streamed(id, uid, file_name, kind, |w| w.write(payload))
    }

    /// Writes one state file atomically like [`CheckpointStorage::write_state_file`], but
    /// with the payload streamed by `payload` into a [`PayloadWriter`] rather than held in
    /// memory whole: large keyed state is encoded key group by key group straight to disk.
    /// The file is byte for byte what `write_state_file` writes for the same payload.
    pub fn write_state_file_streamed<E: From<StorageError>>(
        &self,
        id: u64,
        uid: &str,
        file_name: &str,
        kind: FileKind,
        payload: impl FnOnce(&mut PayloadWriter) -> Result<(), E>,
    ) -> Result<(String, u64), E> {
        validate_name("operator uid", uid)?;
        validate_name("state file name", file_name)?;
        let dir = self.checkpoint_path(id).join(uid);
        create_dir(&dir)?;
        let (tmp, target) = (temp_path(&dir, file_name), dir.join(file_name));
        let result = write_streamed(&tmp, kind, payload).and_then(|size| {
            let op = "rename temporary file to";
            fs::rename(&tmp, &target).map_err(io_err(op, &target, WRITE_HINT))?;
            Ok(size)
        });
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        let size = result?;
        sync_dir(&dir)?;
        Ok((format!("{uid}/{file_name}"), size))
    }

    /// A scratch file in checkpoint `id`'s folder for operator `uid`, for a writer that
    /// produces data in another order than the file needs it (keyed state is encoded
    /// shard by shard and laid out key group by key group): on disk rather than in memory,
    /// so a checkpoint's memory does not grow with the state. Nothing is left behind: the
    /// file is removed when dropped — on Unix at once, while it stays open.
    pub fn spill_file(&self, id: u64, uid: &str) -> Result<SpillFile, StorageError> {
        validate_name("operator uid", uid)?;
        let dir = self.checkpoint_path(id).join(uid);
        create_dir(&dir)?;
        SpillFile::create(&dir)
    }

    /// A scratch file in the job's folder, outside every checkpoint (so discarding one
    /// never touches it), for data that outlives a checkpoint: a finished task's encoded
    /// state. Like [`CheckpointStorage::spill_file`], it leaves nothing behind.
    pub fn scratch_file(&self) -> Result<SpillFile, StorageError> {
        SpillFile::create(&self.root)
    }

    /// Writes `chk-<id>/_metadata` atomically and LAST: temp file, fsync, rename, fsync the
    /// checkpoint dir (and the job dir). Once it returns, the checkpoint is complete and
    /// durable. Returns the checkpoint folder path.
    pub fn write_metadata(&self, id: u64, payload: &[u8]) -> Result<PathBuf, StorageError> {
        let dir = self.checkpoint_path(id);
        create_dir(&dir)?;
        let target = dir.join(METADATA_FILE_NAME);
        if target.exists() {
            let hint = "checkpoint ids must not be reused; discard the checkpoint first";
            let exists = io::ErrorKind::AlreadyExists.into();
            return Err(io_err("overwrite complete checkpoint", &target, hint)(
                exists,
            ));
        }
        let bytes = format::encode(FileKind::Metadata, payload);
        write_atomic(&dir, METADATA_FILE_NAME, &bytes)?;
        sync_dir(&dir)?;
        sync_dir(dir.parent().unwrap_or(&self.root))?;
        Ok(dir)
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
        self.checkpoint_path(id).join(METADATA_FILE_NAME).is_file()
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
        let dir = self.checkpoint_path(id);
        let hint = "check the folder's permissions; it can also be removed by hand";
        let metadata = dir.join(METADATA_FILE_NAME);
        match fs::remove_file(&metadata) {
            Ok(()) => sync_dir(&dir)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove", &metadata, hint)(e)),
        }
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(io_err("remove checkpoint", &dir, hint)(e))
            }
            _ => Ok(()),
        }
    }

    /// Ids of every `chk-<n>` entry in the job folder, unordered. A job folder removed
    /// behind our back simply has no checkpoints.
    fn list_ids(&self) -> Result<Vec<u64>, StorageError> {
        let hint = "check that the checkpoint directory is readable";
        let entries = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("list checkpoint directory", &self.root, hint)(e)),
        };
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_err("list checkpoint directory", &self.root, hint))?;
            let name = entry.file_name();
            ids.extend(name.to_str().and_then(parse_checkpoint_dir_name));
        }
        Ok(ids)
    }
}

/// Reads and checks the `_metadata` of the checkpoint folder at `checkpoint_path` (which
/// may have been moved or copied) and returns its payload.
pub fn read_metadata(checkpoint_path: &Path) -> Result<Vec<u8>, StorageError> {
    let not_complete = |reason| StorageError::NotACheckpoint {
        path: checkpoint_path.to_path_buf(),
        reason,
    };
    if !checkpoint_path.is_dir() {
        let exists = checkpoint_path.exists();
        let reason = if exists {
            "not a folder"
        } else {
            "no such folder"
        };
        return Err(not_complete(reason));
    }
    let path = checkpoint_path.join(METADATA_FILE_NAME);
    match fs::read(&path) {
        Ok(bytes) => into_payload(&path, FileKind::Metadata, bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(not_complete("no _metadata")),
        Err(e) => Err(io_err("read checkpoint metadata", &path, READ_HINT)(e)),
    }
}

/// Reads and checks the state file at `relative` (as recorded in the metadata, e.g.
/// `"<uid>/<file>"`) inside `checkpoint_path`. The metadata may be hostile, so absolute
/// paths and `..`, `.` or empty components are refused before touching the disk.
pub fn read_state_file(
    checkpoint_path: &Path,
    relative: &str,
    kind: FileKind,
) -> Result<Vec<u8>, StorageError> {
    let path = state_file_path(checkpoint_path, relative)?;
    match fs::read(&path) {
        Ok(bytes) => into_payload(&path, kind, bytes),
        Err(e) => Err(state_read_error(&path, e)),
    }
}

/// Like [`read_state_file`], but returns the payload as a range of the file's buffer
/// instead of moving it to the front of the buffer (restoring large state copies nothing
/// after the read), and reads large files on two threads.
pub fn read_state_payload(
    checkpoint_path: &Path,
    relative: &str,
    kind: FileKind,
) -> Result<SharedBytes, StorageError> {
    let path = state_file_path(checkpoint_path, relative)?;
    let (bytes, crc_of_body) =
        read_checksummed(&path, PARALLEL_READ_BYTES).map_err(|e| state_read_error(&path, e))?;
    let len = match crc_of_body {
        Some(crc) => format::decode_with_crc(&path, kind, &bytes, crc)?.len(),
        None => format::decode(&path, kind, &bytes)?.len(),
    };
    Ok(
        SharedBytes::new(Arc::new(bytes), HEADER_LEN..HEADER_LEN + len)
            .expect("decode returned a payload within the file"),
    )
}

/// Files at least this large are read by two threads at once (when there are two cores),
/// each checksumming its half as it reads: reading 1 GB of state is mostly the kernel
/// copying pages and faulting in the buffer, which two cores do in about half the time,
/// and checksumming each chunk while it is still in cache saves another pass.
const PARALLEL_READ_BYTES: u64 = 32 << 20;

/// Bytes per read call of the parallel reader: small enough to checksum from cache.
const READ_CHUNK: usize = 1 << 20;

/// The whole file at `path`, and — if it was at least `parallel_from` bytes and read in
/// parallel — the crc32c of all its bytes but the last [`TRAILER_LEN`] (what a well-formed
/// envelope's trailer covers).
fn read_checksummed(path: &Path, parallel_from: u64) -> io::Result<(Vec<u8>, Option<u32>)> {
    use std::os::unix::fs::FileExt;
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let two_cores = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let parallel = two_cores && len >= parallel_from.max(2 * TRAILER_LEN as u64);
    let Some(len) = usize::try_from(len).ok().filter(|_| parallel) else {
        return Ok((fs::read(path)?, None));
    };
    let body = len - TRAILER_LEN;
    let mut bytes = vec![0u8; len];
    // Reads `dst` from `offset` in chunks; returns the crc32c of its first `covered` bytes.
    let read_part = |dst: &mut [u8], mut offset: u64, mut covered: usize| -> io::Result<u32> {
        let mut crc = 0;
        for chunk in dst.chunks_mut(READ_CHUNK) {
            file.read_exact_at(chunk, offset)?;
            offset += chunk.len() as u64;
            let n = covered.min(chunk.len());
            crc = crc32c::crc32c_append(crc, &chunk[..n]);
            covered -= n;
        }
        Ok(crc)
    };
    let half = body / 2;
    let (first, second) = bytes.split_at_mut(half);
    let (crc_first, crc_second) = std::thread::scope(|s| {
        let other = s.spawn(|| read_part(second, half as u64, body - half));
        let mine = read_part(first, 0, half);
        let theirs = other
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        Ok::<_, io::Error>((mine?, theirs?))
    })?;
    // A file that grew after its size was taken is read again whole, so that the envelope
    // checks see all of it (checkpoint files never change; this is only for safety).
    if file.read_at(&mut [0u8], len as u64)? != 0 {
        return Ok((fs::read(path)?, None));
    }
    let crc = crc32c::crc32c_combine(crc_first, crc_second, body - half);
    Ok((bytes, Some(crc)))
}

/// The error for a state file that could not be read, with the way out for its cause.
fn state_read_error(path: &Path, e: io::Error) -> StorageError {
    let hint = if e.kind() == io::ErrorKind::NotFound {
        "the checkpoint is incomplete or was copied without all its files; \
         restore from another checkpoint"
    } else {
        READ_HINT
    };
    io_err("read state file", path, hint)(e)
}

/// The path of the state file at `relative` in `checkpoint_path`, after the checks of
/// [`read_state_file`]: the metadata may be hostile, so nothing outside the folder.
fn state_file_path(checkpoint_path: &Path, relative: &str) -> Result<PathBuf, StorageError> {
    let unsafe_path = |reason| StorageError::UnsafePath {
        checkpoint: checkpoint_path.to_path_buf(),
        relative: relative.to_string(),
        reason,
    };
    if relative.starts_with('/') || relative.starts_with('\\') {
        return Err(unsafe_path("absolute paths are not allowed"));
    }
    let mut path = checkpoint_path.to_path_buf();
    for part in relative.split('/') {
        match part {
            "" => return Err(unsafe_path("it has an empty component")),
            "." | ".." => return Err(unsafe_path("'.' and '..' components are not allowed")),
            _ if part.contains('\\') || part.chars().any(char::is_control) => {
                return Err(unsafe_path("it contains a backslash or control character"))
            }
            _ => path.push(part),
        }
    }
    Ok(path)
}

/// Decodes `bytes` in place and keeps only the payload, so large state files are not
/// held in memory twice.
fn into_payload(path: &Path, kind: FileKind, mut bytes: Vec<u8>) -> Result<Vec<u8>, StorageError> {
    let len = format::decode(path, kind, &bytes)?.len();
    bytes.truncate(HEADER_LEN + len);
    bytes.drain(..HEADER_LEN);
    Ok(bytes)
}

/// A temp name that cannot be mistaken for a real file: real names never start with '.'.
fn temp_path(dir: &Path, name: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Writes `bytes` to `dir/name` whole or not at all: temp file, fsync, rename. The temp
/// file is removed if any step fails.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StorageError> {
    let (tmp, target) = (temp_path(dir, name), dir.join(name));
    let result = write_synced(&tmp, bytes).and_then(|()| {
        let op = "rename temporary file to";
        fs::rename(&tmp, &target).map_err(io_err(op, &target, WRITE_HINT))
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Creates `path` (which must not exist), writes `bytes` and fsyncs it.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err("create temporary file", path, WRITE_HINT))?;
    file.write_all(bytes)
        .map_err(io_err("write", path, WRITE_HINT))?;
    file.sync_all().map_err(io_err("fsync", path, WRITE_HINT))
}

/// Creates `dir` and its parents; the error says which folder could not be created.
fn create_dir(dir: &Path) -> Result<(), StorageError> {
    fs::create_dir_all(dir).map_err(io_err("create checkpoint directory", dir, WRITE_HINT))
}

/// Makes the entries of `dir` (renames, new subfolders) durable.
fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsync directory", dir, WRITE_HINT))
}

#[cfg(test)]
mod tests;
