//! Restart strategies: whether and when a failed job attempt is restarted (docs/architecture.md §7).
//!
//! [`RestartTracker`] is the pure decision: fed each failure with the time, whether it was
//! injected, and the newest completed checkpoint, it answers "restart after this delay" or
//! "give up, because …". Besides the strategy's own limits it gives up on a failure that
//! repeats identically without any progress in between ([`JobConfig::identical_failure_limit`]):
//! a record that cannot be decoded, a full disk or an impossible timeout fails every attempt
//! the same way, and restarting it forever only hides the cause.
//!
//! [`JobConfig::identical_failure_limit`]: crate::api::config::JobConfig::identical_failure_limit

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Flink's restart strategies.
#[derive(Debug, Clone, PartialEq)]
pub enum RestartStrategy {
    /// Never restart: the first failure fails the job.
    None,
    /// Restart up to `attempts` times, waiting `delay` before each.
    FixedDelay {
        /// Maximum restarts.
        attempts: u32,
        /// Wait before each restart.
        delay: Duration,
    },
    /// Restart up to `attempts` times, waiting `initial`, then doubling up to `max`.
    ExponentialDelay {
        /// Maximum restarts.
        attempts: u32,
        /// First wait.
        initial: Duration,
        /// Longest wait.
        max: Duration,
    },
    /// Flink's failure-rate strategy: restart after `delay` unless more than
    /// `max_failures` failures happened within the last `interval`; a job that fails now
    /// and then runs for ever, one that fails in a burst gives up.
    FailureRate {
        /// Failures tolerated within any window of `interval`.
        max_failures: u32,
        /// The window.
        interval: Duration,
        /// Wait before each restart.
        delay: Duration,
    },
}

impl Default for RestartStrategy {
    fn default() -> Self {
        RestartStrategy::ExponentialDelay {
            attempts: u32::MAX,
            initial: Duration::from_millis(100),
            max: Duration::from_secs(10),
        }
    }
}

/// An attempt that ran this long without failing resets the exponential backoff to its
/// initial delay (Flink's `reset-backoff-threshold` default).
pub const RESET_BACKOFF_AFTER: Duration = Duration::from_secs(3600);

impl RestartStrategy {
    /// The wait before restart number `restart` (1-based), or `None` to give up.
    pub fn delay(&self, restart: u32) -> Option<Duration> {
        self.delay_in_streak(restart, restart)
    }

    /// Like [`RestartStrategy::delay`], with the exponential backoff counted over `streak`
    /// (for [`RestartStrategy::FailureRate`], which needs the failures' times, this is its
    /// delay: the runtime's restart tracker applies the rate)
    /// — the restarts since the job last ran for an hour (`RESET_BACKOFF_AFTER`) without
    /// failing —
    /// while the attempts limit still counts every restart.
    pub fn delay_in_streak(&self, restart: u32, streak: u32) -> Option<Duration> {
        let restart_for_backoff = streak.max(1);
        match *self {
            RestartStrategy::None => None,
            RestartStrategy::FixedDelay { attempts, delay } => {
                (restart <= attempts).then_some(delay)
            }
            RestartStrategy::ExponentialDelay {
                attempts,
                initial,
                max,
            } => (restart <= attempts).then(|| {
                let factor = 2u32.saturating_pow(restart_for_backoff.saturating_sub(1).min(30));
                initial.saturating_mul(factor).min(max)
            }),
            RestartStrategy::FailureRate { delay, .. } => Some(delay),
        }
    }
}

