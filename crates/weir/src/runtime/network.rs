//! Network writers: the tail of a chain whose consumer runs in another task.
//!
//! A writer routes each record to one of the downstream subtasks' channels (the
//! *partitioner*), collects records per channel into batches and sends a batch when it is
//! full, when the buffer timeout passes ([`Output::flush`]) and always before a barrier or
//! end-of-input — so a barrier never overtakes a record (docs/architecture.md §2). Channels are bounded:
//! a full channel blocks the sender, which is how backpressure travels upstream.

use std::collections::VecDeque;
use std::hash::Hash;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use crate::error::Result;
use crate::runtime::debloat::{Debloat, Debloater};
use crate::runtime::event::{CheckpointBarrier, Event};
use crate::runtime::output::{Output, TaskSnapshot};
use crate::runtime::remote::Outlet;
use crate::runtime::watermark::WatermarkStatus;
use crate::runtime::BATCH_SIZE;
use crate::state::key_group::{key_group_of_hash, operator_index, stable_hash};

/// How records are spread over the downstream subtasks.
pub trait Router<T>: Send {
    /// The channel for `record`, in `0..channels`.
    fn route(&mut self, record: &T, channels: usize) -> usize;
}

/// Round-robin over all downstream subtasks (Flink's `rebalance`).
pub struct Rebalance {
    next: usize,
}

impl Rebalance {
    /// Starts at `start`, so parallel senders do not all hit subtask 0 first.
    pub fn new(start: usize) -> Self {
        Rebalance { next: start }
    }
}

impl<T> Router<T> for Rebalance {
    #[inline]
    fn route(&mut self, _: &T, channels: usize) -> usize {
        self.next = (self.next + 1) % channels;
        self.next
    }
}

/// By key group: the subtask that owns the record's key group (docs/architecture.md §5).
///
/// The owner of every key group is computed once, at construction, so routing a record
/// costs one hash and one table lookup — no division (see [`key_group_of_hash`]).
pub struct KeyGroupRouter<F> {
    key_fn: F,
    max_parallelism: u32,
    /// `owner[g]`: the downstream subtask of key group `g` ([`operator_index`]).
    owner: Box<[u32]>,
}

impl<F> KeyGroupRouter<F> {
    /// Routes by `key_fn` to `channels` downstream subtasks sharing `max_parallelism` key
    /// groups.
    pub fn new(key_fn: F, max_parallelism: u32, channels: usize) -> Self {
        let owner = (0..max_parallelism)
            .map(|g| operator_index(g, max_parallelism, channels as u32))
            .collect();
        KeyGroupRouter {
            key_fn,
            max_parallelism,
            owner,
        }
    }
}

impl<T, K: Hash, F: Fn(&T) -> K + Send> Router<T> for KeyGroupRouter<F> {
    #[inline]
    fn route(&mut self, record: &T, channels: usize) -> usize {
        let g = key_group_of_hash(stable_hash(&(self.key_fn)(record)), self.max_parallelism);
        let c = self.owner[g as usize] as usize;
        debug_assert!(c < channels, "router built for {channels} channels");
        c
    }
}

/// The downstream channels of a writer with one open batch per channel.
///
/// The open batches are all of one kind: with timestamps (event time) or without. A push of
/// the other kind first sends them, so a batch never mixes the two and the processing-time
/// path never touches a timestamp.
struct Channels<T> {
    senders: Vec<Outlet<T>>,
    /// Per channel, events a source could not send while a barrier was waiting
    /// ([`crate::runtime::load::send_or_defer`]): sent, in order, before anything else on
    /// that channel. Empty except in source tasks of unaligned jobs.
    pending: Vec<VecDeque<Event<T>>>,
    /// Per channel, the events its consumer read ahead and holds (unaligned checkpoints),
    /// which count against the channel's capacity; empty when there are none.
    credits: Vec<Arc<AtomicUsize>>,
    /// Sends of a barrier's flush ignore the credits: the marker must not wait for the
    /// consumer to process what it read ahead (at most one batch per channel over).
    bypass_credits: bool,
    /// Sends of a barrier's or end-of-input's flush are never deferred: the barrier is
    /// what a deferred send made room for (and an unaligned one's consumer, announced
    /// first, reads ahead), and nothing may stay behind an end-of-input.
    no_defer: bool,
    /// Sends of a checkpoint barrier's flush may go over a remote channel's permits (at
    /// most that flush over), as the local ones go past the read-ahead credit: the marker
    /// must not wait for the consumer to process what it read ahead.
    over_bound: bool,
    buffers: Vec<Vec<T>>,
    /// Per channel, the timestamps of the open batch (empty unless `timestamped`).
    timestamps: Vec<Vec<u64>>,
    /// Whether the open batches carry timestamps.
    timestamped: bool,
    /// Per channel, the records at which its open batch is sent: [`BATCH_SIZE`], or less
    /// while buffer debloating shrinks the batches of a backpressured channel.
    limits: Vec<usize>,
    /// Buffer debloating ([`crate::runtime::debloat`]); `None`: every batch is full-size.
    debloat: Option<Debloater>,
}

