//! The checkpoint coordinator's decisions, free of I/O and threads (DESIGN.md §4).
//!
//! The executor calls [`Coordinator::tick`] on a timer and reports acknowledgements, declines
//! and finished tasks; it carries out the returned [`Action`]s (send triggers, write
//! metadata, notify tasks, delete folders). Because nothing here touches a clock, disk or
//! channel, every interleaving is a unit test.
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
//! * A finished task whose whole state is its source's position (or nothing) acknowledges
//!   later checkpoints with its final state (the executor supplies it), so checkpoints go
//!   on while any source runs. Once a task with other state has finished, no checkpoint is
//!   triggered any more (its state after end of input must not be restored and finished
//!   again), and pending ones are aborted.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::runtime::alignment::CheckpointingMode;
use crate::runtime::event::CheckpointBarrier;

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
        }
    }

    /// A new attempt with `tasks` tasks starts at `now`: pending checkpoints are forgotten
    /// (the caller aborts them), triggering resumes; ids and retention carry on.
    pub fn start_attempt(&mut self, tasks: usize, now: Instant) -> Vec<u64> {
        self.tasks = tasks;
        self.triggering = self.cfg.interval.is_some();
        self.last_trigger = Some(now);
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
        let interval = self.cfg.interval?;
        if !self.triggering || self.pending.len() >= self.cfg.max_concurrent {
            return None;
        }
        let by_interval = self.last_trigger.map(|t| t + interval);
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

    /// Triggers a checkpoint now regardless of the interval (if one may be triggered at all).
    pub fn trigger_now(&mut self, now: Instant, wall_ms: u64) -> Option<CheckpointBarrier> {
        (self.triggering && self.pending.len() < self.cfg.max_concurrent)
            .then(|| self.trigger(now, wall_ms))
    }

    fn trigger(&mut self, now: Instant, wall_ms: u64) -> CheckpointBarrier {
        let barrier = CheckpointBarrier {
            id: self.next_id,
            timestamp_ms: wall_ms,
        };
        self.next_id += 1;
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
        self.count_failure(&reason, &mut actions);
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

    /// The metadata of `id` is durable: the checkpoint is complete.
    pub fn on_metadata_written(&mut self, id: u64, now: Instant) -> Vec<Action<A>> {
        let mut actions = vec![Action::NotifyComplete(id)];
        self.consecutive_failures = 0;
        self.last_completion = Some(now);
        for older in self
            .pending
            .range(..id)
            .map(|(k, _)| *k)
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
        self.count_failure(&reason, actions);
        actions.push(Action::Abort { id, reason });
    }

    fn count_failure(&mut self, reason: &AbortReason, actions: &mut Vec<Action<A>>) {
        if !reason.is_failure() {
            return;
        }
        self.consecutive_failures += 1;
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
mod tests {
    use super::*;

    fn cfg() -> CheckpointConfig {
        CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            timeout: Duration::from_secs(1),
            tolerable_failures: 1,
            retained: 2,
            ..Default::default()
        }
    }

    fn triggers(a: &[Action<u32>]) -> Vec<u64> {
        a.iter()
            .filter_map(|a| match a {
                Action::Trigger(b) => Some(b.id),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn triggers_on_interval_and_completes_after_all_acks_and_metadata() {
        let t0 = Instant::now();
        let mut c = Coordinator::<u32>::new(cfg(), 5);
        c.start_attempt(2, t0);
        assert!(triggers(&c.tick(t0 + Duration::from_millis(50), 0)).is_empty());
        assert_eq!(
            triggers(&c.tick(t0 + Duration::from_millis(100), 0)),
            vec![5]
        );
        // max_concurrent = 1: no second trigger while 5 is pending
        assert!(triggers(&c.tick(t0 + Duration::from_millis(300), 0)).is_empty());
        assert!(c.on_ack(5, 0, 10).is_none());
        assert!(c.on_ack(5, 0, 10).is_none(), "duplicate ack ignored");
        match c.on_ack(5, 1, 11) {
            Some(Action::WriteMetadata { barrier, acks, .. }) => {
                assert_eq!(barrier.id, 5);
                assert_eq!(acks, vec![10, 11]);
            }
            other => panic!("{other:?}"),
        }
        let a = c.on_metadata_written(5, t0 + Duration::from_millis(310));
        assert!(matches!(a[0], Action::NotifyComplete(5)));
        assert_eq!(
            triggers(&c.tick(t0 + Duration::from_millis(310), 0)),
            vec![6]
        );
    }

    #[test]
    fn min_pause_delays_the_next_trigger() {
        let t0 = Instant::now();
        let mut c = Coordinator::<u32>::new(
            CheckpointConfig {
                min_pause: Duration::from_millis(500),
                ..cfg()
            },
            1,
        );
        c.start_attempt(1, t0);
        assert_eq!(
            triggers(&c.tick(t0 + Duration::from_millis(100), 0)),
            vec![1]
        );
        c.on_ack(1, 0, 0);
        c.on_metadata_written(1, t0 + Duration::from_millis(150));
        assert!(triggers(&c.tick(t0 + Duration::from_millis(600), 0)).is_empty());
        assert_eq!(
            triggers(&c.tick(t0 + Duration::from_millis(650), 0)),
            vec![2]
        );
    }

    #[test]
    fn timeouts_count_and_fail_the_job_past_the_tolerance() {
        let t0 = Instant::now();
        let mut c = Coordinator::<u32>::new(cfg(), 1);
        c.start_attempt(1, t0);
        c.tick(t0 + Duration::from_millis(100), 0);
        let a = c.tick(t0 + Duration::from_millis(1100), 0);
        assert!(matches!(
            &a[0],
            Action::Abort {
                id: 1,
                reason: AbortReason::Timeout
            }
        ));
        assert!(
            !a.iter().any(|a| matches!(a, Action::FailJob(_))),
            "1 tolerated"
        );
        assert_eq!(triggers(&a), vec![2]);
        let a = c.tick(t0 + Duration::from_millis(2200), 0);
        assert!(a.iter().any(|a| matches!(a, Action::FailJob(_))));
    }

    #[test]
    fn declines_of_settled_checkpoints_are_ignored_but_metadata_failures_count() {
        let t0 = Instant::now();
        let mut c = Coordinator::<u32>::new(cfg(), 1);
        c.start_attempt(1, t0);
        c.tick(t0 + Duration::from_millis(100), 0);
        c.on_task_finished();
        assert!(c
            .on_decline(1, AbortReason::Failed("late".into()))
            .is_empty());
        let mut c = Coordinator::<u32>::new(cfg(), 1);
        c.start_attempt(1, t0);
        c.tick(t0 + Duration::from_millis(100), 0);
        assert!(c.on_ack(1, 0, 0).is_some());
        let a = c.on_metadata_failed(1, "disk full".into());
        assert!(
            matches!(&a[..], [Action::Abort { id: 1, .. }]),
            "1 failure tolerated"
        );
        c.tick(t0 + Duration::from_millis(200), 0);
        c.on_ack(2, 0, 0);
        let a = c.on_metadata_failed(2, "disk full".into());
        assert!(a.iter().any(|a| matches!(a, Action::FailJob(_))));
    }

    #[test]
    fn finished_task_stops_triggering_without_counting_failures() {
        let t0 = Instant::now();
        let mut c = Coordinator::<u32>::new(cfg(), 1);
        c.start_attempt(2, t0);
        c.tick(t0 + Duration::from_millis(100), 0);
        let a = c.on_task_finished();
        assert!(matches!(
            &a[..],
            [Action::Abort {
                id: 1,
                reason: AbortReason::TaskFinished
            }]
        ));
        assert!(c.tick(t0 + Duration::from_secs(10), 0).is_empty());
        assert!(
            c.on_ack(1, 0, 0).is_none(),
            "late ack of an aborted checkpoint"
        );
    }

    #[test]
    fn retention_discards_oldest_and_completion_subsumes_older_pending() {
        let t0 = Instant::now();
        let mut c = Coordinator::<u32>::new(
            CheckpointConfig {
                max_concurrent: 2,
                ..cfg()
            },
            1,
        );
        c.start_attempt(1, t0);
        let mut t = t0;
        let mut discarded = Vec::new();
        for id in 1..=4 {
            t += Duration::from_millis(100);
            assert_eq!(triggers(&c.tick(t, 0)), vec![id]);
            c.on_ack(id, 0, 0);
            for a in c.on_metadata_written(id, t) {
                if let Action::Discard(d) = a {
                    discarded.push(d);
                }
            }
        }
        assert_eq!(discarded, vec![1, 2]);
        // two pending; the newer completes first and subsumes the older
        c.tick(t + Duration::from_millis(100), 0);
        c.tick(t + Duration::from_millis(200), 0);
        c.on_ack(6, 0, 0);
        let a = c.on_metadata_written(6, t + Duration::from_millis(210));
        assert!(a.iter().any(|a| matches!(
            a,
            Action::Abort {
                id: 5,
                reason: AbortReason::Subsumed
            }
        )));
    }

    #[test]
    fn restart_forgets_pending_but_keeps_ids() {
        let t0 = Instant::now();
        let mut c = Coordinator::<u32>::new(cfg(), 1);
        c.start_attempt(1, t0);
        c.tick(t0 + Duration::from_millis(100), 0);
        assert_eq!(c.start_attempt(3, t0 + Duration::from_millis(150)), vec![1]);
        assert_eq!(
            triggers(&c.tick(t0 + Duration::from_millis(250), 0)),
            vec![2]
        );
    }
}
