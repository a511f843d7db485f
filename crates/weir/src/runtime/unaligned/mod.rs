//! Unaligned checkpoints (issue 13): the barrier decisions of an input task, pure — no
//! channels, no threads, no clock reads (every method takes `now`), like
//! [`BarrierHandler`](crate::runtime::alignment::BarrierHandler) for aligned mode.
//!
//! **Why.** An aligned barrier waits behind every record already queued in front of it; under
//! backpressure a checkpoint then takes as long as the queues take to drain. An unaligned
//! barrier overtakes them, and the records it overtook are saved with the checkpoint as the
//! task's *channel state* (docs/architecture.md §3).
//!
//! **The protocol.** Channels are bounded FIFO queues, so a barrier cannot physically jump
//! one. An upstream task in unaligned mode therefore sends barrier `n` twice: first as an
//! *announcement* on each consumer's priority lane (an unbounded side channel the consumer
//! reads before any data), then, after flushing its open batches, as the in-band *marker* on
//! the data channel. Everything in front of the marker was sent before the upstream's
//! snapshot. A consumer feeds both to an [`UnalignedBarrierHandler`]:
//!
//! * The first sight of barrier `n` (announcement or marker, whichever comes first) starts the
//!   checkpoint. In **unaligned** mode the task snapshots its operator state at once and
//!   forwards the barrier ([`Decision::snapshot`]). From then on every record it reads on a
//!   channel whose marker `n` has not arrived ([`UnalignedBarrierHandler::is_capturing`]) is
//!   processed *and* recorded as that channel's state: it was sent before the upstream's
//!   snapshot but processed after this task's, so neither snapshot would hold it otherwise.
//! * Recording records only as they are *processed* would make the acknowledgement wait for
//!   the queue to be processed — the very wait unaligned checkpoints remove. So on a channel
//!   whose upstream has announced the barrier ([`UnalignedBarrierHandler::is_draining`]) the
//!   task reads ahead up to the marker into a local queue, recording as it reads, and
//!   processes that queue before reading the channel again. The read-ahead is bounded by
//!   the channel's capacity plus the upstream's open batches, because that upstream has
//!   already snapshotted and sends its marker right after them.
//! * When every channel has delivered its marker (or closed), the channel state is complete:
//!   the task hands it to the writer with the snapshot and acknowledges
//!   ([`Decision::complete`]).
//! * With an **aligned-checkpoint timeout** `D` the checkpoint starts aligned: a channel
//!   whose marker arrived is blocked ([`UnalignedBarrierHandler::is_blocked`]) as in aligned
//!   mode. If every marker arrives within `D` of the first sight, the checkpoint completes
//!   aligned, without channel state; once alignment has lasted `D` the task switches to
//!   unaligned ([`UnalignedBarrierHandler::on_tick`] or any other event): it snapshots,
//!   releases the blocked channels and captures the rest.
//! * **Savepoints are always aligned** (as in Flink): a savepoint barrier never switches,
//!   whatever the timeout.
//! * A barrier newer than the pending one aborts it (its captured channel state is dropped);
//!   a barrier at or below the last settled checkpoint is stale and ignored. A closed channel
//!   counts as having delivered every marker.
//! * **Once any input has ended, checkpoints stay aligned**
//!   ([`UnalignedBarrierHandler::on_end_of_input`]). The final checkpoint's barrier follows
//!   end-of-input on every channel, and the task's snapshot for it must come after all of
//!   them, so that it is the task's frozen, final state (docs/design-notes.md); an
//!   unaligned snapshot at the first marker could precede another channel's last records.
//!   (Upstream writers stop announcing once they forwarded end-of-input, for the same
//!   reason.) A channel that ended still owes its markers until it closes.
//!
//! Submodules: [`lane`] (the priority lanes and the writer that announces on them),
//! [`capture`] (the recorded channel state and the read-ahead queues).

pub mod capture;
pub mod lane;

use std::time::{Duration, Instant};

use crate::runtime::event::{BarrierKind, CheckpointBarrier};

/// How a finished checkpoint was taken, for the acknowledgement and the run summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The checkpoint's barrier.
    pub barrier: CheckpointBarrier,
    /// Time from the first sight of the barrier to the snapshot: the whole alignment for an
    /// aligned checkpoint, the time before the switch (or zero) for an unaligned one.
    pub alignment: Duration,
    /// Whether the checkpoint carries channel state (it was taken unaligned).
    pub unaligned: bool,
}

