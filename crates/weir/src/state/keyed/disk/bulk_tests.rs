//! An eager restore into an empty keyspace by bulk ingestion ([`bulk`](super::super::bulk)):
//! the chain folded per key group, written into tables without the memtable, split into
//! several ingestions, every key in the filter; and where it must not be used (a keyspace
//! already written, sections of mixed key groups), the batches as before.

use super::*;

/// Per key group of 16, each delta in `deltas` (applied in order) as a restore hands
/// them: `postcard((k, Option<v>))`.
fn delta_sections(deltas: &[&[(u64, Option<u64>)]]) -> Vec<SharedBytes> {
    let mut out = Vec::new();
    for delta in deltas {
        let mut groups = vec![Vec::new(); 16];
        for &(k, v) in delta.iter() {
            groups[key_group(&k, 16) as usize].extend(postcard::to_stdvec(&(k, v)).unwrap());
        }
        out.extend(groups.into_iter().map(SharedBytes::from));
    }
    out
}

/// A base of `0..n` (`k → k`; keys past 127 make postcard's order differ from the
/// numbers', so each group's entries arrive unsorted) and two deltas: the first puts
/// `n..n+10`, sets 5 to 50 and deletes 6 and 7; the second sets 5 to 51, puts 7 back and
/// deletes n+1. The sections and the state they make.
fn chain(n: u64) -> (Vec<SharedBytes>, Vec<SharedBytes>, BTreeMap<u64, u64>) {
    let mut truth: BTreeMap<u64, u64> = (0..n).map(|k| (k, k)).collect();
    let base = sections_of(&truth, None);
    let first: Vec<(u64, Option<u64>)> = (n..n + 10)
        .map(|k| (k, Some(k)))
        .chain([(5, Some(50)), (6, None), (7, None)])
        .collect();
    let second = [(5, Some(51)), (7, Some(70)), (n + 1, None)];
    for (k, v) in first.iter().chain(&second) {
        match v {
            Some(v) => truth.insert(*k, *v),
            None => truth.remove(k),
        };
    }
    (base, delta_sections(&[&first, &second]), truth)
}

/// A tier like [`tier`]'s, of values `S` over `max_parallelism` key groups, with write
/// buffers (and tables) of `write_buffer` bytes.
fn tier_with<S: StateValue>(
    write_buffer: u64,
    max_parallelism: u32,
) -> (DiskTier<u64, S>, CowMap<u64, S>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let options = DiskOptions {
        cache_entries: 4,
        block_cache_bytes: 1 << 20,
        write_buffer_bytes: write_buffer,
        ..DiskOptions::new(dir.path())
    };
    let store = DiskStore::open(options).unwrap();
    let tier = store.tier(0, max_parallelism).unwrap();
    (tier, CowMap::default(), dir)
}

/// Every key of `truth` (and a few it lacks) reads back as it says, through the filter.
fn assert_state(
    t: &mut DiskTier<u64, u64>,
    map: &mut CowMap<u64, u64>,
    truth: &BTreeMap<u64, u64>,
) {
    for (&k, &v) in truth {
        assert!(in_filter(t, k), "key {k} is not in the filter");
        assert_eq!(get(t, map, k), Some(v), "key {k}");
    }
    for k in [6, 1_000_000, 1_000_001] {
        if !truth.contains_key(&k) {
            assert_eq!(get(t, map, k), None, "key {k}");
        }
    }
}

/// Asserts how the restore just made went into the LSM. `ingested`: by bulk ingestion,
/// straight into table files — nothing added to the memtable (`memtable_before`, its
/// bytes before the restore), where write batches leave the whole state with the tests'
/// write buffers, and at least one table. Otherwise through write batches: the memtable
/// grew. (A restore that took the wrong path still restores the right state, so the state
/// alone cannot tell; these tests are about the path.)
#[track_caller]
fn assert_ingested(t: &DiskTier<u64, u64>, ingested: bool, memtable_before: u64) {
    let memtable = t.store.db.write_buffer_size();
    if ingested {
        assert_eq!(memtable, memtable_before, "written through the memtable");
        assert!(t.ks.table_count() >= 1, "ingested, yet no table");
    } else {
        assert!(
            memtable > memtable_before,
            "ingested, not written in batches"
        );
    }
}

#[test]
fn an_eager_restore_into_an_empty_keyspace_is_ingested_with_its_deltas_folded() {
    let (mut t, mut map, _dir) = tier(4);
    let (base, deltas, truth) = chain(3000);
    t.restore_chain("keyed value state 'x'", &base, &deltas, false)
        .unwrap();
    assert_ingested(&t, true, 0);
    assert_eq!(written(&t), truth.len(), "a deleted key left an entry");
    assert_state(&mut t, &mut map, &truth);
    assert_eq!(read(&*snapshot(&mut t, &mut map)), truth);
}

