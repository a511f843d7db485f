//! The built-in triggers against hand-computed decisions, with a fake context.

use std::time::Duration;

use super::*;

/// Time the test sets, and the timers a trigger registered.
#[derive(Default)]
struct Fake {
    watermark: Option<u64>,
    now: u64,
    event_timers: Vec<u64>,
    processing_timers: Vec<u64>,
}

impl TriggerContext for Fake {
    fn current_watermark(&self) -> Option<u64> {
        self.watermark
    }
    fn current_processing_time(&self) -> u64 {
        self.now
    }
    fn register_event_time_timer(&mut self, time: u64) {
        self.event_timers.push(time);
    }
    fn register_processing_time_timer(&mut self, time: u64) {
        self.processing_timers.push(time);
    }
}

const W: TimeWindow = TimeWindow { start: 0, end: 100 };
use TriggerResult::{Continue, Fire, FireAndPurge};

#[test]
fn event_time_trigger_fires_at_the_window_end_and_late_records_at_once() {
    let (t, mut c) = (EventTimeTrigger, Fake::default());
    assert_eq!(
        Trigger::<()>::on_element(&t, &(), 5, W, &mut (), &mut c),
        Continue
    );
    assert_eq!(c.event_timers, [99]);
    assert_eq!(
        Trigger::<()>::on_event_time(&t, 50, W, &mut (), &mut c),
        Continue
    );
    assert_eq!(
        Trigger::<()>::on_event_time(&t, 99, W, &mut (), &mut c),
        Fire
    );
    c.watermark = Some(99);
    assert_eq!(
        Trigger::<()>::on_element(&t, &(), 7, W, &mut (), &mut c),
        Fire
    );
    assert_eq!(c.event_timers, [99], "a late firing registers nothing");
}

#[test]
fn processing_time_trigger_fires_at_the_window_end_in_processing_time() {
    let (t, mut c) = (ProcessingTimeTrigger, Fake::default());
    assert_eq!(
        Trigger::<()>::on_element(&t, &(), 5, W, &mut (), &mut c),
        Continue
    );
    assert_eq!(c.processing_timers, [99]);
    assert_eq!(
        Trigger::<()>::on_event_time(&t, 99, W, &mut (), &mut c),
        Continue
    );
    assert_eq!(
        Trigger::<()>::on_processing_time(&t, 98, W, &mut (), &mut c),
        Continue
    );
    assert_eq!(
        Trigger::<()>::on_processing_time(&t, 99, W, &mut (), &mut c),
        Fire
    );
}

#[test]
fn count_trigger_fires_every_n_records_and_sums_on_merge() {
    let (t, mut c) = (CountTrigger::of(3).unwrap(), Fake::default());
    let mut n = 0;
    let fired: Vec<_> = (0..7)
        .map(|i| Trigger::<()>::on_element(&t, &(), i, W, &mut n, &mut c))
        .collect();
    assert_eq!(
        fired,
        [Continue, Continue, Fire, Continue, Continue, Fire, Continue]
    );
    assert_eq!(n, 1);
    let mut merged = 0;
    Trigger::<()>::on_merge(&t, W, &mut merged, 1, &mut c);
    Trigger::<()>::on_merge(&t, W, &mut merged, 1, &mut c);
    assert_eq!(merged, 2);
    assert_eq!(
        Trigger::<()>::on_element(&t, &(), 9, W, &mut merged, &mut c),
        Fire
    );
    assert!(c.event_timers.is_empty() && c.processing_timers.is_empty());
}

