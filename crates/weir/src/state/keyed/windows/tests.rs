//! Unit tests of window state: firing whole windows, lateness, snapshot and restore by key
//! group, and moving a legacy map state into it.
use std::collections::BTreeMap;

use super::*;
use crate::state::keyed::tests::{backend_for, backend_tests, On};
use crate::state::keyed::RestoredKeyedState;
use crate::state::keyed::RestoredState;

const GROUPS: u32 = 16;

/// A backend on `on` (the parent's, with 16 key groups) with its timers declared.
fn backend(on: On, range: KeyGroupRange, restored: RestoredKeyedState) -> KeyedStateBackend<u64> {
    let mut b = backend_for(on, range, restored);
    b.init_timers().unwrap();
    b
}

fn all() -> KeyGroupRange {
    KeyGroupRange {
        start: 0,
        end: GROUPS,
    }
}

/// Adds `v` to `key`'s window ending at `end`, marked pending unless `fired`.
fn add(
    b: &mut KeyedStateBackend<u64>,
    s: WindowState<u64>,
    key: u64,
    end: u64,
    v: u64,
    fired: bool,
) {
    let mut ctx = KeyedContext {
        key: &key,
        backend: b,
    };
    *ctx.window_accumulator(s, end, !fired, || 0).0 += v;
}

/// Fires everything due at `wm`: `(timestamp, end, key, sum)` in firing order (keys sorted
/// within a window).
fn fire(
    b: &mut KeyedStateBackend<u64>,
    s: WindowState<u64>,
    wm: u64,
    lateness: u64,
) -> Vec<(u64, u64, u64, u64)> {
    let mut out = Vec::new();
    let mut ctx = KeyedEndContext { backend: b };
    loop {
        let mut group = Vec::new();
        let Some(t) =
            ctx.fire_next_window(s, wm, lateness, |k, end, acc| group.push((end, *k, *acc)))
        else {
            return out;
        };
        group.sort();
        out.extend(group.into_iter().map(|(e, k, a)| (t, e, k, a)));
    }
}

/// Snapshots `b` into what a restore of key groups `range` hands over.
fn round_trip(b: &mut KeyedStateBackend<u64>, range: KeyGroupRange) -> RestoredKeyedState {
    let snap = b.snapshot().unwrap();
    let mut restored = BTreeMap::new();
    for t in &snap.tables {
        let mut groups = vec![Vec::new(); GROUPS as usize];
        t.view
            .encode_groups(GROUPS, snap.range, &mut groups)
            .unwrap();
        let sections = groups[range.start as usize..range.end as usize]
            .iter()
            .map(|g| g.clone().into())
            .collect();
        restored.insert(
            t.name.clone(),
            RestoredState {
                kind: t.kind,
                ttl: t.ttl,
                sections,
                changes: Vec::new(),
                schema: None,
                remote: Vec::new(),
            },
        );
    }
    restored
}

fn whole_windows_fire_in_order_and_are_removed(on: On) {
    let mut b = backend(on, all(), BTreeMap::new());
    let s = KeyedStateStore::new(&mut b)
        .window_state::<u64>("w", &Default::default())
        .unwrap();
    for k in 0..3 {
        add(&mut b, s, k, 2000, 10 + k, false);
        add(&mut b, s, k, 1000, 1, false);
        add(&mut b, s, k, 1000, 2, false);
    }
    assert_eq!(
        b.sizes(),
        vec![
            ("__processing_timers".into(), 0),
            ("__event_timers".into(), 0),
            ("w".into(), 6)
        ]
    );
    assert_eq!(
        fire(&mut b, s, 998, 0),
        vec![],
        "not due below the last millisecond"
    );
    assert_eq!(
        fire(&mut b, s, 999, 0),
        vec![(999, 1000, 0, 3), (999, 1000, 1, 3), (999, 1000, 2, 3)]
    );
    assert_eq!(b.sizes()[2].1, 3, "the fired window is gone whole");
    assert_eq!(
        fire(&mut b, s, u64::MAX, 0),
        vec![
            (1999, 2000, 0, 10),
            (1999, 2000, 1, 11),
            (1999, 2000, 2, 12)
        ]
    );
    assert_eq!(b.sizes()[2].1, 0);
}

fn lateness_keeps_fired_windows_until_cleanup(on: On) {
    let mut b = backend(on, all(), BTreeMap::new());
    let s = KeyedStateStore::new(&mut b)
        .window_state::<u64>("w", &Default::default())
        .unwrap();
    add(&mut b, s, 1, 1000, 5, false);
    add(&mut b, s, 2, 1000, 6, false);
    assert_eq!(
        fire(&mut b, s, 1200, 500),
        vec![(999, 1000, 1, 5), (999, 1000, 2, 6)]
    );
    assert_eq!(fire(&mut b, s, 1300, 500), vec![], "fired once");
    // A late record updates the window without marking it (the operator emits at once).
    add(&mut b, s, 1, 1000, 1, true);
    assert_eq!(fire(&mut b, s, 1400, 500), vec![]);
    // A record marking the window (as after a restore reset the watermark) fires that key
    // alone again.
    add(&mut b, s, 2, 1000, 1, false);
    assert_eq!(fire(&mut b, s, 1400, 500), vec![(999, 1000, 2, 7)]);
    assert_eq!(b.sizes()[2].1, 2);
    assert_eq!(fire(&mut b, s, 1499, 500), vec![], "cleanup emits nothing");
    assert_eq!(b.sizes()[2].1, 0, "removed at its cleanup time");
}

