//! Driving one job attempt: the I/O edge of the checkpoint protocol.
//!
//! [`AttemptRun::drive`] waits for task events (acknowledgements, declines, ended inputs,
//! finished and failed tasks) and control requests, feeds them to the pure
//! [`AttemptCoordinator`], and carries out what it decides ([`AttemptAction`]): send
//! triggers and notifications, hand frozen state to the writers, write `_metadata`, answer
//! requests, delete folders. The rules themselves (and their tests) live in
//! `checkpoint::coordinator`; what stays here is threads, channels, storage and metrics.
//! It returns when every task finished or one failed; the executor decides about restarts.
//!
//! Invariant: the loop reaches tasks only through an [`Attempt`]'s control senders and its
//! `write_frozen`, and hears them only through [`TaskEvent`]s — the same for tasks in this
//! process (`in_memory.rs`) and on a cluster's workers, whose relay
//! (`runtime::worker::relay`) stands between both.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select};

use crate::checkpoint::coordinator::attempt::{
    Answer, AttemptAction, AttemptCoordinator, JobPhase,
};
use crate::checkpoint::coordinator::Coordinator;
use crate::checkpoint::metadata::{SnapshotKind, SourceProgress};
use crate::checkpoint::shared;
use crate::checkpoint::writer::{Frozen, TaskAck};
use crate::error::Error;
use crate::runtime::control::{
    confine, savepoint_folder_name, CheckpointStatus, ControlError, ControlErrorKind, Reply,
    Request, SnapshotDone,
};
use crate::runtime::coordinator::executor::{
    wall_ms, AttemptEnd, CompletedCheckpointStats, Executor, JobResult, PROGRESS_TICK,
};
use crate::runtime::event::{BarrierKind, CheckpointBarrier};
use crate::runtime::task::{Control, TaskEvent};
use crate::runtime::worker::Subtasks;

/// A deployed attempt, as its loop drives it: its tasks as the coordinator reaches them
/// and how an exited task's frozen snapshot gets written.
pub(crate) struct Attempt {
    /// Per task of the plan, the sender of its controls (they reach the task through its
    /// worker's relay), the plan's source tasks, which tasks ended, and the threads that
    /// carry the controls (they end once the attempt is cancelled).
    pub(crate) subtasks: Subtasks,
    /// Has exited task `task`'s frozen snapshot written into checkpoint `id` by the worker
    /// that keeps it (FLIP-147; the state never travels through the coordinator).
    #[allow(clippy::type_complexity)]
    pub(crate) write_frozen: Box<dyn Fn(usize, u64, Frozen)>,
}

impl Attempt {
    /// Cancels every task and waits for the threads that carry its controls.
    pub(crate) fn cancel_and_join(self) {
        drop(self.write_frozen);
        self.subtasks.cancel_and_join();
    }
}

/// The attempt's checkpoint decisions: acknowledgements are [`TaskAck`]s, frozen state is
/// encoded once and shared (or kept by a worker), requests are answered on their [`Reply`]
/// channel.
type Checkpoints<'e> = AttemptCoordinator<'e, TaskAck, Frozen, Reply>;

/// One decision of [`Checkpoints`], for [`AttemptRun::carry_out`].
type Step = AttemptAction<TaskAck, Frozen, Reply>;

/// The mutable state of one running attempt, so its event handling reads as small steps.
pub(crate) struct AttemptRun<'e, 'a> {
    exec: &'e Executor<'a>,
    attempt: Attempt,
    /// Where the attempt's sources were restored to ([`Executor::write_metadata`]).
    baseline: &'e [SourceProgress],
    checkpoints: Checkpoints<'e>,
    result: &'e mut JobResult,
    latest_path: &'e mut Option<PathBuf>,
}

/// What woke the attempt's loop.
enum Incoming {
    Event(Result<TaskEvent, RecvTimeoutError>),
    Request(Request),
}

