//! The built-in operators that make up a chain: stateless transforms, process functions
//! (operator state), keyed process functions (keyed state) and sinks.
//!
//! Each works a batch at a time: one virtual call per batch per operator, then a tight loop
//! over the records — no boxing or dynamic dispatch per record.

use crate::error::Result;
use crate::runtime::event::CheckpointBarrier;
use crate::runtime::functions::{
    BroadcastProcessFunction, CheckpointedFunction, Collector, ProcessFunction, SinkFunction,
};
use crate::runtime::output::{OperatorSnapshotPart, Output, TaskSnapshot};
use crate::runtime::watermark::WatermarkStatus;
use crate::state::broadcast::{
    BroadcastContext, BroadcastStateStore, BroadcastStore, ReadOnlyBroadcastContext,
};
use crate::state::keyed::{ChainFile, RestoredKeyedState, StateBackendKind};
use crate::state::operator::{AssignedLists, InitContext, OperatorIdentity, SnapshotContext};

mod keyed;
pub use keyed::KeyedProcessOp;

/// Everything an operator instance needs to know about where it runs and what it restores.
pub struct OperatorContext {
    /// The operator's stable uid (the key of its state in checkpoints).
    pub uid: String,
    /// This subtask's index.
    pub subtask: u32,
    /// The operator's parallelism.
    pub parallelism: u32,
    /// The job's max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// Whether the job restores from a checkpoint.
    pub restored: bool,
    /// Operator state lists assigned to this subtask.
    pub operator_state: AssignedLists,
    /// Keyed state sections for this subtask's key groups.
    pub keyed_state: RestoredKeyedState,
    /// This subtask's own chain of an incremental checkpoint it restores (same key groups,
    /// this job's folder), which its backend continues instead of starting a new base.
    pub(crate) restored_chain: Option<Vec<ChainFile>>,
    /// The job's name.
    pub job_name: String,
    /// Where a keyed operator keeps this subtask's keyed state.
    pub(crate) state_backend: StateBackendKind,
}

impl OperatorContext {
    /// Hands the restored operator state to a function's `initialize_state`.
    pub(crate) fn init_function<F: CheckpointedFunction>(&mut self, f: &mut F) -> Result<()> {
        let ctx = InitContext::new(
            self.restored,
            self.subtask,
            self.parallelism,
            std::mem::take(&mut self.operator_state),
        )
        .with_identity(OperatorIdentity {
            job_name: self.job_name.clone(),
            uid: self.uid.clone(),
        });
        f.initialize_state(&ctx)
    }
}

/// Takes a function's operator-state snapshot into `snapshot` (if it stored anything).
pub(crate) fn snapshot_function<F: CheckpointedFunction>(
    f: &mut F,
    uid: &str,
    barrier: CheckpointBarrier,
    snapshot: &mut TaskSnapshot,
) -> Result<()> {
    let mut ctx = SnapshotContext::new(barrier.id);
    f.snapshot_state(&mut ctx)?;
    if !ctx.lists.is_empty() {
        snapshot.parts.push(OperatorSnapshotPart {
            uid: uid.to_string(),
            operator_state: ctx.lists,
            keyed: None,
        });
    }
    Ok(())
}

/// Forwards watermarks, watermark status and processing time to `self.next`: operators
/// without timers.
macro_rules! forward_time {
    () => {
        fn on_watermark(&mut self, watermark: u64) -> Result<()> {
            self.next.on_watermark(watermark)
        }
        fn on_watermark_status(&mut self, status: WatermarkStatus) -> Result<()> {
            self.next.on_watermark_status(status)
        }
        fn on_processing_time(&mut self, now_ms: u64) -> Result<()> {
            self.next.on_processing_time(now_ms)
        }
    };
}

/// Forwards the control methods of [`Output`] to `self.next`, for stateless operators.
macro_rules! forward_control {
    () => {
        forward_time!();
        fn snapshot(&mut self, b: CheckpointBarrier, s: &mut TaskSnapshot) -> Result<()> {
            self.next.snapshot(b, s)
        }
        fn flush(&mut self) -> Result<()> {
            self.next.flush()
        }
        fn end_of_input(&mut self) -> Result<()> {
            self.next.end_of_input()
        }
        fn notify_complete(&mut self, id: u64) -> Result<()> {
            self.next.notify_complete(id)
        }
        fn notify_aborted(&mut self, id: u64) -> Result<()> {
            self.next.notify_aborted(id)
        }
        crate::runtime::output::forward_room!();
    };
}

