//! Barrier handling for tasks with several input channels: pure decision logic, no I/O.
//!
//! The task loop feeds every barrier and channel close it receives to a [`BarrierHandler`] and
//! does what the returned [`BarrierAction`] says; it asks [`BarrierHandler::is_blocked`] before
//! reading a channel. Keeping the decisions here makes every interleaving a fast unit test.
//!
//! Invariants (docs/architecture.md §3):
//! * **Aligned (exactly-once):** after barrier `n` arrives on channel `c`, `c` is blocked —
//!   the task reads nothing more from it — until barrier `n` has arrived on every channel
//!   that has not ended. Then the snapshot is taken and all channels are released. Blocking
//!   is what keeps post-barrier records out of checkpoint `n`; the bounded channel turns it
//!   into backpressure, never into unbounded buffering.
//! * **At-least-once:** no channel is ever blocked; the snapshot is taken when the last
//!   barrier `n` arrives. Records that overtook it on faster channels are in the snapshot and
//!   will be replayed after a recovery, so counts may exceed the truth, never fall short.
//! * A barrier newer than the one being aligned aborts the older checkpoint; a barrier older
//!   than the current one belongs to an aborted checkpoint and is ignored.
//! * A channel that has closed counts as having delivered every future barrier. (A channel
//!   that delivered end-of-input but is still open does not: the final checkpoint's barrier
//!   comes after end-of-input.)

use std::time::{Duration, Instant};

use super::event::CheckpointBarrier;

/// The job's checkpointing mode, owned by the checkpoint layer (it is recorded in
/// `_metadata`); re-exported here, where it decides alignment.
pub use crate::checkpoint::barrier::CheckpointingMode;

/// What the task must do after feeding an event to the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BarrierAction {
    /// Nothing yet.
    None,
    /// Every live channel delivered the barrier: snapshot now, forward the barrier, go on.
    /// `alignment` is how long the first-to-last barrier wait took.
    Snapshot {
        /// The barrier to snapshot for and forward.
        barrier: CheckpointBarrier,
        /// Time from the first to the last barrier of this checkpoint.
        alignment: Duration,
    },
    /// A newer barrier arrived before the older checkpoint aligned: give up on `id`.
    /// (When `then` is set, that newer barrier completed alignment at once — a single
    /// live input — and must be snapshotted right after the abort.)
    Abort {
        /// The aborted checkpoint.
        id: u64,
        /// A snapshot that became due immediately.
        then: Option<(CheckpointBarrier, Duration)>,
    },
}

/// Per-task barrier bookkeeping; see the module docs for the invariants.
#[derive(Debug)]
pub struct BarrierHandler {
    mode: CheckpointingMode,
    ended: Vec<bool>,
    /// `seen[c]`: the current checkpoint's barrier has arrived on channel `c`.
    seen: Vec<bool>,
    current: Option<(CheckpointBarrier, Instant)>,
    /// Highest checkpoint id snapshotted or aborted; older barriers are stale.
    last_settled: u64,
}

impl BarrierHandler {
    /// A handler for `inputs` channels.
    pub fn new(mode: CheckpointingMode, inputs: usize) -> Self {
        BarrierHandler {
            mode,
            ended: vec![false; inputs],
            seen: vec![false; inputs],
            current: None,
            last_settled: 0,
        }
    }

    /// Whether the task must not read channel `c` now (aligned mode only).
    #[inline]
    pub fn is_blocked(&self, c: usize) -> bool {
        self.mode == CheckpointingMode::ExactlyOnce && self.current.is_some() && self.seen[c]
    }

    /// Whether every channel has ended.
    #[cfg(test)]
    pub fn all_ended(&self) -> bool {
        self.ended.iter().all(|e| *e)
    }

    /// Feeds barrier `barrier` received on channel `c`.
    pub fn on_barrier(&mut self, c: usize, barrier: CheckpointBarrier) -> BarrierAction {
        if barrier.id <= self.last_settled {
            return BarrierAction::None; // belongs to a checkpoint already settled
        }
        let mut aborted = None;
        match self.current {
            Some((cur, _)) if barrier.id < cur.id => return BarrierAction::None,
            Some((cur, _)) if barrier.id > cur.id => {
                aborted = Some(cur.id);
                self.reset(cur.id);
                self.start(barrier);
            }
            Some(_) => {}
            None => self.start(barrier),
        }
        self.seen[c] = true;
        let done = self.try_complete();
        match (aborted, done) {
            (None, None) => BarrierAction::None,
            (None, Some((barrier, alignment))) => BarrierAction::Snapshot { barrier, alignment },
            (Some(id), then) => BarrierAction::Abort { id, then },
        }
    }

