//! The disk tier of keyed state: one embedded LSM (`fjall`) per operator subtask, one
//! keyspace per state, in front of it the state's ordinary copy-on-write table used as a
//! bounded write-back cache (docs/design-notes.md, "Keyed state on disk").
//!
//! Guarantees:
//! * Every access sees the state as if it were all in memory: a key missing from the cache
//!   is read from the LSM before the access ([`DiskTier::fault_in`]); a key written through
//!   the cache is recorded as dirty and written back (put, or delete if the access removed
//!   it) before the cache is emptied, and for a snapshot after the barrier.
//! * LSM keys are `key_group (2 bytes, big-endian) ‖ postcard(key)` and values
//!   `postcard(value)` — with TTL `postcard((value, stamp))` — so a key-group range is a
//!   key range (rescale and snapshots scan ranges) and an entry's bytes *are* its canonical
//!   snapshot encoding: `postcard((k, v)) = postcard(k) ‖ postcard(v)`. A full snapshot
//!   copies bytes; it decodes nothing (but TTL stamps).
//! * The synchronous phase of a snapshot only freezes: the dirty keys and the cache's
//!   copy-on-write shards go to an asynchronous write-back ([`writeback`]), which the
//!   writer thread runs before it reads the LSM snapshot pinned right after that write-back
//!   — the state at the barrier, writes after it never reach it — and writes it in the
//!   canonical per-key-group format: a savepoint restores on either backend.
//! * A restore that fails to decode leaves the state empty, as the memory backend does.
//!
//! * Timers (their registrations, and their firing order in a keyspace of their own:
//!   [`DiskTimerOrder`]) and window panes (a namespace per pane: [`DiskStore::tier_in`]) live
//!   here too; expired TTL entries nobody reads again are swept ([`DiskTier::maybe_sweep`]).

use super::super::{Key, StateValue};

mod bulk;
mod codec;
mod evict;
mod filter;
mod lazy;
mod restore;
mod scan;
mod snapshot;
mod store;
mod tier;
mod timer_order;
mod views;
mod writeback;

pub use bulk::{restore_report, start_restore_report};
use codec::{lsm_key, lsm_value_into};
pub use store::DiskOptions;
pub(crate) use store::DiskStore;
use store::{lsm_error, ViewPin};
pub(crate) use tier::DiskTier;
pub(crate) use timer_order::DiskTimerOrder;

#[cfg(test)]
mod tests;
