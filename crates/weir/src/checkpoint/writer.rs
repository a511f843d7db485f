//! The asynchronous phase of a snapshot: encoding a task's captured state and writing it.
//!
//! A task captures an immutable view of its state at the barrier (the synchronous phase,
//! on the processing thread) and hands it here as a [`SnapshotJob`]; a writer thread encodes
//! it per key group and writes the files while the task goes on processing records.
//!
//! Keyed state is streamed: its shards are encoded one at a time (and let go of at once, so
//! the task writes to them without copying them) into a scratch file, then laid out key
//! group by key group into the state file, so a checkpoint holds neither a copy of the
//! state nor its whole encoding in memory (see `state::cow_map` and `state::keyed::view`).
//!
//! `keyed` streams the keyed-state file (its layout is [`super::layout`]'s); `pool` runs
//! the writer threads ([`spawn_writers`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::layout;
use super::metadata::{
    ChannelStateRef, FileOrigin, FileRef, IncrementalKeyedRef, KeyedFileRef, SharedFile,
    SubtaskStateMeta, TaskCheckpointStats,
};
use super::storage::{CheckpointStorage, PayloadWriter, SpillFile, StoredFile};
use crate::checkpoint::snapshot::TaskSnapshot;
use crate::error::{Error, Result};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed::{
    ChainFile, FileIndex, IncrementalSnapshot, KeyedSnapshot, LocalStateSize, SharedHome,
};
use crate::state::operator::OperatorStateSnapshot;
use crate::storage::format::HEADER_LEN;

/// A task's state on its way to storage: captured at a barrier (encoded by the writer
/// thread), or already encoded — the final state of a finished source, which stands in for
/// it in every later checkpoint.
pub enum SnapshotPayload {
    /// Captured synchronously at a barrier; encoding happens on the writer thread.
    Captured(TaskSnapshot),
    /// Encoded once, written into each checkpoint that needs it.
    Encoded(Arc<EncodedSnapshot>),
}

/// A task's state, on its way to storage.
pub struct SnapshotJob {
    /// The job attempt the task belongs to (acks of older attempts are ignored).
    pub attempt: u32,
    /// The task's global index.
    pub task: usize,
    /// The task's subtask index.
    pub subtask: u32,
    /// The parallelism of the task's operators.
    pub parallelism: u32,
    /// The checkpoint.
    pub checkpoint_id: u64,
    /// The state.
    pub snapshot: SnapshotPayload,
    /// How long the capture blocked the task.
    pub sync: Duration,
    /// How long the barriers took to align.
    pub alignment: Duration,
    /// The task's state is frozen (its input ended or it is stopping): the encoded snapshot
    /// comes back with the acknowledgement, to stand in for the task once it exits.
    pub frozen: bool,
    /// When the barrier arrived and the capture ran (the writer adds its own part).
    pub times: PhaseTimes,
}

/// When each phase of one task's snapshot happened, in microseconds since the Unix epoch
/// (0: not recorded). Wall-clock instants rather than durations, so the dashboard can draw
/// every subtask on one timeline from the checkpoint's trigger and the slow one shows: the
/// task records the first three at the barrier, the writer the async part, the executor
/// the acknowledgement's arrival. Never persisted in `_metadata`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// The first barrier reached the task (alignment started).
    pub barrier_us: u64,
    /// Alignment ended; the synchronous capture started.
    pub sync_start_us: u64,
    /// The capture was handed to the writers (the task resumed).
    pub sync_end_us: u64,
    /// A writer picked the snapshot up (the gap before is its queue wait).
    pub async_start_us: u64,
    /// The writer finished writing.
    pub async_end_us: u64,
    /// The acknowledgement reached the executor.
    pub ack_us: u64,
}

/// One operator's encoded state files (payloads before the envelope).
pub struct EncodedPart {
    uid: String,
    operator_state: Option<Vec<u8>>,
    /// The operator state lists' sizes.
    list_bytes: Vec<StateBytes>,
    keyed: Option<FrozenKeyed>,
}

/// A frozen operator's encoded keyed state: the payload sits in a scratch file (unlinked
/// where the platform allows, so it needs no cleanup) rather than in memory, since it may
/// be as large as the state and lives as long as the job.
struct FrozenKeyed {
    payload: Mutex<SpillFile>,
    len: u64,
    range: KeyGroupRange,
    entries: u64,
    states: Vec<StateBytes>,
    local: LocalStateSize,
}

/// Bytes copied at a time from a frozen payload into a state file.
const COPY_CHUNK: usize = 1 << 20;

