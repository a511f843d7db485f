//! Operator and broadcast state elements read into the type the job declares now: the
//! same decision as keyed state's ([`decide`]), made when the function reads its list in
//! `initialize_state` (or declares its broadcast map in `open`). The engine calls those
//! while it builds an attempt's chains, before it starts any task thread, so a refusal
//! still comes before any record.
//!
//! Keyed and broadcast state are also decided before the attempt is built, through a
//! probe of the function's `open` (`runtime::schema_check`), which is what `savepoint
//! check` shows. Operator list state cannot be probed that way: `initialize_state` may
//! connect to external systems (sources do) or commit restored transactions
//! (two-phase-commit sinks), so it is never called on a probe. Instead a function names
//! its lists and their element types ahead
//! ([`CheckpointedFunction::operator_state`](crate::api::functions::CheckpointedFunction::operator_state),
//! a list of [`OperatorListDeclaration`]s): those lists are decided from the declaration
//! with the same decision and message as [`decode_elements`], by `savepoint check` and
//! by a run before any task starts. A list its function does not declare is still
//! decided when `initialize_state` reads it (`savepoint check`: "decided at start (not
//! declared)").

use serde::de::DeserializeOwned;

use super::{decide, schema_of, serde_decoder, Decision, StateSchema};
use crate::error::{Error, Result};
use crate::state::StateValue;

/// One operator (list) state a function reads in `initialize_state`, named ahead with its
/// element type, so that `savepoint check` and a run decide it before anything runs
/// (issue 26) without calling `initialize_state`, which may reach external systems.
#[derive(Debug, Clone)]
pub struct OperatorListDeclaration {
    name: String,
    schema: StateSchema,
    decide: fn(&StateSchema, &StateSchema) -> Decision,
}

impl OperatorListDeclaration {
    /// List `name` (as passed to `InitContext::list` and `SnapshotContext::set_operator_list`
    /// or `set_union_list`) whose elements are `T`s.
    pub fn of<T: StateValue>(name: &str) -> Self {
        OperatorListDeclaration {
            name: name.to_string(),
            schema: schema_of::<T>(0),
            decide: decide_list::<T>,
        }
    }

    /// The list's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schema of the declared element type.
    pub fn schema(&self) -> &StateSchema {
        &self.schema
    }

    /// What reading elements written with `old` into the declared type does: the
    /// decision [`decode_elements`] takes for a list that has elements.
    pub(crate) fn decide(&self, old: &StateSchema) -> Decision {
        (self.decide)(old, &self.schema)
    }
}

fn decide_list<T: DeserializeOwned>(old: &StateSchema, new: &StateSchema) -> Decision {
    decide::<T>(old, new, None)
}

/// The refusal of a list `name` of operator `uid` whose elements (schema `old`) cannot be
/// read into the type the job declares now (`new`): the run's error and `savepoint
/// check`'s row say the same. `kind` is "operator state" or "broadcast state".
pub(crate) fn list_refusal(
    kind: &str,
    uid: &str,
    name: &str,
    old: &StateSchema,
    new: &StateSchema,
    why: &str,
) -> String {
    format!(
        "operator '{uid}', {kind} '{name}': cannot restore {old} into {new}: {why}. Ways \
         out: read the elements as the old type and convert them yourself (the state's \
         schema is in `weir savepoint check`), or give the operator a new uid and pass \
         --allow-non-restored-state, or start fresh without --restore"
    )
}

/// Decodes `raw` (elements written with schema `old`, `None` when written before schemas
/// existed) into `T`. `what` is `(kind of state, operator uid, state name)`, for messages.
pub(crate) fn decode_elements<T: StateValue>(
    what: (&str, &str, &str),
    old: Option<&StateSchema>,
    raw: &[Vec<u8>],
) -> Result<Vec<T>> {
    let (kind, uid, name) = what;
    let undecodable = |cause: String| Error::StateDecode {
        what: format!("{kind} '{name}' of operator '{uid}'"),
        cause,
    };
    let straight = || -> Result<Vec<T>> {
        raw.iter()
            .map(|b| postcard::from_bytes(b).map_err(|e| undecodable(e.to_string())))
            .collect()
    };
    let Some(old) = old else {
        return straight();
    };
    if raw.is_empty() {
        return Ok(Vec::new()); // nothing to read, whatever the type
    }
    let new = schema_of::<T>(0);
    match decide::<T>(old, &new, None) {
        Decision::AsIs | Decision::Unversioned | Decision::New => straight(),
        Decision::MigratesBySerde | Decision::MigratesByFunction => {
            let decode = serde_decoder::<T>(old).map_err(undecodable)?;
            raw.iter()
                .map(|b| {
                    let mut de = postcard::Deserializer::from_bytes(b);
                    decode(&mut de).map_err(undecodable)
                })
                .collect()
        }
        Decision::Incompatible(why) => Err(Error::Restore(list_refusal(
            kind, uid, name, old, &new, &why,
        ))),
    }
}