impl Executor<'_> {
    /// Drives attempt `attempt_no` until every task finished or one failed; hands back its
    /// tasks, for the caller to cancel and join.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_attempt(
        &self,
        attempt: Attempt,
        attempt_no: u32,
        baseline: &[SourceProgress],
        coordinator: &mut Coordinator<TaskAck>,
        events: &Receiver<TaskEvent>,
        result: &mut JobResult,
        latest_path: &mut Option<PathBuf>,
    ) -> (Attempt, AttemptEnd) {
        let tasks = self.plan.tasks.len();
        let sources = attempt.subtasks.sources.clone();
        let (checkpoints, stale) =
            Checkpoints::start(coordinator, attempt_no, tasks, sources, Instant::now());
        let mut run = AttemptRun {
            exec: self,
            attempt,
            baseline,
            checkpoints,
            result,
            latest_path,
        };
        let end = run.carry_out(stale).unwrap_or_else(|| run.drive(events));
        let why = match &end {
            AttemptEnd::Finished => "the job finished first".to_string(),
            AttemptEnd::Failed(e) => format!(
                "the job attempt failed ({e}); it restarts from its latest checkpoint if its \
                 restart strategy allows"
            ),
        };
        let answers = run.checkpoints.end(&why);
        run.carry_out(answers);
        (run.attempt, end)
    }
}

impl AttemptRun<'_, '_> {
    fn drive(&mut self, events: &Receiver<TaskEvent>) -> AttemptEnd {
        // Every task of the plan, wherever it runs, reports its end here.
        let mut remaining = self.attempt.subtasks.finished.len();
        let mut cancelled = false;
        let current = self.checkpoints.attempt();
        loop {
            // Another run took the job folder over (an S3 lease): stop at once, before
            // anything else is written, instead of failing checkpoint after checkpoint.
            if let Some(lost) = self.exec.storage.ownership_lost() {
                return AttemptEnd::Failed(Error::Storage(lost));
            }
            self.update_progress();
            let now = Instant::now();
            let actions = self.checkpoints.tick(now, wall_ms());
            if let Some(end) = self.carry_out(actions) {
                return end;
            }
            let deadline = self
                .checkpoints
                .next_deadline()
                .unwrap_or(now + PROGRESS_TICK)
                .min(now + PROGRESS_TICK);
            let incoming = {
                let requests = &self.exec.control.requests;
                let mut sel = Select::new();
                let from_tasks = sel.recv(events);
                sel.recv(requests);
                match sel.select_deadline(deadline) {
                    Err(_) => Incoming::Event(Err(RecvTimeoutError::Timeout)),
                    Ok(op) if op.index() == from_tasks => {
                        Incoming::Event(op.recv(events).map_err(|_| RecvTimeoutError::Disconnected))
                    }
                    Ok(op) => match op.recv(requests) {
                        Ok(r) => Incoming::Request(r),
                        Err(_) => Incoming::Event(Err(RecvTimeoutError::Timeout)),
                    },
                }
            };
            let event = match incoming {
                Incoming::Request(r) => {
                    let actions = self.on_request(r);
                    if let Some(end) = self.carry_out(actions) {
                        return end;
                    }
                    continue;
                }
                Incoming::Event(e) => e,
            };
            let actions = match event {
                Ok(TaskEvent::Ack {
                    attempt,
                    task,
                    checkpoint,
                    mut ack,
                }) => {
                    ack.times.ack_us = crate::clock::wall_us();
                    let frozen = ack.frozen.clone();
                    self.checkpoints
                        .on_ack(attempt, checkpoint, task, frozen, ack)
                }
                Ok(TaskEvent::Decline {
                    attempt,
                    checkpoint,
                    reason,
                }) => self.checkpoints.on_decline(attempt, checkpoint, reason),
                Ok(TaskEvent::InputEnded { attempt, task }) => {
                    self.checkpoints.on_input_ended(attempt, task);
                    Vec::new()
                }
                Ok(TaskEvent::Finished { attempt, task }) if attempt == current => {
                    self.attempt.subtasks.finished[task] = true;
                    remaining -= 1;
                    self.checkpoints.on_finished(attempt, task)
                }
                Ok(TaskEvent::Failed {
                    attempt,
                    task,
                    error,
                }) if attempt == current => {
                    self.attempt.subtasks.finished[task] = true;
                    self.checkpoints.on_failed(attempt, task);
                    remaining -= 1;
                    if !matches!(error, Error::Cancelled) {
                        return AttemptEnd::Failed(error);
                    }
                    // A task saw its neighbours vanish; the root cause follows shortly.
                    cancelled = true;
                    Vec::new()
                }
                #[cfg(feature = "cluster")]
                Ok(TaskEvent::AttemptFailed { attempt, error }) if attempt == current => {
                    return AttemptEnd::Failed(error);
                }
                Ok(_) => Vec::new(), // events of an older attempt
                Err(RecvTimeoutError::Timeout) => Vec::new(),
                Err(RecvTimeoutError::Disconnected) => return AttemptEnd::Failed(Error::Cancelled),
            };
            if let Some(end) = self.carry_out(actions) {
                return end;
            }
            if remaining == 0 {
                // Every task ended; if some only saw their neighbours vanish, the attempt
                // did not finish (never report success for a run that lost tasks).
                return if cancelled {
                    AttemptEnd::Failed(Error::Cancelled)
                } else {
                    AttemptEnd::Finished
                };
            }
        }
    }

