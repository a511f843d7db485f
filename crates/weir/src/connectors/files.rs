//! Text files: a replayable line source and a sink that writes one part file per subtask.
//!
//! [`FileLineSource`] treats each file as a split whose position is a byte offset kept in
//! operator list state; a restore seeks each file back to its checkpointed offset, so every
//! line is read into state exactly once. [`TextFileSink`] writes `part-<subtask>` files into
//! a staging folder, truncating them at the start of every attempt; the caller publishes the
//! folder only after the job succeeded (see the CLI), so a killed run never leaves a
//! partial result that looks complete.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::api::functions::{CheckpointedFunction, SinkFunction, SourceFunction, SourceStatus};
use crate::error::{Error, Result};
use crate::state::operator::{InitContext, SnapshotContext};

/// One file and how far it has been read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileSplit {
    path: String,
    offset: u64,
}

/// Reads the lines of text files (invalid UTF-8 is replaced, never fatal).
pub struct FileLineSource {
    files: Arc<Vec<PathBuf>>,
    splits: Vec<FileSplit>,
    reader: Option<(usize, BufReader<File>)>,
    line: Vec<u8>,
}

impl Clone for FileLineSource {
    /// A clone shares the file list but not the open reader (each subtask opens its own).
    fn clone(&self) -> Self {
        FileLineSource {
            files: self.files.clone(),
            splits: self.splits.clone(),
            reader: None,
            line: Vec::new(),
        }
    }
}

impl FileLineSource {
    /// A source over `paths` (files; expand folders before). Checks that each exists.
    pub fn new(paths: Vec<PathBuf>) -> Result<Self> {
        for p in &paths {
            if !p.is_file() {
                return Err(Error::io(
                    "cannot read input file",
                    p,
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "not found or not a regular file",
                    ),
                ));
            }
        }
        Ok(FileLineSource {
            files: Arc::new(paths),
            splits: Vec::new(),
            reader: None,
            line: Vec::new(),
        })
    }

    /// Expands `inputs` (files and folders, folders read one level deep, sorted) into files.
    pub fn expand(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for p in inputs {
            if p.is_dir() {
                let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                    .map_err(|e| Error::io("cannot list input folder", p, e))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file())
                    .collect();
                files.sort();
                out.extend(files);
            } else if p.is_file() {
                out.push(p.clone());
            } else {
                return Err(Error::io(
                    "cannot read input",
                    p,
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
                ));
            }
        }
        Ok(out)
    }

    fn open(&self, split: usize) -> Result<BufReader<File>> {
        let s = &self.splits[split];
        let path = Path::new(&s.path);
        let mut f = File::open(path).map_err(|e| Error::io("cannot open input file", path, e))?;
        f.seek(SeekFrom::Start(s.offset))
            .map_err(|e| Error::io("cannot seek in input file", path, e))?;
        Ok(BufReader::with_capacity(256 * 1024, f))
    }
}

impl CheckpointedFunction for FileLineSource {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.reader = None;
        if ctx.is_restored() && ctx.has_state() {
            self.splits = ctx.list("files")?;
        } else {
            let (s, p) = (ctx.subtask_index() as usize, ctx.parallelism() as usize);
            self.splits = self
                .files
                .iter()
                .enumerate()
                .filter(|(i, _)| i % p == s)
                .map(|(_, f)| FileSplit {
                    path: f.to_string_lossy().into_owned(),
                    offset: 0,
                })
                .collect();
        }
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        ctx.set_operator_list("files", &self.splits)
    }
}

