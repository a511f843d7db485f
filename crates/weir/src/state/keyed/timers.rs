//! Timers of a keyed operator, in two time domains (Flink's `TimeDomain`): processing-time
//! timers fire when the wall clock reaches them, event-time timers when the watermark does.
//! Both are registered per key and timestamp, fired in timestamp order, and checkpointed
//! with the keyed state.
//!
//! The registrations of each domain live in a keyed table (`key → timestamps`), so they
//! are snapshotted, restored and rescaled by key group exactly like any keyed state. An in-memory index
//! (`timestamp → keys`) orders them for firing; it is rebuilt from the table on restore.
//! Invariants: a (key, timestamp) pair is registered at most once; a timer fires at most
//! once per registration — after a restore, a timer that fired after the checkpoint fires
//! again, because its effects were rolled back with the state (exactly-once in state).

use std::collections::BTreeMap;

use super::super::{Key, StateKind};
use super::disk::DiskTimerOrder;
use super::table::Table;
use super::{KeyedContext, KeyedStateBackend};
use crate::error::Result;

/// The name of the table holding processing-time timer registrations (reserved: user state
/// names may not start with `__`).
pub(crate) const TIMERS_STATE: &str = "__processing_timers";

/// The name of the table holding event-time timer registrations.
pub(crate) const EVENT_TIMERS_STATE: &str = "__event_timers";

/// Which clock a timer follows (Flink's `TimeDomain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeDomain {
    /// The wall clock of the machine: fires when the processing time reaches the timer.
    ProcessingTime,
    /// The watermark: fires when the watermark reaches the timer (its time is `<=` the
    /// watermark), so every record up to that time has been seen.
    EventTime,
}

/// What a keyed function's context reports about time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TimeContext {
    /// The event timestamp of the record being processed, or of the firing event-time
    /// timer; `None` for records without one and for processing-time timers.
    pub timestamp: Option<u64>,
    /// The operator's current watermark.
    pub watermark: u64,
    /// The domain of the timer firing, `None` while processing a record.
    pub domain: Option<TimeDomain>,
}

impl<K: Key> KeyedStateBackend<K> {
    /// Declares both timer tables (restoring registrations) and indexes them. Called once,
    /// before the function's `open`.
    pub(crate) fn init_timers(&mut self) -> Result<()> {
        let index = self.declare::<Vec<u64>>(TIMERS_STATE, StateKind::ProcessingTimers)?;
        self.timers = Some((index, self.timer_index(index, TIMERS_STATE)?));
        let index = self.declare::<Vec<u64>>(EVENT_TIMERS_STATE, StateKind::EventTimers)?;
        self.event_timers = Some((index, self.timer_index(index, EVENT_TIMERS_STATE)?));
        Ok(())
    }

    /// The firing order of the timers table at `index` (on disk if the backend is).
    fn timer_index(&mut self, index: usize, name: &str) -> Result<TimerIndex<K>> {
        let order = match &self.disk {
            Some(store) => Some(store.timer_order::<K>(name)?),
            None => None,
        };
        TimerIndex::rebuild(self.table_mut::<Vec<u64>>(index), order)
    }

    /// Removes and returns the earliest processing-time timer due at `now_ms`.
    pub(crate) fn pop_due_timer(&mut self, now_ms: u64) -> Option<(u64, K)> {
        self.pop_due(TimeDomain::ProcessingTime, now_ms)
    }

    /// Removes and returns the earliest event-time timer at or below `watermark`.
    pub(crate) fn pop_due_event_timer(&mut self, watermark: u64) -> Option<(u64, K)> {
        self.pop_due(TimeDomain::EventTime, watermark)
    }

    fn pop_due(&mut self, domain: TimeDomain, now: u64) -> Option<(u64, K)> {
        let mut due = None;
        self.with_timers(domain, |order, table| due = order.pop_due(table, now));
        due
    }

    fn timers_of(&mut self, domain: TimeDomain) -> &mut Option<(usize, TimerIndex<K>)> {
        match domain {
            TimeDomain::ProcessingTime => &mut self.timers,
            TimeDomain::EventTime => &mut self.event_timers,
        }
    }

