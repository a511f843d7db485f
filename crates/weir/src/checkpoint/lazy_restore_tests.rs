//! A lazy restore of incremental checkpoints (issue 25 item 4), at the checkpoint layer on
//! local storage with the lazy mode forced on (it is the default only for remote storage;
//! `crates/weir-cli/tests/disk_state_remote.rs` runs it on moto S3): nothing is read up
//! front, a key group is fetched on its first access and only it, reading the whole state
//! fetches the rest, restores are exact also rescaled and on the memory backend, and a
//! missing or damaged shared file is reported naming it — a damaged one when fetched, after
//! which the checkpoint is refused for the rest of the process.

use super::*;
use crate::state::keyed::KeyedContext;

/// Restores the checkpoint at `path` lazily for subtask `i` of `p` on the disk backend in
/// `dir`: the backend with its two states declared, nothing fetched.
fn lazy_subtask(path: &std::path::Path, i: u32, p: u32, dir: &std::path::Path) -> Subtask {
    lazy_subtask_with(path, i, p, dir, false)
}

/// [`lazy_subtask`], with incremental checkpoints on or off.
fn lazy_subtask_with(
    path: &std::path::Path,
    i: u32,
    p: u32,
    dir: &std::path::Path,
    incremental: bool,
) -> Subtask {
    let checkpoint = restore::load_with(path, Some(true)).unwrap();
    assert!(
        checkpoint.remote_bytes() > 0,
        "the restore left the state in storage"
    );
    let (_, keyed) = checkpoint.state_for(UID, i, p, MAXP).unwrap();
    let range = KeyGroupRange::for_subtask(i, p, MAXP);
    declare(KeyedStateBackend::with_kind(&kind(dir, incremental), range, MAXP, keyed).unwrap())
}

fn remote_groups(s: &Subtask) -> BTreeMap<String, usize> {
    s.backend.remote_groups().into_iter().collect()
}

/// A base and a delta of 2000 keys over every key group, one subtask.
fn base_and_delta() -> Job {
    let mut job = Job::with_base(1, 2000);
    for k in (0..2000).step_by(10) {
        if k % 30 == 0 {
            job.remove(k);
        } else {
            job.set(k, k + 5);
        }
    }
    job.checkpoint(2);
    job
}

#[test]
fn a_lazy_restore_fetches_a_key_group_on_its_first_access_and_only_it() {
    let job = base_and_delta();
    let path = job.storage.checkpoint_path(2);
    let mut s = lazy_subtask(&path, 0, 1, &job.state_dir.join("lazy"));
    let all = MAXP as usize;
    assert_eq!(
        remote_groups(&s),
        BTreeMap::from([("aged".to_string(), all), ("plain".to_string(), all)]),
        "every key group of both states is still in storage"
    );
    // Reading one key fetches its key group of the state read, nothing else.
    let k = 7u64;
    let plain = s.plain;
    let got = KeyedContext {
        key: &k,
        backend: &mut s.backend,
    }
    .get(plain)
    .copied();
    assert_eq!(got, job.truth.get(&k).copied());
    assert_eq!(
        remote_groups(&s),
        BTreeMap::from([("aged".to_string(), all), ("plain".to_string(), all - 1)])
    );
    // A write to a key of another group fetches that group before the write lands.
    let other = (0u64..)
        .find(|o| key_group(o, MAXP) != key_group(&k, MAXP) && job.truth.contains_key(o))
        .unwrap();
    let mut ctx = KeyedContext {
        key: &other,
        backend: &mut s.backend,
    };
    *ctx.get_mut_or_insert_with(plain, || 0) += 1;
    let mut truth = job.truth.clone();
    *truth.get_mut(&other).unwrap() += 1;
    assert_eq!(remote_groups(&s)["plain"], all - 2);
    // Reading the whole state fetches the rest, and it is exact.
    let mut end = KeyedEndContext {
        backend: &mut s.backend,
    };
    let plain_now: BTreeMap<u64, u64> = end.entries(plain).collect();
    assert_eq!(plain_now, truth);
    let aged: BTreeMap<u64, u64> = end.entries(s.aged).collect();
    let aged_truth: BTreeMap<u64, u64> = job
        .truth
        .iter()
        .filter(|(k, _)| k.is_multiple_of(3))
        .map(|(k, v)| (*k, v + 1))
        .collect();
    assert_eq!(aged, aged_truth);
    assert!(remote_groups(&s).values().all(|&n| n == 0));
}

