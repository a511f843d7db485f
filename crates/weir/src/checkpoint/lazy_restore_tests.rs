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
    let checkpoint = restore::load_with(path, Some(true)).unwrap();
    assert!(
        checkpoint.remote_bytes() > 0,
        "the restore left the state in storage"
    );
    let (_, keyed) = checkpoint.state_for(UID, i, p, MAXP).unwrap();
    let range = KeyGroupRange::for_subtask(i, p, MAXP);
    declare(KeyedStateBackend::with_kind(&kind(dir, false), range, MAXP, keyed).unwrap())
}

fn remote_groups(s: &Subtask) -> BTreeMap<String, usize> {
    s.backend.remote_groups().into_iter().collect()
}

/// A base and a delta of 2000 keys over every key group, one subtask.
fn base_and_delta() -> Job {
    let mut job = Job::new(1);
    for k in 0..2000 {
        job.set(k, k);
    }
    job.checkpoint(1);
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
    let mut job = Job::new(2);
    for k in 0..3000 {
        job.set(k, k);
    }
    job.checkpoint(1);
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
