//! Connectors from Weir jobs to external systems, each behind a cargo feature so that a
//! build pays only for the clients it uses.
//!
//! Every sink here is exactly-once through the engine's two-phase-commit protocol
//! ([`weir::api::two_phase_commit`]); every source is replayable from a position kept in
//! operator state (docs/architecture.md §8).

#![deny(missing_docs)]

#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "postgres")]
pub mod postgres;
