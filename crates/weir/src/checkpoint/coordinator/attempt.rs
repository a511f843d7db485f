//! The checkpoint rules of one job attempt, free of threads and I/O: what the attempt's
//! event loop (`runtime::coordinator::attempt`) does with each event it receives, decided here and
//! returned as [`AttemptAction`]s for the loop to carry out (Flink's
//! `CheckpointCoordinator` receiving acknowledgements, declines, finished tasks and
//! savepoint requests). Built around the core [`Coordinator`], which decides when to
//! trigger and when a checkpoint is complete; this adds what depends on the attempt's tasks.
//!
//! Rules (each is a unit test in `attempt/tests.rs`):
//! * **Frozen snapshots acknowledge for finished tasks** (FLIP-147). A task whose input
//!   ended (or that is stopping) snapshots frozen state; the newest such snapshot is kept
//!   per task, and once the task exits it *stands in* for it: it is written into every
//!   checkpoint still pending and every later one, except those whose barrier the task
//!   handled itself. A task that exits with no frozen snapshot stops all triggering and
//!   aborts what is pending (cannot happen; kept safe).
//! * **Late acknowledgements are discarded.** An acknowledgement or decline of another
//!   attempt, or of a checkpoint no longer pending, changes nothing; if the checkpoint did
//!   not complete in this attempt, what it wrote is garbage and its files are deleted.
//! * **The final checkpoint is expedited.** Once every source has ended its input (or
//!   exited), the next checkpoint is due at once ([`Coordinator::expedite`]); again after
//!   an abort, so a failed final checkpoint is retried without waiting an interval.
//! * **Savepoint and checkpoint requests are answered** once: with the snapshot when it
//!   completes; with the newer checkpoint that subsumed a requested checkpoint (it covers
//!   everything asked for); with the reason when it is aborted or the attempt ends first.
//!   A failed request is reported to whoever asked, not counted as a failed checkpoint.
//!   A stop shows the job as stopping until its savepoint completes or is aborted.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use super::{AbortReason, Action, Coordinator};
use crate::checkpoint::barrier::{BarrierKind, CheckpointBarrier};

/// What the attempt's event loop must do, in the order returned.
#[derive(Debug)]
pub enum AttemptAction<A, S, R> {
    /// Inject `barrier` at these source tasks (those still running).
    Trigger {
        /// The barrier.
        barrier: CheckpointBarrier,
        /// The source tasks to inject it at.
        sources: Vec<usize>,
    },
    /// Write exited task `task`'s frozen state into checkpoint `checkpoint`, where it
    /// acknowledges for the task.
    WriteFrozen {
        /// The exited task.
        task: usize,
        /// The checkpoint to write it into.
        checkpoint: u64,
        /// Its frozen state.
        snapshot: S,
    },
    /// Every task acknowledged: write the metadata, then report
    /// [`AttemptCoordinator::on_metadata_written`] or [`AttemptCoordinator::on_metadata_failed`].
    WriteMetadata {
        /// The barrier of the checkpoint.
        barrier: CheckpointBarrier,
        /// The acknowledgements, indexed by task.
        acks: Vec<A>,
        /// When the checkpoint was triggered.
        started: Instant,
    },
    /// Answer a request for a snapshot.
    Answer {
        /// Whom to answer.
        reply: R,
        /// The answer.
        answer: Answer,
    },
    /// Show the job in this phase.
    Phase(JobPhase),
    /// A checkpoint nobody asked for failed: count it and tell the user.
    ReportFailure {
        /// The checkpoint.
        id: u64,
        /// Why it failed.
        reason: AbortReason,
    },
    /// Tell every task that checkpoint `id` will never complete, and delete its files
    /// (why was answered or reported just before, when anyone needs to know).
    Abort(u64),
    /// Tell every task that the checkpoint completed.
    NotifyComplete(u64),
    /// Delete the checkpoint's files: beyond the retention count, or written for a
    /// checkpoint that never completed (a late acknowledgement, a stale attempt's).
    Discard(u64),
    /// Too many consecutive failures: fail the job with this message.
    FailJob(String),
}