impl FrozenKeyed {
    /// Streams the payload into `w`.
    fn copy_to(&self, w: &mut PayloadWriter) -> Result<()> {
        let mut payload = self.payload.lock().unwrap_or_else(|p| p.into_inner());
        let mut buf = vec![0; COPY_CHUNK.min(self.len as usize)];
        let mut at = 0;
        while at < self.len {
            let n = COPY_CHUNK.min((self.len - at) as usize);
            payload.read_at(at, &mut buf[..n])?;
            w.write(&buf[..n])?;
            at += n as u64;
        }
        Ok(())
    }
}

/// A task's state, encoded and ready to be written into any checkpoint folder.
pub struct EncodedSnapshot {
    parts: Vec<EncodedPart>,
    /// The source position the snapshot was taken at ([`TaskSnapshot::source`]).
    source: Option<(String, u64)>,
}

impl EncodedSnapshot {
    /// A snapshot of no state (tests of what carries snapshots around).
    #[cfg(all(test, feature = "cluster"))]
    pub(crate) fn empty() -> Self {
        EncodedSnapshot {
            parts: Vec::new(),
            source: None,
        }
    }
}

impl std::fmt::Debug for EncodedSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let uids: Vec<&str> = self.parts.iter().map(|p| p.uid.as_str()).collect();
        f.debug_struct("EncodedSnapshot")
            .field("operators", &uids)
            .finish()
    }
}

/// A frozen snapshot that stands in for an exited task in later checkpoints (FLIP-147):
/// encoded in this process, or kept by the worker that ran the task, which writes it into
/// a checkpoint when the coordinator asks (issue 24: state files never travel through the
/// coordinator).
#[derive(Debug, Clone)]
pub enum Frozen {
    /// Encoded here, ready to be written into any checkpoint.
    Here(Arc<EncodedSnapshot>),
    /// Kept by the worker that ran the task (its relay, `runtime::worker::relay`).
    OnWorker,
}

/// One operator's part of a task acknowledgement.
#[derive(Debug, Clone)]
pub struct OperatorAck {
    /// The operator's uid.
    pub uid: String,
    /// Its parallelism.
    pub parallelism: u32,
    /// The files written.
    pub state: SubtaskStateMeta,
    /// Bytes per state: what the dashboard shows of a checkpoint's state, per operator and
    /// state name (the files hold several states each). Not persisted in `_metadata`.
    pub states: Vec<StateBytes>,
    /// With an incremental checkpoint: the chain of shared files the subtask's keyed state
    /// is (base and deltas, the last one possibly written for this checkpoint).
    pub incremental: Option<IncrementalKeyedRef>,
    /// With an incremental checkpoint: the index of each file of the chain (base first),
    /// if every one has one; `_metadata` records it so a restore can fetch a key group
    /// alone (issue 25 item 4).
    pub incremental_index: Option<Vec<FileIndex>>,
    /// Where the subtask's keyed state lived at the barrier (local disk, memory): for the
    /// dashboard beside the checkpoint's sizes; not persisted in `_metadata`.
    pub local: LocalStateSize,
}

/// One state's encoded size in one subtask's snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateBytes {
    /// The state's name (as declared; timers are `__event_timers`, `__processing_timers`).
    pub name: String,
    /// Keyed state (`true`) or an operator state list.
    pub keyed: bool,
    /// Its encoded entries' bytes (file framing excluded).
    pub bytes: u64,
}

/// The sizes of a subtask's operator state lists.
fn operator_state_bytes(state: &OperatorStateSnapshot) -> Vec<StateBytes> {
    state
        .iter()
        .map(|(name, list)| StateBytes {
            name: name.clone(),
            keyed: false,
            bytes: list.elements.iter().map(|e| e.len() as u64).sum(),
        })
        .collect()
}

/// A task's acknowledgement of a checkpoint: where its state went.
#[derive(Debug, Clone, Default)]
pub struct TaskAck {
    /// Per-operator file references.
    pub operators: Vec<OperatorAck>,
    /// Timing and size.
    pub stats: TaskCheckpointStats,
    /// The encoded state, when the task's state was frozen ([`SnapshotJob::frozen`]).
    pub frozen: Option<Frozen>,
    /// (Source tasks) the source's uid and the records it emitted in this attempt before
    /// the barrier ([`TaskSnapshot::source`]).
    pub source: Option<(String, u64)>,
    /// Every file written, with its checksum and the checkpoint and run it was written
    /// for: the metadata records them, so a restore refuses a file from elsewhere.
    pub files: Vec<FileOrigin>,
    /// When each phase happened, for the checkpoint timeline.
    pub times: PhaseTimes,
    /// The channel-state files written (an unaligned snapshot with records in flight).
    pub channel_state: Vec<ChannelStateRef>,
    /// Whether the task took its snapshot unaligned.
    pub unaligned: bool,
}