#[test]
fn an_ingested_restore_is_split_into_tables_of_a_write_buffer_each() {
    // 1 KiB write buffers: ~6 bytes per entry, so a few hundred entries per ingestion.
    let (mut t, mut map, _dir) = tier_with(1 << 10, 16);
    let (base, deltas, truth) = chain(3000);
    t.restore_chain("keyed value state 'x'", &base, &deltas, false)
        .unwrap();
    assert_ingested(&t, true, 0);
    assert!(t.ks.table_count() > 1, "one ingestion for 18 KB of entries");
    assert_state(&mut t, &mut map, &truth);
    assert_eq!(read(&*snapshot(&mut t, &mut map)), truth);
}

#[test]
fn an_ingested_restore_with_ttl_keeps_every_stamp() {
    let (mut t, _, _dir) = tier(4);
    let entries: BTreeMap<u64, u64> = (0..500u64).map(|k| (k, k + 7)).collect();
    let deltas = {
        let mut groups = vec![Vec::new(); 16];
        let k = 3u64;
        groups[key_group(&k, 16) as usize]
            .extend(postcard::to_stdvec(&(k, Some((99u64, 900u64)))).unwrap());
        groups
            .into_iter()
            .map(SharedBytes::from)
            .collect::<Vec<_>>()
    };
    let what = "keyed value state 'x'";
    t.restore_chain(what, &sections_of(&entries, Some(500)), &deltas, true)
        .unwrap();
    assert_ingested(&t, true, 0);
    let cfg = crate::state::StateTtlConfig::new(std::time::Duration::from_secs(3600));
    let (mut map, mut ttl) = (CowMap::default(), Ttl::new(cfg));
    for k in 0..500u64 {
        t.fault_in(&mut map, Some(&mut ttl), &k, false).unwrap();
        let want = if k == 3 { (99, 900) } else { (k + 7, 500) };
        assert_eq!(map.get(&k), Some(&want.0), "key {k}");
        assert_eq!(ttl.stamps.get(&k), Some(&want.1), "key {k}'s stamp");
    }
}

#[test]
fn a_keyspace_already_written_is_restored_through_batches() {
    let (mut t, mut map, _dir) = tier(4);
    // Keys written back before the restore (by a snapshot: nothing dirty or pending is
    // left, so only the keyspace's entries stand in the way).
    for k in 10_000..10_010 {
        put(&mut t, &mut map, k, 1);
    }
    read(&*snapshot(&mut t, &mut map));
    assert_eq!(written(&t), 10);
    let before = t.store.db.write_buffer_size();
    let (base, deltas, mut truth) = chain(300);
    t.restore_chain("keyed value state 'x'", &base, &deltas, false)
        .unwrap();
    assert_ingested(&t, false, before);
    truth.extend((10_000..10_010).map(|k| (k, 1)));
    assert_state(&mut t, &mut map, &truth);
}

#[test]
fn sections_of_mixed_key_groups_are_restored_through_batches() {
    let (mut t, mut map, _dir) = tier(4);
    // One section for every key: not one key group per section.
    let truth: BTreeMap<u64, u64> = (0..300u64).map(|k| (k, k * 2)).collect();
    let mut section = Vec::new();
    for (k, v) in &truth {
        section.extend(postcard::to_stdvec(&(k, v)).unwrap());
    }
    t.restore_chain("keyed value state 'x'", &[section.into()], &[], false)
        .unwrap();
    assert_ingested(&t, false, 0);
    assert_state(&mut t, &mut map, &truth);
}

#[test]
fn a_damaged_entry_after_some_ingested_tables_leaves_the_state_empty() {
    let (mut t, mut map, _dir) = tier_with(1 << 10, 16);
    let (mut base, deltas, _) = chain(3000);
    // The last group's section is cut inside its last entry: earlier groups were ingested
    // (and their ingestions finished) by the time it is read.
    let last = base.iter().rposition(|s| !s.is_empty()).unwrap();
    let cut = base[last][..base[last].len() - 1].to_vec();
    base[last] = SharedBytes::from(cut);
    let err = t
        .restore_chain("keyed value state 'x'", &base, &deltas, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("keyed value state 'x'"), "{err}");
    assert_eq!(written(&t), 0, "entries left behind");
    assert_eq!(get(&mut t, &mut map, 1), None);
}