#[test]
fn continuous_event_time_trigger_fires_every_interval_and_at_the_end() {
    let t = ContinuousEventTimeTrigger::of(Duration::from_millis(30)).unwrap();
    let (mut c, mut next) = (Fake::default(), None);
    assert_eq!(
        Trigger::<()>::on_element(&t, &(), 12, W, &mut next, &mut c),
        Continue
    );
    assert_eq!(next, Some(30), "aligned to the interval");
    assert_eq!(c.event_timers, [99, 30]);
    assert_eq!(
        Trigger::<()>::on_element(&t, &(), 40, W, &mut next, &mut c),
        Continue
    );
    assert_eq!(next, Some(30), "one pending firing at a time");
    let mut fired = Vec::new();
    for time in [30, 45, 60, 90, 99] {
        fired.push(Trigger::<()>::on_event_time(&t, time, W, &mut next, &mut c));
    }
    assert_eq!(fired, [Fire, Continue, Fire, Fire, Fire]);
    assert_eq!(
        next,
        Some(99),
        "the last firing is clamped to the window's end"
    );
    c.watermark = Some(120);
    assert_eq!(
        Trigger::<()>::on_element(&t, &(), 50, W, &mut next, &mut c),
        Fire
    );
    // On merge, the earliest pending firing wins.
    let mut merged = None;
    Trigger::<()>::on_merge(&t, W, &mut merged, Some(60), &mut c);
    Trigger::<()>::on_merge(&t, W, &mut merged, Some(30), &mut c);
    Trigger::<()>::on_merge(&t, W, &mut merged, None, &mut c);
    assert_eq!(merged, Some(30));
}

#[test]
fn continuous_processing_time_trigger_fires_every_interval_of_processing_time() {
    let t = ContinuousProcessingTimeTrigger::of(Duration::from_millis(40)).unwrap();
    let mut c = Fake {
        now: 10,
        ..Fake::default()
    };
    let mut next = None;
    assert_eq!(
        Trigger::<()>::on_element(&t, &(), 0, W, &mut next, &mut c),
        Continue
    );
    assert_eq!((next, c.processing_timers.clone()), (Some(40), vec![40]));
    assert_eq!(
        Trigger::<()>::on_processing_time(&t, 39, W, &mut next, &mut c),
        Continue
    );
    assert_eq!(
        Trigger::<()>::on_processing_time(&t, 40, W, &mut next, &mut c),
        Fire
    );
    assert_eq!(
        Trigger::<()>::on_processing_time(&t, 80, W, &mut next, &mut c),
        Fire
    );
    assert_eq!(next, Some(99));
    assert_eq!(
        Trigger::<()>::on_processing_time(&t, 99, W, &mut next, &mut c),
        Fire
    );
    assert_eq!(next, None, "nothing after the window's end");
    assert_eq!(c.processing_timers, [40, 80, 99]);
    assert_eq!(
        Trigger::<()>::on_event_time(&t, 99, W, &mut next, &mut c),
        Continue
    );
}

#[test]
fn purging_trigger_purges_whenever_its_trigger_fires() {
    let t = PurgingTrigger::of(CountTrigger::of(2).unwrap());
    let (mut c, mut n) = (Fake::default(), 0);
    assert_eq!(
        Trigger::<()>::on_element(&t, &(), 0, W, &mut n, &mut c),
        Continue
    );
    assert_eq!(
        Trigger::<()>::on_element(&t, &(), 0, W, &mut n, &mut c),
        FireAndPurge
    );
    let t = PurgingTrigger::of(EventTimeTrigger);
    assert_eq!(
        Trigger::<()>::on_event_time(&t, 99, W, &mut (), &mut c),
        FireAndPurge
    );
    assert_eq!(
        Trigger::<()>::on_event_time(&t, 98, W, &mut (), &mut c),
        Continue
    );
    assert!(Trigger::<()>::can_merge(&t));
}

#[test]
fn never_trigger_never_fires() {
    let (t, mut c) = (NeverTrigger, Fake::default());
    assert_eq!(
        Trigger::<()>::on_element(&t, &(), 0, W, &mut (), &mut c),
        Continue
    );
    assert_eq!(
        Trigger::<()>::on_event_time(&t, 99, W, &mut (), &mut c),
        Continue
    );
    assert_eq!(
        Trigger::<()>::on_processing_time(&t, 99, W, &mut (), &mut c),
        Continue
    );
}

#[test]
fn zero_counts_and_intervals_are_clear_errors() {
    let e = CountTrigger::of(0).unwrap_err().to_string();
    assert!(
        e.contains("CountTrigger::of(0)") && e.contains("at least 1"),
        "{e}"
    );
    let e = ContinuousEventTimeTrigger::of(Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ContinuousEventTimeTrigger") && e.contains("interval is 0"),
        "{e}"
    );
    let e = ContinuousProcessingTimeTrigger::of(Duration::from_micros(10))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ContinuousProcessingTimeTrigger") && e.contains("interval is 0"),
        "{e}"
    );
}
