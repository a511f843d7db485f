//! Restart strategies: whether and when a failed job attempt is restarted (DESIGN.md §7).

use std::time::Duration;

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
    /// — the restarts since the job last ran for [`RESET_BACKOFF_AFTER`] without failing —
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
        }
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
}
