//! Where `weir run nexmark` gets its events: the generator, or a file of JSON lines, both
//! replayable from a position kept in operator state (docs/architecture.md §8).
//!
//! * **Generator** (`--events N`): the engine's [`GeneratorSource`] emits event *numbers*
//!   `0..N`, strided over the subtasks (subtask `s` of `p` takes `s, s+p, …`) with each
//!   split's next number in list state; a chained map turns number `n` into
//!   `Generator::event(n)`, a pure function of `n`, so a restore (at any parallelism)
//!   replays exactly the events a run without failures would have seen. A query that reads
//!   only some kinds of event skips the others by number (`Generator::kind(n)`) before
//!   generating them: the query's first step would drop them anyway.
//! * **File** (`--input FILE`): [`EventFileSource`] reads the JSON lines with its byte
//!   offset and line number in list state (one split, read by one subtask), so a restore
//!   seeks back to the exact line, and an error names the file and the line even after a
//!   restore.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weir::prelude::*;
use weir_nexmark::generator::{EventKind, Generator};
use weir_nexmark::json::parse_line;
use weir_nexmark::Event;

/// Operator list state of [`EventFileSource`]: its one split, or nothing.
const POSITION: &str = "position";

/// How far the file has been read: the byte offset and number of the next line to read
/// (field order is the state format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct FilePosition {
    /// Byte offset of the next line.
    offset: u64,
    /// Lines read before it (so the next line is number `line + 1`).
    line: u64,
}

/// Reads Nexmark events from one file of JSON lines (see the module docs). A line that is
/// not an event fails the job with an error naming the file, the line and the field.
pub struct EventFileSource {
    path: Arc<PathBuf>,
    /// This subtask's split; `None` on subtasks without one.
    position: Option<FilePosition>,
    reader: Option<BufReader<File>>,
    buf: String,
}

impl Clone for EventFileSource {
    /// A clone shares the path, not the position or the open file (each subtask sets up
    /// its own in `initialize_state`).
    fn clone(&self) -> Self {
        EventFileSource::new(self.path.as_ref().clone())
    }
}

impl EventFileSource {
    /// A source over the JSON lines of `path` (opened when the job starts).
    pub fn new(path: PathBuf) -> Self {
        EventFileSource {
            path: Arc::new(path),
            position: None,
            reader: None,
            buf: String::new(),
        }
    }

    fn open(&self, at: u64) -> weir::Result<BufReader<File>> {
        let cannot = |e: std::io::Error| {
            weir::Error::user(format!(
                "cannot read --input {}: {e} (check the path and its permissions)",
                self.path.display()
            ))
        };
        let mut f = File::open(self.path.as_ref()).map_err(cannot)?;
        f.seek(SeekFrom::Start(at)).map_err(cannot)?;
        Ok(BufReader::with_capacity(1 << 20, f))
    }
}

