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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select, Sender};

use crate::api::functions::{SourceFunction, SourceStatus};
use crate::checkpoint::writer::{SnapshotJob, SnapshotPayload};
use crate::error::{Error, Result};
use crate::runtime::alignment::{BarrierAction, BarrierHandler, CheckpointingMode};
use crate::runtime::event::{CheckpointBarrier, Event};
use crate::runtime::fault::FailureInjector;
use crate::runtime::operators::snapshot_function;
use crate::runtime::output::{Output, TaskSnapshot};
use crate::runtime::BATCH_SIZE;

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
    /// All the task's inputs ended and it finished cleanly.
    Finished {
        /// Attempt number.
        attempt: u32,
        /// Task index.
        task: usize,
        /// A finished source's final state, which stands in for it in later checkpoints.
        final_state: Option<FinalState>,
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
}

/// The state a source task ended with, captured after its source finished.
///
/// Checkpoints go on after some sources finished (a subtask that got no input split
/// finishes at once); a finished source acknowledges each later checkpoint with this state.
/// It is only valid for checkpoints the task did not handle itself, i.e. ids greater than
/// `last_checkpoint`: an earlier barrier cut the stream at an earlier position.
#[derive(Debug)]
pub struct FinalState {
    /// The source's operator state after its last record.
    pub snapshot: TaskSnapshot,
    /// The newest checkpoint whose barrier the task emitted itself (0 if none).
    pub last_checkpoint: u64,
}

/// Counters a task updates for progress reporting (relaxed atomics, no locking).
#[derive(Debug, Default)]
pub struct TaskMetrics {
    /// Records that entered the task (polled from the source or received on channels).
    pub records_in: AtomicU64,
}

/// What every task loop needs besides its chain.
pub struct TaskContext {
    /// Display name (`chain (subtask/parallelism)`).
    pub name: String,
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
    /// Capture the task's final state when it finishes; set when every operator of the chain
    /// is stateless except maybe its source, so that state is the task's whole state.
    pub capture_final_state: bool,
}

impl TaskContext {
    fn on_records(&self, n: usize) {
        self.metrics
            .records_in
            .fetch_add(n as u64, Ordering::Relaxed);
        if let Some(inj) = &self.injector {
            inj.on_records(self.index, n);
        }
    }

    fn submit(&self, id: u64, snapshot: TaskSnapshot, sync: Duration, alignment: Duration) {
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
        });
    }
}

/// Handles a control message in an input task; returns `Err(Cancelled)` on cancel.
fn on_control<T>(c: Control, chain: &mut dyn Output<T>) -> Result<()> {
    match c {
        Control::Complete(id) => chain.notify_complete(id),
        Control::Aborted(id) => chain.notify_aborted(id),
        Control::Cancel => Err(Error::Cancelled),
        Control::Trigger(_) => Ok(()),
    }
}

/// Handles one control message in a source task.
fn source_control<T, S: SourceFunction<T>>(
    c: Control,
    source: &mut S,
    uid: &str,
    chain: &mut dyn Output<T>,
    ctx: &TaskContext,
    last_checkpoint: &mut u64,
) -> Result<()> {
    match c {
        Control::Trigger(barrier) => {
            *last_checkpoint = barrier.id;
            let start = Instant::now();
            let mut snap = TaskSnapshot::new();
            snapshot_function(source, uid, barrier, &mut snap)?;
            chain.snapshot(barrier, &mut snap)?;
            ctx.submit(barrier.id, snap, start.elapsed(), Duration::ZERO);
            Ok(())
        }
        Control::Complete(id) => {
            source.notify_checkpoint_complete(id)?;
            chain.notify_complete(id)
        }
        Control::Aborted(id) => {
            source.notify_checkpoint_aborted(id)?;
            chain.notify_aborted(id)
        }
        Control::Cancel => Err(Error::Cancelled),
    }
}

