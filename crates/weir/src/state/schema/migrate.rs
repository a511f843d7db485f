//! Reading state written with an older shape: re-encoding a restored key-group section
//! entry by entry into the new type's bytes, before the table loads it the usual way.
//!
//! The serde path decodes each old value by its recorded shape into a JSON value (the
//! shape says which field is which; postcard alone cannot), then deserializes the new type
//! from that: serde's own rules decide (defaults, aliases, unknown fields ignored). The
//! function path decodes the old type itself and calls the user's function. Either way the
//! result is encoded with postcard again, so the table's restore, the disk tier and every
//! later snapshot see only the new shape. This runs once per restore, and only for states
//! whose shape changed.

use std::rc::Rc;

use postcard::de_flavors::Slice;
use serde::de::DeserializeOwned;
use serde::de::DeserializeSeed;
use serde::Deserialize;
use serde_json::Value;
use serde_reflection::json_converter::{DeserializationContext, EmptyEnvironment};
use serde_reflection::{ContainerFormat, Format, Registry, VariantFormat};

use super::StateSchema;
use crate::state::{Key, StateValue};
use crate::storage::shared_bytes::SharedBytes;

/// Reads one stored value of the old shape from a postcard stream into the new type `S`.
/// Used on the thread that declares the state only (a traced shape is not `Send`).
pub(crate) type ValueDecoder<S> =
    Rc<dyn for<'b> Fn(&mut postcard::Deserializer<'b, Slice<'b>>) -> Result<S, String>>;

/// A decoder that reads values of recorded shape `old` into `S` through serde.
pub(crate) fn serde_decoder<S: DeserializeOwned + 'static>(
    old: &StateSchema,
) -> Result<ValueDecoder<S>, String> {
    let (format, registry) = old.shape()?;
    Ok(Rc::new(move |de| {
        let value: Value = DeserializationContext {
            format: format.clone(),
            registry: &registry,
            environment: &EmptyEnvironment,
        }
        .deserialize(&mut *de)
        .map_err(|e| format!("reading a value of the old shape: {e}"))?;
        S::deserialize(value).map_err(|e| e.to_string())
    }))
}

/// Re-encodes every entry of `sections` (`(K, S_old)`, or `(K, (S_old, stamp))` when
/// `ttl`) as `(K, S)` (or `(K, (S, stamp))`), reading each old value with `decode`.
pub(crate) fn transcode<K: Key, S: StateValue>(
    sections: &[SharedBytes],
    ttl: bool,
    decode: &ValueDecoder<S>,
) -> Result<Vec<SharedBytes>, String> {
    transcode_entries(sections, |de, encoded| {
        let key = K::deserialize(&mut *de).map_err(|e| format!("reading a key: {e}"))?;
        let value = decode(de)?;
        match read_stamp(de, ttl)? {
            None => postcard::to_extend(&(key, value), encoded),
            Some(stamp) => postcard::to_extend(&(key, (value, stamp)), encoded),
        }
        .map_err(|e| format!("encoding a migrated value: {e}"))
    })
}

/// Like [`transcode`], for the deltas of an incremental checkpoint: entries are
/// `(K, Option<S_old>)` (or `(K, Option<(S_old, stamp)>)`), re-encoded as `(K, Option<S>)`;
/// a `None` (a deleted key) stays one.
pub(crate) fn transcode_changes<K: Key, S: StateValue>(
    sections: &[SharedBytes],
    ttl: bool,
    decode: &ValueDecoder<S>,
) -> Result<Vec<SharedBytes>, String> {
    transcode_entries(sections, |de, encoded| {
        let key = K::deserialize(&mut *de).map_err(|e| format!("reading a key: {e}"))?;
        let present = bool::deserialize(&mut *de)
            .map_err(|e| format!("reading whether a changed key has a value: {e}"))?;
        if !present {
            return postcard::to_extend(&(key, Option::<S>::None), encoded)
                .map_err(|e| format!("encoding a migrated value: {e}"));
        }
        let value = decode(de)?;
        match read_stamp(de, ttl)? {
            None => postcard::to_extend(&(key, Some(value)), encoded),
            Some(stamp) => postcard::to_extend(&(key, Some((value, stamp))), encoded),
        }
        .map_err(|e| format!("encoding a migrated value: {e}"))
    })
}