/// The answer to a request for a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// This snapshot (the one asked for, or a newer checkpoint that covers it) completed.
    Done(u64),
    /// It did not complete, and why.
    Failed(String),
}

/// The job's phase, as the control endpoint shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobPhase {
    /// Running (again, after a requested snapshot was aborted).
    Running,
    /// Stopping with a savepoint.
    Stopping,
}

/// One attempt's checkpoint state around the job's [`Coordinator`]; see the module docs.
/// `A` is a task's acknowledgement, `S` its frozen state (cheap to clone), `R` whom to
/// answer a request.
pub struct AttemptCoordinator<'c, A, S, R> {
    coordinator: &'c mut Coordinator<A>,
    attempt: u32,
    /// The source tasks.
    sources: Vec<usize>,
    /// Per task, whether it exited (finished or failed).
    exited: Vec<bool>,
    /// Source tasks whose input ended.
    inputs_ended: HashSet<usize>,
    /// Per task, its newest frozen snapshot and the checkpoint it was taken for.
    frozen: Vec<Option<(S, u64)>>,
    /// Per exited task, the frozen snapshot standing in for it, with the last checkpoint
    /// it handled itself.
    standing: Vec<Option<(S, u64)>>,
    /// Checkpoints and savepoints completed in this attempt.
    completed: HashSet<u64>,
    /// The newest checkpoint (not savepoint) completed in this attempt.
    newest: Option<u64>,
    /// Requests waiting for their snapshot, by id.
    waiting: HashMap<u64, (BarrierKind, R)>,
}

impl<'c, A, S: Clone, R> AttemptCoordinator<'c, A, S, R> {
    /// Attempt `attempt` with `tasks` tasks, of which `sources` are sources, starts at
    /// `now`. Checkpoints the previous attempt left pending are forgotten; the returned
    /// actions delete their files.
    pub fn start(
        coordinator: &'c mut Coordinator<A>,
        attempt: u32,
        tasks: usize,
        sources: Vec<usize>,
        now: Instant,
    ) -> (Self, Vec<AttemptAction<A, S, R>>) {
        let stale = coordinator.start_attempt(tasks, now);
        let run = AttemptCoordinator {
            coordinator,
            attempt,
            sources,
            exited: vec![false; tasks],
            inputs_ended: HashSet::new(),
            frozen: (0..tasks).map(|_| None).collect(),
            standing: (0..tasks).map(|_| None).collect(),
            completed: HashSet::new(),
            newest: None,
            waiting: HashMap::new(),
        };
        (run, stale.into_iter().map(AttemptAction::Discard).collect())
    }

    /// The attempt's number.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The id the next checkpoint will get: every checkpoint below it was triggered.
    pub fn next_checkpoint_id(&self) -> u64 {
        self.coordinator.next_checkpoint_id()
    }

    /// The oldest checkpoint in flight, if any.
    pub fn oldest_pending(&self) -> Option<u64> {
        self.coordinator.pending_ids().first().copied()
    }

