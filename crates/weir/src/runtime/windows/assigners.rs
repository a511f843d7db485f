//! Window assigners: which windows a record with a given timestamp belongs to (Flink's
//! `WindowAssigner`, `TumblingEventTimeWindows`, `SlidingEventTimeWindows`).
//!
//! Event time starts at the Unix epoch (timestamps are `u64` milliseconds). A window that
//! would begin before it (a sliding window `[-5, 5)` for a record at time 2, or the first
//! window of an offset) is assigned as in Flink and fires at the same time, but reports its
//! start as 0: a window is identified by its end.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::state::keyed::TimeDomain;

/// A window of event time `[start, end)` in epoch milliseconds (Flink's `TimeWindow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TimeWindow {
    /// The first millisecond in the window.
    pub start: u64,
    /// The first millisecond after the window.
    pub end: u64,
}

impl TimeWindow {
    /// The one window of [`GlobalWindows`](super::GlobalWindows), holding all of a key's
    /// records: it spans all time, so its last millisecond is reached only by the maximum
    /// watermark at the end of input (Flink's `GlobalWindow`, whose `maxTimestamp` is the
    /// largest time). A `TimeWindow` rather than a type of its own, so that every window
    /// function and the time windows' hot path keep one concrete window type.
    pub const GLOBAL: TimeWindow = TimeWindow {
        start: 0,
        end: u64::MAX,
    };

    /// The last millisecond in the window: when the watermark reaches it, the window fires.
    pub fn max_timestamp(&self) -> u64 {
        self.end - 1
    }

    /// Whether this is [`TimeWindow::GLOBAL`], which is never cleaned up by time.
    pub fn is_global(&self) -> bool {
        *self == TimeWindow::GLOBAL
    }
}

/// Decides the windows of a record of type `T` from the record and its timestamp.
///
/// Windows of a fixed size ([`WindowAssigner::size_ms`] is `Some`) are identified by their
/// end (the window state is keyed by end). Merging windows (sessions, `size_ms` is `None`)
/// get one window per record, merged with every window of the key it overlaps.
pub trait WindowAssigner<T>: Clone + Send + Sync + 'static {
    /// Appends the windows of `record` at `timestamp` to `out`; an error for a record whose
    /// window cannot be computed (a dynamic session gap of 0).
    fn assign_windows(&self, record: &T, timestamp: u64, out: &mut Vec<TimeWindow>) -> Result<()>;
    /// The size of every window, or `None` for windows that merge (sessions).
    fn size_ms(&self) -> Option<u64>;

    /// The clock that places records in windows and closes them (Flink's
    /// `isEventTime`): event time (the record's timestamp, windows closed by the watermark)
    /// or processing time (the wall clock when the record is processed). The operator
    /// passes that clock's time to [`WindowAssigner::assign_windows`].
    fn time_domain(&self) -> TimeDomain {
        TimeDomain::EventTime
    }

    /// Whether the windows depend on the timestamp alone, not on the record (true of the
    /// built-in tumbling and sliding windows): the window operator then assigns a run of
    /// records with one timestamp once, not once per record. The default, `false`, is
    /// always correct.
    fn by_timestamp_only(&self) -> bool {
        false
    }

    /// Whether this assigner makes [`TimeWindow::GLOBAL`] only ([`GlobalWindows`](super::GlobalWindows)):
    /// its windows need a trigger to fire and are never cleaned up by time.
    fn is_global(&self) -> bool {
        false
    }
}

pub(crate) fn millis(what: &str, d: Duration) -> Result<u64> {
    match u64::try_from(d.as_millis()) {
        Ok(0) => Err(Error::InvalidJob(format!(
            "window {what} is 0: it must be at least 1 ms"
        ))),
        Ok(ms) => Ok(ms),
        Err(_) => Err(Error::InvalidJob(format!(
            "window {what} {d:?} is too large"
        ))),
    }
}

