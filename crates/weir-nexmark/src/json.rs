//! Reading and writing events as JSON lines, with errors that name the line and the field.
//!
//! One event a line, nested as the DDL's row and holding only its own kind's object:
//! `{"event_type":2,"bid":{"auction":1000,...,"dateTime":1704067200000,"extra":"..."}}`.
//! `dateTime` and `expires` are epoch milliseconds; on input they may also be strings
//! `YYYY-MM-DD HH:MM:SS[.fff]` (a `T` separator and a trailing `Z` are accepted), read as
//! UTC, which is how Flink's JSON format writes a `TIMESTAMP(3)`. Unknown fields and a
//! `null` object of another kind are ignored; blank lines are skipped, and so is a UTF-8
//! byte-order mark at the start of the file.
//!
//! Parsing goes through serde's typed path; only when a line fails is it looked at again
//! field by field, to say which field is wrong and why.

use std::fmt;
use std::io::{self, BufRead, Write};

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::Value;

use crate::model::{Auction, Bid, EpochMillis, Event, Person};

/// A line that is not a valid event: which line (1-based), which field if one is to blame
/// (`bid.price`), and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The 1-based line number.
    pub line: u64,
    /// The field to blame, as `kind.field` (or `event_type`), when there is one.
    pub field: Option<String>,
    /// What is wrong, and what was expected.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "line {}: field {}: {}", self.line, field, self.message),
            None => write!(f, "line {}: {}", self.line, self.message),
        }
    }
}

impl std::error::Error for ParseError {}

/// Why reading an events file stopped: the file could not be read, or a line is not an
/// event.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Reading failed (the message says which line was being read).
    #[error("reading line {line}: {source}")]
    Io {
        /// The line being read.
        line: u64,
        /// The I/O error.
        source: io::Error,
    },
    /// A line is not a valid event.
    #[error("{0}")]
    Parse(#[from] ParseError),
}

#[derive(Deserialize)]
struct RawLine {
    event_type: i64,
    #[serde(default)]
    person: Option<Person>,
    #[serde(default)]
    auction: Option<Auction>,
    #[serde(default)]
    bid: Option<Bid>,
}

/// The UTF-8 byte-order mark some editors (Windows Notepad, Excel's "UTF-8" export) put at
/// the start of a file.
const BOM: char = '\u{feff}';

/// Parses one JSON line; `line_no` (1-based) goes into the error. A UTF-8 byte-order mark
/// opening line 1 (the file's first bytes) is skipped, as JSON readers do; anywhere else it
/// is refused by name, since it cannot be told from a damaged line.
pub fn parse_line(line: &str, line_no: u64) -> Result<Event, ParseError> {
    let line = match line.strip_prefix(BOM) {
        Some(rest) if line_no == 1 => rest,
        Some(_) => {
            return Err(ParseError {
                line: line_no,
                field: None,
                message: "the line starts with a UTF-8 byte-order mark (U+FEFF), which \
                          belongs only at the start of a file: remove it (files joined \
                          together each keep their own)"
                    .into(),
            })
        }
        None => line,
    };
    let raw: RawLine = match serde_json::from_str(line) {
        Ok(raw) => raw,
        Err(e) => return Err(diagnose(line, line_no, &e)),
    };
    let missing = |kind: &str| ParseError {
        line: line_no,
        field: Some(kind.to_string()),
        message: format!(
            "missing: event_type {} needs a \"{kind}\" object",
            raw.event_type
        ),
    };
    match raw.event_type {
        0 => raw
            .person
            .map(Event::Person)
            .ok_or_else(|| missing("person")),
        1 => raw
            .auction
            .map(Event::Auction)
            .ok_or_else(|| missing("auction")),
        2 => raw.bid.map(Event::Bid).ok_or_else(|| missing("bid")),
        other => Err(unknown_type(line_no, &other.to_string())),
    }
}

