//! Where a channel's other end is: in this process (a bounded crossbeam channel, by value)
//! or on another worker (the exchange, `runtime::exchange`, feature `cluster`).
//!
//! A network writer sends on [`Outlet`]s and an input task reads [`Inlet`]s, so the two
//! kinds of channel meet the task loops in one place each, and a build without the
//! `cluster` feature compiles the remote half away: [`Outlet`] has a single variant and
//! [`RemoteIn`] is an uninhabited type, so the hot path of a single process is the
//! crossbeam send and receive it always was.

use crossbeam_channel::{Receiver, Sender};

use crate::error::{Error, Result};
use crate::runtime::event::Event;

#[cfg(feature = "cluster")]
pub(crate) use crate::runtime::exchange::channel::RemoteInput as RemoteIn;
#[cfg(feature = "cluster")]
use crate::runtime::exchange::channel::RemoteSender;

/// The receiving end of a remote channel; uninhabited without the `cluster` feature, so
/// every remote branch of the input loop is dead code there.
#[cfg(not(feature = "cluster"))]
pub(crate) enum RemoteIn<T> {
    /// Never built: the `Infallible` makes the type empty.
    #[allow(dead_code)]
    Never(
        std::convert::Infallible,
        std::marker::PhantomData<fn() -> T>,
    ),
}

#[cfg(not(feature = "cluster"))]
impl<T> RemoteIn<T> {
    /// Unreachable: no value of the type exists.
    pub(crate) fn consumed(&self, _: &Event<T>) {
        match self {
            RemoteIn::Never(n, _) => match *n {},
        }
    }
    /// Unreachable: no value of the type exists.
    pub(crate) fn failure(&self) -> String {
        match self {
            RemoteIn::Never(n, _) => match *n {},
        }
    }
    /// Unreachable: no value of the type exists.
    pub(crate) fn lane(&self) -> &crate::runtime::unaligned::lane::LaneReceiver {
        match self {
            RemoteIn::Never(n, _) => match *n {},
        }
    }
}

/// The sending end of one channel of a network writer.
pub enum Outlet<T> {
    /// A bounded crossbeam channel to a subtask in this process: records travel by value.
    Local(Sender<Event<T>>),
    /// A channel to a subtask on another worker: records are encoded and sent on the one
    /// stream to that worker, bounded by its permits.
    #[cfg(feature = "cluster")]
    Remote(RemoteSender<T>),
}

impl<T> From<Sender<Event<T>>> for Outlet<T> {
    fn from(s: Sender<Event<T>>) -> Self {
        Outlet::Local(s)
    }
}

impl<T> Outlet<T> {
    /// The local channel, if this is one.
    #[inline]
    pub(crate) fn local(&self) -> Option<&Sender<Event<T>>> {
        match self {
            Outlet::Local(s) => Some(s),
            #[cfg(feature = "cluster")]
            Outlet::Remote(_) => None,
        }
    }

    /// Whether a remote channel is out of permits now: what its consumer holds — read
    /// ahead for an unaligned checkpoint included, whose permits go back only once
    /// processed — counts against its bound, as a local consumer's read-ahead credit
    /// counts against its channel's capacity. False for a local channel.
    #[inline]
    pub(crate) fn remote_full(&self) -> bool {
        match self {
            Outlet::Local(_) => false,
            #[cfg(feature = "cluster")]
            Outlet::Remote(r) => r.is_full(),
        }
    }

    /// Whether the channel has no room for another batch right now (a local channel at its
    /// capacity, a remote one out of permits): its consumer is behind, which is what buffer
    /// debloating sizes batches by ([`crate::runtime::debloat`]).
    #[inline]
    pub(crate) fn is_full_now(&self) -> bool {
        match self {
            Outlet::Local(s) => s.is_full(),
            #[cfg(feature = "cluster")]
            Outlet::Remote(r) => r.is_full(),
        }
    }

    /// For a remote channel out of permits, what a task's `Select` waits on until they
    /// return (or the peer is lost); `None` for a local channel, or a remote one with
    /// room.
    #[inline]
    pub(crate) fn watch_remote_room(&self) -> Option<&crossbeam_channel::Receiver<()>> {
        match self {
            Outlet::Local(_) => None,
            #[cfg(feature = "cluster")]
            Outlet::Remote(r) => r.is_full().then(|| r.watch_room()),
        }
    }

    /// Sends `event` (a batch of `records` records, 0 for control), waiting for room; a
    /// send may be deferred as [`crate::runtime::load::send_or_defer`] describes
    /// (`Ok(Some(event))`) unless `no_defer`. `over_bound` (the flush ahead of a
    /// checkpoint's marker, whose local sends ignore the read-ahead `credit`) lets a remote
    /// send go over its permits ([`RemoteSender::send_over`]). A local receiver that is
    /// gone means the job is being cancelled ([`Error::Cancelled`]); a lost remote peer is
    /// the task's failure, naming the peer.
    #[inline]
    pub(crate) fn send(
        &self,
        event: Event<T>,
        records: usize,
        no_defer: bool,
        credit: Option<&std::sync::atomic::AtomicUsize>,
        over_bound: bool,
    ) -> Result<Option<Event<T>>> {
        match self {
            Outlet::Local(s) => {
                let _ = over_bound; // the credit says it for a local channel
                let sent = if no_defer {
                    crate::runtime::load::send(s, event, records).map(|()| None)
                } else {
                    crate::runtime::load::send_or_defer(s, event, records, credit)
                };
                sent.map_err(|_| Error::Cancelled)
            }
            #[cfg(feature = "cluster")]
            Outlet::Remote(r) => {
                let waits = r.permit_waits();
                let start = std::time::Instant::now();
                let deferral = (!no_defer).then(crate::runtime::load::deferral).flatten();
                let kept = match deferral {
                    None if over_bound => r.send_over(event).map(|()| None),
                    None => r.send(event).map(|()| None),
                    Some(barrier_waits) => send_or_defer(r, event, barrier_waits.as_ref()),
                }
                .map_err(|e| Error::PeerLost(e.to_string()))?;
                let blocked = (r.permit_waits() != waits).then(|| start.elapsed());
                if kept.is_none() {
                    crate::runtime::load::count_remote_sent(records, blocked);
                }
                Ok(kept)
            }
        }
    }
}