/// Replaces every run of digits with `#`, so two failures that differ only in ids, offsets
/// or counts (`checkpoint 12 expired` / `checkpoint 13 expired`) compare equal.
pub fn failure_signature(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut in_digits = false;
    for c in message.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// One failed attempt, as the restart decision sees it.
#[derive(Debug, Clone, Copy)]
pub struct Failure<'a> {
    /// When it failed.
    pub at: Instant,
    /// The error, as shown to the user.
    pub message: &'a str,
    /// It was planted by failure injection: planned, each one distinct, never a reason to
    /// give up early.
    pub injected: bool,
    /// Checkpoint storage was out of reach ([`Error::is_transient`]): an outage, which a
    /// later try may get past however often it repeated, so it never counts toward the
    /// identical-failure limit; the strategy's own limits still apply.
    ///
    /// [`Error::is_transient`]: crate::error::Error::is_transient
    pub transient: bool,
    /// The cluster changed under the attempt (a peer reported a worker lost for the first
    /// time; the coordinator deploys nothing onto it until it answers or is counted lost):
    /// not the job failing the same way again, so it never counts toward the
    /// identical-failure limit either; the strategy's own limits still apply.
    pub membership: bool,
    /// The progress the job had made when it failed: the records its sources had read at
    /// the newest completed checkpoint (`None` before the first). Compared by position,
    /// not by checkpoint id, since a checkpoint taken between a restore and the same
    /// failure advances nothing.
    pub progress: Option<u64>,
    /// The attempt ran this long; a long run resets the exponential backoff.
    pub ran_for: Duration,
}

/// What to do after a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartDecision {
    /// Restart after this delay.
    Restart(Duration),
    /// Fail the job, for this reason (empty when the strategy simply has no restart left).
    GiveUp(String),
}

/// The restart decision over a job's failures: the strategy's limits, the failure rate, and
/// the identical-failure limit. Pure: time comes in with each failure.
#[derive(Debug, Clone)]
pub struct RestartTracker {
    strategy: RestartStrategy,
    identical_limit: Option<u32>,
    restarts: u32,
    /// Restarts since the job last ran for [`RESET_BACKOFF_AFTER`] (the backoff's count).
    streak: u32,
    /// Failure times within the failure-rate window.
    recent: VecDeque<Instant>,
    /// The last failure's signature and progress, and how often it repeated in a row.
    last: Option<(String, Option<u64>)>,
    identical: u32,
}

impl RestartTracker {
    /// A tracker for `strategy`, giving up after `identical_limit` identical failures in a
    /// row without a checkpoint completing between them (`None`: never for that reason).
    pub fn new(strategy: RestartStrategy, identical_limit: Option<u32>) -> Self {
        RestartTracker {
            strategy,
            identical_limit,
            restarts: 0,
            streak: 0,
            recent: VecDeque::new(),
            last: None,
            identical: 0,
        }
    }

    /// Decides about `failure`; a `Restart` counts as one restart.
    pub fn on_failure(&mut self, failure: Failure<'_>) -> RestartDecision {
        self.restarts += 1;
        self.streak = if failure.ran_for >= RESET_BACKOFF_AFTER {
            1
        } else {
            self.streak + 1
        };
        if let Some(reason) = self.repeated(&failure) {
            return RestartDecision::GiveUp(reason);
        }
        if let RestartStrategy::FailureRate {
            max_failures,
            interval,
            ..
        } = self.strategy
        {
            self.recent.push_back(failure.at);
            while let Some(&t) = self.recent.front() {
                if failure.at.saturating_duration_since(t) >= interval {
                    self.recent.pop_front();
                } else {
                    break;
                }
            }
            if self.recent.len() > max_failures as usize {
                return RestartDecision::GiveUp(format!(
                    "{} failures within {} exceed the failure-rate limit of {max_failures}",
                    self.recent.len(),
                    humanize(interval)
                ));
            }
        }
        match self.strategy.delay_in_streak(self.restarts, self.streak) {
            Some(delay) => RestartDecision::Restart(delay),
            None => RestartDecision::GiveUp(String::new()),
        }
    }

    /// Counts identical failures in a row; `Some(reason)` once the limit is reached.
    fn repeated(&mut self, failure: &Failure<'_>) -> Option<String> {
        if failure.injected || failure.transient || failure.membership {
            self.last = None;
            self.identical = 0;
            return None;
        }
        let key = (failure_signature(failure.message), failure.progress);
        if self.last.as_ref() == Some(&key) {
            self.identical += 1;
        } else {
            self.last = Some(key);
            self.identical = 1;
        }
        let limit = self.identical_limit?;
        (self.identical >= limit.max(1)).then(|| {
            format!(
                "the same failure happened {} times in a row without any checkpoint getting \
                 further into the input, so restarting will not get past it: fix its cause, \
                 then resume with --restore latest",
                self.identical
            )
        })
    }
}

