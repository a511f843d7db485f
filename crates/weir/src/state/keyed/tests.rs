//! Unit tests of keyed state: every kind, snapshots, restore, TTL, timers index — each run
//! on both backends (the `backend_tests!` list at the end), and across them.
use super::*;

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy)]
pub(super) enum On {
    Memory,
    /// The disk backend with a cache of `cache` keys per state: tiny, so that tests evict
    /// (write back and reload) all the time.
    #[cfg(feature = "disk-state")]
    Disk {
        cache: usize,
    },
}

/// A backend for key groups 0..16 of 16.
fn backend(on: On, restored: RestoredKeyedState) -> KeyedStateBackend<u64> {
    backend_for(on, KeyGroupRange { start: 0, end: 16 }, restored)
}

pub(super) fn backend_for(
    on: On,
    range: KeyGroupRange,
    restored: RestoredKeyedState,
) -> KeyedStateBackend<u64> {
    let kind = match on {
        On::Memory => StateBackendKind::Memory,
        #[cfg(feature = "disk-state")]
        On::Disk { cache } => StateBackendKind::Disk(DiskOptions {
            cache_entries: cache,
            block_cache_bytes: 1 << 20,
            ..DiskOptions::new(std::env::temp_dir())
        }),
    };
    KeyedStateBackend::with_kind(&kind, range, 16, restored).unwrap()
}

fn value_state_round_trips_through_a_snapshot(on: On) {
    let mut b = backend(on, BTreeMap::new());
    let count = KeyedStateStore::new(&mut b)
        .value_state::<u64>("count")
        .unwrap();
    for k in 0..100u64 {
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut b,
        };
        *ctx.get_mut_or_insert_with(count, || 0) += k;
        if k % 10 == 0 {
            ctx.clear(count);
        }
    }
    let snap = b.snapshot().unwrap();
    let mut groups = vec![Vec::new(); 16];
    let n = snap.tables[0]
        .view
        .encode_groups(16, snap.range, &mut groups)
        .unwrap();
    assert_eq!(n, 90);
    let mut restored = BTreeMap::new();
    restored.insert(
        "count".to_string(),
        RestoredState {
            kind: StateKind::Value,
            ttl: false,
            sections: groups.into_iter().map(Into::into).collect(),
            changes: Vec::new(),
            schema: None,
            remote: Vec::new(),
        },
    );
    let mut b2 = backend(on, restored);
    let count2 = KeyedStateStore::new(&mut b2)
        .value_state::<u64>("count")
        .unwrap();
    for k in 0..100u64 {
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut b2,
        };
        let want = if k % 10 == 0 { None } else { Some(k) };
        assert_eq!(ctx.get(count2).copied(), want);
    }
    assert!(b2.unclaimed().is_empty());
}

fn snapshot_is_isolated_from_later_writes(on: On) {
    let mut b = backend(on, BTreeMap::new());
    let s = KeyedStateStore::new(&mut b)
        .value_state::<u64>("s")
        .unwrap();
    let key = 1u64;
    KeyedContext {
        key: &key,
        backend: &mut b,
    }
    .set(s, 1);
    let snap = b.snapshot().unwrap();
    KeyedContext {
        key: &key,
        backend: &mut b,
    }
    .set(s, 2);
    let mut groups = vec![Vec::new(); 16];
    snap.tables[0]
        .view
        .encode_groups(16, snap.range, &mut groups)
        .unwrap();
    let bytes: Vec<u8> = groups.concat();
    let ((k, v), _): ((u64, u64), _) = postcard::take_from_bytes(&bytes).unwrap();
    assert_eq!((k, v), (1, 1));
}

fn wrong_type_on_restore_is_a_clear_error(on: On) {
    let mut restored = BTreeMap::new();
    restored.insert(
        "s".to_string(),
        RestoredState {
            kind: StateKind::Value,
            ttl: false,
            sections: vec![vec![1u8].into()],
            changes: Vec::new(),
            schema: None,
            remote: Vec::new(),
        },
    );
    let mut b = backend(on, restored);
    let err = KeyedStateStore::new(&mut b)
        .value_state::<(u64, String)>("s")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("keyed value state 's'"), "{err}");
    assert!(KeyedStateStore::new(&mut b).value_state::<u64>("t").is_ok());
    assert!(KeyedStateStore::new(&mut b)
        .value_state::<u64>("t")
        .is_err());
}

