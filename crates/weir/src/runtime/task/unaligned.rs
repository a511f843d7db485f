//! The input task's loop in unaligned mode (issue 13): barriers overtake queued records on
//! priority lanes, and the records they overtook become the task's channel state. The
//! decisions are [`UnalignedBarrierHandler`]'s; this loop does the reading, the processing
//! and the bookkeeping around them (docs/architecture.md §3).
//!
//! Invariants, besides those of the aligned loop ([`super::input`]):
//! * Lanes are read before data: every iteration first drains the priority lanes.
//! * A channel with events read ahead ([`ReadAhead::holds`]) is not read for processing
//!   until they are processed, so each channel's events are processed in order.
//! * A record is recorded as channel state of a checkpoint exactly once: when it is read
//!   while its channel is capturing (read ahead or read for processing), or, if it was
//!   read ahead for an earlier checkpoint and still waits to be processed, when the
//!   checkpoint's snapshot is taken; never when a read-ahead event is processed later.
//! * The snapshot is submitted only with its complete channel state; an abort drops both.
//! * A send blocked on a full output channel returns, keeping its batch, once a barrier is
//!   announced on a lane or an aligning checkpoint is due to switch
//!   ([`crate::runtime::load::watch_for_barriers`]): the snapshot is taken between two
//!   batches as always, and the batch goes out before the barrier's marker.
//! * A plain batch larger than [`PROCESS_CHUNK`] that would take longer than
//!   [`CHUNK_BUDGET`] at the task's last pace is processed a chunk at a time; between
//!   chunks, when a barrier waits or a draining channel has events, the rest of the batch
//!   goes back to the front of its channel's read-ahead queue (so it counts as read, not
//!   processed) and the loop looks at its lanes and channels first.
//! * Restored channel state ([`RestoredChannels`]) is replayed a chunk per iteration before
//!   anything read ahead or read for processing (it was sent before all of it), with the
//!   lanes and draining channels looked at between two chunks; a snapshot taken during the
//!   replay records what is not replayed yet as channel state, ahead of what the task read
//!   ahead.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, TryRecvError};

use super::replay::RestoredChannels;
use super::{on_control, ChannelState, Control, TaskContext};
use crate::checkpoint::layout::ChannelStateFile;
use crate::error::{Error, Result};
use crate::runtime::codec::RecordCodec;
use crate::runtime::event::{BarrierKind, CheckpointBarrier, Event};
use crate::runtime::finishing::Finishing;
use crate::runtime::output::{Output, TaskSnapshot};
use crate::runtime::remote::Remotes;
use crate::runtime::unaligned::capture::{ChannelCapture, ChannelOrigin, ReadAhead};
use crate::runtime::unaligned::lane::LaneReceiver;
use crate::runtime::unaligned::{Decision, UnalignedBarrierHandler};
use crate::runtime::watermark::StatusWatermarkValve;

/// An input task's channels in unaligned mode: data channels, their priority lanes (same
/// index) and where each comes from.
pub struct UnalignedInputs<T> {
    /// The data channels.
    pub data: Vec<Receiver<Event<T>>>,
    /// The priority lane beside each data channel.
    pub lanes: Vec<LaneReceiver>,
    /// The edge and sender of each channel, recorded with its channel state.
    pub origins: Vec<ChannelOrigin>,
    /// The record type's codec.
    pub codec: Arc<dyn RecordCodec<T>>,
    /// Alignment allowed before switching to unaligned (zero: unaligned at once).
    pub aligned_timeout: Duration,
    /// The task's head operator: its folder holds the channel-state files.
    pub uid: String,
    /// Most events read ahead and waiting per channel. Reading ahead frees room in the
    /// channel, so without a bound a checkpoint interval shorter than the time to process
    /// a channel's worth would move the whole input into memory, past backpressure; with
    /// it, a channel holds its capacity in the channel plus this in the queue, and a
    /// checkpoint waits for processing only while the queue is full.
    pub read_ahead_limit: usize,
    /// Per channel, the events read ahead and not processed yet, shared with the
    /// channel's sender, which counts them against the channel's capacity (credit): what
    /// is read ahead stays a part of the backpressure. Empty: not shared (tests).
    pub credits: Vec<Arc<AtomicUsize>>,
    /// The restored channel state of this subtask, replayed before any new input while
    /// barriers are taken as usual (empty for a fresh start).
    pub restored: Vec<ChannelStateFile>,
    /// The remote channels among `data` (channels from another worker, whose lanes are
    /// their inputs' own). Their permits are their credit: an event read ahead keeps its
    /// permits until it is processed, so what the task holds counts against the remote
    /// channel's bound as a local channel's read-ahead counts against its capacity.
    pub remotes: Remotes<T>,
}

