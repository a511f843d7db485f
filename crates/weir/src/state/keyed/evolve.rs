//! Schema evolution at declaration: each declared state is compared with the schema its
//! restored state was written with ([`crate::state::schema`]), and loaded as is, migrated,
//! or refused. The same code runs on a *probe* backend, which loads nothing and only
//! records what each declaration would do: that is how a run decides every state before
//! any task starts, and how `savepoint check` reports them.

use std::any::Any;
use std::rc::Rc;

use serde::Deserialize;

use super::handles::UserMap;
use super::{KeyedStateBackend, KeyedStateStore, RestoredState};
use crate::error::{Error, Result};
use crate::state::schema::{
    decide, incompatible_message, map_schema, schema_of, serde_decoder, transcode,
    transcode_changes, user_key_change, Decision, DeclaredState, StateSchema, ValueDecoder,
};
use crate::state::{Key, StateKind, StateValue};
use crate::storage::shared_bytes::SharedBytes;

/// A migration function, type-erased until the state it belongs to is declared: it reads
/// values of the old type `Old` and returns the new type `V`, for a state storing `V`, a
/// list of `V`, or a map to `V`.
pub(super) struct MigrationFns<V> {
    one_from: StateSchema,
    many_from: StateSchema,
    one: ValueDecoder<V>,
    many: ValueDecoder<Vec<V>>,
}

/// A migration function for a state storing `S`: the schema it reads, and the decoder.
pub(super) struct Migration<S> {
    from: StateSchema,
    decode: ValueDecoder<S>,
}

impl<K: Key> KeyedStateStore<'_, K> {
    /// Declares the *next* state's version (Flink's serializer snapshot version): recorded
    /// in every checkpoint beside the state's shape and shown by `savepoint check`. The
    /// shape, not the number, decides whether a restore migrates.
    pub fn with_version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Gives the *next* declared state a migration function from `Old`, the type its values
    /// had when the restored checkpoint was taken: a restore whose recorded shape is
    /// `Old`'s reads every old value as `Old` and stores `migrate(old)`. Needed for changes
    /// serde cannot bridge (a field whose type changed, a new field without a default,
    /// values recomputed); fields added with `#[serde(default)]`, removed, or renamed with
    /// `#[serde(alias)]` migrate without one. For a list state, the function maps each
    /// element; for a map state, each value (`V` is the map's value type): its user keys
    /// stay as they are, and a map whose user-key type changed is refused, since user keys
    /// identify its entries.
    pub fn with_migration<Old: StateValue, V: StateValue>(
        &mut self,
        migrate: impl Fn(Old) -> V + 'static,
    ) -> &mut Self {
        self.migration = Some(Box::new(MigrationFns::<V>::new(migrate)));
        self
    }

    /// Sets the pending migration to `fns`, a `MigrationFns` built elsewhere (by a window
    /// operator's `AccEvolution`, which knows the old type), for the next declared state.
    pub(super) fn set_migration(&mut self, fns: Box<dyn Any>) {
        self.migration = Some(fns);
    }

    /// The pending migration function, for a state `name` storing `V` (or a list of `V`
    /// when `list`).
    pub(super) fn take_migration<V: StateValue>(
        &mut self,
        name: &str,
    ) -> Result<Option<MigrationFns<V>>> {
        let Some(pending) = self.migration.take() else {
            return Ok(None);
        };
        match (pending as Box<dyn Any>).downcast::<MigrationFns<V>>() {
            Ok(fns) => Ok(Some(*fns)),
            Err(_) => Err(Error::InvalidJob(format!(
                "the migration function declared for keyed state '{name}' returns another type \
                 than the state stores ({}); make it return that type",
                std::any::type_name::<V>()
            ))),
        }
    }
}

impl<S> Migration<S> {
    /// A migration reading values of recorded shape `from` through `decode`.
    pub(super) fn new(from: StateSchema, decode: ValueDecoder<S>) -> Self {
        Migration { from, decode }
    }
}

impl<V: StateValue> MigrationFns<V> {
    /// The migration function `migrate` from `Old`, for a state of any kind storing `V`.
    pub(super) fn new<Old: StateValue>(migrate: impl Fn(Old) -> V + 'static) -> Self {
        let f = Rc::new(migrate);
        let g = f.clone();
        MigrationFns {
            one_from: schema_of::<Old>(0),
            many_from: schema_of::<Vec<Old>>(0),
            one: Rc::new(move |de| Old::deserialize(de).map(&*f).map_err(|e| e.to_string())),
            many: Rc::new(move |de| {
                Vec::<Old>::deserialize(de)
                    .map(|olds| olds.into_iter().map(&*g).collect())
                    .map_err(|e| e.to_string())
            }),
        }
    }

