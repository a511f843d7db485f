//! One state's entries as inspection hands them out: still encoded ([`RawState`]), and
//! decoded by a caller that knows the job's types ([`RawState::keyed_entries`],
//! [`RawState::list_elements`]).

use std::path::PathBuf;

use std::collections::HashMap;

use serde::de::DeserializeOwned;

use super::{InspectError, Result, StateScope};
use crate::state::keyed::entries::Entries;
use crate::state::StateKind;

/// One state's entries, still encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawState {
    /// The checkpoint folder.
    pub checkpoint: PathBuf,
    /// The checkpoint id.
    pub checkpoint_id: u64,
    /// The job's name, so a tool can pick a decoder for the state's types.
    pub job_name: String,
    /// The operator's uid.
    pub uid: String,
    /// The state's name.
    pub name: String,
    /// Keyed or operator state (decides the shape of [`RawState::entries`]).
    pub scope: StateScope,
    /// Its kind.
    pub kind: StateKind,
    /// The encoded entries.
    pub entries: RawEntries,
}

/// A state's encoded entries, in the shape their scope stores them in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawEntries {
    /// Keyed state: one blob per non-empty key group, ascending by group. A blob is a
    /// concatenation of postcard-encoded `(key, value)` pairs with no framing, so it can
    /// only be split by decoding it with the right types. In an incremental checkpoint a
    /// group also carries the changes of the chain's deltas ([`RawKeyGroup::changes`]),
    /// which [`RawState::keyed_entries`] applies.
    Keyed(Vec<RawKeyGroup>),
    /// Operator state: each subtask's elements, ascending by subtask; each element is
    /// encoded separately.
    Operator(Vec<RawList>),
}

/// One key group's entries of a keyed state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawKeyGroup {
    /// The subtask that wrote it.
    pub subtask: u32,
    /// The key group.
    pub key_group: u32,
    /// The concatenated encoded `(key, value)` pairs of a full snapshot or of an
    /// incremental chain's base (empty if the group only appears in the deltas).
    pub bytes: Vec<u8>,
    /// An incremental chain's deltas for this group, oldest first, each a concatenation
    /// of encoded `(key, Option<value>)` changes (`None` removed the key); empty for a
    /// full snapshot. Kept apart because merging them needs the key's type.
    pub changes: Vec<Vec<u8>>,
}

/// One subtask's elements of an operator list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawList {
    /// The subtask that wrote them.
    pub subtask: u32,
    /// The encoded elements, in list order.
    pub elements: Vec<Vec<u8>>,
}

/// A decoded keyed entry, with where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedEntry<K, V> {
    /// The subtask that wrote it.
    pub subtask: u32,
    /// Its key group.
    pub key_group: u32,
    /// The key.
    pub key: K,
    /// The stored value.
    pub value: V,
}

/// A decoded operator-list element, with where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListElement<T> {
    /// The subtask that wrote it.
    pub subtask: u32,
    /// Its position in that subtask's list.
    pub index: usize,
    /// The element.
    pub value: T,
}

impl RawState {
    /// The number of entries this state holds, if it can be known without its types:
    /// always for operator lists, never for keyed state (see [`RawEntries::Keyed`]).
    pub fn element_count(&self) -> Option<u64> {
        match &self.entries {
            RawEntries::Keyed(_) => None,
            RawEntries::Operator(lists) => {
                Some(lists.iter().map(|l| l.elements.len() as u64).sum())
            }
        }
    }

