//! The status bookkeeping, driven by hand: no threads, no job.

use super::*;
use crate::runtime::result::RestoreInfo;

fn barrier(id: u64, kind: BarrierKind, at: u64) -> CheckpointBarrier {
    CheckpointBarrier {
        id,
        timestamp_ms: at,
        kind,
    }
}

#[test]
fn the_history_follows_each_checkpoint_to_its_end() {
    let mut s = JobStatus::default();
    s.on_checkpoint_triggered(&barrier(1, BarrierKind::Checkpoint, 1000));
    s.on_checkpoint_triggered(&barrier(2, BarrierKind::Savepoint, 1100));
    s.on_checkpoint_triggered(&barrier(3, BarrierKind::Checkpoint, 1200));
    s.tasks = vec![TaskStatus {
        chain: "source".into(),
        operators: vec!["src".into()],
        subtask: 0,
        parallelism: 1,
        ..TaskStatus::default()
    }];
    let stats = TaskCheckpointStats {
        sync_micros: 1500,
        async_micros: 20_000,
        alignment_micros: 0,
        bytes: 4096,
    };
    let times = PhaseTimes {
        barrier_us: 1_002_000,
        sync_start_us: 1_005_500,
        sync_end_us: 1_007_000,
        async_start_us: 1_007_250,
        async_end_us: 0, // not recorded: drawn where the phase before ended
        ack_us: 1_030_000,
    };
    s.on_checkpoint_completed(1, Path::new("/ck/chk-1"), 4096, &[stats], &[times], 1040);
    s.on_checkpoint_aborted(3, &AbortReason::Timeout, 1900);
    assert_eq!(s.history[0].alignment.as_deref(), Some("aligned"));
    s.on_checkpoint_unaligned(1, 777);
    assert_eq!(s.history[0].alignment.as_deref(), Some("unaligned"));
    assert_eq!(s.history[0].in_flight_bytes, Some(777));
    let kinds: Vec<(&str, &str)> = s
        .history
        .iter()
        .map(|r| (r.kind.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("checkpoint", "completed"),
            ("savepoint", "in_progress"),
            ("checkpoint", "failed")
        ]
    );
    assert_eq!(s.history[0].duration_ms, Some(40));
    assert_eq!(s.history[0].bytes, Some(4096));
    let phases = &s.history[0].subtasks;
    assert_eq!((phases.len(), phases[0].chain.as_str()), (1, "source"));
    assert_eq!((phases[0].sync_ms, phases[0].async_ms), (1.5, 20.0));
    let line = phases[0].timeline.expect("a timeline");
    assert_eq!((line.barrier_ms, line.sync_start_ms), (2.0, 5.5));
    assert_eq!((line.sync_end_ms, line.async_start_ms), (7.0, 7.25));
    assert_eq!((line.async_end_ms, line.ack_ms), (7.25, 30.0));
    assert_eq!(s.history[2].failure.as_deref(), Some("timed out"));
    assert_eq!((s.checkpoints_completed, s.checkpoints_failed), (1, 1));
    assert_eq!(s.last_checkpoint_bytes, 4096);
    // A subsumed checkpoint is aborted, not failed.
    s.on_checkpoint_triggered(&barrier(4, BarrierKind::Checkpoint, 2000));
    s.on_checkpoint_aborted(4, &AbortReason::Subsumed, 2100);
    assert_eq!(s.history[3].status, "aborted");
    assert_eq!(s.checkpoints_failed, 1);
    // The attempt ends: the savepoint still in progress failed with it.
    s.on_attempt_ended(
        &AttemptSummary {
            attempt: 1,
            restored: Some(RestoreInfo {
                checkpoint_id: 7,
                path: "/ck/chk-7".into(),
                source_records: 10,
            }),
            source_records: 99,
            failure: Some("task x panicked: boom".into()),
        },
        3000,
    );
    assert_eq!(s.history[1].status, "failed");
    assert!(s.history[1]
        .failure
        .as_deref()
        .unwrap()
        .contains("attempt 1"));
    assert_eq!(s.checkpoints_failed, 2);
    assert_eq!(s.attempts[0].restored_checkpoint, Some(7));
    assert_eq!(
        s.attempts[0].failure.as_deref(),
        Some("task x panicked: boom")
    );
}

#[test]
fn a_reported_failure_is_not_overwritten_when_the_checkpoint_is_given_up() {
    let mut s = JobStatus::default();
    s.on_checkpoint_triggered(&barrier(1, BarrierKind::Checkpoint, 100));
    s.on_checkpoint_triggered(&barrier(2, BarrierKind::Checkpoint, 200));
    // The attempt's loop reports a failure, then aborts: the failure stays.
    s.on_checkpoint_aborted(1, &AbortReason::Failed("disk full".into()), 300);
    s.on_checkpoint_given_up(1, 300);
    // Given up without a reported failure (subsumed, or answered to a request).
    s.on_checkpoint_given_up(2, 400);
    assert_eq!(s.history[0].status, "failed");
    assert_eq!(s.history[0].failure.as_deref(), Some("failed: disk full"));
    assert_eq!(s.history[1].status, "aborted");
    assert_eq!(s.history[1].duration_ms, Some(200));
    assert_eq!(s.checkpoints_failed, 1);
}

#[test]
fn the_history_is_bounded_and_the_histogram_is_not() {
    let mut s = JobStatus::default();
    for id in 1..=(HISTORY_LIMIT as u64 + 50) {
        s.on_checkpoint_triggered(&barrier(id, BarrierKind::Checkpoint, id * 100));
        s.on_checkpoint_completed(id, Path::new("/x"), 1, &[], &[], id * 100 + 7);
    }
    assert_eq!(s.history.len(), HISTORY_LIMIT);
    assert_eq!(s.history[0].id, 51);
    let h = &s.checkpoint_durations;
    assert_eq!(h.count, HISTORY_LIMIT as u64 + 50);
    assert_eq!(h.sum_ms, 7 * h.count);
    // 7 ms: not in the 5 ms bucket, in every one from 10 ms on.
    assert_eq!(h.buckets[0], (5, 0));
    assert_eq!(h.buckets[1], (10, h.count));
}

#[test]
fn chain_names_drop_the_subtask_suffix() {
    assert_eq!(chain_name("source -> map (1/2)"), "source -> map");
    assert_eq!(chain_name("plain"), "plain");
}
