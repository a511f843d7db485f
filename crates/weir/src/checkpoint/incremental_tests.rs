//! Incremental checkpoints end to end at the checkpoint layer, on the disk backend: what a
//! checkpoint writes, what `_metadata` lists, retention of shared files, restores (also
//! rescaled, on either backend) and the fallback past a missing or damaged shared file.
//! The job-level runs (SIGKILL and `--restore latest`, rescale) are in
//! `crates/weir-cli/tests/incremental_checkpoints.rs`.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::barrier::{BarrierKind, CheckpointingMode};
use super::finalize::{self, CheckpointInfo};
use super::metadata::{CheckpointMetadata, SnapshotKind};
use super::restore;
use super::shared;
use super::snapshot::{OperatorSnapshotPart, TaskSnapshot};
use super::storage::{read_metadata, CheckpointStorage};
use super::writer::{write_snapshot, SnapshotJob, SnapshotPayload, TaskAck};
use crate::state::key_group::{key_group, KeyGroupRange};
use crate::state::keyed::{
    DiskOptions, KeyedContext, KeyedEndContext, KeyedStateBackend, KeyedStateStore,
    StateBackendKind, StateTtlConfig, ValueState,
};

pub(super) const MAXP: u32 = 32;
pub(super) const UID: &str = "count";

/// One subtask of the keyed operator `count`: its backend and its two states.
pub(super) struct Subtask {
    pub(super) backend: KeyedStateBackend<u64>,
    pub(super) plain: ValueState<u64>,
    pub(super) aged: ValueState<u64>,
}

/// Operator `count` at parallelism `p` on the disk backend with incremental checkpoints,
/// writing into a job folder, and the truth every restore must give back.
pub(super) struct Job {
    _tmp: tempfile::TempDir,
    pub(super) storage: CheckpointStorage,
    p: u32,
    pub(super) subtasks: Vec<Subtask>,
    pub(super) truth: BTreeMap<u64, u64>,
    pub(super) state_dir: std::path::PathBuf,
}

fn kind(dir: &std::path::Path, incremental: bool) -> StateBackendKind {
    let mut options = DiskOptions::new(dir);
    options.cache_entries = 500;
    options.incremental = incremental;
    StateBackendKind::Disk(options)
}

fn declare(mut backend: KeyedStateBackend<u64>) -> Subtask {
    let mut store = KeyedStateStore::new(&mut backend);
    let plain = store.value_state::<u64>("plain").unwrap();
    let ttl = StateTtlConfig::new(Duration::from_secs(3600));
    let aged = store.with_ttl(ttl).value_state::<u64>("aged").unwrap();
    Subtask {
        backend,
        plain,
        aged,
    }
}

impl Job {
    pub(super) fn new(p: u32) -> Job {
        let tmp = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::open(&tmp.path().join("chk"), "job").unwrap();
        let state_dir = tmp.path().join("state");
        let subtasks = (0..p)
            .map(|i| {
                let range = KeyGroupRange::for_subtask(i, p, MAXP);
                let k = kind(&state_dir, true);
                declare(KeyedStateBackend::with_kind(&k, range, MAXP, BTreeMap::new()).unwrap())
            })
            .collect();
        Job {
            _tmp: tmp,
            storage,
            p,
            subtasks,
            truth: BTreeMap::new(),
            state_dir,
        }
    }

    /// [`Job::new`] with keys `0..keys` set to themselves and checkpoint 1 taken: the base
    /// most tests change and checkpoint again.
    pub(super) fn with_base(p: u32, keys: u64) -> Job {
        let mut job = Job::new(p);
        for k in 0..keys {
            job.set(k, k);
        }
        job.checkpoint(1);
        job
    }

    fn owner(&mut self, k: u64) -> &mut Subtask {
        let g = key_group(&k, MAXP);
        let i = (0..self.p)
            .find(|&i| KeyGroupRange::for_subtask(i, self.p, MAXP).contains(g))
            .unwrap();
        &mut self.subtasks[i as usize]
    }

