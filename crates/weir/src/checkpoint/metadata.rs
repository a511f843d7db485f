//! The `_metadata` of a checkpoint, which names the state files (docs/architecture.md §6;
//! the files themselves are laid out by [`super::layout`]).
//!
//! All structures are encoded with postcard inside the checksummed envelope of
//! [`super::format`]. The metadata names every file by a path *relative to the checkpoint
//! folder*, so a checkpoint folder can be copied or moved and still restores.

use serde::{Deserialize, Serialize};

use crate::checkpoint::barrier::{BarrierKind, CheckpointingMode};
use crate::state::key_group::KeyGroupRange;
use crate::state::schema::{OperatorSchemas, StateSchema};

/// A state file, relative to its checkpoint folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// Path relative to the checkpoint folder (`<uid>/<file>`).
    pub path: String,
    /// Size in bytes, envelope included.
    pub size: u64,
}

/// The keyed state one subtask wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedFileRef {
    /// The file.
    pub file: FileRef,
    /// The key groups it covers.
    pub range: KeyGroupRange,
    /// Entries across all its states.
    pub entries: u64,
}

/// The state one subtask of one operator wrote for a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskStateMeta {
    /// The subtask's index.
    pub subtask: u32,
    /// Its operator state, if it had any.
    pub operator_state: Option<FileRef>,
    /// Its keyed state, for keyed operators.
    pub keyed_state: Option<KeyedFileRef>,
}

/// Everything a checkpoint holds for one operator, found by its uid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorMeta {
    /// The operator's uid.
    pub uid: String,
    /// Its parallelism when the checkpoint was taken.
    pub parallelism: u32,
    /// The subtasks that wrote state.
    pub subtasks: Vec<SubtaskStateMeta>,
}

/// Statistics of one task's part of a checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCheckpointStats {
    /// Time the task stopped processing to capture its state (microseconds).
    pub sync_micros: u64,
    /// Time spent writing the captured state in the background (microseconds).
    pub async_micros: u64,
    /// Time between the first and last barrier at this task (microseconds).
    pub alignment_micros: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// The content of `chk-<n>/_metadata`. Its presence makes the checkpoint complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// The checkpoint id.
    pub checkpoint_id: u64,
    /// The job's name (its folder under the checkpoint directory).
    pub job_name: String,
    /// When the checkpoint was triggered (ms since the Unix epoch).
    pub trigger_timestamp_ms: u64,
    /// When its last acknowledgement arrived (ms since the Unix epoch).
    pub completed_timestamp_ms: u64,
    /// The checkpointing mode it was taken in.
    pub mode: CheckpointingMode,
    /// The job's max parallelism: the number of key groups. A restore must use the same.
    pub max_parallelism: u32,
    /// Per-operator state.
    pub operators: Vec<OperatorMeta>,
    /// Task statistics: bytes summed, durations the maximum over tasks.
    pub stats: TaskCheckpointStats,
    /// Per task (in task order): its display name and statistics.
    pub tasks: Vec<TaskStatsMeta>,
    /// Checkpoint or savepoint (appended in metadata layout 2).
    pub snapshot: SnapshotKind,
    /// The Weir version that wrote it, so a restore can name what it came from.
    pub weir_version: String,
    /// Per source operator, how many records its subtasks had emitted in total up to the
    /// barrier: the position every source rewinds to, counted in records (appended in
    /// metadata layout 3; empty for older checkpoints). A restore reports it, so a run can
    /// prove it resumed there rather than from the beginning.
    pub sources: Vec<SourceProgress>,
    /// The id of the run that wrote the checkpoint (appended in metadata layout 4; empty
    /// for older checkpoints, which is how a reader tells them apart).
    pub run_id: String,
    /// Every state file the checkpoint names: its checksum and the checkpoint
    /// and run it was written for (layout 4; empty before). A restore verifies them, so a
    /// file copied in from another checkpoint or run is refused like a corrupted one.
    pub files: Vec<FileOrigin>,
    /// The channel-state files of an unaligned checkpoint: the records that were in flight,
    /// per receiving subtask and input channel (appended in metadata layout 5; empty for
    /// aligned checkpoints and older layouts). Each is also in [`files`](Self::files).
    pub channel_state: Vec<ChannelStateRef>,
    /// How many tasks took their snapshot unaligned (layout 5): zero means the checkpoint
    /// was aligned everywhere, which is what the run summary and `weir status` report.
    pub unaligned_tasks: u32,
    /// The schema of every keyed state and key type of the job that wrote it (appended in
    /// metadata layout 6; empty for older checkpoints, whose states restore as
    /// unversioned): what a restore decides each state's fate from (issue 26).
    pub schemas: Vec<OperatorSchemas>,
    /// The keyed state of incremental checkpoints (appended in metadata layout 7; empty for
    /// full checkpoints, savepoints and older layouts): per operator subtask, the full base
    /// file and the ordered chain of deltas on top of it, all in the job folder's `shared/`
    /// folder, each with its owner checkpoint, size and checksum. Such a subtask's
    /// [`SubtaskStateMeta::keyed_state`] names the base by a path that leaves the
    /// checkpoint folder (`../shared/...`), so a Weir that does not know this field refuses
    /// the checkpoint instead of restoring it without its keyed state.
    pub incremental: Vec<IncrementalKeyedRef>,
    /// Where each key group's sections lie in the shared files of [`incremental`]
    /// (appended in metadata layout 8; empty before, and for chains written without it):
    /// what lets a restore from object storage leave the files there and fetch a key group
    /// on its first access (issue 25 item 4).
    ///
    /// [`incremental`]: Self::incremental
    pub incremental_index: Vec<ChainIndex>,
}

