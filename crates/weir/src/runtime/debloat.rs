//! Buffer debloating (Flink's FLIP-183): a network writer sizes each channel's batches so
//! that what is in flight to a slow consumer takes about a target time to process.
//!
//! Why: an aligned barrier waits behind every record queued before it. A channel holds
//! `channel_capacity` batches of up to [`BATCH_SIZE`] records, so in front of a consumer
//! doing 65 k records per second (the disk backend at 10 M keys) a barrier waits ~400 ms
//! per channel, and alignment waits for the slowest channel. Fewer records per batch under
//! backpressure shorten that wait without touching the bound in batches (which remote
//! permits count too) and without costing anything where the consumer keeps up.
//!
//! How, on the sender's side only (no message from the consumer: the rate at which a full
//! channel accepts batches *is* its consumer's rate for that channel):
//!
//! * Per window of [`WINDOW`], per channel, the writer counts the records it handed over
//!   and whether the channel was ever found full when a batch was handed over.
//! * A channel found full is backpressured: its batch limit becomes
//!   `rate × target ÷ slots`, clamped to `MIN_BATCH..=BATCH_SIZE`, where `slots` is the
//!   batches that can be in flight on it (its capacity, the batch blocked in a send, the
//!   open one).
//! * A channel never found full doubles its limit, up to [`BATCH_SIZE`]: a consumer that
//!   keeps up gets full batches back within a few windows.
//!
//! Invariants: a limit is always in `MIN_BATCH..=BATCH_SIZE`; without backpressure every
//! limit is [`BATCH_SIZE`] (the writer behaves exactly as without debloating); the limits
//! only size batches — barriers, watermarks and end-of-input still flush whatever is open.

use std::time::{Duration, Instant};

use crate::runtime::BATCH_SIZE;

/// The fewest records a debloated batch is cut at: below it the per-batch cost of a send
/// would dominate (Flink's `buffer-debloat.min-buffer-size` plays the same part).
pub const MIN_BATCH: usize = 16;

/// How often the limits are recomputed: long enough to average a few batches of a slow
/// channel, short enough to follow a change of pace within a checkpoint interval.
pub const WINDOW: Duration = Duration::from_millis(100);

/// A job's debloating settings, handed to each network writer
/// ([`crate::runtime::output::Output::set_debloat`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Debloat {
    /// How long the records in flight on a backpressured channel should take its consumer
    /// (Flink's `taskmanager.network.memory.buffer-debloat.target`).
    pub target: Duration,
    /// Batches a channel holds (`JobConfig::channel_capacity`).
    pub capacity: usize,
}

/// One writer's per-channel batch limits and the counts they are computed from.
#[derive(Debug)]
pub(crate) struct Debloater {
    target: Duration,
    /// Batches that can be in flight on one channel: its capacity, one blocked in a send,
    /// the open one.
    slots: u64,
    window_start: Instant,
    /// Per channel, records handed over in this window.
    sent: Vec<u64>,
    /// Per channel, whether it was found full in this window.
    backpressured: Vec<bool>,
}

impl Debloater {
    /// Starts for `channels` channels at `now`; every limit starts at [`BATCH_SIZE`].
    pub(crate) fn new(d: Debloat, channels: usize, now: Instant) -> Self {
        Debloater {
            target: d.target,
            slots: d.capacity as u64 + 2,
            window_start: now,
            sent: vec![0; channels],
            backpressured: vec![false; channels],
        }
    }

    /// Records that a batch of `records` records was handed to channel `c`, which was
    /// `full` at that moment; at the end of a window recomputes `limits` (one per channel).
    #[inline]
    pub(crate) fn on_send(
        &mut self,
        c: usize,
        records: usize,
        full: bool,
        now: Instant,
        limits: &mut [usize],
    ) {
        self.sent[c] += records as u64;
        self.backpressured[c] |= full;
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed >= WINDOW {
            self.recompute(elapsed, limits);
            self.window_start = now;
        }
    }

    fn recompute(&mut self, elapsed: Duration, limits: &mut [usize]) {
        let elapsed_ns = elapsed.as_nanos().max(1);
        let target_ns = self.target.as_nanos();
        for ((sent, bp), limit) in self
            .sent
            .iter_mut()
            .zip(self.backpressured.iter_mut())
            .zip(limits.iter_mut())
        {
            *limit = if *bp {
                // records/s × target ÷ slots, in integers: sent × target ÷ (elapsed × slots).
                let fit = u128::from(*sent) * target_ns / (elapsed_ns * u128::from(self.slots));
                (fit.min(BATCH_SIZE as u128) as usize).max(MIN_BATCH)
            } else {
                (*limit * 2).clamp(MIN_BATCH, BATCH_SIZE)
            };
            *sent = 0;
            *bp = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn debloater(target_ms: u64, channels: usize, t0: Instant) -> Debloater {
        Debloater::new(
            Debloat {
                target: Duration::from_millis(target_ms),
                capacity: 4,
            },
            channels,
            t0,
        )
    }

    #[test]
    fn a_backpressured_channel_gets_batches_that_fit_the_target() {
        let t0 = Instant::now();
        let mut d = debloater(12, 2, t0);
        let mut limits = vec![BATCH_SIZE; 2];
        // Channel 0: full, 6 500 records in a 100 ms window = 65 k/s; 12 ms of that over
        // 6 slots = 130 records a batch. Channel 1: never full.
        for i in 0..65u32 {
            let now = t0 + Duration::from_micros(1_000 * u64::from(i));
            d.on_send(0, 100, true, now, &mut limits);
            d.on_send(1, 100, false, now, &mut limits);
        }
        assert_eq!(limits, vec![BATCH_SIZE; 2], "no window has ended yet");
        d.on_send(0, 0, true, t0 + WINDOW, &mut limits);
        assert_eq!(limits, vec![130, BATCH_SIZE]);
    }

    #[test]
    fn a_fast_consumer_keeps_full_batches_and_a_slow_one_never_gets_below_the_minimum() {
        let t0 = Instant::now();
        let mut d = debloater(10, 2, t0);
        let mut limits = vec![BATCH_SIZE; 2];
        // Channel 0: full, but 10 M records/s: 10 ms is far more than the slots hold.
        d.on_send(0, 1_000_000, true, t0, &mut limits);
        // Channel 1: full, 10 records in the window.
        d.on_send(1, 10, true, t0, &mut limits);
        d.on_send(1, 0, true, t0 + WINDOW, &mut limits);
        assert_eq!(limits, vec![BATCH_SIZE, MIN_BATCH]);
    }

    #[test]
    fn a_limit_grows_back_once_its_channel_is_no_longer_full() {
        let t0 = Instant::now();
        let mut d = debloater(10, 1, t0);
        let mut limits = vec![MIN_BATCH];
        let mut now = t0;
        let mut seen = vec![];
        for _ in 0..10 {
            now += WINDOW;
            d.on_send(0, 5, false, now, &mut limits);
            seen.push(limits[0]);
        }
        assert_eq!(seen[..3], [32, 64, 128]);
        assert_eq!(*seen.last().unwrap(), BATCH_SIZE);
    }
}