fn windows_restore_by_key_group_with_their_pending_marks(on: On) {
    let mut b = backend(on, all(), BTreeMap::new());
    let s = KeyedStateStore::new(&mut b)
        .window_state::<u64>("w", &Default::default())
        .unwrap();
    for k in 0..200 {
        add(&mut b, s, k, 1000, k, false);
        add(&mut b, s, k, 2000, 2 * k, false);
    }
    // Window 1000 fires (it stays: lateness); window 2000 is still pending.
    assert_eq!(fire(&mut b, s, 1500, 10_000).len(), 200);
    let halves = [
        KeyGroupRange { start: 0, end: 7 },
        KeyGroupRange {
            start: 7,
            end: GROUPS,
        },
    ];
    let mut fired = Vec::new();
    for range in halves {
        let mut r = backend(on, range, round_trip(&mut b, range));
        let s = KeyedStateStore::new(&mut r)
            .window_state::<u64>("w", &Default::default())
            .unwrap();
        assert!(r.unclaimed().is_empty());
        fired.extend(fire(&mut r, s, u64::MAX, 10_000));
    }
    fired.sort();
    let want: Vec<_> = (0..200).map(|k| (1999, 2000, k, 2 * k)).collect();
    assert_eq!(
        fired, want,
        "only the pending window fires again, each key once"
    );
}

fn a_restored_state_of_another_kind_is_refused_by_name(on: On) {
    let mut b = backend(on, all(), BTreeMap::new());
    let v = KeyedStateStore::new(&mut b)
        .value_state::<u64>("w")
        .unwrap();
    KeyedContext {
        key: &1,
        backend: &mut b,
    }
    .set(v, 1);
    let restored = round_trip(&mut b, all());
    let mut r = backend(on, all(), restored);
    let e = KeyedStateStore::new(&mut r)
        .window_state::<u64>("w", &Default::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("'w' was a value state") && e.contains("window state"),
        "{e}"
    );
}

fn a_legacy_map_state_moves_in_with_its_timers(on: On) {
    // The previous shape, with lateness 100: key 1's window 1000 fired (only its cleanup
    // timer 1099 is left); key 2's windows 1000 and 2000 are pending.
    let mut b = backend(on, all(), BTreeMap::new());
    let m = KeyedStateStore::new(&mut b)
        .map_state::<u64, u64>("legacy")
        .unwrap();
    for (key, end, v, timers) in [
        (1u64, 1000u64, 5u64, &[1099u64][..]),
        (2, 1000, 6, &[999, 1099]),
        (2, 2000, 7, &[1999, 2099]),
    ] {
        let mut ctx = KeyedContext {
            key: &key,
            backend: &mut b,
        };
        ctx.map(&m).put(end, v);
        for t in timers {
            ctx.register_event_time_timer(*t);
        }
    }
    let restored = round_trip(&mut b, all());
    let mut r = backend(on, all(), restored);
    let mut store = KeyedStateStore::new(&mut r);
    let s = store.window_state::<u64>("w", &Default::default()).unwrap();
    assert_eq!(store.restored_kind("legacy"), Some(StateKind::Map));
    let m = store.map_state::<u64, u64>("legacy").unwrap();
    store.migrate_window_map(&m, s, 100).unwrap();
    let sizes = r.sizes();
    assert_eq!(
        sizes[1],
        ("__event_timers".into(), 0),
        "the timers are gone"
    );
    assert_eq!(sizes[2].1, 3);
    assert_eq!(sizes[3], ("legacy".into(), 0));
    assert_eq!(
        fire(&mut r, s, u64::MAX, 100),
        vec![(999, 1000, 2, 6), (1999, 2000, 2, 7)],
        "what was pending fires, what had fired does not"
    );
}

backend_tests!(
    whole_windows_fire_in_order_and_are_removed,
    lateness_keeps_fired_windows_until_cleanup,
    windows_restore_by_key_group_with_their_pending_marks,
    a_restored_state_of_another_kind_is_refused_by_name,
    a_legacy_map_state_moves_in_with_its_timers,
);

#[test]
fn a_migration_returning_another_type_than_the_accumulator_is_refused_naming_both() {
    let mut b = backend(On::Memory, all(), RestoredKeyedState::default());
    let mut store = KeyedStateStore::new(&mut b);
    let evolution = AccEvolution::default()
        .with_version(2)
        .with_migration(|old: u32| i64::from(old));
    let e = store
        .window_state::<u64>("w", &evolution)
        .err()
        .expect("an i64 migration cannot fill u64 accumulators")
        .to_string();
    assert!(e.contains("i64") && e.contains("u64"), "{e}");
    assert!(e.contains("make it return that type"), "{e}");
}
