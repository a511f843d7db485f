//! Network writers: the tail of a chain whose consumer runs in another task.
//!
//! A writer routes each record to one of the downstream subtasks' channels (the
//! *partitioner*), collects records per channel into batches and sends a batch when it is
//! full, when the buffer timeout passes ([`Output::flush`]) and always before a barrier or
//! end-of-input — so a barrier never overtakes a record (DESIGN.md §2). Channels are bounded:
//! a full channel blocks the sender, which is how backpressure travels upstream.

use std::hash::Hash;

use crossbeam_channel::Sender;

use crate::error::{Error, Result};
use crate::runtime::event::{CheckpointBarrier, Event};
use crate::runtime::output::{Output, TaskSnapshot};
use crate::runtime::BATCH_SIZE;
use crate::state::key_group::{key_group, operator_index};

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

/// By key group: the subtask that owns the record's key group (DESIGN.md §5).
pub struct KeyGroupRouter<F> {
    /// Extracts the key.
    pub key_fn: F,
    /// The job's max parallelism.
    pub max_parallelism: u32,
}

impl<T, K: Hash, F: Fn(&T) -> K + Send> Router<T> for KeyGroupRouter<F> {
    #[inline]
    fn route(&mut self, record: &T, channels: usize) -> usize {
        let g = key_group(&(self.key_fn)(record), self.max_parallelism);
        operator_index(g, self.max_parallelism, channels as u32) as usize
    }
}

/// Writes to downstream channels through a [`Router`] (forward = one channel, any router).
pub struct RoutedWriter<T, R> {
    senders: Vec<Sender<Event<T>>>,
    buffers: Vec<Vec<T>>,
    router: R,
}

impl<T, R> RoutedWriter<T, R> {
    /// A writer over `senders` (one per downstream subtask, or one for forward).
    pub fn new(senders: Vec<Sender<Event<T>>>, router: R) -> Self {
        let buffers = senders
            .iter()
            .map(|_| Vec::with_capacity(BATCH_SIZE))
            .collect();
        RoutedWriter {
            senders,
            buffers,
            router,
        }
    }
}

fn send<T>(s: &Sender<Event<T>>, e: Event<T>) -> Result<()> {
    // The receiver is gone only when the job is being cancelled.
    s.send(e).map_err(|_| Error::Cancelled)
}

fn send_batch<T>(s: &Sender<Event<T>>, buf: &mut Vec<T>) -> Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let full = std::mem::replace(buf, Vec::with_capacity(BATCH_SIZE));
    send(s, Event::Batch(full))
}

/// Sends every partly filled batch, then `event` on every channel.
fn flush_all<T>(senders: &[Sender<Event<T>>], buffers: &mut [Vec<T>]) -> Result<()> {
    for (s, b) in senders.iter().zip(buffers.iter_mut()) {
        send_batch(s, b)?;
    }
    Ok(())
}

fn broadcast_event<T>(senders: &[Sender<Event<T>>], make: impl Fn() -> Event<T>) -> Result<()> {
    senders.iter().try_for_each(|s| send(s, make()))
}

