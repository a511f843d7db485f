//! Every interleaving of announcements, markers, closes, ticks and aborts, without threads:
//! time is passed in.

use super::*;

fn b(id: u64) -> CheckpointBarrier {
    CheckpointBarrier::checkpoint(id, 0)
}

fn savepoint(id: u64) -> CheckpointBarrier {
    CheckpointBarrier {
        kind: BarrierKind::Savepoint,
        ..b(id)
    }
}

fn ms(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

#[test]
fn announcement_snapshots_at_once_and_captures_until_every_marker() {
    let t0 = Instant::now();
    let mut h = UnalignedBarrierHandler::unaligned(2);
    let d = h.on_announcement(0, b(1), t0);
    assert_eq!(d.snapshot, Some(b(1)), "snapshot on first sight");
    assert_eq!(d.complete, None);
    assert!(h.is_capturing(0) && h.is_capturing(1));
    assert!(
        !h.is_blocked(0) && !h.is_blocked(1),
        "unaligned never blocks"
    );
    assert!(
        h.is_draining(0) && !h.is_draining(1),
        "only channel 0's upstream snapshotted"
    );
    // The announcement from the other upstream lets the task read its queue ahead.
    assert!(h.on_announcement(1, b(1), ms(t0, 1)).is_none());
    assert!(h.is_draining(1));
    assert!(h.on_marker(1, b(1), ms(t0, 2)).is_none());
    assert!(h.is_capturing(0) && !h.is_capturing(1));
    assert!(!h.is_draining(1), "nothing is owed after the marker");
    let d = h.on_marker(0, b(1), ms(t0, 3));
    assert_eq!(d.snapshot, None, "snapshotted once");
    let c = d.complete.expect("every marker arrived");
    assert!(c.unaligned);
    assert_eq!(c.alignment, Duration::ZERO);
    assert!(!h.is_capturing(0) && !h.is_capturing(1));
    assert_eq!(h.pending(), None);
}

#[test]
fn marker_before_its_announcement_starts_the_checkpoint_and_the_late_one_is_ignored() {
    let t0 = Instant::now();
    let mut h = UnalignedBarrierHandler::unaligned(2);
    let d = h.on_marker(0, b(1), t0);
    assert_eq!(d.snapshot, Some(b(1)));
    assert!(
        !h.is_capturing(0),
        "channel 0 delivered everything before its marker"
    );
    assert!(h.is_capturing(1));
    assert!(h.on_announcement(0, b(1), t0).is_none());
    assert!(h.on_announcement(1, b(1), t0).is_none());
    assert!(h.on_marker(1, b(1), t0).complete.is_some());
    // Announcements of a settled checkpoint arriving after it are stale.
    assert!(h.on_announcement(1, b(1), t0).is_none());
    assert_eq!(h.pending(), None);
}

#[test]
fn a_single_input_whose_marker_comes_first_completes_without_channel_state() {
    let mut h = UnalignedBarrierHandler::unaligned(1);
    let d = h.on_marker(0, b(4), Instant::now());
    assert_eq!(d.snapshot, Some(b(4)));
    let c = d.complete.unwrap();
    assert!(!c.unaligned, "nothing was overtaken");
}

#[test]
fn a_closed_channel_owes_no_marker() {
    let t0 = Instant::now();
    let mut h = UnalignedBarrierHandler::unaligned(3);
    h.on_announcement(0, b(2), t0);
    assert!(h.on_marker(0, b(2), t0).is_none());
    assert!(h.on_channel_closed(1, t0).is_none());
    assert!(!h.is_capturing(1));
    assert!(h.on_channel_closed(2, t0).complete.unwrap().unaligned);
    // Later checkpoints need only channel 0.
    let d = h.on_marker(0, b(3), t0);
    assert!(d.snapshot.is_some() && d.complete.is_some());
}

#[test]
fn a_newer_barrier_aborts_the_older_checkpoint_and_older_ones_are_stale() {
    let t0 = Instant::now();
    let mut h = UnalignedBarrierHandler::unaligned(2);
    h.on_announcement(0, b(1), t0);
    h.on_marker(0, b(1), t0);
    let d = h.on_announcement(1, b(2), t0);
    assert_eq!(d.aborted, Some(1));
    assert_eq!(d.snapshot, Some(b(2)));
    assert!(
        h.is_capturing(0) && h.is_capturing(1),
        "markers of 2 owed again"
    );
    assert!(
        h.is_draining(1) && !h.is_draining(0),
        "only 2's announcer is known"
    );
    // Channel 1's marker of the aborted checkpoint is stale.
    assert!(h.on_marker(1, b(1), t0).is_none());
    assert!(h.is_capturing(1));
    h.on_marker(0, b(2), t0);
    assert!(h.on_marker(1, b(2), t0).complete.is_some());
}

#[test]
fn a_newer_barrier_can_abort_and_complete_at_once() {
    let t0 = Instant::now();
    let mut h = UnalignedBarrierHandler::unaligned(2);
    h.on_announcement(0, b(1), t0);
    h.on_channel_closed(1, t0);
    // still owes channel 0's marker 1; marker 2 arrives instead (1 was lost upstream)
    let d = h.on_marker(0, b(2), t0);
    assert_eq!(d.aborted, Some(1));
    assert_eq!(d.snapshot, Some(b(2)));
    assert!(!d.complete.unwrap().unaligned);
}

#[test]
fn coordinator_abort_drops_the_pending_checkpoint() {
    let t0 = Instant::now();
    let mut h = UnalignedBarrierHandler::unaligned(2);
    h.on_announcement(0, b(5), t0);
    assert!(h.abort(5));
    assert!(!h.is_capturing(0) && !h.is_capturing(1));
    assert!(h.on_marker(0, b(5), t0).is_none(), "settled");
    // Aborting a checkpoint never seen makes its barriers stale.
    assert!(!h.abort(6));
    assert!(h.on_announcement(0, b(6), t0).is_none());
    assert_eq!(h.on_announcement(0, b(7), t0).snapshot, Some(b(7)));
}

#[test]
fn after_end_of_input_checkpoints_stay_aligned_and_the_channel_still_owes_its_marker() {
    let t0 = Instant::now();
    let mut h = UnalignedBarrierHandler::unaligned(2);
    // A checkpoint that switched before the end goes on unaligned.
    h.on_announcement(1, b(8), t0);
    h.on_end_of_input(0);
    assert!(h.is_capturing(0));
    assert!(h.on_marker(0, b(8), t0).is_none());
    assert!(h.on_marker(1, b(8), t0).complete.unwrap().unaligned);
    // The final checkpoint: aligned, whatever the wait.
    assert!(h.on_marker(0, b(9), t0).is_none());
    assert!(h.is_blocked(0) && !h.is_capturing(1));
    assert!(h.on_tick(ms(t0, 10_000)).is_none());
    let d = h.on_marker(1, b(9), ms(t0, 10_000));
    assert_eq!(d.snapshot, Some(b(9)));
    assert!(!d.complete.unwrap().unaligned);
}

#[test]
fn timeout_mode_completes_aligned_when_markers_arrive_in_time() {
    let t0 = Instant::now();
    let mut h = UnalignedBarrierHandler::with_aligned_timeout(2, Duration::from_millis(100));
    assert!(
        h.on_announcement(0, b(1), t0).is_none(),
        "aligned: no snapshot yet"
    );
    assert!(h.on_marker(0, b(1), ms(t0, 10)).is_none());
    assert!(h.is_blocked(0) && !h.is_blocked(1));
    assert!(
        !h.is_capturing(1),
        "aligned: records before the marker are pre-snapshot"
    );
    assert!(!h.is_draining(0) && !h.is_draining(1));
    assert!(h.on_tick(ms(t0, 50)).is_none());
    let d = h.on_marker(1, b(1), ms(t0, 60));
    assert_eq!(d.snapshot, Some(b(1)));
    let c = d.complete.unwrap();
    assert!(!c.unaligned);
    assert_eq!(c.alignment, Duration::from_millis(60));
    assert!(!h.is_blocked(0));
}

#[test]
fn timeout_mode_switches_to_unaligned_when_alignment_lasts_too_long() {
    let t0 = Instant::now();
    let mut h = UnalignedBarrierHandler::with_aligned_timeout(2, Duration::from_millis(100));
    h.on_marker(0, b(1), t0);
    assert!(h.is_blocked(0));
    assert!(h.on_tick(ms(t0, 99)).is_none());
    let d = h.on_tick(ms(t0, 100));
    assert_eq!(d.snapshot, Some(b(1)), "switched");
    assert_eq!(d.complete, None);
    assert!(!h.is_blocked(0), "released");
    assert!(h.is_capturing(1) && !h.is_capturing(0));
    assert!(
        !h.is_draining(1),
        "channel 1's upstream has not announced the barrier"
    );
    assert!(h.on_announcement(1, b(1), ms(t0, 200)).is_none());
    assert!(h.is_draining(1));
    let c = h.on_marker(1, b(1), ms(t0, 500)).complete.unwrap();
    assert!(c.unaligned);
    assert_eq!(
        c.alignment,
        Duration::from_millis(100),
        "time before the switch"
    );
}

#[test]
fn timeout_mode_switches_on_any_event_not_only_ticks() {
    let t0 = Instant::now();
    let mut h = UnalignedBarrierHandler::with_aligned_timeout(3, Duration::from_millis(100));
    h.on_marker(0, b(1), t0);
    let d = h.on_marker(1, b(1), ms(t0, 150));
    assert_eq!(d.snapshot, Some(b(1)));
    assert!(h.is_capturing(2) && !h.is_capturing(1));
}

#[test]
fn savepoints_stay_aligned_whatever_the_timeout() {
    let t0 = Instant::now();
    for mut h in [
        UnalignedBarrierHandler::unaligned(2),
        UnalignedBarrierHandler::with_aligned_timeout(2, Duration::from_millis(100)),
    ] {
        assert!(h.on_marker(0, savepoint(3), t0).is_none());
        assert!(h.is_blocked(0));
        assert!(h.on_tick(ms(t0, 60_000)).is_none());
        assert!(!h.is_capturing(1));
        let d = h.on_marker(1, savepoint(3), ms(t0, 60_000));
        assert_eq!(d.snapshot, Some(savepoint(3)));
        assert!(!d.complete.unwrap().unaligned);
    }
}

#[test]
fn a_switch_is_due_only_while_a_checkpoint_aligns_and_may_switch() {
    let t0 = Instant::now();
    let mut h = UnalignedBarrierHandler::with_aligned_timeout(2, Duration::from_millis(100));
    assert_eq!(h.switch_due(), None, "nothing pending");
    h.on_marker(0, b(1), t0);
    assert_eq!(h.switch_due(), Some(ms(t0, 100)));
    h.on_tick(ms(t0, 100));
    assert_eq!(h.switch_due(), None, "switched");
    // Savepoints never switch; unaligned mode switches at the first sight.
    let mut h = UnalignedBarrierHandler::with_aligned_timeout(2, Duration::from_millis(100));
    h.on_marker(0, savepoint(2), t0);
    assert_eq!(h.switch_due(), None);
    let mut h = UnalignedBarrierHandler::unaligned(2);
    h.on_announcement(0, b(1), t0);
    assert_eq!(h.switch_due(), None);
    // Once an input ended, checkpoints stay aligned.
    let mut h = UnalignedBarrierHandler::with_aligned_timeout(2, Duration::from_millis(100));
    h.on_end_of_input(1);
    h.on_marker(0, b(1), t0);
    assert_eq!(h.switch_due(), None);
}
