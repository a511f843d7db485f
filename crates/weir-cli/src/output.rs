//! Verifying keyed-count's output against the exact truth (`--verify`). Publishing an
//! output only after success is the runner's (`weir::runner::Job::output`).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::jobs::expected_count;

/// How the lines of a keyed-count output are written: `--output`'s `key,count`, or a
/// `files:` sink's `key<TAB>count` or JSON lines (`--sink-format`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LineFormat {
    /// `key,count` (`--output`).
    Csv,
    /// `key<TAB>count` (a `files:` sink's default).
    Tsv,
    /// `{"key":…,"count":…}` (a `files:` sink with `--sink-format jsonl`).
    Jsonl,
}

/// What keyed-count emitted: one final count per key, or `(key, count)` for every event
/// (so that each key's counts are exactly `1..=n`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Emitted {
    /// `--emit final`.
    Final,
    /// `--emit updates`.
    Updates,
}

/// `(key, count)` of one line, or `None` if it is not one in `format`.
fn parse_line(format: LineFormat, line: &str) -> Option<(String, u64)> {
    let (k, v) = match format {
        LineFormat::Csv => line.rsplit_once(',')?,
        LineFormat::Tsv => line.rsplit_once('\t')?,
        LineFormat::Jsonl => {
            let v: serde_json::Value = serde_json::from_str(line).ok()?;
            let key = match &v["key"] {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                _ => return None,
            };
            return Some((key, v["count"].as_u64()?));
        }
    };
    Some((k.to_string(), v.parse().ok()?))
}

/// The committed part files in `dir` (`part-*`; in-progress ones are hidden dot-files),
/// sorted by name.
pub(crate) fn part_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Checks keyed-count's lines against the exact truth of events `0..events` with key
/// `i % keys`, one line at a time (an `--emit updates` output has a line per event).
struct Checker {
    emit: Emitted,
    /// Keys that exist: `min(keys, events)`; any other key is an error.
    real: u64,
    events: u64,
    keys: u64,
    /// `Final`: the count seen per key.
    finals: Vec<Option<u64>>,
    /// `Updates`: per key, a bit per count `1..=n` seen, and how many were seen.
    updates: Vec<(Vec<u64>, u64)>,
    problems: Vec<String>,
    bad_lines: u64,
}

impl Checker {
    fn new(events: u64, keys: u64, emit: Emitted) -> Self {
        let real = keys.min(events);
        let updates = match emit {
            Emitted::Final => Vec::new(),
            Emitted::Updates => (0..real)
                .map(|k| {
                    (
                        vec![0; expected_count(events, keys, k).div_ceil(64) as usize],
                        0,
                    )
                })
                .collect(),
        };
        Checker {
            emit,
            real,
            events,
            keys,
            finals: match emit {
                Emitted::Final => vec![None; real as usize],
                Emitted::Updates => Vec::new(),
            },
            updates,
            problems: Vec::new(),
            bad_lines: 0,
        }
    }

    fn problem(&mut self, p: impl FnOnce() -> String) {
        self.bad_lines += 1;
        if self.problems.len() < 3 {
            self.problems.push(p());
        }
    }

    fn line(&mut self, at: impl Fn() -> String, line: &str, format: LineFormat) {
        let Some((k, v)) = parse_line(format, line) else {
            return self.problem(|| format!("{}: not a key and count: {line:?}", at()));
        };
        let key = match k.parse::<u64>() {
            Ok(key) if key < self.real => key,
            _ => {
                let real = self.real;
                return self
                    .problem(|| format!("{}: key '{k}' is not one of the keys 0..{real}", at()));
            }
        };
        let want = expected_count(self.events, self.keys, key);
        match self.emit {
            Emitted::Final => {
                if self.finals[key as usize].replace(v).is_some() {
                    self.problem(|| format!("key {key} appears twice"));
                }
            }
            Emitted::Updates => {
                if v == 0 || v > want {
                    return self.problem(|| format!("key {key}: count {v} is not in 1..={want}"));
                }
                let (bits, seen) = &mut self.updates[key as usize];
                let (word, bit) = ((v - 1) / 64, 1u64 << ((v - 1) % 64));
                if bits[word as usize] & bit != 0 {
                    return self.problem(|| format!("key {key}: count {v} appears twice"));
                }
                bits[word as usize] |= bit;
                *seen += 1;
            }
        }
    }

