//! Every rule of the attempt's coordinator, as an interleaving of events. Acknowledgements
//! are `u32`s, frozen state a `&str`, and whom to answer a `u32`.

use std::time::Duration;

use super::*;
use crate::checkpoint::coordinator::CheckpointConfig;

type Act = AttemptAction<u32, &'static str, u32>;
type Run<'c> = AttemptCoordinator<'c, u32, &'static str, u32>;

const MS: Duration = Duration::from_millis(1);

fn cfg() -> CheckpointConfig {
    CheckpointConfig {
        interval: Some(100 * MS),
        timeout: Duration::from_secs(1),
        tolerable_failures: 0,
        retained: 2,
        ..Default::default()
    }
}

/// Sources 0 and 1, sink 2: attempt 1 started at `t0`.
fn start(c: &mut Coordinator<u32>, t0: Instant) -> Run<'_> {
    let (run, stale) = Run::start(c, 1, 3, vec![0, 1], t0);
    assert!(stale.is_empty());
    run
}

fn triggered(actions: &[Act]) -> Option<(u64, Vec<usize>)> {
    actions.iter().find_map(|a| match a {
        AttemptAction::Trigger { barrier, sources } => Some((barrier.id, sources.clone())),
        _ => None,
    })
}

fn frozen_writes(actions: &[Act]) -> Vec<(usize, u64, &'static str)> {
    actions
        .iter()
        .filter_map(|a| match a {
            AttemptAction::WriteFrozen {
                task,
                checkpoint,
                snapshot,
            } => Some((*task, *checkpoint, *snapshot)),
            _ => None,
        })
        .collect()
}

fn answers(actions: &[Act]) -> Vec<(u32, Answer)> {
    actions
        .iter()
        .filter_map(|a| match a {
            AttemptAction::Answer { reply, answer } => Some((*reply, answer.clone())),
            _ => None,
        })
        .collect()
}

fn metadata_due(actions: &[Act]) -> Option<u64> {
    actions.iter().find_map(|a| match a {
        AttemptAction::WriteMetadata { barrier, .. } => Some(barrier.id),
        _ => None,
    })
}

fn aborts(actions: &[Act]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            AttemptAction::Abort(id) => Some(*id),
            _ => None,
        })
        .collect()
}

fn reported(actions: &[Act]) -> Vec<(u64, AbortReason)> {
    actions
        .iter()
        .filter_map(|a| match a {
            AttemptAction::ReportFailure { id, reason } => Some((*id, reason.clone())),
            _ => None,
        })
        .collect()
}

fn has(actions: &[Act], want: fn(&Act) -> bool) -> bool {
    actions.iter().any(want)
}

/// Acks `id` from the tasks in `from` (no frozen state), writes its metadata at `now`.
fn complete(run: &mut Run<'_>, id: u64, from: &[usize], now: Instant) -> Vec<Act> {
    let mut last = Vec::new();
    for &t in from {
        last = run.on_ack(1, id, t, None, 0);
    }
    assert_eq!(metadata_due(&last), Some(id), "{last:?}");
    run.on_metadata_written(id, now)
}

#[test]
fn a_finished_tasks_frozen_state_acknowledges_for_it_in_later_checkpoints() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(cfg(), 1);
    let mut run = start(&mut c, t0);
    assert_eq!(
        triggered(&run.tick(t0 + 100 * MS, 0)),
        Some((1, vec![0, 1]))
    );
    // Source 0 ended its input and snapshotted frozen state for checkpoint 1.
    run.on_input_ended(1, 0);
    assert!(run.on_ack(1, 1, 0, Some("s0@1"), 0).is_empty());
    run.on_ack(1, 1, 1, None, 0);
    let done = run.on_ack(1, 1, 2, None, 0);
    assert_eq!(metadata_due(&done), Some(1));
    let written = run.on_metadata_written(1, t0 + 110 * MS);
    assert!(has(&written, |a| matches!(
        a,
        AttemptAction::NotifyComplete(1)
    )));
    // Its end is committed: it exits. Nothing is pending, so nothing is written yet.
    assert!(run.on_finished(1, 0).is_empty());
    // Checkpoint 2 is injected at the running source only; the frozen state stands in.
    let t2 = run.tick(t0 + 210 * MS, 0);
    assert_eq!(triggered(&t2), Some((2, vec![1])));
    assert_eq!(frozen_writes(&t2), [(0, 2, "s0@1")]);
}

