//! The replayable file source (Flink's `FileSource`): lines of files, folders and glob
//! patterns, read exactly once into state across failures and rescaling.
//!
//! **Splits.** Every input file is a split `(path, offset)`: the byte offset of the next
//! line to read. Splits live in operator list state `files`, so a restore seeks every file
//! back to its checkpointed line, and a restore at another parallelism redistributes them
//! (evenly, like the generator's splits). A fresh start assigns the files found at
//! construction round-robin: file `i` (in sorted order) to subtask `i % p`. A finished
//! bounded split stays in state with offset `u64::MAX`, so tools can show it as done.
//!
//! **Continuous mode** ([`FileSource::continuous`]) lists the inputs again every
//! `discovery_interval` and reads files it has not seen. Each subtask claims the new files
//! whose path hashes to it (`discovery::owner`), so no coordination is
//! needed. The set of seen paths is state too (union list `seen`, each path stored by the
//! one subtask responsible for it), so after a restore — at any parallelism — a file is
//! never read twice and finished files are dropped from `files`. Files must appear
//! atomically (written elsewhere or under a hidden name, then renamed — as
//! [`FileSink`](super::FileSink) commits do): a file is read once, up to the end it has
//! when read. The source is idle while nothing is new, and finishes only once the
//! [`FileSource::until_exists`] marker exists and every file listed after it appeared is
//! read — a deterministic end for bounded runs and tests.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::discovery::{list_files, owner, path_key};
use super::reader::LineReader;
pub use super::reader::DEFAULT_MAX_LINE_BYTES;
use crate::api::functions::{CheckpointedFunction, SourceFunction, SourceStatus};
use crate::error::Result;
use crate::state::operator::{InitContext, SnapshotContext};

/// Operator list state holding the splits.
const FILES: &str = "files";
/// Union list state holding the paths seen (continuous mode).
const SEEN: &str = "seen";
/// Offset of a finished split.
const DONE: u64 = u64::MAX;

/// One file and how far it has been read (field order is the state format).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileSplit {
    path: String,
    offset: u64,
}

/// Reads the lines of files (see the module docs), as `String`s without line ends.
pub struct FileSource {
    inputs: Arc<Vec<PathBuf>>,
    /// The files found at construction, sorted: what a fresh start reads.
    initial: Arc<Vec<String>>,
    lossy: bool,
    /// The longest line accepted (bytes, line end not counted).
    max_line: usize,
    /// Continuous mode's discovery interval.
    continuous: Option<Duration>,
    /// Continuous mode ends once this exists.
    end_marker: Option<Arc<PathBuf>>,
    subtask: u32,
    parallelism: u32,
    splits: Vec<FileSplit>,
    /// Every path known to be read or assigned, by any subtask (continuous mode).
    seen: HashSet<String>,
    /// The part of `seen` this subtask stores in checkpoints.
    responsible: BTreeSet<String>,
    reader: Option<(usize, LineReader)>,
    last_discovery: Option<Instant>,
    /// The end marker was seen before the latest listing.
    ended: bool,
}

impl Clone for FileSource {
    /// A clone shares the inputs and settings but not the splits or the open reader (each
    /// subtask sets up its own in `initialize_state`).
    fn clone(&self) -> Self {
        FileSource {
            lossy: self.lossy,
            max_line: self.max_line,
            continuous: self.continuous,
            end_marker: self.end_marker.clone(),
            ..FileSource::unopened(self.inputs.clone(), self.initial.clone())
        }
    }
}

impl FileSource {
    /// A source over `inputs`: files, folders (read recursively) and glob patterns such as
    /// `data/*.txt` or `logs/**/*.log`; names starting with `.` or `_` inside folders and
    /// pattern matches are skipped. The inputs are listed now, so every subtask of a fresh
    /// start reads the same files; a path that neither exists nor is a pattern is an error.
    pub fn new<P: AsRef<Path>>(inputs: impl IntoIterator<Item = P>) -> Result<Self> {
        let inputs: Vec<PathBuf> = inputs
            .into_iter()
            .map(|p| p.as_ref().to_path_buf())
            .collect();
        let initial = list_files(&inputs, true)?
            .iter()
            .map(|p| path_key(p))
            .collect::<Result<Vec<_>>>()?;
        Ok(FileSource::unopened(Arc::new(inputs), Arc::new(initial)))
    }

    /// A source over `inputs` with default settings and no subtask state yet (each subtask
    /// sets up its own in `initialize_state`).
    fn unopened(inputs: Arc<Vec<PathBuf>>, initial: Arc<Vec<String>>) -> Self {
        FileSource {
            inputs,
            initial,
            lossy: false,
            max_line: DEFAULT_MAX_LINE_BYTES,
            continuous: None,
            end_marker: None,
            subtask: 0,
            parallelism: 1,
            splits: Vec::new(),
            seen: HashSet::new(),
            responsible: BTreeSet::new(),
            reader: None,
            last_discovery: None,
            ended: false,
        }
    }

    /// The files `inputs` name now (sorted; the rules of [`FileSource::new`]) — to show or
    /// size the input before running.
    pub fn expand(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
        list_files(inputs, true)
    }

