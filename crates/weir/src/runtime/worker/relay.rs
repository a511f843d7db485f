//! The relay between a coordinator and one worker's subtasks of an attempt (issue 24): the
//! one place where a worker turns the coordinator's [`Order`]s into what its subtasks and
//! writers do, and what they report into [`Report`]s for the coordinator.
//!
//! Both worker edges drive this same code, so one process and a cluster run one relay:
//! * `runtime::coordinator::in_memory` (the cluster of one) feeds it the attempt loop's
//!   controls, on a thread of the attempt, and hands its reports back as task events;
//! * `cluster::worker::host` feeds it the coordinator's gRPC messages and sends its reports
//!   back as protocol messages — that edge only translates.
//!
//! What it does with an order:
//! * **Trigger**: first records where the checkpoint's files go (a savepoint's folder),
//!   which this worker's writers wait for; then, unless the order only announces the
//!   checkpoint, hands the barrier to every source of the attempt still running here.
//! * **Complete / Abort**: tells every subtask still running here (Complete arms the
//!   planted failure first, when the coordinator says so).
//! * **WriteFrozen**: has the writers write an exited task's frozen snapshot (FLIP-147),
//!   kept here since its acknowledgement, into the named checkpoint; declines the
//!   checkpoint when no snapshot of that task is kept.
//!
//! What it does with a task event: only this attempt's are reported (a late event of an
//! earlier attempt is dropped); an acknowledgement's frozen snapshot stays here and the
//! report says only that the worker keeps it ([`Frozen::OnWorker`]); an ended task stops
//! receiving orders; a failure says whether the injected failure had fired.
//!
//! Invariant: the relay never decides anything about checkpoints — it neither completes
//! nor aborts one; it only carries out what the coordinator ordered and reports what
//! happened. Cancelling ends it ([`Relay::cancel_and_join`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::Sender;

use super::spawn::Subtasks;
use super::{frozen_job, WorkerTasks};
use crate::checkpoint::barrier::CheckpointBarrier;
use crate::checkpoint::storage::CheckpointStorage;
use crate::checkpoint::writer::{EncodedSnapshot, Frozen, SnapshotJob, TaskAck};
use crate::error::Error;
use crate::runtime::fault::FailureInjector;
use crate::runtime::plan::Plan;
use crate::runtime::task::{Control, TaskEvent, TaskMetrics};

/// What a coordinator orders a worker to do with its subtasks of one attempt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Order {
    /// Checkpoint `barrier` begins. Its files go into `folder` (a savepoint's folder,
    /// inside the job's savepoint directory; `None`: the job's checkpoint folder). With
    /// `only_announce` the worker only learns where they go: the barrier reaches its
    /// subtasks through their inputs.
    Trigger {
        barrier: CheckpointBarrier,
        folder: Option<PathBuf>,
        only_announce: bool,
    },
    /// Checkpoint `checkpoint` completed. `arm_failure`: the injected failure planted on
    /// this worker may fire from now on.
    Complete { checkpoint: u64, arm_failure: bool },
    /// Checkpoint `checkpoint` was aborted.
    Abort(u64),
    /// Write exited task `task`'s frozen snapshot into checkpoint `checkpoint`.
    WriteFrozen { task: usize, checkpoint: u64 },
}

/// What a worker reports to its coordinator about its subtasks of one attempt.
#[derive(Debug)]
pub(crate) enum Report {
    /// Task `task`'s state for `checkpoint` is written (`ack.frozen`, if any, is
    /// [`Frozen::OnWorker`]: the snapshot stays on the worker).
    Ack {
        task: usize,
        checkpoint: u64,
        ack: TaskAck,
    },
    /// Checkpoint `checkpoint` cannot complete on this worker: `cause`, about `task` when
    /// one task is concerned.
    Decline {
        checkpoint: u64,
        #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // the gRPC edge names it
        task: Option<usize>,
        cause: String,
    },
    /// Source task `task`'s input ended.
    InputEnded { task: usize },
    /// Task `task` ended cleanly.
    Finished { task: usize },
    /// Task `task` failed with `error`; `injected`: after the planted failure fired here.
    Failed {
        task: usize,
        error: Error,
        #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // one process counts its own
        injected: bool,
    },
}

/// One attempt's relay on one worker; see the module docs.
pub(crate) struct Relay {
    attempt: u32,
    /// How reports name this worker (`worker N (name) at ADDRESS`, or `this process`).
    who: String,
    subtasks: Subtasks,
    /// Per exited task, the newest frozen snapshot and the checkpoint it was taken for.
    frozen: HashMap<usize, (Arc<EncodedSnapshot>, u64)>,
    /// The failure planted in this attempt on this worker, if any.
    injector: Option<Arc<FailureInjector>>,
    plan: Arc<Plan>,
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    storage: CheckpointStorage,
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    savepoint_dir: PathBuf,
    task_metrics: Vec<Arc<TaskMetrics>>,
    writers: Sender<SnapshotJob>,
}

impl WorkerTasks {
    /// The relay of attempt `attempt`'s `subtasks` (spawned by [`WorkerTasks::spawn`]),
    /// firing `injector`'s planted failure, naming this worker `who`. It holds what it
    /// needs of this worker (plan, storage, counters, the writers' queue), so it may run on
    /// a thread of its own.
    pub(crate) fn relay(
        &self,
        attempt: u32,
        subtasks: Subtasks,
        injector: Option<Arc<FailureInjector>>,
        who: String,
    ) -> Relay {
        Relay {
            attempt,
            who,
            subtasks,
            frozen: HashMap::new(),
            injector,
            plan: self.plan.clone(),
            storage: self.storage.clone(),
            savepoint_dir: self.cfg.savepoint_dir.clone(),
            task_metrics: self.task_metrics.clone(),
            writers: self.writers().clone(),
        }
    }
}