#[test]
fn a_task_exiting_while_checkpoints_are_pending_acknowledges_the_ones_it_did_not_handle() {
    let t0 = Instant::now();
    let mut cfg = cfg();
    cfg.max_concurrent = 2;
    let mut c = Coordinator::new(cfg, 1);
    let mut run = start(&mut c, t0);
    run.tick(t0 + 100 * MS, 0); // 1
    run.tick(t0 + 200 * MS, 0); // 2
                                // Source 0 handled both barriers itself (frozen from 1 on, acks out of order): the
                                // newer snapshot is kept, and neither checkpoint gets it written again.
    run.on_ack(1, 2, 0, Some("s0@2"), 0);
    run.on_ack(1, 1, 0, Some("s0@1"), 0);
    let exited = run.on_finished(1, 0);
    assert!(frozen_writes(&exited).is_empty(), "{exited:?}");
    // Source 1 exits with frozen state of checkpoint 1 only: it stands in for 2.
    run.on_input_ended(1, 1);
    run.on_ack(1, 1, 1, Some("s1@1"), 0);
    assert_eq!(frozen_writes(&run.on_finished(1, 1)), [(1, 2, "s1@1")]);
    // Every source exited: no barrier can be injected any more.
    assert!(run.trigger_request(BarrierKind::Checkpoint, t0, 0).is_err());
}

#[test]
fn a_task_exiting_without_frozen_state_stops_checkpointing() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(cfg(), 1);
    let mut run = start(&mut c, t0);
    run.tick(t0 + 100 * MS, 0);
    let exited = run.on_finished(1, 2);
    assert_eq!(aborts(&exited), [1]);
    assert!(reported(&exited).is_empty(), "nobody's fault: not counted");
    assert!(triggered(&run.tick(t0 + Duration::from_secs(5), 0)).is_none());
}

#[test]
fn late_acknowledgements_and_declines_delete_what_they_wrote_unless_it_completed() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(cfg(), 1);
    let mut run = start(&mut c, t0);
    run.tick(t0 + 100 * MS, 0); // 1
    let timed_out = run.tick(t0 + 100 * MS + Duration::from_secs(1), 0);
    assert_eq!(aborts(&timed_out), [1]);
    assert_eq!(reported(&timed_out), [(1, AbortReason::Timeout)]);
    // An ack of the aborted checkpoint: its files are garbage.
    let late = run.on_ack(1, 1, 0, None, 0);
    assert!(matches!(late[..], [AttemptAction::Discard(1)]), "{late:?}");
    let late = run.on_decline(1, 1, "disk full".into());
    assert!(matches!(late[..], [AttemptAction::Discard(1)]), "{late:?}");
    // An older attempt's ack of an id pending now changes nothing and deletes nothing.
    let now = t0 + Duration::from_secs(3);
    let (id, _) = triggered(&run.tick(now, 0)).unwrap();
    assert!(run.on_ack(0, id, 0, None, 0).is_empty());
    // A duplicate ack, or a decline, of a completed checkpoint deletes nothing.
    complete(&mut run, id, &[0, 1, 2], now);
    assert!(run.on_ack(1, id, 0, None, 0).is_empty());
    assert!(run.on_decline(1, id, "late".into()).is_empty());
    // An older attempt's ack of a checkpoint this attempt never completed: garbage.
    assert!(matches!(
        run.on_ack(0, 99, 0, None, 0)[..],
        [AttemptAction::Discard(99)]
    ));
}

#[test]
fn a_decline_fails_the_checkpoint_and_counts_it() {
    // (Failing the job comes first: the attempt ends there, its tasks are cancelled.)
    let t0 = Instant::now();
    let mut c = Coordinator::new(cfg(), 1);
    let mut run = start(&mut c, t0);
    run.tick(t0 + 100 * MS, 0);
    let declined = run.on_decline(1, 1, "disk full".into());
    let failed = AbortReason::Failed("disk full".into());
    assert!(
        matches!(
            &declined[..],
            [
                AttemptAction::FailJob(_),
                AttemptAction::ReportFailure { id: 1, reason },
                AttemptAction::Abort(1),
            ] if *reason == failed
        ),
        "{declined:?}"
    );
}