    /// For a map state from user keys `UK` to `V`: reads the old map entry by entry, each
    /// user key as it is and each value through the function. The shape it reads is the
    /// map from `UK` to `Old`, composed from the two ([`map_schema`]): a restored map whose
    /// user keys had another shape is not one it reads (and is refused before this runs).
    pub(super) fn for_map<UK: Key>(self) -> Migration<UserMap<UK, V>> {
        let one = self.one;
        let decode: ValueDecoder<UserMap<UK, V>> = Rc::new(move |de| {
            let len = usize::deserialize(&mut *de)
                .map_err(|e| format!("reading the length of a map: {e}"))?;
            // The length comes from the checkpoint: reserve at most 1024 entries up front.
            let mut map = UserMap::with_capacity_and_hasher(len.min(1 << 10), Default::default());
            for _ in 0..len {
                let key = UK::deserialize(&mut *de)
                    .map_err(|e| format!("reading a user key of a map: {e}"))?;
                map.insert(key, one(de)?);
            }
            Ok(map)
        });
        Migration {
            from: map_schema(&schema_of::<UK>(0), &self.one_from),
            decode,
        }
    }

    /// For a state storing `V` itself.
    pub(super) fn for_value(self) -> Migration<V> {
        Migration {
            from: self.one_from,
            decode: self.one,
        }
    }

    /// For a state storing a list of `V`.
    pub(super) fn for_list(self) -> Migration<Vec<V>> {
        Migration {
            from: self.many_from,
            decode: self.many,
        }
    }
}

impl<K: Key> KeyedStateBackend<K> {
    /// Makes this backend a probe: declarations are decided and recorded, nothing loads.
    pub(crate) fn probe(mut self) -> Self {
        self.probing = true;
        self
    }

    /// Names the operator in messages.
    pub(crate) fn set_owner(&mut self, uid: &str) {
        self.owner = uid.to_string();
    }

    /// What was declared, with each state's decision (in declaration order).
    pub(crate) fn declared(&self) -> &[DeclaredState] {
        &self.declared
    }

    /// A restored state that cannot be declared as it was written (another kind, TTL
    /// added or removed): an error, or on a probe an incompatible decision.
    pub(super) fn refuse<S: StateValue>(
        &mut self,
        name: &str,
        kind: StateKind,
        version: u32,
        why: String,
    ) -> Result<()> {
        if !self.probing {
            return Err(Error::Restore(why));
        }
        self.declared.push(DeclaredState {
            name: name.to_string(),
            kind,
            schema: schema_of::<S>(version),
            decision: Decision::Incompatible(why),
        });
        Ok(())
    }

    /// Decides how `restored` (state `name`, now storing `S`) loads, records it, and
    /// returns the sections to load and the changes to apply after them (an incremental
    /// checkpoint's deltas): as restored, re-encoded by a migration, or none on a probe. An incompatible state is refused naming the operator, the state, both schemas
    /// and the ways out.
    pub(super) fn evolve<S: StateValue>(
        &mut self,
        name: &str,
        kind: StateKind,
        version: u32,
        ttl: bool,
        restored: Option<RestoredState>,
        migration: Option<Migration<S>>,
    ) -> Result<(Vec<SharedBytes>, Vec<SharedBytes>)> {
        let schema = schema_of::<S>(version);
        let Some(restored) = restored else {
            self.declared.push(DeclaredState {
                name: name.to_string(),
                kind,
                schema,
                decision: Decision::New,
            });
            return Ok(Default::default());
        };
        let decision = match &restored.schema {
            None => Decision::Unversioned,
            // A map's user keys identify its entries: they must keep their shape.
            Some(old) => match user_key_change(old, &schema).filter(|_| kind == StateKind::Map) {
                Some(why) => Decision::Incompatible(why),
                None => decide::<S>(old, &schema, migration.as_ref().map(|m| &m.from)),
            },
        };
        self.declared.push(DeclaredState {
            name: name.to_string(),
            kind,
            schema: schema.clone(),
            decision: decision.clone(),
        });
        if self.probing {
            return Ok(Default::default());
        }
        let old = restored.schema.as_ref();
        let refuse = |why: &str| {
            Error::Restore(incompatible_message(
                &self.owner,
                name,
                old,
                Some(&schema),
                why,
            ))
        };
        let decoder = match decision {
            Decision::AsIs | Decision::Unversioned | Decision::New => {
                return Ok((restored.sections, restored.changes))
            }
            Decision::Incompatible(why) => return Err(refuse(&why)),
            Decision::MigratesBySerde => {
                serde_decoder::<S>(old.expect("decided from a schema")).map_err(|e| refuse(&e))?
            }
            Decision::MigratesByFunction => migration.expect("decided from a migration").decode,
        };
        let sections =
            transcode::<K, S>(&restored.sections, ttl, &decoder).map_err(|e| refuse(&e))?;
        let changes =
            transcode_changes::<K, S>(&restored.changes, ttl, &decoder).map_err(|e| refuse(&e))?;
        Ok((sections, changes))
    }
}

#[cfg(test)]
mod tests;
