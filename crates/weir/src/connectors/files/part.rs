//! Part files of the [`FileSink`](super::FileSink): their names in each life stage, and the
//! writer of one in-progress part.
//!
//! A part file lives in three stages, each with its own name in the sink's folder:
//!
//! | stage | name | visible to readers |
//! |---|---|---|
//! | in progress | `.part-<prefix><subtask>-<n>.inprogress` | no (dot-file) |
//! | pending | `.part-<transaction>-<k><suffix>.pending` | no (dot-file) |
//! | committed | `part-<transaction>-<k><suffix>` | yes |
//!
//! `<prefix>` is the sink's transaction prefix `<job>-<uid>-` and `<transaction>` the
//! deterministic transaction name `<prefix><subtask>-<checkpoint>` (see
//! [`TransactionContext`](crate::api::two_phase_commit::TransactionContext)), both with
//! characters that are unsafe in file names replaced by `_`. Because pending and
//! in-progress names carry the prefix, recovery finds every lingering file of *this* sink,
//! and only those: a name belongs to the sink only if what follows the prefix is exactly
//! the numeric fields above, so a sink with uid `out` never claims the files of uid `out-2`.
//! Moving a file between stages is a `rename` within one folder, which is atomic.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The part-file names of one sink (one job name and uid, any subtask).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartNames {
    /// The sanitized transaction prefix, `<job>-<uid>-`.
    prefix: String,
    /// Appended to committed (and pending) names, e.g. `.jsonl`; may be empty.
    suffix: String,
}

/// What a file name in the sink's folder is, as far as this sink is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PartKind {
    /// An in-progress part of this sink.
    InProgress,
    /// A pending part of this sink; holds the committed name it will get.
    Pending(String),
    /// A committed part of this sink.
    Committed,
}

/// Replaces every character that is not safe in a file name on common file systems
/// (anything but ASCII letters, digits, `-`, `_`, `~` and `.`) with `_`.
pub(crate) fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '~' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl PartNames {
    /// Names for the sink whose transaction prefix is `prefix` (`TransactionContext::prefix`).
    pub(crate) fn new(prefix: &str, suffix: &str) -> Self {
        PartNames {
            prefix: sanitize(prefix),
            suffix: sanitize(suffix),
        }
    }

    /// The in-progress name of subtask `subtask`'s `n`-th part of this attempt.
    pub(crate) fn in_progress(&self, subtask: u32, n: u64) -> String {
        format!(".part-{}{subtask}-{n}.inprogress", self.prefix)
    }

    /// The committed name of part `k` of transaction `transaction`.
    pub(crate) fn committed(&self, transaction: &str, k: usize) -> String {
        format!("part-{}-{k}{}", sanitize(transaction), self.suffix)
    }

    /// The pending name of the part that will be committed as `committed`.
    pub(crate) fn pending(committed: &str) -> String {
        format!(".{committed}.pending")
    }

    /// Classifies `file_name`; `None` if it is not a part file of this sink.
    pub(crate) fn classify(&self, file_name: &str) -> Option<PartKind> {
        if let Some(fields) = file_name
            .strip_prefix(".part-")
            .and_then(|n| n.strip_suffix(".inprogress"))
        {
            let fields = fields.strip_prefix(&self.prefix)?;
            return numeric_fields(fields, 2).then_some(PartKind::InProgress);
        }
        if let Some(inner) = file_name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".pending"))
        {
            return self
                .is_committed_name(inner)
                .then(|| PartKind::Pending(inner.into()));
        }
        self.is_committed_name(file_name)
            .then_some(PartKind::Committed)
    }

    /// Whether `name` is `part-<prefix><subtask>-<checkpoint>-<k><suffix>`.
    fn is_committed_name(&self, name: &str) -> bool {
        name.strip_prefix("part-")
            .and_then(|n| n.strip_prefix(&self.prefix))
            .and_then(|n| n.strip_suffix(&self.suffix))
            .is_some_and(|fields| numeric_fields(fields, 3))
    }
}

/// Whether `s` is exactly `count` non-empty runs of ASCII digits joined by `-`.
fn numeric_fields(s: &str, count: usize) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == count
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// An open in-progress part file and the bytes written to it.
pub(crate) struct PartWriter {
    path: PathBuf,
    out: BufWriter<File>,
    bytes: u64,
}