#[test]
fn the_final_checkpoint_is_due_once_every_source_ended_its_input() {
    let t0 = Instant::now();
    let mut cfg = cfg();
    cfg.interval = None; // even with periodic checkpoints off
    let mut c = Coordinator::new(cfg, 1);
    let mut run = start(&mut c, t0);
    assert!(triggered(&run.tick(t0 + 10 * MS, 0)).is_none());
    run.on_input_ended(1, 0);
    assert!(
        triggered(&run.tick(t0 + 20 * MS, 0)).is_none(),
        "source 1 runs"
    );
    run.on_input_ended(2, 1); // another attempt's: ignored
    assert!(triggered(&run.tick(t0 + 30 * MS, 0)).is_none());
    run.on_input_ended(1, 1);
    let now = t0 + 40 * MS;
    assert_eq!(triggered(&run.tick(now, 0)), Some((1, vec![0, 1])));
    // The final checkpoint fails: it is due again after the retry pause (1 s here).
    let declined = run.on_decline(1, 1, "full".into());
    assert!(has(&declined, |a| matches!(a, AttemptAction::FailJob(_))));
    assert!(triggered(&run.tick(now + 500 * MS, 0)).is_none());
    assert_eq!(
        triggered(&run.tick(now + 1000 * MS, 0)).map(|t| t.0),
        Some(2)
    );
}

#[test]
fn a_source_that_failed_or_exited_counts_as_ended() {
    let t0 = Instant::now();
    let mut cfg = cfg();
    cfg.interval = None;
    let mut c = Coordinator::new(cfg, 1);
    let mut run = start(&mut c, t0);
    run.on_failed(1, 0);
    assert!(
        triggered(&run.tick(t0 + 10 * MS, 0)).is_none(),
        "no input ended yet"
    );
    run.on_input_ended(1, 1);
    assert_eq!(triggered(&run.tick(t0 + 20 * MS, 0)), Some((1, vec![1])));
}

#[test]
fn a_savepoint_is_answered_when_it_completes_and_never_notified() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(cfg(), 1);
    let mut run = start(&mut c, t0);
    let b = run.trigger_request(BarrierKind::Savepoint, t0, 0).unwrap();
    let go = run.await_request(b, 7);
    assert_eq!(triggered(&go), Some((1, vec![0, 1])));
    let written = complete(&mut run, 1, &[0, 1, 2], t0 + MS);
    assert_eq!(answers(&written), [(7, Answer::Done(1))]);
    assert!(!has(&written, |a| matches!(
        a,
        AttemptAction::NotifyComplete(_)
    )));
}

#[test]
fn an_aborted_savepoint_is_answered_with_why_and_not_counted() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(cfg(), 1);
    let mut run = start(&mut c, t0);
    let b = run.trigger_request(BarrierKind::Savepoint, t0, 0).unwrap();
    run.await_request(b, 7);
    let timed_out = run.tick(t0 + Duration::from_secs(1), 0);
    assert_eq!(
        answers(&timed_out),
        [(7, Answer::Failed("savepoint 1 timed out".into()))]
    );
    assert!(has(&timed_out, |a| matches!(
        a,
        AttemptAction::Phase(JobPhase::Running)
    )));
    assert!(!has(&timed_out, |a| matches!(
        a,
        AttemptAction::ReportFailure { .. } | AttemptAction::FailJob(_)
    )));
    assert_eq!(aborts(&timed_out), [1]);
    // Its metadata failing is answered the same way.
    let b = run.trigger_request(BarrierKind::Savepoint, t0, 0).unwrap();
    run.await_request(b, 8);
    for t in 0..3 {
        run.on_ack(1, b.id, t, None, 0);
    }
    let failed = run.on_metadata_failed(b.id, "exists".into());
    assert_eq!(
        answers(&failed),
        [(
            8,
            Answer::Failed(format!("savepoint {} failed: exists", b.id))
        )]
    );
}

#[test]
fn a_requested_checkpoint_subsumed_by_a_newer_one_is_answered_with_it() {
    let t0 = Instant::now();
    let mut cfg = cfg();
    cfg.max_concurrent = 2;
    let mut c = Coordinator::new(cfg, 1);
    let mut run = start(&mut c, t0);
    let asked = run.trigger_request(BarrierKind::Checkpoint, t0, 0).unwrap();
    run.await_request(asked, 5);
    assert_eq!(triggered(&run.tick(t0 + 100 * MS, 0)).map(|t| t.0), Some(2));
    let written = complete(&mut run, 2, &[0, 1, 2], t0 + 110 * MS);
    assert_eq!(aborts(&written), [1]);
    assert!(reported(&written).is_empty(), "subsumed is nobody's fault");
    assert_eq!(answers(&written), [(5, Answer::Done(2))]);
}

