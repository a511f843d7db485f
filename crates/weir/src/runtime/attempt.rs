//! Driving one job attempt: the executor's event loop around the checkpoint coordinator.
//!
//! [`AttemptRun::drive`] waits for task events (acknowledgements, declines, finished and
//! failed tasks), feeds them to the [`Coordinator`] and carries out its decisions: send
//! triggers, write `_metadata`, notify tasks, delete folders. It returns when every task
//! finished or one failed; the executor decides about restarts.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select};

use crate::checkpoint::coordinator::{AbortReason, Action, Coordinator};
use crate::checkpoint::metadata::{SnapshotKind, SourceProgress};
use crate::checkpoint::writer::{EncodedSnapshot, SnapshotJob, SnapshotPayload, TaskAck};
use crate::error::Error;
use crate::runtime::control::{
    confine, savepoint_folder_name, CheckpointStatus, ControlError, ControlErrorKind, Reply,
    Request, SnapshotDone,
};
use crate::runtime::event::BarrierKind;
use crate::runtime::executor::{
    wall_ms, Attempt, AttemptEnd, CompletedCheckpointStats, Executor, JobResult, PROGRESS_TICK,
};
use crate::runtime::task::{Control, TaskEvent};

/// The mutable state of one running attempt, so its event handling reads as small steps.
pub(crate) struct AttemptRun<'e, 'a> {
    pub exec: &'e Executor<'a>,
    pub attempt: Attempt,
    pub attempt_no: u32,
    /// Where the attempt's sources were restored to ([`Executor::write_metadata`]).
    pub baseline: &'e [SourceProgress],
    pub coordinator: &'e mut Coordinator<TaskAck>,
    pub result: &'e mut JobResult,
    pub latest_path: &'e mut Option<PathBuf>,
    pub completed: HashSet<u64>,
    /// Final states of finished sources, with the last checkpoint each handled itself.
    pub standing: Vec<Option<(Arc<EncodedSnapshot>, u64)>>,
    /// Per task, its newest snapshot of frozen state (taken after its end), with its id:
    /// what stands in for the task once it exits.
    pub frozen: Vec<Option<(Arc<EncodedSnapshot>, u64)>>,
    /// Source tasks whose input ended.
    pub inputs_ended: HashSet<usize>,
    /// Snapshots asked for through the job's control, by id, with whom to answer.
    pub waiting: HashMap<u64, (BarrierKind, Reply)>,
}

/// What woke the attempt's loop.
enum Incoming {
    Event(Result<TaskEvent, RecvTimeoutError>),
    Request(Request),
}