/// The shared read-ahead counts; zeroed when the task ends, so a sender waiting for
/// credit sees the channel's end instead of waiting forever.
struct Credits(Vec<Arc<AtomicUsize>>);

impl Credits {
    fn add(&self, c: usize, n: isize) {
        if let Some(h) = self.0.get(c) {
            if n >= 0 {
                h.fetch_add(n as usize, Ordering::Relaxed);
            } else {
                h.fetch_sub(n.unsigned_abs(), Ordering::Relaxed);
            }
        }
    }
}

impl Drop for Credits {
    fn drop(&mut self) {
        self.0.iter().for_each(|h| h.store(0, Ordering::Relaxed));
    }
}

/// What a selected operation reads (index 0 of the select is the control channel).
#[derive(Clone, Copy)]
enum Target {
    Lane(usize),
    Data(usize),
}

/// A snapshot taken, waiting for its channel state to be complete.
struct Taken {
    snapshot: TaskSnapshot,
    sync: Duration,
    frozen: bool,
}

/// Records of a plain batch processed between two looks for a waiting barrier: a task
/// whose operators are slow (a rate-limited sink: ~50 ms per 256 records at 5 k/s) sees
/// an announcement or its marker within one chunk, not one batch (up to [`BATCH_SIZE`],
/// seconds at that rate) — as Flink's mailbox looks between records.
///
/// [`BATCH_SIZE`]: crate::runtime::BATCH_SIZE
const PROCESS_CHUNK: usize = 256;

/// The longest a plain batch is processed whole. Chunks cost a copy and a pass through the
/// chain's metering each (4 % of unaligned W1's throughput, measured): a batch the task
/// processes within this budget, judged by its pace on the previous one, goes whole.
const CHUNK_BUDGET: Duration = Duration::from_millis(1);

struct Loop<'a, T> {
    ctx: &'a TaskContext,
    /// Whether a barrier waits for the task (the probe a blocked send polls too).
    probe: Rc<dyn Fn() -> bool>,
    /// The data channels, to see whether a draining one has events (its marker may be
    /// among them) while a large batch is processed.
    peek: Vec<Receiver<Event<T>>>,
    /// The chunk of a large batch being processed.
    chunk: Vec<T>,
    /// Processing time per record of the last plain batch or chunk, in nanoseconds
    /// (`u64::MAX` until measured, so the first large batch is chunked).
    ns_per_record: u64,
    /// When the pending checkpoint is due to switch to unaligned, for the barrier probe.
    switch_at: Rc<Cell<Option<Instant>>>,
    chain: Box<dyn Output<T>>,
    handler: UnalignedBarrierHandler,
    valve: StatusWatermarkValve,
    channels: Vec<ChannelState>,
    fin: Finishing,
    capture: ChannelCapture<T>,
    ahead: ReadAhead<T>,
    restored: RestoredChannels<T>,
    taken: Option<Taken>,
    uid: String,
    read_ahead_limit: usize,
    credits: Credits,
    remotes: Remotes<T>,
    /// Per channel, whether the front of its read-ahead queue is the rest of a batch
    /// processed part-way, whose permits (a remote channel's) already went back.
    returned: Vec<bool>,
}

