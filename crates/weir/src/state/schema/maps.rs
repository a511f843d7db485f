//! Map states' schemas (issue 26). A map state stores, per key, a map of user keys to
//! values, recorded as one shape, `Map { key, value }`. Its migration function reads the
//! *values* only: the job names the old value type when it attaches the function and the
//! user-key type only when it declares the map, so the shape the function reads is
//! composed here from the two ([`map_schema`]). The user keys must keep their shape — they
//! identify the map's entries, and a function of the values cannot say where an old entry
//! belongs — so [`user_key_change`] finds a changed user-key type, which is refused with
//! ways out of its own ([`USER_KEY_CHANGED`]).

use serde_reflection::{ContainerFormat, Format, Registry, VariantFormat};

use super::StateSchema;

/// What the reason for refusing a map state whose user-key type changed starts with: the
/// refusal then names the ways out that fit (a migration function cannot help).
pub(crate) const USER_KEY_CHANGED: &str = "the map's user-key type changed";

/// The schema of a map from `key`'s type to `value`'s, as tracing that map type itself
/// records it (same format, same fingerprint): the shape a map state's migration function
/// reads. Untraced when either part is, or when their registries disagree on a name.
pub(crate) fn map_schema(key: &StateSchema, value: &StateSchema) -> StateSchema {
    let type_name = format!("map {} -> {}", key.type_name, value.type_name);
    let composed = || -> Option<String> {
        if !key.traced() || !value.traced() {
            return None;
        }
        let (key_format, mut registry) = key.shape().ok()?;
        let (value_format, value_registry) = value.shape().ok()?;
        for (name, container) in value_registry {
            match registry.get(&name) {
                Some(known) if *known != container => return None,
                _ => {
                    registry.insert(name, container);
                }
            }
        }
        let map = Format::Map {
            key: Box::new(key_format),
            value: Box::new(value_format),
        };
        serde_json::to_string(&(map, registry)).ok()
    };
    let (fingerprint, format) = composed().map_or((0, String::new()), |json| {
        (crc32c::crc32c(json.as_bytes()), json)
    });
    StateSchema {
        type_name,
        version: 0,
        fingerprint,
        format,
    }
}

/// Why a map state recorded with `old` cannot be declared with `new`, when its user-key
/// shape changed (`None`: the same user keys, or shapes that are not maps or not traced).
pub(crate) fn user_key_change(old: &StateSchema, new: &StateSchema) -> Option<String> {
    if !old.traced() || !new.traced() || old.fingerprint == new.fingerprint {
        return None;
    }
    let (was, is) = (user_key(old)?, user_key(new)?);
    (was != is).then(|| {
        format!(
            "{USER_KEY_CHANGED} (the checkpoint's user keys are {}, the job's {}); a map \
             state's migration function reads its values only, since its user keys identify \
             its entries",
            show(&was.0),
            show(&is.0)
        )
    })
}

/// The user-key shape of a map schema: its key's format and the containers it reaches.
fn user_key(schema: &StateSchema) -> Option<(Format, Registry)> {
    let (format, registry) = schema.shape().ok()?;
    let Format::Map { key, .. } = format else {
        return None;
    };
    let mut reached = Registry::new();
    reach(&key, &registry, &mut reached);
    Some((*key, reached))
}

/// Adds every container `format` names, directly or through other containers, to `out`.
fn reach(format: &Format, registry: &Registry, out: &mut Registry) {
    match format {
        Format::TypeName(name) => {
            let Some(container) = registry.get(name) else {
                return;
            };
            if out.insert(name.clone(), container.clone()).is_some() {
                return; // reached before (a recursive type)
            }
            match container {
                ContainerFormat::UnitStruct => {}
                ContainerFormat::NewTypeStruct(inner) => reach(inner, registry, out),
                ContainerFormat::TupleStruct(items) => {
                    items.iter().for_each(|f| reach(f, registry, out))
                }
                ContainerFormat::Struct(fields) => {
                    fields.iter().for_each(|f| reach(&f.value, registry, out))
                }
                ContainerFormat::Enum(variants) => {
                    for variant in variants.values() {
                        match &variant.value {
                            VariantFormat::Variable(_) | VariantFormat::Unit => {}
                            VariantFormat::NewType(inner) => reach(inner, registry, out),
                            VariantFormat::Tuple(items) => {
                                items.iter().for_each(|f| reach(f, registry, out))
                            }
                            VariantFormat::Struct(fields) => {
                                fields.iter().for_each(|f| reach(&f.value, registry, out))
                            }
                        }
                    }
                }
            }
        }
        Format::Option(inner) | Format::Seq(inner) => reach(inner, registry, out),
        Format::TupleArray { content, .. } => reach(content, registry, out),
        Format::Map { key, value } => {
            reach(key, registry, out);
            reach(value, registry, out);
        }
        Format::Tuple(items) => items.iter().for_each(|f| reach(f, registry, out)),
        _ => {}
    }
}

/// A shape as a person reads it in a message: `u64`, `String`, `UserId`, `(u32, String)`.
fn show(format: &Format) -> String {
    let list = |items: &[Format]| items.iter().map(show).collect::<Vec<_>>().join(", ");
    match format {
        Format::TypeName(name) => name.clone(),
        Format::Variable(_) => "?".into(),
        Format::Unit => "()".into(),
        Format::Str => "String".into(),
        Format::Bytes => "bytes".into(),
        Format::Option(inner) => format!("Option<{}>", show(inner)),
        Format::Seq(inner) => format!("Vec<{}>", show(inner)),
        Format::Map { key, value } => format!("Map<{}, {}>", show(key), show(value)),
        Format::Tuple(items) => format!("({})", list(items)),
        Format::TupleArray { content, size } => format!("[{}; {size}]", show(content)),
        primitive => format!("{primitive:?}").to_lowercase(),
    }
}