    /// A control request: trigger the snapshot it asks for, in the folder it names.
    fn on_request(&mut self, request: Request) -> Vec<Step> {
        let failed = |m: String| ControlError::new(ControlErrorKind::Failed, m);
        let cfg = self.exec.cfg;
        // Savepoints go to a folder of their own inside the savepoint directory (on a
        // cluster too: created here once, and the Trigger names it to every worker).
        let (kind, folder, reply) = match request {
            Request::Checkpoint { reply } => (BarrierKind::Checkpoint, Ok(None), reply),
            Request::Savepoint { dir, reply } => (
                BarrierKind::Savepoint,
                confine(&cfg.savepoint_dir, dir.as_deref()).map(Some),
                reply,
            ),
            Request::Stop { dir, drain, reply } => (
                BarrierKind::Stop { drain },
                confine(&cfg.savepoint_dir, dir.as_deref()).map(Some),
                reply,
            ),
        };
        let folder = match folder {
            Ok(folder) => folder,
            Err(e) => {
                let _ = reply.send(Err(e));
                return Vec::new();
            }
        };
        let barrier = match self
            .checkpoints
            .trigger_request(kind, Instant::now(), wall_ms())
        {
            Ok(b) => b,
            Err(e) => {
                let _ = reply.send(Err(ControlError::new(
                    ControlErrorKind::NotRunning,
                    format!("cannot take a snapshot: {e}"),
                )));
                return Vec::new();
            }
        };
        if let Some(folder) = folder {
            let target = folder.join(savepoint_folder_name(&cfg.name, barrier.id));
            let redirected = self
                .exec
                .storage
                .redirect(barrier.id, &cfg.savepoint_dir, target);
            if let Err(e) = redirected {
                let _ = reply.send(Err(failed(e.to_string())));
                let attempt = self.checkpoints.attempt();
                return self
                    .checkpoints
                    .on_decline(attempt, barrier.id, e.to_string());
            }
        }
        self.checkpoints.await_request(barrier, reply)
    }

    /// Adds the records sources emitted since the last call to the job metrics.
    fn update_progress(&mut self) {
        let total = self.exec.source_records();
        self.exec
            .metrics
            .source_records
            .store(total, Ordering::Relaxed);
        self.exec.control.update(|s| s.source_records = total);
    }

