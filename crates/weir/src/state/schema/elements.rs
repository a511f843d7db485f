//! Operator and broadcast state elements read into the type the job declares now: the
//! same decision as keyed state's ([`decide`]), made when the function reads its list in
//! `initialize_state` (or declares its broadcast map in `open`). The engine calls those
//! while it builds an attempt's chains, before it starts any task thread, so a refusal
//! still comes before any record.
//!
//! Keyed and broadcast state are also decided before the attempt is built, through a
//! probe of the function's `open` (`runtime::schema_check`), which is what `savepoint
//! check` shows. Operator list state cannot be:
//! `initialize_state` may connect to external systems (sources do) or commit restored
//! transactions (two-phase-commit sinks), so it is not called on a probe. `savepoint
//! check` lists these states with their recorded schema instead.

use super::{decide, schema_of, serde_decoder, Decision, StateSchema};
use crate::error::{Error, Result};
use crate::state::StateValue;

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
        Decision::Incompatible(why) => Err(Error::Restore(format!(
            "operator '{uid}', {kind} '{name}': cannot restore {old} into {new}: {why}. Ways \
             out: read the elements as the old type and convert them yourself (the state's \
             schema is in `weir savepoint check`), or give the operator a new uid and pass \
             --allow-non-restored-state, or start fresh without --restore"
        ))),
    }
}
