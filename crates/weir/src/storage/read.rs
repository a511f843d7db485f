//! Reading a checkpoint folder on any backend: its `_metadata` and the state files it
//! names, each envelope checked, and each file's checksum compared with the one the
//! metadata recorded (so a file copied in from another checkpoint is refused).
//!
//! The folder may have been moved or copied, and the metadata is untrusted: relative paths
//! from it cannot leave the folder.

use std::path::Path;
use std::sync::Arc;

use super::backend::StorageBackend;
use super::format::{self, FileKind, HEADER_LEN, TRAILER_LEN};
use super::shared_bytes::SharedBytes;
use super::{open_backend, StorageError, METADATA_FILE_NAME, READ_HINT};

/// Reads and checks the `_metadata` of the checkpoint folder at `checkpoint_path` (a local
/// folder, or a `s3://` or `mem://` location; it may have been moved or copied) and
/// returns its payload.
pub fn read_metadata(checkpoint_path: &Path) -> Result<Vec<u8>, StorageError> {
    let backend = open_backend(checkpoint_path)?;
    read_metadata_in(&*backend)
}

/// [`read_metadata`] of the folder `backend` is rooted at.
pub(super) fn read_metadata_in(backend: &dyn StorageBackend) -> Result<Vec<u8>, StorageError> {
    let not_complete = |reason| StorageError::NotACheckpoint {
        path: backend.describe(""),
        reason,
    };
    match backend.get(METADATA_FILE_NAME, None) {
        Ok(bytes) => {
            let path = backend.describe(METADATA_FILE_NAME);
            into_payload(&path, FileKind::Metadata, bytes)
        }
        Err(e) if e.is_not_found() || e.is_not_a_directory() => {
            let reason = backend.folder_problem()?.unwrap_or("no _metadata");
            Err(not_complete(reason))
        }
        Err(e) => Err(e.reframed("read checkpoint metadata", READ_HINT)),
    }
}

/// Reads and checks the state file at `relative` (as recorded in the metadata, e.g.
/// `"<uid>/<file>"`) inside `checkpoint_path`. The metadata may be hostile, so absolute
/// paths and `..`, `.` or empty components are refused before touching storage. With
/// `expected_crc` (metadata layout 4 on), the file's checksum (the CRC-32C in its
/// trailer, of all bytes before it) must be that one.
pub fn read_state_file(
    checkpoint_path: &Path,
    relative: &str,
    kind: FileKind,
    expected_crc: Option<u32>,
) -> Result<Vec<u8>, StorageError> {
    check_relative(checkpoint_path, relative)?;
    let backend = open_backend(checkpoint_path)?;
    let path = backend.describe(relative);
    let bytes = backend.get(relative, None).map_err(state_read_error)?;
    let trailer = trailer_crc(&bytes);
    let payload = into_payload(&path, kind, bytes)?;
    check_origin(&path, trailer, expected_crc)?;
    Ok(payload)
}

/// Like [`read_state_file`], but returns the payload as a range of the file's buffer
/// instead of moving it to the front of the buffer (restoring large state copies nothing
/// after the read), and reads large files in two parallel ranges.
pub fn read_state_payload(
    checkpoint_path: &Path,
    relative: &str,
    kind: FileKind,
    expected_crc: Option<u32>,
) -> Result<SharedBytes, StorageError> {
    check_relative(checkpoint_path, relative)?;
    let backend = open_backend(checkpoint_path)?;
    let path = backend.describe(relative);
    if let Some(file) = backend.local_file(relative) {
        if backend.size(relative).map_err(state_read_error)? >= MAP_FROM_BYTES {
            return map_payload(&file, kind, expected_crc);
        }
    }
    let (bytes, crc_of_body) =
        read_checksummed(&*backend, relative, PARALLEL_READ_BYTES).map_err(state_read_error)?;
    let len = match crc_of_body {
        Some(crc) => format::decode_with_crc(&path, kind, &bytes, crc)?.len(),
        None => format::decode(&path, kind, &bytes)?.len(),
    };
    check_origin(&path, trailer_crc(&bytes), expected_crc)?;
    Ok(
        SharedBytes::new(Arc::new(bytes), HEADER_LEN..HEADER_LEN + len)
            .expect("decode returned a payload within the file"),
    )
}

/// Local state files at least this large are mapped ([`map_payload`]) rather than read
/// into the heap: a restore of a state larger than memory then holds page cache, which
/// the kernel reclaims as the restore moves on, instead of the whole file.
pub(super) const MAP_FROM_BYTES: u64 = 16 << 20;

/// [`read_state_payload`] of the local file `path`, mapped: the envelope is checked (which
/// reads every page once) and the payload handed out as a range of the mapping.
fn map_payload(
    path: &Path,
    kind: FileKind,
    expected_crc: Option<u32>,
) -> Result<SharedBytes, StorageError> {
    let read_err = |e: std::io::Error| state_read_error(super::io_err("read", path, READ_HINT)(e));
    let mapped = super::mapped::Mapped::open(path)
        .map_err(read_err)?
        .ok_or_else(|| read_err(std::io::ErrorKind::UnexpectedEof.into()))?;
    let bytes = mapped.as_ref();
    let len = format::decode(path, kind, bytes)?.len();
    check_origin(path, trailer_crc(bytes), expected_crc)?;
    SharedBytes::of(Arc::new(mapped), HEADER_LEN..HEADER_LEN + len)
        .ok_or_else(|| read_err(std::io::ErrorKind::InvalidData.into()))
}