/// Snapshots `b` and turns the result into what a restore of the same range hands over.
fn round_trip(b: &mut KeyedStateBackend<u64>) -> RestoredKeyedState {
    let snap = b.snapshot().unwrap();
    let mut restored = BTreeMap::new();
    for t in &snap.tables {
        let mut groups = vec![Vec::new(); 16];
        t.view.encode_groups(16, snap.range, &mut groups).unwrap();
        restored.insert(
            t.name.clone(),
            RestoredState {
                kind: t.kind,
                ttl: t.ttl,
                sections: groups.into_iter().map(Into::into).collect(),
                changes: Vec::new(),
                schema: None,
                remote: Vec::new(),
            },
        );
    }
    restored
}

struct Average;

impl AggregateFunction<u64, (u64, u64), f64> for Average {
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, value: u64, acc: &mut (u64, u64)) {
        acc.0 += value;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(u64, u64)) -> f64 {
        acc.0 as f64 / acc.1 as f64
    }
}

struct Handles {
    list: ListState<u64>,
    map: MapState<String, u64>,
    max: ReducingState<u64>,
    avg: AggregatingState<u64, (u64, u64), f64>,
}

fn declare(b: &mut KeyedStateBackend<u64>) -> Handles {
    let mut store = KeyedStateStore::new(b);
    Handles {
        list: store.list_state("list").unwrap(),
        map: store.map_state("map").unwrap(),
        max: store
            .reducing_state("max", |a: u64, b: u64| a.max(b))
            .unwrap(),
        avg: store.aggregating_state("avg", Average).unwrap(),
    }
}

fn every_kind_keeps_its_semantics_through_snapshot_and_restore(on: On) {
    let mut b = backend(on, BTreeMap::new());
    let h = declare(&mut b);
    for k in 0..20u64 {
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut b,
        };
        ctx.list(&h.list).add_all([k, k + 1]);
        ctx.list(&h.list).add(k + 2);
        ctx.map(&h.map).put(format!("a{k}"), k);
        ctx.map(&h.map).put("b".into(), 1);
        for v in [3, k, 1] {
            ctx.reducing(&h.max).add(v);
            ctx.aggregating(&h.avg).add(v);
        }
        if k % 5 == 0 {
            ctx.list(&h.list).update(Vec::new());
            assert_eq!(ctx.map(&h.map).remove(&"b".to_string()), Some(1));
            ctx.map(&h.map).remove(&format!("a{k}"));
            assert!(ctx.map(&h.map).is_empty());
        }
    }
    let restored = round_trip(&mut b);
    let mut b2 = backend(on, restored);
    let h2 = declare(&mut b2);
    assert!(b2.unclaimed().is_empty());
    for k in 0..20u64 {
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut b2,
        };
        if k % 5 == 0 {
            assert!(ctx.list(&h2.list).get().is_empty());
            assert!(ctx.map(&h2.map).is_empty());
        } else {
            assert_eq!(ctx.list(&h2.list).get(), &[k, k + 1, k + 2]);
            let mut keys: Vec<_> = ctx.map(&h2.map).keys().cloned().collect();
            keys.sort();
            assert_eq!(keys, vec![format!("a{k}"), "b".to_string()]);
            assert!(ctx.map(&h2.map).contains(&"b".to_string()));
            assert_eq!(ctx.map(&h2.map).values().sum::<u64>(), k + 1);
        }
        assert_eq!(ctx.reducing(&h2.max).get(), Some(&k.max(3)));
        let avg = ctx.aggregating(&h2.avg).get().unwrap();
        assert!((avg - (4 + k) as f64 / 3.0).abs() < 1e-9);
    }
    // Empty lists and maps leave no entry behind (they do not bloat snapshots).
    let sizes: BTreeMap<_, _> = b2.sizes().into_iter().collect();
    assert_eq!(sizes["list"], 16);
    assert_eq!(sizes["map"], 16);
    assert_eq!(sizes["max"], 20);
}

fn redeclaring_a_restored_state_with_another_kind_is_refused(on: On) {
    let mut b = backend(on, BTreeMap::new());
    let h = KeyedStateStore::new(&mut b).list_state::<u64>("s").unwrap();
    KeyedContext {
        key: &1u64,
        backend: &mut b,
    }
    .list(&h)
    .add(1);
    let restored = round_trip(&mut b);
    let mut b2 = backend(on, restored);
    let err = KeyedStateStore::new(&mut b2)
        .value_state::<u64>("s")
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("was a list state") && err.contains("value state"),
        "{err}"
    );
}

