//! How a stream gets its timestamps and watermarks (Flink's `WatermarkStrategy`): a
//! timestamp assigner, a watermark generator (bounded out-of-orderness, monotonous
//! timestamps, or your own) and an optional idleness timeout.
//!
//! ```
//! use std::time::Duration;
//! use weir::prelude::*;
//! // Events carry their time in `.1`; they arrive at most 5 s out of order.
//! let strategy = WatermarkStrategy::<(u64, u64)>::for_bounded_out_of_orderness(
//!     Duration::from_secs(5),
//! )
//! .with_timestamp_assigner(|e: &(u64, u64), _| e.1)
//! .with_idleness(Duration::from_secs(60));
//! # let _ = strategy;
//! ```
//!
//! A generator is called once per record (`on_event`) and once per auto-watermark interval
//! (`on_periodic_emit`, [`crate::runtime::config::JobConfig::auto_watermark_interval`]);
//! either may emit a watermark or change the idleness through the [`WatermarkOutput`].

use std::sync::Arc;
use std::time::Duration;

use super::WatermarkStatus;
use crate::error::{Error, Result};

/// Extracts a record's event timestamp: `(record, timestamp it already carries, if any)` →
/// its timestamp in epoch milliseconds (Flink's `TimestampAssigner`).
pub type TimestampAssigner<T> = Arc<dyn Fn(&T, Option<u64>) -> u64 + Send + Sync>;

/// Makes one generator per parallel instance of the strategy.
type GeneratorFactory<T> = Arc<dyn Fn() -> Box<dyn WatermarkGenerator<T>> + Send + Sync>;

/// Where a [`WatermarkGenerator`] emits (Flink's `WatermarkOutput`). It keeps what was
/// emitted monotonic: a watermark not above the current one is ignored, so a generator
/// cannot move event time backwards.
#[derive(Debug)]
pub struct WatermarkOutput {
    /// The highest watermark emitted.
    current: u64,
    /// Whether the output is idle.
    pub(crate) idle: bool,
    /// What was last sent downstream (the operator compares to decide what to send).
    sent: u64,
    sent_idle: bool,
}

impl Default for WatermarkOutput {
    fn default() -> Self {
        WatermarkOutput {
            current: super::MIN_WATERMARK,
            idle: false,
            sent: super::MIN_WATERMARK,
            sent_idle: false,
        }
    }
}

impl WatermarkOutput {
    /// Emits `watermark` (ignored unless above the current one); an idle output becomes
    /// active again.
    pub fn emit_watermark(&mut self, watermark: u64) {
        self.idle = false;
        self.current = self.current.max(watermark);
    }

    /// Marks the output idle: its consumers leave it out of their watermark until it emits
    /// a watermark or is marked active.
    pub fn mark_idle(&mut self) {
        self.idle = true;
    }

    /// Marks the output active again.
    pub fn mark_active(&mut self) {
        self.idle = false;
    }

    /// The highest watermark emitted so far.
    pub fn current_watermark(&self) -> u64 {
        self.current
    }

    /// Whether something changed since the last [`WatermarkOutput::take_changes`].
    pub(crate) fn has_changes(&self) -> bool {
        self.current > self.sent || self.idle != self.sent_idle
    }

    /// What changed since the last call, in the order to send it downstream: becoming
    /// active comes before a new watermark, becoming idle after it.
    pub(crate) fn take_changes(&mut self) -> (Option<WatermarkStatus>, Option<u64>, bool) {
        let activate = (!self.idle && self.sent_idle).then_some(WatermarkStatus::Active);
        let watermark = (self.current > self.sent).then_some(self.current);
        let go_idle = self.idle && !self.sent_idle;
        self.sent = self.current;
        self.sent_idle = self.idle;
        (activate, watermark, go_idle)
    }
}

/// Generates watermarks from the records and the passing of time (Flink's
/// `WatermarkGenerator`).
pub trait WatermarkGenerator<T>: Send {
    /// Called for every record, with the timestamp the assigner gave it. Punctuated
    /// generators emit here.
    fn on_event(&mut self, event: &T, timestamp: u64, output: &mut WatermarkOutput);
    /// Called every auto-watermark interval. Periodic generators emit here.
    fn on_periodic_emit(&mut self, output: &mut WatermarkOutput);
}