impl<T> Channels<T> {
    fn new(senders: Vec<Outlet<T>>) -> Self {
        // No room is taken before a channel carries a record: a writer has one channel per
        // downstream subtask, so a whole batch for each up front would cost memory in
        // proportion to p × p (8.6 GB of u64 batches at p = 512) whatever the data.
        let buffers = senders.iter().map(|_| Vec::new()).collect();
        let timestamps = senders.iter().map(|_| Vec::new()).collect();
        let n = senders.len();
        Channels {
            pending: senders.iter().map(|_| VecDeque::new()).collect(),
            credits: Vec::new(),
            bypass_credits: false,
            no_defer: false,
            over_bound: false,
            senders,
            buffers,
            timestamps,
            timestamped: false,
            limits: vec![BATCH_SIZE; n],
            debloat: None,
        }
    }

    /// Records that fill about one open batch per channel ([`Output::batch_hint`]):
    /// [`BATCH_SIZE`] unless debloating cut the batches of some channel. A writer that
    /// `spreads` its records (each to one channel) fills them all with their sum; one that
    /// sends each record to every channel (broadcast) fills the smallest with its limit.
    fn batch_hint(&self, spreads: bool) -> usize {
        match (&self.debloat, spreads) {
            (None, _) => BATCH_SIZE,
            (Some(_), true) => self.limits.iter().sum::<usize>().min(BATCH_SIZE),
            (Some(_), false) => self.limits.iter().copied().min().unwrap_or(BATCH_SIZE),
        }
    }

    /// Sizes batches by buffer debloating from now on.
    fn set_debloat(&mut self, d: Debloat) {
        let n = self.senders.len();
        self.debloat = Some(Debloater::new(d, n, std::time::Instant::now()));
    }

    /// Makes the open batches of kind `timestamped`, sending those of the other kind.
    #[inline]
    fn set_mode(&mut self, timestamped: bool) -> Result<()> {
        if self.timestamped != timestamped {
            self.flush()?;
            self.timestamped = timestamped;
        }
        Ok(())
    }

    /// Appends `r` with timestamp `t` to channel `c`'s batch (in timestamped mode), sending
    /// the batch when full.
    #[inline]
    fn push_timestamped_to(&mut self, c: usize, r: T, t: u64) -> Result<()> {
        let buf = &mut self.buffers[c];
        buf.push(r);
        self.timestamps[c].push(t);
        if buf.len() >= self.limits[c] {
            self.send_open_batch(c)?;
        }
        Ok(())
    }

    /// Appends `r` to channel `c`'s batch, sending the batch when full.
    #[inline]
    fn push_to(&mut self, c: usize, r: T) -> Result<()> {
        let buf = &mut self.buffers[c];
        buf.push(r);
        if buf.len() >= self.limits[c] {
            self.send_open_batch(c)?;
        }
        Ok(())
    }

    /// Sends channel `c`'s open batch (of the current kind), if it has records.
    fn send_open_batch(&mut self, c: usize) -> Result<()> {
        let buf = &mut self.buffers[c];
        if buf.is_empty() {
            // What a deferred send kept goes out with the next flush at the latest.
            return match self.pending[c].is_empty() {
                true => Ok(()),
                false => self.send_pending(c),
            };
        }
        // The next batch starts with the room this one needed: a channel that fills its
        // batches keeps a whole batch's room (W1's path: the same allocation as ever), one
        // flushed with a few records keeps that few, so memory follows the data in flight.
        let room = buf.len();
        let full = std::mem::replace(buf, Vec::with_capacity(room));
        let event = if self.timestamped {
            let stamps = std::mem::replace(&mut self.timestamps[c], Vec::with_capacity(room));
            Event::TimestampedBatch(full, stamps)
        } else {
            Event::Batch(full)
        };
        self.send_on(c, event)
    }

