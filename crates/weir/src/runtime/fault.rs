//! Seeded failure injection: panics at reproducible moments in the tasks doing the work.
//!
//! Failures are planned up front from a seed as points on the job's *global* record count
//! (records entering any task, replays after a recovery included): failure `k` fires in
//! whichever task pushes the count past `c_k`. Every task that processes records can be hit,
//! in proportion to the records it handles, and because the count only grows, every planned
//! failure fires exactly once in a job that processes at least `horizon` records.
//!
//! With [`FailureInjection::after_checkpoint`], a failure whose point has passed waits
//! until a checkpoint that got the sources further than the attempt's restore has completed
//! in the running attempt, and at most one fires per attempt: every restart then has a
//! checkpoint with progress to restore, which is what a test needs to tell a real recovery
//! from a start from scratch.
//!
//! On a cluster (`--workers`) the coordinator's injector holds the plan and counts the
//! job's records from the workers' reports; each attempt it plants the next due failure on
//! one worker ([`FailureInjector::planted`]: that worker's own gated injector, armed by the
//! coordinator when a checkpoint with progress completed), and counts it as fired when the
//! worker reports it ([`FailureInjector::fired_elsewhere`]).
//!
//! Such a failure never depends on the machine's speed: while one is due and waits for its
//! checkpoint, the sources that have emitted in this attempt hold
//! ([`FailureInjector::holds_sources`]), so the input cannot run out before the checkpoint
//! completes and the failure fires, however slow or fast the machine is.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// What to inject.
#[derive(Debug, Clone, Copy)]
pub struct FailureInjection {
    /// Number of failures.
    pub failures: usize,
    /// Seed of the plan.
    pub seed: u64,
    /// Failures fire within the first `horizon` records the job's tasks process in total.
    pub horizon: u64,
    /// Hold each failure back until a checkpoint has completed in the current attempt with
    /// the sources further than where the attempt started (and fire at most one per
    /// attempt), so every failure restores a checkpoint with progress, never the beginning.
    /// While such a failure waits, the sources hold after their first batch of the attempt,
    /// so every planned failure whose point the job's records reach fires.
    pub after_checkpoint: bool,
}

impl FailureInjection {
    /// `failures` failures planned from `seed` within the first `horizon` records, each
    /// fired only after a checkpoint completed in its attempt (see
    /// [`FailureInjection::after_checkpoint`]): the setting for recovery tests.
    pub fn after_checkpoints(failures: usize, seed: u64, horizon: u64) -> Self {
        FailureInjection {
            failures,
            seed,
            horizon,
            after_checkpoint: true,
        }
    }
}

/// The process-wide injector shared by every task of a job (it outlives attempts).
pub struct FailureInjector {
    count: AtomicU64,
    /// Planned points on the global count, ascending, with whether each has fired.
    plan: Mutex<Vec<(u64, bool)>>,
    /// The smallest point not yet fired (`u64::MAX` when none is left): the fast check.
    next: AtomicU64,
    fired: AtomicUsize,
    planned: usize,
    /// [`FailureInjection::after_checkpoint`].
    gated: bool,
    /// Whether a due failure may fire now (always, unless gated).
    armed: AtomicBool,
    /// (Gated) a failure fired in the running attempt: no later checkpoint of the dying
    /// attempt may arm another one.
    spent: AtomicBool,
    /// Failures before this injector's first (a planted one is failure `k` of the job's).
    numbered_from: usize,
    /// Whether it fires at all: a worker where the failure is planted on another worker
    /// only holds its sources while it is due.
    fires: bool,
}

impl FailureInjector {
    /// Plans `cfg.failures` failures.
    pub fn new(cfg: FailureInjection) -> Self {
        let mut rng = fastrand::Rng::with_seed(cfg.seed);
        let mut plan: Vec<(u64, bool)> = (0..cfg.failures)
            .map(|_| (rng.u64(1..cfg.horizon.max(2)), false))
            .collect();
        plan.sort_unstable();
        let next = plan.first().map_or(u64::MAX, |p| p.0);
        FailureInjector {
            count: AtomicU64::new(0),
            plan: Mutex::new(plan),
            next: AtomicU64::new(next),
            fired: AtomicUsize::new(0),
            planned: cfg.failures,
            gated: cfg.after_checkpoint,
            armed: AtomicBool::new(!cfg.after_checkpoint),
            spent: AtomicBool::new(false),
            numbered_from: 0,
            fires: true,
        }
    }

