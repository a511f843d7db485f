//! Describing a checkpoint for tools: operators, states, kinds, sizes and raw entries.
//!
//! This is the engine side of `weir state`: it knows the storage layout (docs/architecture.md §6) but
//! not the job's types, so it works on any checkpoint of any job.
//!
//! * [`describe`] reads `_metadata` and every state file it names (verifying each envelope)
//!   and summarises each operator's states: kind, number of entries and encoded bytes.
//! * [`raw_state`] returns one state's entries still encoded: per key group for keyed state,
//!   per element for operator lists. A caller that knows the job's types decodes them with
//!   [`RawState::keyed_entries`] or [`RawState::list_elements`]; one that does not can still
//!   show the bytes.
//!
//! Guarantees: nothing here writes to the checkpoint; nothing panics on any file content —
//! a missing, foreign, corrupt or inconsistent checkpoint is an [`InspectError`] that names
//! the file and the way out. The checkpoint is read as untrusted input, like a restore does.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use super::metadata::{ChannelStateRef, CheckpointMetadata, SnapshotKind, TaskStatsMeta};
use crate::checkpoint::barrier::CheckpointingMode;
use crate::state::StateKind;

mod error;
mod files;
mod raw;

pub use error::InspectError;
use files::*;
pub use raw::{KeyedEntry, ListElement, RawEntries, RawKeyGroup, RawList, RawState};

/// Result of the inspection functions.
pub type Result<T, E = InspectError> = std::result::Result<T, E>;

/// Whether a state is keyed (partitioned by key group) or operator state (owned by
/// subtasks), since the same [`StateKind`] names print differently in each and their
/// entries are stored differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateScope {
    /// Keyed state: `(key, value)` entries per key group.
    Keyed,
    /// Operator state: lists of elements per subtask.
    Operator,
}

/// A human name for a state's kind, e.g. "keyed value", "operator list", "union list".
///
/// Derived from the variant's `Debug` name (CamelCase split into lowercase words, "keyed "
/// prepended for keyed state) rather than a `match`, so kinds added to [`StateKind`] later
/// are named correctly without touching this module.
pub fn kind_name(scope: StateScope, kind: StateKind) -> String {
    let debug = format!("{kind:?}");
    // Only the variant's identifier, should a variant ever carry fields.
    let ident: String = debug
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let mut words = String::new();
    for (i, c) in ident.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            words.push(' ');
        }
        words.extend(c.to_lowercase());
    }
    if scope == StateScope::Keyed && !words.starts_with("keyed") {
        words.insert_str(0, "keyed ");
    }
    words
}

/// What a checkpoint holds, as `weir state ls` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointDescription {
    /// The checkpoint folder inspected.
    pub path: PathBuf,
    /// The checkpoint id.
    pub checkpoint_id: u64,
    /// Checkpoint or savepoint.
    pub snapshot: SnapshotKind,
    /// The Weir version that wrote it.
    pub weir_version: String,
    /// The job's name, which tells a tool which types the states hold.
    pub job_name: String,
    /// When the checkpoint was triggered (ms since the Unix epoch).
    pub trigger_timestamp_ms: u64,
    /// When it completed (ms since the Unix epoch).
    pub completed_timestamp_ms: u64,
    /// The checkpointing mode it was taken in.
    pub mode: CheckpointingMode,
    /// The number of key groups; a restore must use the same.
    pub max_parallelism: u32,
    /// Size of the `_metadata` file in bytes.
    pub metadata_bytes: u64,
    /// Number of state files.
    pub state_files: u64,
    /// Total size of the state files in bytes (envelopes included), as on disk.
    pub state_file_bytes: u64,
    /// Of `state_file_bytes`, the bytes of shared files that earlier checkpoints wrote
    /// (incremental checkpoints, `shared/`): the rest is what this checkpoint wrote.
    pub shared_bytes: u64,
    /// Every operator the metadata lists, in its order.
    pub operators: Vec<OperatorDescription>,
    /// Per task: synchronous pause, asynchronous write time, alignment, bytes.
    pub tasks: Vec<TaskStatsMeta>,
    /// Tasks that took their snapshot unaligned (zero: an aligned checkpoint).
    pub unaligned_tasks: u32,
    /// The records in flight an unaligned checkpoint saved, per receiving subtask and
    /// input channel (`ch-<subtask>-<channel>` files; counted in `state_files` too).
    pub channel_state: Vec<ChannelStateRef>,
}

impl CheckpointDescription {
    /// Everything the checkpoint occupies on disk: state files plus `_metadata`.
    pub fn total_bytes(&self) -> u64 {
        self.state_file_bytes + self.metadata_bytes
    }

    /// What this checkpoint wrote: its total less the shared files of earlier ones.
    pub fn new_bytes(&self) -> u64 {
        self.total_bytes().saturating_sub(self.shared_bytes)
    }
}

