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

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::error::Result;
use crate::runtime::event::Event;
use crate::runtime::network::{BroadcastWriter, Rebalance, RoutedWriter};
use crate::runtime::operator_metrics::{LinkHandle, Metered};
use crate::runtime::operators::OperatorContext;
use crate::runtime::output::{FanOut, NoOutput, Output};
use crate::runtime::task::{run_input, TaskContext};
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
    /// per sender the `Vec<Sender>` indexed by receiver, per receiver the `Vec<Receiver>`.
    fn channels(
        &self,
        senders: usize,
        receivers: usize,
        forward: bool,
        capacity: usize,
    ) -> (Vec<AnyBox>, Vec<AnyBox>);
    /// The writer at the tail of a sending subtask.
    fn writer(&self, senders: AnyBox, partitioning: Partitioning, subtask: u32) -> AnyBox;
    /// The body of an input task reading `receivers` (from all its input edges).
    fn input_task(&self, receivers: Vec<AnyBox>, chain: AnyBox, ctx: TaskContext) -> TaskBody;
}

/// Builds the key-group writer of a keyed edge: `(senders, max_parallelism)`.
pub(crate) type KeyedWriterBuilder<T> =
    Arc<dyn Fn(Vec<Sender<Event<T>>>, u32) -> Box<dyn Output<T>>>;

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
        let mut tx: Vec<Vec<Sender<Event<T>>>> = (0..senders).map(|_| Vec::new()).collect();
        let mut rx: Vec<Vec<Receiver<Event<T>>>> = (0..receivers).map(|_| Vec::new()).collect();
        for (s, tx_s) in tx.iter_mut().enumerate() {
            for (r, rx_r) in rx.iter_mut().enumerate() {
                if forward && s != r {
                    continue;
                }
                let (t, v) = bounded(capacity);
                tx_s.push(t);
                rx_r.push(v);
            }
        }
        (
            tx.into_iter().map(|v| Box::new(v) as AnyBox).collect(),
            rx.into_iter().map(|v| Box::new(v) as AnyBox).collect(),
        )
    }

    fn writer(&self, senders: AnyBox, partitioning: Partitioning, subtask: u32) -> AnyBox {
        let senders = *senders
            .downcast::<Vec<Sender<Event<T>>>>()
            .expect("graph invariant: senders made by this edge");
        let w: Box<dyn Output<T>> = match (partitioning, &self.keyed) {
            (Partitioning::KeyGroups, Some(make)) => make(senders, self.max_parallelism),
            (Partitioning::Broadcast, _) => Box::new(BroadcastWriter::new(senders)),
            _ => Box::new(RoutedWriter::new(senders, Rebalance::new(subtask as usize))),
        };
        Box::new(w)
    }

    fn input_task(&self, receivers: Vec<AnyBox>, chain: AnyBox, ctx: TaskContext) -> TaskBody {
        let inputs: Vec<Receiver<Event<T>>> = receivers
            .into_iter()
            .flat_map(|r| {
                *r.downcast::<Vec<Receiver<Event<T>>>>()
                    .expect("graph invariant: union inputs share one record type")
            })
            .collect();
        let chain = unbox_output::<T>(chain);
        Box::new(move || run_input(inputs, chain, ctx))
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
}
