//! The transactional file sink (Flink's `FileSink`): exactly-once part files in a folder.
//!
//! [`FileSink`] is a [`TwoPhaseCommitSink`]; add it to a job as
//! `TwoPhaseCommit::new(FileSink::new(dir, format))`. Each transaction is one or more part
//! files that move through three names (see the `part` module for the exact names):
//!
//! 1. **in progress** — records are encoded and appended to a hidden
//!    `.part-….inprogress` file; when it reaches [`FileSink::with_max_part_size`] it is
//!    closed and the next record opens another (a transaction may span several parts);
//! 2. **pending** — when checkpoint `n`'s barrier passes, every part of the transaction is
//!    flushed, fsync'd and renamed to a hidden pending name carrying the transaction name
//!    `<job>-<uid>-<subtask>-<n>`; the returned [`FileCommittable`] goes into checkpoint `n`;
//! 3. **committed** — when checkpoint `n` completes, each pending part is renamed to its
//!    visible `part-<job>-<uid>-<subtask>-<n>-<k>` name. Renames within a folder are
//!    atomic, and committing again is a no-op (the visible file exists, the pending one is
//!    gone), so recovery may repeat a commit that already happened before a crash.
//!
//! Readers that list the folder and skip dot-files (as [`FileSource`](super::FileSource)
//! and most tools do) therefore see only committed output: exactly the records of completed
//! checkpoints, each once. On restore, [`TwoPhaseCommitSink::recover`] commits the
//! checkpoint's pending parts and deletes every other in-progress or pending file of this
//! sink (job name and uid), i.e. the writes of checkpoints that never completed, which the
//! restored sources replay.
//!
//! A committed name is never overwritten: if it already exists (a second run of the same
//! job and uid into the same folder), pre-commit fails with an error that says so, rather
//! than mixing or replacing outputs.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::format::{Encoder, JsonLines, Lines, LinesWith};
use super::part::{remove_if_present, sync_dir, PartKind, PartNames, PartWriter};
use crate::api::two_phase_commit::{TransactionContext, TwoPhaseCommitSink};
use crate::error::{Error, Result};

/// Default size at which a part file is closed and the next one started (128 MiB, as
/// Flink's rolling policy): large enough for efficient reads, small enough to move around.
pub const DEFAULT_MAX_PART_SIZE: u64 = 128 * 1024 * 1024;

/// Writes records into part files in one folder, exactly once (see the module docs).
pub struct FileSink<E> {
    dir: PathBuf,
    encoder: E,
    max_part_size: u64,
    suffix: String,
    /// Set by `open`: the names of this sink's files and this subtask's index.
    names: Option<(PartNames, u32)>,
    /// Number of in-progress parts this instance has opened (names them uniquely).
    opened: u64,
    buf: Vec<u8>,
}

impl<E: Clone> Clone for FileSink<E> {
    /// A clone shares the folder and settings, not the open state (each subtask opens its
    /// own).
    fn clone(&self) -> Self {
        FileSink {
            dir: self.dir.clone(),
            encoder: self.encoder.clone(),
            max_part_size: self.max_part_size,
            suffix: self.suffix.clone(),
            names: None,
            opened: 0,
            buf: Vec::new(),
        }
    }
}

impl<E> FileSink<E> {
    /// A sink writing into folder `dir` (created if missing) with record format `encoder`
    /// ([`Lines`], [`LinesWith`], [`JsonLines`] or your own [`Encoder`]).
    pub fn new(dir: impl Into<PathBuf>, encoder: E) -> Self {
        FileSink {
            dir: dir.into(),
            encoder,
            max_part_size: DEFAULT_MAX_PART_SIZE,
            suffix: String::new(),
            names: None,
            opened: 0,
            buf: Vec::new(),
        }
    }

    /// Closes a part and starts the next one once it holds `bytes` (at least one record
    /// per part). Parts also roll on every checkpoint.
    pub fn with_max_part_size(mut self, bytes: u64) -> Self {
        self.max_part_size = bytes.max(1);
        self
    }

