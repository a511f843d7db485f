//! Every rule of the coordinator, as an interleaving of calls.

use super::*;

fn cfg() -> CheckpointConfig {
    CheckpointConfig {
        interval: Some(Duration::from_millis(100)),
        timeout: Duration::from_secs(1),
        tolerable_failures: 1,
        retained: 2,
        ..Default::default()
    }
}

fn triggers(a: &[Action<u32>]) -> Vec<u64> {
    a.iter()
        .filter_map(|a| match a {
            Action::Trigger(b) => Some(b.id),
            _ => None,
        })
        .collect()
}

/// A coordinator (first checkpoint id 1) whose first attempt of `tasks` tasks started at
/// `t0`.
fn started(cfg: CheckpointConfig, tasks: usize, t0: Instant) -> Coordinator<u32> {
    let mut c = Coordinator::<u32>::new(cfg, 1);
    c.start_attempt(tasks, t0);
    c
}

/// Acknowledges checkpoint `id` from all `tasks` and writes its metadata at `now`.
fn complete(c: &mut Coordinator<u32>, id: u64, tasks: usize, now: Instant) -> Vec<Action<u32>> {
    for t in 0..tasks {
        c.on_ack(id, t, 0);
    }
    c.on_metadata_written(id, now)
}

#[test]
fn triggers_on_interval_and_completes_after_all_acks_and_metadata() {
    let t0 = Instant::now();
    let mut c = Coordinator::<u32>::new(cfg(), 5);
    c.start_attempt(2, t0);
    assert!(triggers(&c.tick(t0 + Duration::from_millis(50), 0)).is_empty());
    assert_eq!(
        triggers(&c.tick(t0 + Duration::from_millis(100), 0)),
        vec![5]
    );
    // max_concurrent = 1: no second trigger while 5 is pending
    assert!(triggers(&c.tick(t0 + Duration::from_millis(300), 0)).is_empty());
    assert!(c.on_ack(5, 0, 10).is_none());
    assert!(c.on_ack(5, 0, 10).is_none(), "duplicate ack ignored");
    match c.on_ack(5, 1, 11) {
        Some(Action::WriteMetadata { barrier, acks, .. }) => {
            assert_eq!(barrier.id, 5);
            assert_eq!(acks, vec![10, 11]);
        }
        other => panic!("{other:?}"),
    }
    let a = c.on_metadata_written(5, t0 + Duration::from_millis(310));
    assert!(matches!(a[0], Action::NotifyComplete(5)));
    assert_eq!(
        triggers(&c.tick(t0 + Duration::from_millis(310), 0)),
        vec![6]
    );
}

#[test]
fn min_pause_delays_the_next_trigger() {
    let t0 = Instant::now();
    let mut c = started(
        CheckpointConfig {
            min_pause: Duration::from_millis(500),
            ..cfg()
        },
        1,
        t0,
    );
    assert_eq!(
        triggers(&c.tick(t0 + Duration::from_millis(100), 0)),
        vec![1]
    );
    complete(&mut c, 1, 1, t0 + Duration::from_millis(150));
    assert!(triggers(&c.tick(t0 + Duration::from_millis(600), 0)).is_empty());
    assert_eq!(
        triggers(&c.tick(t0 + Duration::from_millis(650), 0)),
        vec![2]
    );
}

#[test]
fn timeouts_count_and_fail_the_job_past_the_tolerance() {
    let t0 = Instant::now();
    let mut c = started(cfg(), 1, t0);
    c.tick(t0 + Duration::from_millis(100), 0);
    let a = c.tick(t0 + Duration::from_millis(1100), 0);
    assert!(matches!(
        &a[0],
        Action::Abort {
            id: 1,
            reason: AbortReason::Timeout
        }
    ));
    assert!(
        !a.iter().any(|a| matches!(a, Action::FailJob(_))),
        "1 tolerated"
    );
    assert_eq!(triggers(&a), vec![2]);
    let a = c.tick(t0 + Duration::from_millis(2200), 0);
    assert!(a.iter().any(|a| matches!(a, Action::FailJob(_))));
}

#[test]
fn declines_of_settled_checkpoints_are_ignored_but_metadata_failures_count() {
    let t0 = Instant::now();
    let mut c = started(cfg(), 1, t0);
    c.tick(t0 + Duration::from_millis(100), 0);
    c.on_task_finished();
    assert!(c
        .on_decline(1, AbortReason::Failed("late".into()))
        .is_empty());
    let mut c = started(cfg(), 1, t0);
    c.tick(t0 + Duration::from_millis(100), 0);
    assert!(c.on_ack(1, 0, 0).is_some());
    let a = c.on_metadata_failed(1, "disk full".into());
    assert!(
        matches!(&a[..], [Action::Abort { id: 1, .. }]),
        "1 failure tolerated"
    );
    c.tick(t0 + Duration::from_millis(200), 0);
    c.on_ack(2, 0, 0);
    let a = c.on_metadata_failed(2, "disk full".into());
    assert!(a.iter().any(|a| matches!(a, Action::FailJob(_))));
}