/// The operator state of a part, encoded; `None` when it has none (no file is written).
fn encode_operator_state(state: &OperatorStateSnapshot) -> Result<Option<Vec<u8>>> {
    if state.is_empty() {
        Ok(None)
    } else {
        layout::encode_operator_state_file(state).map(Some)
    }
}

/// Encodes a captured snapshot once, for frozen state, which is written again into every
/// later checkpoint: keyed state into a scratch file (not memory: it may be as large as
/// the state), operator state in memory. A live task's snapshot is streamed to its files
/// instead ([`write_snapshot`]). Spill files go into checkpoint `id`'s folder.
fn encode_snapshot(
    snapshot: TaskSnapshot,
    storage: &CheckpointStorage,
    id: u64,
) -> Result<EncodedSnapshot> {
    let mut parts = Vec::with_capacity(snapshot.parts.len());
    let source = snapshot.source;
    for part in snapshot.parts {
        let keyed = match &part.keyed {
            None => None,
            Some(keyed) if keyed.incremental.is_some() => {
                return Err(Error::CheckpointFailures(
                    "internal: an incremental keyed snapshot was taken for a frozen task, \
                     whose snapshot must be full (a bug in Weir; please report it)"
                        .into(),
                ))
            }
            Some(keyed) => {
                let mut payload = storage.scratch_file()?;
                let streamed = stream_keyed(keyed, &mut payload, SPILL_BUDGET, || {
                    Ok(storage.spill_file(id, &part.uid)?)
                })?;
                Some(FrozenKeyed {
                    len: payload.len(),
                    payload: Mutex::new(payload),
                    range: keyed.range,
                    entries: streamed.entries,
                    states: streamed.states,
                    local: keyed.local,
                })
            }
        };
        parts.push(EncodedPart {
            operator_state: encode_operator_state(&part.operator_state)?,
            list_bytes: operator_state_bytes(&part.operator_state),
            uid: part.uid,
            keyed,
        });
    }
    Ok(EncodedSnapshot { parts, source })
}