/// Runs an input task in unaligned mode until its end is committed and every input channel
/// closed, or the task is cancelled.
pub fn run_input_unaligned<T: Send>(
    inputs: UnalignedInputs<T>,
    chain: Box<dyn Output<T>>,
    ctx: TaskContext,
) -> Result<()> {
    let n = inputs.data.len();
    let switch_at: Rc<Cell<Option<Instant>>> = Rc::new(Cell::new(None));
    // A barrier waits: announced on an input's lane, or an aligning checkpoint is due to
    // switch. A send blocked on a full output channel gives way then (and a large batch
    // stops between chunks): the loop takes the snapshot, and the batch the send kept goes
    // out ahead of the barrier.
    let probe: Rc<dyn Fn() -> bool> = {
        let (lanes, switch_at) = (inputs.lanes.clone(), switch_at.clone());
        Rc::new(move || {
            lanes.iter().any(|l| !l.is_empty())
                || switch_at.get().is_some_and(|t| Instant::now() >= t)
        })
    };
    let _watching = crate::runtime::load::watch_for_barriers(probe.clone());
    let mut l = Loop {
        ctx: &ctx,
        probe,
        peek: inputs.data.clone(),
        chunk: Vec::with_capacity(PROCESS_CHUNK),
        ns_per_record: u64::MAX,
        switch_at,
        chain,
        handler: UnalignedBarrierHandler::with_aligned_timeout(n, inputs.aligned_timeout),
        valve: StatusWatermarkValve::new(n),
        channels: vec![ChannelState::default(); n],
        fin: Finishing::new(),
        restored: RestoredChannels::new(inputs.restored, &inputs.origins, inputs.codec.clone()),
        capture: ChannelCapture::new(inputs.codec, inputs.origins),
        ahead: ReadAhead::new(n),
        taken: None,
        uid: inputs.uid,
        read_ahead_limit: inputs.read_ahead_limit.max(1),
        credits: Credits(inputs.credits),
        remotes: inputs.remotes,
        returned: vec![false; n],
    };
    let (data, lanes) = (inputs.data, inputs.lanes);
    let mut lane_open = vec![true; n];
    // What each selectable operation reads, rebuilt with the select (kept to reuse its room).
    let mut targets = Vec::with_capacity(2 * n);
    let mut last_flush = Instant::now();
    loop {
        if l.fin.is_done()
            && l.restored.is_empty()
            && l.ahead.is_empty()
            && l.channels.iter().all(|c| c.closed)
        {
            return l.chain.flush();
        }
        for (c, lane) in lanes.iter().enumerate() {
            while lane_open[c] {
                match lane.try_recv() {
                    Ok(b) => {
                        let d = l.handler.on_announcement(c, b, Instant::now());
                        l.decide(d)?;
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        lane_open[c] = false;
                        break;
                    }
                }
            }
        }
        for (c, rx) in data.iter().enumerate() {
            l.read_ahead(c, rx)?;
        }
        if !l.restored.is_empty() {
            l.poll_control()?;
            if let Some((c, event)) = l.restored.next(PROCESS_CHUNK)? {
                l.process(c, event)?;
            }
        } else if let Some((c, event)) = l.ahead.pop() {
            l.credits.add(c, -1);
            // A remote channel's permits of an event read ahead go back now, as the local
            // credit does; the rest of a part-processed batch gave them back already.
            if !std::mem::take(&mut l.returned[c]) {
                l.remotes.consumed(c, &event);
            }
            l.poll_control()?;
            l.process(c, event)?;
        } else {
            // Selectable: the control channel, the open lanes, the readable channels.
            targets.clear();
            let mut sel = Select::new();
            sel.recv(&l.ctx.control);
            for (c, lane) in lanes.iter().enumerate().filter(|(c, _)| lane_open[*c]) {
                sel.recv(lane);
                targets.push(Target::Lane(c));
            }
            for (c, rx) in data.iter().enumerate() {
                if !l.channels[c].closed && !l.handler.is_blocked(c) {
                    sel.recv(rx);
                    targets.push(Target::Data(c));
                }
            }
            let deadline = last_flush + l.ctx.buffer_timeout;
            match crate::runtime::load::idle(|| sel.select_deadline(deadline)) {
                Err(_) => {} // the buffer timeout passed: flush below
                Ok(op) if op.index() == 0 => {
                    let ctl = op.recv(&l.ctx.control).map_err(|_| Error::Cancelled)?;
                    l.control(ctl)?;
                }
                Ok(op) => match targets[op.index() - 1] {
                    Target::Lane(c) => match op.recv(&lanes[c]) {
                        Ok(b) => {
                            let d = l.handler.on_announcement(c, b, Instant::now());
                            l.decide(d)?;
                        }
                        // Its sender ended; the data channel says whether in order.
                        Err(_) => lane_open[c] = false,
                    },
                    Target::Data(c) => match op.recv(&data[c]) {
                        Ok(event) => l.receive(c, event)?,
                        Err(_) => l.closed(c)?,
                    },
                },
            }
        }
        if l.handler.pending().is_some() {
            let d = l.handler.on_tick(Instant::now());
            l.decide(d)?;
        }
        if last_flush.elapsed() >= l.ctx.buffer_timeout {
            if !l.fin.is_frozen() {
                l.chain.on_processing_time(crate::clock::wall_ms())?;
            }
            l.chain.flush()?;
            last_flush = Instant::now();
        }
    }
}

