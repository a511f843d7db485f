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

use std::collections::BTreeSet;
use std::rc::Rc;

use postcard::de_flavors::Slice;
use serde::de::DeserializeOwned;
use serde::de::DeserializeSeed;
use serde::Deserialize;
use serde_json::Value;
use serde_reflection::json_converter::{DeserializationContext, EmptyEnvironment};
use serde_reflection::{ContainerFormat, Format, Named, Registry, VariantFormat};

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

/// Whether `S` can read values of the recorded shape `old` through serde, tried on sample
/// values of that shape (every field present, one element per sequence and map, `Some`
/// for options): one sample per variant of every enum in the shape, wherever it is nested,
/// so that a variant the new type lost (and old values may hold) fails here too. A field
/// the new type requires and the old shape lacks, or a field whose type changed, fails
/// here, before any task starts.
pub(crate) fn check_reads<S: DeserializeOwned>(old: &StateSchema) -> Result<(), String> {
    let (format, registry) = old.shape()?;
    let mut targets: Vec<Option<(&str, usize)>> = vec![None];
    for (name, container) in &registry {
        if let ContainerFormat::Enum(variants) = container {
            targets.extend((0..variants.len()).map(|i| Some((name.as_str(), i))));
        }
    }
    for target in targets {
        let sampler = Sampler {
            registry: &registry,
            target,
        };
        S::deserialize(sampler.sample(&format, 0)).map_err(|e| match target {
            Some((name, i)) => {
                let variant = match registry.get(name) {
                    Some(ContainerFormat::Enum(v)) => v.values().nth(i).map(|v| v.name.clone()),
                    _ => None,
                };
                format!("{e} (reading {name}::{})", variant.unwrap_or_default())
            }
            None => e.to_string(),
        })?;
    }
    Ok(())
}

/// Deeper than this, a (recursive) shape's sample stops with `null`.
const MAX_SAMPLE_DEPTH: usize = 24;

/// Makes sample values of a recorded shape, as the serde path's JSON represents them.
/// With a `target` enum variant, the sample holds that variant: the target enum takes it,
/// and every other enum takes its first variant that leads to the target enum (its first
/// variant when none does).
struct Sampler<'r> {
    registry: &'r Registry,
    target: Option<(&'r str, usize)>,
}

impl Sampler<'_> {
    /// A value of shape `format`.
    fn sample(&self, format: &Format, depth: usize) -> Value {
        if depth > MAX_SAMPLE_DEPTH {
            return Value::Null;
        }
        let d = depth + 1;
        match format {
            Format::Variable(_) | Format::Unit => Value::Null,
            Format::TypeName(name) => match self.registry.get(name) {
                Some(container) => self.container(name, container, d),
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
            Format::Option(inner) => self.sample(inner, d),
            Format::Seq(inner) => Value::Array(vec![self.sample(inner, d)]),
            Format::Map { key, value } => {
                let key = match self.sample(key, d) {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                let mut map = serde_json::Map::new();
                map.insert(key, self.sample(value, d));
                Value::Object(map)
            }
            Format::Tuple(items) => self.all(items, d),
            Format::TupleArray { content, size } => {
                Value::Array((0..*size).map(|_| self.sample(content, d)).collect())
            }
        }
    }

    fn all(&self, items: &[Format], d: usize) -> Value {
        Value::Array(items.iter().map(|f| self.sample(f, d)).collect())
    }

    fn fields(&self, fields: &[Named<Format>], d: usize) -> Value {
        Value::Object(
            fields
                .iter()
                .map(|f| (f.name.clone(), self.sample(&f.value, d)))
                .collect(),
        )
    }

    fn container(&self, name: &str, container: &ContainerFormat, d: usize) -> Value {
        match container {
            ContainerFormat::UnitStruct => Value::Null,
            ContainerFormat::NewTypeStruct(inner) => self.sample(inner, d),
            ContainerFormat::TupleStruct(items) => self.all(items, d),
            ContainerFormat::Struct(fields) => self.fields(fields, d),
            ContainerFormat::Enum(variants) => {
                let chosen = match self.target {
                    Some((target, i)) if target == name => variants.values().nth(i),
                    Some((target, _)) => variants
                        .values()
                        .find(|v| self.variant_reaches(&v.value, target, &mut BTreeSet::new()))
                        .or_else(|| variants.values().next()),
                    None => variants.values().next(),
                };
                let Some(chosen) = chosen else {
                    return Value::Null;
                };
                let content = match &chosen.value {
                    VariantFormat::Variable(_) | VariantFormat::Unit => Value::Null,
                    VariantFormat::NewType(inner) => self.sample(inner, d),
                    VariantFormat::Tuple(items) => self.all(items, d),
                    VariantFormat::Struct(fields) => self.fields(fields, d),
                };
                let mut map = serde_json::Map::new();
                map.insert(chosen.name.clone(), content);
                Value::Object(map)
            }
        }
    }

    /// Whether a value of this variant can hold the enum named `target`.
    fn variant_reaches<'a>(
        &'a self,
        variant: &'a VariantFormat,
        target: &str,
        seen: &mut BTreeSet<&'a str>,
    ) -> bool {
        match variant {
            VariantFormat::Variable(_) | VariantFormat::Unit => false,
            VariantFormat::NewType(inner) => self.reaches(inner, target, seen),
            VariantFormat::Tuple(items) => items.iter().any(|f| self.reaches(f, target, seen)),
            VariantFormat::Struct(fields) => {
                fields.iter().any(|f| self.reaches(&f.value, target, seen))
            }
        }
    }

    /// Whether a value of shape `format` can hold the enum named `target`.
    fn reaches<'a>(
        &'a self,
        format: &'a Format,
        target: &str,
        seen: &mut BTreeSet<&'a str>,
    ) -> bool {
        match format {
            Format::TypeName(name) => {
                if name == target {
                    return true;
                }
                if !seen.insert(name.as_str()) {
                    return false;
                }
                match self.registry.get(name) {
                    None | Some(ContainerFormat::UnitStruct) => false,
                    Some(ContainerFormat::NewTypeStruct(inner)) => {
                        self.reaches(inner, target, seen)
                    }
                    Some(ContainerFormat::TupleStruct(items)) => {
                        items.iter().any(|f| self.reaches(f, target, seen))
                    }
                    Some(ContainerFormat::Struct(fields)) => {
                        fields.iter().any(|f| self.reaches(&f.value, target, seen))
                    }
                    Some(ContainerFormat::Enum(variants)) => variants
                        .values()
                        .any(|v| self.variant_reaches(&v.value, target, seen)),
                }
            }
            Format::Option(inner) | Format::Seq(inner) => self.reaches(inner, target, seen),
            Format::TupleArray { content, .. } => self.reaches(content, target, seen),
            Format::Map { key, value } => {
                self.reaches(key, target, seen) || self.reaches(value, target, seen)
            }
            Format::Tuple(items) => items.iter().any(|f| self.reaches(f, target, seen)),
            _ => false,
        }
    }
}