/// One operator's keyed state on its way into a file.
enum KeyedSource<'a> {
    /// Captured: encoded while it is written.
    Captured(&'a KeyedSnapshot),
    /// Already encoded (frozen state).
    Encoded(&'a FrozenKeyed),
}

/// Records `file` (written for checkpoint `id`) in `ack`, and returns its reference.
fn record(storage: &CheckpointStorage, id: u64, file: StoredFile, ack: &mut TaskAck) -> FileRef {
    ack.stats.bytes += file.size;
    ack.files.push(FileOrigin {
        path: file.path.clone(),
        crc32c: file.crc32c,
        checkpoint_id: id,
        run_id: storage.run_id().to_string(),
    });
    FileRef {
        path: file.path,
        size: file.size,
    }
}

/// Writes one operator's files into checkpoint `job.checkpoint_id`, recording them (and
/// their sizes) in `ack`.
fn write_part(
    storage: &CheckpointStorage,
    job: &SnapshotJob,
    uid: &str,
    operator_state: Option<&[u8]>,
    mut states: Vec<StateBytes>,
    keyed: Option<KeyedSource<'_>>,
    ack: &mut TaskAck,
) -> Result<OperatorAck> {
    let id = job.checkpoint_id;
    let mut meta = SubtaskStateMeta {
        subtask: job.subtask,
        operator_state: None,
        keyed_state: None,
    };
    if let Some(payload) = operator_state {
        let name = layout::operator_state_file_name(job.subtask);
        let kind = layout::OPERATOR_STATE_KIND;
        let file = storage.write_state_file(id, uid, &name, kind, payload)?;
        meta.operator_state = Some(record(storage, id, file, ack));
    }
    let mut incremental = None;
    let mut incremental_index = None;
    let local = match &keyed {
        Some(KeyedSource::Captured(snapshot)) => snapshot.local,
        Some(KeyedSource::Encoded(frozen)) => frozen.local,
        None => LocalStateSize::default(),
    };
    if let Some(KeyedSource::Captured(snapshot)) = &keyed {
        if let Some(inc) = &snapshot.incremental {
            let at = (id, uid, job.subtask);
            let (keyed_ref, chain, index, sizes) =
                write_incremental(storage, at, snapshot, inc, ack)?;
            states.splice(0..0, sizes);
            meta.keyed_state = Some(keyed_ref);
            incremental = Some(chain);
            incremental_index = index;
        }
    }
    if let Some(keyed) = keyed.filter(|_| incremental.is_none()) {
        let kind = layout::KEYED_STATE_KIND;
        let (file, range, entries) = match keyed {
            KeyedSource::Captured(snapshot) => {
                let range = snapshot.range;
                let name = layout::keyed_state_file_name(range);
                let mut streamed = Default::default();
                let file = storage.write_state_file_streamed(id, uid, &name, kind, |w| {
                    let new_spill = || Ok(storage.spill_file(id, uid)?);
                    streamed = stream_keyed(snapshot, w, SPILL_BUDGET, new_spill)?;
                    Ok::<(), Error>(())
                })?;
                let keyed::Streamed {
                    entries,
                    states: sizes,
                    ..
                } = streamed;
                states.splice(0..0, sizes);
                (file, range, entries)
            }
            KeyedSource::Encoded(frozen) => {
                let range = frozen.range;
                let name = layout::keyed_state_file_name(range);
                let file = storage
                    .write_state_file_streamed(id, uid, &name, kind, |w| frozen.copy_to(w))?;
                states.splice(0..0, frozen.states.iter().cloned());
                (file, range, frozen.entries)
            }
        };
        meta.keyed_state = Some(KeyedFileRef {
            file: record(storage, id, file, ack),
            range,
            entries,
        });
    }
    Ok(OperatorAck {
        uid: uid.to_string(),
        parallelism: job.parallelism,
        state: meta,
        states,
        incremental,
        incremental_index,
        local,
    })
}

/// What [`write_incremental`] wrote: the subtask's keyed-state reference, its chain, the
/// index of each file of the chain (if every one has one) and each state's new bytes.
type WrittenChain = (
    KeyedFileRef,
    IncrementalKeyedRef,
    Option<Vec<FileIndex>>,
    Vec<StateBytes>,
);

/// Writes an incremental checkpoint's keyed file for `snapshot` into the job's `shared/`
/// folder — a new base, or a delta (none when no key changed: the chain is reused as it
/// is) — reports the resulting chain to the backend (`inc.written`), and returns the
/// subtask's keyed-state reference (naming the base by a path outside the checkpoint
/// folder, which Weirs that predate incremental checkpoints refuse), the chain, and the
/// bytes each state's new entries took.
fn write_incremental(
    storage: &CheckpointStorage,
    (id, uid, subtask): (u64, &str, u32),
    snapshot: &KeyedSnapshot,
    inc: &IncrementalSnapshot,
    ack: &mut TaskAck,
) -> Result<WrittenChain> {
    let range = snapshot.range;
    let mut chain = inc.chain.clone();
    let mut entries = 0;
    let mut sizes = Vec::new();
    if !inc.delta || !snapshot.tables.is_empty() {
        let name = layout::shared_keyed_file_name(id, range, inc.delta);
        let kind = if inc.delta {
            layout::KEYED_DELTA_KIND
        } else {
            layout::KEYED_STATE_KIND
        };
        let mut streamed = keyed::Streamed::default();
        let file = storage.write_shared_file_streamed(uid, &name, kind, |w| {
            let new_spill = || Ok(storage.spill_file(id, uid)?);
            streamed = stream_keyed(snapshot, w, SPILL_BUDGET, new_spill)?;
            Ok::<(), Error>(())
        })?;
        ack.stats.bytes += file.size;
        entries = streamed.entries;
        sizes = streamed.states;
        if !inc.delta {
            chain.clear();
        }
        let mut index = streamed.index;
        // The sink counted from the payload's start; the index counts from the file's.
        for g in &mut index.groups {
            for span in &mut g.sections {
                span.offset += HEADER_LEN as u64;
            }
        }
        chain.push(ChainFile {
            path: file.path,
            size: file.size,
            crc32c: file.crc32c,
            checkpoint_id: id,
            run_id: storage.run_id().to_string(),
            index: Some(Arc::new(index)),
        });
    }
    let _ = inc.home.set(SharedHome {
        store: Arc::clone(storage.backend()),
        root: storage.root().to_path_buf(),
    });
    *inc.written.lock().unwrap_or_else(|p| p.into_inner()) = Some(chain.clone());
    let index: Option<Vec<FileIndex>> = chain.iter().map(|f| f.index.as_deref().cloned()).collect();
    let mut files = chain.into_iter().map(|f| SharedFile {
        path: f.path,
        size: f.size,
        crc32c: f.crc32c,
        checkpoint_id: f.checkpoint_id,
        run_id: f.run_id,
    });
    let base = files.next().ok_or_else(|| {
        Error::CheckpointFailures(
            "internal: an incremental delta without a base (a bug in Weir; please report it)"
                .into(),
        )
    })?;
    let keyed_ref = KeyedFileRef {
        file: FileRef {
            path: format!("../{}", base.path),
            size: base.size,
        },
        range,
        entries,
    };
    let chain = IncrementalKeyedRef {
        uid: uid.to_string(),
        subtask,
        base,
        deltas: files.collect(),
    };
    Ok((keyed_ref, chain, index, sizes))
}

/// Writes every file of `job`; the acknowledgement lists them. A captured snapshot is
/// encoded as it is written (one key group at a time), unless the task's state is frozen:
/// then it is encoded in memory once and comes back with the acknowledgement.
pub fn write_snapshot(storage: &CheckpointStorage, mut job: SnapshotJob) -> Result<TaskAck> {
    let started = Instant::now();
    let mut times = job.times;
    times.async_start_us = crate::clock::wall_us();
    let mut ack = TaskAck::default();
    let mut payload = std::mem::replace(
        &mut job.snapshot,
        SnapshotPayload::Captured(TaskSnapshot::new()),
    );
    if let SnapshotPayload::Captured(s) = &mut payload {
        ack.unaligned = s.unaligned;
        write_channel_state(storage, &job, s, &mut ack)?;
    }
    match payload {
        SnapshotPayload::Captured(snapshot) if !job.frozen => {
            ack.source = snapshot.source;
            for part in snapshot.parts {
                let operator_state = encode_operator_state(&part.operator_state)?;
                let keyed = part.keyed.as_ref().map(KeyedSource::Captured);
                let op = write_part(
                    storage,
                    &job,
                    &part.uid,
                    operator_state.as_deref(),
                    operator_state_bytes(&part.operator_state),
                    keyed,
                    &mut ack,
                )?;
                ack.operators.push(op);
                // Dropped part by part: its shards go back to the task as they are written.
                drop(part);
            }
        }
        payload => {
            let encoded = match payload {
                SnapshotPayload::Captured(s) => {
                    Arc::new(encode_snapshot(s, storage, job.checkpoint_id)?)
                }
                SnapshotPayload::Encoded(e) => e,
            };
            ack.source.clone_from(&encoded.source);
            for part in &encoded.parts {
                let keyed = part.keyed.as_ref().map(KeyedSource::Encoded);
                let op = write_part(
                    storage,
                    &job,
                    &part.uid,
                    part.operator_state.as_deref(),
                    part.list_bytes.clone(),
                    keyed,
                    &mut ack,
                )?;
                ack.operators.push(op);
            }
            if job.frozen {
                ack.frozen = Some(Frozen::Here(encoded));
            }
        }
    }
    ack.stats.sync_micros = job.sync.as_micros() as u64;
    ack.stats.alignment_micros = job.alignment.as_micros() as u64;
    ack.stats.async_micros = started.elapsed().as_micros() as u64;
    times.async_end_us = crate::clock::wall_us();
    ack.times = times;
    Ok(ack)
}

/// Writes the channel state of `snapshot` (taken unaligned), one file per input channel
/// with records in flight, into its head operator's folder, recording each in `ack`.
fn write_channel_state(
    storage: &CheckpointStorage,
    job: &SnapshotJob,
    snapshot: &mut TaskSnapshot,
    ack: &mut TaskAck,
) -> Result<()> {
    let id = job.checkpoint_id;
    let uid = &snapshot.channel_state_uid;
    for file in std::mem::take(&mut snapshot.channel_state) {
        let name = layout::channel_state_file_name(job.subtask, file.channel);
        let payload = file.encode()?;
        let kind = layout::CHANNEL_STATE_KIND;
        let stored = storage.write_state_file(id, uid, &name, kind, &payload)?;
        let file_ref = record(storage, id, stored, ack);
        ack.channel_state.push(ChannelStateRef {
            uid: uid.clone(),
            subtask: job.subtask,
            parallelism: job.parallelism,
            channel: file.channel,
            edge: file.edge,
            sender: file.sender,
            records: file.records(),
            in_flight_bytes: file.in_flight_bytes(),
            file: file_ref,
        });
    }
    Ok(())
}

mod keyed;
mod pool;

use keyed::{stream_keyed, SPILL_BUDGET};
pub use pool::{spawn_writers, SnapshotWritten};

#[cfg(test)]
mod tests;
