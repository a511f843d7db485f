//! The DataStream API: how a user describes a job.
//!
//! * [`config`] — job-wide settings.
//! * [`functions`] — the traits user code implements and their state hooks.
//! * [`stream`] — the environment, `DataStream` and `KeyedStream`.
//! * [`two_phase_commit`] — exactly-once sinks: the two-phase-commit protocol.
//! * `graph` — the logical graph those build (internal).

pub mod config;
pub mod functions;
pub(crate) mod graph;
pub mod stream;
pub mod two_phase_commit;
