//! The task side of a job (issue 24): what a worker runs of each attempt the coordinator
//! deploys — one process's whole job, or one cluster worker's share of it.
//!
//! [`WorkerTasks`] is the one type both places use: `run` in one process hands every
//! attempt to it through the in-memory hosts (`runtime::coordinator::in_memory`, the
//! cluster of one), and a worker process (`cluster::worker::host`) through its gRPC edge.
//! It outlives the job's attempts and owns what they share: the plan, the checkpoint
//! storage the subtasks write into, the state backend, the snapshot writers and the task
//! counters. Per attempt, [`WorkerTasks::spawn`] (`spawn.rs`) builds the channels and
//! operator chains of its subtasks and starts one thread per subtask; their ends, their
//! acknowledgements and those of the writers arrive as [`TaskEvent`]s on the sender it was
//! given. [`WorkerTasks::relay`] (`relay.rs`) then stands between the coordinator and
//! those subtasks: the coordinator's orders in, reports out — one relay for both edges.
//!
//! Invariants:
//! * Nothing of the coordinator lives here: no checkpoint coordinator, no `_metadata`, no
//!   restart decision. The coordinator reaches the subtasks only through their
//!   [`Control`](crate::runtime::task::Control) senders and hears them only through
//!   events.
//! * The writers live as long as this value: dropping it closes their queue and waits for
//!   them, so once it is gone no state file of any checkpoint can appear any more (the
//!   coordinator's end sweeps rely on it).
//! * A frozen snapshot (FLIP-147: the state of a subtask whose input ended) stays on its
//!   worker, kept by the attempt's relay, and is written by these writers only, into the
//!   checkpoint the coordinator names ([`Order::WriteFrozen`]).

mod relay;
mod spawn;

use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{unbounded, Sender};

use crate::checkpoint::storage::CheckpointStorage;
use crate::checkpoint::writer::{
    spawn_writers, EncodedSnapshot, PhaseTimes, SnapshotJob, SnapshotPayload,
};
use crate::runtime::config::JobConfig;
use crate::runtime::graph::JobGraph;
use crate::runtime::operator_metrics::ChainMetrics;
use crate::runtime::plan::{Plan, TaskPlan};
use crate::runtime::state_backend::JobStateBackend;
use crate::runtime::task::{TaskEvent, TaskMetrics};

pub(crate) use relay::{Order, Relay, Report};
pub(crate) use spawn::Subtasks;

/// How many writer threads a worker runs: snapshots are written off the task threads.
const WRITERS: usize = 2;

/// The task side of a job on one worker; see the module docs.
pub(crate) struct WorkerTasks {
    pub(crate) graph: Rc<JobGraph>,
    pub(crate) cfg: JobConfig,
    pub(crate) plan: Arc<Plan>,
    /// The coordinator's checkpoint folder (under its run id), where subtasks write.
    pub(crate) storage: CheckpointStorage,
    /// Where keyed operators keep their state.
    pub(crate) state_backend: JobStateBackend,
    /// Where subtasks and writers report ([`TaskEvent`]).
    pub(crate) events_tx: Sender<TaskEvent>,
    /// The writers' queue; `None` once closed (on drop).
    writer_tx: Option<Sender<SnapshotJob>>,
    writers: Vec<JoinHandle<()>>,
    /// Per task of the plan, its counters over every attempt (shared with the coordinator
    /// in one process; reported by the worker's progress messages on a cluster).
    pub(crate) task_metrics: Vec<Arc<TaskMetrics>>,
    /// Per task, its chain's per-operator counters; `None` when metering is off.
    pub(crate) chain_metrics: Option<Vec<Arc<ChainMetrics>>>,
}

impl WorkerTasks {
    /// The task side of `graph` under `cfg` (planned as `plan`): writes into `storage`,
    /// keeps keyed state in `state_backend`, reports on `events`, counts into
    /// `task_metrics` (one per task of the plan) and, when metering is on, `chain_metrics`.
    /// Starts the snapshot writers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        graph: Rc<JobGraph>,
        cfg: JobConfig,
        plan: Plan,
        storage: CheckpointStorage,
        state_backend: JobStateBackend,
        events: Sender<TaskEvent>,
        task_metrics: Vec<Arc<TaskMetrics>>,
        chain_metrics: Option<Vec<Arc<ChainMetrics>>>,
    ) -> WorkerTasks {
        let (writer_tx, writer_rx) = unbounded::<SnapshotJob>();
        let writers = spawn_writers(&storage, writer_rx, events.clone(), WRITERS);
        WorkerTasks {
            graph,
            cfg,
            plan: Arc::new(plan),
            storage,
            state_backend,
            events_tx: events,
            writer_tx: Some(writer_tx),
            writers,
            task_metrics,
            chain_metrics,
        }
    }

    /// The writers' queue (open until [`Self::close_writers`], which only the end of the
    /// job calls, after every attempt's tasks were joined).
    pub(crate) fn writers(&self) -> &Sender<SnapshotJob> {
        self.writer_tx
            .as_ref()
            .expect("the writers live until the job ends")
    }
}

impl WorkerTasks {
    /// Closes the writers' queue and waits for the writers: no state file appears after
    /// this returns. Called on drop too (it does nothing the second time).
    pub(crate) fn close_writers(&mut self) {
        drop(self.writer_tx.take());
        for w in self.writers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for WorkerTasks {
    fn drop(&mut self) {
        self.close_writers();
    }
}

/// The writers' job for exited task `task` (planned as `t`) of attempt `attempt`: write
/// its frozen `snapshot` into checkpoint `id`, where it acknowledges for the task.
fn frozen_job(
    attempt: u32,
    task: usize,
    t: &TaskPlan,
    id: u64,
    snapshot: Arc<EncodedSnapshot>,
) -> SnapshotJob {
    SnapshotJob {
        attempt,
        task,
        subtask: t.subtask,
        parallelism: t.parallelism,
        checkpoint_id: id,
        snapshot: SnapshotPayload::Encoded(snapshot),
        sync: Duration::ZERO,
        alignment: Duration::ZERO,
        frozen: false,
        times: {
            // The task exited: its barrier, capture and handover are this instant.
            let now = crate::clock::wall_us();
            PhaseTimes {
                barrier_us: now,
                sync_start_us: now,
                sync_end_us: now,
                ..PhaseTimes::default()
            }
        },
    }
}
