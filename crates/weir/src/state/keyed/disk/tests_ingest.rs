//! A barrier's write-back ingested straight into tables (`DiskStore::ingest`): it bypasses
//! the memtable, its deletes hide older entries wherever they are, each pinned snapshot
//! sees exactly its own barrier, and fjall's count of write-buffer bytes stays right.

use std::collections::BTreeMap;

use super::*;
use crate::state::cow_map::CowMap;
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed::table::TableSnapshot;

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

/// The live LSM's value of `k` (not through the cache).
fn live(t: &DiskTier<u64, u64>, k: u64) -> Option<Vec<u8>> {
    let mut key = Vec::new();
    t.encode_key(&k, &mut key).unwrap();
    t.ks.get(&key).unwrap().map(|v| v.to_vec())
}

#[test]
fn a_barriers_write_back_goes_into_tables_not_the_memtable() {
    let (mut t, mut map, _dir) = tier(1000);
    for k in 0..500 {
        put(&mut t, &mut map, k, k);
    }
    let view = snapshot(&mut t, &mut map);
    assert_eq!(read(&*view).len(), 500);
    assert_eq!(
        t.store.db.write_buffer_size(),
        0,
        "went through the memtable"
    );
    assert!(t.ks.table_count() >= 1);
    assert_eq!(live(&t, 499), Some(vec![0xf3, 0x03]));
}

/// Puts `k → v` into the tier's memtable, as the LSM's other writers do (a restore's
/// batches, a pane's): encoded as a write-back would, and let past the tier's filter.
fn into_memtable(t: &mut DiskTier<u64, u64>, k: u64, v: u64) {
    let mut key = Vec::new();
    t.encode_key(&k, &mut key).unwrap();
    t.filter.insert_new(filter::KeyFilter::hash(&key));
    let mut value = Vec::new();
    lsm_value_into(&v, None, &mut value).unwrap();
    t.ks.insert(key, value).unwrap();
}

#[test]
fn an_ingested_delete_hides_an_entry_still_in_the_memtable_and_one_in_a_table() {
    let (mut t, mut map, _dir) = tier(1000);
    put(&mut t, &mut map, 1, 10);
    put(&mut t, &mut map, 2, 20);
    // Into a table by a first barrier's ingestion.
    read(&*snapshot(&mut t, &mut map));
    into_memtable(&mut t, 3, 30);
    assert!(t.store.db.write_buffer_size() > 0, "3 is in the memtable");
    assert_eq!(get(&mut t, &mut map, 3), Some(30));
    delete(&mut t, &mut map, 1);
    delete(&mut t, &mut map, 3);
    let view = snapshot(&mut t, &mut map);
    let state = read(&*view);
    assert_eq!(state.get(&1), None);
    assert_eq!(state.get(&3), None);
    assert_eq!(state.get(&2), Some(&20));
    assert_eq!((live(&t, 1), live(&t, 3)), (None, None));
    assert_eq!(get(&mut t, &mut map, 1), None);
    assert_eq!(get(&mut t, &mut map, 3), None);
    // Written again after the delete: back, newer than the tombstone.
    put(&mut t, &mut map, 3, 31);
    assert_eq!(read(&*snapshot(&mut t, &mut map)).get(&3), Some(&31));
}

#[test]
fn a_view_read_after_a_later_write_back_ran_still_sees_its_own_barrier() {
    let (mut t, mut map, _dir) = tier(1000);
    put(&mut t, &mut map, 5, 1);
    put(&mut t, &mut map, 6, 1);
    let a = snapshot(&mut t, &mut map);
    assert_eq!(read(&*a), BTreeMap::from([(5, 1), (6, 1)]));
    delete(&mut t, &mut map, 5);
    put(&mut t, &mut map, 6, 2);
    put(&mut t, &mut map, 7, 2);
    let b = snapshot(&mut t, &mut map);
    assert_eq!(read(&*b), BTreeMap::from([(6, 2), (7, 2)]));
    // `a` pinned its snapshot before `b`'s ingestion took its sequence number.
    assert_eq!(read(&*a), BTreeMap::from([(5, 1), (6, 1)]));
}

#[test]
fn evictions_go_into_tables_too_and_the_memtables_bytes_are_freed_by_an_ingestion() {
    let (mut t, mut map, _dir) = tier(50);
    for k in 0..200 {
        put(&mut t, &mut map, k, k);
    }
    assert_eq!(
        t.store.db.write_buffer_size(),
        0,
        "an eviction used the memtable"
    );
    assert_eq!(get(&mut t, &mut map, 3), Some(3));
    into_memtable(&mut t, 1000, 1);
    assert!(t.store.db.write_buffer_size() > 0);
    put(&mut t, &mut map, 1, 2);
    let view = snapshot(&mut t, &mut map);
    assert_eq!(read(&*view).len(), 201);
    // The ingestion's own flush of the memtable would leave its bytes counted for good.
    assert_eq!(t.store.db.write_buffer_size(), 0);
}
