//! The disk tier at a barrier: the synchronous phase freezes and writes nothing to the LSM;
//! the view writes back first; reads, deletes and evictions stay right while a write-back
//! is pending, and one nobody read is not lost.

use std::collections::BTreeMap;

use super::*;

/// A tier of `u64` counts over key groups 0..16 of 16, caching `cache` keys, in a folder
/// of its own (kept alive by the returned guard).
fn tier(cache: usize) -> (DiskTier<u64, u64>, CowMap<u64, u64>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let options = DiskOptions {
        cache_entries: cache,
        block_cache_bytes: 1 << 20,
        ..DiskOptions::new(dir.path())
    };
    let store = DiskStore::open(options).unwrap();
    (store.tier(0, 16).unwrap(), CowMap::default(), dir)
}

fn put(t: &mut DiskTier<u64, u64>, map: &mut CowMap<u64, u64>, k: u64, v: u64) {
    t.fault_in(map, None, &k, true).unwrap();
    map.insert(k, v);
}

fn delete(t: &mut DiskTier<u64, u64>, map: &mut CowMap<u64, u64>, k: u64) {
    t.fault_in(map, None, &k, true).unwrap();
    map.remove(&k);
}

fn get(t: &mut DiskTier<u64, u64>, map: &mut CowMap<u64, u64>, k: u64) -> Option<u64> {
    t.fault_in(map, None, &k, false).unwrap();
    map.get(&k).copied()
}

/// Entries in the live LSM (not a snapshot): what has been written back.
fn written(t: &DiskTier<u64, u64>) -> usize {
    t.ks.prefix(&t.prefix).count()
}

/// Every entry of a view.
fn read(view: &dyn TableSnapshot) -> BTreeMap<u64, u64> {
    let range = KeyGroupRange { start: 0, end: 16 };
    let mut groups = vec![Vec::new(); 16];
    view.encode_groups(16, range, &mut groups).unwrap();
    let mut out = BTreeMap::new();
    for g in groups {
        let mut rest: &[u8] = &g;
        while !rest.is_empty() {
            let ((k, v), after): ((u64, u64), _) = postcard::take_from_bytes(rest).unwrap();
            out.insert(k, v);
            rest = after;
        }
    }
    out
}

fn snapshot(t: &mut DiskTier<u64, u64>, map: &mut CowMap<u64, u64>) -> Box<dyn TableSnapshot> {
    t.snapshot(map, None, KeyGroupRange { start: 0, end: 16 })
        .unwrap()
        .expect("a state with entries")
}

#[test]
fn the_barrier_writes_nothing_and_the_view_writes_back_first() {
    let (mut t, mut map, _dir) = tier(1000);
    for k in 0..500 {
        put(&mut t, &mut map, k, k);
    }
    let view = snapshot(&mut t, &mut map);
    assert_eq!(written(&t), 0, "the synchronous phase wrote to the LSM");
    assert_eq!(t.pending.len(), 1);
    // Writes after the barrier (to shards the write-back still shares: copied).
    for k in 0..500 {
        put(&mut t, &mut map, k, k + 1);
    }
    let want: BTreeMap<u64, u64> = (0..500).map(|k| (k, k)).collect();
    assert_eq!(
        read(&*view),
        want,
        "the view holds the state at its barrier"
    );
    assert_eq!(written(&t), 500, "reading the view ran the write-back");
    let next = snapshot(&mut t, &mut map);
    assert_eq!(t.pending.len(), 1, "the write-back that ran is let go");
    let want: BTreeMap<u64, u64> = (0..500).map(|k| (k, k + 1)).collect();
    assert_eq!(read(&*next), want);
}

#[test]
fn a_key_deleted_before_a_pending_write_back_is_not_read_back_from_the_lsm() {
    let (mut t, mut map, _dir) = tier(1000);
    put(&mut t, &mut map, 7, 1);
    put(&mut t, &mut map, 8, 1);
    let first = snapshot(&mut t, &mut map);
    read(&*first);
    assert_eq!(written(&t), 2);
    delete(&mut t, &mut map, 7);
    let second = snapshot(&mut t, &mut map);
    // The LSM still has 7 (the delete is in the pending write-back): it must not come back.
    assert_eq!(get(&mut t, &mut map, 7), None);
    assert_eq!(get(&mut t, &mut map, 8), Some(1));
    assert_eq!(read(&*second), BTreeMap::from([(8, 1)]));
    assert_eq!(get(&mut t, &mut map, 7), None);
}

#[test]
fn a_write_back_nobody_read_is_not_lost() {
    let (mut t, mut map, _dir) = tier(4);
    for k in 0..4 {
        put(&mut t, &mut map, k, 10 + k);
    }
    // An aborted checkpoint: its view is dropped unread.
    drop(snapshot(&mut t, &mut map));
    delete(&mut t, &mut map, 0);
    // A full cache evicts: the pending write-back runs first, on this thread.
    for k in 100..120 {
        put(&mut t, &mut map, k, k);
    }
    assert!(t.pending.is_empty());
    assert_eq!(get(&mut t, &mut map, 0), None);
    for k in 1..4 {
        assert_eq!(get(&mut t, &mut map, k), Some(10 + k));
    }
    let mut want: BTreeMap<u64, u64> = (1..4).map(|k| (k, 10 + k)).collect();
    want.extend((100..120).map(|k| (k, k)));
    assert_eq!(read(&*snapshot(&mut t, &mut map)), want);
}

#[test]
fn write_backs_reach_the_lsm_in_barrier_order_whoever_runs_them() {
    let (mut t, mut map, _dir) = tier(1000);
    put(&mut t, &mut map, 1, 1);
    let a = snapshot(&mut t, &mut map);
    put(&mut t, &mut map, 1, 2);
    let b = snapshot(&mut t, &mut map);
    put(&mut t, &mut map, 1, 3);
    let c = snapshot(&mut t, &mut map);
    // The newest is read first: it runs the two before it, in order.
    assert_eq!(read(&*c), BTreeMap::from([(1, 3)]));
    assert_eq!(read(&*a), BTreeMap::from([(1, 1)]));
    assert_eq!(read(&*b), BTreeMap::from([(1, 2)]));
    let mut key = Vec::new();
    t.encode_key(&1, &mut key).unwrap();
    let live = t.ks.get(&key).unwrap().map(|v| v.to_vec());
    assert_eq!(live, Some(vec![3]), "the newest value is the LSM's");
}