/// The start of the window of `size` (aligned to `offset`) containing `timestamp` (Flink's
/// `TimeWindow.getWindowStartWithOffset`); negative before the epoch.
pub(crate) fn window_start(timestamp: u64, offset: u64, size: u64) -> i128 {
    // The common case in 64 bits (an `i128` remainder is a library call on every record):
    // with `t ≥ o`, `(t - o + s) mod s = (t - o) mod s` and the start is in `0..=t`.
    if timestamp >= offset && size > 0 {
        return (timestamp - (timestamp - offset) % size) as i128;
    }
    window_start_wide(timestamp, offset, size)
}

/// [`window_start`] in 128 bits, for a timestamp before the offset (a start before the
/// epoch).
fn window_start_wide(timestamp: u64, offset: u64, size: u64) -> i128 {
    let (t, o, s) = (timestamp as i128, offset as i128, size as i128);
    t - (t - o + s).rem_euclid(s)
}

/// The window `[start, start + size)`, its start clamped to the epoch.
pub(crate) fn window(start: i128, size: u64) -> TimeWindow {
    TimeWindow {
        start: start.max(0) as u64,
        end: (start + size as i128) as u64,
    }
}

/// Windows of a fixed size that do not overlap: each record belongs to exactly one.
#[derive(Debug, Clone, Copy)]
pub struct TumblingEventTimeWindows {
    size: u64,
    offset: u64,
}

impl TumblingEventTimeWindows {
    /// Windows of `size`, aligned to the epoch. A size of 0 is an error.
    pub fn of(size: Duration) -> Result<Self> {
        Ok(TumblingEventTimeWindows {
            size: millis("size", size)?,
            offset: 0,
        })
    }

    /// Shifts the windows by `offset` (e.g. to align hourly windows to a time zone); the
    /// offset must be smaller than the size.
    pub fn with_offset(mut self, offset: Duration) -> Result<Self> {
        let offset = u64::try_from(offset.as_millis()).unwrap_or(u64::MAX);
        if offset >= self.size {
            return Err(Error::InvalidJob(format!(
                "window offset {offset} ms must be smaller than the size ({} ms)",
                self.size
            )));
        }
        self.offset = offset;
        Ok(self)
    }
}

impl<T> WindowAssigner<T> for TumblingEventTimeWindows {
    fn by_timestamp_only(&self) -> bool {
        true
    }
    fn assign_windows(&self, _: &T, timestamp: u64, out: &mut Vec<TimeWindow>) -> Result<()> {
        out.push(window(
            window_start(timestamp, self.offset, self.size),
            self.size,
        ));
        Ok(())
    }
    fn size_ms(&self) -> Option<u64> {
        Some(self.size)
    }
}

/// Windows of a fixed size starting every `slide`: a record belongs to `size / slide` of
/// them (when the slide divides the size).
#[derive(Debug, Clone, Copy)]
pub struct SlidingEventTimeWindows {
    size: u64,
    slide: u64,
    offset: u64,
}

impl SlidingEventTimeWindows {
    /// Windows of `size` every `slide`. A size or slide of 0, or a slide larger than the
    /// size (records between windows would belong to none), is an error.
    pub fn of(size: Duration, slide: Duration) -> Result<Self> {
        let (size, slide) = (millis("size", size)?, millis("slide", slide)?);
        if slide > size {
            return Err(Error::InvalidJob(format!(
                "window slide {slide} ms is larger than the size {size} ms: records between \
                 windows would be dropped; use a slide at most the size"
            )));
        }
        Ok(SlidingEventTimeWindows {
            size,
            slide,
            offset: 0,
        })
    }

    /// Shifts the windows by `offset`, which must be smaller than the slide.
    pub fn with_offset(mut self, offset: Duration) -> Result<Self> {
        let offset = u64::try_from(offset.as_millis()).unwrap_or(u64::MAX);
        if offset >= self.slide {
            return Err(Error::InvalidJob(format!(
                "window offset {offset} ms must be smaller than the slide ({} ms)",
                self.slide
            )));
        }
        self.offset = offset;
        Ok(self)
    }
}