impl AttemptRun<'_, '_> {
    pub(crate) fn drive(&mut self, events: &Receiver<TaskEvent>) -> AttemptEnd {
        let mut remaining = self.attempt.handles.len();
        let mut cancelled = false;
        loop {
            self.update_progress();
            let now = Instant::now();
            let actions = self.coordinator.tick(now, wall_ms());
            if let Some(end) = self.carry_out(actions) {
                return end;
            }
            let deadline = self
                .coordinator
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
                    ack,
                }) => {
                    if attempt == self.attempt_no {
                        if let Some(enc) = &ack.frozen {
                            let newer = self.frozen[task]
                                .as_ref()
                                .is_none_or(|(_, id)| *id < checkpoint);
                            if newer {
                                self.frozen[task] = Some((enc.clone(), checkpoint));
                            }
                        }
                    }
                    if attempt == self.attempt_no && self.coordinator.is_pending(checkpoint) {
                        self.coordinator
                            .on_ack(checkpoint, task, ack)
                            .into_iter()
                            .collect()
                    } else {
                        // A late ack of an aborted checkpoint: its files are garbage.
                        if !self.completed.contains(&checkpoint)
                            && !self.coordinator.is_pending(checkpoint)
                        {
                            let _ = self.exec.storage.discard(checkpoint);
                        }
                        Vec::new()
                    }
                }
                Ok(TaskEvent::Decline {
                    attempt,
                    checkpoint,
                    reason,
                }) => {
                    if attempt == self.attempt_no && self.coordinator.is_pending(checkpoint) {
                        self.coordinator
                            .on_decline(checkpoint, AbortReason::Failed(reason))
                    } else {
                        // Declined after its abort (a writer that failed late): whatever it
                        // wrote before failing is garbage, and may be large.
                        if !self.completed.contains(&checkpoint) {
                            let _ = self.exec.storage.discard(checkpoint);
                        }
                        Vec::new()
                    }
                }
                Ok(TaskEvent::InputEnded { attempt, task }) if attempt == self.attempt_no => {
                    self.inputs_ended.insert(task);
                    self.expedite_if_all_ended();
                    Vec::new()
                }
                Ok(TaskEvent::Finished { attempt, task }) if attempt == self.attempt_no => {
                    self.attempt.finished[task] = true;
                    remaining -= 1;
                    self.on_finished(task)
                }
                Ok(TaskEvent::Failed {
                    attempt,
                    task,
                    error,
                }) if attempt == self.attempt_no => {
                    self.attempt.finished[task] = true;
                    remaining -= 1;
                    if !matches!(error, Error::Cancelled) {
                        return AttemptEnd::Failed(error);
                    }
                    // A task saw its neighbours vanish; the root cause follows shortly.
                    cancelled = true;
                    Vec::new()
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

    /// A task ended. Its end was committed by a checkpoint of its frozen state (the final
    /// checkpoint, or a stopping savepoint); that snapshot stands in for it in every later
    /// checkpoint, so checkpoints go on while other tasks run.
    fn on_finished(&mut self, task: usize) -> Vec<Action<TaskAck>> {
        let Some(frozen) = self.frozen[task].take() else {
            // Cannot happen (a task exits only after such a checkpoint); stay safe anyway.
            return self.coordinator.on_task_finished();
        };
        self.standing[task] = Some(frozen);
        for id in self.coordinator.pending_ids() {
            self.submit_standing(task, id);
        }
        let running = self
            .attempt
            .sources
            .iter()
            .filter(|&&s| !self.attempt.finished[s])
            .count();
        self.coordinator.on_source_finished(running);
        Vec::new()
    }

    /// Writes finished task `task`'s standing state into checkpoint `id`, if it has one and
    /// did not emit that checkpoint's barrier itself.
    fn submit_standing(&self, task: usize, id: u64) {
        let Some((encoded, last)) = &self.standing[task] else {
            return;
        };
        if id <= *last {
            return;
        }
        let t = &self.exec.plan.tasks[task];
        let _ = self.exec.writer_tx.send(SnapshotJob {
            attempt: self.attempt_no,
            task,
            subtask: t.subtask,
            parallelism: t.parallelism,
            checkpoint_id: id,
            snapshot: SnapshotPayload::Encoded(encoded.clone()),
            sync: Duration::ZERO,
            alignment: Duration::ZERO,
            frozen: false,
        });
    }

    /// Once every running source's input ended, the final checkpoint is due at once.
    fn expedite_if_all_ended(&mut self) {
        let all = self
            .attempt
            .sources
            .iter()
            .all(|s| self.attempt.finished[*s] || self.inputs_ended.contains(s));
        if all && !self.inputs_ended.is_empty() {
            self.coordinator.expedite();
        }
    }

    /// A control request: trigger the snapshot it asks for and remember whom to answer.
    fn on_request(&mut self, request: Request) -> Vec<Action<TaskAck>> {
        let failed = |m: String| ControlError::new(ControlErrorKind::Failed, m);
        let cfg = self.exec.cfg;
        // Savepoints go to a folder of their own inside the savepoint directory.
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
            .coordinator
            .trigger_forced(kind, Instant::now(), wall_ms())
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
            if let Err(e) = self.exec.storage.redirect(barrier.id, target) {
                let _ = reply.send(Err(failed(e.to_string())));
                return self
                    .coordinator
                    .on_decline(barrier.id, AbortReason::Failed(e.to_string()));
            }
        }
        if let BarrierKind::Stop { .. } = kind {
            self.exec.control.update(|s| s.state = "stopping".into());
        }
        self.waiting.insert(barrier.id, (kind, reply));
        vec![Action::Trigger(barrier)]
    }

