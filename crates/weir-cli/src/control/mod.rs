//! The commands that talk to a running job's control endpoint: `weir savepoint | stop |
//! checkpoint | status --job ADDR` ([`client`]). The endpoint itself is served by every
//! job's runner (`weir::runner::control`, whose docs describe the protocol).

pub mod client;