impl CheckpointedFunction for EventFileSource {
    fn initialize_state(&mut self, ctx: &InitContext) -> weir::Result<()> {
        self.reader = None;
        let restored: Vec<FilePosition> = if ctx.is_restored() && ctx.has_state() {
            ctx.list(POSITION)?
        } else if ctx.subtask_index() == 0 {
            vec![FilePosition { offset: 0, line: 0 }]
        } else {
            Vec::new()
        };
        self.position = restored.into_iter().next();
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> weir::Result<()> {
        let list: Vec<FilePosition> = self.position.into_iter().collect();
        ctx.set_operator_list(POSITION, &list)
    }

    fn operator_state(&self) -> Vec<OperatorListDeclaration> {
        vec![OperatorListDeclaration::of::<FilePosition>(POSITION)]
    }
}

impl SourceFunction<Event> for EventFileSource {
    fn poll(&mut self, out: &mut Vec<Event>, max: usize) -> weir::Result<SourceStatus> {
        let Some(mut pos) = self.position else {
            return Ok(SourceStatus::Finished);
        };
        if self.reader.is_none() {
            self.reader = Some(self.open(pos.offset)?);
        }
        let reader = self.reader.as_mut().expect("opened above");
        let mut status = SourceStatus::More;
        for _ in 0..max {
            self.buf.clear();
            let n = reader.read_line(&mut self.buf).map_err(|e| {
                weir::Error::user(format!(
                    "{}: line {}: cannot read: {e}",
                    self.path.display(),
                    pos.line + 1
                ))
            })?;
            if n == 0 {
                status = SourceStatus::Finished;
                break;
            }
            pos.offset += n as u64;
            pos.line += 1;
            let text = self.buf.trim();
            if text.is_empty() {
                continue;
            }
            let event = parse_line(text, pos.line)
                .map_err(|e| weir::Error::user(format!("{}: {e}", self.path.display())))?;
            out.push(event);
        }
        self.position = Some(pos);
        Ok(status)
    }
}

/// The event kinds a query reads; the generator skips the others (module docs).
pub type Kinds = &'static [EventKind];

/// The events of `0..n` from the generator, split over the subtasks, only those of
/// `kinds`, at most `rate` events (counted before skipping) per second.
pub fn generated(
    env: &StreamEnvironment,
    generator: Generator,
    n: u64,
    rate: Option<f64>,
    kinds: Kinds,
) -> DataStream<Event> {
    let all = kinds.len() == 3;
    env.add_source("generator", GeneratorSource::new(n).with_rate(rate))
        .uid("generator")
        .flat_map(move |i: u64| {
            (all || kinds.contains(&generator.kind(i))).then(|| generator.event(i))
        })
        .name("events")
}

/// The events of the JSON-lines file `path`.
pub fn from_file(env: &StreamEnvironment, path: PathBuf) -> DataStream<Event> {
    env.add_source("events", EventFileSource::new(path))
        .uid("events")
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir::state::OperatorIdentity;

    fn drain(s: &mut EventFileSource, max: usize) -> weir::Result<Vec<Event>> {
        let mut out = Vec::new();
        while s.poll(&mut out, max)? != SourceStatus::Finished {}
        Ok(out)
    }

    #[test]
    fn resumes_at_the_checkpointed_line_and_names_bad_lines() {
        let g = Generator::new(Default::default()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut text: String = (0..10).map(|n| g.event(n).to_json() + "\n").collect();
        text.push('\n');
        text.push_str("{\"event_type\":2,\"bid\":{\"auction\":\"x\"}}\n");
        std::fs::write(&path, text).unwrap();

        let mut a = EventFileSource::new(path.clone());
        a.initialize_state(&InitContext::fresh(0, 1, OperatorIdentity::default()))
            .unwrap();
        let mut first = Vec::new();
        a.poll(&mut first, 4).unwrap();
        assert_eq!(first, (0..4).map(|n| g.event(n)).collect::<Vec<_>>());
        let mut snap = SnapshotContext::new(1);
        a.snapshot_state(&mut snap).unwrap();

        // A restore (here at parallelism 2) reads on from line 5 on one subtask.
        let mut rest = Vec::new();
        let mut errors = Vec::new();
        for s in 0..2 {
            let mut b = EventFileSource::new(path.clone());
            let ctx = InitContext::restored_from(
                std::slice::from_ref(&snap),
                s,
                2,
                OperatorIdentity::default(),
            );
            b.initialize_state(&ctx).unwrap();
            let mut out = Vec::new();
            loop {
                match b.poll(&mut out, 3) {
                    Ok(SourceStatus::Finished) => break,
                    Ok(_) => {}
                    Err(e) => {
                        errors.push(e.to_string());
                        break;
                    }
                }
            }
            rest.extend(out);
        }
        assert_eq!(rest, (4..10).map(|n| g.event(n)).collect::<Vec<_>>());
        assert_eq!(errors.len(), 1, "{errors:?}");
        let e = &errors[0];
        assert!(
            e.contains("events.jsonl: line 12: field bid.auction"),
            "the error names the file, the line and the field: {e}"
        );
    }

    #[test]
    fn a_missing_file_is_named() {
        let mut s = EventFileSource::new(PathBuf::from("/nonexistent/events.jsonl"));
        s.initialize_state(&InitContext::fresh(0, 1, OperatorIdentity::default()))
            .unwrap();
        let e = drain(&mut s, 10).unwrap_err().to_string();
        assert!(
            e.contains("cannot read --input /nonexistent/events.jsonl"),
            "{e}"
        );
    }
}
