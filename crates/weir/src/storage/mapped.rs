//! A local checkpoint file mapped read-only into memory, so that restoring a keyed state
//! larger than memory does not read it into the heap: its pages are the file's page cache,
//! clean and reclaimable, faulted in as the restore reads them (docs/design-notes.md,
//! "Memory of the disk backend").
//!
//! Checkpoint files are immutable once published (written under a temp name and renamed),
//! and retention deletes them by unlinking, which leaves a mapping intact. A file truncated
//! by someone else while it is mapped would make reads past the new end fault (SIGBUS):
//! that is the cost of a bounded restore, and why only large files are mapped.

use std::fs::File;
use std::io;
use std::path::Path;
use std::ptr::NonNull;

/// A whole file mapped read-only (and privately: nothing is ever written through it).
pub(crate) struct Mapped {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value; `&[u8]` views of it may be
// shared and sent between threads like those of a `Vec<u8>`.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Maps the file at `path` whole; `None` for an empty file (nothing to map).
    pub(crate) fn open(path: &Path) -> io::Result<Option<Mapped>> {
        let file = File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::other("the file is larger than the address space"))?;
        if len == 0 {
            return Ok(None);
        }
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        // SAFETY: a new mapping (no address given) of `len` bytes of an open file; the file
        // may be closed once mapped. The memory is only read through `Deref` while `self`
        // lives, and unmapped once in `Drop`.
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ,
                MapFlags::PRIVATE,
                &file,
                0,
            )
        }?;
        // The restore reads each file front to back once: read ahead, drop behind.
        // SAFETY: advice on the mapping just made, within its length.
        let _ = unsafe { rustix::mm::madvise(ptr, len, rustix::mm::Advice::Sequential) };
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null address"))?;
        Ok(Some(Mapped { ptr, len }))
    }
}

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` is a live read-only mapping of `len` bytes until `self` is dropped.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once; no `&[u8]` of it outlives
        // `self` (they borrow it, or hold the `Arc` it lives in).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapped_file_reads_as_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let m = Mapped::open(&path).unwrap().unwrap();
        // Unlinking the file (retention) leaves the mapping readable.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(m.as_ref(), &bytes[..]);
        std::fs::write(&path, b"").unwrap();
        assert!(Mapped::open(&path).unwrap().is_none());
        assert!(Mapped::open(&dir.path().join("missing")).is_err());
    }
}
