//! The storage trait: the few object operations checkpoints need, so the same checkpoint
//! code runs on a local disk, in memory (the protocol tests) and on S3-compatible object
//! storage, and a new backend is one implementation of [`StorageBackend`].
//!
//! A backend is rooted at one location (a folder, a key prefix); keys are relative to it and
//! '/'-separated (`chk-3/count/kg-0-63`). A key is never empty and holds no `.` or `..`
//! component (the callers check names with `storage::validate_name`).
//!
//! Guarantees every backend gives:
//! * an object is visible whole or not at all ([`ObjectWriter::commit`], and dropping an
//!   uncommitted writer leaves nothing behind);
//! * [`StorageBackend::put_if_absent`] is atomic: of two writers of one key, one fails, so
//!   `_metadata` (whose presence makes a checkpoint complete) is never overwritten;
//! * errors are [`StorageError`]s naming the object, the cause and the way out.

use std::any::Any;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use super::StorageError;

/// Something a backend hands out to prove this run owns a job folder; ownership ends when
/// it is dropped (see [`StorageBackend::take_ownership`]).
pub type Ownership = Box<dyn Any + Send + Sync>;

/// An object being written, streamed in pieces so large state never sits whole in memory.
/// Dropping it without [`ObjectWriter::commit`] aborts the write and leaves nothing behind.
pub trait ObjectWriter: Send {
    /// Appends `bytes`.
    fn write(&mut self, bytes: &[u8]) -> Result<(), StorageError>;

    /// Replaces the object's first `head.len()` bytes with `head` (a file's envelope header,
    /// which holds the payload length and so is known last), then makes the object visible
    /// under its key, durably.
    fn commit(self: Box<Self>, head: &[u8]) -> Result<(), StorageError>;
}

/// Object operations on one storage location: streamed put, get by range, list, delete and
/// create-if-absent. See the module docs for the guarantees every implementation gives.
pub trait StorageBackend: Send + Sync + fmt::Debug {
    /// Where `key` is, as the user sees it (a path or a URL), for messages and for the
    /// paths handed back to the user (`--restore` takes them). `""` is the root.
    fn describe(&self, key: &str) -> PathBuf;

    /// A backend rooted at `prefix` (a folder under this root), sharing connections.
    fn sub(&self, prefix: &str) -> Box<dyn StorageBackend>;

    /// Starts writing the object `key` (overwriting it on commit if it exists).
    fn put(&self, key: &str) -> Result<Box<dyn ObjectWriter>, StorageError>;

    /// Writes `bytes` as object `key` only if there is none: fails with an "already exists"
    /// I/O error (see [`StorageError::is_already_exists`]) otherwise. Durable on return.
    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError>;

    /// The size of object `key`; a "not found" error ([`StorageError::is_not_found`]) if
    /// there is none.
    fn size(&self, key: &str) -> Result<u64, StorageError>;

    /// The bytes of object `key` in `range` (all of it for `None`).
    fn get(&self, key: &str, range: Option<Range<u64>>) -> Result<Vec<u8>, StorageError>;

    /// Fills `buf` with the bytes of object `key` from `offset`; for reading large objects
    /// in parallel ranges without copying them twice.
    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        let bytes = self.get(key, Some(offset..offset + buf.len() as u64))?;
        if bytes.len() != buf.len() {
            let short = std::io::ErrorKind::UnexpectedEof.into();
            return Err(super::io_err("read", &self.describe(key), super::READ_HINT)(short));
        }
        buf.copy_from_slice(&bytes);
        Ok(())
    }

    /// How many bytes a reader of a large object should ask [`StorageBackend::read_at`] for
    /// at once: a local disk answers small reads fast (and they checksum from cache), while
    /// object storage wants large ones, which it splits into ranges fetched concurrently.
    fn preferred_read_bytes(&self) -> usize {
        1 << 20
    }

    /// Names of the objects and folders directly under the folder `prefix` (`""` for the
    /// root), unordered; empty if there is no such folder.
    fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError>;

    /// Removes object `key`, durably; a missing one is fine.
    fn delete(&self, key: &str) -> Result<(), StorageError>;

    /// Removes every object under the folder `prefix`; a missing folder is fine.
    fn delete_all(&self, prefix: &str) -> Result<(), StorageError>;

    /// Why the root cannot be a checkpoint folder ("no such folder", "not a folder"), or
    /// `None` if it can; so a wrong `--restore` path gets the right message.
    fn folder_problem(&self) -> Result<Option<&'static str>, StorageError>;

    /// The local file of object `key`, if this backend is a local disk (large state files
    /// are then mapped rather than read: a bounded restore). `None` elsewhere.
    fn local_file(&self, key: &str) -> Option<PathBuf> {
        let _ = key;
        None
    }

    /// The local folder of `prefix`, created, if this backend is a local disk: scratch
    /// files then go beside the checkpoint (today's layout). `None` elsewhere: scratch
    /// files go to the local temp folder, never to remote storage.
    fn local_dir(&self, prefix: &str) -> Option<Result<PathBuf, StorageError>> {
        let _ = prefix;
        None
    }

    /// Makes this run the only owner of the root (a job's folder), or names the holder
    /// ([`StorageError::InUse`]): two runs writing one job folder would mix their
    /// checkpoints and delete each other's through retention.
    fn take_ownership(&self) -> Result<Ownership, StorageError>;

    /// The error every write now fails with, if this run took ownership of the root and
    /// then lost it to another run ([`StorageError::OwnershipLost`]); `None` while it owns
    /// it, and always for a backend whose ownership cannot be taken away (a local lock).
    /// Answered from what the run already knows, without a request, so a job can poll it.
    fn ownership_lost(&self) -> Option<StorageError> {
        None
    }
}
