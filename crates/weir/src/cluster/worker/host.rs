//! The gRPC edge of a worker's task side (issue 24): build this worker's subtasks of
//! the deployed attempt (`runtime::placement`) with the same
//! `runtime::worker::WorkerTasks` `run` uses in one process, then drive the same relay
//! (`runtime::worker::relay`) — the coordinator's Trigger, Complete, Abort and WriteFrozen
//! become its orders, its reports (acknowledgements, whose state files this worker's
//! writers already wrote to the checkpoint storage, the handles in [`to_proto`]; declines,
//! ended inputs, ends and failures) become messages to the coordinator — until the
//! coordinator cancels the attempt, deploys the next one or ends the job. This edge only
//! translates: what the relay does with an order or an event is the same in one process.
//!
//! The frozen snapshot of a task whose input ended (FLIP-147) stays on this worker, in the
//! relay: the Ack only says it exists, and the coordinator's WriteFrozen has it written.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::{unbounded, Receiver, Select};

use super::send;
use crate::checkpoint::barrier::{BarrierKind, CheckpointBarrier};
use crate::checkpoint::restore;
use crate::checkpoint::storage::CheckpointStorage;
use crate::cluster::handles::{to_proto, SubtaskRef};
use crate::cluster::proto::coordinator_message::Kind as FromCoordinator;
use crate::cluster::proto::worker_message::Kind as ToCoordinator;
use crate::cluster::proto::{self, SnapshotKind, WorkerMessage};
use crate::error::{Error, Result};
use crate::runtime::config::JobConfig;
use crate::runtime::exchange::{Exchange, WorkerId};
use crate::runtime::fault::FailureInjector;
use crate::runtime::graph::JobGraph;
use crate::runtime::placement::{Hosting, Placement};
use crate::runtime::state_backend::JobStateBackend;
use crate::runtime::task::{TaskEvent, TaskMetrics};
use crate::runtime::worker::{Order, Relay, Report, WorkerTasks};

/// What the coordinator's stream brought, or why it ended.
pub(crate) type Inbox = Receiver<std::result::Result<FromCoordinator, String>>;

/// How an attempt ended on this worker.
pub(crate) enum Next {
    /// The coordinator cancelled it; the next deploy (or the job's end) follows.
    Cancelled,
    /// The coordinator deployed the next attempt.
    Deploy(proto::Deploy),
    /// The job ended, with the coordinator's message.
    Ended(proto::JobEnded),
}

/// A worker's job, built once from the first deploy's arguments, and what outlives its
/// attempts: its task side ([`WorkerTasks`]: the checkpoint storage — the coordinator's
/// folder, under its run id —, the snapshot writers, the state backend, the counters).
pub(crate) struct Host {
    pub(crate) id: WorkerId,
    /// `worker N (name) at ADDRESS`.
    pub(crate) described: String,
    tasks: WorkerTasks,
    exchange: Arc<Exchange>,
    /// What this worker's subtasks and writers report, relayed to the coordinator.
    events: Receiver<TaskEvent>,
    to_coordinator: tokio::sync::mpsc::UnboundedSender<WorkerMessage>,
    /// Testing: while this file exists, wait before dialing (`WorkerConfig`).
    pause_before_dial: Option<std::path::PathBuf>,
}

/// How often a worker reports its subtasks' records (and once more before each Finished).
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

