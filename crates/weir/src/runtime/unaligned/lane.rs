//! Priority lanes: how an unaligned barrier overtakes the records queued on a channel.
//!
//! A data channel is a bounded FIFO queue, so nothing sent on it can pass what is already
//! in it. Each channel therefore gets a *priority lane* beside it: an unbounded channel that
//! carries only barrier announcements (at most one per checkpoint, so it never grows with the
//! data). The consumer selects on its lanes with its data channels and reads a lane first.
//! A lane per channel rather than per consumer keeps a lane's index equal to its data
//! channel's, with no bookkeeping across a task's input edges.

use crossbeam_channel::{Receiver, Sender};

use crate::error::Result;
use crate::runtime::event::{BarrierKind, CheckpointBarrier};
use crate::runtime::output::{Output, TaskSnapshot};
use crate::runtime::watermark::WatermarkStatus;

/// The sending end of a priority lane.
pub type LaneSender = Sender<CheckpointBarrier>;
/// The receiving end of a priority lane.
pub type LaneReceiver = Receiver<CheckpointBarrier>;

/// A new priority lane (unbounded: one announcement per checkpoint at most).
pub fn lane() -> (LaneSender, LaneReceiver) {
    crossbeam_channel::unbounded()
}

/// Where an announcing writer announces a barrier for one of its channels: the channel's
/// local priority lane, or, for a channel to a subtask on another worker, a priority frame
/// on the exchange stream that overtakes the frames queued for that worker and reaches the
/// input's own lane there (docs/cluster.md, "Priority announcements overtake").
pub enum Announce {
    /// A lane in this process.
    Local(LaneSender),
    /// A remote channel's priority lane.
    #[cfg(feature = "cluster")]
    Remote(crate::runtime::exchange::channel::RemoteAnnouncer),
}

impl From<LaneSender> for Announce {
    fn from(lane: LaneSender) -> Self {
        Announce::Local(lane)
    }
}

impl Announce {
    /// Announces `barrier`. A consumer that is gone is being cancelled, and a lost peer
    /// fails the data channel's next send: either way the data channel says so, not this.
    fn send(&self, barrier: CheckpointBarrier) {
        match self {
            Announce::Local(lane) => {
                let _ = lane.send(barrier);
            }
            #[cfg(feature = "cluster")]
            Announce::Remote(r) => {
                let _ = r.announce(barrier);
            }
        }
    }
}

/// Wraps the network writer at the tail of a chain: at a checkpoint's barrier it first
/// announces the barrier on every consumer's lane, then lets the writer flush its open
/// batches and send the in-band marker. Savepoints are not announced: they stay aligned;
/// nor is anything after end-of-input: the consumer must take the final checkpoint aligned,
/// after every channel's end (see [`UnalignedBarrierHandler`](super::UnalignedBarrierHandler)).
pub struct AnnouncingWriter<T> {
    inner: Box<dyn Output<T>>,
    lanes: Vec<Announce>,
    ended: bool,
}

impl<T> AnnouncingWriter<T> {
    /// Announces on `lanes` (one per channel of `inner`) before `inner` forwards a barrier.
    pub fn new(inner: Box<dyn Output<T>>, lanes: Vec<impl Into<Announce>>) -> Self {
        AnnouncingWriter {
            inner,
            lanes: lanes.into_iter().map(Into::into).collect(),
            ended: false,
        }
    }
}