    /// Sets key `k` to `v` in both states (`aged` only on every third key).
    pub(super) fn set(&mut self, k: u64, v: u64) {
        let s = self.owner(k);
        let (plain, aged) = (s.plain, s.aged);
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut s.backend,
        };
        ctx.set(plain, v);
        if k.is_multiple_of(3) {
            ctx.set(aged, v + 1);
        }
        self.truth.insert(k, v);
    }

    /// Reads key `k` of state `plain`, as a record does: a key the cache lacks is loaded,
    /// and a full cache is written back and emptied.
    pub(super) fn get(&mut self, k: u64) -> Option<u64> {
        let s = self.owner(k);
        let plain = s.plain;
        KeyedContext {
            key: &k,
            backend: &mut s.backend,
        }
        .get(plain)
        .copied()
    }

    /// Removes key `k` from both states.
    pub(super) fn remove(&mut self, k: u64) {
        let s = self.owner(k);
        let (plain, aged) = (s.plain, s.aged);
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut s.backend,
        };
        ctx.clear(plain);
        ctx.clear(aged);
        self.truth.remove(&k);
    }

    /// Every subtask snapshots checkpoint `id` and writes it: the acknowledgements.
    pub(super) fn snapshot(&mut self, id: u64) -> Vec<TaskAck> {
        let p = self.p;
        let mut acks = Vec::new();
        for (i, s) in self.subtasks.iter_mut().enumerate() {
            let mut snapshot = TaskSnapshot::new();
            snapshot.parts.push(OperatorSnapshotPart {
                uid: UID.into(),
                operator_state: Default::default(),
                keyed: Some(s.backend.snapshot_checkpoint(id).unwrap()),
            });
            let job = SnapshotJob {
                attempt: 0,
                task: i,
                subtask: i as u32,
                parallelism: p,
                checkpoint_id: id,
                snapshot: SnapshotPayload::Captured(snapshot),
                sync: Duration::ZERO,
                alignment: Duration::ZERO,
                frozen: false,
                times: Default::default(),
            };
            acks.push(write_snapshot(&self.storage, job).unwrap());
        }
        acks
    }

    /// Completes checkpoint `id` from `acks` as the executor does (the chain check, then
    /// `_metadata`); returns the metadata. The subtasks are told by [`Job::notify`].
    pub(super) fn complete(
        &mut self,
        id: u64,
        acks: &[TaskAck],
    ) -> Result<CheckpointMetadata, String> {
        let names: Vec<String> = (0..self.p).map(|i| format!("count ({i})")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let info = CheckpointInfo {
            id,
            job_name: "job",
            trigger_ms: 1,
            completed_ms: 2,
            mode: CheckpointingMode::ExactlyOnce,
            max_parallelism: MAXP,
            snapshot: SnapshotKind::of(BarrierKind::Checkpoint),
            run_id: self.storage.run_id(),
            task_names: &names,
            baseline: &[],
        };
        let done = finalize::assemble(&info, acks);
        shared::check_chain(&self.storage, id, &done.meta.incremental)?;
        finalize::write(&self.storage, &done.meta).unwrap();
        Ok(done.meta)
    }

    /// Every subtask hears that checkpoint `id` completed.
    pub(super) fn notify(&mut self, id: u64) {
        for s in &mut self.subtasks {
            s.backend.notify_complete(id).unwrap();
        }
    }

    /// Every subtask hears that checkpoint `id` was aborted, and it is discarded.
    pub(super) fn abort(&mut self, id: u64) {
        for s in &mut self.subtasks {
            s.backend.notify_aborted(id);
        }
        shared::discard(&self.storage, id).unwrap();
    }

    pub(super) fn checkpoint(&mut self, id: u64) -> CheckpointMetadata {
        let acks = self.snapshot(id);
        let meta = self.complete(id, &acks).unwrap();
        self.notify(id);
        meta
    }

    /// Keeps the newest `retained` complete checkpoints, discarding the others as the
    /// coordinator's retention does.
    fn retain(&self, retained: usize) {
        let ids = self.storage.completed_checkpoints().unwrap();
        for id in &ids[..ids.len().saturating_sub(retained)] {
            shared::discard(&self.storage, *id).unwrap();
        }
    }

    /// Every shared file in storage is listed by a complete checkpoint, and every file a
    /// complete checkpoint lists is in storage.
    fn assert_no_orphan_and_nothing_missing(&self) {
        let mut listed = HashSet::new();
        for id in self.storage.completed_checkpoints().unwrap() {
            let meta = meta_of(&self.storage, id);
            for f in meta.shared_files() {
                assert!(
                    self.storage.shared_file_exists(&f.path),
                    "checkpoint {id} lists {} which is gone",
                    f.path
                );
                listed.insert(f.path.clone());
            }
        }
        for f in self.storage.shared_files().unwrap() {
            assert!(listed.contains(&f), "orphaned shared file {f}");
        }
    }
}

