//! An incremental checkpoint's delta fed by the barrier's write-back (the entries it
//! encoded, no LSM lookup) beside the keys it still looks up (written back earlier in the
//! interval by a full cache, or changed before an unconfirmed checkpoint): each restore is
//! compared against the truth. The harness is `incremental_tests.rs`'s (a 500-key cache).

use std::collections::BTreeMap;
use std::time::Duration;

use super::incremental_tests::{chain_owners, restored, Job};

/// Reads keys `keys` (state `plain`): each one the cache lacks is loaded, and once the
/// 500-key cache is full it is written back and emptied — the dirty keys go to the LSM
/// before the barrier, without counting as changed.
fn read(job: &mut Job, keys: std::ops::Range<u64>) {
    for k in keys {
        job.get(k);
    }
}

/// Restores checkpoint `id` of `job` on both backends and compares it with the truth.
fn assert_restores_exactly(job: &Job, id: u64) {
    let path = job.storage.checkpoint_path(id);
    let disk = job.state_dir.join(format!("restore-{id}"));
    assert_eq!(restored(&path, 1, Some(&disk)).unwrap(), job.truth, "disk");
    assert_eq!(restored(&path, 1, None).unwrap(), job.truth, "memory");
}

#[test]
fn a_delta_holds_the_barrier_write_backs_entries_and_the_keys_evicted_before_exactly() {
    let mut job = Job::with_base(1, 3000);
    // 200 keys changed, then written back by a full cache during the interval (the delta
    // looks them up), then 150 dirty at the barrier (the delta takes the write-back's
    // entries). Every seventh is deleted, on both paths. (Fewer than the 500 a set holds.)
    for k in 0..200 {
        if k % 7 == 0 {
            job.remove(k);
        } else {
            job.set(k, k * 3 + 1);
        }
    }
    read(&mut job, 1000..1600);
    for k in 200..350 {
        if k % 7 == 0 {
            job.remove(k);
        } else {
            job.set(k, k * 3 + 1);
        }
    }
    // Written back by a full cache, then changed again before the barrier: both sources
    // have the key, the barrier's entry is the newer.
    for k in (0..120).step_by(5) {
        job.set(k, 50_000 + k);
    }
    // Keys the base never had, at the barrier.
    for k in 5000..5040 {
        job.set(k, k);
    }
    let meta = job.checkpoint(2);
    assert_eq!(chain_owners(&meta), [1, 2], "a delta on the base");
    assert_restores_exactly(&job, 2);
    // And a delta of keys dirty at the barrier only.
    for k in 2000..2100 {
        job.set(k, k + 9);
    }
    job.remove(2100);
    let meta = job.checkpoint(3);
    assert_eq!(chain_owners(&meta), [1, 2, 3]);
    assert_restores_exactly(&job, 3);
}

#[test]
fn the_keys_of_an_aborted_or_unwritten_delta_reach_the_next_with_their_newest_values() {
    let mut job = Job::with_base(1, 2000);
    // 2 is written (its delta takes its barrier's entries), then aborted.
    for k in 10..50 {
        job.set(k, 200 + k);
    }
    job.remove(60);
    let _acks = job.snapshot(2);
    job.abort(2);
    // Key 10 changes again before the next barrier; key 11 changes and is then written
    // back by a full cache: the next delta must see both new values, not 2's entries.
    job.set(10, 1010);
    job.set(11, 1111);
    read(&mut job, 1000..1600);
    // 3 is snapshotted but never written (its view dropped unread), then aborted: its
    // barrier's write-back runs later, and its entries are never used.
    job.set(12, 1212);
    job.remove(13);
    let unread = job.subtasks[0].backend.snapshot_checkpoint(3).unwrap();
    drop(unread);
    job.subtasks[0].backend.notify_aborted(3);
    job.set(14, 1414);
    let meta = job.checkpoint(4);
    assert_eq!(chain_owners(&meta), [1, 4], "4 chains on confirmed 1 only");
    assert_restores_exactly(&job, 4);
}

#[test]
fn keys_a_savepoint_wrote_back_reach_the_next_delta() {
    let mut job = Job::with_base(1, 1000);
    job.set(5, 55);
    job.remove(6);
    // A savepoint's snapshot freezes the dirty keys 5 and 6 for its own write-back, which
    // its writer runs: the next checkpoint's delta must still hold them.
    let savepoint = job.subtasks[0].backend.snapshot().unwrap();
    for table in &savepoint.tables {
        for i in 0..table.view.shards() {
            table.view.take_shard(i).unwrap();
        }
    }
    drop(savepoint);
    job.set(7, 77);
    let meta = job.checkpoint(2);
    assert_eq!(chain_owners(&meta), [1, 2]);
    assert_restores_exactly(&job, 2);
}

/// The entries of state `name`'s delta in `snapshot`: key → its LSM value (with TTL,
/// `(value, stamp)`), or `None` for a delete.
fn delta_entries<V: serde::de::DeserializeOwned>(
    snapshot: &crate::state::keyed::KeyedSnapshot,
    name: &str,
) -> BTreeMap<u64, Option<V>> {
    let table = snapshot.tables.iter().find(|t| t.name == name).unwrap();
    let mut out = BTreeMap::new();
    for i in 0..table.view.shards() {
        let shard = table.view.take_shard(i).unwrap();
        let mut bytes = &shard.bytes[..];
        while !bytes.is_empty() {
            let ((k, v), rest) = postcard::take_from_bytes::<(u64, Option<V>)>(bytes).unwrap();
            assert!(out.insert(k, v).is_none(), "key {k} written twice");
            bytes = rest;
        }
    }
    out
}

#[test]
fn entries_expired_at_the_barrier_become_deletes_on_both_paths() {
    use crate::clock::manual::ManualClock;
    const T: u64 = 1_700_000_000_000;
    let clock = ManualClock::start_at(T);
    let mut job = Job::with_base(1, 1000);
    // At T: keys 0..300 (`aged` on multiples of 3, TTL one hour); the first 150 are
    // written back by a full cache, the others stay dirty until the barrier.
    for k in 0..150 {
        job.set(k, k + 1);
    }
    read(&mut job, 500..1000);
    for k in 150..300 {
        job.set(k, k + 1);
    }
    // An hour and a second later the entries stamped at T have expired; 30 keys are
    // written again (live).
    clock.advance(Duration::from_secs(3601));
    for k in 270..300 {
        job.set(k, k + 2);
    }
    let snapshot = job.subtasks[0].backend.snapshot_checkpoint(2).unwrap();
    let aged = delta_entries::<(u64, u64)>(&snapshot, "aged");
    let live = T + 3_601_000;
    for k in (0..300).filter(|k| k % 3 == 0) {
        let expected = (k >= 270).then_some((k + 3, live));
        assert_eq!(aged.get(&k), Some(&expected), "aged {k}");
    }
    let plain = delta_entries::<u64>(&snapshot, "plain");
    for k in 0..300 {
        let v = if k >= 270 { k + 2 } else { k + 1 };
        assert_eq!(plain.get(&k), Some(&Some(v)), "plain {k}");
    }
}
