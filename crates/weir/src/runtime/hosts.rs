//! Tasks that run in other processes (issue 24, docs/cluster.md): how the executor of a
//! cluster's coordinator, which runs no task itself, starts an attempt on its workers and
//! reaches their tasks.
//!
//! The executor's attempt loop (`runtime::attempt`) stays what it is for one process: it
//! sends [`Control`]s to tasks and receives [`TaskEvent`]s. A [`TaskHosts`] gives it, per
//! task of the plan, a control sender whose messages reach the task's worker (Trigger,
//! Complete, Abort, Cancel on the control stream), and turns what the workers report (Ack,
//! Decline, InputEnded, Finished, TaskFailed, a lost worker) into the same events. The
//! implementation lives with the coordinator role (`cluster::coordinator`), above this
//! layer; the runtime only names what it needs.

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;

use crate::checkpoint::storage::CheckpointStorage;
use crate::error::Result;
use crate::runtime::plan::Plan;
use crate::runtime::task::{Control, TaskEvent, TaskMetrics};

/// The workers an attempt's tasks run on; see the module docs.
pub(crate) trait TaskHosts {
    /// Deploys attempt `attempt` of `plan` on the workers (waiting, bounded, until enough
    /// of them are registered), restored from the checkpoint at `restore` (`None`: a fresh
    /// start). The tasks' events arrive on `events`, tagged with `attempt`; the workers
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
        restore: Option<&Path>,
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

/// The injected failure (`--inject-failures`) an attempt's workers are to fire: the
/// coordinator holds the job's plan, one worker fires it inside one of its tasks.
#[derive(Clone)]
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
pub(crate) struct HostedAttempt {
    /// Per task of the plan, the sender whose controls reach the task on its worker.
    pub(crate) controls: Vec<Sender<Control>>,
    /// The threads forwarding the controls; they end once every control sender is dropped.
    pub(crate) handles: Vec<JoinHandle<()>>,
    /// Asks the worker that ran exited task `task` to write the frozen snapshot it kept
    /// into checkpoint `id` (FLIP-147; the state never travels through the coordinator).
    pub(crate) write_frozen: Box<dyn Fn(usize, u64)>,
}