pub(super) fn meta_of(storage: &CheckpointStorage, id: u64) -> CheckpointMetadata {
    CheckpointMetadata::decode(&read_metadata(&storage.checkpoint_path(id)).unwrap()).unwrap()
}

/// Every `(key, plain)` restored from the checkpoint at `path` at parallelism `p`, on the
/// disk backend (`disk`) or in memory; also checks `aged` on every third key.
pub(super) fn restored(
    path: &std::path::Path,
    p: u32,
    disk: Option<&std::path::Path>,
) -> crate::error::Result<BTreeMap<u64, u64>> {
    let checkpoint = restore::load(path)?;
    let mut out = BTreeMap::new();
    for i in 0..p {
        let (_, keyed) = checkpoint.state_for(UID, i, p, MAXP)?;
        let range = KeyGroupRange::for_subtask(i, p, MAXP);
        let backend = match disk {
            Some(dir) => KeyedStateBackend::with_kind(&kind(dir, false), range, MAXP, keyed)?,
            None => KeyedStateBackend::new(range, MAXP, keyed),
        };
        let mut s = declare(backend);
        let aged: BTreeMap<u64, u64> = KeyedEndContext {
            backend: &mut s.backend,
        }
        .entries(s.aged)
        .collect();
        let mut end = KeyedEndContext {
            backend: &mut s.backend,
        };
        for (k, v) in end.entries(s.plain) {
            assert_eq!(
                aged.get(&k).copied(),
                k.is_multiple_of(3).then_some(v + 1),
                "key {k}"
            );
            assert!(range.contains(key_group(&k, MAXP)));
            out.insert(k, v);
        }
        assert_eq!(
            aged.len(),
            out.iter()
                .filter(|(k, _)| k.is_multiple_of(3) && range.contains(key_group(*k, MAXP)))
                .count()
        );
    }
    Ok(out)
}

