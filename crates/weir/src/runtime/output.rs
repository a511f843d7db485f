//! The interface between chained operators, and the snapshot a task assembles at a barrier.
//!
//! The snapshot's types belong to the checkpoint layer ([`crate::checkpoint::snapshot`]),
//! which writes them; they are re-exported here, where operators fill them.
//!
//! A task's operator chain is a stack of [`Output`]s: each operator owns the `Output` of the
//! next one and calls it directly — chaining is a plain (per-batch) function call, never a
//! channel. The last `Output` in a chain is either a sink or a network writer.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use crossbeam_channel::Select;

use crate::error::Result;
use crate::runtime::event::CheckpointBarrier;
use crate::runtime::watermark::WatermarkStatus;

pub use crate::checkpoint::snapshot::{OperatorSnapshotPart, TaskSnapshot};

/// The receiving end of an operator (or of a chain of operators).
///
/// Calls arrive in stream order. Every method forwards to the next `Output` after doing
/// its own work, so one call at the chain's head reaches its tail.
pub trait Output<T>: Send {
    /// Processes a batch; the implementation drains `batch` (it stays allocated for reuse).
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()>;
    /// Processes a batch whose records carry event timestamps (`timestamps[i]` belongs to
    /// `batch[i]`); drains both. Operators keep the timestamps on what they emit: a record
    /// derived from an input record gets its timestamp (Flink's `TimestampedCollector`).
    fn push_timestamped(&mut self, batch: &mut Vec<T>, timestamps: &mut Vec<u64>) -> Result<()>;
    /// The watermark rose to `watermark`: fire event-time timers up to it, then forward it.
    fn on_watermark(&mut self, watermark: u64) -> Result<()>;
    /// The stream became idle or active again: forward it.
    fn on_watermark_status(&mut self, status: WatermarkStatus) -> Result<()>;
    /// A barrier passed: add this operator's state to `snapshot`, then forward the barrier.
    fn snapshot(&mut self, barrier: CheckpointBarrier, snapshot: &mut TaskSnapshot) -> Result<()>;
    /// The buffer timeout passed: send any partly filled network batch.
    fn flush(&mut self) -> Result<()>;
    /// Every input ended: emit what is held, flush, and forward end-of-input.
    fn end_of_input(&mut self) -> Result<()>;
    /// Checkpoint `id` is complete.
    fn notify_complete(&mut self, id: u64) -> Result<()>;
    /// Checkpoint `id` was aborted.
    fn notify_aborted(&mut self, id: u64) -> Result<()>;
    /// The processing time advanced to `now_ms` (called about once per buffer timeout):
    /// keyed operators fire due processing-time timers, watermark assigners emit their
    /// periodic watermark; every operator forwards it along the chain.
    fn on_processing_time(&mut self, now_ms: u64) -> Result<()>;
    /// (Network writers of unaligned jobs) per channel, the events its consumer has read
    /// ahead and not processed yet. They count against the channel's capacity (credit),
    /// so reading ahead for a checkpoint does not let this writer run further ahead of a
    /// slow consumer. Other outputs ignore it.
    fn set_read_ahead_credits(&mut self, _credits: Vec<Arc<AtomicUsize>>) {}
    /// (Network writers) sizes batches by buffer debloating
    /// ([`crate::runtime::debloat`]), so a barrier waits behind about `d.target` of records
    /// on a backpressured channel. Other outputs ignore it.
    fn set_debloat(&mut self, _d: crate::runtime::debloat::Debloat) {}
    /// How many records a source should poll before its next push: [`BATCH_SIZE`](crate::runtime::BATCH_SIZE),
    /// or about one debloated batch per channel while a network writer down the chain cuts
    /// its batches ([`crate::runtime::debloat`]) — a barrier is injected only between two
    /// polls, so a full-size poll would hold it behind that many records.
    fn batch_hint(&self) -> usize {
        crate::runtime::BATCH_SIZE
    }
    /// (Network writers of unaligned jobs) whether every channel has room for one more
    /// batch under its credit. A source of an unaligned job polls only then: a batch it
    /// produced without room would block, be deferred when a barrier is requested and go
    /// out with the barrier's flush past the credit — about one batch per channel and
    /// checkpoint beyond flow control, which piles up in the consumer's read-ahead queue
    /// until the marker waits behind it (BENCHMARKS.md, W3). Other outputs: always.
    fn has_room(&self) -> bool {
        true
    }
    /// (Network writers of unaligned jobs) adds to `sel` a send on each channel that is
    /// full (for a channel to another worker, the watch of its permits), so that a source
    /// waiting for room ([`Output::has_room`]) wakes the moment a consumer takes an event —
    /// as a blocked send would — instead of waking on a timer (polling cost unaligned W1 a
    /// fifth of its throughput on two cores: BENCHMARKS.md).
    /// Returns whether every channel short of room is watched: a channel short only of
    /// credit (its consumer holds events read ahead, whose processing frees no slot)
    /// cannot wake a select, and the caller must look again after a moment. Other
    /// outputs always have room: nothing to watch.
    fn watch_room<'a>(&'a self, _sel: &mut Select<'a>) -> bool {
        true
    }
}

