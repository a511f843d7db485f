//! Keyed state: values scoped to the current key after `key_by` (DESIGN.md §5).
//!
//! A keyed operator owns one [`KeyedStateBackend`] per subtask. Functions declare their
//! states once, in `open`, through typed descriptors and get back small `Copy` handles
//! ([`ValueState`]); on each record the [`KeyedContext`] resolves a handle to the current
//! key's slot. Tables are plain hash maps keyed by the key itself — no serialization on the
//! hot path; encoding happens only in the asynchronous part of a snapshot.
//!
//! Snapshots are taken per key group: the synchronous part captures an immutable copy of each
//! table; the asynchronous part (on a writer thread) splits the copy by key group and encodes
//! it, so a restore at any parallelism reads exactly the key groups it owns.

use std::any::Any;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use super::cow_map::{CowMap, CowSnapshot};
use super::key_group::{key_group, KeyGroupRange};
use super::{Key, StateKind, StateValue};
use crate::error::{Error, Result};

/// A typed handle to a keyed value state, obtained from [`KeyedStateStore::value_state`].
///
/// It is only an index: cheap to copy, meaningless outside the backend that issued it.
pub struct ValueState<V> {
    index: usize,
    _v: PhantomData<fn() -> V>,
}

impl<V> Clone for ValueState<V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<V> Copy for ValueState<V> {}

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

struct ValueTable<K, V> {
    map: CowMap<K, V>,
}

struct ValueTableSnapshot<K, V> {
    map: CowSnapshot<K, V>,
}

impl<K: Key, V: StateValue> StateTable<K> for ValueTable<K, V> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn kind(&self) -> StateKind {
        StateKind::Value
    }
    fn snapshot(&mut self) -> Box<dyn TableSnapshot> {
        Box::new(ValueTableSnapshot {
            map: self.map.snapshot(),
        })
    }
    fn restore(&mut self, name: &str, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let ((k, v), rest): ((K, V), &[u8]) =
                postcard::take_from_bytes(bytes).map_err(|e| Error::StateDecode {
                    what: format!("keyed value state '{name}'"),
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
}

impl<K: Key, V: StateValue> TableSnapshot for ValueTableSnapshot<K, V> {
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
            postcard::to_extend(
                &(k, v),
                std::mem::take(&mut out[(g - range.start) as usize]),
            )
            .map(|buf| out[(g - range.start) as usize] = buf)
            .map_err(|e| Error::StateDecode {
                what: "keyed value state (encoding)".into(),
                cause: e.to_string(),
            })?;
        }
        Ok(self.map.len() as u64)
    }
}

/// Encoded keyed state restored for this subtask: state name → key-group sections.
pub type RestoredKeyedState = BTreeMap<String, Vec<Vec<u8>>>;

/// The keyed state of one subtask of one keyed operator.
pub struct KeyedStateBackend<K> {
    range: KeyGroupRange,
    max_parallelism: u32,
    names: Vec<String>,
    tables: Vec<Box<dyn StateTable<K>>>,
    restored: RestoredKeyedState,
}

impl<K: Key> KeyedStateBackend<K> {
    /// A backend for key groups `range`, optionally loaded from a restore.
    pub(crate) fn new(
        range: KeyGroupRange,
        max_parallelism: u32,
        restored: RestoredKeyedState,
    ) -> Self {
        KeyedStateBackend {
            range,
            max_parallelism,
            names: Vec::new(),
            tables: Vec::new(),
            restored,
        }
    }

    /// Names of restored states that no descriptor claimed (dropped from later snapshots).
    pub(crate) fn unclaimed(&self) -> Vec<String> {
        self.restored.keys().cloned().collect()
    }

    /// Synchronous phase of a snapshot: an immutable view of every table.
    pub(crate) fn snapshot(&mut self) -> KeyedSnapshot {
        KeyedSnapshot {
            range: self.range,
            max_parallelism: self.max_parallelism,
            tables: self
                .names
                .iter()
                .zip(&mut self.tables)
                .map(|(n, t)| (n.clone(), t.kind(), t.snapshot()))
                .collect(),
        }
    }

    /// Number of entries per state, for inspection and tests.
    pub fn sizes(&self) -> Vec<(String, usize)> {
        self.names
            .iter()
            .zip(&self.tables)
            .map(|(n, t)| (n.clone(), t.len()))
            .collect()
    }

    fn table<V: StateValue>(&self, h: ValueState<V>) -> &CowMap<K, V> {
        &self.tables[h.index]
            .as_any()
            .downcast_ref::<ValueTable<K, V>>()
            .expect("a ValueState handle is only issued for a ValueTable of its type")
            .map
    }

    fn table_mut<V: StateValue>(&mut self, h: ValueState<V>) -> &mut CowMap<K, V> {
        &mut self.tables[h.index]
            .as_any_mut()
            .downcast_mut::<ValueTable<K, V>>()
            .expect("a ValueState handle is only issued for a ValueTable of its type")
            .map
    }
}

/// Immutable view of a backend, produced synchronously at the barrier.
pub struct KeyedSnapshot {
    /// Key groups covered.
    pub range: KeyGroupRange,
    /// The job's max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// `(state name, kind, view)` per declared state.
    pub tables: Vec<(String, StateKind, Box<dyn TableSnapshot>)>,
}

/// Where functions declare their keyed states (handed to `open`).
pub struct KeyedStateStore<'a, K> {
    backend: &'a mut KeyedStateBackend<K>,
}

impl<'a, K: Key> KeyedStateStore<'a, K> {
    pub(crate) fn new(backend: &'a mut KeyedStateBackend<K>) -> Self {
        KeyedStateStore { backend }
    }

