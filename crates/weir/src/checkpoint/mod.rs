//! Checkpoints: the coordinator's protocol, the storage format, and the asynchronous
//! writing and loading of snapshots.
//!
//! * [`barrier`] — the barrier and the checkpointing mode, shared with the runtime.
//! * [`snapshot`] — what a task captured at a barrier, for the writer.
//! * [`coordinator`] — when to trigger, when a checkpoint is complete (pure logic).
//! * [`format`](mod@format), [`storage`], [`shared_bytes`] — re-exported from the layer below,
//!   [`crate::storage`], where they now live: the checksummed envelope of every file, the
//!   folder layout on a local disk with atomic writes, and ranges of a loaded file handed
//!   out without copying. The paths under `checkpoint` keep working.
//! * [`metadata`] — what `_metadata` contains.
//! * [`layout`] — the state files: names, envelope kinds, contents, which key groups each
//!   holds; the one definition the writer, the restore and the inspect tools share.
//! * [`writer`] — turns a task's synchronous snapshot into files, off the processing thread.
//! * [`finalize`] — assembling a checkpoint's `_metadata` from its acknowledgements, and
//!   writing it (which completes the checkpoint).
//! * [`restore`] — loads a checkpoint back and hands each subtask its part.
//! * [`shared`] — retention of the files incremental checkpoints share (`shared/`).
//! * [`inspect`] — describes a checkpoint's operators and states for tools (`weir state`).

pub mod barrier;
pub mod coordinator;
pub mod finalize;
pub mod inspect;
pub mod layout;
pub mod metadata;
pub mod restore;
pub mod shared;
pub mod snapshot;
pub mod writer;

pub(crate) use crate::storage::{self, format, shared_bytes};

#[cfg(all(test, feature = "disk-state"))]
#[path = "incremental_delta_tests.rs"]
mod incremental_delta_tests;
#[cfg(all(test, feature = "disk-state"))]
#[path = "incremental_tests.rs"]
mod incremental_tests;
