//! Unit tests of the copy-on-write map: map semantics, spread, snapshot isolation, and
//! take-back without copies.
use super::*;
use std::collections::HashMap;
use std::sync::Mutex;

#[test]
fn behaves_like_a_hash_map() {
    {
        let mut m = CowMap::<u64, u64>::default();
        let mut model = HashMap::new();
        let mut rng = fastrand::Rng::with_seed(1);
        for _ in 0..20_000 {
            let k = rng.u64(0..500);
            match rng.u8(0..4) {
                0 => assert_eq!(m.insert(k, k * 3), model.insert(k, k * 3)),
                1 => assert_eq!(m.remove(&k), model.remove(&k)),
                2 => {
                    *m.get_or_insert_with(&k, || 7) += 1;
                    *model.entry(k).or_insert(7) += 1;
                }
                _ => assert_eq!(m.get(&k), model.get(&k)),
            }
            assert_eq!(m.len(), model.len());
        }
        let mut all: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
        all.sort();
        let mut want: Vec<_> = model.into_iter().collect();
        want.sort();
        assert_eq!(all, want);
    }
}

#[test]
fn shards_fill_half_a_cache_line() {
    assert_eq!(std::mem::size_of::<Shard<u64, u64>>(), 32);
}

#[test]
fn keys_spread_over_shards() {
    let mut m = CowMap::<u64, ()>::default();
    for k in 0..(SHARDS as u64 * 100) {
        m.insert(k, ());
    }
    let sizes: Vec<usize> = m.shards.iter().map(|s| s.table().len()).collect();
    let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
    assert!(*min > 50 && *max < 160, "min {min} max {max}");
}

#[test]
fn snapshots_are_isolated_and_cheap() {
    let mut m = CowMap::<String, u64>::default();
    for i in 0..1000u64 {
        m.insert(format!("k{i}"), i);
    }
    let snap = m.snapshot();
    for i in 0..1000u64 {
        *m.get_or_insert_with(&format!("k{i}"), || 0) += 1;
    }
    m.remove(&"k0".to_string());
    m.insert("new".into(), 1);
    assert_eq!(snap.len(), 1000);
    assert_eq!(snap.get(&"k7".to_string()), Some(&7));
    let mut seen: Vec<u64> = snap.iter().map(|(_, v)| *v).collect();
    seen.sort();
    assert_eq!(seen, (0..1000).collect::<Vec<_>>());
    assert_eq!(m.get(&"k5".to_string()), Some(&6));
    assert_eq!(m.len(), 1000);
    // Once the snapshot is gone, a shared shard is taken back without a copy.
    let snap2 = m.snapshot();
    let i = (0..SHARDS).find(|&i| !snap2.shards[i].is_empty()).unwrap();
    let before = snap2.shards[i].iter().next().unwrap().0 as *const String;
    drop(snap2);
    let after = &m.shards[i].table_mut().iter().next().unwrap().0 as *const String;
    assert_eq!(before, after, "no copy once the snapshot is dropped");
}

/// A view that holds a snapshot's shards and lets go of one when asked (as keyed state's
/// writer does after encoding it), recording which.
struct Holder {
    shards: Mutex<Vec<Option<SharedShard<u64, u64>>>>,
    released: Mutex<Vec<usize>>,
}

impl ShardRelease for Holder {
    fn release(&self, shard: usize) {
        self.shards.lock().unwrap()[shard] = None;
        self.released.lock().unwrap().push(shard);
    }
}

#[test]
fn writes_during_a_snapshot_ask_the_view_and_copy_nothing() {
    let mut m = CowMap::<u64, u64>::default();
    for k in 0..20_000u64 {
        m.insert(k, k);
    }
    let snap = m.snapshot();
    let firsts: Vec<Option<*const u64>> = snap
        .shards
        .iter()
        .map(|s| s.iter().next().map(|e| e.0 as *const u64))
        .collect();
    let holder = Arc::new(Holder {
        shards: Mutex::new(snap.into_shards().into_iter().map(Some).collect()),
        released: Mutex::new(Vec::new()),
    });
    let weak: Weak<Holder> = Arc::downgrade(&holder);
    m.watch(weak);
    // Read the pre-write contents of one shard before the writes.
    let held: u64 = holder.shards.lock().unwrap()[3]
        .as_ref()
        .unwrap()
        .iter()
        .map(|(_, v)| *v)
        .sum();
    for k in 0..20_000u64 {
        *m.get_or_insert_with(&k, || 0) += 1;
    }
    let released = holder.released.lock().unwrap().clone();
    let mut unique = released.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), released.len(), "each shard released once");
    assert_eq!(released.len(), SHARDS, "every written shard");
    for (i, first) in firsts.iter().enumerate() {
        if let Some(first) = first {
            let now = &m.shards[i].table().iter().next().unwrap().0 as *const u64;
            assert_eq!(*first, now, "shard {i} was copied");
        }
    }
    let want: u64 = m.shard_iter(3).map(|(k, _)| *k).sum();
    assert_eq!(held, want, "the view saw the pre-write values");
    assert!(m.shard_iter(3).all(|(k, v)| *v == k + 1));
    // A dropped view is forgotten.
    drop(holder);
    let _snap = m.snapshot();
    m.watch(Weak::<Holder>::new());
    if let Shard::Shared(f) = &m.shards[0] {
        assert_eq!(f.watchers.lock().unwrap().len(), 1, "dead views are pruned");
    }
}

#[test]
fn small_shards_are_copied_without_asking() {
    let mut m = CowMap::<u64, u64>::default();
    m.insert(1, 1);
    let snap = m.snapshot();
    let holder = Arc::new(Holder {
        shards: Mutex::new(snap.into_shards().into_iter().map(Some).collect()),
        released: Mutex::new(Vec::new()),
    });
    let weak: Weak<Holder> = Arc::downgrade(&holder);
    m.watch(weak);
    m.insert(1, 2);
    assert!(holder.released.lock().unwrap().is_empty());
    let i = shard_of(hash_of(&1u64));
    let held = holder.shards.lock().unwrap()[i]
        .as_ref()
        .unwrap()
        .get(&1)
        .copied();
    assert_eq!(held, Some(1));
    assert_eq!(m.get(&1), Some(&2));
}

#[test]
fn a_shard_still_read_elsewhere_is_copied_alone() {
    let mut m = CowMap::<u64, u64>::default();
    for k in 0..5000u64 {
        m.insert(k, k);
    }
    let snap = m.snapshot();
    let mut shards = snap.into_shards();
    let (k, i) = (7u64, shard_of(hash_of(&7u64)));
    let kept = std::mem::replace(&mut shards[i], SharedShard(None));
    drop(shards);
    m.insert(k, 0);
    assert_eq!(kept.get(&k), Some(&7));
    assert_eq!(m.get(&k), Some(&0));
}