    fn with_timers(
        &mut self,
        domain: TimeDomain,
        f: impl FnOnce(&mut TimerIndex<K>, &mut Table<K, Vec<u64>>),
    ) {
        if let Some((index, mut order)) = self.timers_of(domain).take() {
            f(&mut order, self.table_mut::<Vec<u64>>(index));
            *self.timers_of(domain) = Some((index, order));
        }
    }
}

/// Time and timers, scoped to the current key (Flink's `TimerService` and the context's
/// `timestamp()`).
impl<K: Key> KeyedContext<'_, K> {
    /// The current processing time (milliseconds since the Unix epoch): the clock that
    /// processing-time timers follow.
    pub fn current_processing_time(&self) -> u64 {
        crate::clock::wall_ms()
    }

    /// The operator's current watermark (milliseconds since the Unix epoch), `None` before
    /// the first one arrived (Flink's `Long.MIN_VALUE`): no record at or below it is still
    /// to come, unless late, and event-time timers at or below it have fired. A record is
    /// late when `ctx.current_watermark().is_some_and(|w| timestamp <= w)`.
    pub fn current_watermark(&self) -> Option<u64> {
        (self.backend.time.watermark > 0).then_some(self.backend.time.watermark)
    }

    /// The event timestamp of the record being processed — or, in `on_timer`, of the
    /// event-time timer firing. `None` when the stream has no timestamps (no watermark
    /// strategy upstream) and for processing-time timers.
    pub fn timestamp(&self) -> Option<u64> {
        self.backend.time.timestamp
    }

    /// The record's event timestamp, or the error an event-time operator (`operator`, e.g.
    /// "window join") fails with when its input has none: one message, naming the way out,
    /// for every window and join.
    pub(crate) fn event_timestamp(&self, operator: &str) -> Result<u64> {
        self.timestamp().ok_or_else(|| {
            crate::error::Error::InvalidJob(format!(
                "{operator}: a record arrived without an event timestamp, and an event-time \
                 operator cannot place a record without a timestamp; give its input \
                 timestamps and watermarks first (add_source_with_watermarks or \
                 assign_timestamps_and_watermarks)"
            ))
        })
    }

    /// In `on_timer`: which clock the firing timer follows; `None` while processing a record.
    pub fn time_domain(&self) -> Option<TimeDomain> {
        self.backend.time.domain
    }

    /// Registers a processing-time timer for the current key at `time_ms`: the function's
    /// `on_timer` runs once the processing time reaches it. Registering the same (key,
    /// time) twice keeps one timer. Timers are part of the checkpointed state.
    pub fn register_processing_time_timer(&mut self, time_ms: u64) {
        self.register(TimeDomain::ProcessingTime, time_ms);
    }

    /// Deletes the current key's processing-time timer at `time_ms`, if registered.
    pub fn delete_processing_time_timer(&mut self, time_ms: u64) {
        self.delete(TimeDomain::ProcessingTime, time_ms);
    }

    /// Registers an event-time timer for the current key at `time_ms`: `on_timer` runs once
    /// the watermark reaches it (a timer at or below the current watermark fires with the
    /// next watermark). One timer per (key, time); checkpointed with the keyed state.
    pub fn register_event_time_timer(&mut self, time_ms: u64) {
        self.register(TimeDomain::EventTime, time_ms);
    }

    /// Deletes the current key's event-time timer at `time_ms`, if registered.
    pub fn delete_event_time_timer(&mut self, time_ms: u64) {
        self.delete(TimeDomain::EventTime, time_ms);
    }

    fn register(&mut self, domain: TimeDomain, time_ms: u64) {
        let key = self.key;
        self.backend.with_timers(domain, |order, table| {
            order.register(table, key, time_ms);
        });
    }

    fn delete(&mut self, domain: TimeDomain, time_ms: u64) {
        let key = self.key;
        self.backend
            .with_timers(domain, |order, table| order.delete(table, key, time_ms));
    }
}

/// The firing order of the registered timers: in memory a `timestamp → keys` map; on the
/// disk backend a keyspace of its own ([`DiskTimerOrder`]), so timers cost no memory each.
pub(crate) struct TimerIndex<K> {
    by_time: BTreeMap<u64, Vec<K>>,
    disk: Option<DiskTimerOrder<K>>,
    /// On disk: no timer is earlier than this (`u64::MAX`: none), so asking for due timers
    /// reads the LSM only when one may be due.
    earliest: u64,
}