/// `flush` and the checkpoint notifications of [`Output`] for operators that run a user
/// function `self.f`: the function hears the notification first, then the rest of the chain.
macro_rules! function_notifications {
    () => {
        fn flush(&mut self) -> Result<()> {
            self.next.flush()
        }
        fn notify_complete(&mut self, id: u64) -> Result<()> {
            self.f.notify_checkpoint_complete(id)?;
            self.next.notify_complete(id)
        }
        fn notify_aborted(&mut self, id: u64) -> Result<()> {
            self.f.notify_checkpoint_aborted(id)?;
            self.next.notify_aborted(id)
        }
        crate::runtime::output::forward_room!();
    };
}

/// `map`: one record in, one out.
pub struct MapOp<O, F> {
    pub(crate) f: F,
    pub(crate) out: Vec<O>,
    pub(crate) next: Box<dyn Output<O>>,
}

impl<O, F> MapOp<O, F> {
    /// Maps a batch into `self.out` (one call site of `f` for both kinds of batch).
    fn map_batch<I>(&mut self, batch: &mut Vec<I>)
    where
        F: FnMut(I) -> O,
    {
        self.out.extend(batch.drain(..).map(&mut self.f));
    }
}

impl<I, O: Send, F: FnMut(I) -> O + Send> Output<I> for MapOp<O, F> {
    fn push(&mut self, batch: &mut Vec<I>) -> Result<()> {
        self.map_batch(batch);
        self.next.push(&mut self.out)
    }
    fn push_timestamped(&mut self, batch: &mut Vec<I>, timestamps: &mut Vec<u64>) -> Result<()> {
        // One record out per record in: the timestamps stay as they are.
        self.map_batch(batch);
        self.next.push_timestamped(&mut self.out, timestamps)
    }
    forward_control!();
}

/// `filter`: keeps the records the predicate accepts, in place.
pub struct FilterOp<T, F> {
    pub(crate) f: F,
    pub(crate) next: Box<dyn Output<T>>,
}

impl<T: Send, F: FnMut(&T) -> bool + Send> Output<T> for FilterOp<T, F> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        batch.retain(|r| (self.f)(r));
        if batch.is_empty() {
            return Ok(());
        }
        self.next.push(batch)
    }
    fn push_timestamped(&mut self, batch: &mut Vec<T>, timestamps: &mut Vec<u64>) -> Result<()> {
        // Compacts records and timestamps in step.
        let mut kept = 0;
        for i in 0..batch.len() {
            if (self.f)(&batch[i]) {
                batch.swap(kept, i);
                timestamps[kept] = timestamps[i];
                kept += 1;
            }
        }
        batch.truncate(kept);
        timestamps.truncate(kept);
        if batch.is_empty() {
            return Ok(());
        }
        self.next.push_timestamped(batch, timestamps)
    }
    forward_control!();
}

/// `flat_map`: each record becomes any number of records.
pub struct FlatMapOp<O, F> {
    pub(crate) f: F,
    pub(crate) out: Vec<O>,
    pub(crate) out_timestamps: Vec<u64>,
    pub(crate) next: Box<dyn Output<O>>,
}

impl<O: Send, F> FlatMapOp<O, F> {
    /// The one loop over a batch, with or without timestamps (one call site of `f`: see
    /// docs/design-notes.md, Event time).
    fn batch<I, It>(&mut self, batch: &mut Vec<I>, timestamps: Option<&mut Vec<u64>>) -> Result<()>
    where
        It: IntoIterator<Item = O>,
        F: FnMut(I) -> It,
    {
        let timestamped = timestamps.is_some();
        let stamps: &[u64] = timestamps.as_deref().map_or(&[], Vec::as_slice);
        for (i, r) in batch.drain(..).enumerate() {
            self.out.extend((self.f)(r));
            if timestamped {
                self.out_timestamps.resize(self.out.len(), stamps[i]);
            }
        }
        if let Some(t) = timestamps {
            t.clear();
        }
        emit(
            &mut self.out,
            &mut self.out_timestamps,
            timestamped,
            &mut *self.next,
        )
    }
}