#[test]
fn finished_task_stops_triggering_without_counting_failures() {
    let t0 = Instant::now();
    let mut c = started(cfg(), 2, t0);
    c.tick(t0 + Duration::from_millis(100), 0);
    let a = c.on_task_finished();
    assert!(matches!(
        &a[..],
        [Action::Abort {
            id: 1,
            reason: AbortReason::TaskFinished
        }]
    ));
    assert!(c.tick(t0 + Duration::from_secs(10), 0).is_empty());
    assert!(
        c.on_ack(1, 0, 0).is_none(),
        "late ack of an aborted checkpoint"
    );
}

#[test]
fn retention_discards_oldest_and_completion_subsumes_older_pending() {
    let t0 = Instant::now();
    let mut c = started(
        CheckpointConfig {
            max_concurrent: 2,
            ..cfg()
        },
        1,
        t0,
    );
    let mut t = t0;
    let mut discarded = Vec::new();
    for id in 1..=4 {
        t += Duration::from_millis(100);
        assert_eq!(triggers(&c.tick(t, 0)), vec![id]);
        for a in complete(&mut c, id, 1, t) {
            if let Action::Discard(d) = a {
                discarded.push(d);
            }
        }
    }
    assert_eq!(discarded, vec![1, 2]);
    // two pending; the newer completes first and subsumes the older
    c.tick(t + Duration::from_millis(100), 0);
    c.tick(t + Duration::from_millis(200), 0);
    let a = complete(&mut c, 6, 1, t + Duration::from_millis(210));
    assert!(a.iter().any(|a| matches!(
        a,
        Action::Abort {
            id: 5,
            reason: AbortReason::Subsumed
        }
    )));
}

#[test]
fn restart_forgets_pending_but_keeps_ids() {
    let t0 = Instant::now();
    let mut c = started(cfg(), 1, t0);
    c.tick(t0 + Duration::from_millis(100), 0);
    assert_eq!(c.start_attempt(3, t0 + Duration::from_millis(150)), vec![1]);
    assert_eq!(
        triggers(&c.tick(t0 + Duration::from_millis(250), 0)),
        vec![2]
    );
}

#[test]
fn the_final_checkpoint_is_due_at_once_even_without_periodic_checkpoints() {
    let t0 = Instant::now();
    let mut c = started(
        CheckpointConfig {
            interval: None,
            ..cfg()
        },
        1,
        t0,
    );
    assert!(triggers(&c.tick(t0 + Duration::from_secs(60), 0)).is_empty());
    assert_eq!(c.next_deadline(), None, "nothing periodic to wait for");
    c.expedite();
    assert_eq!(triggers(&c.tick(t0 + Duration::from_secs(61), 0)), vec![1]);
    assert!(
        triggers(&c.tick(t0 + Duration::from_secs(62), 0)).is_empty(),
        "one final checkpoint, not a stream of them"
    );
}

#[test]
fn expedite_still_respects_max_concurrent() {
    let t0 = Instant::now();
    let mut c = started(cfg(), 1, t0);
    assert_eq!(
        triggers(&c.tick(t0 + Duration::from_millis(100), 0)),
        vec![1]
    );
    c.expedite();
    assert!(triggers(&c.tick(t0 + Duration::from_millis(101), 0)).is_empty());
    complete(&mut c, 1, 1, t0 + Duration::from_millis(102));
    assert_eq!(
        triggers(&c.tick(t0 + Duration::from_millis(103), 0)),
        vec![2]
    );
}

#[test]
fn savepoints_are_forced_never_retained_and_never_subsume() {
    let t0 = Instant::now();
    let mut c = started(cfg(), 1, t0);
    assert_eq!(
        triggers(&c.tick(t0 + Duration::from_millis(100), 0)),
        vec![1]
    );
    // Forced past max_concurrent = 1 and the interval.
    let sp = c
        .trigger_forced(BarrierKind::Savepoint, t0 + Duration::from_millis(101), 0)
        .unwrap();
    assert_eq!((sp.id, sp.kind), (2, BarrierKind::Savepoint));
    assert!(c.is_savepoint(2));
    let a = complete(&mut c, 2, 1, t0 + Duration::from_millis(102));
    assert!(
        a.is_empty(),
        "no notification, no retention, no subsumption: {a:?}"
    );
    assert!(c.is_pending(1), "checkpoint 1 is still pending");
    for id in [1, 3, 4, 5] {
        if id > 1 {
            c.trigger_forced(BarrierKind::Checkpoint, t0, 0).unwrap();
        }
        complete(&mut c, id, 1, t0 + Duration::from_millis(200));
    }
    assert_eq!(
        c.retained_ids(),
        vec![4, 5],
        "the savepoint is not among them"
    );
}