#[test]
fn a_lazy_restore_is_exact_rescaled_and_on_the_memory_backend() {
    let mut job = Job::with_base(2, 3000);
    for k in (0..3000).step_by(7) {
        job.set(k, k * 2);
    }
    job.checkpoint(2);
    let path = job.storage.checkpoint_path(2);
    for p in [1, 3] {
        let mut all = BTreeMap::new();
        for i in 0..p {
            let dir = job.state_dir.join(format!("lazy-{p}-{i}"));
            let mut s = lazy_subtask(&path, i, p, &dir);
            let mut end = KeyedEndContext {
                backend: &mut s.backend,
            };
            all.extend(end.entries(s.plain));
        }
        assert_eq!(all, job.truth, "at parallelism {p}");
    }
    // The memory backend fetches every section at declaration.
    let checkpoint = restore::load_with(&path, Some(true)).unwrap();
    let (_, keyed) = checkpoint.state_for(UID, 0, 1, MAXP).unwrap();
    let range = KeyGroupRange::for_subtask(0, 1, MAXP);
    let mut s = declare(KeyedStateBackend::new(range, MAXP, keyed));
    let mut end = KeyedEndContext {
        backend: &mut s.backend,
    };
    let all: BTreeMap<u64, u64> = end.entries(s.plain).collect();
    assert_eq!(all, job.truth);
}

#[test]
fn a_missing_shared_file_fails_the_lazy_restore_at_once_naming_it() {
    let job = base_and_delta();
    let meta = meta_of(&job.storage, 2);
    let delta = &meta.incremental_of(UID, 0).unwrap().deltas[0];
    std::fs::remove_file(job.storage.root().join(&delta.path)).unwrap();
    let e = restore::load_with(&job.storage.checkpoint_path(2), Some(true))
        .err()
        .expect("a missing file fails the restore")
        .to_string();
    assert!(e.contains(&delta.path) && e.contains("missing"), "{e}");
}

#[test]
fn a_damaged_section_fails_its_fetch_naming_the_file_and_the_checkpoint_is_refused_after() {
    let job = base_and_delta();
    let path = job.storage.checkpoint_path(2);
    let meta = meta_of(&job.storage, 2);
    let base = &meta.incremental_of(UID, 0).unwrap().base;
    let file = job.storage.root().join(&base.path);
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();
    // Same size: the restore starts, and the fetch of the damaged section fails.
    let mut s = lazy_subtask(&path, 0, 1, &job.state_dir.join("damaged"));
    let (plain, aged) = (s.plain, s.aged);
    let mut end = KeyedEndContext {
        backend: &mut s.backend,
    };
    // (The damaged byte is in one state's section: reading both reaches it.)
    let e = end
        .apply_to_all_keys(&plain, |_| Ok(()))
        .and_then(|()| end.apply_to_all_keys(&aged, |_| Ok(())))
        .expect_err("the damaged section fails its fetch")
        .to_string();
    assert!(e.contains(&base.path) && e.contains("checksum"), "{e}");
    // A restart does not restore from it again.
    let e = restore::load_with(&path, Some(true))
        .err()
        .expect("the checkpoint is refused now")
        .to_string();
    assert!(
        e.contains(&base.path) && e.contains("failed earlier"),
        "{e}"
    );
}

/// Written at parallelism 2 (a base and a delta with updates and deletes), for a rescaled
/// lazy restore at parallelism 1, whose first checkpoint is then a new base.
fn two_subtasks_base_and_delta() -> Job {
    let mut job = Job::with_base(2, 3000);
    for k in (0..3000).step_by(7) {
        job.set(k, k * 2);
    }
    for k in (0..3000).step_by(11) {
        job.remove(k);
    }
    job.checkpoint(2);
    job
}

