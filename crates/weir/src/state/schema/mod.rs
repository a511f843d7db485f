//! State schemas: what every state's values looked like when a checkpoint was taken, and
//! the per-state decision a restore makes from it (issue 26; docs/design-notes.md,
//! "State schema evolution").
//!
//! State values are postcard bytes of the user's serde types, and postcard is not
//! self-describing: bytes of `struct V1 { a: u64 }` read as `struct V2 { a: u64, b: u64 }`
//! fail, or worse, decode into wrong values. So every checkpoint records, per state, a
//! [`StateSchema`]: the type's name, a version the user may declare, and the shape of the
//! type as `serde-reflection` traces it (its serde data model, field names included), with
//! a fingerprint of that shape. On restore each state is decided before any task starts
//! ([`Decision`]):
//!
//! * **as is** — same fingerprint: the fast path, postcard straight into the new type, at
//!   no cost over a job that never changed;
//! * **migrates** — the shape changed and either the state declares a migration function
//!   from the recorded shape, or the new type reads the old values through serde itself:
//!   the old bytes are decoded by their *recorded* shape into a self-describing value
//!   (JSON), and the new type deserializes from that with its own serde impl, so
//!   `#[serde(default)]`, `#[serde(alias)]` and dropped fields work as serde users expect;
//! * **incompatible** — neither: refused with the operator, the state, both schemas and
//!   the ways out.
//!
//! Checkpoints written before schemas existed restore as **unversioned**: decoded straight
//! into the new type, as before.

mod elements;
mod explore;
mod maps;
mod migrate;
#[cfg(test)]
mod tests;

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_reflection::{Format, FormatHolder, Registry, Tracer, TracerConfig};

use super::StateKind;

pub use elements::OperatorListDeclaration;
pub(crate) use elements::{decode_elements, list_refusal};
pub(crate) use maps::{map_schema, user_key_change};
pub(crate) use migrate::{check_reads, serde_decoder, transcode, transcode_changes, ValueDecoder};

/// The schema of one state's stored type (or of a key type), as recorded in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSchema {
    /// The Rust type's name (`std::any::type_name`): for people, never compared.
    pub type_name: String,
    /// The version the job declared for the state (`KeyedStateStore::with_version`;
    /// 0 when it declared none). Shown in messages; the shape decides.
    pub version: u32,
    /// CRC-32C of [`format`](Self::format): equal fingerprints mean equal shapes.
    /// 0 when the type could not be traced (then only its name is compared).
    pub fingerprint: u32,
    /// The traced shape: JSON of serde-reflection's `(Format, Registry)`, which is what
    /// decodes the old bytes when the type changed. Empty when the type could not be
    /// traced.
    pub format: String,
}

impl StateSchema {
    /// Whether the shape was traced (and so can be compared and migrated from).
    pub fn traced(&self) -> bool {
        !self.format.is_empty()
    }

    /// The recorded shape, decoded.
    pub(crate) fn shape(&self) -> Result<(Format, Registry), String> {
        serde_json::from_str(&self.format).map_err(|e| {
            format!(
                "the recorded schema of {} is unreadable: {e}",
                self.type_name
            )
        })
    }
}

impl std::fmt::Display for StateSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} v{}", self.type_name, self.version)?;
        if self.traced() {
            write!(f, " (shape {:08x})", self.fingerprint)
        } else {
            f.write_str(" (shape not traceable)")
        }
    }
}

/// One state of one operator, as recorded in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedState {
    /// The state's name.
    pub name: String,
    /// Its kind.
    pub kind: StateKind,
    /// Its stored type's schema.
    pub schema: StateSchema,
}

/// The schemas of one operator's state, as recorded in a checkpoint (metadata layout 6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorSchemas {
    /// The operator's uid.
    pub uid: String,
    /// The key type of a keyed operator: a changed key type is always incompatible,
    /// because keys place records in key groups.
    pub key: Option<StateSchema>,
    /// Its keyed states, in declaration order (engine states, `__` names, included).
    pub states: Vec<RecordedState>,
}

