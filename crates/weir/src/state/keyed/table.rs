//! The type-erased table behind every keyed state kind, and its snapshot.
//!
//! Every kind stores one value per key — the value itself, a list, an accumulator, a map —
//! so one generic [`Table`] over a copy-on-write map serves them all; the kind decides only
//! how functions reach the stored value (see `handles`).

use std::any::Any;

use super::super::cow_map::{CowMap, CowSnapshot};
use super::super::key_group::{key_group, KeyGroupRange};
use super::super::{Key, StateKind, StateValue};
use crate::error::{Error, Result};

/// One state table, type-erased so a backend can hold states of different value types.
pub(crate) trait StateTable<K>: Send {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn kind(&self) -> StateKind;
    /// Synchronous phase: an immutable view that the asynchronous phase may encode.
    fn snapshot(&mut self) -> Box<dyn TableSnapshot>;
    /// Loads encoded entries (one key group's section) into the table.
    fn restore(&mut self, name: &str, bytes: &[u8]) -> Result<()>;
    fn len(&self) -> usize;
    /// Every key that has state in this table (for `apply_to_all_keys`).
    fn keys(&self) -> Vec<K>;
}

/// An immutable view of one table, encoded per key group off the processing thread.
pub trait TableSnapshot: Send {
    /// Appends the entries of each key group in `range` to `out[group - range.start]`,
    /// returning the number of entries written.
    fn encode_groups(
        &self,
        max_parallelism: u32,
        range: KeyGroupRange,
        out: &mut [Vec<u8>],
    ) -> Result<u64>;
}

/// The stored value `S` of every key, for a state of kind `kind`.
pub(crate) struct Table<K, S> {
    pub map: CowMap<K, S>,
    pub kind: StateKind,
}

struct TableView<K, S> {
    map: CowSnapshot<K, S>,
}

impl<K: Key, S: StateValue> StateTable<K> for Table<K, S> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn kind(&self) -> StateKind {
        self.kind
    }
    fn snapshot(&mut self) -> Box<dyn TableSnapshot> {
        Box::new(TableView {
            map: self.map.snapshot(),
        })
    }
    fn restore(&mut self, name: &str, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let ((k, v), rest): ((K, S), &[u8]) =
                postcard::take_from_bytes(bytes).map_err(|e| Error::StateDecode {
                    what: format!("keyed {} state '{name}'", self.kind.name()),
                    cause: e.to_string(),
                })?;
            self.map.insert(k, v);
            bytes = rest;
        }
        Ok(())
    }
    fn len(&self) -> usize {
        self.map.len()
    }
    fn keys(&self) -> Vec<K> {
        self.map.iter().map(|(k, _)| k.clone()).collect()
    }
}

impl<K: Key, S: StateValue> TableSnapshot for TableView<K, S> {
    fn encode_groups(
        &self,
        max_parallelism: u32,
        range: KeyGroupRange,
        out: &mut [Vec<u8>],
    ) -> Result<u64> {
        for (k, v) in self.map.iter() {
            let g = key_group(k, max_parallelism);
            if !range.contains(g) {
                return Err(Error::InvalidJob(format!(
                    "a key in keyed state belongs to key group {g}, outside this subtask's range {}..{}; \
                     is the key_by function deterministic?",
                    range.start, range.end
                )));
            }
            let slot = &mut out[(g - range.start) as usize];
            *slot = postcard::to_extend(&(k, v), std::mem::take(slot)).map_err(|e| {
                Error::StateDecode {
                    what: "keyed state (encoding)".into(),
                    cause: e.to_string(),
                }
            })?;
        }
        Ok(self.map.len() as u64)
    }
}