/// The index of every file of one subtask's chain (metadata layout 8), base first, in the
/// order of [`IncrementalKeyedRef::files`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainIndex {
    /// The operator's uid.
    pub uid: String,
    /// The subtask.
    pub subtask: u32,
    /// One index per file of the chain.
    pub files: Vec<crate::state::keyed::FileIndex>,
}

/// A state file in the job folder's `shared/` folder, referenced by one or more
/// incremental checkpoints (metadata layout 7). Retention removes it once no retained
/// checkpoint lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedFile {
    /// Path relative to the *job* folder (`shared/<uid>/<file>`).
    pub path: String,
    /// Size in bytes, envelope included.
    pub size: u64,
    /// Its checksum (the CRC-32C of its bytes before the trailer): a restore refuses a
    /// file that does not have it (damaged, or replaced).
    pub crc32c: u32,
    /// The checkpoint it was written for (its owner; the first checkpoint that listed it).
    pub checkpoint_id: u64,
    /// The run that wrote it.
    pub run_id: String,
}

/// The keyed state of one operator subtask in an incremental checkpoint: a full base and
/// the deltas written since, applied in order (metadata layout 7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncrementalKeyedRef {
    /// The operator's uid.
    pub uid: String,
    /// The subtask.
    pub subtask: u32,
    /// The full keyed-state file (canonical, as a full checkpoint's).
    pub base: SharedFile,
    /// The delta files written after it, oldest first; each holds, per key group and
    /// state, the entries put or deleted since the previous file of the chain.
    pub deltas: Vec<SharedFile>,
}

impl IncrementalKeyedRef {
    /// Every file of the chain, base first.
    pub fn files(&self) -> impl Iterator<Item = &SharedFile> {
        std::iter::once(&self.base).chain(&self.deltas)
    }

    /// Bytes of the chain's files written for checkpoint `id` (new), and of those it
    /// shares with earlier checkpoints.
    pub fn new_and_shared_bytes(&self, id: u64) -> (u64, u64) {
        self.files().fold((0, 0), |(new, shared), f| {
            if f.checkpoint_id == id {
                (new + f.size, shared)
            } else {
                (new, shared + f.size)
            }
        })
    }
}

/// One channel-state file of a checkpoint (metadata layout 5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelStateRef {
    /// The receiving task's head operator, whose folder holds the file.
    pub uid: String,
    /// The receiving subtask.
    pub subtask: u32,
    /// The receiving operator's parallelism when the checkpoint was taken.
    pub parallelism: u32,
    /// The input channel at that subtask (over all its inputs, in edge order).
    pub channel: u32,
    /// The input edge of the channel (position among the task's inputs).
    pub edge: u32,
    /// The sending subtask on that edge.
    pub sender: u32,
    /// Records saved.
    pub records: u64,
    /// Encoded bytes of those records (what `weir checkpoints inspect` reports).
    pub in_flight_bytes: u64,
    /// The file.
    pub file: FileRef,
}

/// What ties a state file to its checkpoint (metadata layout 4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileOrigin {
    /// Path relative to the checkpoint folder, as in its [`FileRef`].
    pub path: String,
    /// The file's checksum: the CRC-32C of all its bytes before the 4-byte trailer, as the
    /// trailer holds it. (Not of the whole file: a message followed by its own CRC always
    /// has the same CRC, so that would be one constant for every intact file.)
    pub crc32c: u32,
    /// The checkpoint it was written for.
    pub checkpoint_id: u64,
    /// The run it was written by ([`CheckpointMetadata::run_id`]).
    pub run_id: String,
}

/// How far one source operator had read when a checkpoint was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceProgress {
    /// The source's uid.
    pub uid: String,
    /// Records its subtasks emitted before the barrier, since the job first started
    /// (summed over subtasks, so the figure survives a change of parallelism).
    pub records: u64,
}