/// What the task must do after feeding an event to the handler, in this order: abort,
/// snapshot, complete. Several may be set at once (a newer barrier that completes at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Decision {
    /// Give up checkpoint `id`: drop its captured channel state and tell the chain.
    pub aborted: Option<u64>,
    /// Snapshot the operator state now and forward this barrier (announcement, then marker).
    pub snapshot: Option<CheckpointBarrier>,
    /// The channel state is complete: hand it to the writer with the snapshot and ack.
    pub complete: Option<Completion>,
}

impl Decision {
    /// Whether there is nothing to do.
    #[cfg(test)]
    pub fn is_none(&self) -> bool {
        *self == Decision::default()
    }
}

/// The checkpoint being taken.
#[derive(Debug, Clone, Copy)]
struct Pending {
    barrier: CheckpointBarrier,
    /// First sight of the barrier.
    started: Instant,
    /// When the operator state was snapshotted (unaligned phase), if it was.
    snapshotted: Option<Instant>,
}

/// Per-task barrier bookkeeping for unaligned checkpoints (with or without an aligned
/// timeout); see the module docs for the protocol and its invariants.
#[derive(Debug)]
pub struct UnalignedBarrierHandler {
    /// How long a checkpoint may stay aligned before it switches; zero: unaligned at once.
    timeout: Duration,
    /// `marked[c]`: the pending checkpoint's marker arrived on channel `c`.
    marked: Vec<bool>,
    /// `announced[c]`: the pending checkpoint was announced on channel `c`'s priority lane
    /// (or its marker arrived): `c`'s upstream has snapshotted.
    announced: Vec<bool>,
    closed: Vec<bool>,
    /// Some channel delivered end-of-input: checkpoints stay aligned from then on.
    any_ended: bool,
    pending: Option<Pending>,
    /// Highest checkpoint id completed or aborted; older barriers are stale.
    last_settled: u64,
}

impl UnalignedBarrierHandler {
    /// A handler for `inputs` channels, always unaligned.
    #[cfg(test)]
    pub fn unaligned(inputs: usize) -> Self {
        Self::with_aligned_timeout(inputs, Duration::ZERO)
    }

    /// A handler for `inputs` channels that starts each checkpoint aligned and switches to
    /// unaligned once alignment has lasted `timeout` (`--aligned-checkpoint-timeout`).
    pub fn with_aligned_timeout(inputs: usize, timeout: Duration) -> Self {
        UnalignedBarrierHandler {
            timeout,
            marked: vec![false; inputs],
            announced: vec![false; inputs],
            closed: vec![false; inputs],
            any_ended: false,
            pending: None,
            last_settled: 0,
        }
    }

    /// Whether the task must not read channel `c` now: only while a checkpoint is still
    /// aligning (timeout mode, or a savepoint) and `c`'s marker has arrived.
    #[inline]
    pub fn is_blocked(&self, c: usize) -> bool {
        matches!(self.pending, Some(p) if p.snapshotted.is_none()) && self.marked[c]
    }

    /// Whether a record read from channel `c` now must be recorded as channel state: the
    /// task snapshotted unaligned and `c`'s marker has not arrived.
    #[inline]
    pub fn is_capturing(&self, c: usize) -> bool {
        matches!(self.pending, Some(p) if p.snapshotted.is_some())
            && !self.marked[c]
            && !self.closed[c]
    }

    /// Whether the task may read channel `c` ahead of processing, into a local queue, and
    /// record what it reads as channel state right away: [`is_capturing`](Self::is_capturing)
    /// and `c`'s upstream has announced the barrier. Its upstream has snapshotted, so what is
    /// left before the marker is bounded (the channel's capacity plus the upstream's open
    /// batches), and reading it ahead is what keeps the acknowledgement from waiting for the
    /// queue to be *processed* — only for it to be read. A channel not yet announced is
    /// captured as it is processed: its upstream is still sending pre-barrier records, which
    /// must not pile up here.
    #[inline]
    pub fn is_draining(&self, c: usize) -> bool {
        self.is_capturing(c) && self.announced[c]
    }

    /// The checkpoint being taken, if any.
    pub fn pending(&self) -> Option<CheckpointBarrier> {
        self.pending.map(|p| p.barrier)
    }

    /// When the pending checkpoint, still aligning, is due to switch to unaligned (its
    /// start plus the aligned-checkpoint timeout); `None` when nothing will switch. A task
    /// blocked sending into a full channel must come back to its loop then, or the switch
    /// would wait for the consumer to make room ([`crate::runtime::load::watch_for_barriers`]).
    pub fn switch_due(&self) -> Option<Instant> {
        let p = self.pending?;
        let may_switch = p.barrier.kind == BarrierKind::Checkpoint && !self.any_ended;
        (p.snapshotted.is_none() && may_switch).then(|| p.started + self.timeout)
    }