    /// Appends `suffix` (e.g. `.txt`, `.jsonl`) to every committed file name, so tools that
    /// go by extension recognise the files.
    pub fn with_suffix(mut self, suffix: &str) -> Self {
        self.suffix = suffix.to_string();
        self
    }

    /// The output folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn names(&self) -> Result<&(PartNames, u32)> {
        self.names.as_ref().ok_or_else(not_open)
    }

    /// Lists this sink's files in its folder: `(file name, kind)`.
    fn own_files(&self, names: &PartNames) -> Result<Vec<(String, PartKind)>> {
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| Error::io("cannot list output folder", &self.dir, e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("cannot list output folder", &self.dir, e))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue; // not ours: our names are ASCII
            };
            if let Some(kind) = names.classify(&name) {
                out.push((name, kind));
            }
        }
        Ok(out)
    }
}

impl FileSink<Lines> {
    /// A sink writing each record's [`Display`](std::fmt::Display) form as a line.
    pub fn text(dir: impl Into<PathBuf>) -> Self {
        FileSink::new(dir, Lines)
    }
}

impl FileSink<JsonLines> {
    /// A sink writing each record as one line of JSON (serde), with suffix `.jsonl`.
    pub fn json_lines(dir: impl Into<PathBuf>) -> Self {
        FileSink::new(dir, JsonLines).with_suffix(".jsonl")
    }
}

impl<F> FileSink<LinesWith<F>> {
    /// A sink writing the line that `format(record, line)` appends for each record.
    pub fn lines_with(dir: impl Into<PathBuf>, format: F) -> Self {
        FileSink::new(dir, LinesWith::new(format))
    }
}

/// The error of a sink used before `open` (a bug in the driver, not in the data).
fn not_open() -> Error {
    Error::InvalidJob("a file sink was used before open".into())
}

/// An open transaction: the parts written so far (closed ones and the current one).
pub struct FileTransaction {
    closed: Vec<PathBuf>,
    current: Option<PartWriter>,
}

/// A pre-committed transaction, stored in the checkpoint: the pending parts to make
/// visible. Self-describing, so any subtask of a later run can commit it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCommittable {
    /// The transaction's name, `<job>-<uid>-<subtask>-<checkpoint>`.
    pub transaction: String,
    /// The output folder.
    pub dir: PathBuf,
    /// Committed file names of the parts, in write order (pending names derive from them).
    pub parts: Vec<String>,
}

/// The error for a committed part file that is already there: output is never overwritten.
fn refuse_overwrite(target: &std::path::Path, why: String) -> Error {
    Error::io(
        "refusing to overwrite output file",
        target,
        std::io::Error::new(std::io::ErrorKind::AlreadyExists, why),
    )
}

impl FileCommittable {
    /// Commits one part: rename pending → committed, unless that already happened.
    fn commit_part(&self, committed: &str) -> Result<()> {
        let target = self.dir.join(committed);
        let pending = self.dir.join(PartNames::pending(committed));
        if pending.exists() {
            if target.exists() {
                return Err(refuse_overwrite(
                    &target,
                    format!(
                        "it exists, yet transaction {} still has it pending; another run of \
                         this job and uid wrote into the same folder",
                        self.transaction
                    ),
                ));
            }
            std::fs::rename(&pending, &target)
                .map_err(|e| Error::io("cannot commit part file", &pending, e))?;
        } else if !target.exists() {
            return Err(Error::io(
                "cannot commit part file",
                &pending,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "neither it nor its committed name exists, so the output of \
                         transaction {} is lost: the output folder was moved, cleaned or \
                         merged since that checkpoint (by hand, or by a run that finished \
                         and published it). Restore a checkpoint whose output folder is \
                         still in place, or start without --restore",
                        self.transaction
                    ),
                ),
            ));
        }
        Ok(())
    }
}

