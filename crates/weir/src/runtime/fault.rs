//! Seeded failure injection: panics at reproducible moments in chosen tasks.
//!
//! Failures are planned up front from a seed: failure `k` targets task `t_k` and fires when
//! that task's *cumulative* record count (across attempts, replays included) reaches `c_k`.
//! Each fires exactly once, so a job with N planned failures that runs to the end has been
//! killed and recovered N times — unless a target task never sees enough records, which the
//! job result reports (`injected < planned`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// What to inject.
#[derive(Debug, Clone, Copy)]
pub struct FailureInjection {
    /// Number of failures.
    pub failures: usize,
    /// Seed of the plan.
    pub seed: u64,
    /// Failures fire within the first `horizon` records a task processes.
    pub horizon: u64,
}

/// The process-wide injector shared by every task of a job (it outlives attempts).
pub struct FailureInjector {
    counts: Vec<AtomicU64>,
    /// `(task, at_count, fired)`, sorted by `at_count`.
    plan: Mutex<Vec<(usize, u64, bool)>>,
    fired: AtomicUsize,
    planned: usize,
}

impl FailureInjector {
    /// Plans `cfg.failures` failures over `tasks` tasks.
    pub fn new(cfg: FailureInjection, tasks: usize) -> Self {
        let mut rng = fastrand::Rng::with_seed(cfg.seed);
        let mut plan: Vec<(usize, u64, bool)> = (0..cfg.failures)
            .map(|_| {
                (
                    rng.usize(..tasks.max(1)),
                    rng.u64(1..cfg.horizon.max(2)),
                    false,
                )
            })
            .collect();
        plan.sort_by_key(|p| p.1);
        FailureInjector {
            counts: (0..tasks).map(|_| AtomicU64::new(0)).collect(),
            plan: Mutex::new(plan),
            fired: AtomicUsize::new(0),
            planned: cfg.failures,
        }
    }

    /// Called by task `task` before processing `n` records; panics when a failure is due.
    pub fn on_records(&self, task: usize, n: usize) {
        let Some(c) = self.counts.get(task) else {
            return;
        };
        let count = c.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        let mut plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = plan
            .iter_mut()
            .find(|p| p.0 == task && !p.2 && p.1 <= count)
        {
            p.2 = true;
            let k = self.fired.fetch_add(1, Ordering::SeqCst) + 1;
            drop(plan);
            panic!(
                "injected failure {k} of {} (task {task}, record {count})",
                self.planned
            );
        }
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
        let inj = FailureInjector::new(
            FailureInjection {
                failures: 5,
                seed: 7,
                horizon: 1000,
            },
            2,
        );
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