/// Whether a snapshot is the engine's checkpoint or the user's savepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotKind {
    /// Taken by the coordinator; deleted by the engine when subsumed.
    Checkpoint,
    /// Asked for by the user; never deleted by the engine.
    Savepoint,
    /// The savepoint a job stopped with.
    StopSavepoint,
}

impl SnapshotKind {
    /// The kind of snapshot a barrier of `kind` takes.
    pub fn of(kind: BarrierKind) -> SnapshotKind {
        match kind {
            BarrierKind::Checkpoint => SnapshotKind::Checkpoint,
            BarrierKind::Savepoint => SnapshotKind::Savepoint,
            BarrierKind::Stop { .. } => SnapshotKind::StopSavepoint,
        }
    }
}

impl std::fmt::Display for SnapshotKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SnapshotKind::Checkpoint => "checkpoint",
            SnapshotKind::Savepoint => "savepoint",
            SnapshotKind::StopSavepoint => "savepoint (stop)",
        })
    }
}

/// The fields every layout starts with: all of layout 1. Later layouts appended fields,
/// and postcard writes a struct as its fields in order with no framing, so each older layout
/// is this followed by its appended fields.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct Layout1 {
    checkpoint_id: u64,
    job_name: String,
    trigger_timestamp_ms: u64,
    completed_timestamp_ms: u64,
    mode: CheckpointingMode,
    max_parallelism: u32,
    operators: Vec<OperatorMeta>,
    stats: TaskCheckpointStats,
    tasks: Vec<TaskStatsMeta>,
}

/// Layout 2 appended the snapshot kind and the Weir version.
#[derive(Deserialize)]
struct Layout2 {
    layout1: Layout1,
    snapshot: SnapshotKind,
    weir_version: String,
}

/// Layout 3 appended the source positions.
#[derive(Deserialize)]
struct Layout3 {
    layout2: Layout2,
    sources: Vec<SourceProgress>,
}

/// Layout 4 appended the run id and the file origins (layout 5 then the channel state).
#[derive(Deserialize)]
struct Layout4 {
    layout3: Layout3,
    run_id: String,
    files: Vec<FileOrigin>,
}

/// Layout 5 appended the channel state; layout 6 then the state schemas.
#[derive(Deserialize)]
struct Layout5 {
    layout4: Layout4,
    channel_state: Vec<ChannelStateRef>,
    unaligned_tasks: u32,
}

/// Layout 6 appended the state schemas; layout 7 then the incremental keyed state.
#[derive(Deserialize)]
struct Layout6 {
    layout5: Layout5,
    schemas: Vec<OperatorSchemas>,
}

/// Layout 7 appended the incremental keyed state; layout 8 then its sections' index.
#[derive(Deserialize)]
struct Layout7 {
    layout6: Layout6,
    incremental: Vec<IncrementalKeyedRef>,
}

impl From<Layout7> for CheckpointMetadata {
    fn from(v7: Layout7) -> Self {
        CheckpointMetadata {
            incremental: v7.incremental,
            ..v7.layout6.into()
        }
    }
}

impl From<Layout6> for CheckpointMetadata {
    fn from(v6: Layout6) -> Self {
        CheckpointMetadata {
            schemas: v6.schemas,
            ..v6.layout5.into()
        }
    }
}

impl From<Layout5> for CheckpointMetadata {
    fn from(v5: Layout5) -> Self {
        CheckpointMetadata {
            channel_state: v5.channel_state,
            unaligned_tasks: v5.unaligned_tasks,
            ..v5.layout4.into()
        }
    }
}

impl From<Layout4> for CheckpointMetadata {
    fn from(v4: Layout4) -> Self {
        CheckpointMetadata {
            run_id: v4.run_id,
            files: v4.files,
            ..v4.layout3.into()
        }
    }
}

impl From<Layout3> for CheckpointMetadata {
    fn from(v3: Layout3) -> Self {
        let Layout3 {
            layout2:
                Layout2 {
                    layout1: l,
                    snapshot,
                    weir_version,
                },
            sources,
        } = v3;
        CheckpointMetadata {
            checkpoint_id: l.checkpoint_id,
            job_name: l.job_name,
            trigger_timestamp_ms: l.trigger_timestamp_ms,
            completed_timestamp_ms: l.completed_timestamp_ms,
            mode: l.mode,
            max_parallelism: l.max_parallelism,
            operators: l.operators,
            stats: l.stats,
            tasks: l.tasks,
            snapshot,
            weir_version,
            sources,
            run_id: String::new(),
            files: Vec::new(),
            channel_state: Vec::new(),
            unaligned_tasks: 0,
            schemas: Vec::new(),
            incremental: Vec::new(),
            incremental_index: Vec::new(),
        }
    }
}