/// [`crate::runtime::load::send_or_defer`] for a remote channel: sends `event` once its
/// permits are there, but gives it back (`Ok(Some(event))`) once `barrier_waits` says a
/// barrier waits for the task, so that the task takes its snapshot and the event goes out
/// before the barrier's marker. Looks every [`DEFER_POLL`] while out of permits.
#[cfg(feature = "cluster")]
fn send_or_defer<T>(
    r: &RemoteSender<T>,
    event: Event<T>,
    barrier_waits: &dyn Fn() -> bool,
) -> std::result::Result<Option<Event<T>>, crate::runtime::exchange::ExchangeError> {
    use crate::runtime::exchange::channel::TrySend;
    let mut event = match r.try_send(event) {
        Ok(()) => return Ok(None),
        Err(TrySend::Failed(e)) => return Err(e),
        Err(TrySend::Full(e)) => e,
    };
    loop {
        if barrier_waits() {
            return Ok(Some(event));
        }
        event = match r.send_timeout(event, DEFER_POLL) {
            Ok(()) => return Ok(None),
            Err(TrySend::Failed(e)) => return Err(e),
            Err(TrySend::Full(e)) => e,
        };
    }
}

/// How often a deferrable send on a remote channel out of permits looks whether a
/// barrier waits (as a local one does, `load::send_or_defer`).
#[cfg(feature = "cluster")]
const DEFER_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// The receiving end of one input channel of a task.
pub struct Inlet<T> {
    /// The channel's events, for the task's `Select` (a remote input's own receiver).
    pub(crate) data: Receiver<Event<T>>,
    /// The remote input behind `data`, whose permits go back as the task consumes.
    pub(crate) remote: Option<RemoteIn<T>>,
}

impl<T> From<Receiver<Event<T>>> for Inlet<T> {
    fn from(data: Receiver<Event<T>>) -> Self {
        Inlet { data, remote: None }
    }
}

#[cfg(feature = "cluster")]
impl<T> From<RemoteIn<T>> for Inlet<T> {
    fn from(remote: RemoteIn<T>) -> Self {
        Inlet {
            data: remote.receiver().clone(),
            remote: Some(remote),
        }
    }
}

/// The remote inputs of an input task, by channel: empty when every input is local, so a
/// single process pays one bounds check per event.
pub(crate) struct Remotes<T>(Vec<Option<RemoteIn<T>>>);

impl<T> Remotes<T> {
    /// Splits `inlets` into the receivers the task selects on and their remote ends.
    pub(crate) fn split(inlets: Vec<Inlet<T>>) -> (Vec<Receiver<Event<T>>>, Remotes<T>) {
        let any_remote = inlets.iter().any(|i| i.remote.is_some());
        let mut data = Vec::with_capacity(inlets.len());
        let mut remotes = Vec::new();
        for i in inlets {
            data.push(i.data);
            if any_remote {
                remotes.push(i.remote);
            }
        }
        (data, Remotes(remotes))
    }

    /// No remote input.
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        Remotes(Vec::new())
    }

    /// Channel `c`'s priority lane, if it is a remote channel (unaligned checkpoints: its
    /// announcements arrive there, ahead of its queued events).
    pub(crate) fn lane(&self, c: usize) -> Option<crate::runtime::unaligned::lane::LaneReceiver> {
        match self.0.get(c) {
            Some(Some(r)) => Some(r.lane().clone()),
            _ => None,
        }
    }

    /// The task took `event` from channel `c`: a remote channel's permits go back.
    #[inline]
    pub(crate) fn consumed(&self, c: usize, event: &Event<T>) {
        if let Some(Some(r)) = self.0.get(c) {
            r.consumed(event);
        }
    }

    /// Channel `c` closed before its end: for a remote channel whose peer is lost, the
    /// peer named as the task's failure; otherwise cancellation (a neighbour task ended,
    /// here or on another worker).
    pub(crate) fn closed_early(&self, c: usize) -> Error {
        match self.0.get(c) {
            Some(Some(r)) => lost(r).map_or(Error::Cancelled, Error::PeerLost),
            _ => Error::Cancelled,
        }
    }
}

#[cfg(feature = "cluster")]
fn lost<T>(r: &RemoteIn<T>) -> Option<String> {
    r.lost().map(|e| e.to_string())
}

#[cfg(not(feature = "cluster"))]
fn lost<T>(r: &RemoteIn<T>) -> Option<String> {
    Some(r.failure())
}
