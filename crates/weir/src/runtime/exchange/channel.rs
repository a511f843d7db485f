//! The two ends of a remote channel, as a task holds them.
//!
//! [`RemoteSender`] is what a network writer sends on instead of a crossbeam `Sender`: the
//! same `try_send` / `send` / `send_timeout` / `is_full` questions, where "full" means "out
//! of permits". [`RemoteInput`] is what an input task reads: a crossbeam `Receiver` of the
//! same [`Event`]s (so the task's `Select` is unchanged) and a priority lane for unaligned
//! announcements; whatever the task takes from the receiver it reports with
//! [`RemoteInput::consumed`], which returns the permits to the sender. (`recv` and friends
//! do both.)

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use crate::runtime::codec::RecordCodec;
use crate::runtime::event::{CheckpointBarrier, Event};
use crate::runtime::unaligned::lane::{lane, LaneReceiver, LaneSender};

use super::peer::{InboundChannel, Peer};
use super::permits::{SendWindow, Taken};
use super::wire::{self, Cost, Inbound};
use super::{ChannelId, ExchangeError};

/// A send that did not happen.
#[derive(Debug)]
pub enum TrySend<T> {
    /// Out of permits (or the channel is not open yet): the event is given back.
    Full(Event<T>),
    /// The peer is lost.
    Failed(ExchangeError),
}

/// The sending end of a channel to a subtask on another worker.
pub struct RemoteSender<T> {
    channel: ChannelId,
    peer: Arc<Peer>,
    window: Arc<SendWindow>,
    codec: Arc<dyn RecordCodec<T>>,
}

impl<T> Drop for RemoteSender<T> {
    /// The receiver's input closes after what was sent before, as a local channel
    /// disconnects when its sender is dropped (an input task tells an orderly end from a
    /// lost one by the end-of-input before it).
    fn drop(&mut self) {
        let _ = self.peer.outbox.push(wire::close(self.channel), false);
        self.peer.close_output(self.channel);
    }
}

impl<T> RemoteSender<T> {
    pub(super) fn new(channel: ChannelId, peer: Arc<Peer>, codec: Arc<dyn RecordCodec<T>>) -> Self {
        RemoteSender {
            channel,
            window: peer.window(channel),
            peer,
            codec,
        }
    }

    /// Sends `event` if its permits are there, else gives it back.
    pub fn try_send(&self, event: Event<T>) -> Result<(), TrySend<T>> {
        self.send_until(event, Some(Instant::now()))
    }

    /// Sends `event`, waiting for its permits as long as it takes: backpressure.
    pub fn send(&self, event: Event<T>) -> Result<(), ExchangeError> {
        match self.send_until(event, None) {
            Ok(()) => Ok(()),
            Err(TrySend::Failed(e)) => Err(e),
            Err(TrySend::Full(_)) => unreachable!("a send without a deadline waits until sent"),
        }
    }

    /// Sends `event` once the channel is open, over the bound if its permits are out
    /// ([`SendWindow::take_over`]): the flush ahead of a checkpoint's marker.
    pub fn send_over(&self, event: Event<T>) -> Result<(), ExchangeError> {
        self.window.take_over(Cost::of(&event))?;
        self.push(event)
    }

    /// Sends `event`, waiting at most `timeout` for its permits.
    pub fn send_timeout(&self, event: Event<T>, timeout: Duration) -> Result<(), TrySend<T>> {
        self.send_until(event, Some(Instant::now() + timeout))
    }

    fn send_until(&self, event: Event<T>, deadline: Option<Instant>) -> Result<(), TrySend<T>> {
        match self.window.take(Cost::of(&event), deadline) {
            Ok(Taken::Yes) => {}
            Ok(Taken::No) => return Err(TrySend::Full(event)),
            Err(e) => return Err(TrySend::Failed(e)),
        }
        self.push(event).map_err(TrySend::Failed)
    }

    /// Encodes `event`, whose permits are taken, and queues it for the peer.
    fn push(&self, event: Event<T>) -> Result<(), ExchangeError> {
        let frame = wire::to_frame(self.channel, event, self.codec.as_ref()).map_err(|cause| {
            ExchangeError::Encode {
                peer: self.peer.name(),
                channel: self.channel,
                cause,
            }
        })?;
        if self.peer.outbox.push(frame, false) {
            Ok(())
        } else {
            Err(self.failure())
        }
    }

    /// Announces an unaligned checkpoint's barrier: it overtakes every frame still queued
    /// for the peer and reaches the input's priority lane ahead of its queued events. A
    /// channel not open yet has sent nothing to overtake: the in-band marker will do.
    pub fn announce(&self, barrier: CheckpointBarrier) -> Result<(), ExchangeError> {
        self.announcer().announce(barrier)
    }

    /// What announces on this channel's priority lane without the sender itself: the
    /// announcing wrapper of a network writer holds one per channel, beside the local
    /// lanes, while the writer it wraps holds the senders.
    pub fn announcer(&self) -> RemoteAnnouncer {
        RemoteAnnouncer {
            channel: self.channel,
            peer: self.peer.clone(),
            window: self.window.clone(),
        }
    }

    /// Whether a batch could not be sent now (out of permits, or not open yet).
    pub fn is_full(&self) -> bool {
        self.window.is_full()
    }

    /// What a task's `Select` waits on while this channel is out of permits: ready once
    /// they return or the peer is lost ([`SendWindow::watch`]).
    pub fn watch_room(&self) -> &Receiver<()> {
        self.window.watch()
    }