    /// Channel `c` closed (its sender ended); it may complete an alignment.
    pub fn on_channel_closed(&mut self, c: usize) -> BarrierAction {
        self.ended[c] = true;
        match self.try_complete() {
            Some((barrier, alignment)) => BarrierAction::Snapshot { barrier, alignment },
            None => BarrierAction::None,
        }
    }

    /// Abandons checkpoint `id` if it is aligning (the coordinator aborted it), releasing
    /// every blocked channel. Returns whether anything was released.
    pub fn abort(&mut self, id: u64) -> bool {
        match self.current {
            Some((cur, _)) if cur.id == id => {
                self.reset(id);
                true
            }
            _ => {
                self.last_settled = self.last_settled.max(id);
                false
            }
        }
    }

    fn start(&mut self, barrier: CheckpointBarrier) {
        self.current = Some((barrier, Instant::now()));
        self.seen.iter_mut().for_each(|s| *s = false);
    }

    fn reset(&mut self, settled: u64) {
        self.current = None;
        self.seen.iter_mut().for_each(|s| *s = false);
        self.last_settled = self.last_settled.max(settled);
    }

    fn try_complete(&mut self) -> Option<(CheckpointBarrier, Duration)> {
        let (barrier, started) = self.current?;
        let complete = self.seen.iter().zip(&self.ended).all(|(s, e)| *s || *e);
        if !complete {
            return None;
        }
        self.reset(barrier.id);
        Some((barrier, started.elapsed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CheckpointingMode::*;

    fn b(id: u64) -> CheckpointBarrier {
        CheckpointBarrier::checkpoint(id, 0)
    }

    fn is_snapshot(a: &BarrierAction, id: u64) -> bool {
        matches!(a, BarrierAction::Snapshot { barrier, .. } if barrier.id == id)
    }

    #[test]
    fn aligned_blocks_barriered_channels_until_all_arrive() {
        let mut h = BarrierHandler::new(ExactlyOnce, 3);
        assert_eq!(h.on_barrier(0, b(1)), BarrierAction::None);
        assert!(h.is_blocked(0) && !h.is_blocked(1) && !h.is_blocked(2));
        assert_eq!(h.on_barrier(2, b(1)), BarrierAction::None);
        assert!(h.is_blocked(0) && !h.is_blocked(1) && h.is_blocked(2));
        assert!(is_snapshot(&h.on_barrier(1, b(1)), 1));
        assert!(!h.is_blocked(0) && !h.is_blocked(1) && !h.is_blocked(2));
    }

    #[test]
    fn at_least_once_never_blocks() {
        let mut h = BarrierHandler::new(AtLeastOnce, 2);
        assert_eq!(h.on_barrier(0, b(1)), BarrierAction::None);
        assert!(!h.is_blocked(0) && !h.is_blocked(1));
        assert!(is_snapshot(&h.on_barrier(1, b(1)), 1));
    }

    #[test]
    fn single_input_snapshots_at_once() {
        for mode in [ExactlyOnce, AtLeastOnce] {
            let mut h = BarrierHandler::new(mode, 1);
            assert!(is_snapshot(&h.on_barrier(0, b(7)), 7));
            assert!(!h.is_blocked(0));
        }
    }

    #[test]
    fn newer_barrier_aborts_older_and_stale_is_ignored() {
        let mut h = BarrierHandler::new(ExactlyOnce, 2);
        h.on_barrier(0, b(1));
        let a = h.on_barrier(1, b(2));
        assert_eq!(a, BarrierAction::Abort { id: 1, then: None });
        assert!(h.is_blocked(1) && !h.is_blocked(0));
        // the late barrier 1 on channel 0 is stale
        assert_eq!(h.on_barrier(0, b(1)), BarrierAction::None);
        assert!(is_snapshot(&h.on_barrier(0, b(2)), 2));
    }

    #[test]
    fn end_of_input_completes_alignment() {
        let mut h = BarrierHandler::new(ExactlyOnce, 2);
        h.on_barrier(0, b(3));
        assert!(is_snapshot(&h.on_channel_closed(1), 3));
        // with one channel ended, later barriers complete alone
        assert!(is_snapshot(&h.on_barrier(0, b(4)), 4));
        assert!(!h.all_ended());
        h.on_channel_closed(0);
        assert!(h.all_ended());
    }

    #[test]
    fn coordinator_abort_releases_channels() {
        let mut h = BarrierHandler::new(ExactlyOnce, 2);
        h.on_barrier(0, b(5));
        assert!(h.abort(5));
        assert!(!h.is_blocked(0));
        assert_eq!(h.on_barrier(1, b(5)), BarrierAction::None, "settled");
        // abort of a checkpoint not yet seen makes its barriers stale
        assert!(!h.abort(6));
        assert_eq!(h.on_barrier(0, b(6)), BarrierAction::None);
        assert!(!is_snapshot(&h.on_barrier(0, b(7)), 7));
        assert!(is_snapshot(&h.on_barrier(1, b(7)), 7));
    }
}