    /// (A worker of a cluster) the job's failure `number` of `planned`, planted by the
    /// coordinator on this worker for one attempt: it fires once `after_records` records
    /// entered this worker's tasks and [`FailureInjector::on_checkpoint_completed`] armed
    /// it (the coordinator's Complete says so); gated, so the sources hold meanwhile.
    /// `number` 0: the failure is planted on another worker, and this one only holds its
    /// sources from `after_records` until armed, so the input cannot end before it fires
    /// there, as every source holds in one process.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // A cluster's roles use it.
    pub(crate) fn planted(number: usize, planned: usize, after_records: u64) -> Self {
        let at = after_records.max(1);
        FailureInjector {
            count: AtomicU64::new(0),
            plan: Mutex::new(vec![(at, false)]),
            next: AtomicU64::new(at),
            fired: AtomicUsize::new(0),
            planned,
            gated: true,
            armed: AtomicBool::new(false),
            spent: AtomicBool::new(false),
            numbered_from: number.saturating_sub(1),
            fires: number > 0,
        }
    }

    /// (The coordinator of a cluster) the failure to plant in the next attempt: its number
    /// (1-based) and its point on the job's record count; `None` once every one fired.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // A cluster's roles use it.
    pub(crate) fn next_due(&self) -> Option<(usize, u64)> {
        let plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        let point = plan.iter().find(|p| !p.1)?.0;
        Some((self.fired() + 1, point))
    }

    /// (The coordinator of a cluster) a worker fired the planted failure: it counts here
    /// as if a task of this process had fired it.
    pub(crate) fn fired_elsewhere(&self) {
        let mut plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        let Some(p) = plan.iter_mut().find(|p| !p.1) else {
            return;
        };
        p.1 = true;
        let next = plan.iter().find(|p| !p.1).map_or(u64::MAX, |p| p.0);
        self.next.store(next, Ordering::Relaxed);
        self.fired.fetch_add(1, Ordering::SeqCst);
        self.spent.store(true, Ordering::SeqCst);
        self.armed.store(false, Ordering::SeqCst);
    }