impl<T: Send> Loop<'_, T> {
    /// Handles a control message if one waits (between two events, as the select would).
    fn poll_control(&mut self) -> Result<()> {
        match self.ctx.control.try_recv() {
            Ok(ctl) => self.control(ctl),
            Err(TryRecvError::Empty) => Ok(()),
            Err(TryRecvError::Disconnected) => Err(Error::Cancelled),
        }
    }

    /// Reads channel `c` ahead of processing while it is draining: up to its marker, or as
    /// far as it has events now, or until its queue holds the limit.
    fn read_ahead(&mut self, c: usize, rx: &Receiver<Event<T>>) -> Result<()> {
        while self.handler.is_draining(c)
            && !self.channels[c].closed
            && self.ahead.len_of(c) < self.read_ahead_limit
        {
            // Read ahead, a remote channel's event keeps its permits until processed.
            match rx.try_recv() {
                Ok(Event::Barrier(b)) => self.barrier(c, b)?,
                Ok(event) => {
                    self.capture.record_event(c, &event)?;
                    self.ahead.push(c, event);
                    self.credits.add(c, 1);
                }
                // Empty: more comes later. Disconnected: the close is handled when the
                // channel is read for processing, after what was read ahead.
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// An event read from channel `c` for processing now.
    fn receive(&mut self, c: usize, event: Event<T>) -> Result<()> {
        self.remotes.consumed(c, &event);
        match event {
            Event::Barrier(b) => self.barrier(c, b),
            event => {
                if self.handler.is_capturing(c) {
                    self.capture.record_event(c, &event)?;
                }
                self.process(c, event)
            }
        }
    }

    /// Processes a batch larger than a chunk a chunk at a time, and stops between two
    /// when a barrier waits ([`Loop::probe`]) or a draining channel has events to read
    /// ahead: the rest goes back to the front of `c`'s read-ahead queue, which a snapshot
    /// records as channel state (read before it, processed after), and is processed once
    /// the loop has looked at its lanes and channels.
    fn process_in_chunks(&mut self, c: usize, batch: Vec<T>) -> Result<()> {
        let mut rest = batch.into_iter();
        loop {
            self.chunk.extend(rest.by_ref().take(PROCESS_CHUNK));
            if self.chunk.is_empty() {
                return Ok(());
            }
            let (start, n) = (Instant::now(), self.chunk.len());
            self.ctx.on_records(n);
            self.chain.push(&mut self.chunk)?;
            self.chunk.clear();
            self.note_pace(start, n);
            if rest.len() > 0 && self.should_stop() {
                self.ahead.push_front(c, Event::Batch(rest.collect()));
                self.credits.add(c, 1);
                self.returned[c] = true;
                return Ok(());
            }
        }
    }

    /// Whether a plain batch of `n` records is worth processing in chunks: it would take
    /// longer than [`CHUNK_BUDGET`] at the pace of the last one.
    fn worth_chunking(&self, n: usize) -> bool {
        n > PROCESS_CHUNK
            && (n as u64).saturating_mul(self.ns_per_record) > CHUNK_BUDGET.as_nanos() as u64
    }

    /// Records the pace of `n` records processed since `start`.
    fn note_pace(&mut self, start: Instant, n: usize) {
        if n > 0 {
            self.ns_per_record = start.elapsed().as_nanos() as u64 / n as u64;
        }
    }

    /// Whether a barrier waits, or a draining channel with room in its read-ahead queue
    /// has events (its marker may be among them).
    fn should_stop(&self) -> bool {
        (self.probe)()
            || self.peek.iter().enumerate().any(|(c, rx)| {
                self.handler.is_draining(c)
                    && self.ahead.len_of(c) < self.read_ahead_limit
                    && !rx.is_empty()
            })
    }

    /// Processes an event that is not a barrier (barriers are handled when read).
    fn process(&mut self, c: usize, event: Event<T>) -> Result<()> {
        match event {
            Event::Batch(batch) if self.worth_chunking(batch.len()) => {
                self.process_in_chunks(c, batch)
            }
            Event::Batch(mut batch) => {
                let (start, n) = (Instant::now(), batch.len());
                self.ctx.on_records(n);
                self.chain.push(&mut batch)?;
                self.note_pace(start, n);
                Ok(())
            }
            Event::TimestampedBatch(mut batch, mut timestamps) => {
                self.ctx.on_records(batch.len());
                self.chain.push_timestamped(&mut batch, &mut timestamps)
            }
            Event::Watermark(w) => {
                super::input::forward(self.valve.input_watermark(c, w), self.chain.as_mut())
            }
            Event::WatermarkStatus(s) => {
                super::input::forward(self.valve.input_status(c, s), self.chain.as_mut())
            }
            Event::Barrier(b) => self.barrier(c, b),
            Event::EndOfInput => {
                self.channels[c].ended = true;
                self.handler.on_end_of_input(c);
                if self.channels.iter().all(|ch| ch.ended) {
                    self.chain.end_of_input()?;
                    self.fin.on_input_ended();
                }
                Ok(())
            }
        }
    }

    fn barrier(&mut self, c: usize, b: CheckpointBarrier) -> Result<()> {
        if let BarrierKind::Stop { .. } = b.kind {
            self.channels[c].stopped_at = Some(b.id);
        }
        let d = self.handler.on_marker(c, b, Instant::now());
        self.decide(d)
    }

    fn closed(&mut self, c: usize) -> Result<()> {
        let ch = &mut self.channels[c];
        // The sender is gone: orderly only after end-of-input or a stopping barrier;
        // else a neighbour was cancelled, or a remote one's worker is lost (named).
        if !ch.ended && ch.stopped_at.is_none() {
            return Err(self.remotes.closed_early(c));
        }
        ch.closed = true;
        let d = self.handler.on_channel_closed(c, Instant::now());
        self.decide(d)
    }

    fn control(&mut self, ctl: Control) -> Result<()> {
        if let Control::Aborted(id) = ctl {
            if self.handler.abort(id) {
                self.capture.discard();
                self.taken = None;
                self.switch_at.set(None);
            }
            for ch in self
                .channels
                .iter_mut()
                .filter(|ch| ch.stopped_at == Some(id))
            {
                ch.stopped_at = None;
            }
        }
        on_control(ctl, self.chain.as_mut(), &mut self.fin)
    }

    /// Carries out the handler's decision: abort, snapshot, complete, in that order.
    fn decide(&mut self, d: Decision) -> Result<()> {
        self.switch_at.set(self.handler.switch_due());
        if let Some(id) = d.aborted {
            self.capture.discard();
            self.taken = None;
            self.chain.notify_aborted(id)?;
        }
        if let Some(b) = d.snapshot {
            if let BarrierKind::Stop { .. } = b.kind {
                self.fin.on_stop_barrier(b.id);
            }
            // Restored records not replayed yet, then events read ahead for an earlier
            // checkpoint and not processed yet, are in neither this snapshot's operator
            // state nor (read before it) its capture: they are in flight for this
            // checkpoint too, in that order, ahead of anything read later.
            self.restored.record_rest(&mut self.capture)?;
            for (c, e) in self.ahead.waiting() {
                self.capture.record_event(c, e)?;
            }
            let start = Instant::now();
            let mut snapshot = TaskSnapshot::new();
            snapshot.frozen = self.fin.is_frozen();
            self.chain.snapshot(b, &mut snapshot)?;
            let frozen = self.fin.on_snapshot(b.id);
            let sync = start.elapsed().saturating_sub(snapshot.downstream_wait);
            self.taken = Some(Taken {
                snapshot,
                sync,
                frozen,
            });
        }
        if let Some(done) = d.complete {
            let Some(mut t) = self.taken.take() else {
                return Ok(()); // unreachable by the handler's contract: snapshot comes first
            };
            t.snapshot.channel_state = self.capture.take(self.ctx.subtask);
            // An aligned completion may still carry what was read ahead for an earlier one.
            t.snapshot.unaligned = done.unaligned || !t.snapshot.channel_state.is_empty();
            t.snapshot.channel_state_uid.clone_from(&self.uid);
            let id = done.barrier.id;
            self.ctx
                .submit(id, t.snapshot, t.sync, done.alignment, t.frozen);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "unaligned_tests.rs"]
mod tests;

#[cfg(all(test, feature = "cluster"))]
#[path = "unaligned_remote_tests.rs"]
mod remote_tests;