/// What a restore does with one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Same shape: decoded straight into the new type.
    AsIs,
    /// Written before schemas were recorded: decoded straight into the new type.
    Unversioned,
    /// The state is new in this job: it starts empty.
    New,
    /// The shape changed; the new type reads the old values through serde (a field added
    /// with a default, removed, or renamed with an alias).
    MigratesBySerde,
    /// The shape changed; the state's migration function reads the old values.
    MigratesByFunction,
    /// Cannot be restored into the new type; the reason.
    Incompatible(String),
}

impl Decision {
    /// The word `savepoint check` prints for it.
    pub fn label(&self) -> &'static str {
        match self {
            Decision::AsIs => "restorable as is",
            Decision::Unversioned => "restorable (unversioned)",
            Decision::New => "new state (starts empty)",
            Decision::MigratesBySerde => "migrates (serde)",
            Decision::MigratesByFunction => "migrates (migration function)",
            Decision::Incompatible(_) => "incompatible",
        }
    }
}

/// The schema of `T` at `version`: traced once per type per process (a trace costs
/// microseconds, a state is declared once per subtask).
pub fn schema_of<T: Serialize + DeserializeOwned + 'static>(version: u32) -> StateSchema {
    static TRACED: OnceLock<Mutex<HashMap<TypeId, (u32, String)>>> = OnceLock::new();
    let cache = TRACED.get_or_init(Default::default);
    let known = cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&TypeId::of::<T>())
        .cloned();
    let (fingerprint, format) = known.unwrap_or_else(|| {
        let traced = trace::<T>();
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(TypeId::of::<T>(), traced.clone());
        traced
    });
    StateSchema {
        type_name: std::any::type_name::<T>().to_string(),
        version,
        fingerprint,
        format,
    }
}

/// Traces `T`'s shape: its fingerprint and JSON, or `(0, "")` when serde-reflection cannot
/// trace it (a type whose `Deserialize` validates its input, for one): such a state is then
/// compared by type name only and cannot migrate without a migration function.
///
/// Enums nested anywhere in `T` (a struct's `Status` field, an `Option` or `Vec` of an
/// enum, a map's enum values) are traced in full: see [`trace_all_variants`].
fn trace<T: Serialize + DeserializeOwned>() -> (u32, String) {
    // A hand-written `Deserialize` may panic on the tracer's made-up input: untraced then.
    std::panic::catch_unwind(trace_all_variants::<T>)
        .ok()
        .flatten()
        .map_or((0, String::new()), |json| {
            (crc32c::crc32c(json.as_bytes()), json)
        })
}

/// `T`'s `(Format, Registry)` as JSON, with every variant of every enum in it, or `None`
/// when that cannot be found.
///
/// First serde-reflection's `trace_simple_type`, as before nested enums were traced: it
/// finds every variant of `T` itself, and its registry refuses (`MissingVariants`) when an
/// enum nested in `T` is left incomplete. When it succeeds its shape is complete, and it is
/// the shape (and fingerprint) existing checkpoints recorded. When it refuses, the crate's
/// docs ask to trace each nested enum by its Rust type, which a generic `T` does not name:
/// so values of `T` holding every variant of every enum are made instead
/// ([`explore::values_with_every_variant`]) and their serialization is traced, which
/// records each variant by its index and name, with its fields.
fn trace_all_variants<T: Serialize + DeserializeOwned>() -> Option<String> {
    let mut tracer = Tracer::new(TracerConfig::default());
    if let Ok((format, _)) = tracer.trace_simple_type::<T>() {
        if let Ok(registry) = tracer.registry() {
            return serde_json::to_string(&(format, registry)).ok();
        }
    }
    let values = explore::values_with_every_variant::<T>().ok()?;
    let mut tracer = Tracer::new(TracerConfig::default());
    let mut samples = serde_reflection::Samples::new();
    let mut format = Format::unknown();
    for value in &values {
        let (traced, _) = tracer.trace_value(&mut samples, value).ok()?;
        format.unify(traced).ok()?;
    }
    format.normalize().ok()?;
    let registry = tracer.registry().ok()?;
    serde_json::to_string(&(format, registry)).ok()
}

