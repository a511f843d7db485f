//! The cluster of one (issue 24): `run` in one process deploys its attempts through this
//! [`TaskHosts`], which hands each one to a single in-process worker, the same
//! [`WorkerTasks`] and the same relay (`runtime::worker::relay`) a worker process runs
//! behind its gRPC edge (`cluster::worker::host`). So one process and a cluster share one
//! code path, as Flink's MiniCluster does.
//!
//! Per attempt one thread drives the worker's [`Relay`]: the controls the attempt loop
//! sends to a task become the relay's orders (once per checkpoint however many tasks they
//! were sent to, as a worker hears them), its reports become the coordinator's task events,
//! and the attempt's `write_frozen` becomes a WriteFrozen order — Rust values throughout,
//! where a worker process translates to and from protocol messages. One process shares with
//! its worker what a cluster reports by message: the task counters, the per-operator
//! counters and the failure injector are the coordinator's own (so the planted failure of
//! [`TaskHosts::deploy`] is not needed: the tasks fire the coordinator's injector, and
//! the coordinator arms it itself).
//!
//! Invariants:
//! * The relay thread ends once the attempt loop cancels the attempt (or drops every
//!   control sender), after it cancelled and joined the subtasks: joining it, as
//!   [`Attempt::cancel_and_join`] does, leaves no task of the attempt running.
//! * Dropping the hosts drops the worker, whose writers are then done; the executor does so
//!   before its end sweeps of the job folder.

use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;

use crossbeam_channel::{unbounded, Receiver, Select, Sender};

use crate::checkpoint::restore::RestoredCheckpoint;
use crate::checkpoint::storage::CheckpointStorage;
use crate::error::{Error, Result};
use crate::runtime::coordinator::attempt::Attempt;
use crate::runtime::coordinator::hosts::{dedupe, PlantedFailure, TaskHosts};
use crate::runtime::fault::FailureInjector;
use crate::runtime::plan::Plan;
use crate::runtime::task::{Control, TaskEvent, TaskMetrics};
use crate::runtime::worker::{Order, Relay, Report, Subtasks, WorkerTasks};

/// One in-process worker that runs every task; see the module docs.
pub(crate) struct InMemoryHosts {
    worker: Rc<WorkerTasks>,
    /// What the worker's subtasks and writers report, read by the attempt's relay.
    events: Receiver<TaskEvent>,
    injector: Option<Arc<FailureInjector>>,
    /// (Workers hosted in this process, their channels crossing real exchanges) where each
    /// task runs; `None`: every channel is in memory.
    #[cfg(feature = "cluster")]
    placement: Option<Arc<crate::runtime::placement::Placement>>,
}