    /// Whether a due failure may fire now: for a gated injector, a checkpoint with progress
    /// completed in this attempt (the coordinator tells the planted failure's worker so).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // A cluster's roles use it.
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst)
    }

    /// A new attempt starts: a gated injector waits for its first completed checkpoint.
    pub(crate) fn on_attempt_started(&self) {
        if self.gated {
            self.armed.store(false, Ordering::SeqCst);
            self.spent.store(false, Ordering::SeqCst);
        }
    }

    /// A checkpoint with progress completed: a gated injector may fire the next due failure.
    pub(crate) fn on_checkpoint_completed(&self) {
        if !self.spent.load(Ordering::SeqCst) {
            self.armed.store(true, Ordering::SeqCst);
        }
    }

    /// Called by task `task` before processing `n` records; panics when a failure is due.
    pub fn on_records(&self, task: usize, n: usize) {
        let count = self.count.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if count < self.next.load(Ordering::Relaxed)
            || !self.armed.load(Ordering::Relaxed)
            || !self.fires
        {
            return;
        }
        let mut plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        // Re-checked under the lock: with a gate, only one task may take the failure.
        if self.gated {
            if !self.armed.swap(false, Ordering::SeqCst) {
                return;
            }
            self.spent.store(true, Ordering::SeqCst);
        }
        let Some(p) = plan.iter_mut().find(|p| !p.1 && p.0 <= count) else {
            return;
        };
        p.1 = true;
        let next = plan.iter().find(|p| !p.1).map_or(u64::MAX, |p| p.0);
        self.next.store(next, Ordering::Relaxed);
        let k = self.fired.fetch_add(1, Ordering::SeqCst) + 1;
        drop(plan);
        panic!(
            "injected failure {} of {} (task {task}, job record {count})",
            k + self.numbered_from,
            self.planned
        );
    }

    /// Whether a source that emitted `emitted` records in this attempt must hold (emit
    /// nothing more, while still answering barriers): a gated failure is due and waits
    /// for a checkpoint with progress. Holding after the attempt's first records makes
    /// that checkpoint certain to come, and to have progress, before the input can end,
    /// so the failure fires however fast the machine is. One relaxed load when nothing is
    /// due.
    pub(crate) fn holds_sources(&self, emitted: u64) -> bool {
        self.gated
            && emitted > 0
            && self.count.load(Ordering::Relaxed) >= self.next.load(Ordering::Relaxed)
            && !self.armed.load(Ordering::SeqCst)
            && !self.spent.load(Ordering::SeqCst)
    }

    /// Failures fired so far.
    pub fn fired(&self) -> usize {
        self.fired.load(Ordering::SeqCst)
    }

    /// Failures planned.
    pub fn planned(&self) -> usize {
        self.planned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_planned_failure_fires_once() {
        let inj = FailureInjector::new(FailureInjection {
            failures: 5,
            seed: 7,
            horizon: 1000,
            after_checkpoint: false,
        });
        let mut panics = 0;
        for _ in 0..100 {
            for t in 0..2 {
                if std::panic::catch_unwind(|| inj.on_records(t, 100)).is_err() {
                    panics += 1;
                }
            }
        }
        assert_eq!(panics, 5);
        assert_eq!(inj.fired(), 5);
    }

    #[test]
    fn a_gated_failure_waits_for_a_checkpoint_and_fires_once_per_attempt() {
        let inj = FailureInjector::new(FailureInjection::after_checkpoints(3, 7, 100));
        let fire = |n| std::panic::catch_unwind(|| inj.on_records(0, n)).is_err();
        inj.on_attempt_started();
        // Every point lies within 100 records; none fires before a checkpoint completes.
        assert!(!fire(1000));
        inj.on_checkpoint_completed();
        assert!(fire(1));
        // Due, but this attempt already failed once: a checkpoint the dying attempt still
        // completes does not arm another failure; only the next attempt's does.
        assert!(!fire(1));
        inj.on_checkpoint_completed();
        assert!(!fire(1));
        inj.on_attempt_started();
        assert!(!fire(1));
        inj.on_checkpoint_completed();
        assert!(fire(1));
        inj.on_attempt_started();
        inj.on_checkpoint_completed();
        assert!(fire(1));
        inj.on_checkpoint_completed();
        assert!(!fire(1), "only 3 were planned");
        assert_eq!(inj.fired(), 3);
    }

    /// On a cluster: the coordinator plants each failure in turn, the worker's planted
    /// injector fires it only once armed and past its records, and holds its sources
    /// meanwhile.
    #[test]
    fn a_planted_failure_fires_once_armed_and_the_coordinator_counts_it() {
        let job = FailureInjector::new(FailureInjection::after_checkpoints(2, 7, 100));
        let (first, point) = job.next_due().expect("two planned");
        assert_eq!(first, 1);
        assert!(point < 100);
        let worker = FailureInjector::planted(first, job.planned(), 10);
        let fire = |n| std::panic::catch_unwind(|| worker.on_records(0, n)).is_err();
        assert!(!fire(5));
        assert!(!worker.holds_sources(5), "not due yet");
        assert!(!fire(5), "due, but not armed");
        assert!(worker.holds_sources(5));
        worker.on_checkpoint_completed();
        let message = std::panic::catch_unwind(|| worker.on_records(0, 1))
            .expect_err("armed and due")
            .downcast::<String>()
            .expect("a message");
        assert!(message.starts_with("injected failure 1 of 2 "), "{message}");
        assert!(!fire(1), "one per attempt");
        job.fired_elsewhere();
        assert_eq!(job.fired(), 1);
        assert!(!job.is_armed(), "spent for the attempt");
        let (second, _) = job.next_due().expect("one left");
        assert_eq!(second, 2);
        let worker = FailureInjector::planted(second, 2, 1);
        worker.on_checkpoint_completed();
        let message = std::panic::catch_unwind(|| worker.on_records(0, 1))
            .expect_err("armed and due")
            .downcast::<String>()
            .expect("a message");
        assert!(message.starts_with("injected failure 2 of 2 "), "{message}");
        // A worker where it is planted elsewhere holds its sources while it is due, and
        // never fires.
        let elsewhere = FailureInjector::planted(0, 2, 3);
        let fire = |n| std::panic::catch_unwind(|| elsewhere.on_records(0, n)).is_err();
        assert!(!fire(3));
        assert!(elsewhere.holds_sources(3));
        elsewhere.on_checkpoint_completed();
        assert!(!elsewhere.holds_sources(3));
        assert!(!fire(100));
        job.fired_elsewhere();
        assert_eq!(job.next_due(), None);
        assert_eq!(job.fired(), 2);
    }

    #[test]
    fn sources_hold_while_a_gated_failure_waits_for_its_checkpoint() {
        let inj = FailureInjector::new(FailureInjection::after_checkpoints(2, 7, 100));
        let fire = |n| std::panic::catch_unwind(|| inj.on_records(0, n)).is_err();
        inj.on_attempt_started();
        assert!(!inj.holds_sources(1), "nothing is due yet");
        assert!(!fire(1000));
        // Due and waiting: a source that emitted in this attempt holds, one that has not
        // emitted yet goes on (its first records are the progress the checkpoint needs).
        assert!(inj.holds_sources(1));
        assert!(!inj.holds_sources(0));
        inj.on_checkpoint_completed();
        assert!(
            !inj.holds_sources(1),
            "armed: the sources go on until it fires"
        );
        assert!(fire(1));
        assert!(!inj.holds_sources(1), "the dying attempt does not hold");
        inj.on_attempt_started();
        assert!(
            inj.holds_sources(1),
            "the second is due at once in the next attempt"
        );
        inj.on_checkpoint_completed();
        assert!(fire(1));
        inj.on_attempt_started();
        assert!(!inj.holds_sources(1), "none is left");
        let ungated = FailureInjector::new(FailureInjection {
            after_checkpoint: false,
            ..FailureInjection::after_checkpoints(1, 7, 100)
        });
        assert!(!ungated.holds_sources(1), "only a gated failure waits");
    }
}
