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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select, Sender};

use crate::checkpoint::writer::{SnapshotJob, SnapshotPayload};
use crate::error::{Error, Result};
use crate::runtime::alignment::{BarrierAction, BarrierHandler, CheckpointingMode};
use crate::runtime::event::{BarrierKind, CheckpointBarrier, Event};
use crate::runtime::fault::FailureInjector;
use crate::runtime::finishing::Finishing;
use crate::runtime::functions::{SourceFunction, SourceStatus};
use crate::runtime::operators::snapshot_function;
use crate::runtime::output::{Output, TaskSnapshot};
use crate::runtime::watermark::valve::ValveOutput;
use crate::runtime::watermark::{StatusWatermarkValve, WatermarkStatus, MAX_WATERMARK};
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
}

/// Counters a task updates for progress reporting (relaxed atomics, no locking).
#[derive(Debug, Default)]
pub struct TaskMetrics {
    /// Records that entered the task (polled from the source or received on channels).
    pub records_in: AtomicU64,
    /// Records out, backpressure, idle and busy time ([`crate::runtime::load`]).
    pub load: crate::runtime::load::TaskLoad,
}

/// What every task loop needs besides its chain.
pub struct TaskContext {
    /// Display name (`chain (subtask/parallelism)`).
    #[allow(dead_code)] // set for every task, read by no message yet
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
    /// Task events to the executor (input ended).
    pub events: Sender<TaskEvent>,
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

    fn submit(
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

/// Handles a control message in an input task; returns `Err(Cancelled)` on cancel.
fn on_control<T>(c: Control, chain: &mut dyn Output<T>, fin: &mut Finishing) -> Result<()> {
    match c {
        Control::Complete(id) => {
            chain.notify_complete(id)?;
            fin.on_complete(id);
            Ok(())
        }
        Control::Aborted(id) => {
            chain.notify_aborted(id)?;
            fin.on_aborted(id);
            Ok(())
        }
        Control::Cancel => Err(Error::Cancelled),
        Control::Trigger(_) => Ok(()),
    }
}

/// A source task's loop state besides its source and chain.
struct SourceTask<'a> {
    uid: &'a str,
    ctx: &'a TaskContext,
    fin: Finishing,
    /// Records polled in this attempt: the source's position relative to where it was
    /// restored, reported with every snapshot ([`TaskSnapshot::source`]).
    emitted: u64,
}

impl SourceTask<'_> {
    /// The source is exhausted (or a draining stop ends it): advance event time to its end
    /// (every event-time timer downstream fires), emit what the chain holds and send
    /// end-of-input on.
    fn end_input<T>(&mut self, chain: &mut dyn Output<T>) -> Result<()> {
        chain.on_watermark(MAX_WATERMARK)?;
        chain.end_of_input()?;
        self.fin.on_input_ended();
        let _ = self.ctx.events.send(TaskEvent::InputEnded {
            attempt: self.ctx.attempt,
            task: self.ctx.index,
        });
        Ok(())
    }

    /// Waits up to `wait` for a control message and handles it.
    fn wait_for_control<T, S: SourceFunction<T>>(
        &mut self,
        wait: Duration,
        source: &mut S,
        chain: &mut dyn Output<T>,
    ) -> Result<()> {
        match self.ctx.control.recv_timeout(wait) {
            Ok(c) => self.control(c, source, chain),
            Err(RecvTimeoutError::Timeout) => Ok(()),
            Err(RecvTimeoutError::Disconnected) => Err(Error::Cancelled),
        }
    }

    /// Handles one control message.
    fn control<T, S: SourceFunction<T>>(
        &mut self,
        c: Control,
        source: &mut S,
        chain: &mut dyn Output<T>,
    ) -> Result<()> {
        match c {
            Control::Trigger(barrier) => {
                if let BarrierKind::Stop { drain } = barrier.kind {
                    self.fin.on_stop_barrier(barrier.id);
                    if drain && !self.fin.input_ended() {
                        self.end_input(chain)?;
                    }
                }
                let start = Instant::now();
                let mut snap = TaskSnapshot::new();
                snapshot_function(source, self.uid, barrier, &mut snap)?;
                chain.snapshot(barrier, &mut snap)?;
                snap.source = Some((self.uid.to_string(), self.emitted));
                let frozen = self.fin.on_snapshot(barrier.id);
                let sync = start.elapsed().saturating_sub(snap.downstream_wait);
                self.ctx
                    .submit(barrier.id, snap, sync, Duration::ZERO, frozen);
                Ok(())
            }
            Control::Complete(id) => {
                source.notify_checkpoint_complete(id)?;
                chain.notify_complete(id)?;
                self.fin.on_complete(id);
                Ok(())
            }
            Control::Aborted(id) => {
                source.notify_checkpoint_aborted(id)?;
                chain.notify_aborted(id)?;
                self.fin.on_aborted(id);
                Ok(())
            }
            Control::Cancel => Err(Error::Cancelled),
        }
    }
}