fn unknown_type(line_no: u64, found: &str) -> ParseError {
    ParseError {
        line: line_no,
        field: Some("event_type".into()),
        message: format!("unknown event type {found}: expected 0 (person), 1 (auction) or 2 (bid)"),
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Int,
    Str,
    Time,
}

const PERSON_FIELDS: &[(&str, Kind)] = &[
    ("id", Kind::Int),
    ("name", Kind::Str),
    ("emailAddress", Kind::Str),
    ("creditCard", Kind::Str),
    ("city", Kind::Str),
    ("state", Kind::Str),
    ("dateTime", Kind::Time),
    ("extra", Kind::Str),
];
const AUCTION_FIELDS: &[(&str, Kind)] = &[
    ("id", Kind::Int),
    ("itemName", Kind::Str),
    ("description", Kind::Str),
    ("initialBid", Kind::Int),
    ("reserve", Kind::Int),
    ("dateTime", Kind::Time),
    ("expires", Kind::Time),
    ("seller", Kind::Int),
    ("category", Kind::Int),
    ("extra", Kind::Str),
];
const BID_FIELDS: &[(&str, Kind)] = &[
    ("auction", Kind::Int),
    ("bidder", Kind::Int),
    ("price", Kind::Int),
    ("channel", Kind::Str),
    ("url", Kind::Str),
    ("dateTime", Kind::Time),
    ("extra", Kind::Str),
];

/// Finds the field to blame for a line the typed parse rejected.
fn diagnose(line: &str, line_no: u64, typed: &serde_json::Error) -> ParseError {
    let err = |field: Option<String>, message: String| ParseError {
        line: line_no,
        field,
        message,
    };
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return err(None, format!("not valid JSON: {e}")),
    };
    let Some(obj) = value.as_object() else {
        return err(
            None,
            format!("expected a JSON object, found {}", describe(&value)),
        );
    };
    let (kind, fields) = match obj.get("event_type") {
        None => return err(Some("event_type".into()), "missing".into()),
        Some(Value::Number(n)) if n.as_i64() == Some(0) => ("person", PERSON_FIELDS),
        Some(Value::Number(n)) if n.as_i64() == Some(1) => ("auction", AUCTION_FIELDS),
        Some(Value::Number(n)) if n.as_i64() == Some(2) => ("bid", BID_FIELDS),
        Some(Value::Number(n)) => return unknown_type(line_no, &n.to_string()),
        Some(other) => {
            return err(
                Some("event_type".into()),
                format!("expected an integer 0, 1 or 2, found {}", describe(other)),
            )
        }
    };
    let inner = match obj.get(kind) {
        Some(Value::Object(inner)) => inner,
        None | Some(Value::Null) => {
            return err(
                Some(kind.into()),
                format!("missing: this event_type needs a \"{kind}\" object"),
            )
        }
        Some(other) => {
            return err(
                Some(kind.into()),
                format!("expected an object, found {}", describe(other)),
            )
        }
    };
    for &(name, expected) in fields {
        let field = Some(format!("{kind}.{name}"));
        let Some(v) = inner.get(name) else {
            return err(field, "missing".into());
        };
        match (expected, v) {
            (Kind::Int, Value::Number(n)) if n.as_i64().is_some() => {}
            (Kind::Int, other) => {
                return err(
                    field,
                    format!("expected a 64-bit integer, found {}", describe(other)),
                )
            }
            (Kind::Str, Value::String(_)) => {}
            (Kind::Str, other) => {
                return err(
                    field,
                    format!("expected a string, found {}", describe(other)),
                )
            }
            (Kind::Time, Value::Number(n)) if n.as_i64().is_some() => {}
            (Kind::Time, Value::String(s)) if parse_timestamp(s).is_some() => {}
            (Kind::Time, other) => {
                return err(
                    field,
                    format!(
                        "timestamp {} does not parse: expected epoch milliseconds or \
                         'YYYY-MM-DD HH:MM:SS[.fff]' (UTC)",
                        describe(other)
                    ),
                )
            }
        }
    }
    // Every field checked out, yet the typed parse failed (e.g. another kind's object is
    // malformed): say what serde said.
    let other_kinds = ["person", "auction", "bid"]
        .into_iter()
        .filter(|k| *k != kind);
    for other in other_kinds {
        if let Some(v) = obj.get(other) {
            if !v.is_null() {
                return err(
                    Some(other.into()),
                    format!("a {kind} line holds a {other} object too: {typed}"),
                );
            }
        }
    }
    err(None, format!("does not parse: {typed}"))
}

