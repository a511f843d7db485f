//! The envelope every checkpoint file is wrapped in.
//!
//! Layout, all integers little-endian:
//!
//! ```text
//! offset  size  field
//!      0     8  magic b"WEIRCHK\0"
//!      8     2  format version (u16, currently 1)
//!     10     1  file kind (u8: 1 metadata, 2 operator state, 3 keyed state)
//!     11     1  reserved (0)
//!     12     8  payload length in bytes (u64)
//!     20     n  payload
//!   20+n     4  crc32c of every preceding byte (header and payload)
//! ```
//!
//! Guarantees of [`decode`]: it never panics on any input, and it returns the payload only
//! if the whole file is exactly one intact envelope of the expected kind written by a format
//! version this build understands. Anything else — a foreign or empty file, a newer format,
//! the wrong kind of file, a truncated, corrupted or over-long file — is a [`FormatError`]
//! that names the file, says what is wrong and how to get out of it.
//!
//! The version is checked right after the magic, before any other field, so a file from a
//! newer Weir (whose header may differ) reports "needs a newer Weir" rather than a misleading
//! "corrupted". The checksum is checked before the kind and reserved fields, so a bit flip
//! anywhere reports "corrupted".

use std::fmt;
use std::path::{Path, PathBuf};

/// First bytes of every checkpoint file, so foreign files are recognised at once.
pub const MAGIC: [u8; 8] = *b"WEIRCHK\0";

/// The only envelope version this build writes and the newest it reads; bump it whenever
/// the envelope layout changes so older builds refuse newer files instead of misreading them.
pub const FORMAT_VERSION: u16 = 1;

/// Bytes before the payload (magic, version, kind, reserved, length); callers can use it
/// with [`TRAILER_LEN`] to relate payload sizes to file sizes.
pub const HEADER_LEN: usize = 20;

/// Bytes after the payload (the crc32c).
pub const TRAILER_LEN: usize = 4;

/// What a checkpoint file holds, recorded in its header so that a file put in the wrong
/// place (or a mixed-up handle) is caught instead of being decoded as something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A checkpoint's `_metadata` file: the state handles of every subtask.
    Metadata = 1,
    /// Non-keyed state of one operator subtask (list, union or broadcast state).
    OperatorState = 2,
    /// Keyed state of one operator for a range of key groups.
    KeyedState = 3,
    /// Records in flight on one input channel of one subtask, saved by an unaligned
    /// checkpoint (issue 13).
    ChannelState = 4,
    /// The keyed state that changed between two checkpoints of one operator subtask: an
    /// incremental checkpoint's delta, applied on top of a full keyed-state file (issue 25).
    KeyedStateDelta = 5,
}

impl FileKind {
    /// Human name used in error messages ("expected metadata, found keyed state").
    pub fn name(self) -> &'static str {
        match self {
            FileKind::Metadata => "metadata",
            FileKind::OperatorState => "operator state",
            FileKind::KeyedState => "keyed state",
            FileKind::ChannelState => "channel state",
            FileKind::KeyedStateDelta => "keyed state delta",
        }
    }

    /// The kind stored as `byte` in a header, or `None` for a byte no kind uses, so readers
    /// never trust an unknown tag.
    pub fn from_byte(byte: u8) -> Option<FileKind> {
        match byte {
            1 => Some(FileKind::Metadata),
            2 => Some(FileKind::OperatorState),
            3 => Some(FileKind::KeyedState),
            4 => Some(FileKind::ChannelState),
            5 => Some(FileKind::KeyedStateDelta),
            _ => None,
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a checkpoint file could not be decoded. Every variant carries the file's path and
/// its message ends with what the user can do about it.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// No magic, or too short to hold a header: not something Weir wrote.
    #[error(
        "{} is not a Weir checkpoint file ({detail}): foreign or empty file; \
         check the path, or restore from another checkpoint",
        .path.display()
    )]
    NotCheckpointFile {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        detail: String,
    },
    /// Written by a newer envelope version than this build reads.
    #[error(
        "{} was written with checkpoint format version {found}, but this Weir reads \
         format version {} at most; restore it with a newer Weir",
        .path.display(), FORMAT_VERSION
    )]
    NewerVersion {
        /// The file.
        path: PathBuf,
        /// The version in its header.
        found: u16,
    },
    /// An intact file of another kind than the caller asked for.
    #[error(
        "{}: expected {expected}, found {found}; the checkpoint's files were mixed up \
         or its metadata points at the wrong file; restore from another checkpoint",
        .path.display()
    )]
    WrongKind {
        /// The file.
        path: PathBuf,
        /// The kind the caller wanted.
        expected: FileKind,
        /// The kind in the header.
        found: FileKind,
    },
    /// The file ends before the length in its header says it should.
    #[error(
        "{} is truncated: its length says {expected} bytes, the file has {actual} \
         (an interrupted write or copy); restore from another checkpoint",
        .path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// File size implied by the header.
        expected: u64,
        /// Actual file size.
        actual: u64,
    },
    /// Checksum mismatch or an impossible header field.
    #[error(
        "{} is corrupted ({detail}); restore from another checkpoint",
        .path.display()
    )]
    Corrupted {
        /// The file.
        path: PathBuf,
        /// What failed to check out.
        detail: String,
    },
    /// An intact envelope followed by extra bytes.
    #[error(
        "{} has trailing bytes after its end: its length says {expected} bytes, the file \
         has {actual} (appended to or mis-copied); restore from another checkpoint",
        .path.display()
    )]
    TrailingBytes {
        /// The file.
        path: PathBuf,
        /// File size implied by the header.
        expected: u64,
        /// Actual file size.
        actual: u64,
    },
}