impl Relay {
    /// Per task of the plan, whether it runs on this worker in this attempt (and has not
    /// ended yet).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // what a worker process reports
    pub(crate) fn running(&self) -> Vec<bool> {
        self.subtasks.finished.iter().map(|f| !f).collect()
    }

    /// Carries out `order`; what the coordinator must hear of it (a decline), if anything.
    pub(crate) fn order(&mut self, order: Order) -> Option<Report> {
        match order {
            Order::Trigger {
                barrier,
                folder,
                only_announce,
            } => self.trigger(barrier, folder.as_deref(), only_announce),
            Order::Complete {
                checkpoint,
                arm_failure,
            } => {
                if let Some(injector) = self.injector.as_ref().filter(|_| arm_failure) {
                    injector.on_checkpoint_completed();
                }
                self.subtasks.broadcast(Control::Complete(checkpoint));
                None
            }
            Order::Abort(checkpoint) => {
                self.subtasks.broadcast(Control::Aborted(checkpoint));
                None
            }
            Order::WriteFrozen { task, checkpoint } => self.write_frozen(task, checkpoint),
        }
    }

    fn trigger(
        &self,
        barrier: CheckpointBarrier,
        folder: Option<&Path>,
        only_announce: bool,
    ) -> Option<Report> {
        // Where the files go first: this worker's writers wait for it.
        let announced = self.announce(barrier.id, folder);
        let declined = announced.err().map(|e| Report::Decline {
            checkpoint: barrier.id,
            task: None,
            cause: format!(
                "{} cannot write into {}: {e}",
                self.who,
                folder.map_or_else(String::new, |f| f.display().to_string())
            ),
        });
        if only_announce {
            return declined;
        }
        let s = &self.subtasks;
        for &source in s.sources.iter().filter(|&&t| !s.finished[t]) {
            // Unaligned: a source waiting for room or permits stops waiting.
            (self.task_metrics[source].barrier_requested).store(true, Ordering::Relaxed);
            let _ = s.controls[source].send(Control::Trigger(barrier));
        }
        declined
    }

    /// Records where checkpoint `id`'s files go, for this worker's writers
    /// (`storage::announce`).
    #[cfg(feature = "cluster")]
    fn announce(&self, id: u64, folder: Option<&Path>) -> crate::error::Result<()> {
        (self.storage).announce(id, &self.savepoint_dir, folder)?;
        Ok(())
    }

    /// Without the cluster feature only one process drives a relay, and its coordinator
    /// redirected any savepoint into the storage it shares with its worker: nothing to
    /// record (and no order names a folder).
    #[cfg(not(feature = "cluster"))]
    fn announce(&self, _id: u64, _folder: Option<&Path>) -> crate::error::Result<()> {
        Ok(())
    }

    /// Has exited task `task`'s kept frozen snapshot written into checkpoint `id`; a
    /// snapshot not kept here declines the checkpoint, naming the task.
    fn write_frozen(&self, task: usize, id: u64) -> Option<Report> {
        let Some((snapshot, _)) = self.frozen.get(&task) else {
            let name = (self.plan.tasks.get(task)).map_or("an unknown task", |t| &t.name);
            return Some(Report::Decline {
                checkpoint: id,
                task: Some(task),
                cause: format!("{} holds no frozen snapshot of {name}", self.who),
            });
        };
        let job = frozen_job(
            self.attempt,
            task,
            &self.plan.tasks[task],
            id,
            snapshot.clone(),
        );
        let _ = self.writers.send(job);
        None
    }

    /// What the coordinator hears of a subtask's (or writer's) `event`: nothing for an
    /// earlier attempt's.
    pub(crate) fn event(&mut self, event: TaskEvent) -> Option<Report> {
        let current = self.attempt;
        Some(match event {
            TaskEvent::Ack {
                attempt,
                task,
                checkpoint,
                mut ack,
            } if attempt == current => {
                if let Some(Frozen::Here(snapshot)) = ack.frozen.take() {
                    let newer = (self.frozen.get(&task)).is_none_or(|(_, id)| *id < checkpoint);
                    if newer {
                        self.frozen.insert(task, (snapshot, checkpoint));
                    }
                    ack.frozen = Some(Frozen::OnWorker);
                }
                Report::Ack {
                    task,
                    checkpoint,
                    ack,
                }
            }
            TaskEvent::Decline {
                attempt,
                checkpoint,
                reason,
            } if attempt == current => Report::Decline {
                checkpoint,
                task: None,
                cause: reason,
            },
            TaskEvent::InputEnded { attempt, task } if attempt == current => {
                Report::InputEnded { task }
            }
            TaskEvent::Finished { attempt, task } if attempt == current => {
                self.subtasks.finished[task] = true;
                Report::Finished { task }
            }
            TaskEvent::Failed {
                attempt,
                task,
                error,
            } if attempt == current => {
                self.subtasks.finished[task] = true;
                let injected = !matches!(error, Error::Cancelled)
                    && self.injector.as_ref().is_some_and(|i| i.fired() > 0);
                Report::Failed {
                    task,
                    error,
                    injected,
                }
            }
            _ => return None, // an earlier attempt's
        })
    }

    /// Ends the attempt here: cancels every subtask still running and waits for its
    /// thread.
    pub(crate) fn cancel_and_join(self) {
        self.subtasks.cancel_and_join();
    }
}

// Its tests build a job with the API, so they sit in the API's layer: api/relay_tests.rs.
