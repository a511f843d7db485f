//! Seeded failure injection: panics at reproducible moments in the tasks doing the work.
//!
//! Failures are planned up front from a seed as points on the job's *global* record count
//! (records entering any task, replays after a recovery included): failure `k` fires in
//! whichever task pushes the count past `c_k`. Every task that processes records can be hit,
//! in proportion to the records it handles, and because the count only grows, every planned
//! failure fires exactly once in a job that processes at least `horizon` records.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
        }
    }

    /// Called by task `task` before processing `n` records; panics when a failure is due.
    pub fn on_records(&self, task: usize, n: usize) {
        let count = self.count.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if count < self.next.load(Ordering::Relaxed) {
            return;
        }
        let mut plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        let Some(p) = plan.iter_mut().find(|p| !p.1 && p.0 <= count) else {
            return;
        };
        p.1 = true;
        let next = plan.iter().find(|p| !p.1).map_or(u64::MAX, |p| p.0);
        self.next.store(next, Ordering::Relaxed);
        let k = self.fired.fetch_add(1, Ordering::SeqCst) + 1;
        drop(plan);
        panic!(
            "injected failure {k} of {} (task {task}, job record {count})",
            self.planned
        );
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
}