    /// When [`tick`](Self::tick) next has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.coordinator.next_deadline()
    }

    /// Triggers a checkpoint if one is due and aborts timed-out ones.
    pub fn tick(&mut self, now: Instant, wall_ms: u64) -> Vec<AttemptAction<A, S, R>> {
        let actions = self.coordinator.tick(now, wall_ms);
        self.map(actions)
    }

    /// Task `task` of attempt `attempt` acknowledged checkpoint `id`; `frozen` is its
    /// frozen state when the snapshot captured one.
    pub fn on_ack(
        &mut self,
        attempt: u32,
        id: u64,
        task: usize,
        frozen: Option<S>,
        ack: A,
    ) -> Vec<AttemptAction<A, S, R>> {
        let current = attempt == self.attempt;
        if let (true, Some(snapshot), Some(slot)) = (current, frozen, self.frozen.get_mut(task)) {
            if slot.as_ref().is_none_or(|(_, at)| *at < id) {
                *slot = Some((snapshot, id));
            }
        }
        if current && self.coordinator.is_pending(id) {
            let actions = self.coordinator.on_ack(id, task, ack).into_iter().collect();
            self.map(actions)
        } else if !self.completed.contains(&id) && !self.coordinator.is_pending(id) {
            // A late ack of an aborted checkpoint: its files are garbage.
            vec![AttemptAction::Discard(id)]
        } else {
            Vec::new()
        }
    }

    /// A task of attempt `attempt` could not take or write its snapshot for `id`.
    pub fn on_decline(
        &mut self,
        attempt: u32,
        id: u64,
        reason: String,
    ) -> Vec<AttemptAction<A, S, R>> {
        if attempt == self.attempt && self.coordinator.is_pending(id) {
            let actions = self.coordinator.on_decline(id, AbortReason::Failed(reason));
            self.map(actions)
        } else if !self.completed.contains(&id) {
            // Declined after its abort (a writer that failed late): whatever it wrote
            // before failing is garbage, and may be large.
            vec![AttemptAction::Discard(id)]
        } else {
            Vec::new()
        }
    }

    /// Source task `task` of attempt `attempt` ended its input.
    pub fn on_input_ended(&mut self, attempt: u32, task: usize) {
        if attempt == self.attempt {
            self.inputs_ended.insert(task);
            self.expedite_if_all_ended();
        }
    }

    /// Task `task` of attempt `attempt` exited after its end was committed: its newest
    /// frozen snapshot stands in for it from now on.
    pub fn on_finished(&mut self, attempt: u32, task: usize) -> Vec<AttemptAction<A, S, R>> {
        if attempt != self.attempt || task >= self.exited.len() {
            return Vec::new();
        }
        self.exited[task] = true;
        let Some(frozen) = self.frozen[task].take() else {
            // Cannot happen (a task exits only after such a checkpoint); stay safe anyway.
            let actions = self.coordinator.on_task_finished();
            return self.map(actions);
        };
        self.standing[task] = Some(frozen);
        let mut out = Vec::new();
        for id in self.coordinator.pending_ids() {
            self.write_standing(task, id, &mut out);
        }
        let running = self.sources.iter().filter(|&&s| !self.exited[s]).count();
        self.coordinator.on_source_finished(running);
        out
    }

    /// Task `task` of attempt `attempt` failed: no barrier is injected at it any more.
    pub fn on_failed(&mut self, attempt: u32, task: usize) {
        if attempt == self.attempt {
            if let Some(e) = self.exited.get_mut(task) {
                *e = true;
            }
        }
    }

    /// A snapshot of `kind` asked for by the user: its barrier, or why none can be
    /// triggered now. Once the caller has prepared its folder, it hands the request to
    /// [`await_request`](Self::await_request) (or, failing, declines it).
    pub fn trigger_request(
        &mut self,
        kind: BarrierKind,
        now: Instant,
        wall_ms: u64,
    ) -> Result<CheckpointBarrier, String> {
        self.coordinator.trigger_forced(kind, now, wall_ms)
    }

    /// The requested snapshot `barrier` goes ahead: inject it, and answer `reply` when it
    /// completes or fails.
    pub fn await_request(
        &mut self,
        barrier: CheckpointBarrier,
        reply: R,
    ) -> Vec<AttemptAction<A, S, R>> {
        let mut out = Vec::new();
        if let BarrierKind::Stop { .. } = barrier.kind {
            out.push(AttemptAction::Phase(JobPhase::Stopping));
        }
        self.waiting.insert(barrier.id, (barrier.kind, reply));
        out.extend(self.map(vec![Action::Trigger(barrier)]));
        out
    }

    /// The metadata of `id` is durable: it is complete.
    pub fn on_metadata_written(&mut self, id: u64, now: Instant) -> Vec<AttemptAction<A, S, R>> {
        self.completed.insert(id);
        if !self.coordinator.is_savepoint(id) {
            self.newest = Some(id);
        }
        let mut out = Vec::new();
        if let Some((_, reply)) = self.waiting.remove(&id) {
            out.push(AttemptAction::Answer {
                reply,
                answer: Answer::Done(id),
            });
        }
        let actions = self.coordinator.on_metadata_written(id, now);
        out.extend(self.map(actions));
        out
    }

    /// Writing the metadata of `id` failed: the checkpoint failed.
    pub fn on_metadata_failed(&mut self, id: u64, cause: String) -> Vec<AttemptAction<A, S, R>> {
        let actions = self.coordinator.on_metadata_failed(id, cause);
        self.map(actions)
    }

    /// The attempt ended (`why`): every request still waiting is answered with that.
    pub fn end(&mut self, why: &str) -> Vec<AttemptAction<A, S, R>> {
        let mut ids: Vec<u64> = self.waiting.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter()
            .filter_map(|id| self.waiting.remove(&id).map(|w| (id, w)))
            .map(|(id, (_, reply))| AttemptAction::Answer {
                reply,
                answer: Answer::Failed(format!("snapshot {id} did not complete: {why}")),
            })
            .collect()
    }

    /// Turns the core coordinator's decisions into the attempt's.
    fn map(&mut self, actions: Vec<Action<A>>) -> Vec<AttemptAction<A, S, R>> {
        let mut out = Vec::with_capacity(actions.len());
        for action in actions {
            match action {
                Action::Trigger(barrier) => {
                    let sources = self
                        .sources
                        .iter()
                        .copied()
                        .filter(|&s| !self.exited[s])
                        .collect();
                    out.push(AttemptAction::Trigger { barrier, sources });
                    for task in 0..self.standing.len() {
                        self.write_standing(task, barrier.id, &mut out);
                    }
                }
                Action::WriteMetadata {
                    barrier,
                    acks,
                    started,
                } => out.push(AttemptAction::WriteMetadata {
                    barrier,
                    acks,
                    started,
                }),
                Action::Abort { id, reason } => {
                    if let Some((kind, reply)) = self.waiting.remove(&id) {
                        let answer = match (kind, &reason, self.newest) {
                            // A newer checkpoint completed first: it covers everything the
                            // request asked for, so it is the answer.
                            (BarrierKind::Checkpoint, AbortReason::Subsumed, Some(done)) => {
                                Answer::Done(done)
                            }
                            (BarrierKind::Checkpoint, ..) => {
                                Answer::Failed(format!("checkpoint {id} {reason}"))
                            }
                            _ => Answer::Failed(format!("savepoint {id} {reason}")),
                        };
                        out.push(AttemptAction::Answer { reply, answer });
                        out.push(AttemptAction::Phase(JobPhase::Running));
                    } else if reason.is_failure() {
                        out.push(AttemptAction::ReportFailure { id, reason });
                    }
                    out.push(AttemptAction::Abort(id));
                    self.expedite_if_all_ended();
                }
                Action::NotifyComplete(id) => out.push(AttemptAction::NotifyComplete(id)),
                Action::Discard(id) => out.push(AttemptAction::Discard(id)),
                Action::FailJob(msg) => out.push(AttemptAction::FailJob(msg)),
            }
        }
        out
    }

    /// Writes exited task `task`'s standing state into checkpoint `id`, if it has one and
    /// did not handle that checkpoint's barrier itself.
    fn write_standing(&self, task: usize, id: u64, out: &mut Vec<AttemptAction<A, S, R>>) {
        if let Some((snapshot, last)) = &self.standing[task] {
            if id > *last {
                out.push(AttemptAction::WriteFrozen {
                    task,
                    checkpoint: id,
                    snapshot: snapshot.clone(),
                });
            }
        }
    }

    /// Once every running source's input ended, the final checkpoint is due at once.
    fn expedite_if_all_ended(&mut self) {
        let all = self
            .sources
            .iter()
            .all(|s| self.exited[*s] || self.inputs_ended.contains(s));
        if all && !self.inputs_ended.is_empty() {
            self.coordinator.expedite();
        }
    }
}

#[cfg(test)]
mod tests;