/// The envelope CRC stored in `bytes`' trailer (0 if too short to have one): the CRC-32C
/// of every byte before it, which is what identifies a file's content. (The CRC of the
/// whole file, trailer included, would not: a message followed by its own CRC always has
/// the same CRC, so every intact file would share one.)
fn trailer_crc(bytes: &[u8]) -> u32 {
    let at = bytes.len().saturating_sub(TRAILER_LEN);
    bytes[at..].try_into().map_or(0, u32::from_le_bytes)
}

/// Refuses an intact file (its envelope already checked, so damage reads as damage) whose
/// checksum is not the one the metadata recorded: it was written for another
/// checkpoint or run, or replaced since, envelope and all.
fn check_origin(
    path: &Path,
    envelope_crc: u32,
    expected_crc: Option<u32>,
) -> Result<(), StorageError> {
    let Some(expected) = expected_crc else {
        return Ok(());
    };
    let found = envelope_crc;
    if found == expected {
        Ok(())
    } else {
        Err(StorageError::ForeignFile {
            path: path.to_path_buf(),
            found,
            expected,
        })
    }
}

/// Files at least this large are read in two ranges at once (when there are two cores),
/// each checksumming its half as it reads: reading 1 GB of state is mostly the kernel
/// copying pages and faulting in the buffer, which two cores do in about half the time,
/// and checksumming each chunk while it is still in cache saves another pass.
pub(super) const PARALLEL_READ_BYTES: u64 = 32 << 20;

/// Bytes per read call of the parallel reader: small enough to checksum from cache.
pub(super) const READ_CHUNK: usize = 1 << 20;

/// The whole object `key`, and — if it was at least `parallel_from` bytes and read in
/// parallel — the crc32c of all its bytes but the last [`TRAILER_LEN`] (what a well-formed
/// envelope's trailer covers).
pub(super) fn read_checksummed(
    backend: &dyn StorageBackend,
    key: &str,
    parallel_from: u64,
) -> Result<(Vec<u8>, Option<u32>), StorageError> {
    let len = backend.size(key)?;
    let two_cores = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    // Remote storage (large preferred reads) gains from concurrent requests on any core count.
    let remote = backend.preferred_read_bytes() > READ_CHUNK;
    let parallel = (two_cores || remote) && len >= parallel_from.max(2 * TRAILER_LEN as u64);
    let Some(len) = usize::try_from(len).ok().filter(|_| parallel) else {
        return Ok((backend.get(key, None)?, None));
    };
    let body = len - TRAILER_LEN;
    let mut bytes = vec![0u8; len];
    // Reads `dst` from `offset` in chunks; returns the crc32c of its first `covered` bytes.
    let read_part = |dst: &mut [u8], mut offset: u64, mut covered: usize| {
        let mut crc = 0;
        for chunk in dst.chunks_mut(READ_CHUNK.max(backend.preferred_read_bytes())) {
            backend.read_at(key, offset, chunk)?;
            offset += chunk.len() as u64;
            let n = covered.min(chunk.len());
            crc = crc32c::crc32c_append(crc, &chunk[..n]);
            covered -= n;
        }
        Ok::<u32, StorageError>(crc)
    };
    let half = body / 2;
    let (first, second) = bytes.split_at_mut(half);
    let (crc_first, crc_second) = std::thread::scope(|s| {
        let other = s.spawn(|| read_part(second, half as u64, body - half));
        let mine = read_part(first, 0, half);
        let theirs = other
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        Ok::<_, StorageError>((mine?, theirs?))
    })?;
    // An object that grew after its size was taken is read again whole, so that the
    // envelope checks see all of it (checkpoint files never change; this is only for safety).
    if backend.size(key)? != len as u64 {
        return Ok((backend.get(key, None)?, None));
    }
    let crc = crc32c::crc32c_combine(crc_first, crc_second, body - half);
    Ok((bytes, Some(crc)))
}

/// The error for a state file that could not be read, with the way out for its cause.
fn state_read_error(e: StorageError) -> StorageError {
    let hint = if e.is_not_found() {
        "the checkpoint is incomplete or was copied without all its files; \
         restore from another checkpoint"
    } else {
        READ_HINT
    };
    e.reframed("read state file", hint)
}

/// Refuses a state-file path from the metadata that would leave the checkpoint folder:
/// the metadata may be hostile.
fn check_relative(checkpoint_path: &Path, relative: &str) -> Result<(), StorageError> {
    let unsafe_path = |reason| StorageError::UnsafePath {
        checkpoint: checkpoint_path.to_path_buf(),
        relative: relative.to_string(),
        reason,
    };
    if relative.starts_with('/') || relative.starts_with('\\') {
        return Err(unsafe_path("absolute paths are not allowed"));
    }
    for part in relative.split('/') {
        match part {
            "" => return Err(unsafe_path("it has an empty component")),
            "." | ".." => return Err(unsafe_path("'.' and '..' components are not allowed")),
            _ if part.contains('\\') || part.chars().any(char::is_control) => {
                return Err(unsafe_path("it contains a backslash or control character"))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Decodes `bytes` in place and keeps only the payload, so large state files are not
/// held in memory twice.
fn into_payload(path: &Path, kind: FileKind, mut bytes: Vec<u8>) -> Result<Vec<u8>, StorageError> {
    let len = format::decode(path, kind, &bytes)?.len();
    bytes.truncate(HEADER_LEN + len);
    bytes.drain(..HEADER_LEN);
    Ok(bytes)
}