#[test]
fn a_checkpoint_after_one_percent_changed_writes_about_one_percent_and_restores_exactly() {
    let mut job = Job::new(1);
    for k in 0..20_000 {
        job.set(k, k);
    }
    let first = job.checkpoint(1);
    let full_bytes = first.stats.bytes;
    let chain = first.incremental_of(UID, 0).expect("an incremental chain");
    assert!(chain.deltas.is_empty(), "the first checkpoint is a base");
    assert_eq!(chain.base.checkpoint_id, 1);
    // 1 % of the keys change: 150 updated, 50 removed.
    for k in (0..20_000).step_by(100) {
        if k % 400 == 0 {
            job.remove(k);
        } else {
            job.set(k, k + 7);
        }
    }
    let second = job.checkpoint(2);
    let new_bytes = second.stats.bytes;
    assert!(
        (new_bytes as f64) < 0.05 * full_bytes as f64,
        "a checkpoint after 1 % of the keys changed wrote {new_bytes} bytes against \
         {full_bytes} for the full state"
    );
    let chain = second.incremental_of(UID, 0).unwrap();
    assert_eq!(chain.base, first.incremental_of(UID, 0).unwrap().base);
    assert_eq!(chain.deltas.len(), 1);
    assert_eq!(chain.deltas[0].checkpoint_id, 2);
    assert_eq!(chain.new_and_shared_bytes(2), (new_bytes, full_bytes));
    // Older Weirs refuse it instead of restoring it without keyed state.
    let keyed = second.operators[0].subtasks[0]
        .keyed_state
        .as_ref()
        .unwrap();
    assert!(
        keyed.file.path.starts_with("../shared/"),
        "{}",
        keyed.file.path
    );
    // An unchanged state writes nothing and keeps its chain.
    let third = job.checkpoint(3);
    assert_eq!(third.stats.bytes, 0);
    assert_eq!(third.incremental_of(UID, 0).unwrap(), chain);
    let path = job.storage.checkpoint_path(3);
    let disk = job.state_dir.join("restore");
    assert_eq!(restored(&path, 1, Some(&disk)).unwrap(), job.truth);
    assert_eq!(restored(&path, 1, None).unwrap(), job.truth);
}

#[test]
fn rescaling_an_incremental_checkpoint_from_two_to_three_subtasks_is_exact_on_both_backends() {
    let mut job = Job::new(2);
    for k in 0..3000 {
        job.set(k, k);
    }
    job.checkpoint(1);
    for round in 0..4u64 {
        for k in (round..3000).step_by(37) {
            if k % 5 == 0 {
                job.remove(k);
            } else {
                job.set(k, k * 2 + round);
            }
        }
        job.checkpoint(2 + round);
    }
    let path = job.storage.checkpoint_path(5);
    let chains = &meta_of(&job.storage, 5).incremental;
    assert_eq!(chains.len(), 2);
    assert!(chains.iter().all(|c| c.deltas.len() == 4), "{chains:?}");
    let disk = job.state_dir.join("restore");
    for p in [3, 2, 1] {
        assert_eq!(
            restored(&path, p, Some(&disk)).unwrap(),
            job.truth,
            "p={p}, disk"
        );
        assert_eq!(
            restored(&path, p, None).unwrap(),
            job.truth,
            "p={p}, memory"
        );
    }
}

#[test]
fn an_aborted_checkpoint_is_never_chained_on_and_its_changes_reach_the_next() {
    let mut job = Job::new(1);
    for k in 0..2000 {
        job.set(k, k);
    }
    job.checkpoint(1);
    job.set(5, 500);
    job.remove(6);
    // Checkpoint 2 is written, then aborted (a task declined, or it timed out).
    let _acks = job.snapshot(2);
    job.abort(2);
    job.set(7, 700);
    let third = job.checkpoint(3);
    let chain = third.incremental_of(UID, 0).unwrap();
    let owners: Vec<u64> = chain.files().map(|f| f.checkpoint_id).collect();
    assert_eq!(
        owners,
        [1, 3],
        "3 chains on confirmed 1, never on aborted 2"
    );
    job.assert_no_orphan_and_nothing_missing();
    let path = job.storage.checkpoint_path(3);
    assert_eq!(restored(&path, 1, None).unwrap(), job.truth);
}

/// The owners of subtask 0's chain in `meta`, oldest first.
pub(super) fn chain_owners(meta: &CheckpointMetadata) -> Vec<u64> {
    let chain = meta.incremental_of(UID, 0).unwrap();
    chain.files().map(|f| f.checkpoint_id).collect()
}

