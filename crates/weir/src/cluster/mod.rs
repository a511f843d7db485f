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
//! **The roles.** [`coordinator`] serves the workers' control streams — token,
//! registration, refusal of another binary, the deploy handshake — and, as the
//! `runtime::coordinator::hosts::TaskHosts` of the executor, deploys every attempt on its workers,
//! forwards the checkpoint coordinator's Trigger, Complete, Abort, WriteFrozen and Cancel,
//! and turns the workers' reports (Ack with state handles, [`handles`]) into the executor's
//! task events; a lost worker fails the attempt, which restarts on the workers at hand.
//! [`worker`] attaches, registers, builds the deployed job from its arguments, refuses a
//! plan whose fingerprint differs, and runs its subtasks of every attempt, writing their
//! state files straight to the checkpoint storage. The runner's `--workers N` and `worker`
//! forms (`runner::cluster`) start the two roles. This module sits beside `api` in the
//! layers (docs/architecture.md §1a): it drives the runtime and never reaches above into
//! the runner.

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
pub mod handles;
mod messages;
pub mod worker;

/// The code generated from `proto/weir/cluster/v1/control.proto` (committed; regenerate
/// with `cargo run -p weir-protogen`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    include!("generated/weir.cluster.v1.rs");
}