    /// Decodes keyed entries as `(K, V)` pairs, in key-group order. Fails (never panics) if
    /// this is operator state or the bytes are not exactly a sequence of such pairs, so a
    /// wrong guess of the types is reported instead of printing garbage.
    pub fn keyed_entries<K: DeserializeOwned, V: DeserializeOwned>(
        &self,
    ) -> Result<Vec<KeyedEntry<K, V>>> {
        let groups = match &self.entries {
            RawEntries::Keyed(groups) => groups,
            RawEntries::Operator(_) => {
                return Err(self.wrong_type::<(K, V)>("it is operator state, not keyed state"))
            }
        };
        let mut out = Vec::new();
        for g in groups {
            if g.changes.is_empty() {
                self.decode_group(g, &g.bytes, false, |key, _, value: Option<V>| {
                    out.extend(value.map(|value| KeyedEntry {
                        subtask: g.subtask,
                        key_group: g.key_group,
                        key,
                        value,
                    }))
                })?;
                continue;
            }
            // A chain: the base's entries changed by each delta, keys compared by their
            // encoding (postcard's is canonical), base order kept and new keys appended.
            let mut merged: Vec<Option<(K, V)>> = Vec::new();
            let mut at: HashMap<Vec<u8>, usize> = HashMap::new();
            let mut apply = |key: K, encoded: &[u8], value: Option<V>| match at.get(encoded) {
                Some(&i) => merged[i] = value.map(|v| (key, v)),
                None => {
                    if let Some(v) = value {
                        at.insert(encoded.to_vec(), merged.len());
                        merged.push(Some((key, v)));
                    }
                }
            };
            self.decode_group(g, &g.bytes, false, &mut apply)?;
            for delta in &g.changes {
                self.decode_group(g, delta, true, &mut apply)?;
            }
            out.extend(merged.into_iter().flatten().map(|(key, value)| KeyedEntry {
                subtask: g.subtask,
                key_group: g.key_group,
                key,
                value,
            }));
        }
        Ok(out)
    }

    /// Decodes the entries of one blob of group `g` (`(key, value)` pairs, or with
    /// `changes` `(key, Option<value>)`), handing each to `each` with its key's encoding.
    fn decode_group<K: DeserializeOwned, V: DeserializeOwned>(
        &self,
        g: &RawKeyGroup,
        blob: &[u8],
        changes: bool,
        mut each: impl FnMut(K, &[u8], Option<V>),
    ) -> Result<()> {
        let entries = if changes {
            Entries::<K, V>::delta(blob)
        } else {
            Entries::<K, V>::full(blob)
        };
        for entry in entries {
            let entry = entry.map_err(|e| {
                let what = if changes { "a delta of " } else { "" };
                self.wrong_type::<(K, V)>(&format!(
                    "{what}key group {} of subtask {}, byte {}: {}",
                    g.key_group, g.subtask, e.at, e.cause
                ))
            })?;
            each(entry.key, entry.key_bytes, entry.value.map(|(v, _)| v));
        }
        Ok(())
    }

    /// Decodes operator-list elements as `T`, in subtask then list order. Fails (never
    /// panics) if this is keyed state, or an element does not decode as `T` using all of
    /// its bytes.
    pub fn list_elements<T: DeserializeOwned>(&self) -> Result<Vec<ListElement<T>>> {
        let lists = match &self.entries {
            RawEntries::Operator(lists) => lists,
            RawEntries::Keyed(_) => {
                return Err(self.wrong_type::<T>("it is keyed state, not an operator list"))
            }
        };
        let mut out = Vec::new();
        for list in lists {
            for (index, bytes) in list.elements.iter().enumerate() {
                let at = || format!("element {index} of subtask {}", list.subtask);
                let (value, rest): (T, &[u8]) = postcard::take_from_bytes(bytes)
                    .map_err(|e| self.wrong_type::<T>(&format!("{}: {e}", at())))?;
                if !rest.is_empty() {
                    return Err(self.wrong_type::<T>(&format!(
                        "{}: {} bytes left over after the value",
                        at(),
                        rest.len()
                    )));
                }
                out.push(ListElement {
                    subtask: list.subtask,
                    index,
                    value,
                });
            }
        }
        Ok(out)
    }

    fn wrong_type<T>(&self, cause: &str) -> InspectError {
        InspectError::WrongType {
            uid: self.uid.clone(),
            state: self.name.clone(),
            as_type: std::any::type_name::<T>().to_string(),
            cause: cause.to_string(),
        }
    }
}