impl FormatError {
    /// The file the error is about, for callers that list or skip bad files.
    pub fn path(&self) -> &Path {
        match self {
            FormatError::NotCheckpointFile { path, .. }
            | FormatError::NewerVersion { path, .. }
            | FormatError::WrongKind { path, .. }
            | FormatError::Truncated { path, .. }
            | FormatError::Corrupted { path, .. }
            | FormatError::TrailingBytes { path, .. } => path,
        }
    }
}

/// The header of a file of `kind` whose payload is `payload_len` bytes: what a writer
/// that streams the payload (and learns its length only at the end) puts in front of it.
pub fn header(kind: FileKind, payload_len: u64) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[..8].copy_from_slice(&MAGIC);
    out[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[10] = kind as u8;
    out[12..].copy_from_slice(&payload_len.to_le_bytes());
    out
}

/// Wraps `payload` in the envelope; the result is what goes on disk, byte for byte.
pub fn encode(kind: FileKind, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + TRAILER_LEN);
    out.extend_from_slice(&header(kind, payload.len() as u64));
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Checks that `bytes` (the content of the file at `path`, used only in messages) is one
/// intact envelope of kind `expected` and returns its payload, borrowed from `bytes`.
pub fn decode<'a>(
    path: &Path,
    expected: FileKind,
    bytes: &'a [u8],
) -> Result<&'a [u8], FormatError> {
    decode_checked(path, expected, bytes, crc32c::crc32c)
}

/// Like [`decode`], for a reader that computed `crc_of_body` — the crc32c of every byte
/// but the last [`TRAILER_LEN`] — while reading the file (a pass over a large file less).
/// Every check is the same: the precomputed value stands in only where it is exactly the
/// checksum `decode` would compute (the file is as long as its header says), and the
/// checksum is computed here otherwise.
pub fn decode_with_crc<'a>(
    path: &Path,
    expected: FileKind,
    bytes: &'a [u8],
    crc_of_body: u32,
) -> Result<&'a [u8], FormatError> {
    let body_len = bytes.len().saturating_sub(TRAILER_LEN);
    decode_checked(path, expected, bytes, |covered| {
        if covered.len() == body_len {
            crc_of_body
        } else {
            crc32c::crc32c(covered)
        }
    })
}