impl Host {
    /// The host of `graph` under `cfg` for worker `id`, writing into the coordinator's
    /// checkpoint folder under `run_id`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: WorkerId,
        described: String,
        graph: JobGraph,
        cfg: JobConfig,
        run_id: &str,
        exchange: Arc<Exchange>,
        to_coordinator: tokio::sync::mpsc::UnboundedSender<WorkerMessage>,
    ) -> Result<Host> {
        let plan = crate::runtime::plan::plan(&graph, &cfg)?;
        let storage = CheckpointStorage::join(&cfg.checkpoint_dir, &cfg.name, run_id)?;
        // The job's disk-state settings apply on a worker as in one process: its working
        // folder is a `run-<pid>-<n>` of its own under the job's --state-dir (so workers
        // sharing a host never share one), and with incremental checkpoints its subtasks
        // write bases and deltas into the coordinator's `shared/`, whose retention and
        // sweeps the coordinator alone runs (it owns `_metadata`).
        let incremental =
            crate::runtime::state_backend::incremental_checkpoints(cfg.incremental_checkpoints)?;
        let state_backend = JobStateBackend::new(cfg.state_backend, &cfg.state_dir, &cfg.name)?
            .incremental(incremental)
            .memory(cfg.disk_state);
        let (events_tx, events) = unbounded::<TaskEvent>();
        let task_metrics = (plan.tasks.iter())
            .map(|_| Arc::new(TaskMetrics::default()))
            .collect();
        let tasks = WorkerTasks::new(
            std::rc::Rc::new(graph),
            cfg,
            plan,
            storage,
            state_backend,
            events_tx,
            task_metrics,
            None,
        );
        Ok(Host {
            id,
            described,
            tasks,
            exchange,
            events,
            to_coordinator,
            pause_before_dial: None,
        })
    }

    /// The host, waiting before it dials while `file` exists (testing: a worker hung before
    /// it opened an attempt's streams, `WorkerConfig::pause_before_dial`).
    pub(crate) fn pausing_before_dial(mut self, file: Option<std::path::PathBuf>) -> Host {
        self.pause_before_dial = file;
        self
    }

    fn send(&self, kind: ToCoordinator) {
        send(&self.to_coordinator, kind);
    }

    fn subtask(&self, task: usize) -> SubtaskRef {
        let t = &self.tasks.plan.tasks[task];
        SubtaskRef {
            task_uid: self.tasks.plan.uids[t.chain[0]].clone(),
            subtask: t.subtask,
            parallelism: t.parallelism,
        }
    }

    /// Runs deployed attempt `deploy` until it ends; see the module docs. An attempt this
    /// worker cannot start (a peer out of reach, its checkpoint unreadable) is reported
    /// with TaskFailed naming this worker: it fails the attempt, and the coordinator's
    /// restart strategy decides what comes next.
    pub(crate) fn run(&self, deploy: &proto::Deploy, inbox: &Inbox) -> Result<Next> {
        let attempt = deploy.attempt as u32;
        // The injected failure the coordinator planted in this attempt, if any
        // (`--inject-failures`): fired here, or only waited for with the sources held.
        let injector = (deploy.injected_failures_planned > 0).then(|| {
            Arc::new(FailureInjector::planted(
                deploy.inject_failure as usize,
                deploy.injected_failures_planned as usize,
                deploy.inject_after_records,
            ))
        });
        let started = self.start(deploy).and_then(|(placement, restored)| {
            self.tasks.state_backend.prepare_attempt()?;
            let a = (self.tasks).spawn(
                attempt,
                restored.as_ref(),
                injector.as_ref(),
                Some(&placement),
            )?;
            Ok((a, restored.map(|r| r.path)))
        });
        let (tasks, restored) = match started {
            Ok(s) => s,
            Err(e) => {
                // Channels registered before the failure must not wait for peers.
                self.exchange.end_attempt(attempt);
                let cause = format!("{} could not start attempt {attempt}: {e}", self.described);
                self.send(ToCoordinator::TaskFailed(proto::TaskFailed {
                    attempt: deploy.attempt,
                    task: super::START.into(),
                    cause: cause.clone(),
                    ..Default::default()
                }));
                // The attempt fails on the coordinator, which restarts the job (or ends
                // it): this worker waits for what it decides.
                eprintln!("weir: {cause}");
                return Ok(Next::Cancelled);
            }
        };
        self.send(ToCoordinator::Deployed(proto::Deployed {
            attempt: deploy.attempt,
            fingerprint: deploy.fingerprint.clone(),
        }));
        let mut relay = (self.tasks).relay(attempt, tasks, injector, self.described.clone());
        // The tasks of other workers count as finished from the start.
        let local = relay.running();
        let mine: Vec<String> = (0..self.tasks.plan.tasks.len())
            .filter(|&t| local[t])
            .map(|t| {
                let s = self.subtask(t);
                format!("{}[{}]", s.task_uid, s.subtask)
            })
            .collect();
        eprintln!(
            "weir: {} runs attempt {attempt}: {}{}",
            self.described,
            mine.join(", "),
            restored.map_or_else(String::new, |p| format!(", restored from {}", p.display()))
        );
        let next = self.relay(attempt, &mut relay, &local, inbox);
        // Before joining: a sender waiting for a channel to a peer that never connected
        // (hung or cut off before it dialled) wakes with an error instead of for ever.
        self.exchange.end_attempt(attempt);
        relay.cancel_and_join();
        self.progress(&local); // what the subtasks did up to their end
        next
    }

    /// Dials the workers above this one, loads the checkpoint to restore, and places the
    /// plan on the deploy's workers.
    fn start(
        &self,
        deploy: &proto::Deploy,
    ) -> Result<(Arc<Placement>, Option<restore::RestoredCheckpoint>)> {
        if let Some(file) = self.pause_before_dial.as_ref().filter(|f| f.exists()) {
            eprintln!(
                "weir: {} pauses before dialing its peers for attempt {} ({} exists)",
                self.described,
                deploy.attempt,
                file.display()
            );
            while file.exists() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        self.exchange.begin_attempt(deploy.attempt as u32);
        for w in deploy.workers.iter().filter(|w| w.worker_id > self.id) {
            if !self.exchange.is_connected(w.worker_id) {
                self.exchange
                    .connect(w.worker_id, &w.exchange_address)
                    .map_err(|e| Error::PeerLost(e.to_string()))?;
            }
        }
        let restored = match deploy.restore_from.as_str() {
            "" => None,
            path => Some(restore::load(std::path::Path::new(path))?),
        };
        let hosting = Hosting {
            workers: deploy.workers.iter().map(|w| w.worker_id).collect(),
            hosted: [(self.id, self.exchange.clone())].into(),
        };
        Ok((
            Arc::new(Placement::schedule(&self.tasks.plan, hosting)),
            restored,
        ))
    }

    /// Relays between the coordinator and attempt `attempt`'s subtasks through `relay`,
    /// translating its orders from and its reports to protocol messages; see the module
    /// docs.
    fn relay(
        &self,
        attempt: u32,
        relay: &mut Relay,
        local: &[bool],
        inbox: &Inbox,
    ) -> Result<Next> {
        // Reported every PROGRESS_EVERY however busy the stream is: a report only on a
        // quiet moment would never come while checkpoints are triggered more often.
        let mut next_progress = std::time::Instant::now() + PROGRESS_EVERY;
        loop {
            let now = std::time::Instant::now();
            if now >= next_progress {
                self.progress(local);
                next_progress = now + PROGRESS_EVERY;
            }
            let mut sel = Select::new();
            let from_tasks = sel.recv(&self.events);
            sel.recv(inbox);
            let Ok(op) = sel.select_deadline(next_progress) else {
                continue;
            };
            if op.index() == from_tasks {
                let Ok(event) = op.recv(&self.events) else {
                    return Err(Error::Cluster("the worker's event channel closed".into()));
                };
                if let Some(report) = relay.event(event) {
                    self.report(attempt, report, local);
                }
                continue;
            }
            let message = match op.recv(inbox) {
                Ok(Ok(m)) => m,
                Ok(Err(cause)) => return Err(Error::Cluster(cause)),
                Err(_) => {
                    return Err(Error::Cluster(
                        "the coordinator's control stream closed".into(),
                    ))
                }
            };
            let this = u64::from(attempt);
            let order = match message {
                FromCoordinator::Trigger(t) if t.attempt == this => Order::Trigger {
                    barrier: CheckpointBarrier {
                        id: t.checkpoint_id,
                        timestamp_ms: t.timestamp_ms,
                        kind: barrier_kind(t.kind),
                    },
                    folder: (!t.savepoint_folder.is_empty())
                        .then(|| std::path::PathBuf::from(&t.savepoint_folder)),
                    only_announce: t.only_announce,
                },
                FromCoordinator::Complete(c) if c.attempt == this => Order::Complete {
                    checkpoint: c.checkpoint_id,
                    arm_failure: c.arm_failure,
                },
                FromCoordinator::Abort(a) if a.attempt == this => Order::Abort(a.checkpoint_id),
                FromCoordinator::WriteFrozen(w) if w.attempt == this => {
                    match self.task_of(&w.task_uid, w.subtask) {
                        Some(task) => Order::WriteFrozen {
                            task,
                            checkpoint: w.checkpoint_id,
                        },
                        None => {
                            self.send(ToCoordinator::Decline(proto::Decline {
                                attempt: w.attempt,
                                checkpoint_id: w.checkpoint_id,
                                task_uid: w.task_uid.clone(),
                                subtask: w.subtask,
                                cause: format!(
                                    "{} runs no subtask {}[{}] of this plan",
                                    self.described, w.task_uid, w.subtask
                                ),
                            }));
                            continue;
                        }
                    }
                }
                FromCoordinator::Cancel(c) if c.attempt == this => return Ok(Next::Cancelled),
                FromCoordinator::Deploy(d) => return Ok(Next::Deploy(d)),
                FromCoordinator::JobEnded(e) => return Ok(Next::Ended(e)),
                _ => continue, // heartbeats, and what an older attempt was sent
            };
            if let Some(report) = relay.order(order) {
                self.report(attempt, report, local);
            }
        }
    }

    /// The task of the plan headed by `uid`'s subtask `subtask`.
    fn task_of(&self, uid: &str, subtask: u32) -> Option<usize> {
        (0..self.tasks.plan.tasks.len()).find(|&t| {
            let s = self.subtask(t);
            s.task_uid == uid && s.subtask == subtask
        })
    }

    /// Sends the relay's `report` of attempt `attempt` to the coordinator.
    fn report(&self, attempt: u32, report: Report, local: &[bool]) {
        let a = u64::from(attempt);
        let kind = match report {
            Report::Ack {
                task,
                checkpoint,
                ack,
            } => ToCoordinator::Ack(to_proto(attempt, checkpoint, &self.subtask(task), &ack)),
            Report::Decline {
                checkpoint,
                task,
                cause,
            } => {
                let s = task.map(|t| self.subtask(t));
                ToCoordinator::Decline(proto::Decline {
                    attempt: a,
                    checkpoint_id: checkpoint,
                    cause,
                    task_uid: s.as_ref().map_or_else(String::new, |s| s.task_uid.clone()),
                    subtask: s.map_or(0, |s| s.subtask),
                })
            }
            Report::InputEnded { task } => {
                let s = self.subtask(task);
                ToCoordinator::InputEnded(proto::InputEnded {
                    attempt: a,
                    task_uid: s.task_uid,
                    subtask: s.subtask,
                })
            }
            Report::Finished { task } => {
                // Its final count first: the coordinator's summary is read once every
                // task finished.
                self.progress(local);
                let s = self.subtask(task);
                ToCoordinator::Finished(proto::Finished {
                    attempt: a,
                    task_uid: s.task_uid,
                    subtask: s.subtask,
                })
            }
            Report::Failed {
                task,
                error,
                injected,
            } => {
                let s = self.subtask(task);
                let (task_name, cause) = match &error {
                    Error::TaskFailed { task, cause } => (task.clone(), cause.clone()),
                    e => (self.tasks.plan.tasks[task].name.clone(), e.to_string()),
                };
                ToCoordinator::TaskFailed(proto::TaskFailed {
                    attempt: a,
                    task: task_name,
                    cause,
                    task_uid: s.task_uid,
                    subtask: s.subtask,
                    cancelled: matches!(error, Error::Cancelled),
                    injected,
                })
            }
        };
        self.send(kind);
    }

    /// Reports the records of the subtasks this attempt runs here (`local`; a finished
    /// one's count is final) and the figures of this worker's exchange streams.
    fn progress(&self, local: &[bool]) {
        let subtasks = (0..self.tasks.plan.tasks.len())
            .filter(|&t| local[t])
            .map(|t| {
                let s = self.subtask(t);
                proto::SubtaskRecords {
                    task_uid: s.task_uid,
                    subtask: s.subtask,
                    records_in: self.tasks.task_metrics[t]
                        .records_in
                        .load(Ordering::Relaxed),
                }
            })
            .collect();
        let streams = (self.exchange.streams_stats().into_iter())
            .map(|(peer, s)| proto::StreamFigures {
                peer,
                bytes_sent: s.bytes_out,
                bytes_received: s.bytes_in,
                frames_sent: s.frames_out,
                frames_received: s.frames_in,
                permit_waits: s.permit_waits,
                permit_wait_micros: s.permit_wait_ns / 1000,
            })
            .collect();
        self.send(ToCoordinator::Progress(proto::Progress {
            subtasks,
            streams,
        }));
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.tasks.close_writers();
        // No subtask and no writer reads the LSMs any more.
        self.tasks.state_backend.finish();
    }
}

/// The barrier kind a Trigger asks for.
fn barrier_kind(kind: i32) -> BarrierKind {
    match SnapshotKind::try_from(kind).unwrap_or(SnapshotKind::Checkpoint) {
        SnapshotKind::Savepoint => BarrierKind::Savepoint,
        SnapshotKind::Stop => BarrierKind::Stop { drain: false },
        SnapshotKind::StopAndDrain => BarrierKind::Stop { drain: true },
        SnapshotKind::Checkpoint | SnapshotKind::Unspecified => BarrierKind::Checkpoint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_asks_for_the_barrier_kind_it_names() {
        let kinds = [
            (SnapshotKind::Checkpoint, BarrierKind::Checkpoint),
            (SnapshotKind::Unspecified, BarrierKind::Checkpoint),
            (SnapshotKind::Savepoint, BarrierKind::Savepoint),
            (SnapshotKind::Stop, BarrierKind::Stop { drain: false }),
            (
                SnapshotKind::StopAndDrain,
                BarrierKind::Stop { drain: true },
            ),
        ];
        for (sent, want) in kinds {
            assert_eq!(barrier_kind(sent as i32), want);
        }
        assert_eq!(barrier_kind(99), BarrierKind::Checkpoint);
    }
}