impl InMemoryHosts {
    /// The hosts of `worker`, which reports on `events` (its subtasks' and writers'
    /// channel), whose tasks fire `injector`'s failures.
    pub(crate) fn new(
        worker: WorkerTasks,
        events: Receiver<TaskEvent>,
        injector: Option<Arc<FailureInjector>>,
    ) -> Self {
        InMemoryHosts {
            worker: Rc::new(worker),
            events,
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
        plan: &Plan,
        attempt: u32,
        restore: Option<&RestoredCheckpoint>,
        events: &Sender<TaskEvent>,
        _storage: &CheckpointStorage,
        _metrics: &[Arc<TaskMetrics>],
        _planted: Option<PlantedFailure>,
    ) -> Result<Attempt> {
        let subtasks = self.worker.spawn(
            attempt,
            restore,
            self.injector.as_ref(),
            #[cfg(feature = "cluster")]
            self.placement.as_deref(),
        )?;
        let relay = (self.worker).relay(attempt, subtasks, None, "this process".into());
        let tasks = plan.tasks.len();
        let (controls, receivers): (Vec<_>, Vec<_>) = (0..tasks).map(|_| unbounded()).unzip();
        let (frozen_tx, frozen) = unbounded::<(usize, u64)>();
        let link = Link {
            controls: receivers,
            frozen,
            events: self.events.clone(),
            to_coordinator: events.clone(),
        };
        let handle = std::thread::Builder::new()
            .name(format!("weir-relay-{attempt}"))
            .spawn(move || link.drive(relay, attempt))
            .map_err(|e| Error::InvalidJob(format!("cannot start the relay thread: {e}")))?;
        Ok(Attempt {
            subtasks: Subtasks {
                controls,
                sources: Vec::new(),
                handles: vec![handle],
                finished: vec![false; tasks],
            },
            write_frozen: Box::new(move |task, checkpoint, _kept| {
                let _ = frozen_tx.send((task, checkpoint));
            }),
        })
    }
}

/// What joins the attempt loop and the in-process worker's relay.
struct Link {
    /// Per task of the plan, the controls the attempt loop sent it.
    controls: Vec<Receiver<Control>>,
    /// (Task, checkpoint) whose frozen snapshot the coordinator has written.
    frozen: Receiver<(usize, u64)>,
    /// The worker's subtasks' and writers' events.
    events: Receiver<TaskEvent>,
    /// The coordinator's event channel.
    to_coordinator: Sender<TaskEvent>,
}

impl Link {
    /// Relays until the attempt loop cancels the attempt or drops every control sender;
    /// then cancels and joins the subtasks.
    fn drive(self, mut relay: Relay, attempt: u32) {
        let mut seen = HashSet::new();
        let mut sel = Select::new();
        let from_tasks = sel.recv(&self.events);
        let from_frozen = sel.recv(&self.frozen);
        let first_control = from_frozen + 1;
        for c in &self.controls {
            sel.recv(c);
        }
        let mut open = self.controls.len();
        while open > 0 {
            let op = sel.select();
            let i = op.index();
            let report = if i == from_tasks {
                match op.recv(&self.events) {
                    Ok(event) => relay.event(event),
                    // The worker is gone: nothing more to relay.
                    Err(_) => break,
                }
            } else if i == from_frozen {
                match op.recv(&self.frozen) {
                    Ok((task, checkpoint)) => relay.order(Order::WriteFrozen { task, checkpoint }),
                    Err(_) => {
                        sel.remove(i);
                        None
                    }
                }
            } else {
                match op.recv(&self.controls[i - first_control]) {
                    Ok(control) if dedupe(&mut seen, (), &control) => match order(control) {
                        Some(order) => relay.order(order),
                        None => break, // cancelled
                    },
                    Ok(_) => None, // heard already through another task
                    Err(_) => {
                        sel.remove(i);
                        open -= 1;
                        None
                    }
                }
            };
            if let Some(report) = report {
                let _ = self.to_coordinator.send(event(attempt, report));
            }
        }
        relay.cancel_and_join();
    }
}

/// The relay's order for a control of the attempt loop; `None` for Cancel, which ends the
/// relay. In one process the coordinator created any savepoint folder in the storage the
/// worker shares, and arms its own injector.
fn order(control: Control) -> Option<Order> {
    Some(match control {
        Control::Trigger(barrier) => Order::Trigger {
            barrier,
            folder: None,
            only_announce: false,
        },
        Control::Complete(checkpoint) => Order::Complete {
            checkpoint,
            arm_failure: false,
        },
        Control::Aborted(checkpoint) => Order::Abort(checkpoint),
        Control::Cancel => return None,
    })
}

/// A report of attempt `attempt`, as the coordinator's task event.
fn event(attempt: u32, report: Report) -> TaskEvent {
    match report {
        Report::Ack {
            task,
            checkpoint,
            ack,
        } => TaskEvent::Ack {
            attempt,
            task,
            checkpoint,
            ack,
        },
        Report::Decline {
            checkpoint, cause, ..
        } => TaskEvent::Decline {
            attempt,
            checkpoint,
            reason: cause,
        },
        Report::InputEnded { task } => TaskEvent::InputEnded { attempt, task },
        Report::Finished { task } => TaskEvent::Finished { attempt, task },
        Report::Failed { task, error, .. } => TaskEvent::Failed {
            attempt,
            task,
            error,
        },
    }
}