    /// Declares (or re-declares after restore) a value state named `name`.
    ///
    /// Restored entries are decoded here, so a type mismatch with the checkpoint surfaces as
    /// an error at start, naming the state. Declaring the same name twice is an error.
    pub fn value_state<V: StateValue>(&mut self, name: &str) -> Result<ValueState<V>> {
        if self.backend.names.iter().any(|n| n == name) {
            return Err(Error::InvalidJob(format!(
                "keyed state '{name}' declared twice in one operator"
            )));
        }
        let mut table = ValueTable::<K, V> {
            map: CowMap::default(),
        };
        if let Some(sections) = self.backend.restored.remove(name) {
            for s in &sections {
                table.restore(name, s)?;
            }
        }
        self.backend.names.push(name.to_string());
        self.backend.tables.push(Box::new(table));
        Ok(ValueState {
            index: self.backend.tables.len() - 1,
            _v: PhantomData,
        })
    }
}

/// Per-record access to keyed state, scoped to the current key.
pub struct KeyedContext<'a, K> {
    pub(crate) key: &'a K,
    pub(crate) backend: &'a mut KeyedStateBackend<K>,
}

impl<K: Key> KeyedContext<'_, K> {
    /// The key of the record being processed.
    pub fn key(&self) -> &K {
        self.key
    }

    /// The current key's value of `state`, if set.
    #[inline]
    pub fn get<V: StateValue>(&self, state: ValueState<V>) -> Option<&V> {
        self.backend.table(state).get(self.key)
    }

    /// Sets the current key's value of `state`.
    #[inline]
    pub fn set<V: StateValue>(&mut self, state: ValueState<V>, value: V) {
        let key = self.key.clone();
        self.backend.table_mut(state).insert(key, value);
    }

    /// Mutable access to the current key's value, inserted with `default` if absent — one
    /// hash lookup for read-modify-write (Flink needs two: `value()` then `update()`).
    /// The key is cloned only when it is inserted.
    #[inline]
    pub fn get_mut_or_insert_with<V: StateValue>(
        &mut self,
        state: ValueState<V>,
        default: impl FnOnce() -> V,
    ) -> &mut V {
        self.backend
            .table_mut(state)
            .get_or_insert_with(self.key, default)
    }

    /// Removes the current key's value of `state`.
    pub fn clear<V: StateValue>(&mut self, state: ValueState<V>) {
        self.backend.table_mut(state).remove(self.key);
    }
}

/// Whole-backend access at end of input, for functions that emit final results.
pub struct KeyedEndContext<'a, K> {
    pub(crate) backend: &'a mut KeyedStateBackend<K>,
}

impl<K: Key> KeyedEndContext<'_, K> {
    /// Every `(key, value)` of `state` on this subtask, in no particular order.
    pub fn entries<V: StateValue>(&self, state: ValueState<V>) -> impl Iterator<Item = (&K, &V)> {
        self.backend.table(state).iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(restored: RestoredKeyedState) -> KeyedStateBackend<u64> {
        KeyedStateBackend::new(KeyGroupRange { start: 0, end: 16 }, 16, restored)
    }

    #[test]
    fn value_state_round_trips_through_a_snapshot() {
        let mut b = backend(BTreeMap::new());
        let count = KeyedStateStore::new(&mut b)
            .value_state::<u64>("count")
            .unwrap();
        for k in 0..100u64 {
            let mut ctx = KeyedContext {
                key: &k,
                backend: &mut b,
            };
            *ctx.get_mut_or_insert_with(count, || 0) += k;
            if k % 10 == 0 {
                ctx.clear(count);
            }
        }
        let snap = b.snapshot();
        let mut groups = vec![Vec::new(); 16];
        let n = snap.tables[0]
            .2
            .encode_groups(16, snap.range, &mut groups)
            .unwrap();
        assert_eq!(n, 90);
        let mut restored = BTreeMap::new();
        restored.insert("count".to_string(), groups);
        let mut b2 = backend(restored);
        let count2 = KeyedStateStore::new(&mut b2)
            .value_state::<u64>("count")
            .unwrap();
        for k in 0..100u64 {
            let ctx = KeyedContext {
                key: &k,
                backend: &mut b2,
            };
            let want = if k % 10 == 0 { None } else { Some(k) };
            assert_eq!(ctx.get(count2).copied(), want);
        }
        assert!(b2.unclaimed().is_empty());
    }

    #[test]
    fn snapshot_is_isolated_from_later_writes() {
        let mut b = backend(BTreeMap::new());
        let s = KeyedStateStore::new(&mut b)
            .value_state::<u64>("s")
            .unwrap();
        let key = 1u64;
        KeyedContext {
            key: &key,
            backend: &mut b,
        }
        .set(s, 1);
        let snap = b.snapshot();
        KeyedContext {
            key: &key,
            backend: &mut b,
        }
        .set(s, 2);
        let mut groups = vec![Vec::new(); 16];
        snap.tables[0]
            .2
            .encode_groups(16, snap.range, &mut groups)
            .unwrap();
        let bytes: Vec<u8> = groups.concat();
        let ((k, v), _): ((u64, u64), _) = postcard::take_from_bytes(&bytes).unwrap();
        assert_eq!((k, v), (1, 1));
    }

    #[test]
    fn wrong_type_on_restore_is_a_clear_error() {
        let mut restored = BTreeMap::new();
        restored.insert("s".to_string(), vec![vec![1u8]]);
        let mut b = backend(restored);
        let err = KeyedStateStore::new(&mut b)
            .value_state::<(u64, String)>("s")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("keyed value state 's'"), "{err}");
        assert!(KeyedStateStore::new(&mut b).value_state::<u64>("t").is_ok());
        assert!(KeyedStateStore::new(&mut b)
            .value_state::<u64>("t")
            .is_err());
    }
}
