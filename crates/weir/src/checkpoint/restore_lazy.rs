//! The lazy side of a restore (issue 25 item 4): the chains of an incremental checkpoint
//! left in the checkpoint storage, checked by size without being read, and each subtask's
//! sections of them, fetched by key group on first access (`state/keyed/remote.rs`).

use std::path::Path;
use std::sync::Arc;

use super::{job_folder, RestoredCheckpoint};
use crate::checkpoint::layout;
use crate::checkpoint::metadata::{CheckpointMetadata, IncrementalKeyedRef};
use crate::error::{Error, Result};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed::{
    self as remote, FileIndex, GroupRead, RemoteFile, RemoteSection, RestoredKeyedState,
};
use crate::storage::format::{HEADER_LEN, TRAILER_LEN};

/// One subtask's chain left in the checkpoint storage: each file with its index, base
/// first.
pub(super) struct RemoteChain {
    pub(super) range: KeyGroupRange,
    pub(super) files: Vec<(Arc<RemoteFile>, Arc<FileIndex>, bool)>,
}

/// Whether a restore leaves the shared files of incremental checkpoints in storage and
/// fetches key groups on first access: by default when the checkpoint storage is remote
/// (an object store, where reading the whole state first is what costs), as Flink's ForSt
/// backend does; `WEIR_LAZY_RESTORE=true|false` forces it either way (tests, benchmarks).
pub(super) fn lazy_restore(store: &dyn crate::storage::backend::StorageBackend) -> bool {
    match std::env::var("WEIR_LAZY_RESTORE").as_deref() {
        Ok("true" | "1") => true,
        Ok("false" | "0") => false,
        _ => store
            .local_file(crate::storage::METADATA_FILE_NAME)
            .is_none(),
    }
}

/// Checks one subtask's chain without reading it (a lazy restore): every file must exist
/// with the size `_metadata` recorded and must not have failed a fetch earlier in this
/// process, and its index must fit its size and the checkpoint's key groups. What this
/// cannot see (a file damaged in place) is found by each section's checksum when fetched.
pub(super) fn check_remote_chain(
    path: &Path,
    meta: &CheckpointMetadata,
    chain: &IncrementalKeyedRef,
    index: &[FileIndex],
    store: Arc<dyn crate::storage::backend::StorageBackend>,
) -> Result<RemoteChain> {
    let job = job_folder(path)?;
    let mut files = Vec::with_capacity(index.len());
    let mut range = None;
    for (i, (f, idx)) in chain.files().zip(index).enumerate() {
        let shown = job.join(&f.path);
        let fail = |why: String| {
            Error::Restore(format!(
                "shared state file {} of checkpoint {} (written for checkpoint {}): {why}; \
                 restore from another checkpoint",
                shown.display(),
                meta.checkpoint_id,
                f.checkpoint_id
            ))
        };
        if remote::is_known_bad(&shown) {
            return Err(fail(
                "a fetch of its key groups failed earlier in this run (see above)".into(),
            ));
        }
        let size = store.size(&f.path).map_err(|e| {
            if e.is_not_found() {
                fail(
                    "it is missing: the checkpoint is incomplete or its shared files were \
                      deleted"
                        .into(),
                )
            } else {
                fail(e.to_string())
            }
        })?;
        if size != f.size {
            return Err(fail(format!(
                "it has {size} bytes where the checkpoint recorded {}: it is damaged or was \
                 replaced",
                f.size
            )));
        }
        let body_end = f.size.saturating_sub(TRAILER_LEN as u64);
        let states = idx.states.len();
        for g in &idx.groups {
            let bad = g.sections.len() != states
                || g.group >= meta.max_parallelism
                || g.sections.iter().any(|s| {
                    s.offset < HEADER_LEN as u64 || s.offset.saturating_add(s.len) > body_end
                });
            if bad {
                return Err(fail(format!(
                    "its index in _metadata does not fit the file (key group {}); the \
                     metadata is damaged",
                    g.group
                )));
            }
        }
        let file_range = idx.groups.first().zip(idx.groups.last());
        if i == 0 {
            range = file_range.map(|(a, b)| (a.group, b.group));
        }
        files.push((
            Arc::new(RemoteFile {
                store: Arc::clone(&store),
                key: f.path.clone(),
                shown,
                checkpoint_id: meta.checkpoint_id,
            }),
            Arc::new(idx.clone()),
            i > 0,
        ));
    }
    // The chain's range: what its subtask owned (the keyed file reference records it).
    let range = meta
        .operators
        .iter()
        .find(|o| o.uid == chain.uid)
        .and_then(|o| o.subtasks.iter().find(|s| s.subtask == chain.subtask))
        .and_then(|s| s.keyed_state.as_ref())
        .map(|k| k.range)
        .or_else(|| {
            range.map(|(a, b)| KeyGroupRange {
                start: a,
                end: b + 1,
            })
        })
        .unwrap_or(KeyGroupRange { start: 0, end: 0 });
    Ok(RemoteChain { range, files })
}

impl RestoredCheckpoint {
    /// Appends to `keyed` the sections of operator `uid`'s chains left in storage for the
    /// key groups of `mine`: per key group, the base's then each delta's, in chain order.
    pub(super) fn collect_remote(
        &self,
        keyed: &mut RestoredKeyedState,
        uid: &str,
        mine: KeyGroupRange,
    ) {
        for chain in self.remote_chains.get(uid).into_iter().flatten() {
            if !layout::file_holds_groups_of(chain.range, mine) {
                continue;
            }
            for group in mine.start..mine.end {
                for (file, index, delta) in &chain.files {
                    let Ok(at) = index.groups.binary_search_by_key(&group, |g| g.group) else {
                        continue;
                    };
                    let spans = &index.groups[at].sections;
                    let wanted: Vec<_> = index
                        .states
                        .iter()
                        .zip(spans)
                        .enumerate()
                        .filter(|(_, ((name, _), span))| {
                            span.len > 0 && !self.is_dropped(uid, name)
                        })
                        .collect();
                    // One read of the group for every state that wants a section of it.
                    let wanted_spans: Vec<_> = wanted.iter().map(|(_, (_, s))| **s).collect();
                    let shared = GroupRead::new(&wanted_spans).filter(|_| wanted.len() > 1);
                    for (i, ((name, kind), span)) in wanted {
                        let ttl = index.ttl.get(i).copied().unwrap_or(false);
                        let state = self.restored_state(keyed, uid, ttl, name, *kind);
                        state.remote.push(RemoteSection {
                            file: Arc::clone(file),
                            group,
                            span: *span,
                            delta: *delta,
                            shared: shared.clone(),
                        });
                    }
                }
            }
        }
    }

    /// The notice of a lazy restore: how much keyed state stays in `shared` (the job's
    /// shared folder) to be fetched on first access; `None` if the restore read it all.
    pub fn lazy_notice(&self, shared: &Path) -> Option<String> {
        let remote = self.remote_bytes();
        (remote > 0).then(|| {
            format!(
                "restoring lazily: {remote} bytes of keyed state stay in {} and are fetched \
                 by key group on first access",
                shared.display()
            )
        })
    }

    /// Bytes of shared files a lazy restore left in storage (0: it read everything).
    pub fn remote_bytes(&self) -> u64 {
        self.remote_chains
            .values()
            .flatten()
            .flat_map(|c| &c.files)
            .map(|(_, index, _)| {
                index
                    .groups
                    .iter()
                    .flat_map(|g| &g.sections)
                    .map(|s| s.len)
                    .sum::<u64>()
            })
            .sum()
    }
}
