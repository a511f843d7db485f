//! The workers an attempt's tasks run on, as the coordinator sees them (issue 24,
//! docs/cluster.md): the executor runs no task itself, in one process as on a cluster; it
//! deploys every attempt through a [`TaskHosts`] and drives it with [`Control`]s and
//! [`TaskEvent`]s.
//!
//! A [`TaskHosts`] gives the attempt loop (`runtime::coordinator::attempt`), per task of
//! the plan, a control sender whose messages reach the task (Trigger, Complete, Abort,
//! Cancel), turns what the workers report (Ack, Decline, InputEnded, Finished, Failed, a
//! lost worker) into events, and has a frozen snapshot written where it is kept. Two
//! implementations:
//! * `in_memory` — the cluster of one: `run` in one process hands each attempt to one
//!   in-process worker ([`crate::runtime::worker::WorkerTasks`]) and its relay
//!   (`runtime::worker::relay`), driven on a thread of the attempt; the controls become
//!   the relay's orders and its reports task events, as Rust values.
//! * `cluster::coordinator` (feature `cluster`, above this layer) — workers in other
//!   processes, reached over gRPC; each worker runs the same `WorkerTasks` and relay behind
//!   its edge, which translates to and from protocol messages only.
//!
//! Either way the attempt's [`Attempt`] holds, as its `Subtasks`, senders that reach the
//! relay, not the tasks themselves, and the threads that drive it.
//!
//! Invariant: what crosses this interface is Rust values ([`Control`], [`TaskEvent`],
//! `Frozen`); protocol messages exist only inside the gRPC edge.

use std::collections::HashSet;
use std::sync::Arc;

use crossbeam_channel::Sender;

use crate::checkpoint::restore::RestoredCheckpoint;
use crate::checkpoint::storage::CheckpointStorage;
use crate::error::Result;
use crate::runtime::coordinator::attempt::Attempt;
use crate::runtime::plan::Plan;
use crate::runtime::task::{Control, TaskEvent, TaskMetrics};

/// The workers an attempt's tasks run on; see the module docs.
pub(crate) trait TaskHosts {
    /// Deploys attempt `attempt` of `plan` on the workers (waiting, bounded, until enough
    /// of them are registered), restored from `restore` (`None`: a fresh start; a worker
    /// process reads it again from its path). The tasks' events arrive on `events`, tagged with `attempt`; the workers
    /// write state files under the run id of `storage`, the coordinator's checkpoint
    /// folder, and into the savepoint folders it redirects checkpoints to (its Trigger
    /// names them).
    /// What the workers report of their subtasks' records goes into `metrics` (per task of
    /// the plan, for the whole job), so progress and the summary count as in one process.
    /// `planted`: the injected failure one worker fires in this attempt, if one is due.
    #[allow(clippy::too_many_arguments)]
    fn deploy(
        &self,
        plan: &Plan,
        attempt: u32,
        restore: Option<&RestoredCheckpoint>,
        events: &Sender<TaskEvent>,
        storage: &CheckpointStorage,
        metrics: &[Arc<TaskMetrics>],
        planted: Option<PlantedFailure>,
    ) -> Result<Attempt>;

    /// Whether a worker reported that attempt `attempt` failed by an injected failure
    /// (the restart strategy counts it as one, as in one process).
    fn injected_failure(&self, attempt: u32) -> bool {
        let _ = attempt;
        false
    }

    /// Whether attempt `attempt` failed because a peer reported a worker lost for the first
    /// time: the cluster changed, not the job, and the next deploy waits until that worker
    /// answers or is counted lost, so the restart strategy does not count the failure as
    /// one that repeats identically (`cluster::coordinator::suspects`).
    fn uncounted_failure(&self, attempt: u32) -> bool {
        let _ = attempt;
        false
    }

    /// At the job's end (`outcome`), before the coordinator's end sweeps
    /// of the job folder: tells the workers, and returns once each has closed its stream
    /// (its snapshot writers done) or counts as lost, so no file of a checkpoint that was
    /// in flight can appear after the sweep — the cluster's "every writer gone".
    fn end_job(&self, outcome: std::result::Result<(), &crate::error::Error>) {
        let _ = outcome;
    }
}

/// The injected failure (`--inject-failures`) an attempt's workers are to fire: the
/// coordinator holds the job's plan, one worker fires it inside one of its tasks.
#[derive(Clone)]
#[cfg_attr(not(feature = "cluster"), allow(dead_code))] // in one process the tasks fire the injector
pub(crate) struct PlantedFailure {
    /// Its number among the job's failures (1-based).
    pub(crate) number: usize,
    /// How many the job plans.
    pub(crate) planned: usize,
    /// The job's records (entering any task, over all workers) still to go before it is
    /// due: the chosen worker takes its share of them.
    pub(crate) records_to_go: u64,
    /// The plan's seed, which picks the worker.
    pub(crate) seed: u64,
    /// The coordinator's injector: armed once a checkpoint with progress completed in the
    /// attempt, which the Complete to the workers carries.
    pub(crate) injector: Arc<crate::runtime::fault::FailureInjector>,
}

/// A control as a worker hears it: what it is and for which checkpoint, so that one sent
/// to several of its tasks reaches the worker once (the worker hands it to its tasks, as
/// its relay does, `runtime::worker::relay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Sent {
    Trigger(u64),
    /// Only where a checkpoint's files go (`cluster::coordinator::forward`).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Announce(u64),
    Complete(u64),
    Abort(u64),
    Cancel,
}

/// Whether `control`, sent by the attempt loop to a task on `worker`, still has to go to
/// that worker (`seen` remembers what went).
pub(crate) fn dedupe<W: Eq + std::hash::Hash>(
    seen: &mut HashSet<(W, Sent)>,
    worker: W,
    control: &Control,
) -> bool {
    let sent = match control {
        Control::Trigger(b) => Sent::Trigger(b.id),
        Control::Complete(id) => Sent::Complete(*id),
        Control::Aborted(id) => Sent::Abort(*id),
        Control::Cancel => Sent::Cancel,
    };
    seen.insert((worker, sent))
}