    fn finish(mut self) -> Result<String, String> {
        let (mut high, mut low, mut missing) = (0u64, 0u64, 0u64);
        for key in 0..self.real {
            let want = expected_count(self.events, self.keys, key);
            let got = match self.emit {
                Emitted::Final => self.finals[key as usize],
                Emitted::Updates => Some(self.updates[key as usize].1).filter(|&n| n > 0),
            };
            let Some(got) = got else {
                missing += 1;
                continue;
            };
            if got == want {
                continue;
            }
            if got > want {
                high += 1;
            } else {
                low += 1;
            }
            if self.problems.len() < 3 {
                self.problems.push(match self.emit {
                    Emitted::Final => format!("key {key}: expected {want}, got {got}"),
                    Emitted::Updates => format!("key {key}: {got} of its {want} counts"),
                });
            }
        }
        if self.bad_lines == 0 && missing == 0 && high == 0 && low == 0 {
            return Ok(match self.emit {
                Emitted::Final => format!("{} keys, every count exact", self.real),
                Emitted::Updates => format!(
                    "{} keys, each with its counts exactly 1..n ({} lines)",
                    self.real, self.events
                ),
            });
        }
        Err(format!(
            "{high} keys too high, {low} too low, {missing} missing, {} bad lines; {}",
            self.bad_lines,
            self.problems.join("; ")
        ))
    }
}

/// Checks the keyed-count lines in the part files of `dir` (a published `--output`, or a
/// `files:` sink's committed files) against the exact truth for `events` events over
/// `keys` keys: every key `0..min(keys, events)` present and no other, each final count
/// exact, or with `--emit updates` each key's counts exactly `1..=n`. `Ok(summary)` or
/// `Err(mismatch)`; an error only when the folder cannot be read.
pub fn verify_keyed_count(
    dir: &Path,
    format: LineFormat,
    events: u64,
    keys: u64,
    emit: Emitted,
) -> Result<Result<String, String>> {
    let mut check = Checker::new(events, keys, emit);
    for f in part_files(dir)? {
        let text =
            fs::read_to_string(&f).with_context(|| format!("cannot read {}", f.display()))?;
        for (i, line) in text.lines().enumerate() {
            check.line(|| format!("{}:{}", f.display(), i + 1), line, format);
        }
    }
    Ok(check.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verify(
        lines: &[&str],
        format: LineFormat,
        events: u64,
        keys: u64,
        emit: Emitted,
    ) -> Result<String, String> {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("part-0"), lines.join("\n")).unwrap();
        fs::write(dir.path().join(".part-1.inprogress"), "99,99\n").unwrap();
        verify_keyed_count(dir.path(), format, events, keys, emit).unwrap()
    }

    #[test]
    fn final_counts_are_exact_and_keys_past_the_events_are_refused() {
        // 3 events over 5 keys: keys 0, 1, 2 count 1; keys 3 and 4 do not exist.
        let csv = LineFormat::Csv;
        assert_eq!(
            verify(&["0,1", "1,1", "2,1"], csv, 3, 5, Emitted::Final),
            Ok("3 keys, every count exact".into())
        );
        let e = verify(&["0,1", "1,1", "2,1", "4,0"], csv, 3, 5, Emitted::Final).unwrap_err();
        assert!(e.contains("key '4' is not one of the keys 0..3"), "{e}");
        let e = verify(&["0,1", "1,2", "2,1"], csv, 3, 5, Emitted::Final).unwrap_err();
        assert!(
            e.contains("1 keys too high") && e.contains("key 1: expected 1, got 2"),
            "{e}"
        );
        let e = verify(&["0,1", "0,1", "2,1"], csv, 3, 5, Emitted::Final).unwrap_err();
        assert!(
            e.contains("key 0 appears twice") && e.contains("1 missing"),
            "{e}"
        );
        let e = verify(&["0,1", "1,1", "2;1"], csv, 3, 5, Emitted::Final).unwrap_err();
        assert!(e.contains("not a key and count"), "{e}");
    }

    #[test]
    fn updates_must_be_exactly_one_to_n_per_key() {
        // 5 events over 2 keys: key 0 counts 1..3, key 1 counts 1..2.
        let tsv = LineFormat::Tsv;
        let good = ["0\t1", "1\t1", "0\t2", "1\t2", "0\t3"];
        assert!(verify(&good, tsv, 5, 2, Emitted::Updates).is_ok());
        let dup = ["0\t1", "1\t1", "0\t2", "1\t2", "0\t2"];
        let e = verify(&dup, tsv, 5, 2, Emitted::Updates).unwrap_err();
        assert!(e.contains("key 0: count 2 appears twice"), "{e}");
        assert!(e.contains("key 0: 2 of its 3 counts"), "{e}");
        let past = ["0\t1", "1\t1", "0\t2", "1\t3", "0\t3"];
        let e = verify(&past, tsv, 5, 2, Emitted::Updates).unwrap_err();
        assert!(e.contains("key 1: count 3 is not in 1..=2"), "{e}");
        let gap = ["0\t1", "1\t1", "0\t3", "1\t2"];
        assert!(verify(&gap, tsv, 5, 2, Emitted::Updates).is_err());
    }

    #[test]
    fn json_lines_are_read_too() {
        let jsonl = LineFormat::Jsonl;
        let lines = [r#"{"key":0,"count":2}"#, r#"{"key":1,"count":1}"#];
        assert!(verify(&lines, jsonl, 3, 2, Emitted::Final).is_ok());
        assert!(verify(&lines, jsonl, 4, 2, Emitted::Final).is_err());
    }
}
