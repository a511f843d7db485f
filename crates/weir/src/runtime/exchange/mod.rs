//! The exchange: channels between subtasks on different workers (issue 24, docs/cluster.md).
//!
//! **What it guarantees.** Between two workers there is exactly ONE bidirectional gRPC
//! stream (tonic), and it carries every channel between them, in both directions. On each
//! channel:
//!
//! * **Order.** Events arrive in the order they were sent, so a barrier never overtakes a
//!   record sent before it (docs/architecture.md §2), exactly as on a local channel.
//! * **The same bound as a local channel.** Flow control is by *permits*, counted in batches
//!   and records ([`ChannelBound`]): the receiver grants its channel's capacity when the
//!   channel opens and returns a batch's permits when its task *consumes* the batch, on the
//!   same stream. A sender without permits waits (backpressure crosses machines); so what
//!   is in flight plus what waits at the receiver never exceeds what a local bounded channel
//!   of that capacity holds. HTTP/2's byte windows are not the bound: they are shared by
//!   every channel of the stream, and the receiver drains the stream continuously (it never
//!   blocks on one slow task), so one backpressured channel cannot stall the others —
//!   RisingWave's reason for moving its exchange to permits.
//! * **Control in band, without permits.** Watermarks, watermark status, barriers and
//!   end-of-input follow the records before them and need no permit, so a checkpoint or the
//!   end of the input is never held up by a full channel.
//! * **Priority markers overtake.** An unaligned checkpoint's announcement
//!   ([`crate::runtime::unaligned::lane`]) goes out ahead of every frame still queued for the
//!   peer and is delivered on the input's own priority lane, ahead of what waits there.
//! * **Records are encoded by the record codec** ([`crate::runtime::codec`], the types
//!   registered with `register_type`), on the sending task's thread, and decoded on
//!   arrival.
//! * **A lost peer is an error that names it**, on both sides: a stream that breaks or ends
//!   fails every channel of that peer, waking blocked senders, and ends every input so its
//!   task sees the channel close and asks [`RemoteInput::failure`](channel::RemoteInput::failure) why.
//! * **A peer without the cluster's token is refused** before any frame is read
//!   (`authorization: Bearer TOKEN` metadata, compared in constant time).
//!
//! **Where a remote channel stands.** A local channel is a bounded crossbeam channel of
//! [`Event`]s. Its remote counterpart is the pair [`RemoteSender`](channel::RemoteSender) (what a network writer
//! sends on: `try_send`, `send`, `send_timeout`, `is_full`, plus `announce` for the priority
//! lane) and [`RemoteInput`](channel::RemoteInput) (a crossbeam [`Receiver`](crossbeam_channel::Receiver) of the
//! same events and a priority lane, both usable in a task's `Select`, plus `consumed`, which
//! returns the permits of what the task took). `runtime::remote` puts them where local
//! channels stand (network writers send on an `Outlet`, input tasks read `Inlet`s) and
//! `spawn` makes them for channels between workers (`runtime::placement`).
//!
//! **Channel close.** A dropped sender sends `Close` after its frames: the input disconnects
//! after the events before it, as a local channel does. A dropped input grants its sender
//! permits without end, so a sender waiting for permits wakes and reaches its cancellation.
//!
//! **An attempt's end.** A peer that never opened its stream (hung or cut off before it
//! dialled) has no keep-alive to fail it, so when an attempt ends its worker calls
//! [`Exchange::end_attempt`]: channels that never opened fail, naming the peer, and peers
//! that failed or never connected are forgotten, so the next attempt connects afresh.
//! [`Exchange::rejoin`] does the same for every peer when the worker registers again under
//! a new id.
//!
//! **TLS** ([`tls`]): mutual TLS with rustls when certificates are given, the token still
//! checked on top; without them the endpoint is plaintext HTTP/2 with a bearer token, fit
//! for a private network only.
//!
//! **Run and attempt.** A stream is refused, naming both, when its two ends belong to
//! different runs (coordinators' run ids) or the dialler's attempt already ended at the
//! acceptor ([`node`]).
//!
//! Layout: [`wire`] maps events to frames (pure), [`permits`] keeps a sending channel's
//! permits, [`outbox`] is one peer's queue of frames with its priority lane, [`peer`] one
//! peer's stream and channels, [`node`] the endpoint (server, dialling, token, run), [`tls`] its certificates, [`channel`]
//! the two ends a task holds.