/// [`Output::has_room`] and [`Output::watch_room`] for operators that forward to
/// `self.next`: the room is the next output's.
macro_rules! forward_room {
    () => {
        fn has_room(&self) -> bool {
            self.next.has_room()
        }
        fn watch_room<'a>(&'a self, sel: &mut crossbeam_channel::Select<'a>) -> bool {
            self.next.watch_room(sel)
        }
        fn batch_hint(&self) -> usize {
            self.next.batch_hint()
        }
    };
}
pub(crate) use forward_room;

/// Discards everything: the output of an operator nobody consumes.
pub struct NoOutput;

impl<T: Send> Output<T> for NoOutput {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        batch.clear();
        Ok(())
    }
    fn push_timestamped(&mut self, batch: &mut Vec<T>, timestamps: &mut Vec<u64>) -> Result<()> {
        batch.clear();
        timestamps.clear();
        Ok(())
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
    fn snapshot(&mut self, _: CheckpointBarrier, _: &mut TaskSnapshot) -> Result<()> {
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<()> {
        Ok(())
    }
    fn notify_complete(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
    fn notify_aborted(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
}

/// Sends every batch to several outputs (a stream consumed by more than one operator).
pub struct FanOut<T> {
    /// The consumers; all but the last receive clones.
    pub outputs: Vec<Box<dyn Output<T>>>,
    scratch: Vec<T>,
    scratch_timestamps: Vec<u64>,
}

impl<T> FanOut<T> {
    /// A fan-out to `outputs`.
    pub fn new(outputs: Vec<Box<dyn Output<T>>>) -> Self {
        FanOut {
            outputs,
            scratch: Vec::new(),
            scratch_timestamps: Vec::new(),
        }
    }
}

impl<T: Clone + Send> Output<T> for FanOut<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        let n = self.outputs.len();
        for (i, o) in self.outputs.iter_mut().enumerate() {
            if i + 1 == n {
                o.push(batch)?;
            } else {
                self.scratch.extend(batch.iter().cloned());
                o.push(&mut self.scratch)?;
            }
        }
        Ok(())
    }
    fn push_timestamped(&mut self, batch: &mut Vec<T>, timestamps: &mut Vec<u64>) -> Result<()> {
        let n = self.outputs.len();
        for (i, o) in self.outputs.iter_mut().enumerate() {
            if i + 1 == n {
                o.push_timestamped(batch, timestamps)?;
            } else {
                self.scratch.extend(batch.iter().cloned());
                self.scratch_timestamps.extend_from_slice(timestamps);
                o.push_timestamped(&mut self.scratch, &mut self.scratch_timestamps)?;
            }
        }
        Ok(())
    }
    fn on_watermark(&mut self, watermark: u64) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.on_watermark(watermark))
    }
    fn on_watermark_status(&mut self, status: WatermarkStatus) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.on_watermark_status(status))
    }
    fn on_processing_time(&mut self, now_ms: u64) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.on_processing_time(now_ms))
    }
    fn snapshot(&mut self, b: CheckpointBarrier, s: &mut TaskSnapshot) -> Result<()> {
        self.outputs.iter_mut().try_for_each(|o| o.snapshot(b, s))
    }
    fn flush(&mut self) -> Result<()> {
        self.outputs.iter_mut().try_for_each(|o| o.flush())
    }
    fn end_of_input(&mut self) -> Result<()> {
        self.outputs.iter_mut().try_for_each(|o| o.end_of_input())
    }
    fn notify_complete(&mut self, id: u64) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.notify_complete(id))
    }
    fn notify_aborted(&mut self, id: u64) -> Result<()> {
        self.outputs
            .iter_mut()
            .try_for_each(|o| o.notify_aborted(id))
    }
    fn has_room(&self) -> bool {
        self.outputs.iter().all(|o| o.has_room())
    }
    fn batch_hint(&self) -> usize {
        let hints = self.outputs.iter().map(|o| o.batch_hint());
        hints.min().unwrap_or(crate::runtime::BATCH_SIZE)
    }
    fn watch_room<'a>(&'a self, sel: &mut Select<'a>) -> bool {
        // Every output registers its full channels: no short circuit.
        let mut watched = true;
        for o in &self.outputs {
            watched &= o.watch_room(sel);
        }
        watched
    }
}
