//! How the [`FileSink`](super::FileSink) turns records into bytes: line-delimited text
//! ([`Lines`], [`LinesWith`]) or JSON lines ([`JsonLines`]).
//!
//! Every format writes whole lines, each ending in `\n`, so a part file is valid on its
//! own and readers (such as [`FileSource`](super::FileSource)) can split it on newlines.

use std::fmt::{Display, Write as _};

use serde::Serialize;

use crate::error::{Error, Result};

/// Encodes one record as bytes appended to a buffer (one line, newline included).
///
/// Each sink subtask owns a clone, so an encoder may keep scratch buffers.
pub trait Encoder<T>: Clone + Send + 'static {
    /// Appends the encoding of `record` to `out`. An error fails the task (and so the
    /// job attempt), so return one only for records that can never be written.
    fn encode(&mut self, record: &T, out: &mut Vec<u8>) -> Result<()>;
}

/// One line per record, as its [`Display`] form. A record whose text contains a newline
/// becomes several lines: format such records with [`LinesWith`] or [`JsonLines`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Lines;

impl<T: Display> Encoder<T> for Lines {
    fn encode(&mut self, record: &T, out: &mut Vec<u8>) -> Result<()> {
        // `Vec<u8>` implements `io::Write`, which cannot fail here.
        use std::io::Write as _;
        writeln!(out, "{record}").map_err(|e| Error::user(format!("cannot format record: {e}")))
    }
}

/// One line per record, written by a function that appends the line (without newline)
/// to the string it is given — for records without [`Display`], or with a custom layout.
#[derive(Clone)]
pub struct LinesWith<F> {
    format: F,
    line: String,
}

impl<F> LinesWith<F> {
    /// Lines formatted by `format(record, line)`.
    pub fn new(format: F) -> Self {
        LinesWith {
            format,
            line: String::new(),
        }
    }
}

impl<T, F> Encoder<T> for LinesWith<F>
where
    F: Fn(&T, &mut String) + Clone + Send + 'static,
{
    fn encode(&mut self, record: &T, out: &mut Vec<u8>) -> Result<()> {
        self.line.clear();
        (self.format)(record, &mut self.line);
        self.line.push('\n');
        out.extend_from_slice(self.line.as_bytes());
        Ok(())
    }
}

/// One compact JSON document per line (the "JSON lines" format), via serde.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

impl<T: Serialize> Encoder<T> for JsonLines {
    fn encode(&mut self, record: &T, out: &mut Vec<u8>) -> Result<()> {
        serde_json::to_writer(&mut *out, record)
            .map_err(|e| Error::user(format!("cannot encode record as JSON: {e}")))?;
        out.push(b'\n');
        Ok(())
    }
}

/// Formats `(key, value)` pairs as `key<TAB>value`: a convenience for [`LinesWith`].
pub fn tab_separated<K: Display, V: Display>(pair: &(K, V), line: &mut String) {
    let _ = write!(line, "{}\t{}", pair.0, pair.1);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode<T, E: Encoder<T>>(mut e: E, records: &[T]) -> String {
        let mut out = Vec::new();
        for r in records {
            e.encode(r, &mut out).unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_format_writes_whole_lines() {
        assert_eq!(encode(Lines, &[1, 22]), "1\n22\n");
        assert_eq!(
            encode(LinesWith::new(tab_separated::<&str, u64>), &[("a", 1)]),
            "a\t1\n"
        );
        assert_eq!(
            encode(JsonLines, &[("a\nb", 1u32)]),
            "[\"a\\nb\",1]\n",
            "JSON escapes newlines, so one record stays one line"
        );
    }
}