/// The walk [`transcode`] and [`transcode_changes`] share: every entry of every section,
/// read and re-encoded by `entry` (which appends to the section's new bytes and gives them
/// back), until each section's bytes are used up.
fn transcode_entries(
    sections: &[SharedBytes],
    mut entry: impl for<'b> FnMut(
        &mut postcard::Deserializer<'b, Slice<'b>>,
        Vec<u8>,
    ) -> Result<Vec<u8>, String>,
) -> Result<Vec<SharedBytes>, String> {
    let mut out = Vec::with_capacity(sections.len());
    for section in sections {
        let mut rest: &[u8] = section;
        let mut encoded = Vec::with_capacity(rest.len());
        while !rest.is_empty() {
            let mut de = postcard::Deserializer::from_bytes(rest);
            encoded = entry(&mut de, encoded)?;
            rest = de.finalize().map_err(|e| e.to_string())?;
        }
        out.push(SharedBytes::from(encoded));
    }
    Ok(out)
}

/// The TTL stamp that follows a value when the state has a TTL.
fn read_stamp<'b>(
    de: &mut postcard::Deserializer<'b, Slice<'b>>,
    ttl: bool,
) -> Result<Option<u64>, String> {
    if !ttl {
        return Ok(None);
    }
    u64::deserialize(de)
        .map(Some)
        .map_err(|e| format!("reading a TTL stamp: {e}"))
}

/// Whether `S` can read values of the recorded shape `old` through serde, tried on a
/// sample value of that shape (every field present, one element per sequence and map,
/// the first variant of each enum, `Some` for options). A field the new type requires and
/// the old shape lacks, or a field whose type changed, fails here, before any task starts.
pub(crate) fn check_reads<S: DeserializeOwned>(old: &StateSchema) -> Result<(), String> {
    let (format, registry) = old.shape()?;
    let sample = sample(&format, &registry, 0);
    S::deserialize(sample)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Deeper than this, a (recursive) shape's sample stops with `null`.
const MAX_SAMPLE_DEPTH: usize = 24;

/// A value of shape `format` as the serde path's JSON represents it.
fn sample(format: &Format, registry: &Registry, depth: usize) -> Value {
    if depth > MAX_SAMPLE_DEPTH {
        return Value::Null;
    }
    let d = depth + 1;
    match format {
        Format::Variable(_) | Format::Unit => Value::Null,
        Format::TypeName(name) => match registry.get(name) {
            Some(container) => sample_container(container, registry, d),
            None => Value::Null,
        },
        Format::Bool => Value::Bool(false),
        Format::I8
        | Format::I16
        | Format::I32
        | Format::I64
        | Format::I128
        | Format::U8
        | Format::U16
        | Format::U32
        | Format::U64
        | Format::U128 => Value::from(0u8),
        Format::F32 | Format::F64 => Value::from(0.0),
        Format::Char => Value::from("a"),
        Format::Str => Value::from(""),
        Format::Bytes => Value::Array(Vec::new()),
        Format::Option(inner) => sample(inner, registry, d),
        Format::Seq(inner) => Value::Array(vec![sample(inner, registry, d)]),
        Format::Map { key, value } => {
            let key = match sample(key, registry, d) {
                Value::String(s) => s,
                other => other.to_string(),
            };
            let mut map = serde_json::Map::new();
            map.insert(key, sample(value, registry, d));
            Value::Object(map)
        }
        Format::Tuple(items) => {
            Value::Array(items.iter().map(|f| sample(f, registry, d)).collect())
        }
        Format::TupleArray { content, size } => {
            Value::Array((0..*size).map(|_| sample(content, registry, d)).collect())
        }
    }
}

fn sample_container(container: &ContainerFormat, registry: &Registry, d: usize) -> Value {
    match container {
        ContainerFormat::UnitStruct => Value::Null,
        ContainerFormat::NewTypeStruct(inner) => sample(inner, registry, d),
        ContainerFormat::TupleStruct(items) => {
            Value::Array(items.iter().map(|f| sample(f, registry, d)).collect())
        }
        ContainerFormat::Struct(fields) => Value::Object(
            fields
                .iter()
                .map(|f| (f.name.clone(), sample(&f.value, registry, d)))
                .collect(),
        ),
        ContainerFormat::Enum(variants) => {
            let Some(first) = variants.values().next() else {
                return Value::Null;
            };
            let content = match &first.value {
                VariantFormat::Variable(_) | VariantFormat::Unit => Value::Null,
                VariantFormat::NewType(inner) => sample(inner, registry, d),
                VariantFormat::Tuple(items) => {
                    Value::Array(items.iter().map(|f| sample(f, registry, d)).collect())
                }
                VariantFormat::Struct(fields) => Value::Object(
                    fields
                        .iter()
                        .map(|f| (f.name.clone(), sample(&f.value, registry, d)))
                        .collect(),
                ),
            };
            let mut map = serde_json::Map::new();
            map.insert(first.name.clone(), content);
            Value::Object(map)
        }
    }
}
