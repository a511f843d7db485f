//! Files: a replayable, rescalable line source and an exactly-once part-file sink
//! (Flink's `FileSource` and `FileSink`), plus the plain text sink of the built-in jobs.
//!
//! * [`FileSource`] reads the lines of files, folders and glob patterns; each file is a
//!   split whose byte offset is operator state, so a restore replays from the exact line,
//!   at any parallelism. Optionally it keeps watching for new files ([`source`]).
//! * [`FileSink`] is a [`TwoPhaseCommitSink`](crate::api::two_phase_commit::TwoPhaseCommitSink):
//!   wrapped in [`TwoPhaseCommit`](crate::api::two_phase_commit::TwoPhaseCommit), its output
//!   becomes visible only when the checkpoint that covers it completes ([`sink`]).
//! * [`TextFileSink`] writes one plain file per subtask, rewritten by every attempt: exact
//!   only for results emitted at end of input into a staging folder.
//!
//! The two connectors compose: the source skips the sink's hidden in-progress and pending
//! files, and the sink's atomic commits are exactly how the source's continuous mode wants
//! new files to appear.
//!
//! ```no_run
//! use std::time::Duration;
//! use weir::connectors::files::{FileSink, FileSource};
//! use weir::prelude::*;
//!
//! # fn main() -> weir::Result<()> {
//! let env = StreamEnvironment::new(JobConfig::new("copy"));
//! let lines = FileSource::new(["input/**/*.txt"])?;
//! env.add_source("files", lines)
//!     .uid("files")
//!     .add_sink("out", TwoPhaseCommit::new(FileSink::text("output")))
//!     .uid("out");
//! env.execute()?;
//! # Ok(())
//! # }
//! ```

mod discovery;
mod format;
mod part;
mod reader;
pub mod sink;
pub mod source;
mod text;

pub use format::{tab_separated, Encoder, JsonLines, Lines, LinesWith};
pub use sink::{FileCommittable, FileSink, FileTransaction, DEFAULT_MAX_PART_SIZE};
pub use source::{FileSource, DEFAULT_MAX_LINE_BYTES};
pub use text::TextFileSink;

/// The source's earlier name, kept so existing jobs build unchanged.
pub type FileLineSource = FileSource;