    /// Sends `e` on channel `c` after what is pending there; what cannot be sent while a
    /// barrier waits stays pending ([`crate::runtime::load::send_or_defer`]).
    fn send_on(&mut self, c: usize, e: Event<T>) -> Result<()> {
        if let Some(d) = &mut self.debloat {
            if let Event::Batch(b) | Event::TimestampedBatch(b, _) = &e {
                // Per batch, never per record: whether the consumer is behind, and the
                // clock.
                let behind = self.senders[c].is_full_now();
                let now = std::time::Instant::now();
                d.on_send(c, b.len(), behind, now, &mut self.limits);
            }
        }
        self.pending[c].push_back(e);
        self.send_pending(c)
    }

    /// Sends what is pending on channel `c`, in order, until it is sent or a send is
    /// deferred again.
    fn send_pending(&mut self, c: usize) -> Result<()> {
        while let Some(e) = self.pending[c].pop_front() {
            let records = match &e {
                Event::Batch(b) | Event::TimestampedBatch(b, _) => b.len(),
                _ => 0,
            };
            let credit = match self.credits.get(c) {
                Some(h) if !self.bypass_credits => Some(h.as_ref()),
                _ => None,
            };
            // A local receiver is gone only when the job is being cancelled.
            let over = self.over_bound;
            let sent = self.senders[c].send(e, records, self.no_defer, credit, over);
            match sent {
                Ok(None) => {}
                Ok(Some(e)) => {
                    self.pending[c].push_front(e);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether every channel with a read-ahead credit has room for one more event under
    /// it ([`Output::has_room`]); true when there are no credits (not unaligned). A remote
    /// channel's credit is its permits: its consumer keeps those of what it read ahead.
    fn has_room(&self) -> bool {
        self.credits
            .iter()
            .zip(&self.senders)
            .all(|(h, s)| match s.local() {
                Some(s) => crate::runtime::load::has_credit_room(s, h),
                None => !s.remote_full(),
            })
    }

    /// Adds a send on each full local channel, and the permit watch of each remote one out
    /// of permits, to `sel` ([`Output::watch_room`]); false when a local channel is short
    /// of room only because of its credit (no send can wake for it).
    fn watch_room<'a>(&'a self, sel: &mut crossbeam_channel::Select<'a>) -> bool {
        let mut watched = true;
        for (h, s) in self.credits.iter().zip(&self.senders) {
            let Some(local) = s.local() else {
                // Permits come back on the exchange's stream, whose reader readies this
                // when they do.
                if let Some(room) = s.watch_remote_room() {
                    sel.recv(room);
                }
                continue;
            };
            let s = local;
            if crate::runtime::load::has_credit_room(s, h) {
                continue;
            }
            if s.is_full() {
                sel.send(s);
            } else {
                watched = false;
            }
        }
        watched
    }

    /// Sends every partly filled batch.
    fn flush(&mut self) -> Result<()> {
        (0..self.senders.len()).try_for_each(|c| self.send_open_batch(c))
    }

    /// Flushes, then sends `make()` on every channel (barriers, end-of-input): nothing
    /// buffered can be overtaken.
    fn flush_then(&mut self, make: impl Fn() -> Event<T>) -> Result<()> {
        self.bypass_credits = true;
        let sent = self
            .flush()
            .and_then(|()| (0..self.senders.len()).try_for_each(|c| self.send_on(c, make())));
        self.bypass_credits = false;
        sent
    }
}

/// The control half of [`Output`] for writers, which hold their channels in `self.channels`.
macro_rules! writer_control {
    () => {
        fn snapshot(&mut self, b: CheckpointBarrier, s: &mut TaskSnapshot) -> Result<()> {
            let start = std::time::Instant::now();
            self.channels.no_defer = true;
            // Unaligned only: an aligned consumer reads nothing ahead to wait for.
            self.channels.over_bound = !self.channels.credits.is_empty();
            let sent = self.channels.flush_then(|| Event::Barrier(b));
            self.channels.no_defer = false;
            self.channels.over_bound = false;
            s.downstream_wait += start.elapsed();
            sent
        }
        fn flush(&mut self) -> Result<()> {
            self.channels.flush()
        }
        fn end_of_input(&mut self) -> Result<()> {
            self.channels.no_defer = true;
            let sent = self.channels.flush_then(|| Event::EndOfInput);
            self.channels.no_defer = false;
            sent
        }
        fn on_watermark(&mut self, watermark: u64) -> Result<()> {
            self.channels.flush_then(|| Event::Watermark(watermark))
        }
        fn on_watermark_status(&mut self, status: WatermarkStatus) -> Result<()> {
            self.channels.flush_then(|| Event::WatermarkStatus(status))
        }
        fn on_processing_time(&mut self, _: u64) -> Result<()> {
            Ok(())
        }
        fn notify_complete(&mut self, _: u64) -> Result<()> {
            Ok(())
        }
        fn notify_aborted(&mut self, _: u64) -> Result<()> {
            Ok(())
        }
        fn set_read_ahead_credits(&mut self, credits: Vec<Arc<AtomicUsize>>) {
            self.channels.credits = credits;
        }
        fn set_debloat(&mut self, d: Debloat) {
            self.channels.set_debloat(d);
        }
        fn has_room(&self) -> bool {
            self.channels.has_room()
        }
        fn watch_room<'a>(&'a self, sel: &mut crossbeam_channel::Select<'a>) -> bool {
            self.channels.watch_room(sel)
        }
    };
}

/// Writes to downstream channels through a [`Router`] (forward = one channel, any router).
pub struct RoutedWriter<T, R> {
    channels: Channels<T>,
    router: R,
}

impl<T, R> RoutedWriter<T, R> {
    /// A writer over `senders` (one per downstream subtask, or one for forward): local
    /// crossbeam senders or [`Outlet`]s.
    pub fn new(senders: Vec<impl Into<Outlet<T>>>, router: R) -> Self {
        RoutedWriter {
            channels: Channels::new(senders.into_iter().map(Into::into).collect()),
            router,
        }
    }
}

impl<T: Send, R: Router<T>> Output<T> for RoutedWriter<T, R> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        self.channels.set_mode(false)?;
        let n = self.channels.senders.len();
        if n == 1 && self.channels.limits[0] >= BATCH_SIZE {
            let buf = &mut self.channels.buffers[0];
            if buf.is_empty() && batch.len() >= BATCH_SIZE / 2 {
                // Large enough to ship as it is: hand the vector over, no copy.
                let full = std::mem::replace(batch, Vec::with_capacity(batch.capacity()));
                return self.channels.send_on(0, Event::Batch(full));
            }
            buf.append(batch);
            if buf.len() >= BATCH_SIZE {
                self.channels.send_open_batch(0)?;
            }
            return Ok(());
        }
        for r in batch.drain(..) {
            // Also one channel whose batches are debloated (cut record by record): every
            // router sends to channel 0 of one.
            let c = self.router.route(&r, n);
            self.channels.push_to(c, r)?;
        }
        Ok(())
    }
    fn push_timestamped(&mut self, batch: &mut Vec<T>, timestamps: &mut Vec<u64>) -> Result<()> {
        self.channels.set_mode(true)?;
        let n = self.channels.senders.len();
        if n == 1
            && self.channels.limits[0] >= BATCH_SIZE
            && self.channels.buffers[0].is_empty()
            && batch.len() >= BATCH_SIZE / 2
        {
            // Large enough to ship as it is: hand the vectors over, no copy.
            let full = std::mem::replace(batch, Vec::with_capacity(batch.capacity()));
            let stamps = std::mem::replace(timestamps, Vec::with_capacity(full.len()));
            return self
                .channels
                .send_on(0, Event::TimestampedBatch(full, stamps));
        }
        for (r, t) in batch.drain(..).zip(timestamps.drain(..)) {
            let c = if n == 1 { 0 } else { self.router.route(&r, n) };
            self.channels.push_timestamped_to(c, r, t)?;
        }
        Ok(())
    }
    fn batch_hint(&self) -> usize {
        self.channels.batch_hint(true)
    }
    writer_control!();
}