fn apply_to_all_keys_reaches_every_key_with_state(on: On) {
    let mut b = backend(on, BTreeMap::new());
    let h = declare(&mut b);
    for k in [3u64, 7, 11] {
        KeyedContext {
            key: &k,
            backend: &mut b,
        }
        .reducing(&h.max)
        .add(k);
    }
    let mut end = KeyedEndContext { backend: &mut b };
    let mut seen = Vec::new();
    end.apply_to_all_keys(&h.max, |ctx| {
        seen.push(*ctx.key());
        ctx.reducing(&h.max).clear();
        Ok(())
    })
    .unwrap();
    seen.sort();
    assert_eq!(seen, vec![3, 7, 11]);
    assert_eq!(b.sizes().into_iter().find(|s| s.0 == "max").unwrap().1, 0);
}

/// Time stands still under a manual clock ([`crate::clock::manual`]): expiry is decided by
/// the test's `advance`, never by how long the machine took between two lines.
fn ttl_hides_expired_values_and_drops_them_from_snapshots(on: On) {
    use crate::clock::manual::ManualClock;
    use std::time::Duration;
    let clock = ManualClock::start_at(1_700_000_000_000);
    let mut b = backend(on, BTreeMap::new());
    let ttl = StateTtlConfig::new(Duration::from_millis(50));
    let mut store = KeyedStateStore::new(&mut b);
    let v = store.with_ttl(ttl).value_state::<u64>("v").unwrap();
    let plain = store.value_state::<u64>("plain").unwrap();
    for k in 0..100u64 {
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut b,
        };
        ctx.set(v, k);
        ctx.set(plain, k);
    }
    let count = |b: &mut KeyedStateBackend<u64>, name: &str| {
        let snap = b.snapshot().unwrap();
        snap.tables
            .iter()
            .filter(|t| t.name == name)
            .map(|t| {
                let mut groups = vec![Vec::new(); 16];
                t.view.encode_groups(16, snap.range, &mut groups).unwrap()
            })
            .sum::<u64>()
    };
    assert_eq!(count(&mut b, "v"), 100);
    // A restore keeps the stamps: the restored values expire on the same schedule.
    let restored = round_trip(&mut b);
    assert!(restored["v"].ttl && !restored["plain"].ttl);
    // One millisecond before the end of the TTL everything is still there, in the original
    // and in a backend restored from a snapshot taken just now.
    clock.advance(Duration::from_millis(49));
    assert_eq!(count(&mut b, "v"), 100, "nothing expires before its TTL");
    let mut early = backend(on, round_trip(&mut b));
    let early_v = KeyedStateStore::new(&mut early)
        .with_ttl(ttl)
        .value_state::<u64>("v")
        .unwrap();
    let mut ctx = KeyedContext {
        key: &7u64,
        backend: &mut early,
    };
    assert_eq!(
        ctx.get(early_v),
        Some(&7),
        "a live value survives a restore"
    );
    assert_eq!(
        KeyedContext {
            key: &7u64,
            backend: &mut b,
        }
        .get(v),
        Some(&7),
        "a value is returned until its TTL ends"
    );
    // At exactly the TTL the values expire.
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        count(&mut b, "v"),
        0,
        "expired entries are left out of snapshots"
    );
    assert_eq!(count(&mut b, "plain"), 100);
    let mut ctx = KeyedContext {
        key: &7u64,
        backend: &mut b,
    };
    assert_eq!(ctx.get(v), None, "an expired value is never returned");
    assert_eq!(ctx.get(plain), Some(&7));
    let mut ctx = KeyedContext {
        key: &7u64,
        backend: &mut early,
    };
    assert_eq!(ctx.get(early_v), None, "restored stamps keep their age");
    let mut b2 = backend(on, restored);
    let mut store = KeyedStateStore::new(&mut b2);
    let v2 = store.with_ttl(ttl).value_state::<u64>("v").unwrap();
    let err = store.value_state::<u64>("plain2");
    assert!(err.is_ok());
    let mut ctx = KeyedContext {
        key: &7u64,
        backend: &mut b2,
    };
    assert_eq!(ctx.get(v2), None, "restored stamps keep their age");
    // Declaring a TTL'd state without TTL after restore is refused.
    let mut b3 = backend(on, round_trip(&mut b));
    let mut b4 = backend(on, {
        let mut bb = backend(on, BTreeMap::new());
        let mut s = KeyedStateStore::new(&mut bb);
        let h = s
            .with_ttl(StateTtlConfig::new(std::time::Duration::from_secs(60)))
            .value_state::<u64>("t")
            .unwrap();
        KeyedContext {
            key: &1u64,
            backend: &mut bb,
        }
        .set(h, 1);
        round_trip(&mut bb)
    });
    assert!(KeyedStateStore::new(&mut b3)
        .value_state::<u64>("plain")
        .is_ok());
    let err = KeyedStateStore::new(&mut b4)
        .value_state::<u64>("t")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("time-to-live"), "{err}");
}

