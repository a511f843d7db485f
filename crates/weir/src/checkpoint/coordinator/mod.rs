//! The checkpoint coordinator's decisions, free of I/O and threads (docs/architecture.md §4).
//!
//! The executor calls [`Coordinator::tick`] on a timer and reports acknowledgements, declines
//! and finished tasks; it carries out the returned [`Action`]s (send triggers, write
//! metadata, notify tasks, delete folders). Because nothing here touches a clock, disk or
//! channel, every interleaving is a unit test. [`attempt`] adds the rules that depend on
//! one attempt's tasks (finished tasks' frozen state, late acknowledgements, the final
//! checkpoint, answers to requests), just as pure.
//!
//! Invariants:
//! * Checkpoint ids increase strictly; a trigger happens only when `interval` has passed since
//!   the previous trigger, `min_pause` since the previous completion, and fewer than
//!   `max_concurrent` checkpoints are pending.
//! * A checkpoint is complete only when every task acknowledged it *and* the executor
//!   reported its metadata written ([`Coordinator::on_metadata_written`]); completing `n`
//!   subsumes (aborts) every pending checkpoint older than `n`.
//! * More than `tolerable_failures` consecutive failed checkpoints fail the job; aborts that
//!   are nobody's fault (superseded, a task finished) do not count.
//! * A task exits only after a checkpoint taken after its end completed (the final
//!   checkpoint, see `runtime::finishing`); that snapshot of its frozen state acknowledges
//!   later checkpoints for it (the executor supplies it), so checkpoints go on while any
//!   source runs. Should a task ever finish without one, no checkpoint is triggered any more
//!   and pending ones are aborted.
//! * When every source has ended its input, the next checkpoint (the final one) is due at
//!   once ([`Coordinator::expedite`]), so bounded jobs end without waiting an interval —
//!   also when periodic checkpoints are off: the final checkpoint is what two-phase-commit
//!   sinks commit with, once for the whole job.
//! * After a failed checkpoint the next trigger waits [`Coordinator::retry_pause`] from the
//!   failed one's trigger, expedited or not: a cause that fails every checkpoint (a full
//!   disk) is retried at the job's pace, not as fast as the disk can refuse.
//! * Savepoints and checkpoints asked for by the user ([`Coordinator::trigger_forced`])
//!   ignore the interval, `min_pause` and `max_concurrent`. A savepoint is never retained
//!   nor discarded here (it belongs to the user), never subsumes a checkpoint nor is
//!   subsumed by one, and its
//!   failure does not count towards `tolerable_failures`. Only a stopping savepoint is
//!   announced to the tasks (they end after it); while it is pending nothing else triggers.

pub mod attempt;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::checkpoint::barrier::{BarrierKind, CheckpointBarrier, CheckpointingMode};

/// Checkpointing settings of a job (Flink's `CheckpointConfig`).
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// Time between checkpoint triggers; `None` disables checkpointing.
    pub interval: Option<Duration>,
    /// Aligned exactly-once or unaligned-barrier at-least-once.
    pub mode: CheckpointingMode,
    /// A checkpoint not complete after this long is aborted.
    pub timeout: Duration,
    /// Minimum time from one completion to the next trigger.
    pub min_pause: Duration,
    /// Maximum checkpoints in flight at once.
    pub max_concurrent: usize,
    /// Consecutive failed checkpoints tolerated before the job fails.
    pub tolerable_failures: u32,
    /// Completed checkpoints of this run kept on disk (older ones are deleted).
    pub retained: usize,
    /// Unaligned checkpoints (exactly-once only; issue 13): barriers overtake the records
    /// queued in channels, which are saved as channel state, so a checkpoint under
    /// backpressure does not wait for the queues to drain (docs/architecture.md §3).
    pub unaligned: bool,
    /// With [`unaligned`](Self::unaligned): each checkpoint starts aligned and a subtask
    /// switches to unaligned once its alignment has lasted this long (Flink's
    /// `execution.checkpointing.aligned-checkpoint-timeout`), so channel state is written
    /// only when the queues are actually slow. `None`: unaligned from the first barrier.
    pub aligned_checkpoint_timeout: Option<Duration>,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval: Some(Duration::from_secs(1)),
            mode: CheckpointingMode::ExactlyOnce,
            timeout: Duration::from_secs(600),
            min_pause: Duration::ZERO,
            max_concurrent: 1,
            tolerable_failures: 0,
            retained: 3,
            unaligned: false,
            aligned_checkpoint_timeout: None,
        }
    }
}

