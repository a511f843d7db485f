//! The DataStream API: how a user describes a job. It is the top layer: it imports the
//! runtime, and nothing below imports it.
//!
//! * [`config`] — job-wide settings.
//! * [`functions`] — the traits user code implements and their state hooks.
//! * [`stream`] — the environment, `DataStream` and `KeyedStream`.
//! * [`two_phase_commit`] — exactly-once sinks: the two-phase-commit protocol.
//! * [`windowed`] — event-time windows on keyed streams, aggregated incrementally.
//!
//! `config` and `functions` are owned by the runtime, which runs the functions under the
//! configuration; they are re-exported here, where users look for them, under the same
//! paths as before. The logical graph `stream` builds is the runtime's too
//! (`runtime::graph`, internal).

pub use crate::runtime::{config, functions};
pub mod stream;
pub mod two_phase_commit;
pub mod windowed;