#[test]
fn a_failed_savepoint_is_not_a_checkpoint_failure() {
    let t0 = Instant::now();
    let mut c = started(
        CheckpointConfig {
            tolerable_failures: 0,
            ..cfg()
        },
        1,
        t0,
    );
    c.trigger_forced(BarrierKind::Savepoint, t0, 0).unwrap();
    let a = c.on_decline(1, AbortReason::Failed("disk full".into()));
    assert!(matches!(&a[..], [Action::Abort { id: 1, .. }]), "{a:?}");
    let a = c.tick(t0 + Duration::from_secs(2), 0);
    assert!(!a.iter().any(|a| matches!(a, Action::FailJob(_))), "{a:?}");
}

#[test]
fn a_stop_holds_periodic_triggers_and_ends_triggering_when_complete() {
    let t0 = Instant::now();
    let mut c = started(cfg(), 1, t0);
    let stop = BarrierKind::Stop { drain: false };
    c.trigger_forced(stop, t0, 0).unwrap();
    // Past the interval (100 ms), within the timeout (1 s): nothing periodic while stopping.
    assert!(triggers(&c.tick(t0 + Duration::from_millis(500), 0)).is_empty());
    let e = c.trigger_forced(BarrierKind::Savepoint, t0, 0).unwrap_err();
    assert!(e.contains("stopping"), "{e}");
    // Aborted: the job runs on, periodic checkpoints resume.
    c.on_decline(1, AbortReason::Timeout);
    assert_eq!(triggers(&c.tick(t0 + Duration::from_secs(6), 0)), vec![2]);
    complete(&mut c, 2, 1, t0 + Duration::from_secs(6));
    c.trigger_forced(stop, t0 + Duration::from_secs(6), 0)
        .unwrap();
    let a = complete(&mut c, 3, 1, t0 + Duration::from_secs(7));
    assert!(matches!(&a[..], [Action::NotifyComplete(3)]), "{a:?}");
    assert!(triggers(&c.tick(t0 + Duration::from_secs(9), 0)).is_empty());
    assert!(c.trigger_forced(BarrierKind::Checkpoint, t0, 0).is_err());
}

#[test]
fn a_failed_final_checkpoint_is_retried_at_the_interval_not_at_once() {
    let t0 = Instant::now();
    let ms = |m: u64| t0 + Duration::from_millis(m);
    let mut c = started(
        CheckpointConfig {
            tolerable_failures: 100,
            ..cfg()
        },
        1,
        t0,
    );
    c.expedite();
    assert_eq!(triggers(&c.tick(ms(1), 0)), vec![1]);
    c.on_decline(1, AbortReason::Failed("No space left on device".into()));
    // The executor expedites again (every source has still ended): not due before the
    // interval has passed since the failed trigger.
    c.expedite();
    assert!(triggers(&c.tick(ms(2), 0)).is_empty());
    assert!(triggers(&c.tick(ms(100), 0)).is_empty());
    assert_eq!(c.next_deadline(), Some(ms(101)));
    assert_eq!(triggers(&c.tick(ms(101), 0)), vec![2]);
    // Once one completes, expedited checkpoints are due at once again.
    complete(&mut c, 2, 1, ms(110));
    c.expedite();
    assert_eq!(triggers(&c.tick(ms(111), 0)), vec![3]);
}

#[test]
fn retries_after_a_failure_also_wait_for_min_pause_and_happen_without_an_interval() {
    let t0 = Instant::now();
    let ms = |m: u64| t0 + Duration::from_millis(m);
    let mut c = started(
        CheckpointConfig {
            interval: None,
            min_pause: Duration::from_millis(2_500),
            tolerable_failures: 100,
            ..cfg()
        },
        1,
        t0,
    );
    assert_eq!(c.retry_pause(), Duration::from_millis(2_500));
    c.expedite();
    assert_eq!(triggers(&c.tick(ms(0), 0)), vec![1]);
    let _ = c.on_metadata_failed(1, "disk full".into());
    c.expedite();
    assert!(triggers(&c.tick(ms(2_499), 0)).is_empty());
    assert_eq!(triggers(&c.tick(ms(2_500), 0)), vec![2]);
}

#[test]
fn a_pending_savepoint_is_not_subsumed_by_a_newer_checkpoint() {
    let t0 = Instant::now();
    let ms = |m: u64| t0 + Duration::from_millis(m);
    let mut c = started(
        CheckpointConfig {
            max_concurrent: 2,
            ..cfg()
        },
        1,
        t0,
    );
    let sp = c.trigger_forced(BarrierKind::Savepoint, ms(1), 0).unwrap();
    assert_eq!(triggers(&c.tick(ms(101), 0)), vec![sp.id + 1]);
    let actions = complete(&mut c, sp.id + 1, 1, ms(110));
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Abort { id, .. } if *id == sp.id)),
        "{actions:?}"
    );
    assert!(c.is_pending(sp.id));
}