#![cfg_attr(not(test), allow(dead_code, unused_imports))] // Parts (stats, `recv`) serve the worker role to come.

pub mod channel;
pub mod node;
pub mod outbox;
pub mod peer;
pub mod permits;
pub mod tls;
pub mod wire;

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
pub(crate) mod tls_tests;

pub use channel::TrySend;
pub use node::{Exchange, ExchangeConfig};
pub use tls::TlsConfig;

/// The code generated from `proto/weir/exchange/v1/exchange.proto` (committed; regenerate
/// with `cargo run -p weir-protogen`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    include!("generated/weir.exchange.v1.rs");
}

/// A worker of the cluster, as the coordinator numbered it at registration.
pub type WorkerId = u32;

/// A channel between a sending subtask and a receiving subtask of one edge, by a number
/// both workers derive from the plan (each worker registers the same number on its end).
pub type ChannelId = u32;

/// How much a channel holds: what its receiver grants its sender when the channel opens.
///
/// A local channel holds `channel_capacity` events, each batch at most [`BATCH_SIZE`]
/// records in the common case; [`ChannelBound::local`] gives a remote channel the same
/// bound. A batch larger than the whole record bound is still sent, alone, once every record
/// permit is back (so a large batch cannot deadlock its channel).
///
/// [`BATCH_SIZE`]: crate::runtime::BATCH_SIZE
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelBound {
    /// Batches in flight or waiting at the receiver.
    pub batches: u32,
    /// Records in flight or waiting at the receiver.
    pub records: u64,
}

impl ChannelBound {
    /// The bound of a local channel of `capacity` batches.
    pub fn local(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        ChannelBound {
            batches: capacity as u32,
            records: (capacity * crate::runtime::BATCH_SIZE) as u64,
        }
    }
}

/// What went wrong on the exchange; every variant names the peer and the way out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeError {
    /// The stream to a peer broke or ended while channels were open on it.
    #[error("lost the exchange stream with {peer}: {cause} (the worker died, hung or is cut off; the job restarts from its latest checkpoint)")]
    PeerLost {
        /// The peer, as `worker N at HOST:PORT`.
        peer: String,
        /// What the transport said.
        cause: String,
    },
    /// A peer refused the stream, or was refused by this worker.
    #[error("exchange stream with {peer} refused: {cause}")]
    Refused {
        /// The peer.
        peer: String,
        /// Why (a wrong token, an unexpected worker).
        cause: String,
    },
    /// A peer could not be reached.
    #[error("cannot reach {peer}: {cause} (is the worker running and its --listen address reachable from here?)")]
    Unreachable {
        /// The peer.
        peer: String,
        /// The transport's message.
        cause: String,
    },
    /// A peer sent what the protocol does not allow (a frame for an unknown channel,
    /// records that do not decode): the two workers disagree about the plan.
    #[error("exchange protocol error with {peer}: {cause} (are both workers running the same binary and plan?)")]
    Protocol {
        /// The peer.
        peer: String,
        /// What was wrong.
        cause: String,
    },
    /// Records of a channel could not be encoded.
    #[error("cannot encode records for channel {channel} to {peer}: {cause}")]
    Encode {
        /// The peer.
        peer: String,
        /// The channel.
        channel: ChannelId,
        /// The codec's message.
        cause: String,
    },
    /// The exchange could not listen where it was told to.
    #[error("the exchange cannot listen on {addr}: {cause} (is the port taken, or the address not this host's?)")]
    Listen {
        /// The address.
        addr: String,
        /// The system's message.
        cause: String,
    },
    /// The exchange's configuration cannot work (an empty token).
    #[error("invalid exchange configuration: {0}")]
    Config(String),
    /// This worker's exchange was shut down.
    #[error("the exchange of this worker was shut down")]
    Shutdown,
}