    /// Sets the longest line accepted, in bytes (default [`DEFAULT_MAX_LINE_BYTES`]); a
    /// longer one fails the job with an error naming the file and the line's offset,
    /// before the line is held in memory.
    pub fn max_line_length(mut self, bytes: usize) -> Self {
        self.max_line = bytes.max(1);
        self
    }

    /// Replaces invalid UTF-8 with U+FFFD instead of failing with an error that names the
    /// file and byte offset.
    pub fn lossy_utf8(mut self) -> Self {
        self.lossy = true;
        self
    }

    /// Keeps watching the inputs: every `discovery_interval` they are listed again and new
    /// files are read (see the module docs). Without [`FileSource::until_exists`] the source
    /// never finishes.
    pub fn continuous(mut self, discovery_interval: Duration) -> Self {
        self.continuous = Some(discovery_interval);
        self
    }

    /// In continuous mode, finishes once `marker` exists and every file present when it was
    /// noticed is read (the marker itself is never read). Create it after the last input
    /// file is in place.
    pub fn until_exists(mut self, marker: impl Into<PathBuf>) -> Self {
        self.end_marker = Some(Arc::new(marker.into()));
        self
    }

    /// Lists the inputs and claims the new files this subtask owns.
    fn discover(&mut self) -> Result<()> {
        if self.continuous.is_none() {
            return Ok(());
        }
        // The marker is checked first: files listed after it exists are complete.
        let marker = self.end_marker.clone().filter(|m| m.exists());
        for path in list_files(&self.inputs, false)? {
            if marker.as_ref().is_some_and(|m| same_file(m, &path)) {
                continue;
            }
            let key = path_key(&path)?;
            if owner(&key, self.parallelism) != self.subtask || self.seen.contains(&key) {
                continue;
            }
            self.seen.insert(key.clone());
            self.responsible.insert(key.clone());
            self.splits.push(FileSplit {
                path: key,
                offset: 0,
            });
        }
        self.ended |= marker.is_some();
        self.last_discovery = Some(Instant::now());
        Ok(())
    }

    fn discovery_due(&self) -> bool {
        match (&self.continuous, self.last_discovery) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(interval), Some(t)) => t.elapsed() >= *interval,
        }
    }
}

/// Whether `a` and `b` name the same file (compares canonical paths when they exist).
fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (a.canonicalize(), b.canonicalize()),
            (Ok(x), Ok(y)) if x == y
        )
}

impl CheckpointedFunction for FileSource {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.subtask = ctx.subtask_index();
        self.parallelism = ctx.parallelism();
        self.reader = None;
        self.last_discovery = None;
        self.ended = false;
        self.seen.clear();
        self.responsible.clear();
        if ctx.is_restored() && ctx.has_state() {
            self.splits = ctx.list(FILES)?;
            let seen: Vec<String> = ctx.list(SEEN)?;
            let split_paths = self.splits.iter().map(|s| s.path.clone());
            for path in seen.into_iter().chain(split_paths) {
                if owner(&path, self.parallelism) == self.subtask {
                    self.responsible.insert(path.clone());
                }
                self.seen.insert(path);
            }
        } else {
            let (s, p) = (self.subtask as usize, self.parallelism as usize);
            self.splits.clear();
            for (i, path) in self.initial.iter().enumerate() {
                if i % p == s {
                    self.responsible.insert(path.clone());
                    self.splits.push(FileSplit {
                        path: path.clone(),
                        offset: 0,
                    });
                }
                self.seen.insert(path.clone());
            }
        }
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        ctx.set_operator_list(FILES, &self.splits)?;
        if self.continuous.is_some() {
            let seen: Vec<String> = self.responsible.iter().cloned().collect();
            ctx.set_union_list(SEEN, &seen)?;
        }
        Ok(())
    }

    fn operator_state(&self) -> Vec<crate::state::schema::OperatorListDeclaration> {
        vec![
            crate::state::schema::OperatorListDeclaration::of::<FileSplit>(FILES),
            crate::state::schema::OperatorListDeclaration::of::<String>(SEEN),
        ]
    }
}

impl SourceFunction<String> for FileSource {
    fn poll(&mut self, out: &mut Vec<String>, max: usize) -> Result<SourceStatus> {
        if self.discovery_due() {
            self.discover()?;
        }
        let mut budget = max;
        while budget > 0 {
            let Some((idx, reader)) = self.reader.as_mut() else {
                let Some(i) = self.splits.iter().position(|s| s.offset != DONE) else {
                    return Ok(match &self.continuous {
                        _ if budget < max => SourceStatus::More,
                        None => SourceStatus::Finished,
                        Some(_) if self.ended => SourceStatus::Finished,
                        Some(_) => SourceStatus::Idle,
                    });
                };
                let split = &self.splits[i];
                self.reader = Some((
                    i,
                    LineReader::open(&split.path, split.offset, self.max_line)?,
                ));
                continue;
            };
            let idx = *idx;
            match reader.next_line(self.lossy)? {
                Some(line) => {
                    self.splits[idx].offset = reader.offset();
                    out.push(line);
                    budget -= 1;
                }
                None => {
                    self.reader = None;
                    if self.continuous.is_some() {
                        // `seen` remembers it; the split itself is no longer needed.
                        self.splits.remove(idx);
                    } else {
                        self.splits[idx].offset = DONE;
                    }
                }
            }
        }
        Ok(SourceStatus::More)
    }
}

#[cfg(test)]
mod tests;
