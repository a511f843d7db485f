//! One peer's queue of frames to send, with a priority lane.
//!
//! Task threads push frames (blocking code, never waits: the amount of data queued is
//! bounded by the channels' permits); the stream to the peer pulls them (async). A frame on
//! the priority lane — an unaligned checkpoint's announcement, returned permits — is pulled
//! before any frame on the ordinary lane, so it overtakes data that waits here for the
//! HTTP/2 window. The ordinary lane keeps every channel's order.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use prost::Message;

use super::proto::Frame;

/// The frames waiting for one peer's stream.
#[derive(Debug, Default)]
pub struct Outbox {
    state: Mutex<State>,
    /// Frames handed to the stream, ever.
    pub frames_out: AtomicU64,
    /// Their encoded bytes (before gRPC's 5-byte prefix and HTTP/2 framing).
    pub bytes_out: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    priority: VecDeque<Frame>,
    ordinary: VecDeque<Frame>,
    closed: bool,
    waker: Option<Waker>,
}

impl Outbox {
    /// An empty, open outbox.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `frame` behind the frames already on its lane. False when the outbox is closed
    /// (the peer is lost; the caller reports the peer's failure).
    pub fn push(&self, frame: Frame, priority: bool) -> bool {
        let mut s = self.lock();
        if s.closed {
            return false;
        }
        if priority {
            s.priority.push_back(frame);
        } else {
            s.ordinary.push_back(frame);
        }
        let waker = s.waker.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
        true
    }

    /// Ends the stream: frames still queued are dropped (the peer is lost or the exchange
    /// shuts down).
    pub fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        s.priority.clear();
        s.ordinary.clear();
        let waker = s.waker.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The next frame: priority first. `None` once closed.
    fn poll_pop(&self, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        let mut s = self.lock();
        let next = match s.priority.pop_front() {
            Some(f) => Some(f),
            None => s.ordinary.pop_front(),
        };
        match next {
            Some(f) => {
                drop(s);
                self.frames_out.fetch_add(1, Relaxed);
                self.bytes_out.fetch_add(f.encoded_len() as u64, Relaxed);
                Poll::Ready(Some(f))
            }
            None if s.closed => Poll::Ready(None),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// Takes the next frame without waiting (tests).
    #[cfg(test)]
    pub fn try_pop(&self) -> Option<Frame> {
        let waker = Waker::noop();
        match self.poll_pop(&mut Context::from_waker(waker)) {
            Poll::Ready(f) => f,
            Poll::Pending => None,
        }
    }
}

/// The outbox as the request stream of a dialled peer (tonic's client side).
pub struct RequestFrames(pub Arc<Outbox>);

impl tonic::codegen::tokio_stream::Stream for RequestFrames {
    type Item = Frame;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        self.0.poll_pop(cx)
    }
}

/// The outbox as the response stream of an accepted peer (tonic's server side).
pub struct ResponseFrames(pub Arc<Outbox>);

impl tonic::codegen::tokio_stream::Stream for ResponseFrames {
    type Item = Result<Frame, tonic::Status>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_pop(cx).map(|f| f.map(Ok))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::event::{CheckpointBarrier, Event};
    use crate::runtime::exchange::wire;

    fn data(channel: u32, w: u64) -> Frame {
        let codec = crate::runtime::codec::TypeRegistry::with_common_types()
            .codec::<u64>()
            .unwrap();
        wire::to_frame(channel, Event::<u64>::Watermark(w), codec.as_ref()).unwrap()
    }

    #[test]
    fn a_priority_frame_overtakes_every_queued_frame_and_order_holds_per_lane() {
        let o = Outbox::new();
        assert!(o.push(data(1, 1), false));
        assert!(o.push(data(1, 2), false));
        let b = CheckpointBarrier::checkpoint(5, 0);
        assert!(o.push(wire::announcement(1, b), true));
        assert!(o.push(data(1, 3), false));
        let order: Vec<Frame> = std::iter::from_fn(|| o.try_pop()).collect();
        assert_eq!(order[0], wire::announcement(1, b));
        assert_eq!(&order[1..], &[data(1, 1), data(1, 2), data(1, 3)]);
        assert_eq!(o.frames_out.load(Relaxed), 4);
        o.close();
        assert!(!o.push(data(1, 4), false), "closed");
    }
}
