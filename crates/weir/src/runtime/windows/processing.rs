//! Window assigners in processing time (Flink's `TumblingProcessingTimeWindows`,
//! `SlidingProcessingTimeWindows` and `ProcessingTimeSessionWindows`): the same windows as
//! their event-time counterparts, placed by the wall clock when the record is processed and
//! closed by processing-time timers ([`ProcessingTimeTrigger`](super::ProcessingTimeTrigger)
//! by default) instead of the watermark.
//!
//! They need no timestamps or watermarks and are never late, but their results depend on
//! when records happen to be processed: a replay after a failure may put a record into
//! another window than the first attempt did. What is exactly-once is the state: every
//! record is counted in exactly one attempt's windows, and the windows, their contents and
//! their timers are checkpointed and restored (a timer already due fires at once). As in
//! Flink, windows still open at the end of input do not fire.

use std::time::Duration;

use super::{
    EventTimeSessionWindows, SlidingEventTimeWindows, TimeWindow, TumblingEventTimeWindows,
    WindowAssigner,
};
use crate::error::{Error, Result};
use crate::state::keyed::TimeDomain;

/// Tumbling windows of processing time: each record goes to the window of `size` (aligned
/// to the epoch, or to an offset) containing the moment it is processed.
#[derive(Debug, Clone, Copy)]
pub struct TumblingProcessingTimeWindows(TumblingEventTimeWindows);

impl TumblingProcessingTimeWindows {
    /// Windows of `size`; a size of 0 is an error.
    pub fn of(size: Duration) -> Result<Self> {
        Ok(TumblingProcessingTimeWindows(TumblingEventTimeWindows::of(
            size,
        )?))
    }

    /// Shifts the windows by `offset`, which must be smaller than the size.
    pub fn with_offset(self, offset: Duration) -> Result<Self> {
        Ok(TumblingProcessingTimeWindows(self.0.with_offset(offset)?))
    }
}

impl<T> WindowAssigner<T> for TumblingProcessingTimeWindows {
    fn assign_windows(&self, record: &T, now: u64, out: &mut Vec<TimeWindow>) -> Result<()> {
        self.0.assign_windows(record, now, out)
    }
    fn size_ms(&self) -> Option<u64> {
        WindowAssigner::<T>::size_ms(&self.0)
    }
    fn time_domain(&self) -> TimeDomain {
        TimeDomain::ProcessingTime
    }
}

/// Sliding windows of processing time: windows of `size` starting every `slide`.
#[derive(Debug, Clone, Copy)]
pub struct SlidingProcessingTimeWindows(SlidingEventTimeWindows);

impl SlidingProcessingTimeWindows {
    /// Windows of `size` every `slide`; a size or slide of 0, or a slide larger than the
    /// size, is an error.
    pub fn of(size: Duration, slide: Duration) -> Result<Self> {
        Ok(SlidingProcessingTimeWindows(SlidingEventTimeWindows::of(
            size, slide,
        )?))
    }

    /// Shifts the windows by `offset`, which must be smaller than the slide.
    pub fn with_offset(self, offset: Duration) -> Result<Self> {
        Ok(SlidingProcessingTimeWindows(self.0.with_offset(offset)?))
    }
}

impl<T> WindowAssigner<T> for SlidingProcessingTimeWindows {
    fn assign_windows(&self, record: &T, now: u64, out: &mut Vec<TimeWindow>) -> Result<()> {
        self.0.assign_windows(record, now, out)
    }
    fn size_ms(&self) -> Option<u64> {
        WindowAssigner::<T>::size_ms(&self.0)
    }
    fn time_domain(&self) -> TimeDomain {
        TimeDomain::ProcessingTime
    }
}

/// Sessions in processing time: a key's session ends when no record of it is processed
/// for `gap`.
#[derive(Debug, Clone, Copy)]
pub struct ProcessingTimeSessionWindows(EventTimeSessionWindows);

impl ProcessingTimeSessionWindows {
    /// Sessions closed by a gap of `gap`; a gap of 0 is an error.
    pub fn with_gap(gap: Duration) -> Result<Self> {
        Ok(ProcessingTimeSessionWindows(
            EventTimeSessionWindows::with_gap(gap)?,
        ))
    }

    /// Sessions whose gap each record sets with `gap(record)` (Flink's `withDynamicGap`);
    /// a record whose gap is 0 fails the job with an error saying so.
    pub fn with_dynamic_gap<T, G>(gap: G) -> DynamicProcessingTimeSessionWindows<G>
    where
        G: Fn(&T) -> Duration + Clone + Send + Sync + 'static,
    {
        DynamicProcessingTimeSessionWindows { gap }
    }
}

