//! The DataStream API: how a user describes a job.
//!
//! * [`config`] — job-wide settings.
//! * [`functions`] — the traits user code implements and their state hooks.
//! * [`stream`] — the environment, `DataStream` and `KeyedStream`.
//! * `graph` — the logical graph those build (internal).

pub mod config;
pub mod functions;
pub(crate) mod graph;
pub mod stream;
