//! Unit tests of map states' migration functions (issue 26): values read through the
//! function from a full section and from an incremental delta, on both backends, decided
//! alike by the probe; a changed user-key type refused naming the state and the ways out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::super::tests::{backend_for, backend_tests, On};
use super::super::{KeyedContext, KeyedStateBackend, MapState, RestoredKeyedState};
use super::*;
use crate::state::key_group::KeyGroupRange;
use crate::storage::shared_bytes::SharedBytes;

/// The map's value type in the checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PriceV1 {
    cents: u64,
    currency: String,
}

/// The job's value type: `cents` changed type, which serde cannot read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Price {
    cents: String,
    currency_len: u64,
}

fn migrate(old: PriceV1) -> Price {
    Price {
        cents: old.cents.to_string(),
        currency_len: old.currency.len() as u64,
    }
}

fn v1(key: u64, user_key: u64) -> PriceV1 {
    PriceV1 {
        cents: key * 100 + user_key,
        currency: "EUR".repeat(1 + (key % 2) as usize),
    }
}

fn all() -> KeyGroupRange {
    KeyGroupRange { start: 0, end: 16 }
}

const KEYS: u64 = 40;

/// Sets `key`'s map in `m` to user keys `uks`, each with its v1 value.
fn put(b: &mut KeyedStateBackend<u64>, m: &MapState<u64, PriceV1>, key: u64, uks: &[u64]) {
    let mut ctx = KeyedContext {
        key: &key,
        backend: b,
    };
    let mut map = ctx.map(m);
    map.clear();
    for &uk in uks {
        map.put(uk, v1(key, uk));
    }
}

/// The entries of the (only) state of `snap`, one section per key group.
fn encode(snap: &super::super::KeyedSnapshot) -> Vec<SharedBytes> {
    let mut groups = vec![Vec::new(); 16];
    snap.tables[0]
        .view
        .encode_groups(16, snap.range, &mut groups)
        .unwrap();
    groups.into_iter().map(Into::into).collect()
}

/// The map state `m` restored from `sections` and `changes`, recorded with `schema`.
fn restored_map(
    sections: Vec<SharedBytes>,
    changes: Vec<SharedBytes>,
    schema: StateSchema,
) -> RestoredKeyedState {
    let state = RestoredState {
        kind: StateKind::Map,
        ttl: false,
        sections,
        changes,
        schema: Some(schema),
        remote: Vec::new(),
    };
    BTreeMap::from([("m".to_string(), state)])
}

/// A v1 backend's map state `m`, every key holding user keys 0..3, restorable: its full
/// sections, plus one delta that changes key 3 (user key 9 only) and deletes key 4, all
/// recorded with v1's schema.
fn v1_checkpoint(on: On) -> RestoredKeyedState {
    let mut b = backend_for(on, all(), BTreeMap::new());
    let m: MapState<u64, PriceV1> = KeyedStateStore::new(&mut b).map_state("m").unwrap();
    for key in 0..KEYS {
        put(&mut b, &m, key, &[0, 1, 2]);
    }
    let changed: UserMap<u64, PriceV1> = [(9, v1(3, 9))].into_iter().collect();
    let mut delta = postcard::to_extend(&(3u64, Some(changed)), Vec::new()).unwrap();
    delta = postcard::to_extend(&(4u64, Option::<UserMap<u64, PriceV1>>::None), delta).unwrap();
    let sections = encode(&b.snapshot().unwrap());
    let schema = schema_of::<UserMap<u64, PriceV1>>(0);
    restored_map(sections, vec![delta.into()], schema)
}

/// Asserts that `m` holds v1's checkpoint through the migration: every key's user keys
/// 0..3 migrated, key 3 as the delta left it (user key 9), key 4 deleted by it.
fn assert_migrated(b: &mut KeyedStateBackend<u64>, m: &MapState<u64, Price>, on: On) {
    for key in 0..KEYS {
        let want: Vec<(u64, Price)> = match key {
            3 => vec![(9, migrate(v1(3, 9)))],
            4 => Vec::new(),
            _ => (0..3).map(|uk| (uk, migrate(v1(key, uk)))).collect(),
        };
        assert_eq!(map_of(b, m, key), want, "key {key} on {on:?}");
    }
}

/// Key `key`'s map in `m`, sorted by user key.
fn map_of<V: StateValue>(
    b: &mut KeyedStateBackend<u64>,
    m: &MapState<u64, V>,
    key: u64,
) -> Vec<(u64, V)> {
    let mut ctx = KeyedContext {
        key: &key,
        backend: b,
    };
    let mut entries: Vec<(u64, V)> = ctx.map(m).entries().map(|(k, v)| (*k, v.clone())).collect();
    entries.sort_by_key(|(k, _)| *k);
    entries
}

fn a_map_state_migrates_its_values_through_the_function_base_and_delta(on: On) {
    let mut b = backend_for(on, all(), v1_checkpoint(on));
    let m: MapState<u64, Price> = KeyedStateStore::new(&mut b)
        .with_version(2)
        .with_migration(migrate)
        .map_state("m")
        .unwrap();
    assert_eq!(b.declared()[0].decision, Decision::MigratesByFunction);
    assert_eq!(b.declared()[0].schema.version, 2);
    assert_migrated(&mut b, &m, on);
    // Re-encoded in the new shape: the next checkpoint restores as is.
    let sections = encode(&b.snapshot().unwrap());
    let again = restored_map(sections, Vec::new(), b.declared()[0].schema.clone());
    let mut b2 = backend_for(on, all(), again);
    let m2: MapState<u64, Price> = KeyedStateStore::new(&mut b2).map_state("m").unwrap();
    assert_eq!(b2.declared()[0].decision, Decision::AsIs);
    assert_eq!(map_of(&mut b2, &m2, 7), map_of(&mut b, &m, 7));
}

