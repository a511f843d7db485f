//! The triggered window operator driven by hand, without a job: records, watermarks and a
//! manual processing-time clock, against hand-computed results.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::clock::manual::ManualClock;
use crate::runtime::windows::operator::ReduceAggregate;
use crate::runtime::windows::{
    ContinuousEventTimeTrigger, ContinuousProcessingTimeTrigger, CountTrigger,
    EventTimeSessionWindows, GlobalWindows, NeverTrigger, ProcessingTimeSessionWindows,
    ProcessingTimeTrigger, PurgingTrigger, SlidingProcessingTimeWindows, TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed::KeyedStateBackend;

/// `(key, window start, window end, sum)`.
type Row = (u64, u64, u64, u64);

fn row(k: &u64, w: TimeWindow, sum: u64) -> Row {
    (*k, w.start, w.end, sum)
}

type Op<A, TR> = TriggeredWindowAggregate<
    A,
    TR,
    ReduceAggregate<fn(u64, u64) -> u64>,
    fn(&u64, TimeWindow, u64) -> Row,
    Option<u64>,
    u64,
    u64,
    Row,
>;

/// One operator instance with its keyed state, driven by the test.
struct Harness<A, TR: Trigger<u64>> {
    backend: KeyedStateBackend<u64>,
    op: Op<A, TR>,
    out: Vec<Row>,
}

impl<A: WindowAssigner<u64>, TR: Trigger<u64>> Harness<A, TR> {
    fn new(assigner: A, trigger: TR, lateness: u64) -> Self {
        let add: fn(u64, u64) -> u64 = |a, b| a + b;
        let mut op = TriggeredWindowAggregate::new(
            assigner,
            trigger,
            Arc::new(ReduceAggregate(add)),
            Arc::new(row as fn(&u64, TimeWindow, u64) -> Row),
            lateness,
            None,
        );
        let range = KeyGroupRange { start: 0, end: 16 };
        let mut backend = KeyedStateBackend::new(range, 16, BTreeMap::new());
        backend.init_timers().unwrap();
        op.open(&mut KeyedStateStore::new(&mut backend)).unwrap();
        Harness {
            backend,
            op,
            out: Vec::new(),
        }
    }

    /// Processes `value` for `key` (at event time `ts`, if any).
    fn record(&mut self, key: u64, value: u64, ts: Option<u64>) {
        self.backend.time.timestamp = ts;
        let mut ctx = KeyedContext {
            key: &key,
            backend: &mut self.backend,
        };
        let mut out = Collector::new(&mut self.out);
        self.op.process(value, &mut ctx, &mut out).unwrap();
    }

    /// Advances the watermark, firing the event-time timers it passes.
    fn watermark(&mut self, wm: u64) {
        self.backend.time.watermark = wm;
        self.backend.time.domain = Some(TimeDomain::EventTime);
        while let Some((t, key)) = self.backend.pop_due_event_timer(wm) {
            self.backend.time.timestamp = Some(t);
            let mut ctx = KeyedContext {
                key: &key,
                backend: &mut self.backend,
            };
            let mut out = Collector::new(&mut self.out);
            self.op.on_timer(t, &mut ctx, &mut out).unwrap();
        }
        self.backend.time.domain = None;
    }

    /// Fires the processing-time timers due at `now`.
    fn processing_time(&mut self, now: u64) {
        self.backend.time.domain = Some(TimeDomain::ProcessingTime);
        self.backend.time.timestamp = None;
        while let Some((t, key)) = self.backend.pop_due_timer(now) {
            let mut ctx = KeyedContext {
                key: &key,
                backend: &mut self.backend,
            };
            let mut out = Collector::new(&mut self.out);
            self.op.on_timer(t, &mut ctx, &mut out).unwrap();
        }
        self.backend.time.domain = None;
    }

    fn take(&mut self) -> Vec<Row> {
        let mut rows = std::mem::take(&mut self.out);
        rows.sort();
        rows
    }

    /// The entries of both window states, over all keys.
    fn state_sizes(&mut self) -> Vec<(String, usize)> {
        let mut sizes = self.backend.sizes();
        sizes.retain(|(name, _)| !name.starts_with("__"));
        sizes.sort();
        sizes
    }
}

const MS: fn(u64) -> Duration = Duration::from_millis;

#[test]
fn tumbling_processing_time_windows_fire_when_the_clock_reaches_their_end() {
    let clock = ManualClock::start_at(1_000);
    let a = TumblingProcessingTimeWindows::of(MS(10)).unwrap();
    let mut h = Harness::new(a, ProcessingTimeTrigger, 0);
    clock.advance(MS(3));
    h.record(1, 1, None);
    h.record(2, 5, None);
    clock.advance(MS(4)); // 1 007
    h.record(1, 2, None);
    h.processing_time(1_008);
    assert_eq!(h.take(), [], "the window [1000, 1010) is still open");
    clock.advance(MS(5)); // 1 012
    h.record(1, 4, None);
    h.processing_time(1_012);
    assert_eq!(h.take(), [(1, 1_000, 1_010, 3), (2, 1_000, 1_010, 5)]);
    h.processing_time(1_019);
    assert_eq!(
        h.take(),
        [],
        "millisecond 1019 has not passed: a record may still come"
    );
    h.processing_time(1_020);
    assert_eq!(h.take(), [(1, 1_010, 1_020, 4)]);
    assert!(
        h.state_sizes().iter().all(|(_, n)| *n == 0),
        "{:?}",
        h.state_sizes()
    );
}

#[test]
fn sliding_processing_time_windows_by_hand() {
    let clock = ManualClock::start_at(1_002);
    let a = SlidingProcessingTimeWindows::of(MS(10), MS(5)).unwrap();
    let mut h = Harness::new(a, ProcessingTimeTrigger, 0);
    h.record(1, 1, None); // [995, 1005) and [1000, 1010)
    clock.advance(MS(5)); // 1 007: [1000, 1010) and [1005, 1015)
    h.record(1, 10, None);
    h.processing_time(1_020);
    assert_eq!(
        h.take(),
        [
            (1, 995, 1_005, 1),
            (1, 1_000, 1_010, 11),
            (1, 1_005, 1_015, 10)
        ]
    );
}

#[test]
fn processing_time_sessions_merge_and_fire_after_the_gap() {
    let clock = ManualClock::start_at(1_000);
    let a = ProcessingTimeSessionWindows::with_gap(MS(5)).unwrap();
    let mut h = Harness::new(a, ProcessingTimeTrigger, 0);
    h.record(1, 1, None); // [1000, 1005)
    clock.advance(MS(4));
    h.record(1, 2, None); // [1004, 1009): merged [1000, 1009)
    h.processing_time(1_004);
    assert_eq!(h.take(), [], "the first session's end moved on");
    clock.advance(MS(20)); // 1 024
    h.record(1, 4, None); // a new session [1024, 1029)
    h.processing_time(1_024);
    assert_eq!(h.take(), [(1, 1_000, 1_009, 3)]);
    h.processing_time(1_030);
    assert_eq!(h.take(), [(1, 1_024, 1_029, 4)]);
    let a = ProcessingTimeSessionWindows::with_dynamic_gap(|v: &u64| MS(*v));
    let mut h = Harness::new(a, ProcessingTimeTrigger, 0);
    h.record(1, 30, None); // [1024, 1054)
    h.record(2, 2, None); // [1024, 1026)
    h.processing_time(1_030);
    assert_eq!(h.take(), [(2, 1_024, 1_026, 2)]);
    h.processing_time(1_060);
    assert_eq!(h.take(), [(1, 1_024, 1_054, 30)]);
}

#[test]
fn global_windows_never_fire_without_a_trigger() {
    let clock = ManualClock::start_at(1_000);
    let mut h = Harness::new(GlobalWindows, NeverTrigger, 0);
    for i in 0..10 {
        h.record(i % 2, i, Some(i));
    }
    clock.advance(MS(1_000_000));
    h.processing_time(u64::MAX);
    h.watermark(u64::MAX);
    assert_eq!(h.take(), []);
}

#[test]
fn count_triggers_on_global_windows_accumulate_or_purge() {
    let _clock = ManualClock::start_at(1_000);
    let g = TimeWindow::GLOBAL;
    let mut h = Harness::new(GlobalWindows, CountTrigger::of(3).unwrap(), 0);
    for v in 1..=7 {
        h.record(1, v, None);
    }
    assert_eq!(
        h.take(),
        [(1, 0, g.end, 6), (1, 0, g.end, 21)],
        "fire keeps the contents"
    );
    let mut h = Harness::new(
        GlobalWindows,
        PurgingTrigger::of(CountTrigger::of(3).unwrap()),
        0,
    );
    for v in 1..=7 {
        h.record(1, v, None);
    }
    assert_eq!(
        h.take(),
        [(1, 0, g.end, 6), (1, 0, g.end, 15)],
        "purge starts again"
    );
}

#[test]
fn continuous_event_time_trigger_gives_early_results_of_a_long_window() {
    let a = TumblingEventTimeWindows::of(MS(100)).unwrap();
    let t = ContinuousEventTimeTrigger::of(MS(30)).unwrap();
    let mut h = Harness::new(a, t, 0);
    h.record(1, 1, Some(10));
    h.record(1, 2, Some(40));
    h.watermark(35);
    assert_eq!(h.take(), [(1, 0, 100, 3)], "fired at 30");
    h.record(1, 4, Some(70));
    h.watermark(65);
    assert_eq!(h.take(), [(1, 0, 100, 7)], "fired at 60");
    h.watermark(99);
    assert_eq!(
        h.take(),
        [(1, 0, 100, 7), (1, 0, 100, 7)],
        "at 90 and at the end"
    );
    assert!(
        h.state_sizes().iter().all(|(_, n)| *n == 0),
        "cleaned up at the end"
    );
    // Purging: each firing emits what arrived since the last one (by arrival, not by
    // timestamp); a firing with nothing new emits nothing.
    let t = PurgingTrigger::of(ContinuousEventTimeTrigger::of(MS(30)).unwrap());
    let mut h = Harness::new(a, t, 0);
    h.record(1, 1, Some(10));
    h.record(1, 2, Some(40));
    h.watermark(35);
    h.record(1, 4, Some(70));
    h.watermark(99);
    assert_eq!(
        h.take(),
        [(1, 0, 100, 3), (1, 0, 100, 4)],
        "at 30 and at 60"
    );
}

#[test]
fn continuous_processing_time_trigger_on_a_global_window() {
    let clock = ManualClock::start_at(1_005);
    let t = ContinuousProcessingTimeTrigger::of(MS(10)).unwrap();
    let mut h = Harness::new(GlobalWindows, t, 0);
    h.record(1, 1, None);
    clock.advance(MS(10));
    h.record(1, 2, None);
    h.processing_time(1_011); // once millisecond 1010 passed
    h.processing_time(1_015);
    h.record(1, 4, None);
    h.processing_time(1_021);
    let g = TimeWindow::GLOBAL.end;
    assert_eq!(h.take(), [(1, 0, g, 3), (1, 0, g, 7)], "at 1010 and 1020");
}

#[test]
fn merging_sessions_carry_their_count_trigger_state() {
    let a = EventTimeSessionWindows::with_gap(MS(10)).unwrap();
    let mut h = Harness::new(a, CountTrigger::of(3).unwrap(), 0);
    h.record(1, 1, Some(0)); // [0, 10): 1 record
    h.record(1, 2, Some(20)); // [20, 30): 1 record
    assert_eq!(h.take(), []);
    h.record(1, 4, Some(10)); // [10, 20) bridges both: 3 records
    assert_eq!(h.take(), [(1, 0, 30, 7)]);
    h.watermark(100);
    assert_eq!(h.take(), [], "a count trigger does not fire at the end");
    assert!(h.state_sizes().iter().all(|(_, n)| *n == 0), "cleaned up");
}

#[test]
fn merging_sessions_with_a_continuous_trigger_fire_at_the_earliest_time() {
    let a = EventTimeSessionWindows::with_gap(MS(10)).unwrap();
    let t = ContinuousEventTimeTrigger::of(MS(15)).unwrap();
    let mut h = Harness::new(a, t, 0);
    h.record(1, 1, Some(20)); // [20, 30), next firing at 29 (clamped)
    h.record(1, 2, Some(0)); // [0, 10), next firing at 9
    h.record(1, 4, Some(10)); // bridges: [0, 30), next firing at 9
    h.watermark(9);
    assert_eq!(h.take(), [(1, 0, 30, 7)]);
    h.watermark(29);
    assert_eq!(
        h.take(),
        [(1, 0, 30, 7), (1, 0, 30, 7)],
        "at 15 and at the end"
    );
}

#[test]
fn allowed_lateness_with_a_trigger_fires_late_and_then_cleans_up() {
    let a = TumblingEventTimeWindows::of(MS(10)).unwrap();
    let mut h = Harness::new(a, crate::runtime::windows::EventTimeTrigger, 5);
    h.record(1, 1, Some(3));
    h.watermark(9);
    assert_eq!(h.take(), [(1, 0, 10, 1)]);
    h.record(1, 2, Some(4));
    assert_eq!(h.take(), [(1, 0, 10, 3)], "a late firing");
    h.watermark(14);
    h.record(1, 4, Some(5));
    assert_eq!(h.take(), [], "past the lateness: dropped");
    assert!(h.state_sizes().iter().all(|(_, n)| *n == 0));
}
