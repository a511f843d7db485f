//! The `_metadata` of a checkpoint, which names the state files (docs/architecture.md §6;
//! the files themselves are laid out by [`super::layout`]).
//!
//! All structures are encoded with postcard inside the checksummed envelope of
//! [`super::format`]. The metadata names every file by a path *relative to the checkpoint
//! folder*, so a checkpoint folder can be copied or moved and still restores.

use serde::{Deserialize, Serialize};

use crate::checkpoint::barrier::{BarrierKind, CheckpointingMode};
use crate::state::key_group::KeyGroupRange;

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

    /// Records source `uid` had emitted up to this checkpoint (0 if it recorded none).
    pub fn source_records(&self, uid: &str) -> u64 {
        self.sources
            .iter()
            .find(|s| s.uid == uid)
            .map_or(0, |s| s.records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_meta(sources: Vec<SourceProgress>) -> CheckpointMetadata {
        CheckpointMetadata {
            checkpoint_id: 7,
            job_name: "job".into(),
            trigger_timestamp_ms: 1,
            completed_timestamp_ms: 2,
            mode: CheckpointingMode::ExactlyOnce,
            max_parallelism: 128,
            operators: Vec::new(),
            stats: TaskCheckpointStats::default(),
            tasks: Vec::new(),
            snapshot: SnapshotKind::Savepoint,
            weir_version: "0.1.0".into(),
            sources,
            run_id: String::new(),
            files: Vec::new(),
            channel_state: Vec::new(),
            unaligned_tasks: 0,
        }
    }

    /// Layout 4's bytes: layout 5 without its two trailing fields.
    fn layout_4_bytes(meta: &CheckpointMetadata) -> Vec<u8> {
        let mut bytes = postcard::to_allocvec(meta).unwrap();
        assert!(meta.channel_state.is_empty() && meta.unaligned_tasks == 0);
        assert_eq!(bytes.split_off(bytes.len() - 2), [0, 0]);
        bytes
    }

    /// Layout 3's bytes: layout 4 without its two trailing fields.
    fn layout_3_bytes(meta: &CheckpointMetadata) -> Vec<u8> {
        let mut bytes = layout_4_bytes(meta);
        assert!(meta.run_id.is_empty() && meta.files.is_empty());
        assert_eq!(bytes.split_off(bytes.len() - 2), [0, 0]);
        bytes
    }

    #[test]
    fn layout_5_round_trips_its_channel_state() {
        let mut meta = sample_meta(Vec::new());
        meta.run_id = "run-a".into();
        meta.unaligned_tasks = 2;
        meta.channel_state = vec![ChannelStateRef {
            uid: "sink".into(),
            subtask: 1,
            parallelism: 2,
            channel: 3,
            edge: 0,
            sender: 3,
            records: 10,
            in_flight_bytes: 80,
            file: FileRef {
                path: "sink/ch-1-3".into(),
                size: 120,
            },
        }];
        let back = CheckpointMetadata::decode(&postcard::to_allocvec(&meta).unwrap()).unwrap();
        assert_eq!(back, meta);
    }

    #[test]
    fn layout_4_still_decodes_without_channel_state() {
        let mut meta = sample_meta(Vec::new());
        meta.run_id = "run-a".into();
        meta.files = vec![FileOrigin {
            path: "count/kg-0-63".into(),
            crc32c: 7,
            checkpoint_id: 7,
            run_id: "run-a".into(),
        }];
        let back = CheckpointMetadata::decode(&layout_4_bytes(&meta)).unwrap();
        assert_eq!(back, meta);
        assert_eq!(back.expected_crc("count/kg-0-63"), Ok(Some(7)));
    }

    #[test]
    fn layout_5_checks_its_file_origins() {
        let mut meta = sample_meta(Vec::new());
        meta.run_id = "run-a".into();
        meta.files = vec![FileOrigin {
            path: "count/kg-0-63".into(),
            crc32c: 0xdead_beef,
            checkpoint_id: 7,
            run_id: "run-a".into(),
        }];
        let back = CheckpointMetadata::decode(&postcard::to_allocvec(&meta).unwrap()).unwrap();
        assert_eq!(back, meta);
        assert_eq!(back.expected_crc("count/kg-0-63"), Ok(Some(0xdead_beef)));
        assert!(back
            .expected_crc("count/kg-64-127")
            .unwrap_err()
            .contains("no checksum"));
        meta.files[0].checkpoint_id = 6;
        let err = meta.expected_crc("count/kg-0-63").unwrap_err();
        assert!(
            err.contains("checkpoint 6 of run run-a, not for checkpoint 7"),
            "{err}"
        );
        meta.files[0] = FileOrigin {
            checkpoint_id: 7,
            run_id: "run-b".into(),
            ..meta.files[0].clone()
        };
        assert!(meta
            .expected_crc("count/kg-0-63")
            .unwrap_err()
            .contains("of run run-b"));
    }

    #[test]
    fn layout_3_round_trips_its_source_positions() {
        let meta = sample_meta(vec![SourceProgress {
            uid: "events".into(),
            records: 12_345,
        }]);
        let back = CheckpointMetadata::decode(&layout_3_bytes(&meta)).unwrap();
        assert_eq!(back, meta);
        assert_eq!(back.source_records("events"), 12_345);
        assert_eq!(back.source_records("other"), 0);
        assert_eq!(
            back.expected_crc("any/file"),
            Ok(None),
            "older layouts are not tied"
        );
    }

    #[test]
    fn layout_2_still_decodes_without_source_positions() {
        // Layout 2 is layout 3 without the trailing `sources` (an empty one is one byte).
        let meta = sample_meta(Vec::new());
        let mut bytes = layout_3_bytes(&meta);
        assert_eq!(bytes.pop(), Some(0));
        let back = CheckpointMetadata::decode(&bytes).unwrap();
        assert_eq!(back, meta);
    }

    #[test]
    fn layout_1_still_decodes_as_a_checkpoint_of_an_early_version() {
        let old = Layout1 {
            checkpoint_id: 9,
            job_name: "old".into(),
            trigger_timestamp_ms: 1,
            completed_timestamp_ms: 2,
            mode: CheckpointingMode::AtLeastOnce,
            max_parallelism: 64,
            operators: Vec::new(),
            stats: TaskCheckpointStats::default(),
            tasks: Vec::new(),
        };
        let meta = CheckpointMetadata::decode(&postcard::to_allocvec(&old).unwrap()).unwrap();
        assert_eq!(meta.checkpoint_id, 9);
        assert_eq!(meta.max_parallelism, 64);
        assert_eq!(meta.mode, CheckpointingMode::AtLeastOnce);
        assert_eq!(meta.snapshot, SnapshotKind::Checkpoint);
        assert_eq!(meta.weir_version, "0.1.0 or earlier");
        assert!(meta.sources.is_empty() && meta.files.is_empty() && meta.run_id.is_empty());
    }
}