fn describe(v: &Value) -> String {
    let text = v.to_string();
    if text.len() > 60 {
        let cut: String = text.chars().take(57).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// Serde hook for `dateTime` and `expires`: epoch milliseconds, or a UTC date-time string.
/// Binary formats (postcard, which checkpoints use) are not self-describing and always get
/// a plain `i64`.
pub(crate) fn de_timestamp<'de, D: Deserializer<'de>>(d: D) -> Result<EpochMillis, D::Error> {
    if !d.is_human_readable() {
        return i64::deserialize(d);
    }
    struct Ts;
    impl Visitor<'_> for Ts {
        type Value = EpochMillis;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("epoch milliseconds or 'YYYY-MM-DD HH:MM:SS[.fff]'")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<EpochMillis, E> {
            Ok(v)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<EpochMillis, E> {
            i64::try_from(v).map_err(|_| E::custom(format!("timestamp {v} is out of range")))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<EpochMillis, E> {
            parse_timestamp(v).ok_or_else(|| E::custom(format!("timestamp {v:?} does not parse")))
        }
    }
    d.deserialize_any(Ts)
}

/// Parses `YYYY-MM-DD HH:MM:SS[.fraction]` (or with `T`, optionally ending in `Z`) as UTC
/// epoch milliseconds; digits past the millisecond are truncated, as `TIMESTAMP(3)` does.
pub fn parse_timestamp(s: &str) -> Option<EpochMillis> {
    let s = s.strip_suffix('Z').unwrap_or(s);
    let b = s.as_bytes();
    if b.len() < 19 || !(b[10] == b' ' || b[10] == b'T') {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let part = s.get(from..to)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    if b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut millis = 0;
    if b.len() > 19 {
        if b[19] != b'.' || b.len() == 20 || !b[20..].iter().all(u8::is_ascii_digit) {
            return None;
        }
        let frac = &s[20..];
        let mut digits = frac
            .bytes()
            .take(3)
            .map(|c| (c - b'0') as i64)
            .collect::<Vec<_>>();
        digits.resize(3, 0);
        millis = digits[0] * 100 + digits[1] * 10 + digits[2];
    }
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Reads events from JSON lines, one at a time, naming the line of any error.
pub struct EventReader<R> {
    input: R,
    buf: String,
    line: u64,
}

impl<R: BufRead> EventReader<R> {
    /// Reads from `input`, starting at line 1.
    pub fn new(input: R) -> Self {
        EventReader {
            input,
            buf: String::new(),
            line: 0,
        }
    }
}

impl<R: BufRead> Iterator for EventReader<R> {
    type Item = Result<Event, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.buf.clear();
            self.line += 1;
            match self.input.read_line(&mut self.buf) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(source) => {
                    return Some(Err(ReadError::Io {
                        line: self.line,
                        source,
                    }))
                }
            }
            let text = self.buf.trim();
            if text.is_empty() {
                continue;
            }
            return Some(parse_line(text, self.line).map_err(ReadError::from));
        }
    }
}

/// Writes `events` as JSON lines; returns how many were written.
pub fn write_events<W: Write>(
    out: &mut W,
    events: impl IntoIterator<Item = Event>,
) -> io::Result<u64> {
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut count = 0;
    for event in events {
        event.write_json(&mut buf);
        buf.push(b'\n');
        count += 1;
        if buf.len() >= 60 * 1024 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_order_mark_opens_a_file_but_no_other_line() {
        let line = r#"{"event_type":2,"bid":{"auction":1,"bidder":2,"price":3,"channel":"c","url":"u","dateTime":0,"extra":""}}"#;
        let with_bom = format!("\u{feff}{line}");
        assert_eq!(parse_line(&with_bom, 1), parse_line(line, 1));
        assert!(parse_line(line, 1).is_ok());
        let e = parse_line(&with_bom, 7).unwrap_err();
        assert_eq!(e.line, 7);
        assert!(e.message.contains("byte-order mark"), "{e}");
        // Through the reader, as a file from Windows Notepad arrives.
        let file = format!("{with_bom}\n{line}\n");
        let events: Vec<_> = EventReader::new(file.as_bytes()).collect();
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(Result::is_ok), "{events:?}");
    }

    #[test]
    fn timestamps_parse_as_utc() {
        assert_eq!(parse_timestamp("1970-01-01 00:00:00"), Some(0));
        assert_eq!(
            parse_timestamp("2024-01-01T00:00:00Z"),
            Some(1_704_067_200_000)
        );
        assert_eq!(
            parse_timestamp("2024-02-29 12:34:56.789"),
            Some(1_709_210_096_789)
        );
        assert_eq!(
            parse_timestamp("2024-02-29 12:34:56.7891"),
            Some(1_709_210_096_789)
        );
        assert_eq!(parse_timestamp("1969-12-31 23:59:59.999"), Some(-1));
        for bad in [
            "",
            "yesterday",
            "2023-02-29 00:00:00",
            "2024-13-01 00:00:00",
            "2024-01-01 24:00:00",
            "2024-01-01 00:00:00.",
            "2024-01-01 00:00:00.x",
            "2024/01/01 00:00:00",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad:?}");
        }
    }
}