impl CheckpointMetadata {
    /// Decodes a `_metadata` payload of any layout this version knows. (postcard ignores
    /// trailing bytes, so the newest layout is tried first.)
    pub fn decode(payload: &[u8]) -> Result<Self, postcard::Error> {
        if let Ok(meta) = postcard::from_bytes::<CheckpointMetadata>(payload) {
            return Ok(meta);
        }
        if let Ok(v7) = postcard::from_bytes::<Layout7>(payload) {
            return Ok(v7.into());
        }
        if let Ok(v6) = postcard::from_bytes::<Layout6>(payload) {
            return Ok(v6.into());
        }
        if let Ok(v5) = postcard::from_bytes::<Layout5>(payload) {
            return Ok(v5.into());
        }
        if let Ok(v4) = postcard::from_bytes::<Layout4>(payload) {
            return Ok(v4.into());
        }
        if let Ok(v3) = postcard::from_bytes::<Layout3>(payload) {
            return Ok(v3.into());
        }
        let layout2 = match postcard::from_bytes::<Layout2>(payload) {
            Ok(v2) => v2,
            Err(_) => Layout2 {
                layout1: postcard::from_bytes(payload)?,
                snapshot: SnapshotKind::Checkpoint,
                weir_version: "0.1.0 or earlier".into(),
            },
        };
        Ok(Layout3 {
            layout2,
            sources: Vec::new(),
        }
        .into())
    }
}

/// One task's part of a checkpoint, for finding the slow or large one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStatsMeta {
    /// The task's display name (`chain (subtask/parallelism)`).
    pub task: String,
    /// Its synchronous pause, asynchronous write time, alignment and bytes.
    pub stats: TaskCheckpointStats,
}

impl CheckpointMetadata {
    /// The CRC-32C the state file at `path` must have: `Ok(None)` for checkpoints of
    /// layouts before 4 (their files are checked by their envelopes only), `Err` with the
    /// reason when the metadata ties no file, or a file of another checkpoint or run, to
    /// `path` — the checkpoint then cannot be trusted.
    pub fn expected_crc(&self, path: &str) -> Result<Option<u32>, String> {
        if self.run_id.is_empty() {
            return Ok(None);
        }
        let Some(origin) = self.files.iter().find(|f| f.path == path) else {
            return Err("the checkpoint's _metadata records no checksum for it".into());
        };
        if origin.checkpoint_id != self.checkpoint_id || origin.run_id != self.run_id {
            return Err(format!(
                "it was written for checkpoint {} of run {}, not for checkpoint {} of run {}",
                origin.checkpoint_id, origin.run_id, self.checkpoint_id, self.run_id
            ));
        }
        Ok(Some(origin.crc32c))
    }

    /// The incremental keyed state of subtask `subtask` of operator `uid`, if the
    /// checkpoint holds its keyed state that way (metadata layout 7).
    pub fn incremental_of(&self, uid: &str, subtask: u32) -> Option<&IncrementalKeyedRef> {
        self.incremental
            .iter()
            .find(|r| r.uid == uid && r.subtask == subtask)
    }

    /// The index of each file of subtask `subtask` of operator `uid`'s chain (base first),
    /// if the checkpoint recorded one for every file of it (metadata layout 8).
    pub fn incremental_index_of(
        &self,
        chain: &IncrementalKeyedRef,
    ) -> Option<&[crate::state::keyed::FileIndex]> {
        let index = self
            .incremental_index
            .iter()
            .find(|i| i.uid == chain.uid && i.subtask == chain.subtask)?;
        (index.files.len() == chain.files().count()).then_some(index.files.as_slice())
    }

    /// Every shared file the checkpoint references (empty for a full checkpoint).
    pub fn shared_files(&self) -> impl Iterator<Item = &SharedFile> {
        self.incremental.iter().flat_map(IncrementalKeyedRef::files)
    }

    /// The recorded schemas of operator `uid`'s state, if the checkpoint has them.
    pub fn schemas_of(&self, uid: &str) -> Option<&OperatorSchemas> {
        self.schemas.iter().find(|s| s.uid == uid)
    }

    /// The recorded schema of keyed state `name` of operator `uid`, if any.
    pub fn state_schema(&self, uid: &str, name: &str) -> Option<&StateSchema> {
        self.schemas_of(uid)?
            .states
            .iter()
            .find(|s| s.name == name)
            .map(|s| &s.schema)
    }

    /// Records source `uid` had emitted up to this checkpoint (0 if it recorded none).
    pub fn source_records(&self, uid: &str) -> u64 {
        self.sources
            .iter()
            .find(|s| s.uid == uid)
            .map_or(0, |s| s.records)
    }
}

#[cfg(test)]
#[path = "metadata_tests.rs"]
mod tests;