/// Sends every record to every downstream subtask (Flink's `broadcast`).
pub struct BroadcastWriter<T> {
    channels: Channels<T>,
}

impl<T> BroadcastWriter<T> {
    /// A writer over one sender per downstream subtask: local crossbeam senders or
    /// [`Outlet`]s.
    pub fn new(senders: Vec<impl Into<Outlet<T>>>) -> Self {
        BroadcastWriter {
            channels: Channels::new(senders.into_iter().map(Into::into).collect()),
        }
    }
}

impl<T: Clone + Send> Output<T> for BroadcastWriter<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        self.channels.set_mode(false)?;
        for r in batch.drain(..) {
            for c in 0..self.channels.senders.len() {
                self.channels.push_to(c, r.clone())?;
            }
        }
        Ok(())
    }
    fn push_timestamped(&mut self, batch: &mut Vec<T>, timestamps: &mut Vec<u64>) -> Result<()> {
        self.channels.set_mode(true)?;
        for (r, t) in batch.drain(..).zip(timestamps.drain(..)) {
            for c in 0..self.channels.senders.len() {
                self.channels.push_timestamped_to(c, r.clone(), t)?;
            }
        }
        Ok(())
    }
    fn batch_hint(&self) -> usize {
        self.channels.batch_hint(false)
    }
    writer_control!();
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;