/// The `_metadata` of the checkpoint (or savepoint) in folder `path`, decoded (any layout):
/// for tools that need what [`describe`] summarises, such as an incremental checkpoint's
/// chains.
pub fn metadata(path: &Path) -> Result<CheckpointMetadata> {
    Ok(read_meta(path)?.0)
}

/// One operator's part of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorDescription {
    /// The operator's uid (what `weir state dump --uid` takes).
    pub uid: String,
    /// Its parallelism when the checkpoint was taken.
    pub parallelism: u32,
    /// Number of its state files.
    pub files: u64,
    /// Size of its state files in bytes (envelopes included).
    pub file_bytes: u64,
    /// Its states: keyed states in declaration order, then operator lists by name. Empty for
    /// a stateless operator.
    pub states: Vec<StateDescription>,
}

/// One named state of an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDescription {
    /// The state's name (what `weir state dump --state` takes).
    pub name: String,
    /// Keyed or operator state.
    pub scope: StateScope,
    /// Its kind, as recorded in the files.
    pub kind: StateKind,
    /// Keyed entries (one per key) or list elements. `None` for a keyed state that shares
    /// its files with other non-empty keyed states: entries are concatenated without
    /// framing, so they cannot be told apart without the job's types.
    pub entries: Option<u64>,
    /// Encoded size of the entries in bytes (without file overhead).
    pub bytes: u64,
    /// For keyed state, the number of key groups that hold entries; 0 for operator state.
    pub key_groups: u32,
}

impl StateDescription {
    /// The kind's human name (see [`kind_name`]).
    pub fn kind_name(&self) -> String {
        kind_name(self.scope, self.kind)
    }
}

impl fmt::Display for StateScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StateScope::Keyed => "keyed",
            StateScope::Operator => "operator",
        })
    }
}

/// Describes the checkpoint (or savepoint) in folder `path`: its metadata and, for every
/// operator, each state's kind, entries and bytes. Reads and verifies every state file, so
/// a checkpoint that describes cleanly also has intact files.
pub fn describe(path: &Path) -> Result<CheckpointDescription> {
    let (meta, metadata_bytes) = read_meta(path)?;
    let mut operators = Vec::with_capacity(meta.operators.len());
    let (mut state_files, mut state_file_bytes) = (0, 0);
    for op in &meta.operators {
        let files = op_files(path, &meta, op)?;
        let mut keyed: Vec<StateDescription> = Vec::new();
        let mut lists: BTreeMap<String, StateDescription> = BTreeMap::new();
        for file in &files.operator {
            for (name, list) in &file.lists {
                let d = lists
                    .entry(name.clone())
                    .or_insert_with(|| StateDescription {
                        name: name.clone(),
                        scope: StateScope::Operator,
                        kind: list.kind.unwrap_or(StateKind::OperatorList),
                        entries: Some(0),
                        bytes: 0,
                        key_groups: 0,
                    });
                d.entries = d.entries.map(|n| n + list.elements.len() as u64);
                d.bytes += list.elements.iter().map(|e| e.len() as u64).sum::<u64>();
            }
        }
        for file in &files.keyed {
            // Each state's non-empty key groups in this file, or for a chain in its base and
            // deltas together (a state made after the base appears in the deltas only).
            let mut groups: BTreeMap<usize, BTreeSet<u32>> = BTreeMap::new();
            let chain = std::iter::once(&file.content).chain(&file.deltas);
            for content in chain {
                for (i, (name, kind)) in content.states.iter().enumerate() {
                    let idx = match keyed.iter().position(|d| &d.name == name) {
                        Some(idx) => idx,
                        None => {
                            keyed.push(StateDescription {
                                name: name.clone(),
                                scope: StateScope::Keyed,
                                kind: *kind,
                                entries: Some(0),
                                bytes: 0,
                                key_groups: 0,
                            });
                            keyed.len() - 1
                        }
                    };
                    for section in &content.groups {
                        let len = section.states[i].len() as u64;
                        if len > 0 {
                            keyed[idx].bytes += len;
                            groups.entry(idx).or_default().insert(section.group);
                        }
                    }
                }
            }
            // Entries of a full file are attributable only when at most one state has any;
            // a chain's are the base's changed by its deltas: not counted.
            let holders = groups.len();
            for (idx, set) in groups {
                let d = &mut keyed[idx];
                d.key_groups += set.len() as u32;
                d.entries = if holders == 1 && file.deltas.is_empty() {
                    d.entries.map(|n| n + file.entries)
                } else {
                    None
                };
            }
        }
        let chained: u64 = files.keyed.iter().map(|f| f.deltas.len() as u64).sum();
        let n_files = (files.operator.len() + files.keyed.len()) as u64 + chained;
        state_files += n_files;
        state_file_bytes += files.bytes;
        keyed.extend(lists.into_values());
        operators.push(OperatorDescription {
            uid: op.uid.clone(),
            parallelism: op.parallelism,
            files: n_files,
            file_bytes: files.bytes,
            states: keyed,
        });
    }
    let shared_bytes = meta
        .incremental
        .iter()
        .map(|c| c.new_and_shared_bytes(meta.checkpoint_id).1)
        .sum();
    state_files += meta.channel_state.len() as u64;
    state_file_bytes += meta.channel_state.iter().map(|c| c.file.size).sum::<u64>();
    Ok(CheckpointDescription {
        path: path.to_path_buf(),
        checkpoint_id: meta.checkpoint_id,
        snapshot: meta.snapshot,
        weir_version: meta.weir_version,
        job_name: meta.job_name,
        trigger_timestamp_ms: meta.trigger_timestamp_ms,
        completed_timestamp_ms: meta.completed_timestamp_ms,
        mode: meta.mode,
        max_parallelism: meta.max_parallelism,
        metadata_bytes,
        state_files,
        state_file_bytes,
        shared_bytes,
        operators,
        tasks: meta.tasks,
        unaligned_tasks: meta.unaligned_tasks,
        channel_state: meta.channel_state,
    })
}