/// Pushes what an operator emitted on, with timestamps if `timestamped`.
fn emit<O>(
    out: &mut Vec<O>,
    out_timestamps: &mut Vec<u64>,
    timestamped: bool,
    next: &mut dyn Output<O>,
) -> Result<()> {
    if out.is_empty() {
        Ok(())
    } else if timestamped {
        next.push_timestamped(out, out_timestamps)
    } else {
        next.push(out)
    }
}

impl<I, O: Send, It: IntoIterator<Item = O>, F: FnMut(I) -> It + Send> Output<I>
    for FlatMapOp<O, F>
{
    fn push(&mut self, batch: &mut Vec<I>) -> Result<()> {
        self.batch(batch, None)
    }
    fn push_timestamped(&mut self, batch: &mut Vec<I>, timestamps: &mut Vec<u64>) -> Result<()> {
        self.batch(batch, Some(timestamps))
    }
    forward_control!();
}

/// A [`ProcessFunction`] with operator state.
pub struct ProcessOp<O, F> {
    pub(crate) uid: String,
    pub(crate) f: F,
    pub(crate) out: Vec<O>,
    pub(crate) out_timestamps: Vec<u64>,
    pub(crate) next: Box<dyn Output<O>>,
}

impl<O: Send, F> ProcessOp<O, F> {
    /// The one loop over a batch, with or without timestamps (one call site of `process`:
    /// see docs/design-notes.md, Event time).
    fn batch<I>(&mut self, batch: &mut Vec<I>, timestamps: Option<&mut Vec<u64>>) -> Result<()>
    where
        F: ProcessFunction<I, O>,
    {
        let timestamped = timestamps.is_some();
        let stamps: &[u64] = timestamps.as_deref().map_or(&[], Vec::as_slice);
        for (i, r) in batch.drain(..).enumerate() {
            self.f.process(r, &mut Collector::new(&mut self.out))?;
            if timestamped {
                self.out_timestamps.resize(self.out.len(), stamps[i]);
            }
        }
        if let Some(t) = timestamps {
            t.clear();
        }
        emit(
            &mut self.out,
            &mut self.out_timestamps,
            timestamped,
            &mut *self.next,
        )
    }
}

impl<I, O: Send, F: ProcessFunction<I, O>> Output<I> for ProcessOp<O, F> {
    fn push(&mut self, batch: &mut Vec<I>) -> Result<()> {
        self.batch(batch, None)
    }
    fn push_timestamped(&mut self, batch: &mut Vec<I>, timestamps: &mut Vec<u64>) -> Result<()> {
        self.batch(batch, Some(timestamps))
    }
    forward_time!();
    fn snapshot(&mut self, b: CheckpointBarrier, s: &mut TaskSnapshot) -> Result<()> {
        snapshot_function(&mut self.f, &self.uid, b, s)?;
        self.next.snapshot(b, s)
    }
    fn end_of_input(&mut self) -> Result<()> {
        self.f.on_end_of_input(&mut Collector::new(&mut self.out))?;
        if !self.out.is_empty() {
            self.next.push(&mut self.out)?;
        }
        self.next.end_of_input()
    }
    function_notifications!();
}

/// A [`SinkFunction`]: the end of a chain.
pub struct SinkOp<F> {
    pub(crate) uid: String,
    pub(crate) f: F,
}

