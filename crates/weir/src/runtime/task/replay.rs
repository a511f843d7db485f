//! Replaying restored channel state (unaligned checkpoints, issue 13): the records that
//! were in flight when the checkpoint was taken go through the task's chain before it
//! reads any new input, so each channel's records are processed in the order they were
//! sent, exactly once (docs/architecture.md §3).

use super::TaskContext;
use crate::checkpoint::layout::ChannelStateFile;
use crate::error::Result;
use crate::runtime::codec::RecordCodec;
use crate::runtime::output::Output;

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
        let what = format!(
            "channel state of subtask {} channel {}",
            file.subtask, file.channel
        );
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