/// The entries of state `state` of operator `uid` in the checkpoint at `path`, still
/// encoded. Reads only that operator's files. If a keyed state and an operator list share
/// the name, the keyed state is returned.
pub fn raw_state(path: &Path, uid: &str, state: &str) -> Result<RawState> {
    let (meta, _) = read_meta(path)?;
    let Some(op) = meta.operators.iter().find(|o| o.uid == uid) else {
        let mut known: Vec<String> = meta.operators.iter().map(|o| o.uid.clone()).collect();
        known.sort();
        known.dedup();
        return Err(InspectError::UnknownUid {
            checkpoint: path.to_path_buf(),
            uid: uid.to_string(),
            known,
        });
    };
    let files = op_files(path, &meta, op)?;
    let mut base = RawState {
        checkpoint: path.to_path_buf(),
        checkpoint_id: meta.checkpoint_id,
        job_name: meta.job_name.clone(),
        uid: uid.to_string(),
        name: state.to_string(),
        scope: StateScope::Keyed,
        kind: StateKind::Value,
        entries: RawEntries::Keyed(Vec::new()),
    };

    let mut keyed_kind = None;
    let mut groups = Vec::new();
    for file in &files.keyed {
        // A state made after the base appears in the deltas only.
        let mut by_group: BTreeMap<u32, RawKeyGroup> = BTreeMap::new();
        let chain = std::iter::once(&file.content).chain(&file.deltas);
        for (n, content) in chain.enumerate() {
            let Some(i) = content.states.iter().position(|(name, _)| name == state) else {
                continue;
            };
            keyed_kind.get_or_insert(content.states[i].1);
            for section in &content.groups {
                let bytes = &section.states[i];
                if bytes.is_empty() {
                    continue;
                }
                let g = by_group
                    .entry(section.group)
                    .or_insert_with(|| RawKeyGroup {
                        subtask: file.subtask,
                        key_group: section.group,
                        bytes: Vec::new(),
                        changes: Vec::new(),
                    });
                if n == 0 {
                    g.bytes = bytes.clone();
                } else {
                    g.changes.push(bytes.clone());
                }
            }
        }
        groups.extend(by_group.into_values());
    }
    if let Some(kind) = keyed_kind {
        groups.sort_by_key(|g| (g.key_group, g.subtask));
        base.kind = kind;
        base.entries = RawEntries::Keyed(groups);
        return Ok(base);
    }

    let mut list_kind = None;
    let mut lists = Vec::new();
    for file in &files.operator {
        if let Some(list) = file.lists.get(state) {
            if list_kind.is_none() {
                list_kind = list.kind;
            }
            lists.push(RawList {
                subtask: file.subtask,
                elements: list.elements.clone(),
            });
        }
    }
    if !lists.is_empty() {
        base.scope = StateScope::Operator;
        base.kind = list_kind.unwrap_or(StateKind::OperatorList);
        base.entries = RawEntries::Operator(lists);
        return Ok(base);
    }

    let mut known: Vec<String> = files
        .keyed
        .iter()
        .flat_map(|f| f.content.states.iter().map(|(n, _)| n.clone()))
        .chain(files.operator.iter().flat_map(|f| f.lists.keys().cloned()))
        .collect();
    known.sort();
    known.dedup();
    Err(InspectError::UnknownState {
        checkpoint: path.to_path_buf(),
        uid: uid.to_string(),
        state: state.to_string(),
        known,
    })
}

#[cfg(test)]
mod tests;
