//! Replaying restored channel state (unaligned checkpoints, issue 13): the records that
//! were in flight when the checkpoint was taken go through the task's chain before it
//! processes any new input, so each channel's records are processed in the order they were
//! sent, exactly once (docs/architecture.md §3).
//!
//! An aligned task pushes them whole before its loop starts
//! ([`replay_channel_state`]). An unaligned task replays them a chunk at a time from
//! inside its loop ([`RestoredChannels`]), so a barrier announced during the replay is
//! taken at once: the restored records not replayed yet are still in flight, and become
//! part of that checkpoint's channel state, ahead of what the task reads later — without
//! that, the first checkpoint after a restore waited for the whole replay.

use std::collections::VecDeque;
use std::sync::Arc;

use super::TaskContext;
use crate::checkpoint::layout::{ChannelBatch, ChannelStateFile};
use crate::error::Result;
use crate::runtime::codec::RecordCodec;
use crate::runtime::event::Event;
use crate::runtime::output::Output;
use crate::runtime::unaligned::capture::{ChannelCapture, ChannelOrigin};

/// Pushes every batch of `files` (one subtask's channel state, any channel order: channels
/// are independent, and the upstream resends nothing that was saved) through `chain`,
/// decoding records with `codec`. A file that does not decode is an error naming it.
pub fn replay_channel_state<T>(
    files: &[ChannelStateFile],
    codec: &dyn RecordCodec<T>,
    chain: &mut dyn Output<T>,
    ctx: &TaskContext,
) -> Result<()> {
    for file in files {
        let what = describe(file);
        for b in &file.batches {
            let mut records = Vec::with_capacity(b.records as usize);
            codec.decode(&b.data, b.records as usize, &what, &mut records)?;
            ctx.on_records(records.len());
            if b.timestamped {
                let mut timestamps = b.timestamps.clone();
                chain.push_timestamped(&mut records, &mut timestamps)?;
            } else {
                chain.push(&mut records)?;
            }
        }
    }
    if !files.is_empty() {
        chain.flush()?;
    }
    Ok(())
}

fn describe(file: &ChannelStateFile) -> String {
    format!(
        "channel state of subtask {} channel {}",
        file.subtask, file.channel
    )
}

/// A restored batch not decoded yet: the input channel it is replayed as, the file it came
/// from (for errors) and the batch.
struct Encoded {
    channel: usize,
    what: Arc<str>,
    batch: ChannelBatch,
}

/// The restored channel state an unaligned input task has not replayed yet, handed out a
/// chunk at a time (decoded one batch at a time, as the replay reaches it), and recorded
/// as channel state by a snapshot taken before the replay ends. Pure: the task's loop
/// decides when to replay and when to snapshot.
///
/// Exactly once: every restored record is either handed out by [`next`](Self::next)
/// (processed before the snapshot, so in the operators' state) or recorded by
/// [`record_rest`](Self::record_rest) (in the checkpoint's channel state), never both —
/// and per input channel in the order it was saved, ahead of anything the task reads from
/// that channel later.
pub struct RestoredChannels<T> {
    codec: Arc<dyn RecordCodec<T>>,
    /// Chunks of the batch being replayed, decoded.
    decoded: VecDeque<(usize, Event<T>)>,
    /// The batches not reached yet.
    encoded: VecDeque<Encoded>,
}

impl<T> RestoredChannels<T> {
    /// The batches of `files`, each replayed as the input channel whose origin (edge and
    /// sender) matches the file's, else as the file's channel (at most the last one): at
    /// another parallelism the senders changed, and any channel keeps the records' order
    /// among themselves, which is all a later restore needs.
    pub fn new(
        files: Vec<ChannelStateFile>,
        origins: &[ChannelOrigin],
        codec: Arc<dyn RecordCodec<T>>,
    ) -> Self {
        let last = origins.len().saturating_sub(1);
        let mut encoded = VecDeque::new();
        for f in files {
            let channel = origins
                .iter()
                .position(|o| o.edge == f.edge && o.sender == f.sender)
                .unwrap_or((f.channel as usize).min(last));
            let what: Arc<str> = describe(&f).into();
            encoded.extend(f.batches.into_iter().map(|batch| Encoded {
                channel,
                what: what.clone(),
                batch,
            }));
        }
        RestoredChannels {
            codec,
            decoded: VecDeque::new(),
            encoded,
        }
    }

    /// Nothing restored, or all of it handed out.
    pub fn is_empty(&self) -> bool {
        self.decoded.is_empty() && self.encoded.is_empty()
    }

    /// The next at most `chunk` restored records and the channel they are replayed as,
    /// decoding the next batch when the previous one is handed out. A batch that does not
    /// decode is an error naming its file.
    pub fn next(&mut self, chunk: usize) -> Result<Option<(usize, Event<T>)>> {
        if self.decoded.is_empty() {
            let Some(e) = self.encoded.pop_front() else {
                return Ok(None);
            };
            let n = e.batch.records as usize;
            let mut records = Vec::with_capacity(n);
            self.codec.decode(&e.batch.data, n, &e.what, &mut records)?;
            let chunk = chunk.max(1);
            let mut timestamps = e.batch.timestamps.into_iter();
            let mut records = records.into_iter();
            while records.len() > 0 {
                let part: Vec<T> = records.by_ref().take(chunk).collect();
                let event = if e.batch.timestamped {
                    let ts = timestamps.by_ref().take(part.len()).collect();
                    Event::TimestampedBatch(part, ts)
                } else {
                    Event::Batch(part)
                };
                self.decoded.push_back((e.channel, event));
            }
        }
        Ok(self.decoded.pop_front())
    }

    /// Records what is not handed out yet as channel state of the checkpoint being
    /// snapshotted, per channel in replay order: the rest of the batch being replayed,
    /// then the batches not reached (as saved, without decoding them).
    pub fn record_rest(&self, capture: &mut ChannelCapture<T>) -> Result<()> {
        for (c, event) in &self.decoded {
            capture.record_event(*c, event)?;
        }
        for e in &self.encoded {
            capture.record_encoded(e.channel, e.batch.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
