//! Reading one input file line by line from a byte offset, and decoding lines as UTF-8.
//!
//! The offset after each line is the exact position a restore seeks back to, so a line is
//! either wholly before a checkpoint or wholly after it.
//!
//! A line longer than the reader's limit ([`DEFAULT_MAX_LINE_BYTES`] unless set) is an
//! error naming the file and the line's offset, found before the line is held in memory:
//! a file without newlines would otherwise be read whole into one allocation.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;

use crate::error::{Error, Result};

/// The longest line read by default (64 MiB, its line end not counted).
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 << 20;

/// An open input file positioned at the start of a line.
pub(crate) struct LineReader {
    path: String,
    reader: BufReader<File>,
    /// Byte offset of the next line.
    offset: u64,
    line: Vec<u8>,
    max_line: usize,
}

impl LineReader {
    /// Opens `path` at byte `offset` (the start of a line, as recorded by an earlier read);
    /// lines longer than `max_line` bytes are errors.
    pub(crate) fn open(path: &str, offset: u64, max_line: usize) -> Result<Self> {
        let p = Path::new(path);
        let mut file = File::open(p).map_err(|e| Error::io("cannot open input file", p, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("cannot open input file", p, e))?
            .len();
        if offset > len {
            return Err(Error::io(
                "cannot resume input file",
                p,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "the checkpoint read it up to byte {offset}, but it now has only \
                         {len} bytes: input files must not change once read"
                    ),
                ),
            ));
        }
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| Error::io("cannot seek in input file", p, e))?;
        Ok(LineReader {
            path: path.to_string(),
            reader: BufReader::with_capacity(256 * 1024, file),
            offset,
            line: Vec::new(),
            max_line,
        })
    }

    /// Byte offset of the next line.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads the next line and decodes it (without its `\n` or `\r\n`); `None` at the end
    /// of the file. A last line without newline is still a line.
    pub(crate) fn next_line(&mut self, lossy: bool) -> Result<Option<String>> {
        let n = self.read_line_bytes()?;
        if n == 0 {
            return Ok(None);
        }
        let start = self.offset;
        let text = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let line = decode(text, lossy, &self.path, start)?;
        self.offset += n as u64;
        Ok(Some(line))
    }
}

impl LineReader {
    /// Reads the next line's bytes, its `\n` included, into `self.line`; returns how many
    /// (0 at the end). Stops with an error as soon as the line exceeds the limit.
    fn read_line_bytes(&mut self) -> Result<usize> {
        self.line.clear();
        loop {
            let buf = self
                .reader
                .fill_buf()
                .map_err(|e| Error::io("cannot read input file", &self.path, e))?;
            if buf.is_empty() {
                return Ok(self.line.len());
            }
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            let content = self.line.len() + take - usize::from(done);
            // A `\r` before the `\n` belongs to the line end, not the line.
            let cr = usize::from(done && buf[..take].ends_with(b"\r\n"));
            if content.saturating_sub(cr) > self.max_line {
                return Err(self.too_long());
            }
            self.line.extend_from_slice(&buf[..take]);
            self.reader.consume(take);
            if done {
                return Ok(self.line.len());
            }
        }
    }

    fn too_long(&self) -> Error {
        Error::io(
            "line too long in input file",
            &self.path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "the line starting at byte {} is longer than {} bytes; is the file \
                     really text with line ends? Raise the limit (--max-line-length, \
                     FileSource::max_line_length) if such lines are expected",
                    self.offset, self.max_line
                ),
            ),
        )
    }
}

