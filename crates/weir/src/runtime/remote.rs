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
    /// The local channel, if this is one (the unaligned room questions apply only to local
    /// channels: unaligned checkpoints across workers are refused before a job starts).
    #[inline]
    pub(crate) fn local(&self) -> Option<&Sender<Event<T>>> {
        match self {
            Outlet::Local(s) => Some(s),
            #[cfg(feature = "cluster")]
            Outlet::Remote(_) => None,
        }
    }

    /// Sends `event` (a batch of `records` records, 0 for control), waiting for room; a
    /// local send may be deferred as [`crate::runtime::load::send_or_defer`] describes
    /// (`Ok(Some(event))`) unless `no_defer`. A local receiver that is gone means the job is
    /// being cancelled ([`Error::Cancelled`]); a lost remote peer is the task's failure,
    /// naming the peer.
    #[inline]
    pub(crate) fn send(
        &self,
        event: Event<T>,
        records: usize,
        no_defer: bool,
        credit: Option<&std::sync::atomic::AtomicUsize>,
    ) -> Result<Option<Event<T>>> {
        match self {
            Outlet::Local(s) => {
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
                r.send(event).map_err(|e| Error::PeerLost(e.to_string()))?;
                let blocked = (r.permit_waits() != waits).then(|| start.elapsed());
                crate::runtime::load::count_remote_sent(records, blocked);
                Ok(None)
            }
        }
    }
}

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

    /// Whether every input is local.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
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