    /// Carries out the coordinator's decisions (which may produce more); returns `Some`
    /// when one of them ends the attempt.
    fn carry_out(&mut self, mut actions: Vec<Step>) -> Option<AttemptEnd> {
        actions.reverse();
        while let Some(action) = actions.pop() {
            let more = match action {
                Step::Trigger { barrier, sources } => {
                    self.exec
                        .control
                        .update(|s| s.on_checkpoint_triggered(&barrier));
                    for s in sources {
                        // Unaligned: a source blocked on a full channel stops waiting.
                        let m = &self.exec.task_metrics[s];
                        m.barrier_requested.store(true, Ordering::Relaxed);
                        let _ = self.attempt.subtasks.controls[s].send(Control::Trigger(barrier));
                    }
                    Vec::new()
                }
                Step::WriteFrozen {
                    task,
                    checkpoint,
                    snapshot,
                } => {
                    self.write_frozen(task, checkpoint, snapshot);
                    Vec::new()
                }
                Step::WriteMetadata {
                    barrier,
                    acks,
                    started,
                } => self.complete(barrier, &acks, started),
                Step::Answer { reply, answer } => {
                    let _ = reply.send(self.answer(answer));
                    Vec::new()
                }
                Step::Phase(phase) => {
                    let state = match phase {
                        JobPhase::Running => "running",
                        JobPhase::Stopping => "stopping",
                    };
                    self.exec.control.update(|s| s.state = state.into());
                    Vec::new()
                }
                Step::ReportFailure { id, reason } => {
                    let now = wall_ms();
                    (self.exec.control).update(|s| s.on_checkpoint_aborted(id, &reason, now));
                    self.result.failed_checkpoints += 1;
                    self.result
                        .notices
                        .push(format!("checkpoint {id} {reason}"));
                    Vec::new()
                }
                Step::Abort(id) => {
                    let now = wall_ms();
                    (self.exec.control).update(|s| s.on_checkpoint_given_up(id, now));
                    self.attempt.subtasks.broadcast(Control::Aborted(id));
                    // Never confirmed, so no task builds on its files: they go at once.
                    let _ = shared::discard(&self.exec.storage, id);
                    self.release_shared();
                    Vec::new()
                }
                Step::NotifyComplete(id) => {
                    self.attempt.subtasks.broadcast(Control::Complete(id));
                    self.release_shared();
                    Vec::new()
                }
                Step::Discard(id) => {
                    // Retention: the shared files it released wait for the checkpoints
                    // already triggered, which may build on them.
                    if let Ok(files) = shared::discard_holding(&self.exec.storage, id) {
                        let next = self.checkpoints.next_checkpoint_id();
                        self.exec.shared.hold(next, files);
                    }
                    self.release_shared();
                    Vec::new()
                }
                Step::FailJob(msg) => {
                    return Some(AttemptEnd::Failed(Error::CheckpointFailures(msg)));
                }
            };
            actions.extend(more.into_iter().rev());
        }
        None
    }

    /// Deletes the shared files retention released once no checkpoint that may build on
    /// them is in flight (best effort: what stays is swept at the end of the run).
    fn release_shared(&self) {
        let oldest = self.checkpoints.oldest_pending();
        let _ = self.exec.shared.release(&self.exec.storage, oldest);
    }

    /// Has exited task `task`'s frozen state written into checkpoint `id` by the worker
    /// that ran the task (and, on a cluster, kept it).
    fn write_frozen(&self, task: usize, id: u64, snapshot: Frozen) {
        (self.attempt.write_frozen)(task, id, snapshot);
    }

    /// A request's answer, as the control channel carries it.
    fn answer(&self, answer: Answer) -> Result<SnapshotDone, ControlError> {
        match answer {
            Answer::Done(id) => Ok(SnapshotDone {
                id,
                // Absolute: whoever asked may sit in another folder (or machine).
                path: crate::storage::absolute_location(&self.exec.storage.checkpoint_path(id)),
            }),
            Answer::Failed(why) => Err(ControlError::new(ControlErrorKind::Failed, why)),
        }
    }