fn unclaimed_states_are_reported_once_and_let_go(on: On) {
    let mut restored = BTreeMap::new();
    restored.insert(
        "gone".to_string(),
        RestoredState {
            kind: StateKind::Value,
            ttl: false,
            sections: vec![vec![1u8, 2].into()],
            changes: Vec::new(),
            schema: None,
            remote: Vec::new(),
        },
    );
    let mut b = backend(on, restored);
    assert_eq!(b.unclaimed(), ["gone"]);
    assert!(b.unclaimed().is_empty(), "its entries are forgotten");
}

/// Fills value state "count" with `k → k * 10` for `keys` keys (key 0 cleared again), then
/// snapshots it as a restore hands it over: one section per key group.
fn filled(on: On, keys: u64) -> RestoredKeyedState {
    let mut b = backend(on, BTreeMap::new());
    let count = KeyedStateStore::new(&mut b)
        .value_state::<u64>("count")
        .unwrap();
    for k in 0..keys {
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut b,
        };
        *ctx.get_mut_or_insert_with(count, || 0) += k * 10;
    }
    KeyedContext {
        key: &0u64,
        backend: &mut b,
    }
    .clear(count);
    round_trip(&mut b)
}

/// Restores `restored` for key groups `range` on `on` and checks every key of `keys` it
/// owns has its value, and no other key has any.
fn check_filled(on: On, range: KeyGroupRange, restored: RestoredKeyedState, keys: u64) {
    let mut restored = restored;
    for state in restored.values_mut() {
        // A restore hands over the sections of the key groups the subtask owns.
        state.sections = state.sections[range.start as usize..range.end as usize].to_vec();
    }
    let mut b = backend_for(on, range, restored);
    let count = KeyedStateStore::new(&mut b)
        .value_state::<u64>("count")
        .unwrap();
    let mut owned = 0;
    for k in 0..keys {
        if !range.contains(crate::state::key_group(&k, 16)) {
            continue;
        }
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut b,
        };
        let want = (k != 0).then_some(k * 10);
        assert_eq!(ctx.get(count).copied(), want, "key {k} on {on:?}");
        owned += u64::from(k != 0);
    }
    let mut end = KeyedEndContext { backend: &mut b };
    assert_eq!(end.entries(count).count() as u64, owned, "{on:?}");
}

/// A snapshot of one backend is a snapshot of the other: the same per-key-group format,
/// restored whole or by key-group ranges (a rescale).
fn snapshots_move_between_backends_and_rescale(on: On) {
    let all = KeyGroupRange { start: 0, end: 16 };
    let halves = [
        KeyGroupRange { start: 0, end: 8 },
        KeyGroupRange { start: 8, end: 16 },
    ];
    let written = filled(on, 500);
    for to in both(on) {
        check_filled(to, all, written.clone(), 500);
        for half in halves {
            check_filled(to, half, written.clone(), 500);
        }
    }
}

/// `on` and the other backend.
fn both(on: On) -> Vec<On> {
    #[cfg(feature = "disk-state")]
    return vec![on, On::Memory, On::Disk { cache: 3 }];
    #[cfg(not(feature = "disk-state"))]
    return vec![on];
}