/// Runs a source task until its source finishes or the task is cancelled; returns the
/// source's final state when the task is set to capture it.
pub fn run_source<T, S: SourceFunction<T>>(
    mut source: S,
    uid: String,
    mut chain: Box<dyn Output<T>>,
    ctx: TaskContext,
) -> Result<Option<FinalState>> {
    let mut buf = Vec::with_capacity(BATCH_SIZE);
    let mut last_flush = Instant::now();
    let mut last_checkpoint = 0;
    loop {
        loop {
            match ctx.control.try_recv() {
                Ok(c) => source_control(
                    c,
                    &mut source,
                    &uid,
                    chain.as_mut(),
                    &ctx,
                    &mut last_checkpoint,
                )?,
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                Err(crossbeam_channel::TryRecvError::Disconnected) => return Err(Error::Cancelled),
            }
        }
        let status = source.poll(&mut buf, BATCH_SIZE)?;
        if !buf.is_empty() {
            ctx.on_records(buf.len());
            chain.push(&mut buf)?;
        }
        match status {
            SourceStatus::More => {}
            SourceStatus::Finished => {
                chain.end_of_input()?;
                if !ctx.capture_final_state {
                    return Ok(None);
                }
                let mut snapshot = TaskSnapshot::new();
                let marker = CheckpointBarrier {
                    id: last_checkpoint,
                    timestamp_ms: 0,
                };
                snapshot_function(&mut source, &uid, marker, &mut snapshot)?;
                return Ok(Some(FinalState {
                    snapshot,
                    last_checkpoint,
                }));
            }
            SourceStatus::Idle => {
                // Nothing to read: wait for a control message or a moment, whichever is first.
                match ctx.control.recv_timeout(Duration::from_millis(1)) {
                    Ok(c) => source_control(
                        c,
                        &mut source,
                        &uid,
                        chain.as_mut(),
                        &ctx,
                        &mut last_checkpoint,
                    )?,
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return Err(Error::Cancelled),
                }
            }
        }
        if last_flush.elapsed() >= ctx.buffer_timeout {
            chain.flush()?;
            last_flush = Instant::now();
        }
    }
}

/// Runs an input task until every input channel ended or the task is cancelled; a
/// stateless task returns its (empty) final state, to acknowledge later checkpoints.
pub fn run_input<T: Send>(
    inputs: Vec<Receiver<Event<T>>>,
    mut chain: Box<dyn Output<T>>,
    ctx: TaskContext,
) -> Result<Option<FinalState>> {
    let mut last_checkpoint = 0;
    let mut handler = BarrierHandler::new(ctx.mode, inputs.len());
    let mut ended = vec![false; inputs.len()];
    let mut last_flush = Instant::now();
    // Selectable channels: rebuilt only when the blocked/ended set changes.
    let mut readable: Vec<usize> = (0..inputs.len()).collect();
    let mut dirty = false;
    loop {
        if dirty {
            readable = (0..inputs.len())
                .filter(|&c| !ended[c] && !handler.is_blocked(c))
                .collect();
            dirty = false;
        }
        let mut sel = Select::new();
        sel.recv(&ctx.control);
        for &c in &readable {
            sel.recv(&inputs[c]);
        }
        let deadline = last_flush + ctx.buffer_timeout;
        let op = match sel.select_deadline(deadline) {
            Ok(op) => op,
            Err(_) => {
                chain.on_processing_time(crate::runtime::executor::wall_ms())?;
                chain.flush()?;
                last_flush = Instant::now();
                continue;
            }
        };
        let i = op.index();
        if i == 0 {
            let c = op.recv(&ctx.control).map_err(|_| Error::Cancelled)?;
            if let Control::Aborted(id) = c {
                if handler.abort(id) {
                    dirty = true;
                }
            }
            on_control(c, chain.as_mut())?;
            continue;
        }
        let c = readable[i - 1];
        let event = op.recv(&inputs[c]).map_err(|_| Error::Cancelled)?;
        match event {
            Event::Batch(mut batch) => {
                ctx.on_records(batch.len());
                chain.push(&mut batch)?;
            }
            Event::Barrier(b) => {
                let action = handler.on_barrier(c, b);
                dirty = true;
                act(action, chain.as_mut(), &ctx, &mut last_checkpoint)?;
            }
            Event::EndOfInput => {
                ended[c] = true;
                dirty = true;
                let action = handler.on_end_of_input(c);
                act(action, chain.as_mut(), &ctx, &mut last_checkpoint)?;
                if handler.all_ended() {
                    chain.end_of_input()?;
                    return Ok(ctx.capture_final_state.then(|| FinalState {
                        snapshot: TaskSnapshot::new(),
                        last_checkpoint,
                    }));
                }
            }
        }
        if last_flush.elapsed() >= ctx.buffer_timeout {
            chain.on_processing_time(crate::runtime::executor::wall_ms())?;
            chain.flush()?;
            last_flush = Instant::now();
        }
    }
}

