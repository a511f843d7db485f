//! The typed handles functions get for their keyed states, and the per-key access each
//! kind offers.
//!
//! A handle is an index into the operator's backend plus, for reducing and aggregating
//! state, the user function that folds values in. Handles are meaningless outside the
//! backend that issued them.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use rustc_hash::FxBuildHasher;

use super::super::cow_map::CowMap;
use super::super::{Key, StateValue};

/// The map stored per key by a [`MapState`].
pub(crate) type UserMap<UK, UV> = HashMap<UK, UV, FxBuildHasher>;

/// What every keyed-state handle has: the index of its table.
pub trait StateHandle {
    /// The table's index in its backend.
    fn index(&self) -> usize;
}

macro_rules! index_handle {
    ($(#[$doc:meta])* $name:ident<$($p:ident),+>) => {
        $(#[$doc])*
        pub struct $name<$($p),+> {
            index: usize,
            _t: PhantomData<fn() -> ($($p,)+)>,
        }

        impl<$($p),+> $name<$($p),+> {
            pub(crate) fn new(index: usize) -> Self {
                $name { index, _t: PhantomData }
            }
        }

        impl<$($p),+> Clone for $name<$($p),+> {
            fn clone(&self) -> Self {
                *self
            }
        }

        impl<$($p),+> Copy for $name<$($p),+> {}

        impl<$($p),+> StateHandle for $name<$($p),+> {
            fn index(&self) -> usize {
                self.index
            }
        }
    };
}

index_handle!(
    /// A value per key: `ctx.get` / `ctx.set` / `ctx.clear`.
    ValueState<V>
);
index_handle!(
    /// A list per key: `ctx.list(&state)`.
    ListState<V>
);
index_handle!(
    /// A map per key: `ctx.map(&state)`.
    MapState<UK, UV>
);

/// A value per key that `add` folds new values into with the declared reduce function.
pub struct ReducingState<V> {
    index: usize,
    reduce: Arc<dyn Fn(V, V) -> V + Send + Sync>,
}

impl<V> ReducingState<V> {
    pub(crate) fn new(index: usize, reduce: impl Fn(V, V) -> V + Send + Sync + 'static) -> Self {
        ReducingState {
            index,
            reduce: Arc::new(reduce),
        }
    }
}

impl<V> Clone for ReducingState<V> {
    fn clone(&self) -> Self {
        ReducingState {
            index: self.index,
            reduce: self.reduce.clone(),
        }
    }
}

impl<V> StateHandle for ReducingState<V> {
    fn index(&self) -> usize {
        self.index
    }
}

/// Folds inputs of type `IN` into an accumulator `ACC` and reads results of type `OUT`
/// (Flink's `AggregateFunction`). An average, for example: `IN = u64`,
/// `ACC = (sum, count)`, `OUT = f64`.
pub trait AggregateFunction<IN, ACC, OUT>: Send + Sync {
    /// A fresh accumulator for a key that has none.
    fn create_accumulator(&self) -> ACC;
    /// Adds `value` to `acc`.
    fn add(&self, value: IN, acc: &mut ACC);
    /// The result for `acc`.
    fn get_result(&self, acc: &ACC) -> OUT;
    /// Merges two accumulators into one (Flink's `AggregateFunction.merge`): session
    /// windows need it when a record joins two sessions into one. `None`, the default,
    /// means the aggregate cannot merge; a session window then fails with an error saying
    /// so.
    fn merge(&self, a: ACC, b: ACC) -> Option<ACC> {
        let _ = (a, b);
        None
    }
}

/// An accumulator per key, fed by `add` through the declared aggregate function.
pub struct AggregatingState<IN, ACC, OUT> {
    index: usize,
    aggregate: Arc<dyn AggregateFunction<IN, ACC, OUT>>,
}

impl<IN, ACC, OUT> AggregatingState<IN, ACC, OUT> {
    pub(crate) fn new(
        index: usize,
        aggregate: impl AggregateFunction<IN, ACC, OUT> + 'static,
    ) -> Self {
        AggregatingState {
            index,
            aggregate: Arc::new(aggregate),
        }
    }
}

impl<IN, ACC, OUT> Clone for AggregatingState<IN, ACC, OUT> {
    fn clone(&self) -> Self {
        AggregatingState {
            index: self.index,
            aggregate: self.aggregate.clone(),
        }
    }
}

impl<IN, ACC, OUT> StateHandle for AggregatingState<IN, ACC, OUT> {
    fn index(&self) -> usize {
        self.index
    }
}

/// The current key's list (see [`ListState`]).
pub struct ListAccess<'a, K, V> {
    key: &'a K,
    map: &'a mut CowMap<K, Vec<V>>,
}

impl<'a, K: Key, V: StateValue> ListAccess<'a, K, V> {
    pub(crate) fn new(key: &'a K, map: &'a mut CowMap<K, Vec<V>>) -> Self {
        ListAccess { key, map }
    }

    /// The list (empty if the key has none).
    pub fn get(&self) -> &[V] {
        self.map.get(self.key).map_or(&[], |v| v.as_slice())
    }

    /// Appends one value.
    pub fn add(&mut self, value: V) {
        self.map.get_or_insert_with(self.key, Vec::new).push(value);
    }

    /// Appends every value of `values`.
    pub fn add_all(&mut self, values: impl IntoIterator<Item = V>) {
        let mut values = values.into_iter().peekable();
        if values.peek().is_some() {
            self.map
                .get_or_insert_with(self.key, Vec::new)
                .extend(values);
        }
    }

    /// Replaces the list; an empty list clears the key's state.
    pub fn update(&mut self, values: Vec<V>) {
        if values.is_empty() {
            self.clear();
        } else {
            self.map.insert(self.key.clone(), values);
        }
    }

    /// Removes the key's list.
    pub fn clear(&mut self) {
        self.map.remove(self.key);
    }
}

/// The current key's map (see [`MapState`]).
pub struct MapAccess<'a, K, UK, UV> {
    key: &'a K,
    map: &'a mut CowMap<K, UserMap<UK, UV>>,
}

