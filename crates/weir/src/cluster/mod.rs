//! One job across many worker processes (issue 24, docs/cluster.md): the control plane
//! between the coordinator and its workers.
//!
//! **What is here.** The control plane's protocol ([`proto`], from
//! `proto/weir/cluster/v1/control.proto`: Register, Deploy, Trigger, Ack with state
//! handles, Complete/Abort, Cancel, Heartbeat, over one stream per worker) and the plan
//! fingerprint ([`fingerprint`]) by which a worker built from another binary, version or
//! set of arguments is refused before it runs anything. The data plane between workers is
//! the runtime's exchange (`runtime::exchange`): it stands where a local channel stands,
//! so it lives beside the channels, below this layer.
//!
//! **The roles** (started): [`coordinator`] serves the workers' control streams — token,
//! registration, refusal of another binary, the deploy handshake — and [`worker`] attaches,
//! registers, builds the deployed job from its arguments and refuses a plan whose
//! fingerprint differs. **Next** (docs/cluster.md §Next): the attempt over these streams
//! (Trigger, Ack, Complete/Abort, Cancel, Heartbeat) driving the existing checkpoint
//! coordinator and the workers' subtasks (`runtime::placement`), with `run` as a cluster of
//! one in memory. This module sits
//! beside `api` in the layers (docs/architecture.md §1a): it drives the runtime and never
//! reaches above into the runner.

#![cfg_attr(not(test), allow(dead_code))] // Called by `weir worker` and `--workers N`, next.

/// Which worker runs a subtask: the task (an operator chain) by the uid of its head
/// operator, its subtask index, and the worker's id. What Deploy carries, both sides
/// derive the channels' placement from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The uid of the task's head operator.
    pub task_uid: String,
    /// The subtask.
    pub subtask: u32,
    /// The worker that runs it.
    pub worker: crate::runtime::exchange::WorkerId,
}

pub mod coordinator;
pub mod fingerprint;
mod messages;
pub mod worker;

/// The code generated from `proto/weir/cluster/v1/control.proto` (committed; regenerate
/// with `cargo run -p weir-protogen`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    include!("generated/weir.cluster.v1.rs");
}
