//! The loops a task thread runs: a source task (polls a source, injects barriers) and an
//! input task (reads channels, aligns barriers). Both push batches through the task's
//! operator chain and hand snapshots to the asynchronous writer.
//!
//! Invariants:
//! * A source injects a barrier only between two `poll` calls, after pushing everything it
//!   polled before — so the barrier cuts its output exactly at its checkpointed position.
//! * An input task never reads a channel its [`BarrierHandler`] blocks.
//! * Control messages (checkpoint complete/aborted, cancel) are handled between batches, on
//!   the task thread: user hooks never run concurrently with processing.
//! * A task exits only when [`Finishing`] says its end is committed and (input tasks) every
//!   input channel has closed. A channel may close only after end-of-input or a stopping
//!   barrier; any other disconnection means the upstream task failed.
//!
//! Modules: [`source`] runs a source task, [`input`] an input task (and the control
//! messages it handles between batches), [`unaligned`] an input task with unaligned
//! checkpoints, [`replay`] replays restored channel state; this file holds what both share: the messages
//! to and from the executor, the counters and the [`TaskContext`].

mod input;
mod replay;
mod source;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
mod unaligned;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::checkpoint::writer::{SnapshotJob, SnapshotPayload};
use crate::error::Error;
use crate::runtime::alignment::CheckpointingMode;
use crate::runtime::event::CheckpointBarrier;
use crate::runtime::fault::FailureInjector;
use crate::runtime::output::TaskSnapshot;

#[cfg(test)]
pub use input::run_input;
pub(crate) use input::run_input_with;
pub use replay::replay_channel_state;
pub use source::{run_source, run_source_paused_by};
pub use unaligned::{run_input_unaligned, UnalignedInputs};

use input::{on_control, ChannelState};

/// Messages from the executor to a task.
#[derive(Debug, Clone, Copy)]
pub enum Control {
    /// (Sources only) inject this barrier now.
    Trigger(CheckpointBarrier),
    /// The checkpoint completed.
    Complete(u64),
    /// The checkpoint was aborted.
    Aborted(u64),
    /// Stop now: the attempt is being torn down.
    Cancel,
}

/// Messages from a task (or its snapshot writer) to the executor.
#[derive(Debug)]
pub enum TaskEvent {
    /// The task's state for `checkpoint` is written.
    Ack {
        /// Attempt number.
        attempt: u32,
        /// Task index.
        task: usize,
        /// Checkpoint id.
        checkpoint: u64,
        /// Files and statistics.
        ack: crate::checkpoint::writer::TaskAck,
    },
    /// The task could not take or write its snapshot.
    Decline {
        /// Attempt number.
        attempt: u32,
        /// Checkpoint id.
        checkpoint: u64,
        /// Why.
        reason: String,
    },
    /// A source task's input ended (the executor hurries the final checkpoint once every
    /// source's has).
    InputEnded {
        /// Attempt number.
        attempt: u32,
        /// Task index.
        task: usize,
    },
    /// The task ended cleanly: its end is committed by a completed checkpoint, whose
    /// snapshot of its frozen state stands in for it in later checkpoints.
    Finished {
        /// Attempt number.
        attempt: u32,
        /// Task index.
        task: usize,
    },
    /// The task failed (error or panic).
    Failed {
        /// Attempt number.
        attempt: u32,
        /// Task index.
        task: usize,
        /// The cause.
        error: Error,
    },
    /// The attempt failed outside any one task: a worker process running some of its
    /// tasks was lost (issue 24). The attempt ends at once with `error`.
    #[cfg(feature = "cluster")]
    AttemptFailed {
        /// Attempt number.
        attempt: u32,
        /// The cause, naming the worker and its address.
        error: Error,
    },
}

/// Counters a task updates for progress reporting (relaxed atomics, no locking).
#[derive(Debug, Default)]
pub struct TaskMetrics {
    /// Records that entered the task (polled from the source or received on channels).
    pub records_in: AtomicU64,
    /// Records out, backpressure, idle and busy time ([`crate::runtime::load`]).
    pub load: crate::runtime::load::TaskLoad,
    /// (Unaligned checkpoints) the task is a source whose sends into a full channel may
    /// be deferred while [`barrier_requested`](Self::barrier_requested) is set.
    pub deferrable: AtomicBool,
    /// (Unaligned checkpoints) the executor triggered a barrier this source has not
    /// injected yet. A source blocked sending into a full channel would see the trigger
    /// only once the consumer made room — under backpressure, as long as the consumer
    /// takes to process a batch per channel — so its writers keep the batch they could
    /// not send (sent before the barrier, so it becomes channel state) and return, and the
    /// source injects the barrier at once ([`crate::runtime::load::send_or_defer`]).
    pub barrier_requested: AtomicBool,
}

/// What every task loop needs besides its chain.
pub struct TaskContext {
    /// Global task index.
    pub index: usize,
    /// Subtask index.
    pub subtask: u32,
    /// Parallelism of the chain.
    pub parallelism: u32,
    /// Job attempt.
    pub attempt: u32,
    /// Checkpointing mode.
    pub mode: CheckpointingMode,
    /// Longest time a partly filled batch waits before it is sent.
    pub buffer_timeout: Duration,
    /// Control messages from the executor.
    pub control: Receiver<Control>,
    /// Snapshots go here to be written.
    pub writer: Sender<SnapshotJob>,
    /// Failure injection, if enabled.
    pub injector: Option<Arc<FailureInjector>>,
    /// Progress counters.
    pub metrics: Arc<TaskMetrics>,
    /// Task events to the executor (input ended).
    pub events: Sender<TaskEvent>,
}

impl TaskContext {
    pub(super) fn on_records(&self, n: usize) {
        self.metrics
            .records_in
            .fetch_add(n as u64, Ordering::Relaxed);
        if let Some(inj) = &self.injector {
            inj.on_records(self.index, n);
        }
    }

    pub(super) fn submit(
        &self,
        id: u64,
        snapshot: TaskSnapshot,
        sync: Duration,
        alignment: Duration,
        frozen: bool,
    ) {
        // The capture ends now; it began `sync` (plus any wait on downstream) earlier, and
        // alignment before that. Two clock reads per barrier, none per record.
        let sync_end_us = crate::clock::wall_us();
        let sync_start_us =
            sync_end_us.saturating_sub((sync + snapshot.downstream_wait).as_micros() as u64);
        let times = crate::checkpoint::writer::PhaseTimes {
            barrier_us: sync_start_us.saturating_sub(alignment.as_micros() as u64),
            sync_start_us,
            sync_end_us,
            ..Default::default()
        };
        // If the writer is gone the executor is shutting down; nothing to acknowledge.
        let _ = self.writer.send(SnapshotJob {
            attempt: self.attempt,
            task: self.index,
            subtask: self.subtask,
            parallelism: self.parallelism,
            checkpoint_id: id,
            snapshot: SnapshotPayload::Captured(snapshot),
            sync,
            alignment,
            frozen,
            times,
        });
    }
}