fn a_map_whose_user_key_type_changed_is_refused_naming_the_state_and_the_ways_out(on: On) {
    let mut b = backend_for(on, all(), v1_checkpoint(on));
    b.set_owner("prices");
    let e = KeyedStateStore::new(&mut b)
        .with_migration(migrate)
        .map_state::<String, Price>("m")
        .err()
        .expect("a changed user-key type cannot be migrated")
        .to_string();
    for part in [
        "operator 'prices'",
        "state 'm'",
        "user-key type changed",
        "u64",
        "String",
        "keep the map's old user-key type",
        "--allow-non-restored-state",
        "fresh",
    ] {
        assert!(e.contains(part), "'{part}' missing from: {e}");
    }
    assert!(!e.contains("with_migration"), "a function cannot help: {e}");
}

backend_tests!(
    a_map_state_migrates_its_values_through_the_function_base_and_delta,
    a_map_whose_user_key_type_changed_is_refused_naming_the_state_and_the_ways_out,
);

#[test]
fn the_probe_decides_map_states_as_the_restore_does() {
    let probe = |declare: &dyn Fn(&mut KeyedStateStore<'_, u64>) -> Result<()>| {
        let mut b = KeyedStateBackend::<u64>::new(all(), 16, v1_checkpoint(On::Memory)).probe();
        declare(&mut KeyedStateStore::new(&mut b)).unwrap();
        b.declared()[0].decision.clone()
    };
    let migrates = probe(&|s| {
        s.with_migration(migrate).map_state::<u64, Price>("m")?;
        Ok(())
    });
    assert_eq!(migrates, Decision::MigratesByFunction);
    assert_eq!(migrates.label(), "migrates (migration function)");
    let without = probe(&|s| {
        s.map_state::<u64, Price>("m")?;
        Ok(())
    });
    assert!(matches!(without, Decision::Incompatible(_)), "{without:?}");
    let rekeyed = probe(&|s| {
        s.with_migration(migrate).map_state::<u32, Price>("m")?;
        Ok(())
    });
    match rekeyed {
        Decision::Incompatible(why) => assert!(why.contains("user-key type changed"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_map_migration_returning_another_type_than_the_values_is_refused() {
    let mut b = backend_for(On::Memory, all(), v1_checkpoint(On::Memory));
    let e = KeyedStateStore::new(&mut b)
        .with_migration(migrate)
        .map_state::<u64, PriceV1>("m")
        .err()
        .expect("a Price migration cannot fill PriceV1 values")
        .to_string();
    assert!(e.contains("state 'm'") && e.contains("PriceV1"), "{e}");
}

/// The real thing on disk: a base and a delta written by the disk backend with incremental
/// checkpoints (the delta holding v1 values and a deletion) restore through the function.
#[cfg(feature = "disk-state")]
#[test]
fn an_incremental_chain_whose_delta_holds_old_values_migrates_on_disk() {
    use super::super::{DiskOptions, StateBackendKind};
    let dir = tempfile::tempdir().unwrap();
    let mut options = DiskOptions::new(dir.path());
    options.cache_entries = 4;
    options.incremental = true;
    let kind = StateBackendKind::Disk(options);
    let mut b = KeyedStateBackend::<u64>::with_kind(&kind, all(), 16, BTreeMap::new()).unwrap();
    let m: MapState<u64, PriceV1> = KeyedStateStore::new(&mut b).map_state("m").unwrap();
    for key in 0..KEYS {
        put(&mut b, &m, key, &[0, 1, 2]);
    }
    let base = b.snapshot_checkpoint(1).unwrap();
    let plan = base.incremental.as_ref().unwrap();
    assert!(!plan.delta, "the first is a base");
    // What the writer reports once it wrote the base: the chain later deltas follow.
    *plan.written.lock().unwrap() = Some(vec![super::super::ChainFile {
        path: "shared/op/chk-1".into(),
        size: 1 << 20,
        crc32c: 0,
        checkpoint_id: 1,
        run_id: "r".into(),
        index: None,
    }]);
    let sections = encode(&base);
    b.notify_complete(1).unwrap();
    put(&mut b, &m, 3, &[9]);
    put(&mut b, &m, 4, &[]);
    let delta = b.snapshot_checkpoint(2).unwrap();
    assert!(delta.incremental.as_ref().unwrap().delta, "then a delta");
    let schema = schema_of::<UserMap<u64, PriceV1>>(0);
    let restored = restored_map(sections, encode(&delta), schema);
    let on = On::Disk { cache: 4 };
    let mut b2 = backend_for(on, all(), restored);
    let m2: MapState<u64, Price> = KeyedStateStore::new(&mut b2)
        .with_migration(migrate)
        .map_state("m")
        .unwrap();
    assert_migrated(&mut b2, &m2, on);
}
