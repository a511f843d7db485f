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
    same::<u64, Order>();
    same::<Region, Vec<Option<Status>>>();
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

/// A top-level enum: traced in full before nested enums were (its fingerprint is pinned).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Shape {
    Dot,
    Line(u32),
    Rect { w: u32, h: u32 },
}

/// Fingerprints computed on main before nested enums were traced: a checkpoint recorded
/// them, so a type that traced then must keep its shape to restore "as is".
#[test]
fn fingerprints_of_types_traced_before_nested_enums_stay() {
    for (name, now, then) in [
        ("u64", schema_of::<u64>(0).fingerprint, 0xbbcc1a8c),
        ("String", schema_of::<String>(0).fingerprint, 0x7dca652a),
        ("V1", schema_of::<V1>(0).fingerprint, 0x9aeb4404),
        ("Holder", schema_of::<Holder>(0).fingerprint, 0x60803026),
        (
            "(u64, Option<String>)",
            schema_of::<(u64, Option<String>)>(0).fingerprint,
            0x4a49291f,
        ),
        ("Shape", schema_of::<Shape>(0).fingerprint, 0x926e8b26),
        (
            "FxMap<Region, Holder>",
            schema_of::<FxMap<Region, Holder>>(0).fingerprint,
            0x04d0d228,
        ),
        (
            "Vec<(u32, Region)>",
            schema_of::<Vec<(u32, Region)>>(0).fingerprint,
            0xa2f6e863,
        ),
    ] {
        assert_eq!(now, then, "{name}: 0x{now:08x}");
    }
}

/// An order's status, v1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum Status {
    Open,
    Shipped { days: u32 },
    Closed(u8),
}

/// v2 of the status: a variant added before the others (indexes shift; names decide).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum StatusAdded {
    Draft,
    Open,
    Shipped { days: u32 },
    Closed(u8),
}

/// v2 of the status without `Closed`, which old values may hold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum StatusRemoved {
    Open,
    Shipped { days: u32 },
}

/// A priority, added as a field with a default in v2.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
enum Priority {
    #[default]
    Normal,
    Urgent,
}