#[test]
fn a_stop_shows_the_job_stopping_and_refuses_other_requests_meanwhile() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(cfg(), 1);
    let mut run = start(&mut c, t0);
    let b = run
        .trigger_request(BarrierKind::Stop { drain: false }, t0, 0)
        .unwrap();
    let go = run.await_request(b, 3);
    assert!(matches!(go[0], AttemptAction::Phase(JobPhase::Stopping)));
    assert!(triggered(&go).is_some());
    let refused = run
        .trigger_request(BarrierKind::Savepoint, t0, 0)
        .unwrap_err();
    assert!(refused.contains("stopping with savepoint 1"), "{refused}");
    let written = complete(&mut run, 1, &[0, 1, 2], t0 + MS);
    assert_eq!(answers(&written), [(3, Answer::Done(1))]);
    assert!(has(&written, |a| matches!(
        a,
        AttemptAction::NotifyComplete(1)
    )));
}

#[test]
fn requests_still_waiting_when_the_attempt_ends_are_answered() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(cfg(), 1);
    let mut run = start(&mut c, t0);
    for reply in [1, 2] {
        let b = run.trigger_request(BarrierKind::Savepoint, t0, 0).unwrap();
        run.await_request(b, reply);
    }
    let ended = run.end("the job finished first");
    assert_eq!(
        answers(&ended),
        [
            (
                1,
                Answer::Failed("snapshot 1 did not complete: the job finished first".into())
            ),
            (
                2,
                Answer::Failed("snapshot 2 did not complete: the job finished first".into())
            ),
        ]
    );
    assert!(run.end("again").is_empty(), "answered once");
}

#[test]
fn a_new_attempt_deletes_what_the_previous_left_pending() {
    let t0 = Instant::now();
    let mut c = Coordinator::new(cfg(), 1);
    {
        let mut run = start(&mut c, t0);
        run.tick(t0 + 100 * MS, 0);
    }
    let (mut run, stale) = Run::start(&mut c, 2, 3, vec![0, 1], t0 + 200 * MS);
    assert!(matches!(stale[..], [AttemptAction::Discard(1)]));
    assert_eq!(run.attempt(), 2);
    // The first attempt's late ack of it changes nothing but deleting its files again.
    assert!(matches!(
        run.on_ack(1, 1, 0, Some("old"), 0)[..],
        [AttemptAction::Discard(1)]
    ));
    assert_eq!(triggered(&run.tick(t0 + 300 * MS, 0)).map(|t| t.0), Some(2));
}

#[test]
fn a_request_declined_before_it_was_awaited_counts_as_a_failed_checkpoint() {
    // The edge could not prepare the savepoint's folder: it answered the request itself
    // and declines the barrier, which nobody waits for any more.
    let t0 = Instant::now();
    let mut cfg = cfg();
    cfg.tolerable_failures = 5;
    let mut c = Coordinator::new(cfg, 1);
    let mut run = start(&mut c, t0);
    let b = run.trigger_request(BarrierKind::Savepoint, t0, 0).unwrap();
    let declined = run.on_decline(run.attempt(), b.id, "exists".into());
    assert!(answers(&declined).is_empty());
    assert!(has(&declined, |a| matches!(
        a,
        AttemptAction::ReportFailure { id: 1, .. }
    )));
    assert_eq!(aborts(&declined).len(), 1);
}

#[test]
fn a_checkpoint_whose_metadata_fails_is_counted_and_retried_after_the_pause() {
    let t0 = Instant::now();
    let mut cfg = cfg();
    cfg.tolerable_failures = 1;
    let mut c = Coordinator::new(cfg, 1);
    let mut run = start(&mut c, t0);
    run.tick(t0 + 100 * MS, 0);
    for t in 0..3 {
        run.on_ack(1, 1, t, None, 0);
    }
    let failed = run.on_metadata_failed(1, "disk full".into());
    assert!(
        matches!(
            &failed[..],
            [
                AttemptAction::ReportFailure { id: 1, .. },
                AttemptAction::Abort(1)
            ]
        ),
        "{failed:?}"
    );
    // Its acks arrived before it failed: a late one now deletes its files again.
    assert!(matches!(
        run.on_ack(1, 1, 0, None, 0)[..],
        [AttemptAction::Discard(1)]
    ));
    assert!(triggered(&run.tick(t0 + 150 * MS, 0)).is_none());
    assert_eq!(triggered(&run.tick(t0 + 200 * MS, 0)).map(|t| t.0), Some(2));
}
