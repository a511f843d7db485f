//! The coordinator side of a job (issue 24): what decides, never what runs a task.
//!
//! * [`executor`] — plans the job, deploys each attempt on the job's workers, restarts
//!   after failures, writes what a run leaves behind.
//! * `attempt` — one attempt's event loop: Controls out, TaskEvents in, the checkpoint
//!   coordinator's decisions carried out (triggers, `_metadata`, notifications).
//! * `hosts` — the `TaskHosts` interface every attempt is deployed through.
//! * `in_memory` — the cluster of one: `run` in one process deploys on one in-process
//!   worker (`runtime::worker`), the same task side a worker process runs.
//! * `recovery` — reading back the checkpoint a run or a restart resumes from.
//! * [`restart`] — restart strategies.
//!
//! The task side — building a worker's subtasks, its snapshot writers and frozen
//! snapshots — lives in `runtime::worker` (and the task loops in `runtime::task`); a
//! cluster's coordinator (`cluster::coordinator`) is a `TaskHosts` over gRPC.
//!
//! Invariant: nothing here starts a task thread or writes a state file; it writes only
//! `_metadata` and removes what checkpoints that never completed left.

pub(crate) mod attempt;
pub mod executor;
pub(crate) mod hosts;
pub(crate) mod in_memory;
mod recovery;
pub mod restart;