/// Watermarks for records that arrive at most `delay` out of order: the highest timestamp
/// seen, minus the delay, minus 1 ms (Flink's `BoundedOutOfOrdernessWatermarks`). With a
/// delay of 0 it is the generator for monotonous timestamps.
#[derive(Debug, Clone)]
pub struct BoundedOutOfOrderness {
    max_timestamp: Option<u64>,
    delay_ms: u64,
}

impl BoundedOutOfOrderness {
    /// A generator allowing `max_out_of_orderness`.
    pub fn new(max_out_of_orderness: Duration) -> Self {
        BoundedOutOfOrderness {
            max_timestamp: None,
            delay_ms: u64::try_from(max_out_of_orderness.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl<T> WatermarkGenerator<T> for BoundedOutOfOrderness {
    fn on_event(&mut self, _: &T, timestamp: u64, _: &mut WatermarkOutput) {
        self.max_timestamp = Some(self.max_timestamp.map_or(timestamp, |m| m.max(timestamp)));
    }

    fn on_periodic_emit(&mut self, output: &mut WatermarkOutput) {
        // Nothing seen, or not yet past the delay: event time has not started.
        if let Some(w) = self
            .max_timestamp
            .and_then(|m| m.checked_sub(self.delay_ms))
            .and_then(|m| m.checked_sub(1))
        {
            output.emit_watermark(w);
        }
    }
}

/// Wraps a generator and marks the output idle when no record came for `timeout` (Flink's
/// `WatermarksWithIdleness`): the inactivity is measured from the first periodic call that
/// saw no new record, so idleness is detected between `timeout` and `timeout` plus one
/// auto-watermark interval after the last record.
pub(crate) struct WithIdleness<T> {
    inner: Box<dyn WatermarkGenerator<T>>,
    timeout_ms: u64,
    records: u64,
    records_at_last_check: u64,
    inactive_since: Option<u64>,
    clock: Arc<dyn Fn() -> u64 + Send + Sync>,
}

impl<T> WithIdleness<T> {
    pub(crate) fn new(
        inner: Box<dyn WatermarkGenerator<T>>,
        timeout_ms: u64,
        clock: Arc<dyn Fn() -> u64 + Send + Sync>,
    ) -> Self {
        WithIdleness {
            inner,
            timeout_ms,
            records: 0,
            records_at_last_check: 0,
            inactive_since: None,
            clock,
        }
    }

    fn is_idle(&mut self) -> bool {
        if self.records != self.records_at_last_check {
            self.records_at_last_check = self.records;
            self.inactive_since = None;
            return false;
        }
        let now = (self.clock)();
        let since = *self.inactive_since.get_or_insert(now);
        now.saturating_sub(since) >= self.timeout_ms
    }
}

impl<T> WatermarkGenerator<T> for WithIdleness<T> {
    fn on_event(&mut self, event: &T, timestamp: u64, output: &mut WatermarkOutput) {
        self.records += 1;
        if output.idle {
            output.mark_active();
        }
        self.inner.on_event(event, timestamp, output);
    }

    fn on_periodic_emit(&mut self, output: &mut WatermarkOutput) {
        if self.is_idle() {
            output.mark_idle();
        } else {
            self.inner.on_periodic_emit(output);
        }
    }
}

/// How a stream gets timestamps and watermarks; attach it with
/// `DataStream::assign_timestamps_and_watermarks` (after any operator) or
/// `StreamEnvironment::add_source_with_watermarks` (per source subtask). Each parallel
/// instance gets its own generator.
pub struct WatermarkStrategy<T> {
    generator: GeneratorFactory<T>,
    assigner: Option<TimestampAssigner<T>>,
    idleness: Option<Duration>,
    /// Watermark alignment: the group's name and the maximum drift in milliseconds.
    alignment: Option<(String, u64)>,
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        WatermarkStrategy {
            generator: self.generator.clone(),
            assigner: self.assigner.clone(),
            idleness: self.idleness,
            alignment: self.alignment.clone(),
        }
    }
}

impl<T: 'static> WatermarkStrategy<T> {
    /// Records arrive at most `max_out_of_orderness` late relative to the latest one seen.
    pub fn for_bounded_out_of_orderness(max_out_of_orderness: Duration) -> Self {
        Self::for_generator(move || BoundedOutOfOrderness::new(max_out_of_orderness))
    }

    /// Timestamps never decrease (per parallel instance): the watermark is the latest
    /// timestamp minus 1 ms.
    pub fn for_monotonous_timestamps() -> Self {
        Self::for_bounded_out_of_orderness(Duration::ZERO)
    }

    /// Your own generator, made once per parallel instance by `make`.
    pub fn for_generator<G: WatermarkGenerator<T> + 'static>(
        make: impl Fn() -> G + Send + Sync + 'static,
    ) -> Self {
        WatermarkStrategy {
            generator: Arc::new(move || Box::new(make()) as Box<dyn WatermarkGenerator<T>>),
            assigner: None,
            idleness: None,
            alignment: None,
        }
    }

    /// Timestamps but no watermarks (Flink's `noWatermarks`).
    pub fn no_watermarks() -> Self {
        Self::for_generator(|| NoWatermarks)
    }

    /// Sets the timestamp assigner: `(record, timestamp it already carries)` → timestamp.
    /// Without one, records must already carry timestamps from upstream.
    pub fn with_timestamp_assigner(
        mut self,
        assigner: impl Fn(&T, Option<u64>) -> u64 + Send + Sync + 'static,
    ) -> Self {
        self.assigner = Some(Arc::new(assigner));
        self
    }

    /// Marks an instance idle when no record arrived for `timeout`, so that it does not
    /// hold back the watermark downstream; it becomes active with its next record.
    pub fn with_idleness(mut self, timeout: Duration) -> Self {
        self.idleness = Some(timeout);
        self
    }

    /// Watermark alignment (Flink's `withWatermarkAlignment`): every source subtask of this
    /// strategy (and of its clones) joins the alignment group `group`, and one whose
    /// watermark runs more than `max_drift` ahead of the group's slowest pauses reading until
    /// the others catch up. Sources of one job whose strategies name the same group share
    /// it. Watermarks are shared every auto-watermark interval. Splits that
    /// are idle, finished or without a watermark yet do not hold the others back. Applies at
    /// sources (`StreamEnvironment::add_source_with_watermarks`); after an operator, which
    /// cannot pause its input, it is ignored.
    pub fn with_watermark_alignment(mut self, group: &str, max_drift: Duration) -> Self {
        let drift = u64::try_from(max_drift.as_millis()).unwrap_or(u64::MAX);
        self.alignment = Some((group.to_string(), drift));
        self
    }

    /// The alignment group's name and the maximum drift in milliseconds, if set.
    pub(crate) fn alignment(&self) -> Option<(&str, u64)> {
        self.alignment.as_ref().map(|(g, d)| (g.as_str(), *d))
    }

    /// The timestamp assigner, if set.
    pub(crate) fn assigner(&self) -> Option<TimestampAssigner<T>> {
        self.assigner.clone()
    }

    /// A generator for one parallel instance, with the idleness wrapper when configured;
    /// an idleness timeout of zero is refused.
    pub(crate) fn create_generator(&self) -> Result<Box<dyn WatermarkGenerator<T>>> {
        let inner = (self.generator)();
        match self.idleness {
            None => Ok(inner),
            Some(t) if t.is_zero() => Err(Error::InvalidJob(
                "WatermarkStrategy::with_idleness: the idle timeout must be greater than 0".into(),
            )),
            Some(t) => Ok(Box::new(WithIdleness::new(
                inner,
                u64::try_from(t.as_millis()).unwrap_or(u64::MAX),
                Arc::new(crate::clock::wall_ms),
            ))),
        }
    }
}

/// The generator of [`WatermarkStrategy::no_watermarks`].
struct NoWatermarks;

impl<T> WatermarkGenerator<T> for NoWatermarks {
    fn on_event(&mut self, _: &T, _: u64, _: &mut WatermarkOutput) {}
    fn on_periodic_emit(&mut self, _: &mut WatermarkOutput) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn periodic(g: &mut dyn WatermarkGenerator<u8>, out: &mut WatermarkOutput) -> Option<u64> {
        g.on_periodic_emit(out);
        out.take_changes().1
    }