    /// Every task acknowledged: write `_metadata` (which completes the checkpoint).
    fn complete(
        &mut self,
        barrier: CheckpointBarrier,
        acks: &[TaskAck],
        started: Instant,
    ) -> Vec<Step> {
        let id = barrier.id;
        let kind = SnapshotKind::of(barrier.kind);
        let (stats, source_records) =
            match self
                .exec
                .write_metadata(id, barrier.timestamp_ms, acks, kind, self.baseline)
            {
                Ok(written) => written,
                Err(e) => return self.checkpoints.on_metadata_failed(id, e.to_string()),
            };
        let path = self.exec.storage.checkpoint_path(id);
        let tasks: Vec<_> = acks.iter().map(|a| a.stats).collect();
        let times: Vec<_> = acks.iter().map(|a| a.times).collect();
        let (bytes, now) = (stats.bytes, wall_ms());
        self.exec
            .control
            .update(|s| s.on_checkpoint_completed(id, &path, bytes, &tasks, &times, now));
        self.exec.control.update(|s| s.on_state_sizes(id, acks));
        if kind != SnapshotKind::Checkpoint {
            // A savepoint is the user's: not the job's recovery point, not retained.
            if kind == SnapshotKind::StopSavepoint {
                self.result.stopped_with_savepoint = Some(path.clone());
            }
            self.result.savepoints.push(path.clone());
            self.exec.control.update(|s| s.savepoints.push(path));
            return self.checkpoints.on_metadata_written(id, Instant::now());
        }
        *self.latest_path = Some(path.clone());
        // A gated failure waits for a checkpoint that got the sources further than this
        // attempt's restore: its restart then resumes from real progress.
        let restored_at: u64 = self.baseline.iter().map(|s| s.records).sum();
        if let Some(inj) = self
            .exec
            .injector
            .as_ref()
            .filter(|_| source_records > restored_at)
        {
            inj.on_checkpoint_completed();
        }
        let duration = started.elapsed();
        let in_flight_bytes = acks
            .iter()
            .flat_map(|a| &a.channel_state)
            .map(|c| c.in_flight_bytes)
            .sum();
        let unaligned_tasks = acks.iter().filter(|a| a.unaligned).count() as u32;
        self.exec.control.update(|s| {
            s.checkpoints.push(CheckpointStatus {
                id,
                path,
                duration_ms: duration.as_millis() as u64,
                bytes: stats.bytes,
                unaligned: unaligned_tasks > 0,
                alignment_ms: stats.alignment_micros / 1000,
                in_flight_bytes,
            });
            let n = s.checkpoints.len();
            s.checkpoints.drain(..n.saturating_sub(10));
            if unaligned_tasks > 0 {
                s.on_checkpoint_unaligned(id, in_flight_bytes);
            }
        });
        let m = &self.exec.metrics;
        m.checkpoints_completed.fetch_add(1, Ordering::Relaxed);
        m.last_checkpoint_micros
            .store(duration.as_micros() as u64, Ordering::Relaxed);
        let max =
            |f: fn(&TaskAck) -> u64| Duration::from_micros(acks.iter().map(f).max().unwrap_or(0));
        self.result.checkpoints.push(CompletedCheckpointStats {
            id,
            duration,
            bytes: stats.bytes,
            max_sync: max(|a| a.stats.sync_micros),
            max_alignment: max(|a| a.stats.alignment_micros),
            source_records,
            unaligned_tasks,
            in_flight_records: acks
                .iter()
                .flat_map(|a| &a.channel_state)
                .map(|c| c.records)
                .sum(),
            in_flight_bytes,
        });
        self.checkpoints.on_metadata_written(id, Instant::now())
    }
}
