//! The logical job graph the DataStream API builds: operators (nodes) with a uid and
//! parallelism, and edges with a partitioner.
//!
//! The graph is type-erased so it can hold streams of any record type, but every erased
//! piece was created by typed API code and is downcast back by the same typed code (an
//! [`EdgeFactory`] or a node's builders), so a type mismatch is impossible by construction —
//! the `expect`s on downcasts state that invariant.
//!
//! The graph and its builders live on the thread that calls `execute`; only what they
//! build (operator instances, task bodies) moves to task threads.

use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::bounded;

use crate::checkpoint::layout::ChannelStateFile;
use crate::error::{Error, Result};
use crate::runtime::codec::TypeRegistry;
use crate::runtime::event::Event;
use crate::runtime::network::{BroadcastWriter, Rebalance, RoutedWriter};
use crate::runtime::operator_metrics::{LinkHandle, Metered};
use crate::runtime::operators::OperatorContext;
use crate::runtime::output::{FanOut, NoOutput, Output};
use crate::runtime::remote::{Inlet, Outlet, Remotes};
use crate::runtime::task::{
    replay_channel_state, run_input_unaligned, run_input_with, TaskContext, UnalignedInputs,
};
use crate::runtime::unaligned::capture::{ChannelCapture, ChannelOrigin};
use crate::runtime::unaligned::lane::{Announce, AnnouncingWriter, LaneReceiver, LaneSender};
use crate::state::schema::{Decision as SchemaDecision, StateSchema};
use crate::state::Data;

/// A boxed value of a type known to the code that made it.
pub(crate) type AnyBox = Box<dyn Any + Send>;
/// The body of a task thread; a finished source may hand back its final state.
pub(crate) type TaskBody = Box<dyn FnOnce() -> Result<()> + Send>;

/// Builds a source task for one subtask: `(operator context, chain output, task context)`.
pub(crate) type SourceBuilder =
    Arc<dyn Fn(OperatorContext, AnyBox, TaskContext) -> Result<TaskBody>>;
/// Builds an operator instance for one subtask: `(operator context, next output)` →
/// the operator's own input.
pub(crate) type OperatorBuilder = Arc<dyn Fn(OperatorContext, AnyBox) -> Result<AnyBox>>;

/// Type-specific helpers for a node's output type.
pub(crate) trait OutputFactory {
    /// An output that discards (nobody consumes the stream).
    fn terminal(&self) -> AnyBox;
    /// An output that feeds every one of `outputs`.
    fn fan_out(&self, outputs: Vec<AnyBox>) -> AnyBox;
    /// `next`, counting what passes into `link` (per-operator figures, `operator_metrics`).
    fn metered(&self, next: AnyBox, link: LinkHandle) -> AnyBox;
}

pub(crate) struct TypedOutputs<T>(pub PhantomData<fn() -> T>);

fn unbox_output<T: 'static>(b: AnyBox) -> Box<dyn Output<T>> {
    *b.downcast::<Box<dyn Output<T>>>()
        .expect("graph invariant: output boxes are made by typed code of the same type")
}

impl<T: Data> OutputFactory for TypedOutputs<T> {
    fn terminal(&self) -> AnyBox {
        Box::new(Box::new(NoOutput) as Box<dyn Output<T>>)
    }
    fn fan_out(&self, outputs: Vec<AnyBox>) -> AnyBox {
        let outs = outputs.into_iter().map(unbox_output::<T>).collect();
        Box::new(Box::new(FanOut::new(outs)) as Box<dyn Output<T>>)
    }
    fn metered(&self, next: AnyBox, link: LinkHandle) -> AnyBox {
        let next = unbox_output::<T>(next);
        Box::new(Box::new(Metered::new(next, link)) as Box<dyn Output<T>>)
    }
}

/// What a node is.
pub(crate) enum NodeKind {
    Source(SourceBuilder),
    Operator(OperatorBuilder),
}