/// A job of 1000 keys with checkpoint 1 its base and 2, 3 deltas of 30 % of the keys each:
/// past half the base, the next checkpoint is a new base.
fn base_then_two_deltas_of_30_percent() -> Job {
    let mut job = Job::new(1);
    for k in 0..1000 {
        job.set(k, k);
    }
    job.checkpoint(1);
    for round in 0..2 {
        for k in (0..1000).filter(|k| k % 10 < 3) {
            job.set(k, k + round + 1);
        }
        job.checkpoint(2 + round);
    }
    job
}

#[test]
fn a_snapshot_taken_before_the_news_of_a_newer_base_fails_if_retention_removed_its_chain() {
    let mut job = base_then_two_deltas_of_30_percent();
    assert_eq!(chain_owners(&meta_of(&job.storage, 3)), [1, 2, 3]);
    // 4 and 5 are taken before either is confirmed: both new bases.
    job.set(1, 11);
    let acks4 = job.snapshot(4);
    job.set(2, 22);
    let acks5 = job.snapshot(5);
    assert_eq!(chain_owners(&job.complete(4, &acks4).unwrap()), [4]);
    job.notify(4);
    // 6 chains on 4; then 5 completes (its news is late) and retention keeps only 5,
    // removing 4's base, which 6 builds on: 6 must fail rather than reference it.
    job.set(3, 33);
    let acks6 = job.snapshot(6);
    assert_eq!(chain_owners(&job.complete(5, &acks5).unwrap()), [5]);
    job.retain(1);
    let err = job.complete(6, &acks6).unwrap_err();
    assert!(err.contains("retention removed"), "{err}");
    job.abort(6);
    job.notify(5);
    job.set(4, 44);
    assert_eq!(chain_owners(&job.checkpoint(7)), [5, 7]);
    job.assert_no_orphan_and_nothing_missing();
    assert_eq!(
        restored(&job.storage.checkpoint_path(7), 1, None).unwrap(),
        job.truth
    );
}

#[test]
fn retention_holds_a_released_chain_until_the_checkpoints_triggered_before_it_finished() {
    let mut job = base_then_two_deltas_of_30_percent();
    // As in the race above: 4 and 5 are new bases, 6 is taken on 4 before 5 completes.
    job.set(1, 11);
    let acks4 = job.snapshot(4);
    job.set(2, 22);
    let acks5 = job.snapshot(5);
    job.complete(4, &acks4).unwrap();
    job.notify(4);
    job.set(3, 33);
    let acks6 = job.snapshot(6);
    job.complete(5, &acks5).unwrap();
    // Retention as the running job does it: 6 was triggered (next id 7) and is in flight.
    let held = shared::Deferred::default();
    for id in 1..=4 {
        held.hold(7, shared::discard_holding(&job.storage, id).unwrap());
    }
    held.release(&job.storage, Some(6)).unwrap();
    assert_eq!(
        chain_owners(&job.complete(6, &acks6).unwrap()),
        [4, 6],
        "4's base was held"
    );
    job.notify(5);
    job.notify(6);
    held.release(&job.storage, None).unwrap();
    job.assert_no_orphan_and_nothing_missing();
    shared::discard(&job.storage, 5).unwrap();
    job.set(4, 44);
    assert_eq!(chain_owners(&job.checkpoint(7)), [4, 6, 7]);
    job.assert_no_orphan_and_nothing_missing();
    assert_eq!(
        restored(&job.storage.checkpoint_path(7), 1, None).unwrap(),
        job.truth
    );
}

