//! One peer worker: its stream, the channels on it, and what happens when it is lost.
//!
//! A `Peer` exists from the first channel registered with that worker, before any stream:
//! frames queue in its [`Outbox`] (a receiver's opening grants, for one) until the stream is
//! attached, by dialling or by accepting. The stream's reader dispatches each arriving frame
//! by channel: permits to the sending channel's [`SendWindow`], events to the input's queue.
//! It never waits for a task, so one slow channel cannot stall the stream.
//!
//! A channel is forgotten once both of its ends are done with it, so a peer's maps hold
//! only the channels of attempts still running, however many attempts its stream
//! outlives: an input once its sender's Close arrived (the last frame of the channel), a
//! sending channel once its sender was dropped *and* the receiver's release arrived (the
//! last permits of the channel, sent when its input was dropped). Frames in flight for a
//! channel that is still known are never a protocol error. One case stays known until the
//! peer fails: an input registered after its sender's Close passed (the sending attempt
//! was cancelled before the receiver registered) — a few bytes per cancelled channel, only
//! on a failure.
//!
//! When the stream breaks or ends, or the peer breaks the protocol, the peer *fails*, once:
//! its outbox closes (ending this side's half of the stream, so the peer learns it too),
//! every sending channel fails with the error, waking its waiting senders, and every input
//! ends after what it already received, its task then reading the error from
//! [`Peer::failure`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use prost::Message;

use super::outbox::Outbox;
use super::permits::SendWindow;
use super::proto::{frame::Kind, Frame};
use super::wire::{self, Cost};
use super::{ChannelBound, ChannelId, ExchangeError, WorkerId};

/// The receiving end of one channel, as the reader sees it (its record type erased).
pub trait InboundChannel: Send + Sync {
    /// Decodes `kind` (an event or an announcement of this channel) and queues it for the
    /// task. An error says what did not decode.
    fn deliver(&self, kind: Kind) -> Result<(), String>;
    /// The peer is lost: end the input after what it holds.
    fn close(&self);
}

/// A sending channel to the peer, and which of its ends are done with it.
struct Output {
    window: Arc<SendWindow>,
    /// Its sender was dropped (its Close is queued).
    sender_gone: bool,
    /// The receiver released it (its input was dropped): no permits follow.
    released: bool,
}

/// The permits a receiver grants a channel whose input is gone: without end, so a sender
/// waiting for permits wakes and reaches its own cancellation. The last permits frame of
/// the channel, recognised by its size.
pub const RELEASE: Cost = Cost {
    batches: u32::MAX / 2,
    records: (i64::MAX / 4) as u64,
};

/// One peer worker.
pub struct Peer {
    /// Frames to send to it.
    pub outbox: Arc<Outbox>,
    state: Mutex<PeerState>,
    /// Frames received, ever.
    pub frames_in: AtomicU64,
    /// Their encoded bytes.
    pub bytes_in: AtomicU64,
}

#[derive(Default)]
struct PeerState {
    /// `worker N at HOST:PORT` once a stream is attached, `worker N` before.
    name: String,
    attached: bool,
    failed: Option<ExchangeError>,
    inputs: HashMap<ChannelId, Arc<dyn InboundChannel>>,
    outputs: HashMap<ChannelId, Output>,
    /// Permit waits of the sending channels forgotten (count, nanoseconds): the peer's
    /// figures count every channel it ever had.
    retired_waits: (u64, u64),
    /// What must live as long as the stream (the dialled side's client).
    keep: Option<Box<dyn std::any::Any + Send>>,
}

