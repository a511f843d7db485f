//! The engine's wall clock: one place that says what "now" is, in milliseconds since the
//! Unix epoch.
//!
//! State TTL stamps, processing-time timers and checkpoint timestamps all read time through
//! [`wall_ms`], so a test can control the time they see instead of sleeping (sleeps make
//! tests slow and, on a loaded machine, flaky: a 50 ms TTL may pass between two lines).
//!
//! In normal builds [`wall_ms`] is a plain read of [`SystemTime`]. Only the crate's own unit
//! tests (`cfg(test)`) compile the [`manual`] clock, a per-thread override, so the hot path
//! pays nothing for it in release or in integration tests. This module is a leaf: it imports
//! nothing else from the crate, so anything may depend on it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the system clock is set before 1970).
///
/// Under `cfg(test)`, a [`manual::ManualClock`] alive on the calling thread decides the
/// value instead.
#[inline]
pub(crate) fn wall_ms() -> u64 {
    #[cfg(test)]
    if let Some(ms) = manual::now() {
        return ms;
    }
    system_ms()
}

/// Microseconds since the Unix epoch, from the system clock (never the manual one): when a
/// task's checkpoint phases happened, so the status can place them against the trigger
/// time across threads. Read at barriers only, never per record.
#[inline]
pub(crate) fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The system clock's milliseconds since the Unix epoch.
#[inline]
fn system_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A per-thread manual clock for unit tests: while a [`ManualClock`](manual::ManualClock)
/// lives, [`wall_ms`] on its thread returns the time it was set to, and moves only when
/// the test advances it. Other threads (a job's tasks) keep the system clock.
#[cfg(test)]
pub(crate) mod manual {
    use std::cell::Cell;
    use std::marker::PhantomData;
    use std::time::Duration;

    thread_local! {
        static NOW: Cell<Option<u64>> = const { Cell::new(None) };
    }

    /// The manual time of this thread, if a [`ManualClock`] is alive on it.
    pub(crate) fn now() -> Option<u64> {
        NOW.with(Cell::get)
    }

    /// Holds this thread's clock at a time the test chooses; dropping it gives the thread
    /// back the system clock. Not `Send`: the override belongs to the thread that made it.
    pub(crate) struct ManualClock {
        _thread_bound: PhantomData<*const ()>,
    }

    impl ManualClock {
        /// Stops this thread's clock at `start_ms` (ms since the Unix epoch). Panics if a
        /// manual clock is already alive on this thread (two would fight over the time).
        pub(crate) fn start_at(start_ms: u64) -> ManualClock {
            NOW.with(|n| {
                assert!(n.get().is_none(), "a manual clock is already running");
                n.set(Some(start_ms));
            });
            ManualClock {
                _thread_bound: PhantomData,
            }
        }

        /// Moves this thread's time forward by `by` (whole milliseconds).
        pub(crate) fn advance(&self, by: Duration) {
            let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
            NOW.with(|n| n.set(n.get().map(|t| t.saturating_add(by))));
        }
    }

    impl Drop for ManualClock {
        fn drop(&mut self) {
            NOW.with(|n| n.set(None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::manual::ManualClock;
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_manual_clock_stands_still_until_advanced_and_only_on_its_thread() {
        let clock = ManualClock::start_at(1_000);
        assert_eq!(wall_ms(), 1_000);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(wall_ms(), 1_000, "a manual clock does not follow real time");
        clock.advance(Duration::from_millis(49));
        assert_eq!(wall_ms(), 1_049);
        let other = std::thread::spawn(wall_ms).join().unwrap();
        assert!(
            other > 1_000_000_000_000,
            "other threads keep the system clock"
        );
        drop(clock);
        assert!(
            wall_ms() > 1_000_000_000_000,
            "dropping it restores the system clock"
        );
    }
}