/// [`decode`], with `checksum` computing the crc32c of the bytes the envelope covers.
fn decode_checked<'a>(
    path: &Path,
    expected: FileKind,
    bytes: &'a [u8],
    checksum: impl FnOnce(&[u8]) -> u32,
) -> Result<&'a [u8], FormatError> {
    let path_buf = || path.to_path_buf();
    let not_ours = |detail: String| FormatError::NotCheckpointFile {
        path: path_buf(),
        detail,
    };
    if bytes.is_empty() {
        return Err(not_ours("the file is empty".into()));
    }
    if bytes.len() < HEADER_LEN {
        return Err(not_ours(format!(
            "{} bytes, shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        )));
    }
    let (header, rest) = bytes.split_at(HEADER_LEN);
    if header[..8] != MAGIC {
        return Err(not_ours(
            "it does not start with the Weir magic number".into(),
        ));
    }
    let version = u16::from_le_bytes([header[8], header[9]]);
    if version > FORMAT_VERSION {
        return Err(FormatError::NewerVersion {
            path: path_buf(),
            found: version,
        });
    }
    let corrupted = |detail: String| FormatError::Corrupted {
        path: path_buf(),
        detail,
    };
    if version == 0 {
        return Err(corrupted("format version 0 does not exist".into()));
    }
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&header[12..20]);
    let payload_len = u64::from_le_bytes(len_bytes);
    let actual = bytes.len() as u64;
    // A length past 2^48 (256 TiB) is a damaged field, not a file that could have been cut.
    if payload_len > 1 << 48 {
        return Err(corrupted(format!(
            "impossible payload length {payload_len}"
        )));
    }
    let expected_len = payload_len + (HEADER_LEN + TRAILER_LEN) as u64;
    if actual < expected_len {
        return Err(FormatError::Truncated {
            path: path_buf(),
            expected: expected_len,
            actual,
        });
    }
    // expected_len <= bytes.len(), so it fits in usize and every slice below is in bounds.
    let payload_len = payload_len as usize;
    let (payload, after) = rest.split_at(payload_len);
    let crc_end = HEADER_LEN + payload_len;
    let stored = u32::from_le_bytes([after[0], after[1], after[2], after[3]]);
    let computed = checksum(&bytes[..crc_end]);
    if stored != computed {
        return Err(corrupted(format!(
            "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
        )));
    }
    if actual > expected_len {
        return Err(FormatError::TrailingBytes {
            path: path_buf(),
            expected: expected_len,
            actual,
        });
    }
    let Some(found) = FileKind::from_byte(header[10]) else {
        return Err(corrupted(format!("unknown file kind {}", header[10])));
    };
    if header[11] != 0 {
        return Err(corrupted(format!(
            "reserved header byte is {}, not 0",
            header[11]
        )));
    }
    if found != expected {
        return Err(FormatError::WrongKind {
            path: path_buf(),
            expected,
            found,
        });
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/ckpt/chk-1/_metadata";

    fn metadata_file(edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut bytes = encode(FileKind::Metadata, b"meta");
        edit(&mut bytes);
        bytes
    }

    /// Sets one header byte and fixes the checksum, to reach the checks made after it.
    fn resealed(offset: usize, value: u8) -> Vec<u8> {
        metadata_file(|b| {
            b[offset] = value;
            let end = b.len() - TRAILER_LEN;
            let crc = crc32c::crc32c(&b[..end]);
            b[end..].copy_from_slice(&crc.to_le_bytes());
        })
    }

    #[test]
    fn round_trip_all_kinds_and_sizes() {
        for kind in [
            FileKind::Metadata,
            FileKind::OperatorState,
            FileKind::KeyedState,
        ] {
            for payload in [&b""[..], b"x", &[0xAB; 1000][..]] {
                let bytes = encode(kind, payload);
                assert_eq!(bytes.len(), HEADER_LEN + payload.len() + TRAILER_LEN);
                assert_eq!(decode(Path::new(PATH), kind, &bytes).unwrap(), payload);
                let body = crc32c::crc32c(&bytes[..bytes.len() - TRAILER_LEN]);
                let with_crc = decode_with_crc(Path::new(PATH), kind, &bytes, body);
                assert_eq!(with_crc.unwrap(), payload);
                // A reader whose checksum disagrees with the trailer saw other bytes.
                let err = decode_with_crc(Path::new(PATH), kind, &bytes, !body).unwrap_err();
                assert!(err.to_string().contains("checksum mismatch"), "{err}");
            }
        }
    }

    #[test]
    fn layout_is_stable() {
        let bytes = encode(FileKind::KeyedState, b"ab");
        assert_eq!(&bytes[..12], b"WEIRCHK\0\x01\x00\x03\x00");
        assert_eq!(&bytes[12..20], &2u64.to_le_bytes());
        assert_eq!(&bytes[20..22], b"ab");
        assert_eq!(bytes[22..], crc32c::crc32c(&bytes[..22]).to_le_bytes());
    }

    #[test]
    fn each_failure_is_told_apart_and_names_the_file() {
        let valid = metadata_file(|_| {});
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "NotCheckpointFile",
                vec![],
                "(the file is empty): foreign or empty file",
            ),
            (
                "NotCheckpointFile",
                b"WEIRCHK".to_vec(),
                "shorter than the 20-byte header",
            ),
            (
                "NotCheckpointFile",
                b"{\"json\": 1, \"yaml\": 2}".to_vec(),
                "magic number",
            ),
            (
                "NewerVersion",
                metadata_file(|b| b[8] = 7),
                "format version 7, but this Weir reads format version 1 at most; \
                 restore it with a newer Weir",
            ),
            (
                "WrongKind",
                encode(FileKind::KeyedState, b"k"),
                "expected metadata, found keyed state",
            ),
            (
                "Truncated",
                valid[..27].to_vec(),
                "length says 28 bytes, the file has 27",
            ),
            (
                "Corrupted",
                metadata_file(|b| b[21] ^= 1),
                "checksum mismatch",
            ),
            (
                "TrailingBytes",
                metadata_file(|b| b.push(0)),
                "says 28 bytes, the file has 29",
            ),
            ("Corrupted", resealed(10, 9), "unknown file kind 9"),
            ("Corrupted", resealed(11, 1), "reserved header byte is 1"),
            (
                "Corrupted",
                resealed(8, 0),
                "format version 0 does not exist",
            ),
            ("Corrupted", resealed(19, 0xFF), "impossible payload length"),
        ];
        for (variant, bytes, want) in cases {
            let body = crc32c::crc32c(&bytes[..bytes.len().saturating_sub(TRAILER_LEN)]);
            let with_crc = decode_with_crc(Path::new(PATH), FileKind::Metadata, &bytes, body);
            assert_eq!(
                with_crc.unwrap_err().to_string(),
                decode(Path::new(PATH), FileKind::Metadata, &bytes)
                    .unwrap_err()
                    .to_string(),
                "{variant}: a reader's checksum changes no verdict"
            );
            let err = decode(Path::new(PATH), FileKind::Metadata, &bytes).unwrap_err();
            let msg = err.to_string();
            assert!(
                format!("{err:?}").starts_with(variant),
                "{variant}: {err:?}"
            );
            assert!(
                msg.contains(want) && msg.starts_with(PATH),
                "{variant}: {msg}"
            );
            assert_eq!(err.path(), Path::new(PATH));
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = encode(FileKind::KeyedState, b"a payload of some length");
        for len in 0..bytes.len() {
            let result = decode(Path::new(PATH), FileKind::KeyedState, &bytes[..len]);
            assert!(result.is_err(), "accepted a file cut to {len} bytes");
            let cut = &bytes[..len];
            let body = crc32c::crc32c(&cut[..len.saturating_sub(TRAILER_LEN)]);
            let result = decode_with_crc(Path::new(PATH), FileKind::KeyedState, cut, body);
            assert!(
                result.is_err(),
                "with crc: accepted a file cut to {len} bytes"
            );
        }
    }

    #[test]
    fn every_byte_and_bit_flip_is_an_error() {
        let bytes = encode(FileKind::Metadata, b"small");
        for i in 0..bytes.len() {
            for mask in [0xFF, 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80] {
                let mut damaged = bytes.clone();
                damaged[i] ^= mask;
                let result = decode(Path::new(PATH), FileKind::Metadata, &damaged);
                assert!(
                    result.is_err(),
                    "accepted byte {i} flipped with {mask:#04x}"
                );
                // A reader's checksum, computed over the damaged bytes as it read them.
                let body = crc32c::crc32c(&damaged[..damaged.len() - TRAILER_LEN]);
                let result = decode_with_crc(Path::new(PATH), FileKind::Metadata, &damaged, body);
                assert!(
                    result.is_err(),
                    "with crc: byte {i} flipped with {mask:#04x}"
                );
            }
        }
    }
}