    /// Answers every request still waiting: the attempt ended before their snapshots.
    pub(crate) fn fail_waiting(&mut self, why: &str) {
        for (id, (_, reply)) in self.waiting.drain() {
            let _ = reply.send(Err(ControlError::new(
                ControlErrorKind::Failed,
                format!("snapshot {id} did not complete: {why}"),
            )));
        }
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
    fn carry_out(&mut self, mut actions: Vec<Action<TaskAck>>) -> Option<AttemptEnd> {
        actions.reverse();
        while let Some(action) = actions.pop() {
            let more = match action {
                Action::Trigger(b) => {
                    for &s in &self.attempt.sources {
                        if !self.attempt.finished[s] {
                            let _ = self.attempt.controls[s].send(Control::Trigger(b));
                        }
                    }
                    for task in 0..self.standing.len() {
                        self.submit_standing(task, b.id);
                    }
                    Vec::new()
                }
                Action::WriteMetadata {
                    barrier,
                    acks,
                    started,
                } => self.complete(barrier, &acks, started),
                Action::Abort { id, reason } => {
                    if let Some((kind, reply)) = self.waiting.remove(&id) {
                        let what = match kind {
                            BarrierKind::Checkpoint => "checkpoint",
                            _ => "savepoint",
                        };
                        let answer = match (kind, &reason, self.newest_completed()) {
                            // A newer checkpoint completed first: it covers everything the
                            // request asked for, so it is the answer.
                            (BarrierKind::Checkpoint, AbortReason::Subsumed, Some(done)) => {
                                Ok(done)
                            }
                            _ => Err(ControlError::new(
                                ControlErrorKind::Failed,
                                format!("{what} {id} {reason}"),
                            )),
                        };
                        let _ = reply.send(answer);
                        self.exec.control.update(|s| s.state = "running".into());
                    } else if reason.is_failure() {
                        self.result.failed_checkpoints += 1;
                        self.result
                            .notices
                            .push(format!("checkpoint {id} {reason}"));
                    }
                    self.attempt.broadcast(Control::Aborted(id));
                    let _ = self.exec.storage.discard(id);
                    self.expedite_if_all_ended();
                    Vec::new()
                }
                Action::NotifyComplete(id) => {
                    self.attempt.broadcast(Control::Complete(id));
                    Vec::new()
                }
                Action::Discard(id) => {
                    let _ = self.exec.storage.discard(id);
                    Vec::new()
                }
                Action::FailJob(msg) => {
                    return Some(AttemptEnd::Failed(Error::CheckpointFailures(msg)));
                }
            };
            actions.extend(more.into_iter().rev());
        }
        None
    }

    /// The newest checkpoint this attempt completed, as a control request's answer.
    fn newest_completed(&self) -> Option<SnapshotDone> {
        let id = self.result.checkpoints.last()?.id;
        let path = crate::storage::absolute_location(self.latest_path.as_ref()?);
        Some(SnapshotDone { id, path })
    }

    /// Every task acknowledged: write `_metadata` (which completes the checkpoint).
    fn complete(
        &mut self,
        barrier: crate::runtime::event::CheckpointBarrier,
        acks: &[TaskAck],
        started: Instant,
    ) -> Vec<Action<TaskAck>> {
        let id = barrier.id;
        let kind = match barrier.kind {
            BarrierKind::Checkpoint => SnapshotKind::Checkpoint,
            BarrierKind::Savepoint => SnapshotKind::Savepoint,
            BarrierKind::Stop { .. } => SnapshotKind::StopSavepoint,
        };
        match self
            .exec
            .write_metadata(id, barrier.timestamp_ms, acks, kind, self.baseline)
        {
            Ok((stats, source_records)) => {
                self.completed.insert(id);
                let path = self.exec.storage.checkpoint_path(id);
                if let Some((_, reply)) = self.waiting.remove(&id) {
                    // Absolute: whoever asked may sit in another folder (or machine).
                    let path = crate::storage::absolute_location(&path);
                    let _ = reply.send(Ok(SnapshotDone { id, path }));
                }
                if kind != SnapshotKind::Checkpoint {
                    // A savepoint is the user's: not the job's recovery point, not retained.
                    if kind == SnapshotKind::StopSavepoint {
                        self.result.stopped_with_savepoint = Some(path.clone());
                    }
                    self.result.savepoints.push(path.clone());
                    self.exec.control.update(|s| s.savepoints.push(path));
                    return self.coordinator.on_metadata_written(id, Instant::now());
                }
                *self.latest_path = Some(path.clone());
                // A gated failure waits for a checkpoint that got the sources further than
                // this attempt's restore: its restart then resumes from real progress.
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
                self.exec.control.update(|s| {
                    s.checkpoints.push(CheckpointStatus {
                        id,
                        path,
                        duration_ms: duration.as_millis() as u64,
                        bytes: stats.bytes,
                    });
                    let n = s.checkpoints.len();
                    s.checkpoints.drain(..n.saturating_sub(10));
                });
                let m = &self.exec.metrics;
                m.checkpoints_completed.fetch_add(1, Ordering::Relaxed);
                m.last_checkpoint_micros
                    .store(duration.as_micros() as u64, Ordering::Relaxed);
                let max = |f: fn(&TaskAck) -> u64| {
                    Duration::from_micros(acks.iter().map(f).max().unwrap_or(0))
                };
                self.result.checkpoints.push(CompletedCheckpointStats {
                    id,
                    duration,
                    bytes: stats.bytes,
                    max_sync: max(|a| a.stats.sync_micros),
                    max_alignment: max(|a| a.stats.alignment_micros),
                    source_records,
                });
                self.coordinator.on_metadata_written(id, Instant::now())
            }
            Err(e) => self.coordinator.on_metadata_failed(id, e.to_string()),
        }
    }
}