impl<T: Send, R: Router<T>> Output<T> for RoutedWriter<T, R> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        let n = self.senders.len();
        if n == 1 {
            let buf = &mut self.buffers[0];
            if buf.is_empty() && batch.len() >= BATCH_SIZE / 2 {
                // Large enough to ship as it is: hand the vector over, no copy.
                let full = std::mem::replace(batch, Vec::with_capacity(batch.capacity()));
                return send(&self.senders[0], Event::Batch(full));
            }
            buf.append(batch);
            if buf.len() >= BATCH_SIZE {
                send_batch(&self.senders[0], buf)?;
            }
            return Ok(());
        }
        for r in batch.drain(..) {
            let c = self.router.route(&r, n);
            let buf = &mut self.buffers[c];
            buf.push(r);
            if buf.len() >= BATCH_SIZE {
                send_batch(&self.senders[c], buf)?;
            }
        }
        Ok(())
    }
    fn snapshot(&mut self, b: CheckpointBarrier, _: &mut TaskSnapshot) -> Result<()> {
        flush_all(&self.senders, &mut self.buffers)?;
        broadcast_event(&self.senders, || Event::Barrier(b))
    }
    fn flush(&mut self) -> Result<()> {
        flush_all(&self.senders, &mut self.buffers)
    }
    fn end_of_input(&mut self) -> Result<()> {
        flush_all(&self.senders, &mut self.buffers)?;
        broadcast_event(&self.senders, || Event::EndOfInput)
    }
    fn notify_complete(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
    fn notify_aborted(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
}

/// Sends every record to every downstream subtask (Flink's `broadcast`).
pub struct BroadcastWriter<T> {
    senders: Vec<Sender<Event<T>>>,
    buffers: Vec<Vec<T>>,
}

impl<T> BroadcastWriter<T> {
    /// A writer over one sender per downstream subtask.
    pub fn new(senders: Vec<Sender<Event<T>>>) -> Self {
        let buffers = senders
            .iter()
            .map(|_| Vec::with_capacity(BATCH_SIZE))
            .collect();
        BroadcastWriter { senders, buffers }
    }
}

impl<T: Clone + Send> Output<T> for BroadcastWriter<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        for (s, buf) in self.senders.iter().zip(self.buffers.iter_mut()) {
            buf.extend(batch.iter().cloned());
            if buf.len() >= BATCH_SIZE {
                send_batch(s, buf)?;
            }
        }
        batch.clear();
        Ok(())
    }
    fn snapshot(&mut self, b: CheckpointBarrier, _: &mut TaskSnapshot) -> Result<()> {
        flush_all(&self.senders, &mut self.buffers)?;
        broadcast_event(&self.senders, || Event::Barrier(b))
    }
    fn flush(&mut self) -> Result<()> {
        flush_all(&self.senders, &mut self.buffers)
    }
    fn end_of_input(&mut self) -> Result<()> {
        flush_all(&self.senders, &mut self.buffers)?;
        broadcast_event(&self.senders, || Event::EndOfInput)
    }
    fn notify_complete(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
    fn notify_aborted(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain<T>(r: &crossbeam_channel::Receiver<Event<T>>) -> Vec<Event<T>> {
        r.try_iter().collect()
    }

    #[test]
    fn barrier_follows_every_record_sent_before_it() {
        let (tx0, rx0) = crossbeam_channel::unbounded();
        let (tx1, rx1) = crossbeam_channel::unbounded();
        let mut w = RoutedWriter::new(
            vec![tx0, tx1],
            KeyGroupRouter {
                key_fn: |x: &u64| *x,
                max_parallelism: 128,
            },
        );
        let mut batch: Vec<u64> = (0..10).collect();
        w.push(&mut batch).unwrap();
        assert!(batch.is_empty());
        let b = CheckpointBarrier {
            id: 1,
            timestamp_ms: 0,
        };
        w.snapshot(b, &mut TaskSnapshot { parts: vec![] }).unwrap();
        let mut seen = Vec::new();
        for (i, rx) in [rx0, rx1].iter().enumerate() {
            let events = drain(rx);
            assert!(matches!(events.last(), Some(Event::Barrier(x)) if x.id == 1));
            for e in &events[..events.len() - 1] {
                let Event::Batch(v) = e else { panic!() };
                for x in v {
                    let g = key_group(x, 128);
                    assert_eq!(operator_index(g, 128, 2) as usize, i);
                    seen.push(*x);
                }
            }
        }
        seen.sort();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn batches_are_sent_when_full() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut w = RoutedWriter::new(vec![tx], Rebalance::new(0));
        for i in 0..BATCH_SIZE as u64 + 5 {
            w.push(&mut vec![i]).unwrap();
        }
        let events = drain(&rx);
        assert_eq!(events.len(), 1);
        w.end_of_input().unwrap();
        let events = drain(&rx);
        assert!(matches!(&events[..], [Event::Batch(v), Event::EndOfInput] if v.len() == 5));
    }

    #[test]
    fn broadcast_reaches_everyone() {
        let (tx0, rx0) = crossbeam_channel::unbounded();
        let (tx1, rx1) = crossbeam_channel::unbounded();
        let mut w = BroadcastWriter::new(vec![tx0, tx1]);
        w.push(&mut vec![1u8, 2]).unwrap();
        w.flush().unwrap();
        for rx in [rx0, rx1] {
            assert!(matches!(&drain(&rx)[..], [Event::Batch(v)] if v == &vec![1, 2]));
        }
    }
}
