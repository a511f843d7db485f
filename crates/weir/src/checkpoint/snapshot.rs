//! What a task captured synchronously at a barrier, handed to the [`writer`](super::writer)
//! to be written off the processing thread.
//!
//! The checkpoint layer owns these types because it consumes them; the runtime's operators
//! fill them ([`crate::runtime::output::Output::snapshot`]) and re-export them from
//! `runtime::output`.

use crate::checkpoint::layout::ChannelStateFile;
use crate::state::keyed::KeyedSnapshot;
use crate::state::operator::OperatorStateSnapshot;

/// What one operator captured synchronously at a barrier.
pub struct OperatorSnapshotPart {
    /// The operator's uid.
    pub uid: String,
    /// Its operator (non-keyed) state.
    pub operator_state: OperatorStateSnapshot,
    /// Its keyed state, for keyed operators.
    pub keyed: Option<KeyedSnapshot>,
}

/// What a whole task captured synchronously at a barrier; written asynchronously.
#[derive(Default)]
pub struct TaskSnapshot {
    /// Parts, one per stateful operator of the chain.
    pub parts: Vec<OperatorSnapshotPart>,
    /// Time the chain's network writers spent forwarding the barrier (and the records
    /// buffered ahead of it) into full downstream channels. That is backpressure, not
    /// snapshot work — the task would wait as long to send a batch of records — so the
    /// reported synchronous pause leaves it out. Without this, a source upstream of a slow
    /// keyed task reported pauses that grew with the keyed task's state (0.4 ms at 10 M
    /// keys against 14 µs at 100 k), though it has none (BENCHMARKS.md).
    pub downstream_wait: std::time::Duration,
    /// (Source tasks) the source's uid and the records it emitted in this attempt before
    /// the barrier; the executor adds the restored position to get the checkpoint's
    /// [`SourceProgress`](crate::checkpoint::metadata::SourceProgress).
    pub source: Option<(String, u64)>,
    /// (Unaligned checkpoints) the records in flight the task saved: one file per input
    /// channel that had any, recorded between the snapshot and the channel's marker.
    pub channel_state: Vec<ChannelStateFile>,
    /// The uid of the task's head operator, whose folder holds its channel-state files
    /// (`<uid>/ch-<subtask>-<channel>`); set with [`channel_state`](Self::channel_state).
    pub channel_state_uid: String,
    /// Whether the snapshot was taken unaligned (it may still have no channel state).
    pub unaligned: bool,
    /// Set by the task before its operators snapshot: its state is frozen (input ended or
    /// stopping), so this snapshot is encoded once and stands in for the task in later
    /// checkpoints. Keyed state is then captured in full, never as an incremental delta.
    pub frozen: bool,
}

impl TaskSnapshot {
    /// An empty snapshot for the chain to fill.
    pub fn new() -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for TaskSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let uids: Vec<&str> = self.parts.iter().map(|p| p.uid.as_str()).collect();
        f.debug_struct("TaskSnapshot")
            .field("operators", &uids)
            .finish()
    }
}
