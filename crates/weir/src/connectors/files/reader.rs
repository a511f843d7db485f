//! Reading one input file line by line from a byte offset, and decoding lines as UTF-8.
//!
//! The offset after each line is the exact position a restore seeks back to, so a line is
//! either wholly before a checkpoint or wholly after it.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;

use crate::error::{Error, Result};

/// An open input file positioned at the start of a line.
pub(crate) struct LineReader {
    path: String,
    reader: BufReader<File>,
    /// Byte offset of the next line.
    offset: u64,
    line: Vec<u8>,
}

impl LineReader {
    /// Opens `path` at byte `offset` (the start of a line, as recorded by an earlier read).
    pub(crate) fn open(path: &str, offset: u64) -> Result<Self> {
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
        })
    }

    /// Byte offset of the next line.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads the next line and decodes it (without its `\n` or `\r\n`); `None` at the end
    /// of the file. A last line without newline is still a line.
    pub(crate) fn next_line(&mut self, lossy: bool) -> Result<Option<String>> {
        self.line.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.line)
            .map_err(|e| Error::io("cannot read input file", &self.path, e))?;
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
        let mut r = LineReader::open(f, 0).unwrap();
        assert_eq!(r.next_line(false).unwrap().as_deref(), Some("one"));
        let at = r.offset();
        assert_eq!(at, 5);
        let mut again = LineReader::open(f, at).unwrap();
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
        let mut r = LineReader::open(f, 0).unwrap();
        r.next_line(false).unwrap();
        let err = r.next_line(false).unwrap_err().to_string();
        assert!(
            err.contains("bad.txt") && err.contains("byte offset 5"),
            "{err}"
        );
        let mut r = LineReader::open(f, 3).unwrap();
        assert_eq!(r.next_line(true).unwrap().unwrap(), "ab\u{fffd}c");
    }

    #[test]
    fn a_file_shorter_than_its_checkpointed_offset_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("short");
        std::fs::write(&f, "x\n").unwrap();
        let err = LineReader::open(f.to_str().unwrap(), 10)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("only 2 bytes"), "{err}");
    }
}
