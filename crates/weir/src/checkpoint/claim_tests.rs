//! A restore continues the restored chain (Flink's claim mode; docs/design-notes.md,
//! "Incremental checkpoints"): the first checkpoint after restoring a subtask's own chain
//! from this job's folder is a delta listing the restored files, also after a lazy restore
//! (which then still fetched only what was touched); at another parallelism, from another
//! folder, or with a restored state left undeclared it is a new base, as before. Retention
//! keeps the restored files while a checkpoint lists them, also once the restored
//! checkpoint itself is retired.

use super::*;

/// Restores the checkpoint at `path` into `job` at parallelism `p`, as a new attempt does:
/// each subtask's backend (disk, incremental, in a fresh folder `dir`) declares its states
/// and then continues its own chain if the checkpoint lies in `job_root`. Returns whether
/// each subtask continued.
fn resume(
    job: &mut Job,
    path: &std::path::Path,
    p: u32,
    lazy: bool,
    job_root: &std::path::Path,
) -> Vec<bool> {
    let checkpoint = restore::load_with(path, Some(lazy)).unwrap();
    let dir = job.state_dir.join(format!("resumed-{}", fastrand::u64(..)));
    let mut continued = Vec::new();
    job.subtasks = (0..p)
        .map(|i| {
            let (_, keyed) = checkpoint.state_for(UID, i, p, MAXP).unwrap();
            let range = KeyGroupRange::for_subtask(i, p, MAXP);
            let backend = KeyedStateBackend::with_kind(&kind(&dir, true), range, MAXP, keyed);
            let mut s = declare(backend.unwrap());
            let unclaimed = s.backend.unclaimed();
            let chain = checkpoint.own_chain(UID, i, p, MAXP, job_root);
            continued.push(s.backend.continue_restored_chain(chain, &unclaimed));
            s
        })
        .collect();
    job.p = p;
    continued
}

/// Two subtasks, 3000 keys: checkpoint 1 a base, 2 a delta.
fn base_and_delta_of_two() -> Job {
    let mut job = Job::new(2);
    for k in 0..3000 {
        job.set(k, k);
    }
    job.checkpoint(1);
    for k in (0..3000).step_by(50) {
        job.set(k, k + 1);
    }
    job.checkpoint(2);
    job
}

/// The first two keys owned by subtask `i` of `p`.
fn keys_of(i: u32, p: u32) -> (u64, u64) {
    let range = KeyGroupRange::for_subtask(i, p, MAXP);
    let mut keys = (0..).filter(|k| range.contains(key_group(k, MAXP)));
    (keys.next().unwrap(), keys.next().unwrap())
}

fn continues_the_restored_chain(lazy: bool) {
    let mut job = base_and_delta_of_two();
    let at_2 = meta_of(&job.storage, 2);
    let root = job.storage.root().to_path_buf();
    let path = job.storage.checkpoint_path(2);
    assert_eq!(resume(&mut job, &path, 2, lazy, &root), [true, true]);
    // Subtask 0 changes two keys, subtask 1 nothing.
    let (k, k2) = keys_of(0, 2);
    job.set(k, 77);
    job.remove(k2);
    let third = job.checkpoint(3);
    let old0 = at_2.incremental_of(UID, 0).unwrap();
    let new0 = third.incremental_of(UID, 0).unwrap();
    assert_eq!(new0.base, old0.base, "the restored base is listed again");
    assert_eq!(
        new0.deltas[..1],
        old0.deltas[..],
        "so is the restored delta"
    );
    assert_eq!(new0.deltas.len(), 2, "and one new delta: {new0:?}");
    assert_eq!(new0.deltas[1].checkpoint_id, 3);
    let (new, _) = new0.new_and_shared_bytes(3);
    assert!(
        new < at_2.incremental_of(UID, 0).unwrap().base.size / 10,
        "the delta holds two keys: {new} bytes"
    );
    assert_eq!(
        third.incremental_of(UID, 1).unwrap(),
        at_2.incremental_of(UID, 1).unwrap(),
        "an unchanged subtask lists the restored chain as it is"
    );
    if lazy {
        for s in &job.subtasks {
            let left: usize = s.backend.remote_groups().iter().map(|(_, n)| n).sum();
            assert!(
                left > 0,
                "the first checkpoint fetched no key group it did not touch"
            );
        }
    }
    // Retention keeps the restored files once the restored checkpoints are retired.
    job.retain(1);
    job.assert_no_orphan_and_nothing_missing();
    assert_eq!(
        restored(&job.storage.checkpoint_path(3), 2, None).unwrap(),
        job.truth
    );
    job.set(k2, 5);
    let fourth = job.checkpoint(4);
    assert_eq!(fourth.incremental_of(UID, 0).unwrap().deltas.len(), 3);
    job.retain(1);
    job.assert_no_orphan_and_nothing_missing();
    let disk = job.state_dir.join("check");
    assert_eq!(
        restored(&job.storage.checkpoint_path(4), 2, Some(&disk)).unwrap(),
        job.truth
    );
    // A restore of a continued chain continues it again; rescaled it is exact too.
    let path = job.storage.checkpoint_path(4);
    assert_eq!(resume(&mut job, &path, 2, lazy, &root), [true, true]);
    job.set(k, 78);
    let fifth = job.checkpoint(5);
    assert_eq!(fifth.incremental_of(UID, 0).unwrap().deltas.len(), 4);
    assert_eq!(
        restored(&job.storage.checkpoint_path(5), 3, None).unwrap(),
        job.truth
    );
}