impl<T> WindowAssigner<T> for SlidingEventTimeWindows {
    fn by_timestamp_only(&self) -> bool {
        true
    }
    fn assign_windows(&self, _: &T, timestamp: u64, out: &mut Vec<TimeWindow>) -> Result<()> {
        let mut start = window_start(timestamp, self.offset, self.slide);
        // `start <= timestamp` always; the window holds it while it ends after it.
        while start + self.size as i128 > timestamp as i128 {
            out.push(window(start, self.size));
            start -= self.slide as i128;
        }
        Ok(())
    }
    fn size_ms(&self) -> Option<u64> {
        Some(self.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(a: &impl WindowAssigner<()>, t: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        a.assign_windows(&(), t, &mut out).unwrap();
        out.iter().map(|w| (w.start, w.end)).collect()
    }

    /// The 64-bit fast path gives the 128-bit formula's start, at the edges of `u64` too.
    #[test]
    fn window_start_fast_path_is_the_wide_formula() {
        let edge = [
            0,
            1,
            2,
            3,
            7,
            9,
            10,
            11,
            999,
            1000,
            1001,
            u64::MAX / 2,
            u64::MAX - 1,
        ];
        for t in edge.iter().copied().chain([u64::MAX]) {
            for o in [0, 1, 3, 9, 999, u64::MAX - 1] {
                for s in [1, 2, 3, 10, 1000, u64::MAX] {
                    assert_eq!(
                        window_start(t, o, s),
                        window_start_wide(t, o, s),
                        "t {t}, offset {o}, size {s}"
                    );
                }
            }
        }
    }

    #[test]
    fn tumbling_windows_by_hand() {
        let a = TumblingEventTimeWindows::of(Duration::from_millis(10)).unwrap();
        assert_eq!(windows(&a, 0), [(0, 10)]);
        assert_eq!(windows(&a, 9), [(0, 10)]);
        assert_eq!(windows(&a, 10), [(10, 20)]);
        let a = a.with_offset(Duration::from_millis(3)).unwrap();
        assert_eq!(windows(&a, 2), [(0, 3)], "[-7, 3), its start clamped");
        assert_eq!(windows(&a, 3), [(3, 13)]);
        assert_eq!(windows(&a, 12), [(3, 13)]);
        assert_eq!(windows(&a, 13), [(13, 23)]);
    }

    #[test]
    fn sliding_windows_by_hand() {
        let a = SlidingEventTimeWindows::of(Duration::from_millis(10), Duration::from_millis(5))
            .unwrap();
        assert_eq!(windows(&a, 12), [(10, 20), (5, 15)]);
        assert_eq!(windows(&a, 15), [(15, 25), (10, 20)]);
        assert_eq!(
            windows(&a, 2),
            [(0, 10), (0, 5)],
            "[-5, 5) starts at the epoch"
        );
        let a = SlidingEventTimeWindows::of(Duration::from_millis(10), Duration::from_millis(3))
            .unwrap();
        assert_eq!(windows(&a, 10), [(9, 19), (6, 16), (3, 13)]);
        let a = SlidingEventTimeWindows::of(Duration::from_millis(4), Duration::from_millis(4))
            .unwrap();
        assert_eq!(windows(&a, 5), [(4, 8)], "slide = size: tumbling");
    }

    #[test]
    fn bad_sizes_and_slides_are_clear_errors() {
        let e = TumblingEventTimeWindows::of(Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(e.contains("window size is 0"), "{e}");
        let e = SlidingEventTimeWindows::of(Duration::from_secs(1), Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(e.contains("window slide is 0"), "{e}");
        let e = SlidingEventTimeWindows::of(Duration::from_secs(1), Duration::from_secs(2))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("slide 2000 ms is larger than the size 1000 ms"),
            "{e}"
        );
        let e = TumblingEventTimeWindows::of(Duration::from_secs(1))
            .unwrap()
            .with_offset(Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("offset"), "{e}");
    }
}