/// A failed read or write of the timer order on disk fails the task (timer calls return
/// nothing to report it through), which restarts from its last checkpoint.
fn on_disk<T>(r: Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("timers on disk: {e}"))
}

impl<K: Key> TimerIndex<K> {
    /// An index of every registration in `table`, kept in `disk` if given.
    pub(crate) fn rebuild(
        table: &mut Table<K, Vec<u64>>,
        mut disk: Option<DiskTimerOrder<K>>,
    ) -> Result<Self> {
        let mut by_time: BTreeMap<u64, Vec<K>> = BTreeMap::new();
        let mut earliest = u64::MAX;
        let mut failed = Ok(());
        table.for_each_entry(0, |k, times| {
            for &t in times {
                match &mut disk {
                    Some(d) => {
                        earliest = earliest.min(t);
                        if failed.is_ok() {
                            failed = d.insert(t, k);
                        }
                    }
                    None => by_time.entry(t).or_default().push(k.clone()),
                }
            }
        })?;
        failed?;
        Ok(TimerIndex {
            by_time,
            disk,
            earliest,
        })
    }

    /// Registers (key, time) unless it already is; returns whether it was new.
    pub(crate) fn register(&mut self, table: &mut Table<K, Vec<u64>>, key: &K, time: u64) -> bool {
        let times = table.access(key, true).get_or_insert_with(key, Vec::new);
        if times.contains(&time) {
            return false;
        }
        times.push(time);
        match &mut self.disk {
            Some(d) => {
                on_disk(d.insert(time, key));
                self.earliest = self.earliest.min(time);
            }
            None => self.by_time.entry(time).or_default().push(key.clone()),
        }
        true
    }

    /// Deletes the registration (key, time), if any.
    pub(crate) fn delete(&mut self, table: &mut Table<K, Vec<u64>>, key: &K, time: u64) {
        if !table
            .access(key, false)
            .get(key)
            .is_some_and(|t| t.contains(&time))
        {
            return;
        }
        remove_time(table, key, time);
        if let Some(d) = &mut self.disk {
            on_disk(d.remove(time, key));
            return;
        }
        if let Some(keys) = self.by_time.get_mut(&time) {
            keys.retain(|k| k != key);
            if keys.is_empty() {
                self.by_time.remove(&time);
            }
        }
    }

    /// Removes and returns the earliest timer due at `now`, in timestamp order.
    pub(crate) fn pop_due(&mut self, table: &mut Table<K, Vec<u64>>, now: u64) -> Option<(u64, K)> {
        if self.disk.is_some() {
            return self.pop_due_on_disk(table, now);
        }
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

    #[inline(never)]
    fn pop_due_on_disk(&mut self, table: &mut Table<K, Vec<u64>>, now: u64) -> Option<(u64, K)> {
        let disk = self.disk.as_mut()?;
        if self.earliest > now {
            return None;
        }
        let Some((time, key)) = on_disk(disk.first()) else {
            self.earliest = u64::MAX;
            return None;
        };
        self.earliest = time;
        if time > now {
            return None;
        }
        on_disk(disk.remove_first(time, &key));
        remove_time(table, &key, time);
        Some((time, key))
    }

    /// Number of registered timers (in memory).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_time.values().map(Vec::len).sum()
    }
}

fn remove_time<K: Key>(table: &mut Table<K, Vec<u64>>, key: &K, time: u64) {
    let map = table.access(key, true);
    let times = map.get_or_insert_with(key, Vec::new);
    times.retain(|t| *t != time);
    if times.is_empty() {
        map.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_order_once_per_key_and_time() {
        let mut table = Table::<u64, Vec<u64>>::new(StateKind::EventTimers, None);
        let mut idx = TimerIndex::rebuild(&mut table, None).unwrap();
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
        assert_eq!(table.map.len(), 1);
        assert_eq!(table.map.get(&3), Some(&vec![40]));
        let mut rebuilt = TimerIndex::rebuild(&mut table, None).unwrap();
        assert_eq!(rebuilt.pop_due(&mut table, u64::MAX), Some((40, 3)));
        assert!(table.map.is_empty());
    }
}