impl<T, F: SinkFunction<T>> Output<T> for SinkOp<F> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        self.f.invoke(batch)?;
        batch.clear();
        Ok(())
    }
    fn push_timestamped(&mut self, batch: &mut Vec<T>, timestamps: &mut Vec<u64>) -> Result<()> {
        timestamps.clear();
        self.push(batch)
    }
    fn on_watermark(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
    fn on_watermark_status(&mut self, _: WatermarkStatus) -> Result<()> {
        Ok(())
    }
    fn on_processing_time(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
    fn snapshot(&mut self, b: CheckpointBarrier, s: &mut TaskSnapshot) -> Result<()> {
        snapshot_function(&mut self.f, &self.uid, b, s)
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<()> {
        self.f.finish()
    }
    fn notify_complete(&mut self, id: u64) -> Result<()> {
        self.f.notify_checkpoint_complete(id)
    }
    fn notify_aborted(&mut self, id: u64) -> Result<()> {
        self.f.notify_checkpoint_aborted(id)
    }
}

/// An element of a broadcast-connected stream: from the main input or the broadcast input.
#[derive(Clone, Debug)]
pub(crate) enum Connected<I, B> {
    Main(I),
    Broadcast(B),
}

/// A [`BroadcastProcessFunction`] with its broadcast state.
pub struct BroadcastProcessOp<O, F> {
    uid: String,
    f: F,
    store: BroadcastStore,
    out: Vec<O>,
    out_timestamps: Vec<u64>,
    next: Box<dyn Output<O>>,
}

impl<O, F> BroadcastProcessOp<O, F> {
    /// Builds the operator: restores operator state, then broadcast state, then `open`.
    pub(crate) fn new<I, B>(
        mut f: F,
        mut ctx: OperatorContext,
        next: Box<dyn Output<O>>,
    ) -> Result<Self>
    where
        F: BroadcastProcessFunction<I, B, O>,
    {
        let lists = ctx.operator_state.clone();
        ctx.init_function(&mut f)?;
        let mut store = BroadcastStore::new(&ctx.uid, lists);
        f.open(&mut BroadcastStateStore { store: &mut store })?;
        Ok(BroadcastProcessOp {
            uid: ctx.uid,
            f,
            store,
            out: Vec::new(),
            out_timestamps: Vec::new(),
            next,
        })
    }
}

impl<O, F> BroadcastProcessOp<O, F> {
    /// The one loop over a batch, with or without timestamps (one call site of the
    /// function: see docs/design-notes.md, Event time).
    fn batch<I, B>(
        &mut self,
        batch: &mut Vec<Connected<I, B>>,
        timestamps: Option<&mut Vec<u64>>,
    ) -> Result<()>
    where
        F: BroadcastProcessFunction<I, B, O>,
        O: Send,
    {
        let timestamped = timestamps.is_some();
        let stamps: &[u64] = timestamps.as_deref().map_or(&[], Vec::as_slice);
        for (i, r) in batch.drain(..).enumerate() {
            self.element(r)?;
            if timestamped {
                self.out_timestamps.resize(self.out.len(), stamps[i]);
            }
        }
        if let Some(t) = timestamps {
            t.clear();
        }
        emit(
            &mut self.out,
            &mut self.out_timestamps,
            timestamped,
            &mut *self.next,
        )
    }

    /// Hands one element to the function.
    fn element<I, B>(&mut self, r: Connected<I, B>) -> Result<()>
    where
        F: BroadcastProcessFunction<I, B, O>,
    {
        let mut out = Collector::new(&mut self.out);
        match r {
            Connected::Main(i) => {
                let ctx = ReadOnlyBroadcastContext { store: &self.store };
                self.f.process_element(i, &ctx, &mut out)
            }
            Connected::Broadcast(b) => {
                let mut ctx = BroadcastContext {
                    store: &mut self.store,
                };
                self.f.process_broadcast_element(b, &mut ctx, &mut out)
            }
        }
    }
}

impl<I, B, O: Send, F: BroadcastProcessFunction<I, B, O>> Output<Connected<I, B>>
    for BroadcastProcessOp<O, F>
{
    fn push(&mut self, batch: &mut Vec<Connected<I, B>>) -> Result<()> {
        self.batch(batch, None)
    }
    fn push_timestamped(
        &mut self,
        batch: &mut Vec<Connected<I, B>>,
        timestamps: &mut Vec<u64>,
    ) -> Result<()> {
        self.batch(batch, Some(timestamps))
    }
    forward_time!();
    fn snapshot(&mut self, b: CheckpointBarrier, s: &mut TaskSnapshot) -> Result<()> {
        let mut ctx = SnapshotContext::new(b.id);
        self.f.snapshot_state(&mut ctx)?;
        self.store.snapshot(&mut ctx.lists)?;
        s.parts.push(OperatorSnapshotPart {
            uid: self.uid.clone(),
            operator_state: ctx.lists,
            keyed: None,
        });
        self.next.snapshot(b, s)
    }
    fn end_of_input(&mut self) -> Result<()> {
        let ctx = ReadOnlyBroadcastContext { store: &self.store };
        self.f
            .on_end_of_input(&ctx, &mut Collector::new(&mut self.out))?;
        if !self.out.is_empty() {
            self.next.push(&mut self.out)?;
        }
        self.next.end_of_input()
    }
    function_notifications!();
}