impl<T: Send + 'static, E: Encoder<T>> TwoPhaseCommitSink<T> for FileSink<E> {
    type Transaction = FileTransaction;
    type Committable = FileCommittable;

    fn open(&mut self, ctx: &TransactionContext) -> Result<()> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io("cannot create output folder", &self.dir, e))?;
        self.names = Some((PartNames::new(&ctx.prefix(), &self.suffix), ctx.subtask));
        self.opened = 0;
        Ok(())
    }

    fn recover(
        &mut self,
        _ctx: &TransactionContext,
        committable: Vec<FileCommittable>,
    ) -> Result<()> {
        for c in &committable {
            <Self as TwoPhaseCommitSink<T>>::commit(self, c.clone())?;
        }
        // Everything of ours still hidden belongs to no completed checkpoint: abort it.
        let names = self.names()?.0.clone();
        for (name, kind) in self.own_files(&names)? {
            if matches!(kind, PartKind::InProgress | PartKind::Pending(_)) {
                remove_if_present(&self.dir.join(name))?;
            }
        }
        sync_dir(&self.dir);
        Ok(())
    }

    fn begin(&mut self, _ctx: &TransactionContext) -> Result<FileTransaction> {
        Ok(FileTransaction {
            closed: Vec::new(),
            current: None,
        })
    }

    fn write(&mut self, txn: &mut FileTransaction, batch: &mut Vec<T>) -> Result<()> {
        let FileSink {
            dir,
            encoder,
            max_part_size,
            names,
            opened,
            buf,
            ..
        } = self;
        let (names, subtask) = names.as_ref().ok_or_else(not_open)?;
        for record in batch.drain(..) {
            buf.clear();
            encoder.encode(&record, buf)?;
            let full = txn
                .current
                .as_ref()
                .is_some_and(|w| w.bytes() > 0 && w.bytes() + buf.len() as u64 > *max_part_size);
            if full {
                if let Some(w) = txn.current.take() {
                    txn.closed.push(w.close()?);
                }
            }
            let w = match txn.current.as_mut() {
                Some(w) => w,
                None => {
                    let path = dir.join(names.in_progress(*subtask, *opened));
                    *opened += 1;
                    txn.current.insert(PartWriter::create(path)?)
                }
            };
            w.write(buf)?;
        }
        Ok(())
    }

    fn pre_commit(
        &mut self,
        ctx: &TransactionContext,
        mut txn: FileTransaction,
        checkpoint_id: u64,
    ) -> Result<Option<FileCommittable>> {
        if let Some(w) = txn.current.take() {
            txn.closed.push(w.close()?);
        }
        if txn.closed.is_empty() {
            return Ok(None);
        }
        let names = &self.names()?.0;
        let transaction = ctx.transaction_name(checkpoint_id);
        let mut parts = Vec::with_capacity(txn.closed.len());
        for (k, in_progress) in txn.closed.iter().enumerate() {
            let committed = names.committed(&transaction, k);
            let target = self.dir.join(&committed);
            if target.exists() {
                return Err(refuse_overwrite(
                    &target,
                    "an earlier run of this job and uid committed it; write into an empty \
                     folder, or give the sink another uid"
                        .into(),
                ));
            }
            let pending = self.dir.join(PartNames::pending(&committed));
            std::fs::rename(in_progress, &pending)
                .map_err(|e| Error::io("cannot pre-commit part file", in_progress, e))?;
            parts.push(committed);
        }
        sync_dir(&self.dir);
        Ok(Some(FileCommittable {
            transaction,
            dir: self.dir.clone(),
            parts,
        }))
    }

    fn commit(&mut self, committable: FileCommittable) -> Result<()> {
        for part in &committable.parts {
            committable.commit_part(part)?;
        }
        sync_dir(&committable.dir);
        Ok(())
    }

    fn abort(&mut self, txn: FileTransaction) -> Result<()> {
        if let Some(w) = txn.current {
            w.discard()?;
        }
        for p in &txn.closed {
            remove_if_present(p)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