#[test]
fn a_restore_is_split_into_runs_of_whole_key_groups_of_about_equal_bytes() {
    let bytes: Vec<SharedBytes> = [10, 30, 5, 5, 20, 20, 10]
        .map(|n| SharedBytes::from(vec![0u8; n]))
        .into();
    // Key groups 0, 1, 1, 2, 3, 4, 5 (group 1: a base and a delta).
    let order: Vec<_> = [0u32, 1, 1, 2, 3, 4, 5]
        .into_iter()
        .zip(&bytes)
        .enumerate()
        .map(|(at, (g, b))| (g, at, at == 2, b))
        .collect();
    for n in 1..=5 {
        let parts = super::super::bulk::split(&order, n);
        assert_eq!(parts.len(), n);
        let joined: Vec<_> = parts.iter().flat_map(|p| p.iter().map(|s| s.1)).collect();
        assert_eq!(
            joined,
            (0..7).collect::<Vec<_>>(),
            "{n} parts cover every section once"
        );
        for w in parts.windows(2) {
            if let (Some(a), Some(b)) = (w[0].last(), w[1].first()) {
                assert!(a.0 < b.0, "{n} parts: key group {} cut in two", a.0);
            }
        }
    }
    let sizes = |n| -> Vec<usize> {
        let parts = super::super::bulk::split(&order, n);
        parts
            .iter()
            .map(|p| p.iter().map(|s| s.3.len()).sum())
            .collect()
    };
    assert_eq!(sizes(2), [50, 50]);
    assert_eq!(sizes(1), [100]);
}

#[test]
fn an_ingested_restore_on_several_threads_writes_a_table_per_thread() {
    if super::super::bulk::restore_threads() < 2 {
        return; // one core (or WEIR_RESTORE_THREADS=1): nothing to split
    }
    let (mut t, mut map, _dir) = tier(4);
    // ~18 KB of sections: past the 1 KiB per thread tests take.
    let (base, deltas, truth) = chain(3000);
    t.restore_chain("keyed value state 'x'", &base, &deltas, false)
        .unwrap();
    assert_ingested(&t, true, 0);
    assert!(t.ks.table_count() >= 2, "restored on one thread");
    assert_state(&mut t, &mut map, &truth);
    assert_eq!(read(&*snapshot(&mut t, &mut map)), truth);
}

#[test]
fn the_restore_report_is_of_the_restores_since_it_was_started_on_this_thread() {
    use super::super::bulk::{restore_report, start_restore_report};
    let (base, deltas, truth) = chain(300);
    let restore = || {
        let (mut t, _, _dir) = tier(4);
        t.restore_chain("keyed value state 'x'", &base, &deltas, false)
            .unwrap();
    };
    start_restore_report();
    assert_eq!(restore_report(), None);
    // A first attempt restores two states.
    restore();
    restore();
    let first = restore_report().unwrap();
    assert!(first.contains(": 2 keyed states"), "{first}");
    let ingested = format!("2 of them by bulk ingestion ({} entries)", 2 * truth.len());
    assert!(first.contains(&ingested), "{first}");
    // The next attempt starts afresh: its report is its own restores, not the sum.
    start_restore_report();
    assert_eq!(
        restore_report(),
        None,
        "the last attempt's restores carried over"
    );
    restore();
    // Another thread's restores (another job of this process) are not this one's.
    std::thread::scope(|s| s.spawn(restore).join().unwrap());
    let second = restore_report().unwrap();
    assert!(second.contains(": 1 keyed states"), "{second}");
    let ingested = format!("1 of them by bulk ingestion ({} entries)", truth.len());
    assert!(second.contains(&ingested), "{second}");
}

/// A restore on several threads ingests runs of low and of high key groups in turn; with
/// tables of a few KiB, fjall's compaction beside it meets the shape where lsm-tree 3.1.10's
/// debug assertion panicked its worker (docs/design-notes.md, "Ingestions on several
/// threads and lsm-tree's debug assertion"). Several restores, each read back, each
/// followed by a flush, which takes the locks such a panic poisons. Whether the shape
/// arises depends on the compaction worker's timing: the pause before the flush gives it a
/// chance, and the test passes at any speed when nothing panics.
#[test]
fn restores_of_many_small_tables_on_several_threads_keep_the_lsm_compacting() {
    if super::super::bulk::restore_threads() < 2 {
        return; // one core (or WEIR_RESTORE_THREADS=1): no runs to interleave
    }
    const GROUPS: u32 = 1024;
    const KEYS: u64 = 15 * GROUPS as u64;
    let value = |k: u64| format!("{k:01024}");
    let mut groups = vec![Vec::new(); GROUPS as usize];
    for k in 0..KEYS {
        let g = &mut groups[key_group(&k, GROUPS) as usize];
        g.extend(postcard::to_stdvec(&(k, value(k))).unwrap());
    }
    let base: Vec<SharedBytes> = groups.into_iter().map(SharedBytes::from).collect();
    for round in 0..4 {
        let (mut t, mut map, _dir) = tier_with::<String>(32 << 10, GROUPS);
        t.restore_chain("keyed value state 'x'", &base, &[], false)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(t.ks.table_count() > 100, "round {round}: too few tables");
        for k in (0..KEYS).step_by(97) {
            t.fault_in(&mut map, None, &k, false).unwrap();
            assert_eq!(map.get(&k), Some(&value(k)), "round {round}, key {k}");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        t.ks.rotate_memtable_and_wait()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
    }
}