#[test]
fn retention_of_three_checkpoints_leaves_no_orphaned_shared_file_after_many() {
    let mut job = Job::new(2);
    let mut rng = fastrand::Rng::with_seed(7);
    for k in 0..4000 {
        job.set(k, k);
    }
    let mut bases = 0;
    for id in 1..=40u64 {
        // Mostly small changes; now and then most keys (a new base), a removal burst, or a
        // checkpoint that is aborted after its files were written.
        let changes = if id % 13 == 0 { 3000 } else { 40 };
        for _ in 0..changes {
            let k = rng.u64(0..4000);
            if rng.u8(..) < 30 {
                job.remove(k);
            } else {
                job.set(k, rng.u64(..1000));
            }
        }
        if id % 7 == 0 {
            let _ = job.snapshot(id);
            job.abort(id);
        } else {
            let meta = job.checkpoint(id);
            bases += meta
                .shared_files()
                .filter(|f| f.checkpoint_id == id && !f.path.contains("-kgd-"))
                .count();
        }
        job.retain(3);
        job.assert_no_orphan_and_nothing_missing();
    }
    assert!(
        bases > 2,
        "new bases were written along the way ({bases} files)"
    );
    let latest = *job.storage.completed_checkpoints().unwrap().last().unwrap();
    assert_eq!(
        restored(&job.storage.checkpoint_path(latest), 3, None).unwrap(),
        job.truth
    );
    // A new run finds nothing to sweep.
    assert_eq!(shared::sweep_orphans(&job.storage).unwrap(), 0);
}

#[test]
fn a_missing_or_damaged_shared_file_is_detected_and_the_restore_falls_back() {
    let mut job = Job::new(1);
    for k in 0..2000 {
        job.set(k, k);
    }
    job.checkpoint(1);
    let at_1 = job.truth.clone();
    job.set(1, 100);
    job.checkpoint(2);
    let at_2 = job.truth.clone();
    job.set(2, 200);
    let third = job.checkpoint(3);
    let root = job.storage.root().to_path_buf();
    // Damage 3's own delta: 3 is skipped, naming the file, and 2 restores.
    let delta3 = &third.incremental_of(UID, 0).unwrap().deltas[1];
    assert_eq!(delta3.checkpoint_id, 3);
    let file = root.join(&delta3.path);
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();
    let (found, skipped) = restore::load_latest(&job.storage).unwrap();
    assert_eq!(found.as_ref().unwrap().meta.checkpoint_id, 2);
    assert_eq!(skipped.len(), 1);
    assert!(
        skipped[0].contains("skipping checkpoint 3") && skipped[0].contains(&delta3.path),
        "{}",
        skipped[0]
    );
    let disk = job.state_dir.join("restore");
    assert_eq!(
        restored(&job.storage.checkpoint_path(2), 1, Some(&disk)).unwrap(),
        at_2
    );
    // Remove 2's delta (3 lists it too): both are skipped and 1 restores.
    let delta2 = &third.incremental_of(UID, 0).unwrap().deltas[0];
    std::fs::remove_file(root.join(&delta2.path)).unwrap();
    let (found, skipped) = restore::load_latest(&job.storage).unwrap();
    assert_eq!(found.as_ref().unwrap().meta.checkpoint_id, 1);
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped[1].contains(&delta2.path), "{}", skipped[1]);
    assert_eq!(
        restored(&job.storage.checkpoint_path(1), 1, None).unwrap(),
        at_1
    );
}

#[test]
fn savepoints_and_checkpoints_without_the_flag_stay_full() {
    let tmp = tempfile::tempdir().unwrap();
    let range = KeyGroupRange::for_subtask(0, 1, MAXP);
    let k = kind(&tmp.path().join("state"), false);
    let mut s = declare(KeyedStateBackend::with_kind(&k, range, MAXP, BTreeMap::new()).unwrap());
    let mut ctx = KeyedContext {
        key: &1,
        backend: &mut s.backend,
    };
    ctx.set(s.plain, 1);
    let snapshot = s.backend.snapshot_checkpoint(1).unwrap();
    assert!(snapshot.incremental.is_none(), "without the flag: full");
    let mut job = Job::new(1);
    job.set(1, 1);
    let savepoint = job.subtasks[0].backend.snapshot().unwrap();
    assert!(savepoint.incremental.is_none(), "a savepoint is full");
}