/// The CRC-32C of every state's section of every key group of the base checkpoint `id`
/// wrote for subtask 0 (from `_metadata`'s index): equal for two bases iff their sections
/// are byte for byte the same.
fn base_sections(storage: &CheckpointStorage, id: u64) -> Vec<(u32, Vec<u32>)> {
    let meta = meta_of(storage, id);
    let chain = meta.incremental_of(UID, 0).expect("an incremental chain");
    assert!(chain.deltas.is_empty(), "checkpoint {id} is a base");
    assert_eq!(chain.base.checkpoint_id, id, "written for checkpoint {id}");
    let index = &meta.incremental_index_of(chain).expect("indexed")[0];
    index
        .groups
        .iter()
        .map(|g| (g.group, g.sections.iter().map(|s| s.crc32c).collect()))
        .collect()
}

#[test]
fn a_new_base_after_a_lazy_restore_streams_untouched_groups_from_the_chain_and_they_follow_it() {
    let mut job = two_subtasks_base_and_delta();
    let path = job.storage.checkpoint_path(2);
    let old = meta_of_chain_files(&path);
    let all = MAXP as usize;
    // Rescaled to one subtask: no chain of its own to continue, so checkpoint 3 is a base.
    job.subtasks = vec![lazy_subtask_with(
        &path,
        0,
        1,
        &job.state_dir.join("a"),
        true,
    )];
    job.p = 1;
    job.set(5, 55);
    job.remove(6);
    let touched = remote_groups(&job.subtasks[0]);
    assert_eq!(touched["plain"], all - 2);
    job.checkpoint(3);
    assert_eq!(
        remote_groups(&job.subtasks[0]),
        touched,
        "the base loaded no untouched key group into the LSM"
    );
    let streamed = base_sections(&job.storage, 3);
    // The same state loaded whole (every group fetched into the LSM first) writes the
    // same bytes: the streamed sections come out in the LSM's order.
    let mut loaded = lazy_subtask_with(&path, 0, 1, &job.state_dir.join("b"), true);
    for k in [5u64, 6] {
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut loaded.backend,
        };
        if k == 5 {
            ctx.set(loaded.plain, 55);
        } else {
            ctx.clear(loaded.plain);
            ctx.clear(loaded.aged);
        }
    }
    let _: Vec<_> = KeyedEndContext {
        backend: &mut loaded.backend,
    }
    .entries(loaded.plain)
    .collect();
    let _: Vec<_> = KeyedEndContext {
        backend: &mut loaded.backend,
    }
    .entries(loaded.aged)
    .collect();
    assert!(remote_groups(&loaded).values().all(|&n| n == 0));
    let streamed_live = std::mem::replace(&mut job.subtasks[0], loaded);
    job.checkpoint(4);
    assert_eq!(base_sections(&job.storage, 4), streamed, "byte for byte");
    job.subtasks[0] = streamed_live;
    // The base restores exactly, eagerly on disk and in memory, also rescaled.
    let third = job.storage.checkpoint_path(3);
    let dir = job.state_dir.join("eager");
    assert_eq!(restored(&third, 1, Some(&dir)).unwrap(), job.truth);
    assert_eq!(restored(&third, 3, None).unwrap(), job.truth);
    // Retention drops checkpoints 1 and 2 and every file of the chain the restore read:
    // the groups still in storage follow the confirmed base, and read back exact.
    job.retain(2);
    job.assert_no_orphan_and_nothing_missing();
    assert!(old.iter().all(|f| !job.storage.shared_file_exists(f)));
    let s = &mut job.subtasks[0];
    let (plain, aged) = (s.plain, s.aged);
    let mut end = KeyedEndContext {
        backend: &mut s.backend,
    };
    let now: BTreeMap<u64, u64> = end.entries(plain).collect();
    assert_eq!(now, job.truth);
    let aged_now: BTreeMap<u64, u64> = end.entries(aged).collect();
    let aged_truth: BTreeMap<u64, u64> = (job.truth.iter())
        .filter(|(k, _)| k.is_multiple_of(3))
        .map(|(k, v)| (*k, v + 1))
        .collect();
    assert_eq!(aged_now, aged_truth);
}

