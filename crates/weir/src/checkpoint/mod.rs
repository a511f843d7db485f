//! Checkpoints: the coordinator's protocol, the storage format, and the asynchronous
//! writing and loading of snapshots.
//!
//! * [`coordinator`] — when to trigger, when a checkpoint is complete (pure logic).
//! * [`format`] — the checksummed envelope of every file.
//! * [`storage`] — the folder layout on a local disk, atomic writes.
//! * [`metadata`] — what `_metadata` and the state files contain.
//! * [`writer`] — turns a task's synchronous snapshot into files, off the processing thread.
//! * [`restore`] — loads a checkpoint back and hands each subtask its part.
//! * [`shared_bytes`] — ranges of a loaded file, handed out without copying.
//! * [`inspect`] — describes a checkpoint's operators and states for tools (`weir state`).

pub mod coordinator;
pub mod format;
pub mod inspect;
pub mod metadata;
pub mod restore;
pub mod shared_bytes;
pub mod storage;
pub mod writer;
