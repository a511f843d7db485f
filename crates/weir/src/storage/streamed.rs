//! The write side of storage that never holds a whole file in memory: state files whose
//! payload is streamed in ([`PayloadWriter`]), and scratch files ([`SpillFile`]) for a
//! writer that produces data in another order than the file needs it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::backend::ObjectWriter;
use super::format::{self, FileKind, HEADER_LEN, TRAILER_LEN};
use super::{io_err, temp_path, StorageError, WRITE_HINT};

/// Bytes a spill file takes between two releases of its page cache.
const RELEASE_EVERY: u64 = 8 << 20;

/// The payload of a state file being streamed to storage: counted and checksummed on the
/// way (the envelope's header, which holds the length, is written last).
pub struct PayloadWriter {
    out: Box<dyn ObjectWriter>,
    crc: u32,
    len: u64,
}

impl PayloadWriter {
    /// Appends `bytes` to the payload.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), StorageError> {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.len += bytes.len() as u64;
        self.out.write(bytes)
    }
}

/// A scratch file (see [`CheckpointStorage::spill_file`](crate::storage::CheckpointStorage::spill_file)): appended to, read back at any
/// offset, removed when dropped.
pub struct SpillFile {
    file: File,
    path: PathBuf,
    len: u64,
    /// Whether the file still has its name (it is unlinked at creation where possible).
    linked: bool,
    /// Up to where its page cache was released ([`SpillFile::append`]).
    released: u64,
}

impl SpillFile {
    /// A new scratch file in `dir`, unlinked at once where the platform allows it.
    pub(super) fn create(dir: &Path) -> Result<SpillFile, StorageError> {
        let path = temp_path(dir, "spill");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io_err("create temporary file", &path, WRITE_HINT))?;
        let linked = !cfg!(unix) || fs::remove_file(&path).is_err();
        Ok(SpillFile {
            file,
            path,
            len: 0,
            linked,
            released: 0,
        })
    }

    /// Appends `bytes`, returning the offset they start at.
    pub fn append(&mut self, bytes: &[u8]) -> Result<u64, StorageError> {
        let at = self.len;
        let err = |e| io_err("write", &self.path, WRITE_HINT)(e);
        self.file
            .seek(SeekFrom::Start(at))
            .and_then(|_| self.file.write_all(bytes))
            .map_err(err)?;
        self.len += bytes.len() as u64;
        if self.len - self.released >= RELEASE_EVERY {
            // A checkpoint's spill of a state larger than memory would otherwise sit in
            // the page cache dirty (nothing else writes a scratch file out), which the
            // process's memory cgroup is charged for and cannot reclaim: written out and
            // dropped, it is read back from the disk.
            self.file
                .sync_data()
                .map_err(io_err("fsync", &self.path, WRITE_HINT))?;
            let len = std::num::NonZeroU64::new(self.len - self.released);
            let _ =
                rustix::fs::fadvise(&self.file, self.released, len, rustix::fs::Advice::DontNeed);
            self.released = self.len;
        }
        Ok(at)
    }

    /// Bytes appended so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Fills `buf` from offset `at` (which, with `buf`'s length, must lie in what was
    /// appended).
    pub fn read_at(&mut self, at: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        let err = |e| io_err("read back", &self.path, WRITE_HINT)(e);
        self.file
            .seek(SeekFrom::Start(at))
            .and_then(|_| io::Read::read_exact(&mut self.file, buf))
            .map_err(err)
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        if self.linked {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Streams the payload into `out` between a placeholder header and the checksum, then
/// commits it with the real header (the checksum of header and payload is combined from
/// the two parts). Returns the file size and its checksum (the CRC-32C in its trailer).
pub(super) fn write_streamed<E: From<StorageError>>(
    out: Box<dyn ObjectWriter>,
    kind: FileKind,
    payload: impl FnOnce(&mut PayloadWriter) -> Result<(), E>,
) -> Result<(u64, u32), E> {
    let mut w = PayloadWriter {
        out,
        crc: 0,
        len: 0,
    };
    w.out.write(&[0; HEADER_LEN])?;
    payload(&mut w)?;
    let header = format::header(kind, w.len);
    let crc = crc32c::crc32c_combine(crc32c::crc32c(&header), w.crc, w.len as usize);
    w.out.write(&crc.to_le_bytes())?;
    w.out.commit(&header)?;
    let size = w.len + (HEADER_LEN + TRAILER_LEN) as u64;
    Ok((size, crc))
}