/// One logical operator.
pub(crate) struct Node {
    pub name: String,
    pub uid: Option<String>,
    pub parallelism: Option<u32>,
    pub kind: NodeKind,
    pub outputs_factory: Box<dyn OutputFactory>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

/// How an edge spreads records over the consumer's subtasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioning {
    /// Forward if parallelisms match, rebalance otherwise (Flink's default).
    Default,
    /// Subtask `i` to subtask `i`; requires equal parallelism; chainable.
    Forward,
    /// Round-robin.
    Rebalance,
    /// Every record to every subtask.
    Broadcast,
    /// By key group of the record's key (`key_by`).
    KeyGroups,
}

/// Type-specific channel plumbing of an edge.
pub(crate) trait EdgeFactory {
    /// Channels for `senders × receivers` (or one per pair `i → i` when `forward`):
    /// per sender the `Vec<Outlet>` indexed by receiver, per receiver the `Vec<Inlet>`.
    fn channels(
        &self,
        senders: usize,
        receivers: usize,
        forward: bool,
        capacity: usize,
    ) -> (Vec<AnyBox>, Vec<AnyBox>);
    /// [`channels`](Self::channels) where some subtasks run on other workers: a channel
    /// whose two ends are both here is local, one with a single end here is that end of
    /// a remote channel (bounded like a local one of `capacity`), one with no end here is
    /// not made. Records crossing workers need a codec (`env.register_type`).
    #[cfg(feature = "cluster")]
    fn placed_channels(
        &self,
        wiring: &crate::runtime::placement::ChannelWiring<'_>,
        types: &TypeRegistry,
        forward: bool,
        capacity: usize,
    ) -> Result<(Vec<AnyBox>, Vec<AnyBox>)>;
    /// The writer at the tail of a sending subtask.
    fn writer(
        &self,
        senders: AnyBox,
        partitioning: Partitioning,
        subtask: u32,
        debloat: Option<crate::runtime::debloat::Debloat>,
    ) -> AnyBox;
    /// The record type the edge carries: an unaligned job must be able to encode it.
    fn record_type(&self) -> (TypeId, &'static str);
    /// What a restore does with channel state of this edge's record type saved with
    /// schema `old` (`savepoint check`, and the run's check before it starts): the type's
    /// schema now and the decision, or `None` when the type has no codec.
    fn decide_channel_state(
        &self,
        types: &TypeRegistry,
        old: &StateSchema,
    ) -> Option<(StateSchema, SchemaDecision)>;
    /// Wraps the writer of a sending subtask so that it announces checkpoint barriers on
    /// `lanes` (one per channel, in the writer's channel order) before it forwards them,
    /// and counts each consumer's read-ahead `credits` against its channel's capacity.
    fn announcing(
        &self,
        writer: AnyBox,
        lanes: Vec<Announce>,
        credits: Vec<Arc<AtomicUsize>>,
    ) -> AnyBox;
    /// Where a sending subtask over `senders` (what [`EdgeFactory::channels`] made for it)
    /// announces for each channel: its local lane in `lanes`, or, for a channel to
    /// another worker, the remote channel's priority frame (the local lane then has no
    /// reader).
    fn announcers(&self, senders: &AnyBox, lanes: Vec<LaneSender>) -> Vec<Announce>;
    /// Re-partitions the restored channel state of this keyed edge's receiving operator
    /// (`files`, taken at another parallelism) over `parallelism` subtasks by the key
    /// group of each record: element `i` is what new subtask `i` replays.
    fn reroute_keyed(
        &self,
        files: &[ChannelStateFile],
        types: &TypeRegistry,
        parallelism: u32,
        uid: &str,
    ) -> Result<Vec<Vec<ChannelStateFile>>>;
    /// The body of an input task reading `receivers` (from all its input edges): it first
    /// replays the restored channel state, then runs the aligned or the unaligned loop.
    fn input_task(
        &self,
        receivers: Vec<AnyBox>,
        chain: AnyBox,
        ctx: TaskContext,
        setup: InputSetup<'_>,
    ) -> Result<TaskBody>;
}

/// How an input task is started besides its channels: what it replays and, for unaligned
/// checkpoints, its priority lanes.
pub(crate) struct InputSetup<'a> {
    /// The record codecs of the job (`env.register_type`).
    pub types: &'a TypeRegistry,
    /// The restored channel state of this subtask, replayed before any new input.
    pub replay: Vec<ChannelStateFile>,
    /// The task's head operator (whose channel state `replay` is), for messages.
    pub uid: String,
    /// Unaligned checkpoints: the lanes and origins of the task's channels.
    pub unaligned: Option<UnalignedWiring>,
}

