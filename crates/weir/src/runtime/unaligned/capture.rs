//! What an input task keeps for a pending unaligned checkpoint, without threads: the
//! channel state it records ([`ChannelCapture`]) and the events it read ahead of processing
//! ([`ReadAhead`]); see the [module docs](super) for when each is used.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::checkpoint::layout::{ChannelBatch, ChannelStateFile};
use crate::error::Result;
use crate::runtime::codec::RecordCodec;
use crate::runtime::event::Event;

/// Where an input channel comes from, recorded in its channel-state file so a restore at
/// another parallelism can route its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelOrigin {
    /// The input edge (position among the task's inputs).
    pub edge: u32,
    /// The sending subtask on that edge.
    pub sender: u32,
}

/// The channel state recorded so far for the pending checkpoint, per input channel,
/// encoded as it is recorded (the records themselves go on to be processed).
pub struct ChannelCapture<T> {
    codec: Arc<dyn RecordCodec<T>>,
    origins: Vec<ChannelOrigin>,
    batches: Vec<Vec<ChannelBatch>>,
}

impl<T> ChannelCapture<T> {
    /// A capture for channels from `origins` (one per input channel, in channel order).
    pub fn new(codec: Arc<dyn RecordCodec<T>>, origins: Vec<ChannelOrigin>) -> Self {
        let batches = origins.iter().map(|_| Vec::new()).collect();
        ChannelCapture {
            codec,
            origins,
            batches,
        }
    }

    /// Records `records` (with `timestamps`, for a stream in event time) read from channel
    /// `c` as channel state. Empty batches are not recorded.
    pub fn record(&mut self, c: usize, records: &[T], timestamps: Option<&[u64]>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let mut data = Vec::new();
        self.codec.encode(records, &mut data)?;
        self.batches[c].push(ChannelBatch {
            records: records.len() as u32,
            timestamped: timestamps.is_some(),
            timestamps: timestamps.map(<[u64]>::to_vec).unwrap_or_default(),
            data,
        });
        Ok(())
    }

    /// Records `batch`, already encoded by this capture's codec (restored channel state not
    /// replayed yet), as channel state of channel `c`. Empty batches are not recorded.
    pub fn record_encoded(&mut self, c: usize, batch: ChannelBatch) {
        if batch.records > 0 {
            self.batches[c].push(batch);
        }
    }

    /// Records what `event` carries, if it carries records.
    pub fn record_event(&mut self, c: usize, event: &Event<T>) -> Result<()> {
        match event {
            Event::Batch(b) => self.record(c, b, None),
            Event::TimestampedBatch(b, t) => self.record(c, b, Some(t)),
            _ => Ok(()),
        }
    }

    /// Encoded bytes recorded so far (the checkpoint's persisted in-flight data).
    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.batches
            .iter()
            .flatten()
            .map(|b| (b.data.len() + 8 * b.timestamps.len()) as u64)
            .sum()
    }

    /// The files of subtask `subtask`'s channel state, one per channel that recorded
    /// anything, leaving the capture empty for the next checkpoint.
    pub fn take(&mut self, subtask: u32) -> Vec<ChannelStateFile> {
        let mut files = Vec::new();
        for (c, batches) in self.batches.iter_mut().enumerate() {
            if batches.is_empty() {
                continue;
            }
            files.push(ChannelStateFile {
                subtask,
                channel: c as u32,
                edge: self.origins[c].edge,
                sender: self.origins[c].sender,
                batches: std::mem::take(batches),
                schema: Some(self.codec.schema()),
            });
        }
        files
    }

    /// Drops what was recorded (the checkpoint was aborted).
    pub fn discard(&mut self) {
        self.batches.iter_mut().for_each(Vec::clear);
    }
}

/// Events read from draining channels ahead of processing, per channel in channel order.
/// A channel with events waiting here must not be read for processing: its events would
/// overtake them. It may still be drained further (read ahead, into here).
pub struct ReadAhead<T> {
    queues: Vec<VecDeque<Event<T>>>,
    /// Where the round-robin over channels resumes.
    next: usize,
    waiting: usize,
}

impl<T> ReadAhead<T> {
    /// Empty queues for `channels` channels.
    pub fn new(channels: usize) -> Self {
        ReadAhead {
            queues: (0..channels).map(|_| VecDeque::new()).collect(),
            next: 0,
            waiting: 0,
        }
    }