/// Why a checkpoint was aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbortReason {
    /// It did not complete within `timeout` (counts as a failure).
    Timeout,
    /// A task or the storage failed it (counts as a failure).
    Failed(String),
    /// A newer checkpoint completed first.
    Subsumed,
    /// A task finished before acknowledging.
    TaskFinished,
}

impl AbortReason {
    /// Whether the abort counts towards `tolerable_failures`.
    pub fn is_failure(&self) -> bool {
        matches!(self, AbortReason::Timeout | AbortReason::Failed(_))
    }
}

impl std::fmt::Display for AbortReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AbortReason::Timeout => write!(f, "timed out"),
            AbortReason::Failed(m) => write!(f, "failed: {m}"),
            AbortReason::Subsumed => write!(f, "subsumed by a newer checkpoint"),
            AbortReason::TaskFinished => write!(f, "a task finished before acknowledging"),
        }
    }
}

/// What the executor must do.
#[derive(Debug)]
pub enum Action<A> {
    /// Inject this barrier at every source.
    Trigger(CheckpointBarrier),
    /// Every task acknowledged: write the metadata, then call `on_metadata_written`.
    WriteMetadata {
        /// The barrier of the checkpoint.
        barrier: CheckpointBarrier,
        /// The acknowledgements, indexed by task.
        acks: Vec<A>,
        /// When the checkpoint was triggered.
        started: Instant,
    },
    /// Tell every task that this checkpoint will never complete; delete its files.
    Abort {
        /// The aborted checkpoint.
        id: u64,
        /// Why.
        reason: AbortReason,
    },
    /// Tell every task that the checkpoint completed.
    NotifyComplete(u64),
    /// Delete this completed checkpoint (beyond the retention count).
    Discard(u64),
    /// Too many consecutive failures: fail the job with this message.
    FailJob(String),
}

struct Pending<A> {
    barrier: CheckpointBarrier,
    started: Instant,
    acks: Vec<Option<A>>,
    remaining: usize,
}

/// The coordinator's state for one job attempt (ids and retention span attempts).
pub struct Coordinator<A> {
    cfg: CheckpointConfig,
    tasks: usize,
    next_id: u64,
    pending: BTreeMap<u64, Pending<A>>,
    last_trigger: Option<Instant>,
    last_completion: Option<Instant>,
    consecutive_failures: u32,
    triggering: bool,
    retained: VecDeque<u64>,
    /// The next periodic trigger is due at once (every source ended its input).
    expedite: bool,
    /// Savepoints pending or being completed (not notified, retained or counted).
    savepoints: BTreeMap<u64, BarrierKind>,
    /// The pending stopping savepoint: periodic triggers wait for it.
    stopping: Option<u64>,
    /// The last checkpoint failed: the next trigger waits [`Coordinator::retry_pause`].
    failed_last: bool,
}

impl<A> Coordinator<A> {
    /// A coordinator whose first checkpoint gets id `first_id`.
    pub fn new(cfg: CheckpointConfig, first_id: u64) -> Self {
        Coordinator {
            cfg,
            tasks: 0,
            next_id: first_id.max(1),
            pending: BTreeMap::new(),
            last_trigger: None,
            last_completion: None,
            consecutive_failures: 0,
            triggering: false,
            retained: VecDeque::new(),
            expedite: false,
            savepoints: BTreeMap::new(),
            stopping: None,
            failed_last: false,
        }
    }

    /// The least time between the trigger of a checkpoint that failed and the next one:
    /// the interval (one second with periodic checkpoints off), and at least `min_pause`.
    pub fn retry_pause(&self) -> Duration {
        self.cfg
            .interval
            .unwrap_or(Duration::from_secs(1))
            .max(self.cfg.min_pause)
    }

    /// A new attempt with `tasks` tasks starts at `now`: pending checkpoints are forgotten
    /// (the caller aborts them), triggering resumes; ids and retention carry on.
    pub fn start_attempt(&mut self, tasks: usize, now: Instant) -> Vec<u64> {
        self.tasks = tasks;
        self.triggering = true;
        self.last_trigger = Some(now);
        self.expedite = false;
        self.stopping = None;
        self.savepoints.clear();
        std::mem::take(&mut self.pending).into_keys().collect()
    }

    /// The id the next checkpoint will get; every id below it (from `first_id`) was
    /// triggered by this coordinator, so the executor can sweep up the folders of those that
    /// never completed once the job ends.
    pub fn next_checkpoint_id(&self) -> u64 {
        self.next_id
    }