#[test]
fn the_inspect_tools_tell_new_from_shared_bytes_and_dump_a_chain_merged() {
    use super::inspect::{describe, raw_state};
    let mut job = Job::new(1);
    for k in 0..500 {
        job.set(k, k);
    }
    let first = job.checkpoint(1);
    job.set(1, 10);
    let second = job.checkpoint(2);
    let base = describe(&job.storage.checkpoint_path(1)).unwrap();
    assert_eq!(base.shared_bytes, 0);
    assert!(raw_state(&job.storage.checkpoint_path(1), UID, "plain").is_ok());
    let chained = describe(&job.storage.checkpoint_path(2)).unwrap();
    let (new, shared) = second
        .incremental_of(UID, 0)
        .unwrap()
        .new_and_shared_bytes(2);
    assert_eq!(chained.shared_bytes, shared);
    assert_eq!(shared, first.stats.bytes);
    assert_eq!(chained.state_file_bytes, new + shared);
    assert_eq!(chained.operators[0].files, 2, "the base and one delta");
    // A chain dumps as the base with its deltas applied: changed, removed and new keys
    // (on two subtasks, so a group may live in the deltas only), and the TTL state's
    // entries with their stamps.
    let mut job = Job::new(2);
    for k in 0..300 {
        job.set(k, k);
    }
    job.checkpoint(1);
    job.set(7, 70);
    job.remove(8);
    job.set(1_000, 1);
    job.checkpoint(2);
    job.remove(9);
    job.set(7, 71);
    job.set(2_001, 2);
    job.checkpoint(3);
    let chk = job.storage.checkpoint_path(3);
    let raw = raw_state(&chk, UID, "plain").unwrap();
    let super::inspect::RawEntries::Keyed(groups) = &raw.entries else {
        panic!("keyed")
    };
    assert!(groups.iter().any(|g| !g.changes.is_empty()), "a chain");
    let mut dumped: Vec<(u64, u64)> = raw
        .keyed_entries::<u64, u64>()
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect();
    dumped.sort();
    let truth: Vec<(u64, u64)> = job.truth.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(dumped, truth);
    let aged = raw_state(&chk, UID, "aged").unwrap();
    let mut aged: Vec<(u64, u64)> = aged
        .keyed_entries::<u64, (u64, u64)>()
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.value.0))
        .collect();
    aged.sort();
    let truth: Vec<(u64, u64)> = truth
        .iter()
        .filter(|(k, _)| k.is_multiple_of(3))
        .map(|(k, v)| (*k, v + 1))
        .collect();
    assert_eq!(aged, truth);
    // describe counts a chain's states over its base and deltas, entries unknown.
    let described = describe(&chk).unwrap();
    let plain = described.operators[0]
        .states
        .iter()
        .find(|s| s.name == "plain")
        .unwrap();
    assert_eq!(plain.entries, None);
    assert!(plain.key_groups > 0 && plain.bytes > 0);
    // A base written before any key was set holds no state: the states then appear in the
    // deltas only, and describe still lists them.
    let mut late = Job::new(1);
    late.checkpoint(1);
    late.set(5, 5);
    late.set(6, 6);
    late.checkpoint(2);
    let described = describe(&late.storage.checkpoint_path(2)).unwrap();
    let names: Vec<&str> = described.operators[0]
        .states
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert!(names.contains(&"plain"), "{names:?}");
    // The wrong types are reported, in a delta as in a base.
    let err = raw.keyed_entries::<String, u64>().unwrap_err().to_string();
    assert!(err.contains("cannot decode state 'plain'"), "{err}");
}