fn humanize(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{d:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays() {
        assert_eq!(RestartStrategy::None.delay(1), None);
        let f = RestartStrategy::FixedDelay {
            attempts: 2,
            delay: Duration::from_millis(5),
        };
        assert_eq!(f.delay(2), Some(Duration::from_millis(5)));
        assert_eq!(f.delay(3), None);
        let e = RestartStrategy::ExponentialDelay {
            attempts: 10,
            initial: Duration::from_millis(100),
            max: Duration::from_millis(350),
        };
        assert_eq!(
            e.delay_in_streak(9, 1),
            Some(Duration::from_millis(100)),
            "reset"
        );
        assert_eq!(
            e.delay_in_streak(11, 1),
            None,
            "attempts still count every restart"
        );
        let d: Vec<_> = (1..=4).map(|i| e.delay(i).unwrap().as_millis()).collect();
        assert_eq!(d, vec![100, 200, 350, 350]);
    }

    fn failure(at: Instant, message: &str, latest: Option<u64>) -> Failure<'_> {
        Failure {
            at,
            message,
            injected: false,
            transient: false,
            membership: false,
            progress: latest,
            ran_for: Duration::from_millis(10),
        }
    }

    #[test]
    fn signatures_ignore_numbers() {
        assert_eq!(
            failure_signature("checkpoint 12 expired after 0ms"),
            failure_signature("checkpoint 130 expired after 0ms")
        );
        assert_ne!(
            failure_signature("cannot decode record at offset 7"),
            failure_signature("connection refused")
        );
    }

    #[test]
    fn identical_failures_without_progress_give_up() {
        let mut t = RestartTracker::new(RestartStrategy::default(), Some(3));
        let now = Instant::now();
        let bad = "task map failed: cannot decode record at offset 812";
        assert!(matches!(
            t.on_failure(failure(now, bad, Some(4))),
            RestartDecision::Restart(_)
        ));
        assert!(matches!(
            t.on_failure(failure(now, bad, Some(4))),
            RestartDecision::Restart(_)
        ));
        let RestartDecision::GiveUp(why) = t.on_failure(failure(now, bad, Some(4))) else {
            panic!("a third identical failure must give up");
        };
        assert!(why.contains("3 times in a row"), "{why}");
    }

    #[test]
    fn an_outage_of_the_store_is_waited_out_within_the_strategy_limits() {
        let now = Instant::now();
        let down = "cannot read s3://b/chk/j/chk-9/_metadata: error sending request";
        let outage = |t: &mut RestartTracker| {
            t.on_failure(Failure {
                transient: true,
                ran_for: Duration::ZERO,
                ..failure(now, down, Some(4))
            })
        };
        let mut t = RestartTracker::new(RestartStrategy::default(), Some(3));
        let delays: Vec<_> = (0..8)
            .map(|_| match outage(&mut t) {
                RestartDecision::Restart(d) => d.as_millis(),
                RestartDecision::GiveUp(why) => panic!("an outage is not a repeating bug: {why}"),
            })
            .collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 6400, 10_000]);
        let mut t = RestartTracker::new(
            RestartStrategy::FixedDelay {
                attempts: 2,
                delay: Duration::from_millis(5),
            },
            Some(3),
        );
        assert!(matches!(outage(&mut t), RestartDecision::Restart(_)));
        assert!(matches!(outage(&mut t), RestartDecision::Restart(_)));
        assert!(matches!(outage(&mut t), RestartDecision::GiveUp(_)));
    }

    #[test]
    fn progress_or_another_failure_resets_the_count() {
        let mut t = RestartTracker::new(RestartStrategy::default(), Some(2));
        let now = Instant::now();
        let bad = "disk full writing chk-4";
        assert!(matches!(
            t.on_failure(failure(now, bad, Some(3))),
            RestartDecision::Restart(_)
        ));
        // A checkpoint completed in between: progress, not a repeat.
        assert!(matches!(
            t.on_failure(failure(now, bad, Some(4))),
            RestartDecision::Restart(_)
        ));
        assert!(matches!(
            t.on_failure(failure(now, "something else", Some(4))),
            RestartDecision::Restart(_)
        ));
        assert!(matches!(
            t.on_failure(failure(now, bad, Some(4))),
            RestartDecision::Restart(_)
        ));
        assert!(matches!(
            t.on_failure(failure(now, bad, Some(4))),
            RestartDecision::GiveUp(_)
        ));
    }

    #[test]
    fn injected_failures_and_a_disabled_limit_never_give_up_for_repeating() {
        let now = Instant::now();
        let mut t = RestartTracker::new(RestartStrategy::default(), Some(2));
        for _ in 0..10 {
            let f = Failure {
                injected: true,
                ..failure(now, "injected failure 1 of 9", None)
            };
            assert!(matches!(t.on_failure(f), RestartDecision::Restart(_)));
        }
        let mut t = RestartTracker::new(RestartStrategy::default(), None);
        for _ in 0..10 {
            assert!(matches!(
                t.on_failure(failure(now, "same", None)),
                RestartDecision::Restart(_)
            ));
        }
    }

    /// A worker a peer reported lost (a frozen one) fails attempts until the coordinator
    /// counts it lost; those failures are the cluster changing, not a repeating bug.
    #[test]
    fn a_changed_cluster_is_not_a_repeating_failure() {
        let now = Instant::now();
        let lost = "task count (1/2) failed: lost the exchange stream with worker 2 at x:1";
        let mut t = RestartTracker::new(RestartStrategy::default(), Some(2));
        assert!(matches!(
            t.on_failure(failure(now, lost, Some(4))),
            RestartDecision::Restart(_)
        ));
        for _ in 0..5 {
            let f = Failure {
                membership: true,
                ..failure(now, lost, Some(4))
            };
            assert!(matches!(t.on_failure(f), RestartDecision::Restart(_)));
        }
        // Counted as usual again (two live workers that cannot reach each other).
        assert!(matches!(
            t.on_failure(failure(now, lost, Some(4))),
            RestartDecision::Restart(_)
        ));
        assert!(matches!(
            t.on_failure(failure(now, lost, Some(4))),
            RestartDecision::GiveUp(_)
        ));
    }

    #[test]
    fn failure_rate_gives_up_only_on_a_burst() {
        let strategy = RestartStrategy::FailureRate {
            max_failures: 2,
            interval: Duration::from_secs(60),
            delay: Duration::from_millis(5),
        };
        let mut t = RestartTracker::new(strategy, None);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Failures 61 s apart: never more than one in a window.
        for i in 0..5 {
            assert_eq!(
                t.on_failure(failure(at(i * 61), "x", None)),
                RestartDecision::Restart(Duration::from_millis(5))
            );
        }
        // Two more within the minute: three in the window, over the limit of two.
        assert!(matches!(
            t.on_failure(failure(at(5 * 61 - 30), "y", None)),
            RestartDecision::Restart(_)
        ));
        let RestartDecision::GiveUp(why) = t.on_failure(failure(at(5 * 61 - 20), "z", None)) else {
            panic!("a burst must give up");
        };
        assert!(why.contains("failure-rate"), "{why}");
    }

    #[test]
    fn the_strategy_limits_still_apply() {
        let mut t = RestartTracker::new(
            RestartStrategy::FixedDelay {
                attempts: 1,
                delay: Duration::ZERO,
            },
            None,
        );
        let now = Instant::now();
        assert_eq!(
            t.on_failure(failure(now, "a", None)),
            RestartDecision::Restart(Duration::ZERO)
        );
        assert_eq!(
            t.on_failure(failure(now, "b", None)),
            RestartDecision::GiveUp(String::new())
        );
    }
}