    /// When `tick` next has something to do (for the executor's wait timeout).
    pub fn next_deadline(&self) -> Option<Instant> {
        let timeouts = self.pending.values().map(|p| p.started + self.cfg.timeout);
        let trigger = self.next_trigger_time();
        timeouts.chain(trigger).min()
    }

    fn next_trigger_time(&self) -> Option<Instant> {
        let periodic = self.pending.len() - self.pending_savepoints();
        if !self.triggering || self.stopping.is_some() || periodic >= self.cfg.max_concurrent {
            return None;
        }
        let by_interval = match (self.expedite, self.cfg.interval) {
            (true, _) => self.last_trigger, // already in the past: due now
            (false, Some(interval)) => self.last_trigger.map(|t| t + interval),
            (false, None) => return None,
        };
        let by_interval = match (self.failed_last, by_interval) {
            (true, Some(t)) => Some(t.max(self.last_trigger.map_or(t, |l| l + self.retry_pause()))),
            (_, t) => t,
        };
        let by_pause = self.last_completion.map(|t| t + self.cfg.min_pause);
        Some(match (by_interval, by_pause) {
            (Some(a), Some(b)) => a.max(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return None,
        })
    }

    /// Triggers a checkpoint if one is due and aborts timed-out ones.
    pub fn tick(&mut self, now: Instant, wall_ms: u64) -> Vec<Action<A>> {
        let mut actions = Vec::new();
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| now >= p.started + self.cfg.timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.abort(id, AbortReason::Timeout, &mut actions);
        }
        if self.next_trigger_time().is_some_and(|t| now >= t) {
            actions.push(Action::Trigger(self.trigger(now, wall_ms)));
        }
        actions
    }

    /// Every source has ended its input: the final checkpoint is due at once, even with
    /// periodic checkpoints off (`max_concurrent` and `min_pause` still apply).
    pub fn expedite(&mut self) {
        self.expedite = true;
    }

    /// A checkpoint or savepoint the user asked for, triggered now whatever the interval,
    /// `min_pause` or `max_concurrent` say. Refused (with the reason) once no barrier can
    /// reach every task any more, or while a stopping savepoint is pending.
    pub fn trigger_forced(
        &mut self,
        kind: BarrierKind,
        now: Instant,
        wall_ms: u64,
    ) -> Result<CheckpointBarrier, String> {
        if !self.triggering {
            return Err("the job is finishing: no source runs to inject a barrier".into());
        }
        if let Some(id) = self.stopping {
            return Err(format!("the job is stopping with savepoint {id}"));
        }
        let mut barrier = self.trigger(now, wall_ms);
        barrier.kind = kind;
        if let Some(p) = self.pending.get_mut(&barrier.id) {
            p.barrier.kind = kind;
        }
        match kind {
            BarrierKind::Checkpoint => {}
            BarrierKind::Savepoint => {
                self.savepoints.insert(barrier.id, kind);
            }
            BarrierKind::Stop { .. } => {
                self.savepoints.insert(barrier.id, kind);
                self.stopping = Some(barrier.id);
            }
        }
        Ok(barrier)
    }

    fn pending_savepoints(&self) -> usize {
        self.savepoints
            .keys()
            .filter(|id| self.pending.contains_key(id))
            .count()
    }

    fn trigger(&mut self, now: Instant, wall_ms: u64) -> CheckpointBarrier {
        let barrier = CheckpointBarrier::checkpoint(self.next_id, wall_ms);
        self.next_id += 1;
        self.expedite = false;
        self.last_trigger = Some(now);
        self.pending.insert(
            barrier.id,
            Pending {
                barrier,
                started: now,
                acks: (0..self.tasks).map(|_| None).collect(),
                remaining: self.tasks,
            },
        );
        barrier
    }

    /// Task `task` acknowledged checkpoint `id`. Late or duplicate acks are ignored
    /// (returns `None`; the caller deletes what such an ack wrote if the id is unknown).
    pub fn on_ack(&mut self, id: u64, task: usize, ack: A) -> Option<Action<A>> {
        let p = self.pending.get_mut(&id)?;
        let slot = p.acks.get_mut(task)?;
        if slot.is_some() {
            return None;
        }
        *slot = Some(ack);
        p.remaining -= 1;
        if p.remaining > 0 {
            return None;
        }
        let p = self.pending.remove(&id)?;
        Some(Action::WriteMetadata {
            barrier: p.barrier,
            acks: p.acks.into_iter().flatten().collect(),
            started: p.started,
        })
    }

    /// Whether `id` is still pending (acks for other ids are stale).
    pub fn is_pending(&self, id: u64) -> bool {
        self.pending.contains_key(&id)
    }