#[test]
fn the_first_checkpoint_after_a_restore_is_a_delta_on_the_restored_chain() {
    continues_the_restored_chain(false);
}

#[test]
fn after_a_lazy_restore_too_and_it_fetches_only_what_was_touched() {
    continues_the_restored_chain(true);
}

#[test]
fn at_another_parallelism_the_first_checkpoint_is_a_new_base() {
    let mut job = base_and_delta_of_two();
    let root = job.storage.root().to_path_buf();
    let path = job.storage.checkpoint_path(2);
    assert_eq!(resume(&mut job, &path, 3, false, &root), [false; 3]);
    job.set(1, 9);
    let third = job.checkpoint(3);
    for i in 0..3 {
        let chain = third.incremental_of(UID, i).unwrap();
        assert!(chain.deltas.is_empty(), "subtask {i}: {chain:?}");
        assert_eq!(chain.base.checkpoint_id, 3);
    }
    job.assert_no_orphan_and_nothing_missing();
    assert_eq!(
        restored(&job.storage.checkpoint_path(3), 3, None).unwrap(),
        job.truth
    );
}

#[test]
fn from_another_folder_the_first_checkpoint_is_a_new_base() {
    let mut job = base_and_delta_of_two();
    let path = job.storage.checkpoint_path(2);
    let other = job.state_dir.join("elsewhere/job");
    std::fs::create_dir_all(&other).unwrap();
    assert_eq!(resume(&mut job, &path, 2, false, &other), [false, false]);
    job.set(1, 9);
    let third = job.checkpoint(3);
    for i in 0..2 {
        let chain = third.incremental_of(UID, i).unwrap();
        assert!(chain.deltas.is_empty() && chain.base.checkpoint_id == 3);
    }
    // The same folder spelled another way is this job's.
    let root = job.storage.root().to_path_buf();
    let spelled = root.join("..").join(root.file_name().unwrap());
    let checkpoint = restore::load(&path).unwrap();
    assert!(checkpoint.own_chain(UID, 0, 2, MAXP, &spelled).is_some());
    assert!(checkpoint.own_chain(UID, 0, 2, MAXP * 2, &root).is_none());
}

#[test]
fn a_restored_state_left_undeclared_or_dropped_is_not_continued() {
    let job = base_and_delta_of_two();
    let path = job.storage.checkpoint_path(2);
    let checkpoint = restore::load(&path).unwrap();
    let (_, keyed) = checkpoint.state_for(UID, 0, 2, MAXP).unwrap();
    let range = KeyGroupRange::for_subtask(0, 2, MAXP);
    let dir = job.state_dir.join("undeclared");
    let mut backend =
        KeyedStateBackend::<u64>::with_kind(&kind(&dir, true), range, MAXP, keyed).unwrap();
    KeyedStateStore::new(&mut backend)
        .value_state::<u64>("plain")
        .unwrap();
    let unclaimed = backend.unclaimed();
    assert_eq!(unclaimed, ["aged"]);
    let chain = checkpoint.own_chain(UID, 0, 2, MAXP, job.storage.root());
    assert!(chain.is_some());
    assert!(!backend.continue_restored_chain(chain, &unclaimed));
    // Nor with incremental checkpoints off.
    let (_, keyed) = checkpoint.state_for(UID, 0, 2, MAXP).unwrap();
    let mut s = declare(
        KeyedStateBackend::with_kind(&kind(&dir.join("off"), false), range, MAXP, keyed).unwrap(),
    );
    let chain = checkpoint.own_chain(UID, 0, 2, MAXP, job.storage.root());
    assert!(!s.backend.continue_restored_chain(chain, &[]));
    // Nor a chain with a state this run drops (--allow-non-restored-state).
    let mut checkpoint = checkpoint;
    checkpoint.drop_state(UID, "aged");
    assert!(checkpoint
        .own_chain(UID, 0, 2, MAXP, job.storage.root())
        .is_none());
}