/// An input task's part of the unaligned wiring (docs/architecture.md §3).
pub(crate) struct UnalignedWiring {
    /// The task's head operator, whose folder holds its channel-state files.
    pub uid: String,
    /// The priority lane of each input channel, in channel order.
    pub lanes: Vec<LaneReceiver>,
    /// The input edge and sending subtask of each input channel.
    pub origins: Vec<ChannelOrigin>,
    /// Alignment allowed before a checkpoint switches to unaligned (zero: at once).
    pub aligned_timeout: Duration,
    /// Most events read ahead per channel ([`UnalignedInputs::read_ahead_limit`]).
    pub read_ahead_limit: usize,
    /// Per input channel, the events read ahead, shared with the channel's sender.
    pub credits: Vec<Arc<AtomicUsize>>,
}

/// Builds the key-group writer of a keyed edge: `(senders, max_parallelism)`.
pub(crate) type KeyedWriterBuilder<T> = Arc<dyn Fn(Vec<Outlet<T>>, u32) -> Box<dyn Output<T>>>;

pub(crate) struct TypedEdge<T> {
    pub keyed: Option<KeyedWriterBuilder<T>>,
    pub max_parallelism: u32,
}

impl<T: Data> EdgeFactory for TypedEdge<T> {
    fn channels(
        &self,
        senders: usize,
        receivers: usize,
        forward: bool,
        capacity: usize,
    ) -> (Vec<AnyBox>, Vec<AnyBox>) {
        let mut tx: Vec<Vec<Outlet<T>>> = (0..senders).map(|_| Vec::new()).collect();
        let mut rx: Vec<Vec<Inlet<T>>> = (0..receivers).map(|_| Vec::new()).collect();
        for (s, tx_s) in tx.iter_mut().enumerate() {
            for (r, rx_r) in rx.iter_mut().enumerate() {
                if forward && s != r {
                    continue;
                }
                let (t, v) = bounded(capacity);
                tx_s.push(t.into());
                rx_r.push(v.into());
            }
        }
        (
            tx.into_iter().map(|v| Box::new(v) as AnyBox).collect(),
            rx.into_iter().map(|v| Box::new(v) as AnyBox).collect(),
        )
    }

    #[cfg(feature = "cluster")]
    fn placed_channels(
        &self,
        wiring: &crate::runtime::placement::ChannelWiring<'_>,
        types: &TypeRegistry,
        forward: bool,
        capacity: usize,
    ) -> Result<(Vec<AnyBox>, Vec<AnyBox>)> {
        let crosses = wiring.senders.iter().any(|s| {
            wiring
                .receivers
                .iter()
                .any(|r| r != s && (wiring.exchange(*s).is_some() || wiring.exchange(*r).is_some()))
        });
        let codec = match types.codec::<T>() {
            Some(c) => Some(c),
            None if crosses => {
                return Err(Error::InvalidJob(format!(
                    "records of type {} cross from one worker to another but cannot be \
                     encoded: register the type with `env.register_type::<T>()`",
                    std::any::type_name::<T>()
                )))
            }
            None => None,
        };
        let bound = crate::runtime::exchange::ChannelBound::local(capacity);
        let (senders, receivers) = (wiring.senders.len(), wiring.receivers.len());
        let mut tx: Vec<Vec<Outlet<T>>> = (0..senders).map(|_| Vec::new()).collect();
        let mut rx: Vec<Vec<Inlet<T>>> = (0..receivers).map(|_| Vec::new()).collect();
        for (s, tx_s) in tx.iter_mut().enumerate() {
            for (r, rx_r) in rx.iter_mut().enumerate() {
                if forward && s != r {
                    continue;
                }
                let (ws, wr) = (wiring.senders[s], wiring.receivers[r]);
                let (here_s, here_r) = (wiring.exchange(ws), wiring.exchange(wr));
                if ws == wr {
                    if here_s.is_some() {
                        let (t, v) = bounded(capacity);
                        tx_s.push(t.into());
                        rx_r.push(v.into());
                    }
                    continue;
                }
                // Checked above: records that cross workers have a codec.
                let Some(codec) = codec.as_ref() else {
                    continue;
                };
                let id = wiring.channel(s, r);
                if let Some(x) = here_s {
                    tx_s.push(Outlet::Remote(x.output(wr, id, codec.clone())));
                }
                if let Some(x) = here_r {
                    let input = x
                        .input(ws, id, bound, codec.clone())
                        .map_err(|e| Error::PeerLost(e.to_string()))?;
                    rx_r.push(input.into());
                }
            }
        }
        Ok((
            tx.into_iter().map(|v| Box::new(v) as AnyBox).collect(),
            rx.into_iter().map(|v| Box::new(v) as AnyBox).collect(),
        ))
    }