impl<T: Send> Output<T> for AnnouncingWriter<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        self.inner.push(batch)
    }
    fn push_timestamped(&mut self, batch: &mut Vec<T>, timestamps: &mut Vec<u64>) -> Result<()> {
        self.inner.push_timestamped(batch, timestamps)
    }
    fn on_watermark(&mut self, watermark: u64) -> Result<()> {
        self.inner.on_watermark(watermark)
    }
    fn on_watermark_status(&mut self, status: WatermarkStatus) -> Result<()> {
        self.inner.on_watermark_status(status)
    }
    fn snapshot(&mut self, barrier: CheckpointBarrier, snapshot: &mut TaskSnapshot) -> Result<()> {
        if barrier.kind == BarrierKind::Checkpoint && !self.ended {
            for lane in &self.lanes {
                lane.send(barrier);
            }
        }
        self.inner.snapshot(barrier, snapshot)
    }
    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }
    fn end_of_input(&mut self) -> Result<()> {
        self.ended = true;
        self.inner.end_of_input()
    }
    fn notify_complete(&mut self, id: u64) -> Result<()> {
        self.inner.notify_complete(id)
    }
    fn notify_aborted(&mut self, id: u64) -> Result<()> {
        self.inner.notify_aborted(id)
    }
    fn on_processing_time(&mut self, now_ms: u64) -> Result<()> {
        self.inner.on_processing_time(now_ms)
    }
    fn has_room(&self) -> bool {
        self.inner.has_room()
    }
    fn batch_hint(&self) -> usize {
        self.inner.batch_hint()
    }
    fn watch_room<'a>(&'a self, sel: &mut crossbeam_channel::Select<'a>) -> bool {
        self.inner.watch_room(sel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::event::Event;
    use crate::runtime::network::{Rebalance, RoutedWriter};

    #[test]
    fn a_checkpoint_barrier_is_announced_before_the_queued_records_and_its_marker() {
        let (tx, rx) = crossbeam_channel::bounded(8);
        let (lane_tx, lane_rx) = lane();
        let writer = RoutedWriter::new(vec![tx], Rebalance::new(0));
        let mut w = AnnouncingWriter::new(Box::new(writer), vec![lane_tx]);
        w.push(&mut vec![1u32, 2]).unwrap();
        w.flush().unwrap();
        w.push(&mut vec![3]).unwrap(); // open batch, flushed ahead of the marker
        let b = CheckpointBarrier::checkpoint(1, 0);
        w.snapshot(b, &mut TaskSnapshot::new()).unwrap();
        assert_eq!(lane_rx.try_recv().unwrap(), b);
        let events: Vec<_> = rx.try_iter().collect();
        assert!(matches!(
            &events[..],
            [Event::Batch(x), Event::Batch(y), Event::Barrier(m)] if x == &[1, 2] && y == &[3] && *m == b
        ));
    }

    #[test]
    fn nothing_is_announced_after_end_of_input() {
        let (tx, rx) = crossbeam_channel::bounded(8);
        let (lane_tx, lane_rx) = lane();
        let writer = RoutedWriter::new(vec![tx], Rebalance::new(0));
        let mut w = AnnouncingWriter::<u32>::new(Box::new(writer), vec![lane_tx]);
        w.end_of_input().unwrap();
        let b = CheckpointBarrier::checkpoint(3, 0);
        w.snapshot(b, &mut TaskSnapshot::new()).unwrap();
        assert!(lane_rx.try_recv().is_err());
        assert_eq!(rx.try_iter().count(), 2, "end-of-input, then the marker");
    }

    #[test]
    fn savepoints_are_not_announced() {
        let (tx, rx) = crossbeam_channel::bounded(8);
        let (lane_tx, lane_rx) = lane();
        let writer = RoutedWriter::new(vec![tx], Rebalance::new(0));
        let mut w = AnnouncingWriter::<u32>::new(Box::new(writer), vec![lane_tx]);
        for kind in [BarrierKind::Savepoint, BarrierKind::Stop { drain: false }] {
            let b = CheckpointBarrier {
                kind,
                ..CheckpointBarrier::checkpoint(2, 0)
            };
            w.snapshot(b, &mut TaskSnapshot::new()).unwrap();
        }
        assert!(lane_rx.try_recv().is_err());
        assert_eq!(rx.try_iter().count(), 2, "only the in-band markers");
    }
}