    /// A task declined `id` (or writing its state failed). A decline of a checkpoint that
    /// is no longer pending (already aborted, e.g. because a task finished) is ignored: the
    /// abort was already decided and counted.
    pub fn on_decline(&mut self, id: u64, reason: AbortReason) -> Vec<Action<A>> {
        let mut actions = Vec::new();
        self.abort(id, reason, &mut actions);
        actions
    }

    /// Writing the metadata of `id` failed: the checkpoint failed (it had left `pending`
    /// when its last acknowledgement arrived).
    pub fn on_metadata_failed(&mut self, id: u64, cause: String) -> Vec<Action<A>> {
        let mut actions = Vec::new();
        let reason = AbortReason::Failed(cause);
        self.count_failure(id, &reason, &mut actions);
        actions.push(Action::Abort { id, reason });
        actions
    }

    /// A task finished and left its final state to stand in for it: checkpoints go on
    /// while `running_sources` remain (with none left, no barrier could be injected).
    pub fn on_source_finished(&mut self, running_sources: usize) {
        if running_sources == 0 {
            self.triggering = false;
        }
    }

    /// Completed checkpoints of this run still kept (savepoints excluded), oldest first.
    pub fn retained_ids(&self) -> Vec<u64> {
        self.retained.iter().copied().collect()
    }

    /// Ids of the checkpoints in flight, oldest first.
    pub fn pending_ids(&self) -> Vec<u64> {
        self.pending.keys().copied().collect()
    }

    /// A task finished: no more triggers; pending checkpoints are aborted.
    pub fn on_task_finished(&mut self) -> Vec<Action<A>> {
        self.triggering = false;
        let mut actions = Vec::new();
        for id in self.pending.keys().copied().collect::<Vec<_>>() {
            self.abort(id, AbortReason::TaskFinished, &mut actions);
        }
        actions
    }

    /// The metadata of `id` is durable: the checkpoint (or savepoint) is complete.
    pub fn on_metadata_written(&mut self, id: u64, now: Instant) -> Vec<Action<A>> {
        match self.savepoints.remove(&id) {
            // A savepoint: the user's, not part of the job's checkpoint history.
            Some(BarrierKind::Savepoint) => return Vec::new(),
            // A stopping savepoint: the tasks end once they hear of it.
            Some(BarrierKind::Stop { .. }) => {
                self.stopping = None;
                self.triggering = false;
                return vec![Action::NotifyComplete(id)];
            }
            _ => {}
        }
        let mut actions = vec![Action::NotifyComplete(id)];
        self.consecutive_failures = 0;
        self.failed_last = false;
        self.last_completion = Some(now);
        // A pending savepoint is the user's: a newer checkpoint does not make it redundant.
        for older in self
            .pending
            .range(..id)
            .map(|(k, _)| *k)
            .filter(|k| !self.savepoints.contains_key(k))
            .collect::<Vec<_>>()
        {
            self.abort(older, AbortReason::Subsumed, &mut actions);
        }
        self.retained.push_back(id);
        while self.retained.len() > self.cfg.retained.max(1) {
            if let Some(old) = self.retained.pop_front() {
                actions.push(Action::Discard(old));
            }
        }
        actions
    }

    fn abort(&mut self, id: u64, reason: AbortReason, actions: &mut Vec<Action<A>>) {
        if self.pending.remove(&id).is_none() {
            return;
        }
        self.count_failure(id, &reason, actions);
        actions.push(Action::Abort { id, reason });
    }

    /// Whether `id` is a savepoint (pending or being completed).
    pub fn is_savepoint(&self, id: u64) -> bool {
        self.savepoints.contains_key(&id)
    }

    /// Counts a failed checkpoint towards `tolerable_failures`; a failed savepoint is
    /// reported to whoever asked for it instead.
    fn count_failure(&mut self, id: u64, reason: &AbortReason, actions: &mut Vec<Action<A>>) {
        if let Some(kind) = self.savepoints.remove(&id) {
            if matches!(kind, BarrierKind::Stop { .. }) {
                self.stopping = None;
            }
            return; // a failed savepoint is reported to whoever asked, not counted
        }
        if !reason.is_failure() {
            return;
        }
        self.consecutive_failures += 1;
        self.failed_last = true;
        if self.consecutive_failures > self.cfg.tolerable_failures {
            actions.push(Action::FailJob(format!(
                "{} consecutive checkpoint failures exceed the tolerated {} (last: {reason}); \
                 raise --tolerable-checkpoint-failures or fix the cause",
                self.consecutive_failures, self.cfg.tolerable_failures
            )));
        }
    }
}

#[cfg(test)]
mod tests;