    #[test]
    fn bounded_out_of_orderness_trails_the_highest_timestamp() {
        let mut g = BoundedOutOfOrderness::new(Duration::from_millis(5));
        let mut out = WatermarkOutput::default();
        assert_eq!(periodic(&mut g, &mut out), None, "nothing seen yet");
        g.on_event(&0, 3, &mut out);
        assert_eq!(
            periodic(&mut g, &mut out),
            None,
            "3 - 5 - 1 is before event time"
        );
        g.on_event(&0, 100, &mut out);
        g.on_event(&0, 90, &mut out);
        assert_eq!(periodic(&mut g, &mut out), Some(94));
        g.on_event(&0, 97, &mut out);
        assert_eq!(
            periodic(&mut g, &mut out),
            None,
            "unchanged: nothing to send"
        );
        g.on_event(&0, 120, &mut out);
        assert_eq!(periodic(&mut g, &mut out), Some(114));
    }

    #[test]
    fn monotonous_timestamps_trail_by_one_millisecond() {
        let s = WatermarkStrategy::<u8>::for_monotonous_timestamps();
        let mut g = s.create_generator().unwrap();
        let mut out = WatermarkOutput::default();
        g.on_event(&0, 10, &mut out);
        assert_eq!(periodic(g.as_mut(), &mut out), Some(9));
        g.on_event(&0, 11, &mut out);
        assert_eq!(periodic(g.as_mut(), &mut out), Some(10));
    }