/// Many more keys than the disk cache holds, read and written again and again: every
/// value survives eviction (write-back) and reload, and deletes are not undone.
fn state_larger_than_the_cache_keeps_every_value(on: On) {
    let mut b = backend(on, BTreeMap::new());
    let mut store = KeyedStateStore::new(&mut b);
    let count = store.value_state::<u64>("count").unwrap();
    let list = store.list_state::<u64>("list").unwrap();
    for round in 0..3u64 {
        for k in 0..300u64 {
            let mut ctx = KeyedContext {
                key: &k,
                backend: &mut b,
            };
            *ctx.get_mut_or_insert_with(count, || 0) += 1;
            ctx.list(&list).add(round);
            if k % 7 == 0 && round == 1 {
                ctx.clear(count);
                ctx.list(&list).clear();
            }
        }
    }
    for k in 0..300u64 {
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut b,
        };
        let (want, want_list) = if k % 7 == 0 {
            (1, vec![2])
        } else {
            (3, vec![0, 1, 2])
        };
        assert_eq!(ctx.get(count).copied(), Some(want), "key {k}");
        assert_eq!(ctx.list(&list).get(), want_list.as_slice(), "key {k}");
    }
    assert_eq!(
        b.sizes(),
        vec![("count".to_string(), 300), ("list".to_string(), 300)]
    );
}

/// Timers of both domains, many more keys than the disk cache holds: they fire in time
/// order, once each, deleted ones never; the pending ones survive a snapshot and restore on
/// either backend (the firing order rebuilt from the registrations).
fn timers_fire_in_order_and_survive_a_restore(on: On) {
    let mut b = backend(on, BTreeMap::new());
    b.init_timers().unwrap();
    for k in 0..200u64 {
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut b,
        };
        ctx.register_event_time_timer(1000 - k);
        ctx.register_event_time_timer(1000 - k); // one timer per (key, time)
        ctx.register_processing_time_timer(5000 + k);
        if k % 10 == 0 {
            ctx.delete_event_time_timer(1000 - k);
        }
    }
    // Event time: the watermark 900 fires the times 801..=900 (keys 100..=199), in order.
    let mut fired = Vec::new();
    while let Some(t) = b.pop_due_event_timer(900) {
        fired.push(t);
    }
    let want: Vec<(u64, u64)> = (100..200u64)
        .rev()
        .filter(|k| k % 10 != 0)
        .map(|k| (1000 - k, k))
        .collect();
    assert_eq!(fired, want, "{on:?}");
    assert_eq!(b.pop_due_timer(4999), None);
    assert_eq!(b.pop_due_timer(5000), Some((5000, 0)));
    let restored = round_trip(&mut b);
    for to in both(on) {
        let mut r = backend(to, restored.clone());
        r.init_timers().unwrap();
        let mut event = Vec::new();
        while let Some(t) = r.pop_due_event_timer(u64::MAX) {
            event.push(t);
        }
        let want: Vec<(u64, u64)> = (0..100u64)
            .rev()
            .filter(|k| k % 10 != 0)
            .map(|k| (1000 - k, k))
            .collect();
        assert_eq!(event, want, "{on:?} → {to:?}");
        let processing: Vec<_> = std::iter::from_fn(|| r.pop_due_timer(u64::MAX)).collect();
        let want: Vec<(u64, u64)> = (1..200u64).map(|k| (5000 + k, k)).collect();
        assert_eq!(processing, want, "{on:?} → {to:?}");
        assert_eq!(r.pop_due_timer(u64::MAX), None);
    }
}

/// Generates one `#[test]` per backend for each test function above that takes an [`On`]
/// (used here and by the window state's tests: one backend matrix).
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[test]
            fn $name() {
                super::$name(super::On::Memory)
            })*
        }
        #[cfg(feature = "disk-state")]
        mod disk {
            $(#[test]
            fn $name() {
                super::$name(super::On::Disk { cache: 4 })
            })*
        }
    };
}
pub(super) use backend_tests;

backend_tests!(
    value_state_round_trips_through_a_snapshot,
    snapshot_is_isolated_from_later_writes,
    wrong_type_on_restore_is_a_clear_error,
    every_kind_keeps_its_semantics_through_snapshot_and_restore,
    redeclaring_a_restored_state_with_another_kind_is_refused,
    apply_to_all_keys_reaches_every_key_with_state,
    ttl_hides_expired_values_and_drops_them_from_snapshots,
    unclaimed_states_are_reported_once_and_let_go,
    snapshots_move_between_backends_and_rescale,
    state_larger_than_the_cache_keeps_every_value,
    timers_fire_in_order_and_survive_a_restore,
);