    /// Queues `event`, read ahead from channel `c`.
    pub fn push(&mut self, c: usize, event: Event<T>) {
        self.queues[c].push_back(event);
        self.waiting += 1;
    }

    /// Puts `event` back at the front of channel `c`'s queue: the rest of a batch whose
    /// processing stopped part-way, to be processed before anything else from `c`.
    pub fn push_front(&mut self, c: usize, event: Event<T>) {
        self.queues[c].push_front(event);
        self.waiting += 1;
    }

    /// Whether channel `c` has events waiting (it must not be read for processing).
    #[cfg(test)]
    pub fn holds(&self, c: usize) -> bool {
        !self.queues[c].is_empty()
    }

    /// Events waiting from channel `c`.
    #[inline]
    pub fn len_of(&self, c: usize) -> usize {
        self.queues[c].len()
    }

    /// The events waiting, channel by channel, each channel's in the order read: what a
    /// snapshot taken now must save as channel state, since they were read from their
    /// channels but are not processed yet.
    pub fn waiting(&self) -> impl Iterator<Item = (usize, &Event<T>)> {
        self.queues
            .iter()
            .enumerate()
            .flat_map(|(c, q)| q.iter().map(move |e| (c, e)))
    }

    /// Whether any channel has events waiting.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.waiting == 0
    }

    /// The next event to process and its channel, taking channels in turn so that no
    /// channel's backlog starves the others (per channel, in the order read).
    pub fn pop(&mut self) -> Option<(usize, Event<T>)> {
        if self.waiting == 0 {
            return None;
        }
        let n = self.queues.len();
        for i in 0..n {
            let c = (self.next + i) % n;
            if let Some(e) = self.queues[c].pop_front() {
                self.next = (c + 1) % n;
                self.waiting -= 1;
                return Some((c, e));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::codec::TypeRegistry;

    fn capture(channels: u32) -> ChannelCapture<u64> {
        let codec = TypeRegistry::with_common_types().codec::<u64>().unwrap();
        let origins = (0..channels)
            .map(|c| ChannelOrigin { edge: 0, sender: c })
            .collect();
        ChannelCapture::new(codec, origins)
    }

    #[test]
    fn recorded_batches_become_one_file_per_channel_that_recorded_anything() {
        let mut cap = capture(3);
        cap.record_event(0, &Event::Batch(vec![1, 2])).unwrap();
        cap.record_event(2, &Event::TimestampedBatch(vec![5], vec![50]))
            .unwrap();
        cap.record_event(2, &Event::Watermark(9)).unwrap();
        cap.record_event(2, &Event::Batch(vec![])).unwrap();
        cap.record_event(0, &Event::Batch(vec![3])).unwrap();
        assert!(cap.bytes() >= 4 + 8);
        let files = cap.take(7);
        assert_eq!(files.len(), 2);
        assert_eq!(
            (files[0].subtask, files[0].channel, files[0].sender),
            (7, 0, 0)
        );
        assert_eq!(files[0].records(), 3);
        assert_eq!(files[0].batches.len(), 2, "batches kept as read");
        assert_eq!((files[1].channel, files[1].records()), (2, 1));
        assert_eq!(files[1].batches[0].timestamps, [50]);
        for f in &files {
            f.check().unwrap();
        }
        assert!(cap.take(7).is_empty(), "taken");
    }

    #[test]
    fn an_aborted_checkpoint_leaves_nothing_behind() {
        let mut cap = capture(2);
        cap.record(1, &[4, 5], None).unwrap();
        cap.discard();
        assert_eq!(cap.bytes(), 0);
        assert!(cap.take(0).is_empty());
    }

    #[test]
    fn read_ahead_keeps_each_channels_order_and_takes_channels_in_turn() {
        let mut ra = ReadAhead::<u64>::new(3);
        assert!(ra.is_empty() && ra.pop().is_none());
        ra.push(0, Event::Batch(vec![1]));
        ra.push(0, Event::Batch(vec![2]));
        ra.push(2, Event::Batch(vec![10]));
        ra.push(0, Event::EndOfInput);
        assert!(ra.holds(0) && !ra.holds(1) && ra.holds(2));
        let order: Vec<String> = std::iter::from_fn(|| ra.pop())
            .map(|(c, e)| match e {
                Event::Batch(v) => format!("{c}:{}", v[0]),
                Event::EndOfInput => format!("{c}:end"),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(order, ["0:1", "2:10", "0:2", "0:end"]);
        assert!(ra.is_empty() && !ra.holds(0));
    }
}