/// Decides how state recorded with schema `old` restores into type `S` (schema `new`),
/// given the schema a declared migration function reads, if any. Values are not looked
/// at: whether serde can read the old shape is checked on a sample value of that shape
/// ([`check_reads`]).
pub(crate) fn decide<S: DeserializeOwned>(
    old: &StateSchema,
    new: &StateSchema,
    migration_from: Option<&StateSchema>,
) -> Decision {
    if old.traced() && new.traced() && old.fingerprint == new.fingerprint {
        return Decision::AsIs;
    }
    if (!old.traced() || !new.traced()) && old.type_name == new.type_name {
        return Decision::AsIs;
    }
    if let Some(from) = migration_from {
        if from.traced() && old.traced() && from.fingerprint == old.fingerprint {
            return Decision::MigratesByFunction;
        }
    }
    if !old.traced() {
        return Decision::Incompatible(format!(
            "the old type {} could not be traced, so its values can only be read by a \
             migration function from exactly that type",
            old.type_name
        ));
    }
    match check_reads::<S>(old) {
        Ok(()) => Decision::MigratesBySerde,
        Err(e) => Decision::Incompatible(format!("serde cannot read the old values: {e}")),
    }
}

/// The message a run refuses with, and `savepoint check` prints, for an incompatible
/// state: the operator, the state, both schemas, and the ways out.
pub fn incompatible_message(
    uid: &str,
    state: &str,
    old: Option<&StateSchema>,
    new: Option<&StateSchema>,
    reason: &str,
) -> String {
    let show = |s: Option<&StateSchema>| s.map_or("(none)".to_string(), |s| s.to_string());
    let first_way = if reason.starts_with(maps::USER_KEY_CHANGED) {
        "keep the map's old user-key type, or pass --allow-non-restored-state to drop this \
         map and start it empty"
    } else {
        "declare a migration function from the old type (KeyedStateStore::with_migration; \
         for a window's accumulators, WindowedStream::with_migration), or pass \
         --allow-non-restored-state to drop this state and start it empty"
    };
    format!(
        "operator '{uid}', state '{state}': cannot restore {} into {}: {reason}. Ways out: \
         {first_way}, or start fresh without --restore",
        show(old),
        show(new)
    )
}

/// The decision for a key type: anything but the same shape is incompatible, because keys
/// place records in key groups (a migrated key could hash to another group).
pub fn decide_key(old: &StateSchema, new: &StateSchema) -> Decision {
    let same = if old.traced() && new.traced() {
        old.fingerprint == new.fingerprint
    } else {
        old.type_name == new.type_name
    };
    if same {
        Decision::AsIs
    } else {
        Decision::Incompatible(
            "the key type changed; keys place records in key groups, so keyed state cannot \
             follow a new key type"
                .into(),
        )
    }
}

/// A state as the job declares it now, with the decision its restore takes.
#[derive(Debug, Clone)]
pub struct DeclaredState {
    /// The state's name.
    pub name: String,
    /// Its kind.
    pub kind: StateKind,
    /// Its stored type's schema now.
    pub schema: StateSchema,
    /// What the restore does with it.
    pub decision: Decision,
}

/// What a job's operator declares, found without running it (its `open` called on a
/// probe backend): the key type's schema and every keyed state with its decision.
#[derive(Debug, Clone)]
pub struct DeclaredOperator {
    /// The key type's schema.
    pub key: Option<StateSchema>,
    /// The states, in declaration order.
    pub states: Vec<DeclaredState>,
}

impl DeclaredOperator {
    /// The record `_metadata` keeps of this operator's states.
    pub fn recorded(&self, uid: &str) -> OperatorSchemas {
        OperatorSchemas {
            uid: uid.to_string(),
            key: self.key.clone(),
            states: self
                .states
                .iter()
                .map(|s| RecordedState {
                    name: s.name.clone(),
                    kind: s.kind,
                    schema: s.schema.clone(),
                })
                .collect(),
        }
    }
}