fn act<T>(
    action: BarrierAction,
    chain: &mut dyn Output<T>,
    ctx: &TaskContext,
    last_checkpoint: &mut u64,
) -> Result<()> {
    let mut snapshot = |b: CheckpointBarrier, alignment: Duration, chain: &mut dyn Output<T>| {
        *last_checkpoint = b.id;
        let start = Instant::now();
        let mut snap = TaskSnapshot::new();
        chain.snapshot(b, &mut snap)?;
        ctx.submit(b.id, snap, start.elapsed(), alignment);
        Ok(())
    };
    match action {
        BarrierAction::None => Ok(()),
        BarrierAction::Snapshot { barrier, alignment } => snapshot(barrier, alignment, chain),
        BarrierAction::Abort { id, then } => {
            chain.notify_aborted(id)?;
            match then {
                Some((b, a)) => snapshot(b, a, chain),
                None => Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records what reaches the chain: `R<x>` per record, `S<id>` per snapshot.
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Output<u32> for Recorder {
        fn push(&mut self, batch: &mut Vec<u32>) -> Result<()> {
            let mut log = self.0.lock().unwrap();
            log.extend(batch.drain(..).map(|x| format!("R{x}")));
            Ok(())
        }
        fn snapshot(&mut self, b: CheckpointBarrier, _: &mut TaskSnapshot) -> Result<()> {
            self.0.lock().unwrap().push(format!("S{}", b.id));
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

    /// Channel 0 delivers its barrier and then post-barrier records *before* channel 1
    /// delivers anything; returns the order in which the chain saw records and snapshot.
    fn run_two_inputs(mode: CheckpointingMode) -> Vec<String> {
        let (tx0, rx0) = crossbeam_channel::unbounded();
        let (tx1, rx1) = crossbeam_channel::unbounded();
        let (_ctl_tx, ctl_rx) = crossbeam_channel::unbounded();
        let (writer_tx, writer_rx) = crossbeam_channel::unbounded();
        let log = Arc::new(Mutex::new(Vec::new()));
        let ctx = TaskContext {
            name: "test".into(),
            index: 0,
            subtask: 0,
            parallelism: 1,
            attempt: 1,
            mode,
            buffer_timeout: Duration::from_millis(5),
            control: ctl_rx,
            writer: writer_tx,
            injector: None,
            metrics: Arc::new(TaskMetrics::default()),
            capture_final_state: false,
        };
        let b = CheckpointBarrier {
            id: 1,
            timestamp_ms: 0,
        };
        tx0.send(Event::Batch(vec![1])).unwrap();
        tx0.send(Event::Barrier(b)).unwrap();
        tx0.send(Event::Batch(vec![2, 3])).unwrap();
        tx0.send(Event::EndOfInput).unwrap();
        let chain = Box::new(Recorder(log.clone()));
        let task = std::thread::spawn(move || run_input(vec![rx0, rx1], chain, ctx).map(|_| ()));
        // Give the task ample time to read channel 0 as far as it is allowed to.
        std::thread::sleep(Duration::from_millis(100));
        tx1.send(Event::Batch(vec![10])).unwrap();
        tx1.send(Event::Barrier(b)).unwrap();
        tx1.send(Event::EndOfInput).unwrap();
        task.join().unwrap().unwrap();
        assert_eq!(writer_rx.try_iter().count(), 1, "one snapshot submitted");
        let log = log.lock().unwrap().clone();
        log
    }

    #[test]
    fn aligned_mode_holds_back_records_behind_a_barrier_until_the_snapshot() {
        let log = run_two_inputs(CheckpointingMode::ExactlyOnce);
        let snap = log.iter().position(|e| e == "S1").unwrap();
        // Records 2 and 3 arrived on channel 0 after its barrier: not in checkpoint 1.
        assert_eq!(&log[..snap], &["R1", "R10"]);
        assert_eq!(&log[snap + 1..], &["R2", "R3"]);
    }

    #[test]
    fn at_least_once_processes_records_behind_a_barrier_before_the_snapshot() {
        let log = run_two_inputs(CheckpointingMode::AtLeastOnce);
        let snap = log.iter().position(|e| e == "S1").unwrap();
        // Records 2 and 3 overtook channel 1's barrier: they are inside checkpoint 1.
        assert_eq!(&log[..snap], &["R1", "R2", "R3", "R10"]);
    }
}