/// The shared files the checkpoint at `path` lists (read before retention removes it).
fn meta_of_chain_files(path: &std::path::Path) -> Vec<String> {
    let meta = CheckpointMetadata::decode(&read_metadata(path).unwrap()).unwrap();
    meta.shared_files().map(|f| f.path.clone()).collect()
}

/// One subtask at parallelism 1 whose LSM is bounded to `bound` bytes on local disk.
fn bounded_job(bound: u64) -> Job {
    let mut job = Job::new(1);
    let range = KeyGroupRange::for_subtask(0, 1, MAXP);
    let mut k = kind(&job.state_dir.join("bounded"), true);
    if let StateBackendKind::Disk(o) = &mut k {
        o.local_disk_bytes = Some(bound);
    }
    let backend = KeyedStateBackend::with_kind(&k, range, MAXP, BTreeMap::new()).unwrap();
    job.subtasks = vec![declare(backend)];
    job
}

/// Every entry of both states of subtask 0, read whole (which fetches every remote group
/// back), checked against the truth.
fn assert_exact(job: &mut Job) {
    let truth = job.truth.clone();
    let s = &mut job.subtasks[0];
    let (plain, aged) = (s.plain, s.aged);
    let mut end = KeyedEndContext {
        backend: &mut s.backend,
    };
    let now: BTreeMap<u64, u64> = end.entries(plain).collect();
    assert_eq!(now, truth);
    let aged_now: BTreeMap<u64, u64> = end.entries(aged).collect();
    let aged_truth: BTreeMap<u64, u64> = (truth.iter())
        .filter(|(k, _)| k.is_multiple_of(3))
        .map(|(k, v)| (*k, v + 1))
        .collect();
    assert_eq!(aged_now, aged_truth);
}

#[test]
fn past_its_bound_a_subtask_drops_unchanged_groups_and_fetches_them_back_exact() {
    // A bound of one byte: every key group nothing changed since the confirmed checkpoint
    // is dropped at its confirmation.
    let mut job = bounded_job(1);
    let all = MAXP as usize;
    for k in 0..3000 {
        job.set(k, k);
    }
    job.checkpoint(1);
    assert_eq!(
        remote_groups(&job.subtasks[0]),
        BTreeMap::from([("aged".to_string(), all), ("plain".to_string(), all)]),
        "every group was dropped: nothing changed since the barrier"
    );
    // A write fetches its group back. Checkpoint 2 is confirmed after another write: the
    // group of 7 (changed before 2's barrier, so 2's chain holds it) is dropped again, the
    // group of 8 (dirty since) stays.
    job.set(7, 70);
    assert_eq!(remote_groups(&job.subtasks[0])["plain"], all - 1);
    let acks = job.snapshot(2);
    job.set(8, 80);
    job.complete(2, &acks).unwrap();
    job.notify(2);
    assert_eq!(remote_groups(&job.subtasks[0])["plain"], all - 1);
    // Deltas, then a new base (past MAX_DELTAS): the base streams the dropped groups from
    // the chain, and once confirmed they follow it; retention then deletes the old chain.
    let mut id = 2;
    for round in 0..20u64 {
        id += 1;
        for k in (round..3000).step_by(97) {
            job.set(k, k + round);
        }
        job.checkpoint(id);
        assert!(
            remote_groups(&job.subtasks[0])["plain"] > 0,
            "checkpoint {id}"
        );
    }
    let meta = meta_of(&job.storage, id);
    let chain = meta.incremental_of(UID, 0).unwrap();
    assert!(chain.base.checkpoint_id > 2, "a new base was written");
    job.retain(1);
    job.assert_no_orphan_and_nothing_missing();
    let dir = job.state_dir.join("eager");
    assert_eq!(
        restored(&job.storage.checkpoint_path(id), 1, Some(&dir)).unwrap(),
        job.truth
    );
    assert_exact(&mut job);
}