    /// Sends that had to wait for permits, ever.
    pub fn permit_waits(&self) -> u64 {
        self.window.waits()
    }

    /// Senders waiting for permits right now (0 or 1: a channel has one sender).
    pub fn waiting(&self) -> u32 {
        self.window.waiting()
    }

    /// Permits held now: batches and records.
    pub fn available(&self) -> (i64, i64) {
        self.window.available()
    }

    /// Why the channel failed, once its peer is lost.
    pub fn failure(&self) -> ExchangeError {
        self.window
            .failure()
            .or_else(|| self.peer.failure())
            .unwrap_or(ExchangeError::Shutdown)
    }
}

/// The priority lane of a remote channel, as its sender's announcing writer holds it
/// ([`RemoteSender::announcer`]): untyped, so it sits beside the local lanes.
pub struct RemoteAnnouncer {
    channel: ChannelId,
    peer: Arc<Peer>,
    window: Arc<SendWindow>,
}

impl RemoteAnnouncer {
    /// [`RemoteSender::announce`].
    pub fn announce(&self, barrier: CheckpointBarrier) -> Result<(), ExchangeError> {
        if !self.window.is_open() {
            return match self.peer.failure() {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        if self
            .peer
            .outbox
            .push(wire::announcement(self.channel, barrier), true)
        {
            Ok(())
        } else {
            Err((self.window.failure())
                .or_else(|| self.peer.failure())
                .unwrap_or(ExchangeError::Shutdown))
        }
    }
}

/// The receiving end of a channel from a subtask on another worker.
pub struct RemoteInput<T> {
    channel: ChannelId,
    peer: Arc<Peer>,
    data: Receiver<Event<T>>,
    lane: LaneReceiver,
}

/// What the reader of the stream holds of an input: where to put its events.
pub(super) struct Delivery<T> {
    codec: Arc<dyn RecordCodec<T>>,
    /// `None` once the peer is lost: the task sees its channel close.
    ends: Mutex<Option<(Sender<Event<T>>, LaneSender)>>,
}

impl<T: Send + 'static> InboundChannel for Delivery<T> {
    fn deliver(&self, kind: super::proto::frame::Kind) -> Result<(), String> {
        let inbound = wire::from_frame(kind, self.codec.as_ref())?;
        let ends = self.ends.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((data, lane)) = ends.as_ref() {
            // A task that dropped its input is being cancelled: nothing to deliver to.
            let _ = match inbound {
                Inbound::Event(e) => data.send(e).map_err(drop),
                Inbound::Announcement(b) => lane.send(b).map_err(drop),
            };
        }
        Ok(())
    }

    fn close(&self) {
        self.ends.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl<T: Send + 'static> RemoteInput<T> {
    /// A new input and what the stream's reader delivers into.
    pub(super) fn new(
        channel: ChannelId,
        peer: Arc<Peer>,
        codec: Arc<dyn RecordCodec<T>>,
    ) -> (Self, Arc<Delivery<T>>) {
        // Unbounded by type, bounded by the permits its sender holds.
        let (data_tx, data) = crossbeam_channel::unbounded();
        let (lane_tx, lane) = lane();
        let delivery = Arc::new(Delivery {
            codec,
            ends: Mutex::new(Some((data_tx, lane_tx))),
        });
        (
            RemoteInput {
                channel,
                peer,
                data,
                lane,
            },
            delivery,
        )
    }
}

impl<T> Drop for RemoteInput<T> {
    fn drop(&mut self) {
        self.peer.close_input(self.channel);
    }
}

impl<T> RemoteInput<T> {
    /// The channel's events in order, for a task's `Select`; report what is taken from it
    /// with [`consumed`](Self::consumed). It disconnects when the peer is lost, after the
    /// events that arrived before.
    pub fn receiver(&self) -> &Receiver<Event<T>> {
        &self.data
    }

    /// The channel's priority lane: unaligned announcements, ahead of its events.
    pub fn lane(&self) -> &LaneReceiver {
        &self.lane
    }

    /// The task took `event` from [`receiver`](Self::receiver): return its permits to the
    /// sender, ahead of the data queued for it.
    pub fn consumed(&self, event: &Event<T>) {
        let cost = Cost::of(event);
        if !cost.is_free() {
            self.peer
                .outbox
                .push(wire::permits(self.channel, cost), true);
        }
    }

    /// The next event, waiting for it; the error once the peer is lost and every event
    /// that arrived before was read.
    pub fn recv(&self) -> Result<Event<T>, ExchangeError> {
        match self.data.recv() {
            Ok(e) => {
                self.consumed(&e);
                Ok(e)
            }
            Err(_) => Err(self.failure()),
        }
    }

    /// The next event if one is there.
    pub fn try_recv(&self) -> Result<Option<Event<T>>, ExchangeError> {
        match self.data.try_recv() {
            Ok(e) => {
                self.consumed(&e);
                Ok(Some(e))
            }
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(self.failure()),
        }
    }

    /// The next event, waiting at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<Event<T>>, ExchangeError> {
        match self.data.recv_timeout(timeout) {
            Ok(e) => {
                self.consumed(&e);
                Ok(Some(e))
            }
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(self.failure()),
        }
    }

    /// Events arrived and not yet taken.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether no event waits.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The peer's failure, if the peer is lost (else the channel closed because its sender
    /// was dropped).
    pub fn lost(&self) -> Option<ExchangeError> {
        self.peer.failure()
    }

    /// Why the channel closed: the peer's failure.
    pub fn failure(&self) -> ExchangeError {
        self.peer.failure().unwrap_or(ExchangeError::Shutdown)
    }
}