    /// Barrier `barrier` was announced on channel `c`'s priority lane: it may start the
    /// checkpoint (and, unaligned, snapshot at once) but the channel still owes its marker.
    pub fn on_announcement(
        &mut self,
        c: usize,
        barrier: CheckpointBarrier,
        now: Instant,
    ) -> Decision {
        let mut d = Decision::default();
        if !self.admit(barrier, now, &mut d) {
            return d;
        }
        self.announced[c] = true;
        self.advance(now, &mut d);
        d
    }

    /// Barrier `barrier`'s in-band marker arrived on channel `c`: everything `c` sent before
    /// the upstream's snapshot has now been read.
    pub fn on_marker(&mut self, c: usize, barrier: CheckpointBarrier, now: Instant) -> Decision {
        let mut d = Decision::default();
        if !self.admit(barrier, now, &mut d) {
            return d;
        }
        self.marked[c] = true;
        self.announced[c] = true;
        self.advance(now, &mut d);
        d
    }

    /// Channel `c` closed: it counts as having delivered every marker from now on.
    pub fn on_channel_closed(&mut self, c: usize, now: Instant) -> Decision {
        self.closed[c] = true;
        let mut d = Decision::default();
        self.advance(now, &mut d);
        d
    }

    /// Channel `c` delivered end-of-input: from now on checkpoints stay aligned (see the
    /// module docs). One that already switched goes on unaligned.
    pub fn on_end_of_input(&mut self, _c: usize) {
        self.any_ended = true;
    }

    /// Time passed (the task calls this at least once per buffer timeout): an aligning
    /// checkpoint switches to unaligned when its alignment has lasted the timeout.
    pub fn on_tick(&mut self, now: Instant) -> Decision {
        let mut d = Decision::default();
        self.advance(now, &mut d);
        d
    }

    /// The coordinator aborted checkpoint `id`. Returns whether it was pending here (its
    /// channel state must be dropped and blocked channels released).
    pub fn abort(&mut self, id: u64) -> bool {
        match self.pending {
            Some(p) if p.barrier.id == id => {
                self.reset(id);
                true
            }
            _ => {
                self.last_settled = self.last_settled.max(id);
                false
            }
        }
    }

    /// Takes `barrier` into account; false when it is stale (nothing more to do).
    fn admit(&mut self, barrier: CheckpointBarrier, now: Instant, d: &mut Decision) -> bool {
        if barrier.id <= self.last_settled {
            return false;
        }
        match self.pending {
            Some(p) if barrier.id < p.barrier.id => return false,
            Some(p) if barrier.id > p.barrier.id => {
                d.aborted = Some(p.barrier.id);
                self.reset(p.barrier.id);
                self.start(barrier, now);
            }
            Some(_) => {}
            None => self.start(barrier, now),
        }
        true
    }

    fn start(&mut self, barrier: CheckpointBarrier, now: Instant) {
        self.pending = Some(Pending {
            barrier,
            started: now,
            snapshotted: None,
        });
        self.marked.iter_mut().for_each(|m| *m = false);
        self.announced.iter_mut().for_each(|a| *a = false);
    }

    fn reset(&mut self, settled: u64) {
        self.pending = None;
        self.marked.iter_mut().for_each(|m| *m = false);
        self.last_settled = self.last_settled.max(settled);
    }

    /// Switches to unaligned when due, then completes when every channel is done.
    fn advance(&mut self, now: Instant, d: &mut Decision) {
        let Some(mut p) = self.pending else { return };
        let all_done = self.marked.iter().zip(&self.closed).all(|(m, c)| *m || *c);
        let may_switch = p.barrier.kind == BarrierKind::Checkpoint && !self.any_ended;
        if p.snapshotted.is_none()
            && may_switch
            && !all_done
            && now.saturating_duration_since(p.started) >= self.timeout
        {
            p.snapshotted = Some(now);
            self.pending = Some(p);
            d.snapshot = Some(p.barrier);
        }
        if !all_done {
            return;
        }
        let completion = match p.snapshotted {
            Some(at) => Completion {
                barrier: p.barrier,
                alignment: at.saturating_duration_since(p.started),
                unaligned: true,
            },
            None => {
                d.snapshot = Some(p.barrier);
                Completion {
                    barrier: p.barrier,
                    alignment: now.saturating_duration_since(p.started),
                    unaligned: false,
                }
            }
        };
        d.complete = Some(completion);
        self.reset(p.barrier.id);
    }
}

#[cfg(test)]
mod tests;