    #[test]
    fn the_output_never_goes_backwards() {
        let mut out = WatermarkOutput::default();
        out.emit_watermark(50);
        assert_eq!(out.take_changes().1, Some(50));
        out.emit_watermark(40);
        assert_eq!(out.take_changes().1, None);
        assert_eq!(out.current_watermark(), 50);
    }

    #[test]
    fn idleness_after_the_timeout_without_records_and_active_on_the_next() {
        let now = Arc::new(AtomicU64::new(1_000));
        let clock = {
            let now = now.clone();
            Arc::new(move || now.load(Ordering::Relaxed))
        };
        let inner = Box::new(BoundedOutOfOrderness::new(Duration::ZERO));
        let mut g = WithIdleness::<u8>::new(inner, 100, clock);
        let mut out = WatermarkOutput::default();
        g.on_event(&0, 7, &mut out);
        g.on_periodic_emit(&mut out);
        assert_eq!(out.take_changes(), (None, Some(6), false));
        // No records from now on: idle once 100 ms passed since the first quiet check.
        now.store(1_050, Ordering::Relaxed);
        g.on_periodic_emit(&mut out);
        assert_eq!(out.take_changes(), (None, None, false));
        now.store(1_140, Ordering::Relaxed);
        g.on_periodic_emit(&mut out);
        assert_eq!(out.take_changes(), (None, None, false), "90 ms quiet");
        now.store(1_150, Ordering::Relaxed);
        g.on_periodic_emit(&mut out);
        assert_eq!(out.take_changes(), (None, None, true), "100 ms quiet: idle");
        g.on_periodic_emit(&mut out);
        assert_eq!(out.take_changes(), (None, None, false), "sent once");
        g.on_event(&0, 8, &mut out);
        g.on_periodic_emit(&mut out);
        assert_eq!(
            out.take_changes(),
            (Some(WatermarkStatus::Active), Some(7), false)
        );
    }

    #[test]
    fn a_zero_idle_timeout_is_refused() {
        let s = WatermarkStrategy::<u8>::for_monotonous_timestamps().with_idleness(Duration::ZERO);
        let e = s.create_generator().err().unwrap().to_string();
        assert!(e.contains("idle timeout"), "{e}");
    }
}