/// Decodes `bytes` (the line starting at byte `start` of `path`) as UTF-8: invalid bytes
/// are replaced by U+FFFD when `lossy`, and are otherwise an error naming the file and the
/// byte offset of the first invalid byte.
pub(crate) fn decode(bytes: &[u8], lossy: bool, path: &str, start: u64) -> Result<String> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_string()),
        Err(_) if lossy => Ok(String::from_utf8_lossy(bytes).into_owned()),
        Err(e) => Err(Error::io(
            "invalid UTF-8 in input file",
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "at byte offset {} (in the line starting at byte {start}); \
                     read the files with lossy UTF-8 decoding to replace invalid bytes",
                    start + e.valid_up_to() as u64
                ),
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_offsets_resume_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a");
        std::fs::write(&f, "one\r\ntwo\n\nlast").unwrap();
        let f = f.to_str().unwrap();
        let mut r = LineReader::open(f, 0, DEFAULT_MAX_LINE_BYTES).unwrap();
        assert_eq!(r.next_line(false).unwrap().as_deref(), Some("one"));
        let at = r.offset();
        assert_eq!(at, 5);
        let mut again = LineReader::open(f, at, DEFAULT_MAX_LINE_BYTES).unwrap();
        let mut rest = Vec::new();
        while let Some(l) = again.next_line(false).unwrap() {
            rest.push(l);
        }
        assert_eq!(rest, ["two", "", "last"]);
        assert_eq!(again.offset(), 14);
    }

    #[test]
    fn invalid_utf8_names_file_and_offset_unless_lossy() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bad.txt");
        std::fs::write(&f, b"ok\nab\xffc\n").unwrap();
        let f = f.to_str().unwrap();
        let mut r = LineReader::open(f, 0, DEFAULT_MAX_LINE_BYTES).unwrap();
        r.next_line(false).unwrap();
        let err = r.next_line(false).unwrap_err().to_string();
        assert!(
            err.contains("bad.txt") && err.contains("byte offset 5"),
            "{err}"
        );
        let mut r = LineReader::open(f, 3, DEFAULT_MAX_LINE_BYTES).unwrap();
        assert_eq!(r.next_line(true).unwrap().unwrap(), "ab\u{fffd}c");
    }

    #[test]
    fn a_file_shorter_than_its_checkpointed_offset_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("short");
        std::fs::write(&f, "x\n").unwrap();
        let err = LineReader::open(f.to_str().unwrap(), 10, DEFAULT_MAX_LINE_BYTES)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("only 2 bytes"), "{err}");
    }

    #[test]
    fn a_line_over_the_limit_is_an_error_naming_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("big.txt");
        let mut data = b"short\n".to_vec();
        data.extend(std::iter::repeat_n(b'x', 1000));
        data.extend_from_slice(b"\nafter\n");
        std::fs::write(&f, &data).unwrap();
        let f = f.to_str().unwrap();
        // Exactly at the limit is fine, with either line end.
        let mut r = LineReader::open(f, 0, 1000).unwrap();
        assert_eq!(r.next_line(false).unwrap().unwrap(), "short");
        assert_eq!(r.next_line(false).unwrap().unwrap().len(), 1000);
        assert_eq!(r.next_line(false).unwrap().unwrap(), "after");
        let crlf = dir.path().join("crlf.txt");
        std::fs::write(&crlf, b"abcd\r\n").unwrap();
        let mut r = LineReader::open(crlf.to_str().unwrap(), 0, 4).unwrap();
        assert_eq!(r.next_line(false).unwrap().unwrap(), "abcd");
        // One byte over: an error naming the file and where the line starts.
        let mut r = LineReader::open(f, 0, 999).unwrap();
        r.next_line(false).unwrap();
        let err = r.next_line(false).unwrap_err().to_string();
        assert!(err.contains("big.txt"), "{err}");
        assert!(err.contains("starting at byte 6"), "{err}");
        assert!(err.contains("longer than 999 bytes"), "{err}");
        // A file with no line end at all stops at the limit, not at its end.
        let huge = dir.path().join("huge");
        std::fs::write(&huge, vec![b'y'; 3 << 20]).unwrap();
        let mut r = LineReader::open(huge.to_str().unwrap(), 0, 1 << 20).unwrap();
        assert!(r.next_line(false).is_err());
        assert!(
            r.line.capacity() < 2 << 20,
            "held {} bytes",
            r.line.capacity()
        );
    }
}