/// A shared file a writer was killed in the middle of (its temp name) is not a shared file,
/// and the next owner's sweep removes it with the orphans.
#[test]
fn a_half_written_shared_file_is_swept_with_the_orphans() {
    let tmp = tempfile::tempdir().unwrap();
    let s = CheckpointStorage::open(tmp.path(), "job-1").unwrap();
    let kind = crate::storage::FileKind::KeyedStateDelta;
    s.write_shared_file_streamed::<crate::storage::StorageError>(
        "op",
        "chk-3-kgd-0-7",
        kind,
        |w| w.write(b"d"),
    )
    .unwrap();
    let temp = s.root().join("shared/op/.chk-4-kg-0-7.tmp-999999-1");
    std::fs::write(&temp, b"half").unwrap();
    assert_eq!(s.shared_files().unwrap(), ["shared/op/chk-3-kgd-0-7"]);
    assert_eq!(
        s.shared_temp_files().unwrap(),
        ["shared/op/.chk-4-kg-0-7.tmp-999999-1"]
    );
    // No complete checkpoint lists the delta either: both go.
    assert_eq!(shared::sweep_orphans(&s).unwrap(), 2);
    assert!(!temp.exists());
    assert!(s.shared_files().unwrap().is_empty());
}

#[path = "lazy_restore_tests.rs"]
mod lazy_restore;

#[path = "claim_tests.rs"]
mod claim;

/// What the dashboard's state table is made of (issue 25 item 6;
/// `runtime/status/state_size.rs` adds it up): each acknowledgement of a delta names its
/// chain — the base written for the first checkpoint (shared), the delta for this one
/// (new) — and where the state lived at the barrier: the LSM's bytes on local disk, the
/// caches' entries in memory.
#[test]
fn an_ack_names_its_chain_files_owners_and_where_the_state_lived() {
    let mut job = Job::new(2);
    for k in 0..4000 {
        job.set(k, k);
    }
    job.checkpoint(1);
    for k in 0..20 {
        job.set(k, k + 1);
    }
    let acks = job.snapshot(2);
    job.complete(2, &acks).unwrap();
    for ack in &acks {
        let op = &ack.operators[0];
        let chain = op.incremental.as_ref().expect("a chain");
        assert_eq!(chain.base.checkpoint_id, 1, "the shared base");
        let owners: Vec<u64> = chain.deltas.iter().map(|d| d.checkpoint_id).collect();
        assert_eq!(owners, [2], "the new delta");
        let delta = chain.deltas[0].size;
        assert!(
            delta > 0 && delta < chain.base.size / 10,
            "{delta} against {}",
            chain.base.size
        );
        // Both states' 2000-odd keys went through caches of 500 entries each: the LSM holds
        // them on disk, the caches at most 2 × 500.
        assert!(op.local.disk_bytes > 0, "{:?}", op.local);
        assert!(
            (1..=1000).contains(&op.local.memory_entries),
            "{:?}",
            op.local
        );
    }
    // In memory: nothing on disk, every entry decoded.
    let range = KeyGroupRange::for_subtask(0, 1, MAXP);
    let mut s = declare(KeyedStateBackend::new(range, MAXP, BTreeMap::new()));
    KeyedContext {
        key: &5,
        backend: &mut s.backend,
    }
    .set(s.plain, 1);
    assert_eq!(
        s.backend.local_size(),
        crate::state::keyed::LocalStateSize {
            disk_bytes: 0,
            memory_entries: 1
        }
    );
}

/// A full cache's eviction records as many keys as the cache holds; the barrier after it
/// adds its own. With the cache's size as the change set's bound that overflowed, and every
/// eviction cost a whole new base (`incremental::change_limit`).
#[test]
fn a_full_caches_eviction_and_the_next_barrier_still_make_a_delta() {
    let mut job = Job::new(1);
    for k in 0..2000 {
        job.set(k, k);
    }
    job.checkpoint(1);
    // 600 new keys into a cache of 500: it fills with dirty keys and is written back whole
    // (500 keys recorded), and the barrier writes back the other 100.
    for k in 2000..2600 {
        job.set(k, k);
    }
    let meta = job.checkpoint(2);
    assert_eq!(
        chain_owners(&meta),
        [1, 2],
        "a delta on the base, not a new base"
    );
    assert_eq!(
        restored(&job.storage.checkpoint_path(2), 1, None).unwrap(),
        job.truth
    );
}