impl<T> WindowAssigner<T> for ProcessingTimeSessionWindows {
    fn assign_windows(&self, record: &T, now: u64, out: &mut Vec<TimeWindow>) -> Result<()> {
        self.0.assign_windows(record, now, out)
    }
    fn size_ms(&self) -> Option<u64> {
        None
    }
    fn time_domain(&self) -> TimeDomain {
        TimeDomain::ProcessingTime
    }
}

/// Processing-time sessions whose gap comes from each record
/// ([`ProcessingTimeSessionWindows::with_dynamic_gap`]).
#[derive(Clone)]
pub struct DynamicProcessingTimeSessionWindows<G> {
    gap: G,
}

impl<T, G> WindowAssigner<T> for DynamicProcessingTimeSessionWindows<G>
where
    G: Fn(&T) -> Duration + Clone + Send + Sync + 'static,
{
    fn assign_windows(&self, record: &T, now: u64, out: &mut Vec<TimeWindow>) -> Result<()> {
        let gap = super::assigners::millis("session gap", (self.gap)(record)).map_err(|e| {
            Error::InvalidJob(format!(
                "the dynamic session gap of a record processed at {now} ms: {e}"
            ))
        })?;
        out.push(TimeWindow {
            start: now,
            end: now.saturating_add(gap),
        });
        Ok(())
    }
    fn size_ms(&self) -> Option<u64> {
        None
    }
    fn time_domain(&self) -> TimeDomain {
        TimeDomain::ProcessingTime
    }
}

/// One window per key holding all its records (Flink's `GlobalWindows`). It never fires by
/// itself — its default trigger is [`NeverTrigger`](super::NeverTrigger) — so it is used
/// with a trigger ([`WindowedStream::trigger`](crate::api::windowed::WindowedStream::trigger)),
/// e.g. a count or a continuous one; it is never cleaned up by time.
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobalWindows;

impl GlobalWindows {
    /// The assigner (Flink's `GlobalWindows.create()`).
    pub fn create() -> Self {
        GlobalWindows
    }
}

impl<T> WindowAssigner<T> for GlobalWindows {
    fn assign_windows(&self, _: &T, _: u64, out: &mut Vec<TimeWindow>) -> Result<()> {
        out.push(TimeWindow::GLOBAL);
        Ok(())
    }
    fn size_ms(&self) -> Option<u64> {
        Some(u64::MAX)
    }
    fn time_domain(&self) -> TimeDomain {
        TimeDomain::ProcessingTime // like Flink's `isEventTime() == false`: needs no timestamps
    }
    fn is_global(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(a: &impl WindowAssigner<u64>, gap_record: u64, t: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        a.assign_windows(&gap_record, t, &mut out).unwrap();
        out.iter().map(|w| (w.start, w.end)).collect()
    }

    #[test]
    fn processing_time_assigners_by_hand() {
        let ms = Duration::from_millis;
        let a = TumblingProcessingTimeWindows::of(ms(10)).unwrap();
        assert_eq!(windows(&a, 0, 1_005), [(1_000, 1_010)]);
        assert_eq!(
            WindowAssigner::<u64>::time_domain(&a),
            TimeDomain::ProcessingTime
        );
        let a = a.with_offset(ms(3)).unwrap();
        assert_eq!(windows(&a, 0, 1_002), [(993, 1_003)]);
        let a = SlidingProcessingTimeWindows::of(ms(10), ms(5)).unwrap();
        assert_eq!(windows(&a, 0, 1_012), [(1_010, 1_020), (1_005, 1_015)]);
        let a = ProcessingTimeSessionWindows::with_gap(ms(7)).unwrap();
        assert_eq!(windows(&a, 0, 1_000), [(1_000, 1_007)]);
        assert_eq!(WindowAssigner::<u64>::size_ms(&a), None);
        let a = ProcessingTimeSessionWindows::with_dynamic_gap(|g: &u64| Duration::from_millis(*g));
        assert_eq!(windows(&a, 4, 1_000), [(1_000, 1_004)]);
        let mut out = Vec::new();
        let e = a
            .assign_windows(&0, 1_000, &mut out)
            .unwrap_err()
            .to_string();
        assert!(e.contains("session gap is 0"), "{e}");
        let g = GlobalWindows::create();
        assert_eq!(windows(&g, 0, 5), [(0, u64::MAX)]);
        assert!(WindowAssigner::<u64>::is_global(&g) && TimeWindow::GLOBAL.is_global());
    }

    #[test]
    fn bad_processing_time_windows_are_clear_errors() {
        let ms = Duration::from_millis;
        let e = TumblingProcessingTimeWindows::of(ms(0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("window size is 0"), "{e}");
        let e = SlidingProcessingTimeWindows::of(ms(5), ms(10))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("slide 10 ms is larger than the size 5 ms"),
            "{e}"
        );
        let e = SlidingProcessingTimeWindows::of(ms(5), ms(0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("window slide is 0"), "{e}");
        let e = ProcessingTimeSessionWindows::with_gap(ms(0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("session gap is 0"), "{e}");
    }
}
