//! The plain, non-transactional text sink: one `part-<subtask>` file per subtask.
//!
//! [`TextFileSink`] truncates its file at the start of every attempt and rewrites
//! everything the restored state emits, so it is exact only for jobs that emit their
//! results at end of input into a staging folder that the caller publishes after success
//! (the CLI's built-in jobs). Streaming output that must be exactly-once under failures
//! belongs in [`super::FileSink`].

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use crate::api::functions::{CheckpointedFunction, SinkFunction};
use crate::error::{Error, Result};
use crate::state::operator::InitContext;

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
