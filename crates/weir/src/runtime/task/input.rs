//! The input task's loop: reads its channels, aligns barriers, handles control messages
//! between batches.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select};

use super::{Control, TaskContext};
use crate::error::{Error, Result};
use crate::runtime::alignment::{BarrierAction, BarrierHandler};
use crate::runtime::event::{BarrierKind, CheckpointBarrier, Event};
use crate::runtime::finishing::Finishing;
use crate::runtime::output::{Output, TaskSnapshot};
use crate::runtime::remote::Remotes;
use crate::runtime::watermark::valve::ValveOutput;
use crate::runtime::watermark::{StatusWatermarkValve, WatermarkStatus};

/// Handles a control message in an input task; returns `Err(Cancelled)` on cancel.
pub(super) fn on_control<T>(
    c: Control,
    chain: &mut dyn Output<T>,
    fin: &mut Finishing,
) -> Result<()> {
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

/// Per input channel: how far its sender got, which decides whether its closing is orderly.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ChannelState {
    /// It delivered end-of-input.
    pub(super) ended: bool,
    /// It delivered the barrier of this stopping savepoint (and nothing will follow unless
    /// the savepoint is aborted).
    pub(super) stopped_at: Option<u64>,
    /// Its sender is gone.
    pub(super) closed: bool,
}

/// Runs an input task over local channels until its end is committed and every input
/// channel closed, or the task is cancelled (the tests' entry; tasks use
/// [`run_input_with`]).
#[cfg(test)]
pub fn run_input<T: Send>(
    inputs: Vec<Receiver<Event<T>>>,
    chain: Box<dyn Output<T>>,
    ctx: TaskContext,
) -> Result<()> {
    run_input_with(inputs, Remotes::none(), chain, ctx)
}

/// [`run_input`] where some channels may come from other workers (`remotes`): their
/// permits go back as the task consumes, and a lost peer fails the task naming it.
pub(crate) fn run_input_with<T: Send>(
    inputs: Vec<Receiver<Event<T>>>,
    remotes: Remotes<T>,
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
    // Where the next non-blocking pass over many inputs starts ([`scan`]).
    let mut cursor = 0;
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
        let got = match scan(&ctx, &inputs, &readable, &mut cursor) {
            Some(got) => got,
            None => {
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
                match op.index() {
                    0 => Got::Control(op.recv(&ctx.control).map_err(|_| Error::Cancelled)?),
                    i => {
                        let c = readable[i - 1];
                        Got::Input(c, op.recv(&inputs[c]).ok())
                    }
                }
            }
        };
        let (c, event) = match got {
            Got::Input(c, event) => (c, event),
            Got::Control(c) => {
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
        };
        let Some(event) = event else {
            // The sender is gone: orderly only after end-of-input or a stopping barrier.
            // Otherwise a neighbour task ended (cancelled), or a remote peer was lost.
            if !channels[c].ended && channels[c].stopped_at.is_none() {
                return Err(remotes.closed_early(c));
            }
            channels[c].closed = true;
            dirty = true;
            let action = handler.on_channel_closed(c);
            act(action, chain.as_mut(), &ctx, &mut fin)?;
            continue;
        };
        remotes.consumed(c, &event);
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

/// What the loop read: a control message, or channel `c`'s next event (`None`: its sender
/// is gone).
enum Got<T> {
    Control(Control),
    Input(usize, Option<Event<T>>),
}

/// Inputs from which a task first looks for a ready channel without blocking.
const SCAN_FROM: usize = 16;

/// With many inputs (a keyed edge at parallelism p gives each task p of them), registering
/// every channel with a `Select` for each event costs O(p) per event, O(p³) over a job; a
/// non-blocking pass from where the last one stopped finds a ready channel in O(1)
/// amortized. Control messages come first. `None` when nothing is ready (then the task
/// blocks on a `Select`) and always below [`SCAN_FROM`] inputs, so a task with a few
/// inputs (W1's) runs exactly as before.
fn scan<T>(
    ctx: &TaskContext,
    inputs: &[Receiver<Event<T>>],
    readable: &[usize],
    cursor: &mut usize,
) -> Option<Got<T>> {
    if readable.len() < SCAN_FROM {
        return None;
    }
    if let Ok(c) = ctx.control.try_recv() {
        return Some(Got::Control(c));
    }
    for k in 0..readable.len() {
        let i = (*cursor + k) % readable.len();
        let c = readable[i];
        match inputs[c].try_recv() {
            Ok(event) => {
                *cursor = i + 1;
                return Some(Got::Input(c, Some(event)));
            }
            Err(crossbeam_channel::TryRecvError::Disconnected) => {
                *cursor = i + 1;
                return Some(Got::Input(c, None));
            }
            Err(crossbeam_channel::TryRecvError::Empty) => {}
        }
    }
    None
}

/// Forwards what the watermark valve decided: becoming active, then the new watermark, then
/// becoming idle.
pub(super) fn forward<T>(out: ValveOutput, chain: &mut dyn Output<T>) -> Result<()> {
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
        snap.frozen = fin.is_frozen();
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