/// Runs a source task until its end is committed ([`Finishing`]) or the task is cancelled.
pub fn run_source<T, S: SourceFunction<T>>(
    source: S,
    uid: String,
    chain: Box<dyn Output<T>>,
    ctx: TaskContext,
) -> Result<()> {
    run_source_paused_by(source, uid, chain, ctx, None)
}

/// [`run_source`], not polling while `pause` is set (watermark alignment: the split's
/// watermark ran too far ahead of its group's). Control messages and the chain's periodic
/// work (which clears the flag) go on while paused.
pub fn run_source_paused_by<T, S: SourceFunction<T>>(
    mut source: S,
    uid: String,
    mut chain: Box<dyn Output<T>>,
    ctx: TaskContext,
    pause: Option<Arc<AtomicBool>>,
) -> Result<()> {
    let mut buf = Vec::with_capacity(BATCH_SIZE);
    let mut last_flush = Instant::now();
    let mut task = SourceTask {
        uid: &uid,
        ctx: &ctx,
        fin: Finishing::new(),
        emitted: 0,
    };
    loop {
        loop {
            match ctx.control.try_recv() {
                Ok(c) => task.control(c, &mut source, chain.as_mut())?,
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                Err(crossbeam_channel::TryRecvError::Disconnected) => return Err(Error::Cancelled),
            }
        }
        if task.fin.is_done() {
            return chain.flush();
        }
        if task.fin.is_frozen() {
            // Ended or stopping: only control messages matter now.
            chain.flush()?;
            let wait = ctx.buffer_timeout.max(Duration::from_millis(1));
            task.wait_for_control(wait, &mut source, chain.as_mut())?;
            continue;
        }
        let status = if pause.as_ref().is_some_and(|p| p.load(Ordering::Relaxed)) {
            SourceStatus::Idle
        } else {
            source.poll(&mut buf, BATCH_SIZE)?
        };
        if !buf.is_empty() {
            ctx.on_records(buf.len());
            task.emitted += buf.len() as u64;
            chain.push(&mut buf)?;
        }
        match status {
            SourceStatus::More => {}
            SourceStatus::Finished => task.end_input(chain.as_mut())?,
            // Nothing to read: wait for a control message or a moment, whichever is first.
            SourceStatus::Idle => {
                task.wait_for_control(Duration::from_millis(1), &mut source, chain.as_mut())?
            }
        }
        if last_flush.elapsed() >= ctx.buffer_timeout {
            // Watermark assigners in the chain emit their periodic watermarks (or idleness).
            chain.on_processing_time(crate::clock::wall_ms())?;
            chain.flush()?;
            last_flush = Instant::now();
        }
    }
}

/// Per input channel: how far its sender got, which decides whether its closing is orderly.
#[derive(Debug, Clone, Copy, Default)]
struct ChannelState {
    /// It delivered end-of-input.
    ended: bool,
    /// It delivered the barrier of this stopping savepoint (and nothing will follow unless
    /// the savepoint is aborted).
    stopped_at: Option<u64>,
    /// Its sender is gone.
    closed: bool,
}

