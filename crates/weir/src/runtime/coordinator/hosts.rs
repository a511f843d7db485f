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
//!   in-process worker ([`crate::runtime::worker::WorkerTasks`]); the controls and events
//!   are the tasks' own channels, nothing is translated.
//! * `cluster::coordinator` (feature `cluster`, above this layer) — workers in other
//!   processes, reached over gRPC; each worker runs the same `WorkerTasks` behind its edge.
//!
//! Invariant: what crosses this interface is Rust values ([`Control`], [`TaskEvent`],
//! [`Frozen`]); protocol messages exist only inside the gRPC edge.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;

use crate::checkpoint::restore::RestoredCheckpoint;
use crate::checkpoint::storage::CheckpointStorage;
use crate::checkpoint::writer::Frozen;
use crate::error::Result;
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
    ) -> Result<HostedAttempt>;

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

/// A cluster's hosts, shared with what else watches its workers (the status board).
#[cfg(feature = "cluster")]
impl TaskHosts for Arc<dyn TaskHosts> {
    fn deploy(
        &self,
        plan: &Plan,
        attempt: u32,
        restore: Option<&RestoredCheckpoint>,
        events: &Sender<TaskEvent>,
        storage: &CheckpointStorage,
        metrics: &[Arc<TaskMetrics>],
        planted: Option<PlantedFailure>,
    ) -> Result<HostedAttempt> {
        (**self).deploy(plan, attempt, restore, events, storage, metrics, planted)
    }

    fn injected_failure(&self, attempt: u32) -> bool {
        (**self).injected_failure(attempt)
    }

    fn uncounted_failure(&self, attempt: u32) -> bool {
        (**self).uncounted_failure(attempt)
    }

    fn end_job(&self, outcome: std::result::Result<(), &crate::error::Error>) {
        (**self).end_job(outcome)
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

/// An attempt deployed on the workers, as the executor drives it.
#[allow(clippy::type_complexity)]
pub(crate) struct HostedAttempt {
    /// Per task of the plan, the sender whose controls reach the task on its worker.
    pub(crate) controls: Vec<Sender<Control>>,
    /// The threads forwarding the controls; they end once every control sender is dropped.
    pub(crate) handles: Vec<JoinHandle<()>>,
    /// Has exited task `task`'s frozen snapshot (its Ack's [`Frozen`]) written into
    /// checkpoint `id` by the worker that ran it (FLIP-147; on a cluster the state never
    /// travels through the coordinator).
    pub(crate) write_frozen: Box<dyn Fn(usize, u64, Frozen) + 'static>,
}
