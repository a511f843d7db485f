//! Event time for the windowed Nexmark queries (q7, q8, q11): the source table's
//! timestamps and watermark, as the benchmark's DDL declares them.
//!
//! `ddl_gen.sql` declares `WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND`: every
//! event (person, auction or bid) is timestamped with its `dateTime`, and the watermark is
//! the largest `dateTime` seen minus 4 s, emitted periodically (Flink SQL's generated
//! watermark generator, which, unlike the DataStream API's bounded out-of-orderness, does
//! not subtract another millisecond). Each source subtask (split) generates its own; the
//! window operators take the minimum over their inputs.

use std::time::Duration;

use weir::prelude::*;
use weir_nexmark::reference::WATERMARK_DELAY_MS;
use weir_nexmark::Event;

/// 10 s: the size of q7's and q8's tumbling windows and q11's session gap.
pub const TEN_SECONDS: Duration = Duration::from_secs(10);

/// The watermark of the SQL's `dateTime - INTERVAL '4' SECOND`: the largest timestamp
/// seen minus 4 s, emitted every auto-watermark interval.
#[derive(Debug, Default)]
pub struct SqlWatermarks {
    max_timestamp: Option<u64>,
}

impl<T> WatermarkGenerator<T> for SqlWatermarks {
    fn on_event(&mut self, _: &T, timestamp: u64, _: &mut WatermarkOutput) {
        self.max_timestamp = Some(self.max_timestamp.map_or(timestamp, |m| m.max(timestamp)));
    }

    fn on_periodic_emit(&mut self, output: &mut WatermarkOutput) {
        // Event time starts once some event is 4 s past the epoch.
        if let Some(w) = self
            .max_timestamp
            .and_then(|m| m.checked_sub(WATERMARK_DELAY_MS as u64))
        {
            output.emit_watermark(w);
        }
    }
}

/// An event's timestamp: its `dateTime` in epoch milliseconds. Event time starts at the
/// epoch, so a `dateTime` before it (only a hand-written input has one) counts as 0.
fn timestamp(event: &Event) -> u64 {
    event.date_time().max(0) as u64
}

/// `events` with timestamps and the SQL's watermark, generated per source subtask (the
/// assigner is chained to the source).
pub fn with_event_time(events: DataStream<Event>) -> DataStream<Event> {
    let strategy = WatermarkStrategy::for_generator(SqlWatermarks::default)
        .with_timestamp_assigner(|e: &Event, _| timestamp(e));
    events.assign_timestamps_and_watermarks(strategy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_is_the_largest_timestamp_minus_four_seconds() {
        let mut g = SqlWatermarks::default();
        let mut out = WatermarkOutput::default();
        WatermarkGenerator::<()>::on_periodic_emit(&mut g, &mut out);
        assert_eq!(out.current_watermark(), 0, "no event, no watermark");
        for t in [10_000, 14_500, 12_000] {
            g.on_event(&(), t, &mut out);
        }
        WatermarkGenerator::<()>::on_periodic_emit(&mut g, &mut out);
        assert_eq!(out.current_watermark(), 10_500);
    }
}