/// Runs an input task until its end is committed and every input channel closed, or the
/// task is cancelled.
pub fn run_input<T: Send>(
    inputs: Vec<Receiver<Event<T>>>,
    mut chain: Box<dyn Output<T>>,
    ctx: TaskContext,
) -> Result<()> {
    let mut handler = BarrierHandler::new(ctx.mode, inputs.len());
    let mut valve = StatusWatermarkValve::new(inputs.len());
    let mut channels = vec![ChannelState::default(); inputs.len()];
    let mut fin = Finishing::new();
    let mut last_flush = Instant::now();
    // Selectable channels: rebuilt only when the blocked/closed set changes.
    let mut readable: Vec<usize> = (0..inputs.len()).collect();
    let mut dirty = false;
    loop {
        if fin.is_done() && channels.iter().all(|c| c.closed) {
            return chain.flush();
        }
        if dirty {
            readable = (0..inputs.len())
                .filter(|&c| !channels[c].closed && !handler.is_blocked(c))
                .collect();
            dirty = false;
        }
        let mut sel = Select::new();
        sel.recv(&ctx.control);
        for &c in &readable {
            sel.recv(&inputs[c]);
        }
        let deadline = last_flush + ctx.buffer_timeout;
        let op = match crate::runtime::load::idle(|| sel.select_deadline(deadline)) {
            Ok(op) => op,
            Err(_) => {
                if !fin.is_frozen() {
                    chain.on_processing_time(crate::clock::wall_ms())?;
                }
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
                for ch in channels.iter_mut().filter(|ch| ch.stopped_at == Some(id)) {
                    ch.stopped_at = None;
                }
            }
            on_control(c, chain.as_mut(), &mut fin)?;
            continue;
        }
        let c = readable[i - 1];
        let Ok(event) = op.recv(&inputs[c]) else {
            // The sender is gone: orderly only after end-of-input or a stopping barrier.
            if !channels[c].ended && channels[c].stopped_at.is_none() {
                return Err(Error::Cancelled);
            }
            channels[c].closed = true;
            dirty = true;
            let action = handler.on_channel_closed(c);
            act(action, chain.as_mut(), &ctx, &mut fin)?;
            continue;
        };
        match event {
            Event::Batch(mut batch) => {
                ctx.on_records(batch.len());
                chain.push(&mut batch)?;
            }
            Event::TimestampedBatch(mut batch, mut timestamps) => {
                ctx.on_records(batch.len());
                chain.push_timestamped(&mut batch, &mut timestamps)?;
            }
            Event::Watermark(w) => forward(valve.input_watermark(c, w), chain.as_mut())?,
            Event::WatermarkStatus(s) => forward(valve.input_status(c, s), chain.as_mut())?,
            Event::Barrier(b) => {
                if let BarrierKind::Stop { .. } = b.kind {
                    channels[c].stopped_at = Some(b.id);
                }
                let action = handler.on_barrier(c, b);
                dirty = true;
                act(action, chain.as_mut(), &ctx, &mut fin)?;
            }
            Event::EndOfInput => {
                channels[c].ended = true;
                if channels.iter().all(|ch| ch.ended) {
                    chain.end_of_input()?;
                    fin.on_input_ended();
                }
            }
        }
        if last_flush.elapsed() >= ctx.buffer_timeout {
            if !fin.is_frozen() {
                chain.on_processing_time(crate::clock::wall_ms())?;
            }
            chain.flush()?;
            last_flush = Instant::now();
        }
    }
}

/// Forwards what the watermark valve decided: becoming active, then the new watermark, then
/// becoming idle.
fn forward<T>(out: ValveOutput, chain: &mut dyn Output<T>) -> Result<()> {
    if out.status == Some(WatermarkStatus::Active) {
        chain.on_watermark_status(WatermarkStatus::Active)?;
    }
    if let Some(w) = out.watermark {
        chain.on_watermark(w)?;
    }
    if out.status == Some(WatermarkStatus::Idle) {
        chain.on_watermark_status(WatermarkStatus::Idle)?;
    }
    Ok(())
}

