//! The disk tier at a barrier: the synchronous phase freezes and writes nothing to the LSM;
//! the view writes back first; reads, deletes and evictions stay right while a write-back
//! is pending, and one nobody read is not lost.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::state::cow_map::CowMap;
use crate::state::key_group::{key_group, KeyGroupRange};
use crate::state::keyed::remote::RemoteState;
use crate::state::keyed::table::TableSnapshot;
use crate::state::keyed::ttl::Ttl;
use crate::state::keyed::{RemoteSection, SectionSpan};
use crate::state::StateKind;
use crate::storage::shared_bytes::SharedBytes;

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
    read_as(view)
}

/// Every entry of a view, each value decoded as `V` (`Option<u64>` for a delta's, `None` a
/// delete).
fn read_as<V: serde::de::DeserializeOwned>(view: &dyn TableSnapshot) -> BTreeMap<u64, V> {
    let range = KeyGroupRange { start: 0, end: 16 };
    let mut groups = vec![Vec::new(); 16];
    view.encode_groups(16, range, &mut groups).unwrap();
    let mut out = BTreeMap::new();
    for g in groups {
        let mut rest: &[u8] = &g;
        while !rest.is_empty() {
            let ((k, v), after): ((u64, V), _) = postcard::take_from_bytes(rest).unwrap();
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

/// Appends a key group's `base` and `delta` sections to the shared file's `bytes`: their
/// spans in it, each with whether it is the delta, as a checkpoint's index lists them.
fn append_sections(bytes: &mut Vec<u8>, base: Vec<u8>, delta: Vec<u8>) -> [(SectionSpan, bool); 2] {
    [(base, false), (delta, true)].map(|(section, is_delta)| {
        let span = SectionSpan {
            offset: bytes.len() as u64,
            len: section.len() as u64,
            crc32c: crc32c::crc32c(&section),
        };
        bytes.extend(section);
        (span, is_delta)
    })
}

/// A shared file in `dir` holding, per key group of 16, a base section of keys `0..400`
/// (`k → k`) and a delta section putting every 10th key of `400..800` (`k → k`), setting
/// every 5th key of the base to `k + 1` and deleting every 7th:
/// the sections a lazy restore hands the tier, and the state they make.
fn remote_sections(dir: &std::path::Path) -> (Vec<RemoteSection>, BTreeMap<u64, u64>) {
    use crate::state::keyed::RemoteFile;
    let mut bytes = b"header bytes no section covers".to_vec();
    let mut spans = Vec::new();
    let mut truth = BTreeMap::new();
    for g in 0..16u32 {
        let keys: Vec<u64> = (0..400).filter(|k| key_group(k, 16) == g).collect();
        let mut base = Vec::new();
        let mut delta = Vec::new();
        // Keys only a delta puts (the base never had them).
        for k in (400..800u64).filter(|k| k % 10 == 0 && key_group(k, 16) == g) {
            delta.extend(postcard::to_stdvec(&(k, Some(k))).unwrap());
            truth.insert(k, k);
        }
        for &k in &keys {
            base.extend(postcard::to_stdvec(&(k, k)).unwrap());
            truth.insert(k, k);
            if k % 7 == 0 {
                delta.extend(postcard::to_stdvec(&(k, None::<u64>)).unwrap());
                truth.remove(&k);
            } else if k % 5 == 0 {
                delta.extend(postcard::to_stdvec(&(k, Some(k + 1))).unwrap());
                truth.insert(k, k + 1);
            }
        }
        for (span, is_delta) in append_sections(&mut bytes, base, delta) {
            spans.push((g, span, is_delta));
        }
    }
    std::fs::write(dir.join("shared-file"), bytes).unwrap();
    let file = std::sync::Arc::new(RemoteFile {
        store: std::sync::Arc::from(crate::storage::open_backend(dir).unwrap()),
        key: "shared-file".into(),
        shown: dir.join("shared-file"),
        checkpoint_id: 7,
    });
    let sections = spans
        .into_iter()
        .map(|(group, span, delta)| RemoteSection {
            file: file.clone(),
            group,
            span,
            delta,
            shared: None,
        })
        .collect();
    (sections, truth)
}

/// What [`remote_tier`] returns: a [`tier`]'s tier, map and folder guard, and the state the
/// tier holds.
type RemoteTier = (
    DiskTier<u64, u64>,
    CowMap<u64, u64>,
    tempfile::TempDir,
    BTreeMap<u64, u64>,
);

/// A [`tier`] caching `cache` keys whose every group is still in storage: the sections of
/// [`remote_sections`] handed to it as a lazy restore does, and the state they make.
fn remote_tier(cache: usize) -> RemoteTier {
    let (mut t, map, dir) = tier(cache);
    let (sections, truth) = remote_sections(dir.path());
    t.set_remote(RemoteState::new("x", StateKind::Value, false), sections);
    (t, map, dir, truth)
}

#[test]
fn a_remote_key_group_is_fetched_on_its_first_access_and_only_it() {
    let (mut t, mut map, _dir, mut truth) = remote_tier(1000);
    assert_eq!((t.remote_groups(), written(&t)), (16, 0));
    // A read fetches its key's group (base and delta), nothing else.
    let k = 10u64;
    assert_eq!(get(&mut t, &mut map, k), truth.get(&k).copied());
    let in_group = truth
        .keys()
        .filter(|o| key_group(*o, 16) == key_group(&k, 16))
        .count();
    assert_eq!((t.remote_groups(), written(&t)), (15, in_group));
    // A write to a key of another group lands on top of that group's restored entries.
    let other = (0..400u64)
        .find(|o| key_group(o, 16) != key_group(&k, 16) && truth.contains_key(o))
        .unwrap();
    put(&mut t, &mut map, other, 9999);
    truth.insert(other, 9999);
    assert_eq!(t.remote_groups(), 14);
    // A snapshot reads the groups still in storage from their chain, loading none of them
    // into the LSM, and it is exact.
    let view = snapshot(&mut t, &mut map);
    assert_eq!(t.remote_groups(), 14);
    assert_eq!(read(&*view), truth);
    assert_eq!(
        t.remote_groups(),
        14,
        "reading the view fetched nothing into the tier"
    );
}

#[test]
fn a_snapshot_with_remote_groups_is_the_state_at_its_barrier_when_a_record_fetches_one_after_it() {
    let (mut t, mut map, _dir, truth) = remote_tier(1000);
    let view = snapshot(&mut t, &mut map);
    // After the barrier, before the view's write-back ran: a record fetches a group into
    // the LSM and changes it; the view still reads the group as it was at the barrier,
    // once (not the chain's copy and the LSM's both).
    let k = *truth.keys().next().unwrap();
    put(&mut t, &mut map, k, 4242);
    assert_eq!(t.remote_groups(), 15);
    assert_eq!(read(&*view), truth);
    let mut after = truth.clone();
    after.insert(k, 4242);
    assert_eq!(read(&*snapshot(&mut t, &mut map)), after);
}

#[test]
fn a_damaged_remote_section_fails_the_access_naming_the_file_and_a_clear_forgets_the_rest() {
    let (mut t, mut map, dir) = tier(1000);
    let (sections, _) = remote_sections(dir.path());
    let victim = sections.iter().find(|s| s.span.len > 0).unwrap().clone();
    let path = dir.path().join("shared-file");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[victim.span.offset as usize] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    t.set_remote(RemoteState::new("x", StateKind::Value, false), sections);
    let k = (0..400u64)
        .find(|k| key_group(k, 16) == victim.group)
        .unwrap();
    let e = t
        .fault_in(&mut map, None, &k, false)
        .expect_err("the damaged section fails its fetch")
        .to_string();
    assert!(
        e.contains(&path.display().to_string()) && e.contains("checksum"),
        "{e}"
    );
    assert!(crate::state::keyed::is_known_bad(&path));
    t.clear().unwrap();
    assert_eq!((t.remote_groups(), written(&t)), (0, 0));
}

#[test]
fn a_write_back_that_ran_is_let_go_at_the_next_miss_and_its_deletes_stay_deleted() {
    let (mut t, mut map, _dir) = tier(1000);
    put(&mut t, &mut map, 7, 1);
    put(&mut t, &mut map, 8, 1);
    read(&*snapshot(&mut t, &mut map));
    delete(&mut t, &mut map, 7);
    let second = snapshot(&mut t, &mut map);
    assert_eq!(read(&*second), BTreeMap::from([(8, 1)]), "ran the delete");
    assert_eq!(t.pending.len(), 1, "kept until a miss or a freeze");
    // A miss lets go of the write-back that ran: its keys are right in the LSM now.
    assert_eq!(get(&mut t, &mut map, 100), None);
    assert!(t.pending.is_empty());
    assert_eq!(get(&mut t, &mut map, 7), None, "the delete reached the LSM");
    assert_eq!(get(&mut t, &mut map, 8), Some(1));
}

#[test]
fn a_miss_marks_only_a_write_dirty_and_a_hit_marks_a_clean_key_it_writes() {
    let (mut t, mut map, _dir) = tier(1000);
    assert_eq!(get(&mut t, &mut map, 1), None);
    assert!(
        t.dirty.is_empty(),
        "a read of an absent key changed nothing"
    );
    put(&mut t, &mut map, 1, 5);
    put(&mut t, &mut map, 1, 6);
    assert_eq!(t.dirty.len(), 1);
    read(&*snapshot(&mut t, &mut map));
    // Cached and clean after the barrier: a read leaves it clean, a write marks it.
    assert_eq!(get(&mut t, &mut map, 1), Some(6));
    assert!(t.dirty.is_empty());
    put(&mut t, &mut map, 1, 7);
    assert!(t.dirty.contains(&1));
    // Deleted through the cache: dirty, and not read back from the LSM (which has 6).
    delete(&mut t, &mut map, 1);
    assert_eq!(get(&mut t, &mut map, 1), None);
    let range = KeyGroupRange { start: 0, end: 16 };
    let view = t.snapshot(&mut map, None, range).unwrap();
    assert!(
        view.is_none(),
        "the delete was written back: the state is empty"
    );
}

#[test]
fn point_reads_find_every_key_in_flushed_tables() {
    // Far more keys than the cache: most go through evictions, and once flushed every
    // read of one is a point read in a table's data block (its hash index).
    let (mut t, mut map, _dir) = tier(512);
    for k in 0..20_000u64 {
        put(&mut t, &mut map, k * 3, k);
    }
    t.write_back(&map, None).unwrap();
    t.ks.rotate_memtable_and_wait().unwrap();
    assert!(t.ks.table_count() > 0, "the keys are in tables");
    map = CowMap::default();
    for k in 0..20_000u64 {
        assert_eq!(get(&mut t, &mut map, k * 3), Some(k), "key {}", k * 3);
        assert_eq!(get(&mut t, &mut map, k * 3 + 1), None, "key {}", k * 3 + 1);
    }
}

#[test]
fn a_value_is_encoded_into_the_reused_buffer_alone() {
    let mut buf = Vec::new();
    codec::lsm_value_into(&u64::MAX, None, &mut buf).unwrap();
    assert_eq!(buf, postcard::to_stdvec(&u64::MAX).unwrap());
    codec::lsm_value_into(&1u64, Some(9), &mut buf).unwrap();
    assert_eq!(
        buf,
        postcard::to_stdvec(&(1u64, 9u64)).unwrap(),
        "nothing left over"
    );
    let (k, v, stamp) = codec::decode_entry::<u64, u64>(&[0, 0, 4], 0, &buf, true).unwrap();
    assert_eq!((k, v, stamp), (4, 1, Some(9)));
}

#[test]
fn a_snapshot_leaves_out_the_remote_entries_expired_at_its_time() {
    use crate::state::keyed::ttl::{StateTtlConfig, Ttl};
    use crate::state::keyed::RemoteFile;
    let (mut t, mut map, dir) = tier(1000);
    // One key group's base section with TTL stamps: even keys stamped now, odd ones at 0
    // (long expired); a delta refreshes key 1 (stamped now) and deletes key 2.
    let now = crate::clock::wall_ms();
    let keys: Vec<u64> = (0..400).filter(|k| key_group(k, 16) == 3).collect();
    let mut base = Vec::new();
    let mut truth = BTreeMap::new();
    for &k in &keys {
        let stamp = if k % 2 == 0 { now } else { 0 };
        base.extend(postcard::to_stdvec(&(k, (k, stamp))).unwrap());
        if k % 2 == 0 {
            truth.insert(k, k);
        }
    }
    let (one, two) = (keys[1], keys[2]);
    let mut delta = postcard::to_stdvec(&(one, Some((7u64, now)))).unwrap();
    delta.extend(postcard::to_stdvec(&(two, None::<(u64, u64)>)).unwrap());
    truth.insert(one, 7);
    truth.remove(&two);
    let mut bytes = b"header".to_vec();
    let mut sections = Vec::new();
    let file = std::sync::Arc::new(RemoteFile {
        store: std::sync::Arc::from(crate::storage::open_backend(dir.path()).unwrap()),
        key: "ttl-file".into(),
        shown: dir.path().join("ttl-file"),
        checkpoint_id: 1,
    });
    for (span, is_delta) in append_sections(&mut bytes, base, delta) {
        sections.push(RemoteSection {
            file: file.clone(),
            group: 3,
            span,
            delta: is_delta,
            shared: None,
        });
    }
    std::fs::write(dir.path().join("ttl-file"), bytes).unwrap();
    t.set_remote(RemoteState::new("x", StateKind::Value, true), sections);
    let mut ttl = Ttl::new(StateTtlConfig::new(std::time::Duration::from_secs(3600)));
    let range = KeyGroupRange { start: 0, end: 16 };
    let view = t
        .snapshot(&mut map, Some(&mut ttl), range)
        .unwrap()
        .unwrap();
    assert_eq!(t.remote_groups(), 1, "streamed, not loaded");
    let mut groups = vec![Vec::new(); 16];
    view.encode_groups(16, range, &mut groups).unwrap();
    let mut got = BTreeMap::new();
    let mut rest: &[u8] = &groups[3];
    while !rest.is_empty() {
        let ((k, (v, _)), after): ((u64, (u64, u64)), _) = postcard::take_from_bytes(rest).unwrap();
        got.insert(k, v);
        rest = after;
    }
    assert_eq!(got, truth);
}

/// Whether the tier's filter reports `k` (may the LSM hold it).
fn in_filter(t: &DiskTier<u64, u64>, k: u64) -> bool {
    let mut key = Vec::new();
    t.encode_key(&k, &mut key).unwrap();
    t.filter.may_contain(filter::KeyFilter::hash(&key))
}

/// Sections as a restore hands them: per key group of 16, `postcard((k, v))` of `entries`
/// (with TTL, `postcard((k, (v, stamp)))`).
fn sections_of(entries: &BTreeMap<u64, u64>, stamp: Option<u64>) -> Vec<SharedBytes> {
    let mut groups = vec![Vec::new(); 16];
    for (&k, &v) in entries {
        let g = &mut groups[key_group(&k, 16) as usize];
        match stamp {
            None => g.extend(postcard::to_stdvec(&(k, v)).unwrap()),
            Some(s) => g.extend(postcard::to_stdvec(&(k, (v, s))).unwrap()),
        }
    }
    groups.into_iter().map(SharedBytes::from).collect()
}

#[test]
fn a_miss_on_a_key_never_written_skips_the_lsm_and_a_written_one_is_read_back() {
    // Cache of 4: every key is written back and evicted many times over.
    let (mut t, mut map, _dir) = tier(4);
    assert_eq!(get(&mut t, &mut map, 1), None);
    assert!(!in_filter(&t, 1), "a read of an absent key adds nothing");
    for k in 0..200u64 {
        put(&mut t, &mut map, k * 2, k);
    }
    assert!(written(&t) > 150, "most were written back: {}", written(&t));
    // The filter never denies a key the LSM holds (this fails if a write that misses the
    // cache does not add its key: the written-back keys would read as absent).
    for k in 0..200u64 {
        assert!(in_filter(&t, k * 2), "key {} denied", k * 2);
        assert_eq!(get(&mut t, &mut map, k * 2), Some(k), "key {}", k * 2);
    }
    // Keys never written: absent, most without a read (the filter denies them).
    let denied = (0..200u64).filter(|k| !in_filter(&t, k * 2 + 1)).count();
    assert!(denied > 190, "only {denied} of 200 absent keys denied");
    for k in 0..200u64 {
        assert_eq!(get(&mut t, &mut map, k * 2 + 1), None);
    }
    // Deleted keys stay in the filter (a read that finds nothing, as before).
    delete(&mut t, &mut map, 0);
    t.write_back(&map, None).unwrap();
    map = CowMap::default();
    assert!(in_filter(&t, 0));
    assert_eq!(get(&mut t, &mut map, 0), None);
}

#[test]
fn a_key_written_with_ttl_then_evicted_is_read_back_past_the_filter() {
    let dir = tempfile::tempdir().unwrap();
    let options = DiskOptions {
        cache_entries: 4,
        block_cache_bytes: 1 << 20,
        ..DiskOptions::new(dir.path())
    };
    let store = DiskStore::open(options).unwrap();
    let mut t = store.tier::<u64, u64>(0, 16).unwrap();
    let mut map = CowMap::default();
    let cfg = crate::state::StateTtlConfig::new(std::time::Duration::from_secs(3600));
    let mut ttl = Ttl::new(cfg);
    for k in 0..100u64 {
        t.fault_in(&mut map, Some(&mut ttl), &k, true).unwrap();
        map.insert(k, k + 1);
        ttl.stamps.insert(k, 1000);
    }
    assert!(written(&t) > 50);
    for k in 0..100u64 {
        t.fault_in(&mut map, Some(&mut ttl), &k, false).unwrap();
        assert_eq!(map.get(&k), Some(&(k + 1)), "key {k}");
        assert_eq!(ttl.stamps.get(&k), Some(&1000), "key {k}'s stamp");
    }
}

#[test]
fn keys_of_an_eager_restore_and_its_deltas_pass_the_filter() {
    let (mut t, mut map, _dir) = tier(4);
    let base: BTreeMap<u64, u64> = (0..300u64).map(|k| (k, k)).collect();
    t.restore("keyed value state 'x'", &sections_of(&base, None), false)
        .unwrap();
    // A delta that puts keys the base never had (and changes one it had).
    let mut delta = vec![Vec::new(); 16];
    for (k, v) in [
        (1000u64, Some(7u64)),
        (1001, Some(8)),
        (5, Some(50)),
        (6, None),
    ] {
        delta[key_group(&k, 16) as usize].extend(postcard::to_stdvec(&(k, v)).unwrap());
    }
    let delta: Vec<SharedBytes> = delta.into_iter().map(SharedBytes::from).collect();
    t.apply_changes("keyed value state 'x'", &delta, false)
        .unwrap();
    for k in (0..300u64).filter(|&k| k != 5 && k != 6) {
        assert_eq!(get(&mut t, &mut map, k), Some(k), "key {k}");
    }
    assert_eq!(get(&mut t, &mut map, 5), Some(50));
    assert_eq!(get(&mut t, &mut map, 6), None);
    assert_eq!(
        get(&mut t, &mut map, 1000),
        Some(7),
        "put by the delta alone"
    );
    assert_eq!(
        get(&mut t, &mut map, 1001),
        Some(8),
        "put by the delta alone"
    );
}

#[test]
fn keys_of_a_lazily_fetched_key_group_pass_the_filter() {
    let (mut t, mut map, _dir, truth) = remote_tier(4);
    // Each first access of a group fetches it (base and delta) before the filter is asked.
    for k in 0..800u64 {
        assert_eq!(get(&mut t, &mut map, k), truth.get(&k).copied(), "key {k}");
    }
    assert_eq!(t.remote_groups(), 0);
    // Again, every key from the LSM (the cache holds 4).
    for (&k, &v) in &truth {
        assert_eq!(get(&mut t, &mut map, k), Some(v), "key {k}");
    }
}

#[test]
fn a_rescale_restores_other_key_groups_past_the_filter() {
    // Two subtasks' tiers (key groups 0..8 and 8..16), written through their caches, are
    // snapshotted and restored into one tier of all 16 groups.
    let (mut a, mut map_a, _da) = tier(4);
    let (mut b, mut map_b, _db) = tier(4);
    let mut truth = BTreeMap::new();
    for k in 0..400u64 {
        if key_group(&k, 16) < 8 {
            put(&mut a, &mut map_a, k, k * 3);
        } else {
            put(&mut b, &mut map_b, k, k * 3);
        }
        truth.insert(k, k * 3);
    }
    let range = KeyGroupRange { start: 0, end: 16 };
    let mut groups = vec![Vec::new(); 16];
    snapshot(&mut a, &mut map_a)
        .encode_groups(16, range, &mut groups)
        .unwrap();
    snapshot(&mut b, &mut map_b)
        .encode_groups(16, range, &mut groups)
        .unwrap();
    let sections: Vec<SharedBytes> = groups.into_iter().map(SharedBytes::from).collect();
    let (mut t, mut map, _dir) = tier(4);
    t.restore("keyed value state 'x'", &sections, false)
        .unwrap();
    for (&k, &v) in &truth {
        assert_eq!(get(&mut t, &mut map, k), Some(v), "key {k}");
    }
    assert_eq!(get(&mut t, &mut map, 400), None);
}

#[test]
fn a_restore_with_ttl_passes_the_filter() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(DiskOptions {
        cache_entries: 4,
        block_cache_bytes: 1 << 20,
        ..DiskOptions::new(dir.path())
    })
    .unwrap();
    let mut t = store.tier::<u64, u64>(0, 16).unwrap();
    let entries: BTreeMap<u64, u64> = (0..100u64).map(|k| (k, k + 7)).collect();
    t.restore(
        "keyed value state 'x'",
        &sections_of(&entries, Some(500)),
        true,
    )
    .unwrap();
    let cfg = crate::state::StateTtlConfig::new(std::time::Duration::from_secs(3600));
    let (mut map, mut ttl) = (CowMap::default(), Ttl::new(cfg));
    for k in 0..100u64 {
        t.fault_in(&mut map, Some(&mut ttl), &k, false).unwrap();
        assert_eq!(map.get(&k), Some(&(k + 7)), "key {k}");
        assert_eq!(ttl.stamps.get(&k), Some(&500));
    }
}

#[path = "bulk_tests.rs"]
mod bulk_tests;

/// The live LSM's value of `k` (not a snapshot's).
fn live(t: &DiskTier<u64, u64>, k: u64) -> Option<u64> {
    let mut key = Vec::new();
    t.encode_key(&k, &mut key).unwrap();
    let v = t.ks.get(&key).unwrap()?;
    Some(postcard::from_bytes(&v).unwrap())
}

#[test]
fn a_delta_is_written_from_its_barriers_encoded_write_back_and_the_commit_follows() {
    let dir = tempfile::tempdir().unwrap();
    let options = DiskOptions {
        cache_entries: 8,
        block_cache_bytes: 1 << 20,
        incremental: true,
        ..DiskOptions::new(dir.path())
    };
    let store = DiskStore::open(options).unwrap();
    let (mut t, mut map) = (store.tier::<u64, u64>(0, 16).unwrap(), CowMap::default());
    for k in 0..8 {
        put(&mut t, &mut map, k, k);
    }
    // A full cache: 0..8 are written back (and recorded as changed) before 100 comes in.
    put(&mut t, &mut map, 100, 100);
    assert_eq!(written(&t), 8);
    for k in 0..3 {
        put(&mut t, &mut map, k, 50 + k);
    }
    delete(&mut t, &mut map, 4);
    // The barrier: the changes since the last snapshot, then the delta's view.
    let set = t
        .take_changes(&mut map, None)
        .unwrap()
        .expect("incremental");
    let range = KeyGroupRange { start: 0, end: 16 };
    let view = t
        .delta_snapshot(&mut map, None, vec![Arc::new(set)], range)
        .unwrap()
        .expect("keys changed");
    // Writes after the barrier change neither the delta nor, before the commit, the LSM.
    put(&mut t, &mut map, 1, 99);
    let mut want: BTreeMap<u64, Option<u64>> = (0..8).map(|k| (k, Some(k))).collect();
    want.extend((0..3).map(|k| (k, Some(50 + k))));
    want.insert(4, None);
    want.insert(100, Some(100));
    assert_eq!(
        read_as::<Option<u64>>(&*view),
        want,
        "the delta is the state at its barrier"
    );
    assert_eq!(
        live(&t, 0),
        Some(0),
        "the delta waited for the commit of its barrier's write-back"
    );
    assert_eq!(
        t.pending.len(),
        2,
        "the barrier's write-back is still pending"
    );
    // Dropped on a writer thread: the commit waits for the acknowledgement, then follows.
    crate::state::after_ack::hold_on_this_thread();
    drop(view);
    assert_eq!(
        live(&t, 0),
        Some(0),
        "the commit ran before the acknowledgement"
    );
    crate::state::after_ack::stop_holding();
    assert_eq!(live(&t, 0), Some(50), "the commit followed the delta");
    assert_eq!(live(&t, 4), None);
    assert_eq!(live(&t, 100), Some(100));
    assert_eq!(get(&mut t, &mut map, 1), Some(99));
    assert_eq!(get(&mut t, &mut map, 4), None);
}
