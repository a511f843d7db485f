//! What the hand-computed window tests run their event lists with, written once: the
//! events as a stream whose watermarks the markers set (see [`Markers`]), and the results
//! without the markers' own rows.

use weir::prelude::*;

use super::Markers;

/// `(key, timestamp, value)`; key 99 marks a watermark at its timestamp.
pub type Ev = (u64, u64, u64);

/// `events` as a stream in arrival order (one generator subtask), with their timestamps
/// and a watermark at each marker: a test decides exactly when each window fires.
pub fn marked(env: &StreamEnvironment, events: &'static [Ev]) -> DataStream<Ev> {
    env.add_source("events", GeneratorSource::new(events.len() as u64))
        .map(move |i| events[i as usize])
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_generator(|| Markers).with_timestamp_assigner(|e: &Ev, _| e.1),
        )
}

/// A row whose first field is its key (99 for a marker's).
pub trait KeyFirst {
    /// The row's key.
    fn key(&self) -> u64;
}

impl<A> KeyFirst for (u64, A) {
    fn key(&self) -> u64 {
        self.0
    }
}

impl<A, B> KeyFirst for (u64, A, B) {
    fn key(&self) -> u64 {
        self.0
    }
}

impl<A, B, C> KeyFirst for (u64, A, B, C) {
    fn key(&self) -> u64 {
        self.0
    }
}

/// What `sink` collected, without the markers' rows, sorted.
pub fn without_markers<R: KeyFirst + Ord + Clone>(sink: &CollectSink<R>) -> Vec<R> {
    let mut rows: Vec<R> = sink.take().into_iter().filter(|r| r.key() != 99).collect();
    rows.sort();
    rows
}