fn act<T>(
    action: BarrierAction,
    chain: &mut dyn Output<T>,
    ctx: &TaskContext,
    fin: &mut Finishing,
) -> Result<()> {
    let mut snapshot = |b: CheckpointBarrier, alignment: Duration, chain: &mut dyn Output<T>| {
        if let BarrierKind::Stop { .. } = b.kind {
            fin.on_stop_barrier(b.id);
        }
        let start = Instant::now();
        let mut snap = TaskSnapshot::new();
        chain.snapshot(b, &mut snap)?;
        let frozen = fin.on_snapshot(b.id);
        let sync = start.elapsed().saturating_sub(snap.downstream_wait);
        ctx.submit(b.id, snap, sync, alignment, frozen);
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
        fn push_timestamped(&mut self, batch: &mut Vec<u32>, ts: &mut Vec<u64>) -> Result<()> {
            let mut log = self.0.lock().unwrap();
            log.extend(
                batch
                    .drain(..)
                    .zip(ts.drain(..))
                    .map(|(x, t)| format!("R{x}@{t}")),
            );
            Ok(())
        }
        fn on_watermark(&mut self, w: u64) -> Result<()> {
            self.0.lock().unwrap().push(format!("W{w}"));
            Ok(())
        }
        fn on_watermark_status(&mut self, s: WatermarkStatus) -> Result<()> {
            self.0.lock().unwrap().push(format!("{s:?}"));
            Ok(())
        }
        fn on_processing_time(&mut self, _: u64) -> Result<()> {
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
        let (ctl_tx, ctl_rx) = crossbeam_channel::unbounded();
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
            events: crossbeam_channel::unbounded().0,
        };
        let b = CheckpointBarrier::checkpoint(1, 0);
        tx0.send(Event::Batch(vec![1])).unwrap();
        tx0.send(Event::Barrier(b)).unwrap();
        tx0.send(Event::Batch(vec![2, 3])).unwrap();
        tx0.send(Event::EndOfInput).unwrap();
        drop(tx0);
        let chain = Box::new(Recorder(log.clone()));
        let task = std::thread::spawn(move || run_input(vec![rx0, rx1], chain, ctx));
        // Give the task ample time to read channel 0 as far as it is allowed to.
        std::thread::sleep(Duration::from_millis(100));
        tx1.send(Event::Batch(vec![10])).unwrap();
        tx1.send(Event::Barrier(b)).unwrap();
        tx1.send(Event::EndOfInput).unwrap();
        // The final checkpoint: after end-of-input, then its completion lets the task exit.
        tx1.send(Event::Barrier(CheckpointBarrier::checkpoint(2, 0)))
            .unwrap();
        drop(tx1);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !task.is_finished(),
            "waits for the final checkpoint to complete"
        );
        ctl_tx.send(Control::Complete(2)).unwrap();
        task.join().unwrap().unwrap();
        let frozen: Vec<bool> = writer_rx.try_iter().map(|j| j.frozen).collect();
        assert_eq!(
            frozen,
            [false, true],
            "checkpoint 1 live, the final one frozen"
        );
        let mut log = log.lock().unwrap().clone();
        assert_eq!(log.pop().as_deref(), Some("S2"));
        log
    }

    /// Watermarks and idleness on two channels: the chain sees the minimum over the active
    /// channels, rising only, after the records sent before it.
    #[test]
    fn the_task_watermark_is_the_minimum_over_active_inputs() {
        use crate::runtime::watermark::WatermarkStatus::{Active, Idle};
        let (tx0, rx0) = crossbeam_channel::unbounded();
        let (tx1, rx1) = crossbeam_channel::unbounded();
        let (ctl_tx, ctl_rx) = crossbeam_channel::unbounded();
        let log = Arc::new(Mutex::new(Vec::new()));
        let ctx = TaskContext {
            name: "test".into(),
            index: 0,
            subtask: 0,
            parallelism: 1,
            attempt: 1,
            mode: CheckpointingMode::ExactlyOnce,
            buffer_timeout: Duration::from_millis(5),
            control: ctl_rx,
            writer: crossbeam_channel::unbounded().0,
            injector: None,
            metrics: Arc::new(TaskMetrics::default()),
            events: crossbeam_channel::unbounded().0,
        };
        let chain = Box::new(Recorder(log.clone()));
        let task = std::thread::spawn(move || run_input(vec![rx0, rx1], chain, ctx));
        let step = |tx: &Sender<Event<u32>>, e: Event<u32>| {
            tx.send(e).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        };
        step(&tx0, Event::TimestampedBatch(vec![1], vec![10]));
        step(&tx0, Event::Watermark(10));
        step(&tx1, Event::Watermark(5));
        step(&tx1, Event::Watermark(30));
        step(&tx0, Event::Watermark(8));
        step(&tx0, Event::WatermarkStatus(Idle));
        step(&tx1, Event::Watermark(40));
        step(&tx1, Event::WatermarkStatus(Idle));
        step(&tx1, Event::WatermarkStatus(Active));
        step(&tx1, Event::Watermark(MAX_WATERMARK));
        step(&tx0, Event::WatermarkStatus(Active));
        step(&tx0, Event::Watermark(MAX_WATERMARK));
        for tx in [&tx0, &tx1] {
            tx.send(Event::EndOfInput).unwrap();
        }
        tx0.send(Event::Barrier(CheckpointBarrier::checkpoint(1, 0)))
            .unwrap();
        tx1.send(Event::Barrier(CheckpointBarrier::checkpoint(1, 0)))
            .unwrap();
        drop((tx0, tx1));
        std::thread::sleep(Duration::from_millis(20));
        ctl_tx.send(Control::Complete(1)).unwrap();
        task.join().unwrap().unwrap();
        let log = log.lock().unwrap().clone();
        let max = format!("W{MAX_WATERMARK}");
        assert_eq!(
            log,
            [
                "R1@10", "W5", "W10", // channel 0 holds it at 10 until it goes idle
                "W30", "W40", "Idle", "Active", &max, "S1"
            ]
        );
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