/// A bounded subtask of 3000 keys whose every group is in storage, then deltas of one key
/// each until a checkpoint is a new base: that one is completed but the subtask is not
/// told. Returns its id and the files of the chain before it.
fn a_new_base_not_yet_heard_of() -> (Job, u64, Vec<String>) {
    let mut job = bounded_job(1);
    for k in 0..3000 {
        job.set(k, k);
    }
    job.checkpoint(1);
    let mut id = 1;
    loop {
        let older = meta_of_chain_files(&job.storage.checkpoint_path(id));
        id += 1;
        job.set(id, id * 10);
        let acks = job.snapshot(id);
        let meta = job.complete(id, &acks).unwrap();
        if meta.incremental_of(UID, 0).unwrap().base.checkpoint_id == id {
            return (job, id, older);
        }
        job.notify(id);
    }
}

#[test]
fn a_group_fetched_before_the_news_of_a_new_base_reads_it_when_retention_removed_its_chain() {
    // Retention with --retained-checkpoints 1 deletes the chain the groups in storage
    // point at as soon as the new base completes, before the subtask hears of it.
    let (mut job, base, older) = a_new_base_not_yet_heard_of();
    let remote = remote_groups(&job.subtasks[0])["plain"];
    assert!(remote > 0, "groups are in storage");
    job.retain(1);
    job.assert_no_orphan_and_nothing_missing();
    assert!(older.iter().all(|f| !job.storage.shared_file_exists(f)));
    // A key of a group in storage (not the group of the key set last): its group is read
    // from the new base's chain, exact.
    let k = (0..3000u64)
        .find(|k| key_group(k, MAXP) != key_group(&base, MAXP))
        .unwrap();
    // (Its one subtask fetches the key's group if it is in storage.)
    assert_eq!(job.get(k), job.truth.get(&k).copied());
    assert_eq!(remote_groups(&job.subtasks[0])["plain"], remote - 1);
    // Reading the whole state fetches every other group the same way.
    assert_exact(&mut job);
    // The news arrives late; the job goes on and restores exact.
    job.notify(base);
    job.set(1, 1);
    job.checkpoint(base + 1);
    let dir = job.state_dir.join("eager");
    let path = job.storage.checkpoint_path(base + 1);
    assert_eq!(restored(&path, 1, Some(&dir)).unwrap(), job.truth);
}

#[test]
fn a_missing_file_no_newer_snapshot_holds_fails_the_fetch_naming_it() {
    let mut job = bounded_job(1);
    for k in 0..3000 {
        job.set(k, k);
    }
    job.checkpoint(1);
    // Checkpoint 2 is a delta on 1's chain: it holds no group without 1's base.
    job.set(7, 70);
    let _acks = job.snapshot(2);
    let meta = meta_of(&job.storage, 1);
    let base = &meta.incremental_of(UID, 0).unwrap().base;
    std::fs::remove_file(job.storage.root().join(&base.path)).unwrap();
    let s = &mut job.subtasks[0];
    let plain = s.plain;
    let e = KeyedEndContext {
        backend: &mut s.backend,
    }
    .apply_to_all_keys(&plain, |_| Ok(()))
    .expect_err("the fetch fails")
    .to_string();
    assert!(e.contains(&base.path) && e.contains("checkpoint 1"), "{e}");
}

/// Without `--max-parallelism`, a run restoring a checkpoint takes the checkpoint's key
/// groups (the runner's precedence is `runner::flags`' unit test): the value is read from the
/// checkpoint's `_metadata`, for `--restore latest` and `--restore PATH`; a folder with no
/// checkpoint gives none.
#[test]
fn a_restored_checkpoint_tells_its_max_parallelism() {
    use super::restore::{latest_max_parallelism, max_parallelism_at};
    let mut job = Job::new(1);
    job.set(1, 1);
    job.checkpoint(1);
    let root = job.storage.root();
    let (dir, name) = (root.parent().unwrap(), root.file_name().unwrap());
    let name = name.to_str().unwrap();
    assert_eq!(latest_max_parallelism(dir, name), Some(MAXP));
    assert_eq!(
        max_parallelism_at(&job.storage.checkpoint_path(1)),
        Some(MAXP)
    );
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(latest_max_parallelism(empty.path(), name), None);
    assert_eq!(max_parallelism_at(&empty.path().join("chk-1")), None);
}
