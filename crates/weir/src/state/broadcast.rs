//! Broadcast state: maps that are identical on every subtask of an operator, written only
//! by the broadcast input (Flink's `BroadcastState`).
//!
//! Every record of the broadcast input reaches every subtask, and only
//! `process_broadcast_element` may change the maps, so all copies stay equal as long as the
//! function updates them deterministically from the broadcast elements alone. Each subtask
//! snapshots its copy as operator state of kind [`StateKind::Broadcast`]; on restore, at
//! any parallelism, every subtask receives one copy (they are identical).

use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;

use rustc_hash::FxBuildHasher;

use super::operator::{AssignedLists, ListSnapshot, OperatorStateSnapshot};
use super::schema::{decide, decode_elements, schema_of, Decision, DeclaredState, StateSchema};
use super::{Key, StateKind, StateValue};
use crate::error::{Error, Result};

/// The map behind a [`BroadcastState`] handle.
pub type BroadcastMap<UK, UV> = HashMap<UK, UV, FxBuildHasher>;

/// A typed handle to a broadcast map, obtained from [`BroadcastStateStore::map_state`].
pub struct BroadcastState<UK, UV> {
    index: usize,
    _t: PhantomData<fn() -> (UK, UV)>,
}

impl<UK, UV> Clone for BroadcastState<UK, UV> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<UK, UV> Copy for BroadcastState<UK, UV> {}

trait BroadcastTable: Send {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn encode(&self, name: &str) -> Result<Vec<Vec<u8>>>;
    /// The schema of the encoded elements, `(key, value)` pairs.
    fn schema(&self) -> StateSchema;
}

impl<UK: Key, UV: StateValue> BroadcastTable for BroadcastMap<UK, UV> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn encode(&self, name: &str) -> Result<Vec<Vec<u8>>> {
        self.iter()
            .map(|e| {
                postcard::to_stdvec(&e).map_err(|err| Error::StateDecode {
                    what: format!("broadcast state '{name}' (encoding)"),
                    cause: err.to_string(),
                })
            })
            .collect()
    }
    fn schema(&self) -> StateSchema {
        schema_of::<(UK, UV)>(0)
    }
}

/// The broadcast maps of one subtask of one operator.
pub(crate) struct BroadcastStore {
    /// The operator's uid, for messages.
    uid: String,
    names: Vec<String>,
    tables: Vec<Box<dyn BroadcastTable>>,
    restored: AssignedLists,
    /// Each declared map with the decision its restore took, for `savepoint check`.
    declared: Vec<DeclaredState>,
}

impl BroadcastStore {
    /// A store of operator `uid`; `restored` holds the encoded entries of its broadcast
    /// lists.
    pub(crate) fn new(uid: &str, restored: AssignedLists) -> Self {
        BroadcastStore {
            uid: uid.to_string(),
            names: Vec::new(),
            tables: Vec::new(),
            restored,
            declared: Vec::new(),
        }
    }

    /// The maps declared so far, each with the decision its restore took (an
    /// incompatible one is also the error `map_state` returned).
    pub(crate) fn declared(&self) -> &[DeclaredState] {
        &self.declared
    }

    /// Adds every map to `snapshot` as a broadcast list.
    pub(crate) fn snapshot(&self, snapshot: &mut OperatorStateSnapshot) -> Result<()> {
        for (name, table) in self.names.iter().zip(&self.tables) {
            if snapshot.contains_key(name) {
                return Err(Error::InvalidJob(format!(
                    "broadcast state '{name}' has the name of an operator list of the same function; rename one"
                )));
            }
            snapshot.insert(
                name.clone(),
                ListSnapshot {
                    kind: Some(StateKind::Broadcast),
                    elements: table.encode(name)?,
                    schema: Some(table.schema()),
                },
            );
        }
        Ok(())
    }

    fn map<UK: Key, UV: StateValue>(&self, h: BroadcastState<UK, UV>) -> &BroadcastMap<UK, UV> {
        self.tables[h.index]
            .as_any()
            .downcast_ref()
            .expect("a broadcast handle is only issued for a map of its types")
    }

    fn map_mut<UK: Key, UV: StateValue>(
        &mut self,
        h: BroadcastState<UK, UV>,
    ) -> &mut BroadcastMap<UK, UV> {
        self.tables[h.index]
            .as_any_mut()
            .downcast_mut()
            .expect("a broadcast handle is only issued for a map of its types")
    }
}

/// Where a broadcast process function declares its broadcast maps (handed to `open`).
pub struct BroadcastStateStore<'a> {
    pub(crate) store: &'a mut BroadcastStore,
}

impl BroadcastStateStore<'_> {
    /// Declares (or restores) the broadcast map `name`.
    pub fn map_state<UK: Key, UV: StateValue>(
        &mut self,
        name: &str,
    ) -> Result<BroadcastState<UK, UV>> {
        if self.store.names.iter().any(|n| n == name) {
            return Err(Error::InvalidJob(format!(
                "broadcast state '{name}' declared twice in one operator"
            )));
        }
        let mut map = BroadcastMap::<UK, UV>::default();
        let schema = schema_of::<(UK, UV)>(0);
        let restored = self.store.restored.remove(name);
        let decision = match restored
            .as_ref()
            .map(|l| (&l.schema, l.elements.is_empty()))
        {
            None | Some((_, true)) => Decision::New,
            Some((None, false)) => Decision::Unversioned,
            Some((Some(old), false)) => decide::<(UK, UV)>(old, &schema, None),
        };
        self.store.declared.push(DeclaredState {
            name: name.to_string(),
            kind: StateKind::Broadcast,
            schema,
            decision,
        });
        if let Some(list) = restored {
            let what = ("broadcast state", self.store.uid.as_str(), name);
            for (k, v) in decode_elements::<(UK, UV)>(what, list.schema.as_ref(), &list.elements)? {
                map.insert(k, v);
            }
        }
        self.store.names.push(name.to_string());
        self.store.tables.push(Box::new(map));
        Ok(BroadcastState {
            index: self.store.tables.len() - 1,
            _t: PhantomData,
        })
    }
}

/// Read-only access to the broadcast maps, for elements of the main input.
pub struct ReadOnlyBroadcastContext<'a> {
    pub(crate) store: &'a BroadcastStore,
}

impl ReadOnlyBroadcastContext<'_> {
    /// The map behind `state`.
    pub fn get<UK: Key, UV: StateValue>(
        &self,
        state: BroadcastState<UK, UV>,
    ) -> &BroadcastMap<UK, UV> {
        self.store.map(state)
    }
}

/// Read-write access to the broadcast maps, for elements of the broadcast input.
pub struct BroadcastContext<'a> {
    pub(crate) store: &'a mut BroadcastStore,
}

impl BroadcastContext<'_> {
    /// The map behind `state`, to read or change.
    pub fn get_mut<UK: Key, UV: StateValue>(
        &mut self,
        state: BroadcastState<UK, UV>,
    ) -> &mut BroadcastMap<UK, UV> {
        self.store.map_mut(state)
    }
}