impl<'a, K: Key, UK: Key, UV: StateValue> MapAccess<'a, K, UK, UV> {
    pub(crate) fn new(key: &'a K, map: &'a mut CowMap<K, UserMap<UK, UV>>) -> Self {
        MapAccess { key, map }
    }

    fn inner(&self) -> Option<&UserMap<UK, UV>> {
        self.map.get(self.key)
    }

    /// The value under `user_key`.
    pub fn get(&self, user_key: &UK) -> Option<&UV> {
        self.inner()?.get(user_key)
    }

    /// Whether `user_key` is present.
    pub fn contains(&self, user_key: &UK) -> bool {
        self.get(user_key).is_some()
    }

    /// Sets `user_key` to `value`, returning the previous value.
    pub fn put(&mut self, user_key: UK, value: UV) -> Option<UV> {
        self.map
            .get_or_insert_with(self.key, UserMap::default)
            .insert(user_key, value)
    }

    /// Mutable access to the value under `user_key`, inserted with `default` if absent —
    /// one lookup for read-modify-write (window accumulators). Consumes the accessor, so the
    /// reference lives as long as the context borrow.
    pub fn get_mut_or_insert_with(self, user_key: UK, default: impl FnOnce() -> UV) -> &'a mut UV {
        self.map
            .get_or_insert_with(self.key, UserMap::default)
            .entry(user_key)
            .or_insert_with(default)
    }

    /// Removes `user_key`; the key's state disappears with its last entry.
    pub fn remove(&mut self, user_key: &UK) -> Option<UV> {
        self.inner()?.get(user_key)?;
        let inner = self.map.get_or_insert_with(self.key, UserMap::default);
        let old = inner.remove(user_key);
        if inner.is_empty() {
            self.map.remove(self.key);
        }
        old
    }

    /// Whether the key's map is empty.
    pub fn is_empty(&self) -> bool {
        self.inner().is_none_or(|m| m.is_empty())
    }

    /// The user keys, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &UK> {
        self.inner().into_iter().flat_map(|m| m.keys())
    }

    /// The values, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &UV> {
        self.inner().into_iter().flat_map(|m| m.values())
    }

    /// The entries, in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = (&UK, &UV)> {
        self.inner().into_iter().flat_map(|m| m.iter())
    }

    /// Removes the key's whole map.
    pub fn clear(&mut self) {
        self.map.remove(self.key);
    }
}

/// The current key's reduced value (see [`ReducingState`]).
pub struct ReducingAccess<'a, K, V> {
    key: &'a K,
    map: &'a mut CowMap<K, V>,
    state: &'a ReducingState<V>,
}

impl<'a, K: Key, V: StateValue> ReducingAccess<'a, K, V> {
    pub(crate) fn new(key: &'a K, map: &'a mut CowMap<K, V>, state: &'a ReducingState<V>) -> Self {
        ReducingAccess { key, map, state }
    }

    /// The reduced value, if anything was added.
    pub fn get(&self) -> Option<&V> {
        self.map.get(self.key)
    }

    /// Folds `value` in: the first value is stored as is, later ones are reduced into it.
    pub fn add(&mut self, value: V) {
        let next = match self.map.get(self.key) {
            Some(acc) => (self.state.reduce)(acc.clone(), value),
            None => value,
        };
        self.map.insert(self.key.clone(), next);
    }

    /// Removes the key's value.
    pub fn clear(&mut self) {
        self.map.remove(self.key);
    }
}

/// The current key's accumulator (see [`AggregatingState`]).
pub struct AggregatingAccess<'a, K, IN, ACC, OUT> {
    key: &'a K,
    map: &'a mut CowMap<K, ACC>,
    state: &'a AggregatingState<IN, ACC, OUT>,
}

impl<'a, K: Key, IN, ACC: StateValue, OUT> AggregatingAccess<'a, K, IN, ACC, OUT> {
    pub(crate) fn new(
        key: &'a K,
        map: &'a mut CowMap<K, ACC>,
        state: &'a AggregatingState<IN, ACC, OUT>,
    ) -> Self {
        AggregatingAccess { key, map, state }
    }

    /// The result for the key's accumulator, if anything was added.
    pub fn get(&self) -> Option<OUT> {
        self.map
            .get(self.key)
            .map(|acc| self.state.aggregate.get_result(acc))
    }

    /// Adds `value` to the key's accumulator (created on first use).
    pub fn add(&mut self, value: IN) {
        let agg = &self.state.aggregate;
        let acc = self
            .map
            .get_or_insert_with(self.key, || agg.create_accumulator());
        agg.add(value, acc);
    }

    /// Removes the key's accumulator.
    pub fn clear(&mut self) {
        self.map.remove(self.key);
    }
}
