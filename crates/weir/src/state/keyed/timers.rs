//! Processing-time timers of a keyed operator: registered per key and timestamp, fired in
//! timestamp order, and checkpointed with the keyed state.
//!
//! The registrations live in a keyed table (`key → timestamps`), so they are snapshotted,
//! restored and rescaled by key group exactly like any keyed state. An in-memory index
//! (`timestamp → keys`) orders them for firing; it is rebuilt from the table on restore.
//! Invariants: a (key, timestamp) pair is registered at most once; a timer fires at most
//! once per registration — after a restore, a timer that fired after the checkpoint fires
//! again, because its effects were rolled back with the state (exactly-once in state).

use std::collections::BTreeMap;

use super::super::cow_map::CowMap;
use super::super::Key;

/// The name of the table holding timer registrations (reserved: user state names may not
/// start with `__`).
pub(crate) const TIMERS_STATE: &str = "__processing_timers";

/// The firing order of the registered timers.
pub(crate) struct TimerIndex<K> {
    by_time: BTreeMap<u64, Vec<K>>,
}

impl<K: Key> TimerIndex<K> {
    /// An index of every registration in `table`.
    pub(crate) fn rebuild(table: &CowMap<K, Vec<u64>>) -> Self {
        let mut by_time: BTreeMap<u64, Vec<K>> = BTreeMap::new();
        for (k, times) in table.iter() {
            for t in times {
                by_time.entry(*t).or_default().push(k.clone());
            }
        }
        TimerIndex { by_time }
    }

    /// Registers (key, time) unless it already is; returns whether it was new.
    pub(crate) fn register(&mut self, table: &mut CowMap<K, Vec<u64>>, key: &K, time: u64) -> bool {
        let times = table.get_or_insert_with(key, Vec::new);
        if times.contains(&time) {
            return false;
        }
        times.push(time);
        self.by_time.entry(time).or_default().push(key.clone());
        true
    }

    /// Deletes the registration (key, time), if any.
    pub(crate) fn delete(&mut self, table: &mut CowMap<K, Vec<u64>>, key: &K, time: u64) {
        if !table.get(key).is_some_and(|t| t.contains(&time)) {
            return;
        }
        remove_time(table, key, time);
        if let Some(keys) = self.by_time.get_mut(&time) {
            keys.retain(|k| k != key);
            if keys.is_empty() {
                self.by_time.remove(&time);
            }
        }
    }

    /// Removes and returns the earliest timer due at `now`, in timestamp order.
    pub(crate) fn pop_due(
        &mut self,
        table: &mut CowMap<K, Vec<u64>>,
        now: u64,
    ) -> Option<(u64, K)> {
        let mut first = self.by_time.first_entry()?;
        let time = *first.key();
        if time > now {
            return None;
        }
        let key = first.get_mut().pop()?;
        if first.get().is_empty() {
            first.remove();
        }
        remove_time(table, &key, time);
        Some((time, key))
    }

    /// Number of registered timers.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_time.values().map(Vec::len).sum()
    }
}

fn remove_time<K: Key>(table: &mut CowMap<K, Vec<u64>>, key: &K, time: u64) {
    let times = table.get_or_insert_with(key, Vec::new);
    times.retain(|t| *t != time);
    if times.is_empty() {
        table.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_order_once_per_key_and_time() {
        let mut table = CowMap::<u64, Vec<u64>>::default();
        let mut idx = TimerIndex::rebuild(&table);
        assert!(idx.register(&mut table, &1, 30));
        assert!(!idx.register(&mut table, &1, 30), "deduplicated");
        idx.register(&mut table, &2, 10);
        idx.register(&mut table, &3, 20);
        idx.register(&mut table, &3, 40);
        idx.delete(&mut table, &3, 20);
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.pop_due(&mut table, 5), None);
        let mut fired = Vec::new();
        while let Some(t) = idx.pop_due(&mut table, 35) {
            fired.push(t);
        }
        assert_eq!(fired, vec![(10, 2), (30, 1)]);
        // The table keeps exactly the pending registrations (what a snapshot stores).
        assert_eq!(table.len(), 1);
        assert_eq!(table.get(&3), Some(&vec![40]));
        let mut rebuilt = TimerIndex::rebuild(&table);
        assert_eq!(rebuilt.pop_due(&mut table, u64::MAX), Some((40, 3)));
        assert!(table.is_empty());
    }
}
