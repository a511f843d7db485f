//! Which restored chain of an incremental checkpoint a subtask continues (Flink's claim
//! mode; docs/design-notes.md, "Incremental checkpoints"): only its own, in this job's
//! folder. Everything else restores as before and writes a new base first (no-claim).

use std::path::Path;
use std::sync::Arc;

use super::RestoredCheckpoint;
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed::ChainFile;

impl RestoredCheckpoint {
    /// Subtask `subtask` of `parallelism` of operator `uid`'s chain in this checkpoint, as
    /// the files its backend continues, when it is that subtask's own: the checkpoint's
    /// `max_parallelism` and the operator's parallelism are the job's (so the chain holds
    /// exactly the subtask's key groups), the checkpoint lies in `job_root` (the folder
    /// the job checkpoints into, whose `shared/` holds the chain and whose retention keeps
    /// it while a checkpoint lists it), none of the operator's states is dropped by this
    /// run, and every file is under `shared/`. `None` otherwise: a rescale, a checkpoint
    /// of another folder or job (never claimed: this run's retention would delete or keep
    /// files it does not own), a full checkpoint, a savepoint.
    pub fn own_chain(
        &self,
        uid: &str,
        subtask: u32,
        parallelism: u32,
        max_parallelism: u32,
        job_root: &Path,
    ) -> Option<Vec<ChainFile>> {
        let meta = &self.meta;
        if meta.max_parallelism != max_parallelism || !self.in_folder(job_root) {
            return None;
        }
        let op = meta.operators.iter().find(|o| o.uid == uid)?;
        let mine = KeyGroupRange::for_subtask(subtask, parallelism, max_parallelism);
        let recorded = op
            .subtasks
            .iter()
            .find(|s| s.subtask == subtask)?
            .keyed_state
            .as_ref()?
            .range;
        if op.parallelism != parallelism || recorded != mine {
            return None;
        }
        if self.dropped.iter().any(|(u, _)| u == uid) {
            return None;
        }
        let chain = meta.incremental_of(uid, subtask)?;
        let inside = |p: &str| p.starts_with("shared/") && !p.split('/').any(|c| c == "..");
        if !chain.files().all(|f| inside(&f.path)) {
            return None;
        }
        let index = meta.incremental_index_of(chain);
        Some(
            chain
                .files()
                .enumerate()
                .map(|(i, f)| ChainFile {
                    path: f.path.clone(),
                    size: f.size,
                    crc32c: f.crc32c,
                    checkpoint_id: f.checkpoint_id,
                    run_id: f.run_id.clone(),
                    index: index.and_then(|x| x.get(i)).cloned().map(Arc::new),
                })
                .collect(),
        )
    }

    /// Whether this checkpoint's folder lies directly in the job folder `job_root` (the
    /// same folder however the two were spelled, on a local disk).
    fn in_folder(&self, job_root: &Path) -> bool {
        let Some(parent) = self.path.parent() else {
            return false;
        };
        if parent == job_root {
            return true;
        }
        match (parent.canonicalize(), job_root.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}