impl SourceFunction<String> for FileLineSource {
    fn poll(&mut self, out: &mut Vec<String>, max: usize) -> Result<SourceStatus> {
        loop {
            let Some((idx, reader)) = self.reader.as_mut() else {
                // Next split that is not yet fully read (u64::MAX marks "done").
                match self.splits.iter().position(|s| s.offset != u64::MAX) {
                    Some(i) => {
                        let r = self.open(i)?;
                        self.reader = Some((i, r));
                        continue;
                    }
                    None => return Ok(SourceStatus::Finished),
                }
            };
            let idx = *idx;
            for _ in 0..max {
                self.line.clear();
                let n = reader
                    .read_until(b'\n', &mut self.line)
                    .map_err(|e| Error::io("cannot read input file", &self.splits[idx].path, e))?;
                if n == 0 {
                    self.splits[idx].offset = u64::MAX;
                    self.reader = None;
                    break;
                }
                self.splits[idx].offset += n as u64;
                let text = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
                let text = text.strip_suffix(b"\r").unwrap_or(text);
                out.push(String::from_utf8_lossy(text).into_owned());
            }
            return Ok(SourceStatus::More);
        }
    }
}

/// Writes records as lines into `<dir>/part-<subtask>`, formatted by a function.
pub struct TextFileSink<F> {
    dir: PathBuf,
    format: F,
    writer: Option<(PathBuf, BufWriter<File>)>,
    line: String,
}

impl<F: Clone> Clone for TextFileSink<F> {
    /// A clone shares the folder and format but not the open file.
    fn clone(&self) -> Self {
        TextFileSink {
            dir: self.dir.clone(),
            format: self.format.clone(),
            writer: None,
            line: String::new(),
        }
    }
}

impl<F> TextFileSink<F> {
    /// A sink into folder `dir` (created if missing); `format` appends one record's line
    /// (without newline) to the string it is given.
    pub fn new(dir: impl Into<PathBuf>, format: F) -> Self {
        TextFileSink {
            dir: dir.into(),
            format,
            writer: None,
            line: String::new(),
        }
    }
}

impl<F> CheckpointedFunction for TextFileSink<F> {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io("cannot create output folder", &self.dir, e))?;
        let path = self.dir.join(format!("part-{}", ctx.subtask_index()));
        // Truncate: this attempt rewrites everything the restored state will emit.
        let f =
            File::create(&path).map_err(|e| Error::io("cannot create output file", &path, e))?;
        self.writer = Some((path, BufWriter::new(f)));
        Ok(())
    }
}

impl<T, F: Fn(&T, &mut String) + Clone + Send + 'static> SinkFunction<T> for TextFileSink<F> {
    fn invoke(&mut self, batch: &mut Vec<T>) -> Result<()> {
        let Some((path, w)) = self.writer.as_mut() else {
            return Err(Error::user("text sink used before initialize_state"));
        };
        for r in batch.drain(..) {
            self.line.clear();
            (self.format)(&r, &mut self.line);
            self.line.push('\n');
            w.write_all(self.line.as_bytes())
                .map_err(|e| Error::io("cannot write output file", path.clone(), e))?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        if let Some((path, mut w)) = self.writer.take() {
            w.flush()
                .and_then(|_| w.get_ref().sync_all())
                .map_err(|e| Error::io("cannot write output file", path, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn line_source_resumes_from_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.txt");
        std::fs::write(&f, "one\ntwo\r\nthree\nfour").unwrap();
        let mut src = FileLineSource::new(vec![f]).unwrap();
        src.initialize_state(&InitContext::new(false, 0, 1, BTreeMap::new()))
            .unwrap();
        let mut out = Vec::new();
        src.poll(&mut out, 2).unwrap();
        assert_eq!(out, vec!["one", "two"]);
        let mut ctx = SnapshotContext::new(1);
        src.snapshot_state(&mut ctx).unwrap();
        let lists = crate::state::operator::redistribute(&[Some(&ctx.lists)], 0, 1);
        let mut again = src.clone();
        again
            .initialize_state(&InitContext::new(true, 0, 1, lists))
            .unwrap();
        let mut rest = Vec::new();
        while again.poll(&mut rest, 10).unwrap() != SourceStatus::Finished {}
        assert_eq!(rest, vec!["three", "four"]);
    }

    #[test]
    fn missing_input_is_a_clear_error() {
        let err = FileLineSource::new(vec!["/nonexistent/x".into()])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("/nonexistent/x"), "{err}");
    }
}
