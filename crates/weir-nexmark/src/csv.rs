//! Query results as CSV: a header of the query's sink columns, then one row per result.
//!
//! Timestamps are epoch milliseconds, decimals are in plain notation with their SQL scale
//! (`90.800`), SQL NULL is an empty field, and an empty string is `""` so the two stay
//! apart. Fields holding a comma, a quote or a line break are quoted, quotes doubled.

use std::io::{self, Write};

/// One SQL value of a result row.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    /// `BIGINT`, and `TIMESTAMP(3)` as epoch milliseconds.
    Int(i64),
    /// `DECIMAL(p, scale)`: `unscaled / 10^scale`, written in plain notation.
    Decimal {
        /// The value times `10^scale`.
        unscaled: i128,
        /// Digits after the point.
        scale: u32,
    },
    /// `VARCHAR`.
    Str(String),
    /// SQL NULL.
    Null,
}

/// A result row, in the sink's column order.
pub type Row = Vec<Value>;

impl Value {
    /// Appends the value as one CSV field.
    pub fn write_field(&self, out: &mut Vec<u8>) {
        match self {
            Value::Int(v) => out.extend_from_slice(v.to_string().as_bytes()),
            Value::Decimal { unscaled, scale } => {
                out.extend_from_slice(plain_decimal(*unscaled, *scale).as_bytes())
            }
            Value::Str(s) => {
                let needs_quotes =
                    s.is_empty() || s.bytes().any(|c| matches!(c, b',' | b'"' | b'\n' | b'\r'));
                if needs_quotes {
                    out.push(b'"');
                    for c in s.bytes() {
                        if c == b'"' {
                            out.push(b'"');
                        }
                        out.push(c);
                    }
                    out.push(b'"');
                } else {
                    out.extend_from_slice(s.as_bytes());
                }
            }
            Value::Null => {}
        }
    }
}

/// `unscaled / 10^scale` in plain notation: `-0.050`, `90.800`, `12`.
pub fn plain_decimal(unscaled: i128, scale: u32) -> String {
    if scale == 0 {
        return unscaled.to_string();
    }
    let sign = if unscaled < 0 { "-" } else { "" };
    let magnitude = unscaled.unsigned_abs();
    let factor = 10u128.pow(scale);
    format!(
        "{sign}{}.{:0width$}",
        magnitude / factor,
        magnitude % factor,
        width = scale as usize
    )
}

/// Writes CSV rows to `out`, buffering, header first.
pub struct CsvWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    rows: u64,
}

impl<W: Write> CsvWriter<W> {
    /// Starts a CSV file with the `columns` header.
    pub fn new(out: W, columns: &[&str]) -> io::Result<Self> {
        let mut w = CsvWriter {
            out,
            buf: Vec::with_capacity(64 * 1024),
            rows: 0,
        };
        let header: Vec<Value> = columns.iter().map(|c| Value::Str(c.to_string())).collect();
        w.write_values(&header)?;
        w.rows = 0;
        Ok(w)
    }

    /// Appends one row.
    pub fn write_row(&mut self, row: &[Value]) -> io::Result<()> {
        self.write_values(row)
    }

    fn write_values(&mut self, row: &[Value]) -> io::Result<()> {
        for (i, v) in row.iter().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            v.write_field(&mut self.buf);
        }
        self.buf.push(b'\n');
        self.rows += 1;
        if self.buf.len() >= 60 * 1024 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Flushes everything and returns the number of rows written (without the header).
    pub fn finish(mut self) -> io::Result<u64> {
        self.out.write_all(&self.buf)?;
        self.out.flush()?;
        Ok(self.rows)
    }
}

/// The rows as CSV text with the header, for tests and small results.
pub fn to_csv(columns: &[&str], rows: &[Row]) -> String {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    if let Ok(mut w) = CsvWriter::new(&mut out, columns) {
        for row in rows {
            let _ = w.write_row(row);
        }
        let _ = w.finish();
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        assert_eq!(plain_decimal(90_800, 3), "90.800");
        assert_eq!(plain_decimal(-50, 3), "-0.050");
        assert_eq!(plain_decimal(7, 0), "7");
        let text = to_csv(
            &["a", "b", "c", "d"],
            &[vec![
                Value::Int(-3),
                Value::Str("x,\"y\"".into()),
                Value::Null,
                Value::Str(String::new()),
            ]],
        );
        assert_eq!(text, "a,b,c,d\n-3,\"x,\"\"y\"\"\",,\"\"\n");
    }
}
