//! Byte ranges of a loaded checkpoint file, shared without copying.
//!
//! A restore reads each state file once into one buffer; every key-group section handed to
//! a subtask is a [`SharedBytes`] pointing into that buffer. Before this, a 1 GB keyed
//! state was copied three more times on its way from the file to the tables (dropping the
//! envelope header, splitting it into sections, handing each subtask its sections), about
//! half a second per copy on a restart's critical path. The buffer is freed when the last
//! range pointing into it is dropped. A large local file is mapped rather than read
//! (`storage::mapped`), so its ranges point into the page cache instead of the heap.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// The buffer a [`SharedBytes`] points into: bytes on the heap, or a mapped file
/// (`storage::mapped`, for large local files: restoring a state larger than memory).
type Buffer = dyn AsRef<[u8]> + Send + Sync;

/// An immutable range of a shared buffer; cheap to clone, reads as a `&[u8]`.
#[derive(Clone)]
pub struct SharedBytes {
    buf: Arc<Buffer>,
    range: Range<usize>,
}

impl SharedBytes {
    /// The range `range` of `buf`, or `None` if it does not lie within `buf`.
    pub fn new(buf: Arc<Vec<u8>>, range: Range<usize>) -> Option<SharedBytes> {
        Self::of(buf, range)
    }

    /// The range `range` of any shared buffer (a heap one, a mapped file), or `None` if it
    /// does not lie within it.
    pub(crate) fn of(buf: Arc<Buffer>, range: Range<usize>) -> Option<SharedBytes> {
        let len = (*buf).as_ref().len();
        (range.start <= range.end && range.end <= len).then_some(SharedBytes { buf, range })
    }

    /// The part `sub` of these bytes, sharing the buffer. `sub` must be a slice borrowed
    /// from `self` (as a zero-copy decoder returns them); `None` if it is not.
    pub fn slice_ref(&self, sub: &[u8]) -> Option<SharedBytes> {
        let base = self.as_ptr() as usize;
        let start = (sub.as_ptr() as usize).checked_sub(base)?;
        let end = start.checked_add(sub.len())?;
        (end <= self.len()).then(|| SharedBytes {
            buf: self.buf.clone(),
            range: self.range.start + start..self.range.start + end,
        })
    }
}

impl Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &(*self.buf).as_ref()[self.range.clone()]
    }
}

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Vec<u8>> for SharedBytes {
    /// The whole of `v`, without copying it.
    fn from(v: Vec<u8>) -> SharedBytes {
        let range = 0..v.len();
        let buf: Arc<Buffer> = Arc::new(v);
        SharedBytes { buf, range }
    }
}

impl PartialEq for SharedBytes {
    fn eq(&self, other: &SharedBytes) -> bool {
        **self == **other
    }
}

impl Eq for SharedBytes {}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_sub_slices_share_the_buffer() {
        let buf = Arc::new((0u8..100).collect::<Vec<u8>>());
        let mid = SharedBytes::new(buf.clone(), 10..60).unwrap();
        assert_eq!(&mid[..3], &[10, 11, 12]);
        let sub = mid.slice_ref(&mid[5..8]).unwrap();
        assert_eq!(&*sub, &[15, 16, 17]);
        assert_eq!(sub.as_ptr(), buf[15..].as_ptr(), "no copy");
        let empty = mid.slice_ref(&mid[50..]).unwrap();
        assert!(empty.is_empty());
        assert!(SharedBytes::new(buf.clone(), 90..101).is_none());
        // A slice that is not part of `mid` is refused, not mis-mapped.
        assert!(mid.slice_ref(&buf[60..62]).is_none());
        assert!(mid.slice_ref(&buf[5..12]).is_none());
        let other = vec![1u8; 4];
        assert!(mid.slice_ref(&other).is_none());
        assert_eq!(
            SharedBytes::from(vec![10, 11, 12]),
            mid.slice_ref(&mid[..3]).unwrap()
        );
    }
}