impl PartWriter {
    /// Creates (or truncates: a lingering file of the same name is garbage) `path`.
    pub(crate) fn create(path: PathBuf) -> Result<Self> {
        let file =
            File::create(&path).map_err(|e| Error::io("cannot create part file", &path, e))?;
        Ok(PartWriter {
            path,
            out: BufWriter::with_capacity(128 * 1024, file),
            bytes: 0,
        })
    }

    /// Bytes written so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Appends `data`.
    pub(crate) fn write(&mut self, data: &[u8]) -> Result<()> {
        self.out
            .write_all(data)
            .map_err(|e| Error::io("cannot write part file", &self.path, e))?;
        self.bytes += data.len() as u64;
        Ok(())
    }

    /// Flushes and fsyncs the file, so its bytes survive a crash once it is renamed;
    /// returns its path.
    pub(crate) fn close(self) -> Result<PathBuf> {
        let PartWriter { path, out, .. } = self;
        let file = out
            .into_inner()
            .map_err(|e| Error::io("cannot write part file", &path, e.into_error()))?;
        file.sync_all()
            .map_err(|e| Error::io("cannot sync part file", &path, e))?;
        Ok(path)
    }

    /// Closes without syncing and deletes the file (aborted transaction).
    pub(crate) fn discard(self) -> Result<()> {
        let PartWriter { path, out, .. } = self;
        drop(out.into_parts());
        remove_if_present(&path)
    }
}

/// Deletes `path`; a file already gone is fine.
pub(crate) fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io("cannot delete part file", path, e))
        }
        _ => Ok(()),
    }
}

/// Makes renames in `dir` durable. Best effort: some platforms and file systems cannot
/// open or sync a folder, and the renames themselves have succeeded.
pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> PartNames {
        PartNames::new("job-out-", "")
    }

    #[test]
    fn each_stage_has_its_own_name() {
        let n = names();
        assert_eq!(n.in_progress(1, 4), ".part-job-out-1-4.inprogress");
        assert_eq!(n.committed("job-out-1-7", 0), "part-job-out-1-7-0");
        assert_eq!(
            PartNames::pending("part-job-out-1-7-0"),
            ".part-job-out-1-7-0.pending"
        );
        let j = PartNames::new("job-out-", ".jsonl");
        assert_eq!(j.committed("job-out-0-3", 2), "part-job-out-0-3-2.jsonl");
    }

    #[test]
    fn classify_recognises_only_this_sinks_files() {
        let n = names();
        assert_eq!(
            n.classify(".part-job-out-1-4.inprogress"),
            Some(PartKind::InProgress)
        );
        assert_eq!(
            n.classify(".part-job-out-1-7-0.pending"),
            Some(PartKind::Pending("part-job-out-1-7-0".into()))
        );
        assert_eq!(n.classify("part-job-out-1-7-0"), Some(PartKind::Committed));
        // Another uid that extends ours, other jobs, readers' own files.
        for other in [
            ".part-job-out-2-1-4.inprogress",
            ".part-job-out-2-1-7-0.pending",
            "part-job-out-2-1-7-0",
            "part-job-other-1-7-0",
            ".part-job-out-1-x.inprogress",
            "part-job-out-1-7-0.txt",
            "data.txt",
            ".hidden",
        ] {
            assert_eq!(n.classify(other), None, "{other}");
        }
    }

    #[test]
    fn unsafe_characters_are_replaced_consistently() {
        let n = PartNames::new("my job/x-out-", "");
        let committed = n.committed("my job/x-out-0-1", 0);
        assert_eq!(committed, "part-my_job_x-out-0-1-0");
        assert_eq!(n.classify(&committed), Some(PartKind::Committed));
    }

    #[test]
    fn a_closed_part_holds_what_was_written_and_a_discarded_one_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = PartWriter::create(dir.path().join("a")).unwrap();
        w.write(b"hello\n").unwrap();
        assert_eq!(w.bytes(), 6);
        let p = w.close().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"hello\n");
        let mut w = PartWriter::create(dir.path().join("b")).unwrap();
        w.write(b"x").unwrap();
        w.discard().unwrap();
        assert!(!dir.path().join("b").exists());
        remove_if_present(&dir.path().join("b")).unwrap();
    }
}