impl Peer {
    /// A peer with no stream yet.
    pub fn new(id: WorkerId) -> Arc<Self> {
        Arc::new(Peer {
            outbox: Arc::new(Outbox::new()),
            state: Mutex::new(PeerState {
                name: format!("worker {id}"),
                ..PeerState::default()
            }),
            frames_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, PeerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How errors name the peer: `worker N at HOST:PORT`.
    pub fn name(&self) -> String {
        self.lock().name.clone()
    }

    /// Makes `name` the stream's peer; false when a stream is attached already (or the peer
    /// failed): there is one stream per pair of workers.
    pub fn attach(&self, name: String) -> bool {
        let mut s = self.lock();
        if s.attached || s.failed.is_some() {
            return false;
        }
        s.attached = true;
        s.name = name;
        true
    }

    /// Keeps `keep` (the dialled side's client) as long as the stream lives.
    pub fn attach_keep(&self, keep: Box<dyn std::any::Any + Send>) {
        let mut s = self.lock();
        if s.failed.is_none() {
            s.keep = Some(keep);
        }
    }

    /// Whether a stream is attached.
    pub fn is_attached(&self) -> bool {
        self.lock().attached
    }

    /// The failure, once the peer is lost.
    pub fn failure(&self) -> Option<ExchangeError> {
        self.lock().failed.clone()
    }

    /// Over every sending channel to this peer: sends that waited for permits, and how
    /// long they waited in all (nanoseconds).
    pub fn permit_waits(&self) -> (u64, u64) {
        let s = self.lock();
        let retired = s.retired_waits;
        let windows: Vec<_> = s.outputs.values().map(|o| o.window.clone()).collect();
        drop(s);
        windows
            .iter()
            .fold(retired, |(n, ns), w| (n + w.waits(), ns + w.waited_ns()))
    }

    /// The channels known now: (inputs, sending channels).
    pub fn channels(&self) -> (usize, usize) {
        let s = self.lock();
        (s.inputs.len(), s.outputs.len())
    }

    /// The permits of sending channel `channel`, made on first use (by its sender or by the
    /// receiver's grant, whichever comes first). A window made after the peer failed is
    /// failed.
    pub fn window(&self, channel: ChannelId) -> Arc<SendWindow> {
        let mut s = self.lock();
        s.output(channel).window.clone()
    }

    /// The sender of `channel` was dropped (after queueing its Close): the channel is
    /// forgotten once its receiver released it too.
    pub fn close_output(&self, channel: ChannelId) {
        let mut s = self.lock();
        if let Some(o) = s.outputs.get_mut(&channel) {
            o.sender_gone = true;
            if o.released {
                s.forget_output(channel);
            }
        }
    }

    /// Registers the receiving end of `channel` and grants its sender `bound` (queued until
    /// the stream is attached). Refused when the channel has an input already.
    pub fn add_input(
        &self,
        channel: ChannelId,
        input: Arc<dyn InboundChannel>,
        bound: ChannelBound,
    ) -> Result<(), ExchangeError> {
        let mut s = self.lock();
        if let Some(e) = &s.failed {
            input.close();
            return Err(e.clone());
        }
        if s.inputs.contains_key(&channel) {
            return Err(ExchangeError::Protocol {
                peer: s.name.clone(),
                cause: format!("channel {channel} from it has an input already"),
            });
        }
        s.inputs.insert(channel, input);
        drop(s);
        let grant = Cost {
            batches: bound.batches,
            records: bound.records,
        };
        self.outbox.push(wire::permits(channel, grant), true);
        Ok(())
    }

    /// The task of input `channel` is gone (finished, failed or cancelled): its events
    /// are dropped from now on, and its sender is granted permits without end, so that a
    /// sender waiting for permits wakes and reaches its own cancellation — as a local
    /// sender does when its receiver is dropped. The channel stays known, so frames
    /// already in flight are not a protocol error.
    pub fn close_input(&self, channel: ChannelId) {
        let s = self.lock();
        if let Some(input) = s.inputs.get(&channel) {
            input.close();
        }
        let failed = s.failed.is_some();
        drop(s);
        if !failed {
            self.outbox.push(wire::permits(channel, RELEASE), true);
        }
    }

    /// The attempt these channels belong to ended: every sending channel whose receiver
    /// never granted it a permit fails with `cause`, waking a sender that waits for it to
    /// open — a channel to a worker that hung, died or was cut off before it registered
    /// its end would otherwise wait for ever (no stream, so no keep-alive to fail it).
    /// Channels that opened are left alone: their receivers release them when they close.
    pub fn fail_unopened(&self, cause: &str) {
        let s = self.lock();
        let peer = s.name.clone();
        let unopened: Vec<_> = (s.outputs.values())
            .filter(|o| !o.window.is_open())
            .map(|o| o.window.clone())
            .collect();
        drop(s);
        for w in unopened {
            w.fail(ExchangeError::PeerLost {
                peer: peer.clone(),
                cause: cause.to_string(),
            });
        }
    }

    /// Handles one frame from the peer.
    pub fn on_frame(&self, frame: Frame) -> Result<(), ExchangeError> {
        self.frames_in.fetch_add(1, Relaxed);
        self.bytes_in.fetch_add(frame.encoded_len() as u64, Relaxed);
        let Some(kind) = frame.kind else {
            return Err(self.protocol("an empty frame".into()));
        };
        let channel = wire::channel_of(&kind);
        if let Kind::Permits(p) = kind {
            let cost = Cost {
                batches: p.batches,
                records: p.records,
            };
            let mut s = self.lock();
            let o = s.output(channel);
            let window = o.window.clone();
            if cost == RELEASE {
                o.released = true;
                if o.sender_gone {
                    s.forget_output(channel);
                }
            }
            drop(s);
            window.grant(cost);
            return Ok(());
        }
        if let Kind::Close(_) = kind {
            // In order after the channel's frames: its input is done with. Unknown (never
            // registered here, or closed already): nothing to do.
            let input = self.lock().inputs.remove(&channel);
            if let Some(input) = input {
                input.close();
            }
            return Ok(());
        }
        let input = self.lock().inputs.get(&channel).cloned();
        let Some(input) = input else {
            return Err(self.protocol(format!(
                "a frame for channel {channel}, which has no input on this worker"
            )));
        };
        input.deliver(kind).map_err(|cause| self.protocol(cause))
    }

    fn protocol(&self, cause: String) -> ExchangeError {
        ExchangeError::Protocol {
            peer: self.name(),
            cause,
        }
    }

    /// The peer is lost (or the exchange shuts down): fails every channel with `e`, once.
    pub fn fail(&self, e: ExchangeError) {
        let mut s = self.lock();
        if s.failed.is_some() {
            return;
        }
        s.failed = Some(e.clone());
        let outputs: Vec<_> = s.outputs.values().map(|o| o.window.clone()).collect();
        let inputs: Vec<_> = s.inputs.values().cloned().collect();
        let keep = s.keep.take();
        drop(s);
        self.outbox.close();
        for w in outputs {
            w.fail(e.clone());
        }
        for i in inputs {
            i.close();
        }
        drop(keep);
    }

    /// Reads the peer's half of the stream until it ends, dispatching every frame; then
    /// fails the peer, naming it and the cause.
    pub async fn read(self: Arc<Self>, mut inbound: tonic::Streaming<Frame>) {
        let cause = loop {
            match inbound.message().await {
                Ok(Some(frame)) => {
                    if let Err(e) = self.on_frame(frame) {
                        self.fail(e);
                        return;
                    }
                }
                Ok(None) => break "the stream ended".to_string(),
                Err(status) => break status_cause(&status),
            }
        };
        self.fail(ExchangeError::PeerLost {
            peer: self.name(),
            cause,
        });
    }
}

impl PeerState {
    /// Sending channel `channel`, made on first use (by its sender or by the receiver's
    /// grant, whichever comes first); failed if the peer is.
    fn output(&mut self, channel: ChannelId) -> &mut Output {
        let failed = self.failed.clone();
        self.outputs.entry(channel).or_insert_with(|| {
            let w = SendWindow::new();
            if let Some(e) = failed {
                w.fail(e);
            }
            Output {
                window: Arc::new(w),
                sender_gone: false,
                released: false,
            }
        })
    }

    /// Both ends are done with sending channel `channel`: forget it, keeping its figures.
    fn forget_output(&mut self, channel: ChannelId) {
        if let Some(o) = self.outputs.remove(&channel) {
            self.retired_waits.0 += o.window.waits();
            self.retired_waits.1 += o.window.waited_ns();
        }
    }
}

/// A status as a cause: its message and, for transport errors, the chain below it.
pub fn status_cause(status: &tonic::Status) -> String {
    let mut cause = status.message().to_string();
    let mut source = std::error::Error::source(status);
    while let Some(s) = source {
        let text = s.to_string();
        if !cause.contains(&text) {
            cause = format!("{cause}: {text}");
        }
        source = s.source();
    }
    if cause.is_empty() {
        format!("{:?}", status.code())
    } else {
        cause
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::event::Event;
    use crate::runtime::exchange::permits::Taken;

    struct Nowhere;
    impl InboundChannel for Nowhere {
        fn deliver(&self, _: Kind) -> Result<(), String> {
            Ok(())
        }
        fn close(&self) {}
    }

    #[test]
    fn a_frame_for_a_channel_without_an_input_is_a_protocol_error_naming_peer_and_channel() {
        let peer = Peer::new(3);
        assert!(peer.attach("worker 3 at 10.0.0.3:6124".into()));
        let codec = crate::runtime::codec::TypeRegistry::with_common_types()
            .codec::<u64>()
            .unwrap();
        let frame = wire::to_frame(9, Event::Batch(vec![1u64]), codec.as_ref()).unwrap();
        let e = peer.on_frame(frame).unwrap_err().to_string();
        assert!(e.contains("worker 3 at 10.0.0.3:6124"), "{e}");
        assert!(e.contains("channel 9"), "{e}");
        assert!(e.contains("same binary and plan"), "{e}");
        // Permits for a channel whose sender is not registered yet are kept for it.
        let grant = wire::permits(
            4,
            Cost {
                batches: 2,
                records: 8,
            },
        );
        peer.on_frame(grant).unwrap();
        assert_eq!(peer.window(4).available(), (2, 8));
        // One input per channel; a second stream for the pair is refused.
        let bound = ChannelBound::local(1);
        peer.add_input(5, Arc::new(Nowhere), bound).unwrap();
        let e = peer.add_input(5, Arc::new(Nowhere), bound).unwrap_err();
        assert!(e.to_string().contains("channel 5"), "{e}");
        assert!(!peer.attach("again".into()));
        // A failed peer fails windows made afterwards too.
        peer.fail(ExchangeError::Shutdown);
        assert_eq!(peer.window(6).failure(), Some(ExchangeError::Shutdown));
    }

    #[test]
    fn a_channel_is_forgotten_once_both_ends_are_done_with_it() {
        let peer = Peer::new(2);
        assert!(peer.attach("worker 2".into()));
        let grant = |c, cost| peer.on_frame(wire::permits(c, cost)).unwrap();
        // Sending channel 1: the sender goes first, then the receiver's release.
        let w1 = peer.window(1);
        let one = Cost {
            batches: 1,
            records: 1,
        };
        grant(1, one);
        assert_eq!(w1.try_take(one), Ok(Taken::Yes));
        // A send that waits for permits: a figure the peer keeps after forgetting.
        let waiting = w1.clone();
        let sender = std::thread::spawn(move || waiting.take(one, None));
        while w1.waiting() == 0 {
            std::thread::yield_now();
        }
        grant(1, one);
        assert_eq!(sender.join().unwrap(), Ok(Taken::Yes));
        peer.close_output(1);
        assert_eq!(
            peer.channels(),
            (0, 1),
            "the receiver may still return permits"
        );
        grant(1, one);
        assert_eq!(peer.channels(), (0, 1));
        grant(1, RELEASE);
        assert_eq!(peer.channels(), (0, 0));
        assert_eq!(peer.permit_waits().0, 1, "its figures stay the peer's");
        // Sending channel 2: the receiver releases first (its task failed early).
        peer.window(2);
        grant(2, RELEASE);
        assert_eq!(peer.channels(), (0, 1), "its sender still holds it");
        peer.close_output(2);
        assert_eq!(peer.channels(), (0, 0));
        // Input 3: forgotten when its sender's Close arrives, the channel's last frame.
        peer.add_input(3, Arc::new(Nowhere), ChannelBound::local(1))
            .unwrap();
        assert_eq!(peer.channels(), (1, 0));
        peer.close_input(3); // its task went first: frames in flight are still fine
        let codec = crate::runtime::codec::TypeRegistry::with_common_types()
            .codec::<u64>()
            .unwrap();
        let late = wire::to_frame(3, Event::Batch(vec![1u64]), codec.as_ref()).unwrap();
        peer.on_frame(late).unwrap();
        peer.on_frame(wire::close(3)).unwrap();
        assert_eq!(peer.channels(), (0, 0));
    }
}
