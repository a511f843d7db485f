//! The source task's loop: polls its source, injects barriers between polls.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, Select, TryRecvError};

/// How long a source of an unaligned job waits for room under its consumers' credit
/// before it looks again, when a local channel is short only of credit: no send can wake
/// it then (see [`SourceTask::wait_for_room`]). A remote channel short of permits wakes the
/// source when they return instead (`exchange::permits::SendWindow::watch`).
const CREDIT_WAIT: Duration = Duration::from_micros(50);

/// The longest a source waits for room when every channel short of it is watched: a
/// bound for safety only, since a consumer taking an event or a control message wakes it.
const ROOM_WAIT: Duration = Duration::from_millis(10);

use super::{Control, TaskContext, TaskEvent};
use crate::error::{Error, Result};
use crate::runtime::event::BarrierKind;
use crate::runtime::finishing::Finishing;
use crate::runtime::functions::{SourceFunction, SourceStatus};
use crate::runtime::operators::snapshot_function;
use crate::runtime::output::{Output, TaskSnapshot};
use crate::runtime::watermark::MAX_WATERMARK;
use crate::runtime::BATCH_SIZE;

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

    /// Waits until a channel short of room gains some ([`Output::watch_room`]) or a
    /// control message arrives, and handles the message. A consumer taking an event wakes
    /// the source as it would wake a blocked send (on another worker: its returned
    /// permits do), so an unaligned job's source keeps pace with its consumers like an
    /// aligned one's, without polling on a timer. (A
    /// consumer that failed leaves a full channel whose send is always "ready": the source
    /// then loops here until the executor's cancel, which this select also waits for.)
    fn wait_for_room<T, S: SourceFunction<T>>(
        &mut self,
        source: &mut S,
        chain: &mut dyn Output<T>,
    ) -> Result<()> {
        let control = {
            let mut sel = Select::new();
            let control = sel.recv(&self.ctx.control);
            let watched = chain.watch_room(&mut sel);
            let wait = if watched { ROOM_WAIT } else { CREDIT_WAIT };
            sel.ready_timeout(wait) == Ok(control)
        };
        if !control {
            return Ok(());
        }
        match self.ctx.control.try_recv() {
            Ok(c) => self.control(c, source, chain),
            Err(TryRecvError::Empty) => Ok(()),
            Err(TryRecvError::Disconnected) => Err(Error::Cancelled),
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
                // Sends into full channels block again: the barrier goes in now.
                self.ctx
                    .metrics
                    .barrier_requested
                    .store(false, Ordering::Relaxed);
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
        // No room under the consumers' credit (unaligned jobs): wait for it rather than
        // produce a batch that a barrier would push past the credit.
        let paused = pause.as_ref().is_some_and(|p| p.load(Ordering::Relaxed))
            || ctx
                .injector
                .as_ref()
                .is_some_and(|i| i.holds_sources(task.emitted));
        let status = if paused {
            SourceStatus::Idle
        } else if !chain.has_room() {
            task.wait_for_room(&mut source, chain.as_mut())?;
            SourceStatus::More
        } else {
            // Fewer than a full batch while debloating cuts the batches downstream: a
            // barrier goes out only between two polls.
            source.poll(&mut buf, chain.batch_hint())?
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