/// A struct holding its enum every common way: a field, an option, a sequence, a map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    status: Status,
    previous: Option<Status>,
    history: Vec<Status>,
    by_site: std::collections::BTreeMap<String, Status>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OrderAdded {
    id: u64,
    status: StatusAdded,
    previous: Option<StatusAdded>,
    history: Vec<StatusAdded>,
    by_site: std::collections::BTreeMap<String, StatusAdded>,
    #[serde(default)]
    priority: Priority,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OrderRemoved {
    id: u64,
    status: StatusRemoved,
    previous: Option<StatusRemoved>,
    history: Vec<StatusRemoved>,
    by_site: std::collections::BTreeMap<String, StatusRemoved>,
}

/// The variants the recorded shape of `T` lists for the enum `name`.
fn variants_of<T: Serialize + DeserializeOwned + 'static>(name: &str) -> Vec<String> {
    let (_, registry) = schema_of::<T>(0).shape().unwrap();
    match registry.get(name) {
        Some(serde_reflection::ContainerFormat::Enum(v)) => {
            v.values().map(|v| v.name.clone()).collect()
        }
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn enums_nested_in_structs_options_sequences_and_maps_trace_every_variant() {
    let all = ["Open", "Shipped", "Closed"];
    assert_eq!(variants_of::<Order>("Status"), all);
    assert_eq!(variants_of::<Option<Status>>("Status"), all);
    assert_eq!(variants_of::<Vec<Status>>("Status"), all);
    assert_eq!(variants_of::<FxMap<u64, Status>>("Status"), all);
    assert_eq!(variants_of::<(u64, Vec<Option<Status>>)>("Status"), all);
    // Behind an option, a sequence or a map in a struct's field only (the tracer's own
    // passes visit those once).
    #[derive(Debug, Serialize, Deserialize)]
    struct Behind {
        maybe: Option<Status>,
    }
    #[derive(Debug, Serialize, Deserialize)]
    struct Listed {
        all: Vec<(u8, Status)>,
        by_id: std::collections::BTreeMap<u64, Option<Status>>,
    }
    assert_eq!(variants_of::<Behind>("Status"), all);
    assert_eq!(variants_of::<Listed>("Status"), all);
    assert_eq!(variants_of::<FxMap<u64, Behind>>("Status"), all);
    // An enum only reachable through another enum's later variant, and recursion.
    #[derive(Debug, Serialize, Deserialize)]
    enum Outer {
        Nothing,
        Later(Vec<Status>),
        Nested(Box<Outer>),
    }
    assert_eq!(variants_of::<Vec<Outer>>("Status"), all);
    assert_eq!(
        variants_of::<Vec<Outer>>("Outer"),
        ["Nothing", "Later", "Nested"]
    );
    // A struct whose alias made the tracer's passes fail is traced from its values, by
    // its serialized field names.
    let (_, registry) = schema_of::<V2>(0).shape().unwrap();
    match registry.get("V2") {
        Some(serde_reflection::ContainerFormat::Struct(fields)) => assert_eq!(
            fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            ["count", "name", "added"]
        ),
        other => panic!("{other:?}"),
    }
    // Different enums, different shapes; the same, the same.
    assert!(schema_of::<Order>(0).traced());
    assert_ne!(
        schema_of::<Order>(0).fingerprint,
        schema_of::<OrderRemoved>(0).fingerprint
    );
    assert_eq!(
        decide::<Order>(&schema_of::<Order>(1), &schema_of::<Order>(2), None),
        Decision::AsIs
    );
}

fn order() -> Order {
    Order {
        id: 7,
        status: Status::Closed(3),
        previous: Some(Status::Shipped { days: 2 }),
        history: vec![Status::Open, Status::Shipped { days: 2 }, Status::Closed(3)],
        by_site: [("a".to_string(), Status::Closed(1))].into(),
    }
}

#[test]
fn an_enum_field_and_a_variant_added_migrate_by_serde_and_values_keep_their_variants() {
    let old = schema_of::<Order>(1);
    assert_eq!(
        decide::<OrderAdded>(&old, &schema_of::<OrderAdded>(2), None),
        Decision::MigratesBySerde
    );
    let bytes = postcard::to_extend(&(1u64, order()), Vec::new()).unwrap();
    let decoder = serde_decoder::<OrderAdded>(&old).unwrap();
    let out = transcode::<u64, OrderAdded>(&[SharedBytes::from(bytes)], false, &decoder).unwrap();
    let (_, back): (u64, OrderAdded) = postcard::from_bytes(&out[0]).unwrap();
    assert_eq!(
        back,
        OrderAdded {
            id: 7,
            status: StatusAdded::Closed(3),
            previous: Some(StatusAdded::Shipped { days: 2 }),
            history: vec![
                StatusAdded::Open,
                StatusAdded::Shipped { days: 2 },
                StatusAdded::Closed(3)
            ],
            by_site: [("a".to_string(), StatusAdded::Closed(1))].into(),
            priority: Priority::Normal,
        }
    );
}

#[test]
fn a_removed_variant_old_values_may_hold_is_incompatible_unless_a_function_reads_them() {
    let old = schema_of::<Order>(1);
    let new = schema_of::<OrderRemoved>(2);
    match decide::<OrderRemoved>(&old, &new, None) {
        Decision::Incompatible(why) => assert!(why.contains("Status::Closed"), "{why}"),
        d => panic!("{d:?}"),
    }
    // A top-level enum that lost a variant (not its first) too.
    assert!(matches!(
        decide::<StatusRemoved>(
            &schema_of::<Status>(1),
            &schema_of::<StatusRemoved>(2),
            None
        ),
        Decision::Incompatible(_)
    ));
    // A migration function from the struct-with-enum type reads them.
    assert_eq!(
        decide::<OrderRemoved>(&old, &new, Some(&schema_of::<Order>(0))),
        Decision::MigratesByFunction
    );
}

/// A type whose `Deserialize` refuses made-up input (zero), holding a nested enum: neither
/// the tracer's passes nor invented values can trace it, so it stays untraced (compared
/// by name), as such types were before.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct NonZero(u32, Status);

impl<'de> Deserialize<'de> for NonZero {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (n, s) = <(u32, Status)>::deserialize(d)?;
        if n == 0 {
            return Err(serde::de::Error::custom("zero"));
        }
        Ok(NonZero(n, s))
    }
}

#[test]
fn a_type_refusing_made_up_input_stays_untraced() {
    let s = schema_of::<Vec<NonZero>>(0);
    assert!(!s.traced(), "{s:?}");
    assert_eq!(s.fingerprint, 0);
}