    fn writer(
        &self,
        senders: AnyBox,
        partitioning: Partitioning,
        subtask: u32,
        debloat: Option<crate::runtime::debloat::Debloat>,
    ) -> AnyBox {
        let senders = *senders
            .downcast::<Vec<Outlet<T>>>()
            .expect("graph invariant: senders made by this edge");
        let mut w: Box<dyn Output<T>> = match (partitioning, &self.keyed) {
            (Partitioning::KeyGroups, Some(make)) => make(senders, self.max_parallelism),
            (Partitioning::Broadcast, _) => Box::new(BroadcastWriter::new(senders)),
            _ => Box::new(RoutedWriter::new(senders, Rebalance::new(subtask as usize))),
        };
        if let Some(d) = debloat {
            w.set_debloat(d);
        }
        Box::new(w)
    }

    fn reroute_keyed(
        &self,
        files: &[ChannelStateFile],
        types: &TypeRegistry,
        parallelism: u32,
        uid: &str,
    ) -> Result<Vec<Vec<ChannelStateFile>>> {
        let (Some(make), Some(codec)) = (&self.keyed, types.codec::<T>()) else {
            return Err(Error::Restore(format!(
                "channel state of records of type {} cannot be re-partitioned by key \
                 (no key or no codec); restore at the checkpoint's parallelism",
                std::any::type_name::<T>()
            )));
        };
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..parallelism)
            .map(|_| crossbeam_channel::unbounded::<Event<T>>())
            .unzip();
        let mut writer = make(
            txs.into_iter().map(Outlet::from).collect(),
            self.max_parallelism,
        );
        for f in files {
            let f = codec.adopt(f.clone(), uid)?;
            let what = format!(
                "channel state of subtask {} channel {}",
                f.subtask, f.channel
            );
            for b in &f.batches {
                let mut records = Vec::with_capacity(b.records as usize);
                codec.decode(&b.data, b.records as usize, &what, &mut records)?;
                if b.timestamped {
                    writer.push_timestamped(&mut records, &mut b.timestamps.clone())?;
                } else {
                    writer.push(&mut records)?;
                }
            }
        }
        writer.flush()?;
        drop(writer);
        let mut out = Vec::with_capacity(parallelism as usize);
        for (subtask, rx) in rxs.into_iter().enumerate() {
            let origins = vec![ChannelOrigin { edge: 0, sender: 0 }];
            let mut capture = ChannelCapture::new(codec.clone(), origins);
            for e in rx.try_iter() {
                capture.record_event(0, &e)?;
            }
            out.push(capture.take(subtask as u32));
        }
        Ok(out)
    }

    fn record_type(&self) -> (TypeId, &'static str) {
        (TypeId::of::<T>(), std::any::type_name::<T>())
    }

    fn decide_channel_state(
        &self,
        types: &TypeRegistry,
        old: &StateSchema,
    ) -> Option<(StateSchema, SchemaDecision)> {
        types.codec::<T>().map(|c| c.decide(old))
    }

    fn announcing(
        &self,
        writer: AnyBox,
        lanes: Vec<Announce>,
        credits: Vec<Arc<AtomicUsize>>,
    ) -> AnyBox {
        let mut inner = unbox_output::<T>(writer);
        inner.set_read_ahead_credits(credits);
        Box::new(Box::new(AnnouncingWriter::new(inner, lanes)) as Box<dyn Output<T>>)
    }

    fn announcers(&self, senders: &AnyBox, lanes: Vec<LaneSender>) -> Vec<Announce> {
        let outlets = senders
            .downcast_ref::<Vec<Outlet<T>>>()
            .expect("graph invariant: senders made by this edge");
        debug_assert_eq!(outlets.len(), lanes.len(), "a lane per channel");
        lanes
            .into_iter()
            .zip(outlets)
            .map(|(lane, outlet)| match outlet {
                Outlet::Local(_) => Announce::Local(lane),
                #[cfg(feature = "cluster")]
                Outlet::Remote(r) => Announce::Remote(r.announcer()),
            })
            .collect()
    }

    fn input_task(
        &self,
        receivers: Vec<AnyBox>,
        chain: AnyBox,
        ctx: TaskContext,
        setup: InputSetup<'_>,
    ) -> Result<TaskBody> {
        let inlets: Vec<Inlet<T>> = receivers
            .into_iter()
            .flat_map(|r| {
                *r.downcast::<Vec<Inlet<T>>>()
                    .expect("graph invariant: union inputs share one record type")
            })
            .collect();
        let (inputs, remotes) = Remotes::split(inlets);
        let mut setup = setup;
        if let Some(w) = setup.unaligned.as_mut() {
            // A remote channel's announcements arrive on its input's own lane (the local
            // lane made beside it has no sender here).
            for (c, lane) in w.lanes.iter_mut().enumerate() {
                if let Some(remote) = remotes.lane(c) {
                    *lane = remote;
                }
            }
        }
        let mut chain = unbox_output::<T>(chain);
        let needs_codec = setup.unaligned.is_some() || !setup.replay.is_empty();
        let codec = match setup.types.codec::<T>() {
            Some(c) => Some(c),
            None if needs_codec => {
                return Err(Error::InvalidJob(format!(
                    "records of type {} cross a network channel with channel state (unaligned \
                     checkpoints) but cannot be encoded: register the type with \
                     `env.register_type::<T>()`",
                    std::any::type_name::<T>()
                )))
            }
            None => None,
        };
        // The restored records are brought to the record type as it is now (or refused)
        // here, before any task runs.
        let replay = match &codec {
            Some(c) => setup
                .replay
                .into_iter()
                .map(|f| c.adopt(f, &setup.uid))
                .collect::<Result<Vec<_>>>()?,
            None => setup.replay,
        };
        let unaligned = setup.unaligned;
        Ok(Box::new(move || {
            match (unaligned, codec) {
                // Replayed from inside the loop, between barriers.
                (Some(w), Some(codec)) => {
                    let inputs = UnalignedInputs {
                        data: inputs,
                        lanes: w.lanes,
                        origins: w.origins,
                        codec,
                        aligned_timeout: w.aligned_timeout,
                        uid: w.uid,
                        read_ahead_limit: w.read_ahead_limit,
                        credits: w.credits,
                        restored: replay,
                        remotes,
                    };
                    run_input_unaligned(inputs, chain, ctx)
                }
                (_, codec) => {
                    if let Some(codec) = &codec {
                        replay_channel_state(&replay, codec.as_ref(), chain.as_mut(), &ctx)?;
                    }
                    drop(replay);
                    run_input_with(inputs, remotes, chain, ctx)
                }
            }
        }))
    }
}

/// One logical edge.
pub(crate) struct Edge {
    pub from: usize,
    pub to: usize,
    pub partitioning: Partitioning,
    pub factory: Box<dyn EdgeFactory>,
}

/// The whole logical graph.
#[derive(Default)]
pub(crate) struct JobGraph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    /// The record types whose records can be saved as channel state (`env.register_type`).
    pub types: TypeRegistry,
    /// Per keyed operator (by node), the probe that finds its declared states and their
    /// schemas before any task starts (issue 26, [`super::schema_check`]).
    pub schema_probes: Vec<(usize, super::schema_check::SchemaProbe)>,
    /// Per broadcast process operator (by node), the probe that decides its broadcast
    /// maps against a checkpoint for `savepoint check` ([`super::schema_check`]).
    pub broadcast_probes: Vec<(usize, super::schema_check::BroadcastProbe)>,
    /// Per operator whose function declares operator lists (by node), those lists: what
    /// `savepoint check` and a run decide them by ([`super::schema_check`]).
    pub operator_lists: Vec<(usize, Vec<crate::state::schema::OperatorListDeclaration>)>,
}
