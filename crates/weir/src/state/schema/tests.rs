use serde::{Deserialize, Serialize};

use super::*;
use crate::storage::shared_bytes::SharedBytes;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct V1 {
    count: u64,
    label: String,
    old: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct V2 {
    count: u64,
    #[serde(alias = "label")]
    name: String,
    #[serde(default)]
    added: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Required {
    count: u64,
    needed: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Retyped {
    count: String,
}

#[test]
fn the_same_type_has_the_same_fingerprint_and_another_shape_another() {
    let a = schema_of::<V1>(1);
    assert!(a.traced());
    assert_eq!(a, schema_of::<V1>(1));
    assert_ne!(a.fingerprint, schema_of::<V2>(1).fingerprint);
    assert_eq!(decide::<V1>(&a, &schema_of::<V1>(2), None), Decision::AsIs);
}

#[test]
fn serde_reads_added_removed_and_renamed_fields() {
    let old = schema_of::<V1>(1);
    assert_eq!(
        decide::<V2>(&old, &schema_of::<V2>(2), None),
        Decision::MigratesBySerde
    );
    let entries = [(
        7u64,
        V1 {
            count: 3,
            label: "x".into(),
            old: 9,
        },
    )];
    let mut bytes = Vec::new();
    for e in &entries {
        bytes = postcard::to_extend(e, bytes).unwrap();
    }
    let decoder = serde_decoder::<V2>(&old).unwrap();
    let out = transcode::<u64, V2>(&[SharedBytes::from(bytes)], false, &decoder).unwrap();
    let back: (u64, V2) = postcard::from_bytes(&out[0]).unwrap();
    assert_eq!(
        back,
        (
            7,
            V2 {
                count: 3,
                name: "x".into(),
                added: 0
            }
        )
    );
}

#[test]
fn the_changes_of_an_incremental_checkpoint_migrate_too_and_deletions_stay() {
    let old = schema_of::<V1>(1);
    let v1 = V1 {
        count: 3,
        label: "x".into(),
        old: 9,
    };
    for ttl in [false, true] {
        let mut bytes = Vec::new();
        bytes = if ttl {
            postcard::to_extend(&(7u64, Some((v1.clone(), 55u64))), bytes).unwrap()
        } else {
            postcard::to_extend(&(7u64, Some(v1.clone())), bytes).unwrap()
        };
        bytes = postcard::to_extend(&(8u64, Option::<V1>::None), bytes).unwrap();
        let decoder = serde_decoder::<V2>(&old).unwrap();
        let out = transcode_changes::<u64, V2>(&[SharedBytes::from(bytes)], ttl, &decoder).unwrap();
        let v2 = V2 {
            count: 3,
            name: "x".into(),
            added: 0,
        };
        let rest: &[u8] = &out[0];
        let rest = if ttl {
            let (first, rest): ((u64, Option<(V2, u64)>), _) =
                postcard::take_from_bytes(rest).unwrap();
            assert_eq!(first, (7, Some((v2, 55))));
            rest
        } else {
            let (first, rest): ((u64, Option<V2>), _) = postcard::take_from_bytes(rest).unwrap();
            assert_eq!(first, (7, Some(v2)));
            rest
        };
        let (deleted, rest): ((u64, Option<V2>), _) = postcard::take_from_bytes(rest).unwrap();
        assert_eq!(deleted, (8, None));
        assert!(rest.is_empty());
    }
}

#[test]
fn a_required_field_or_a_changed_field_type_is_incompatible() {
    let old = schema_of::<V1>(1);
    match decide::<Required>(&old, &schema_of::<Required>(2), None) {
        Decision::Incompatible(why) => assert!(why.contains("needed"), "{why}"),
        d => panic!("{d:?}"),
    }
    assert!(matches!(
        decide::<Retyped>(&old, &schema_of::<Retyped>(2), None),
        Decision::Incompatible(_)
    ));
    // ...unless a migration function reads the old type.
    assert_eq!(
        decide::<Retyped>(&old, &schema_of::<Retyped>(2), Some(&old)),
        Decision::MigratesByFunction
    );
}

#[test]
fn a_changed_key_type_is_incompatible() {
    assert_eq!(
        decide_key(&schema_of::<u64>(0), &schema_of::<u64>(0)),
        Decision::AsIs
    );
    assert!(matches!(
        decide_key(&schema_of::<u64>(0), &schema_of::<String>(0)),
        Decision::Incompatible(_)
    ));
}

#[test]
fn the_refusal_names_operator_state_schemas_and_ways_out() {
    let m = incompatible_message(
        "counts",
        "total",
        Some(&schema_of::<V1>(1)),
        Some(&schema_of::<Required>(2)),
        "missing field `needed`",
    );
    for part in [
        "'counts'",
        "'total'",
        "V1 v1",
        "Required v2",
        "with_migration",
        "--allow-non-restored-state",
        "fresh",
    ] {
        assert!(m.contains(part), "{part} in {m}");
    }
}

/// A user key of a shape of its own, to compose with a value naming containers too.
/// (Structs: an enum nested in another type is not traced, top-level enums are.)
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct Region {
    code: u8,
    name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Holder {
    v1: V1,
    region: Option<Region>,
}

type FxMap<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;

/// The shape a map state's migration function reads is composed from the user-key and
/// the old value type; a restore compares it by fingerprint with the shape recorded by
/// tracing the map type itself, so the two must be identical.
#[test]
fn a_composed_map_shape_is_the_traced_map_shape() {
    fn same<K, V>()
    where
        K: Serialize + serde::de::DeserializeOwned + Eq + std::hash::Hash + 'static,
        V: Serialize + serde::de::DeserializeOwned + 'static,
    {
        let composed = map_schema(&schema_of::<K>(0), &schema_of::<V>(0));
        let traced = schema_of::<FxMap<K, V>>(0);
        assert!(traced.traced(), "{traced:?}");
        assert_eq!(composed.format, traced.format);
        assert_eq!(composed.fingerprint, traced.fingerprint);
    }
    same::<u64, V1>();
    same::<String, (u64, V1)>();
    same::<Region, Holder>();
    same::<(u32, Region), Vec<Holder>>();
    let untraceable = StateSchema {
        type_name: "T".into(),
        version: 0,
        fingerprint: 0,
        format: String::new(),
    };
    assert!(!map_schema(&schema_of::<u64>(0), &untraceable).traced());
}

#[test]
fn a_changed_user_key_is_found_and_a_changed_value_is_not() {
    let old = schema_of::<FxMap<u64, V1>>(0);
    assert_eq!(user_key_change(&old, &schema_of::<FxMap<u64, V2>>(0)), None);
    assert_eq!(user_key_change(&old, &old), None);
    let why = user_key_change(&old, &schema_of::<FxMap<Region, V1>>(0)).unwrap();
    assert!(why.starts_with("the map's user-key type changed"), "{why}");
    assert!(why.contains("u64") && why.contains("Region"), "{why}");
    let why = user_key_change(&old, &schema_of::<FxMap<(u32, String), V1>>(0)).unwrap();
    assert!(why.contains("(u32, String)"), "{why}");
    // Not maps: nothing to say (a value state decides as always).
    assert_eq!(
        user_key_change(&schema_of::<V1>(0), &schema_of::<V2>(0)),
        None
    );
    let m = incompatible_message("op", "m", Some(&old), None, &why);
    assert!(m.contains("keep the map's old user-key type"), "{m}");
    assert!(!m.contains("with_migration"), "{m}");
}
