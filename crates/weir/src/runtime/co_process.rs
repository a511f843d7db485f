//! Two-input functions (Flink's `CoProcessFunction` and `KeyedCoProcessFunction`) and how
//! they run on the engine's one-input operators.
//!
//! A connected stream is the union of its two inputs, each record tagged with the input it
//! came from ([`CoInput`]). The union is a real multi-input task: every channel of both
//! inputs takes part in barrier alignment and in the watermark minimum
//! (docs/architecture.md §2, §3, §6a), and records cross the channels with their
//! timestamps. The two-input function then runs behind an adapter on the existing
//! process and keyed-process operators, so keyed state, timers, checkpoints and rescaling
//! are exactly those of a keyed stream, shared by both inputs per key. The tagging costs
//! one map per record on the two connected inputs only; single-input streams are untouched.

use std::marker::PhantomData;

use crate::error::Result;
use crate::runtime::functions::{
    CheckpointedFunction, Collector, KeyedProcessFunction, ProcessFunction,
};
use crate::state::keyed::{KeyedContext, KeyedEndContext, KeyedStateStore};
use crate::state::operator::{InitContext, SnapshotContext};
use crate::state::Key;

/// A record of either input of a connected stream, tagged with its input on the way to the
/// two-input operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoInput<I1, I2> {
    /// A record of the first input (the stream `connect` was called on).
    First(I1),
    /// A record of the second input (the argument of `connect`).
    Second(I2),
}

/// A function over two inputs of different types (Flink's `CoProcessFunction`): each
/// record of the first input goes to `process_element1`, each of the second to
/// `process_element2`, on the same instance, so the two can share the function's operator
/// state. The order between the inputs is the order of arrival, which is not deterministic.
pub trait CoProcessFunction<I1, I2, O>: CheckpointedFunction + Clone + Send + 'static {
    /// Handles one record of the first input.
    fn process_element1(&mut self, record: I1, out: &mut Collector<'_, O>) -> Result<()>;
    /// Handles one record of the second input.
    fn process_element2(&mut self, record: I2, out: &mut Collector<'_, O>) -> Result<()>;
    /// Both inputs have ended; emit anything still held.
    fn on_end_of_input(&mut self, _out: &mut Collector<'_, O>) -> Result<()> {
        Ok(())
    }
}

/// A function over two inputs keyed alike (Flink's `KeyedCoProcessFunction`): records of
/// both inputs with equal keys reach the same instance with the same keyed state and
/// timers, so one input can wait for the other (joins, enrichment, matching).
pub trait KeyedCoProcessFunction<K: Key, I1, I2, O>:
    CheckpointedFunction + Clone + Send + 'static
{
    /// Declares the keyed states (once per attempt, after `initialize_state`); both inputs
    /// see the same states.
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> Result<()>;
    /// Handles one record of the first input; `ctx` is scoped to its key.
    fn process_element1(
        &mut self,
        record: I1,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<()>;
    /// Handles one record of the second input; `ctx` is scoped to its key.
    fn process_element2(
        &mut self,
        record: I2,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<()>;
    /// A processing-time or event-time timer registered by either input is due; see
    /// [`KeyedProcessFunction::on_timer`].
    fn on_timer(
        &mut self,
        _timestamp_ms: u64,
        _ctx: &mut KeyedContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<()> {
        Ok(())
    }
    /// Both inputs have ended; `ctx` reaches every key of this subtask (see
    /// [`KeyedProcessFunction::on_end_of_input`]).
    fn on_end_of_input(
        &mut self,
        _ctx: &mut KeyedEndContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<()> {
        Ok(())
    }
}

/// Runs a two-input function as a one-input function over [`CoInput`]: the operators,
/// state and checkpoints of one-input streams serve both inputs.
pub struct CoAdapter<F, I1, I2> {
    f: F,
    _inputs: PhantomData<fn() -> (I1, I2)>,
}

impl<F, I1, I2> CoAdapter<F, I1, I2> {
    /// Wraps the two-input function `f`.
    pub fn new(f: F) -> Self {
        CoAdapter {
            f,
            _inputs: PhantomData,
        }
    }
}

impl<F: Clone, I1, I2> Clone for CoAdapter<F, I1, I2> {
    fn clone(&self) -> Self {
        CoAdapter::new(self.f.clone())
    }
}

impl<F: CheckpointedFunction, I1, I2> CheckpointedFunction for CoAdapter<F, I1, I2> {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.f.initialize_state(ctx)
    }
    fn operator_state(&self) -> Vec<crate::state::schema::OperatorListDeclaration> {
        self.f.operator_state()
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        self.f.snapshot_state(ctx)
    }
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.f.notify_checkpoint_complete(checkpoint_id)
    }
    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<()> {
        self.f.notify_checkpoint_aborted(checkpoint_id)
    }
}

impl<I1, I2, O, F> ProcessFunction<CoInput<I1, I2>, O> for CoAdapter<F, I1, I2>
where
    I1: 'static,
    I2: 'static,
    F: CoProcessFunction<I1, I2, O>,
{
    fn process(&mut self, record: CoInput<I1, I2>, out: &mut Collector<'_, O>) -> Result<()> {
        match record {
            CoInput::First(r) => self.f.process_element1(r, out),
            CoInput::Second(r) => self.f.process_element2(r, out),
        }
    }
    fn on_end_of_input(&mut self, out: &mut Collector<'_, O>) -> Result<()> {
        self.f.on_end_of_input(out)
    }
}

impl<K, I1, I2, O, F> KeyedProcessFunction<K, CoInput<I1, I2>, O> for CoAdapter<F, I1, I2>
where
    K: Key,
    I1: 'static,
    I2: 'static,
    F: KeyedCoProcessFunction<K, I1, I2, O>,
{
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> Result<()> {
        self.f.open(states)
    }
    fn process(
        &mut self,
        record: CoInput<I1, I2>,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<()> {
        match record {
            CoInput::First(r) => self.f.process_element1(r, ctx, out),
            CoInput::Second(r) => self.f.process_element2(r, ctx, out),
        }
    }
    fn on_timer(
        &mut self,
        timestamp_ms: u64,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<()> {
        self.f.on_timer(timestamp_ms, ctx, out)
    }
    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<()> {
        self.f.on_end_of_input(ctx, out)
    }
}