/// The disk backend works in a folder of its own under the one it is given, leaves the
/// rest alone, and removes its folder when it is dropped.
#[cfg(feature = "disk-state")]
#[test]
fn the_disk_backend_keeps_to_its_own_folder() {
    let parent = tempfile::tempdir().unwrap();
    std::fs::write(parent.path().join("mine"), b"x").unwrap();
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(parent.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let kind = StateBackendKind::Disk(DiskOptions::new(parent.path()));
    let range = KeyGroupRange { start: 0, end: 16 };
    let mut b = KeyedStateBackend::<u64>::with_kind(&kind, range, 16, BTreeMap::new()).unwrap();
    let mut b2 = KeyedStateBackend::<u64>::with_kind(&kind, range, 16, BTreeMap::new()).unwrap();
    for b in [&mut b, &mut b2] {
        let s = KeyedStateStore::new(b).value_state::<u64>("s").unwrap();
        KeyedContext {
            key: &1,
            backend: b,
        }
        .set(s, 1);
        b.snapshot().unwrap();
    }
    let names = listing();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(
        names[1..].iter().all(|n| n.starts_with("weir-keyed-")),
        "{names:?}"
    );
    drop(b);
    drop(b2);
    assert_eq!(listing(), ["mine"]);
}

/// A restore that fails part-way (after whole batches were written to the LSM) leaves
/// nothing behind: the next state declared in the same slot starts empty.
#[cfg(feature = "disk-state")]
#[test]
fn a_failed_disk_restore_leaves_no_entry_behind() {
    // 70 000 good entries (more than one write batch), then a cut-off one.
    let mut section = Vec::new();
    for k in 0..70_000u64 {
        section = postcard::to_extend(&(k, k), section).unwrap();
    }
    section.push(0xFF);
    let mut restored = BTreeMap::new();
    restored.insert(
        "s".to_string(),
        RestoredState {
            kind: StateKind::Value,
            ttl: false,
            sections: vec![section.into()],
            changes: Vec::new(),
            schema: None,
            remote: Vec::new(),
        },
    );
    let mut b = backend(On::Disk { cache: 4 }, restored);
    let err = KeyedStateStore::new(&mut b)
        .value_state::<u64>("s")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("keyed value state 's'"), "{err}");
    let t = KeyedStateStore::new(&mut b)
        .value_state::<u64>("t")
        .unwrap();
    let mut ctx = KeyedContext {
        key: &1u64,
        backend: &mut b,
    };
    assert_eq!(ctx.get(t), None);
    assert_eq!(b.sizes(), vec![("t".to_string(), 0)]);
}

/// On disk, expired entries that are never read again leave the LSM (the incremental
/// sweep), while live ones — and the snapshot taken before — keep theirs.
#[cfg(feature = "disk-state")]
#[test]
fn the_disk_sweep_removes_expired_entries_nobody_reads() {
    use crate::clock::manual::ManualClock;
    use std::time::Duration;
    let clock = ManualClock::start_at(1_700_000_000_000);
    let mut b = backend(On::Disk { cache: 4 }, BTreeMap::new());
    let ttl = StateTtlConfig::new(Duration::from_millis(50));
    let v = KeyedStateStore::new(&mut b)
        .with_ttl(ttl)
        .value_state::<u64>("v")
        .unwrap();
    for k in 0..300u64 {
        KeyedContext {
            key: &k,
            backend: &mut b,
        }
        .set(v, k);
    }
    let before = b.snapshot().unwrap();
    clock.advance(Duration::from_millis(60));
    // Only key 1000 is written from now on: two sweep steps cover the 300 expired entries.
    for i in 0..3 * crate::state::keyed::ttl::SWEEP_EVERY as u64 {
        KeyedContext {
            key: &1000,
            backend: &mut b,
        }
        .set(v, i);
    }
    assert_eq!(
        b.sizes(),
        vec![("v".to_string(), 1)],
        "only the live key is left"
    );
    // The snapshot pinned before the sweep still holds every entry it held (it filters
    // by its own time, at which all were live).
    let mut groups = vec![Vec::new(); 16];
    let n = before.tables[0]
        .view
        .encode_groups(16, before.range, &mut groups)
        .unwrap();
    assert_eq!(n, 300);
}
