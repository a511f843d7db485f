//! The cluster of one (issue 24): `run` in one process deploys its attempts through this
//! [`TaskHosts`], which hands each one to a single in-process worker, the same
//! [`WorkerTasks`] a worker process runs behind its gRPC edge (`cluster::worker::host`).
//! So one process and a cluster share one code path, as Flink's MiniCluster does.
//!
//! Nothing is translated: the controls the attempt loop sends are the subtasks' own
//! control channels, the subtasks and writers report on the coordinator's event channel,
//! and an Ack's frozen snapshot ([`Frozen::Here`]) goes straight to the worker's writers.
//! One process shares with its worker what a cluster reports by message: the task
//! counters, the per-operator counters and the failure injector are the coordinator's own
//! (so the planted failure of [`TaskHosts::deploy`] is not needed: the tasks fire the
//! coordinator's injector themselves).
//!
//! Invariant: dropping the hosts drops the worker, whose writers are then done; the
//! executor does so before its end sweeps of the job folder.

use std::rc::Rc;
use std::sync::Arc;

use crossbeam_channel::Sender;

use crate::checkpoint::restore::RestoredCheckpoint;
use crate::checkpoint::storage::CheckpointStorage;
use crate::checkpoint::writer::Frozen;
use crate::error::Result;
use crate::runtime::coordinator::hosts::{HostedAttempt, PlantedFailure, TaskHosts};
use crate::runtime::fault::FailureInjector;
use crate::runtime::plan::Plan;
use crate::runtime::task::{TaskEvent, TaskMetrics};
use crate::runtime::worker::WorkerTasks;

/// One in-process worker that runs every task; see the module docs.
pub(crate) struct InMemoryHosts {
    worker: Rc<WorkerTasks>,
    injector: Option<Arc<FailureInjector>>,
    /// (Workers hosted in this process, their channels crossing real exchanges) where each
    /// task runs; `None`: every channel is in memory.
    #[cfg(feature = "cluster")]
    placement: Option<Arc<crate::runtime::placement::Placement>>,
}

impl InMemoryHosts {
    /// The hosts of `worker`, whose tasks fire `injector`'s failures.
    pub(crate) fn new(worker: WorkerTasks, injector: Option<Arc<FailureInjector>>) -> Self {
        InMemoryHosts {
            worker: Rc::new(worker),
            injector,
            #[cfg(feature = "cluster")]
            placement: None,
        }
    }

    /// The same, with every task placed on the workers of `placement`, all hosted in this
    /// process (tests of the exchange).
    #[cfg(feature = "cluster")]
    pub(crate) fn placed(
        mut self,
        placement: Option<Arc<crate::runtime::placement::Placement>>,
    ) -> Self {
        self.placement = placement;
        self
    }
}

impl TaskHosts for InMemoryHosts {
    fn deploy(
        &self,
        _plan: &Plan,
        attempt: u32,
        restore: Option<&RestoredCheckpoint>,
        _events: &Sender<TaskEvent>,
        _storage: &CheckpointStorage,
        _metrics: &[Arc<TaskMetrics>],
        _planted: Option<PlantedFailure>,
    ) -> Result<HostedAttempt> {
        let subtasks = self.worker.spawn(
            attempt,
            restore,
            self.injector.as_ref(),
            #[cfg(feature = "cluster")]
            self.placement.as_deref(),
        )?;
        let worker = self.worker.clone();
        Ok(HostedAttempt {
            controls: subtasks.controls,
            handles: subtasks.handles,
            write_frozen: Box::new(move |task, id, frozen| match frozen {
                Frozen::Here(snapshot) => worker.write_frozen(attempt, task, id, snapshot),
                // A task of this process never leaves its snapshot elsewhere.
                #[cfg(feature = "cluster")]
                Frozen::OnWorker => {}
            }),
        })
    }
}
