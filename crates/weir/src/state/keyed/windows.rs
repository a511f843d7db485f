//! Window state: the accumulators of a keyed window operator, one entry per (key, window
//! end), kept as one table per window ("pane") rather than a map per key.
//!
//! The shape is chosen for what a window operator does. Per record it needs the
//! accumulator of (key, window): one hash lookup in the pane of that window (the panes are
//! a short list sorted by end, searched from the newest). When the watermark passes a
//! window it fires every key of it and drops it: the pane is removed whole, with no timer
//! per (key, window) and no removal per entry. A checkpoint shares each pane's
//! copy-on-write shards like any keyed table, and a key's first write after it touches one
//! shard, not a map of its own.
//!
//! Each entry is stored and encoded as `key → (window end, accumulator, pending)`:
//! `pending` says that the window must still fire for this key when the watermark passes
//! its last millisecond (with allowed lateness a fired window stays until its cleanup time
//! and fires again only if a record arrives after a restore reset the watermark: exactly
//! what the per-key timers of the previous shape did). Key groups come from the key, so the
//! table is snapshotted, restored and rescaled by key group like every keyed state, and
//! listed by `weir state` as a keyed *window* state.
//!
//! Older checkpoints kept windows in a keyed map state (window end → accumulator) plus an
//! event-time timer per (key, window); [`KeyedStateStore::migrate_window_map`] moves such a
//! restored state into this table.

use std::any::{Any, TypeId};
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

use super::evolve::{Migration, MigrationFns};
use super::handles::{MapState, StateHandle, UserMap};
use super::table::{
    decode_sections, restore_threads, EncodedShard, StateTable, Table, TableSnapshot,
};
use super::{KeyedContext, KeyedEndContext, KeyedStateBackend, KeyedStateStore};
use crate::error::{Error, Result};
use crate::state::key_group::KeyGroupRange;
use crate::state::schema::{schema_of, ValueDecoder};
use crate::state::{Key, StateKind, StateValue};
use crate::storage::shared_bytes::SharedBytes;

/// A window accumulator's declared version and migration function (issue 26), set on the
/// windowed stream (`WindowedStream::with_version` / `with_migration`, and the count
/// windows' own) because the engine, not the job, declares the window state. Sendable: it
/// travels with the operator and builds its (task-local) decoder when the operator opens,
/// for the state the operator keeps its accumulators in ([`AccShape`]).
#[derive(Clone, Default)]
pub(crate) struct AccEvolution {
    version: u32,
    /// Builds, for a shape, the migration of the accumulator type it returns: a
    /// `Migration<WindowSlot<ACC>>` for [`AccShape::Slot`], else a `MigrationFns` of
    /// `ACC` or `(u64, ACC)` (set as the next keyed state's migration).
    make: Option<MakeMigration>,
    /// The accumulator type the migration returns, for the error when it is not the
    /// aggregate's.
    acc_type: &'static str,
}

/// Builds a window operator's migration for the shape it keeps its accumulators in (the
/// old type erased): sendable, so it travels with the operator to its tasks.
type MakeMigration = Arc<dyn Fn(AccShape) -> Box<dyn Any> + Send + Sync>;

/// Where a window operator keeps its accumulators `ACC`, which decides what a migration
/// function from `Old` to `ACC` has to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AccShape {
    /// Window state (fixed-size event-time windows): `(end, ACC, pending)` per window.
    Slot,
    /// `ACC` itself: the values of a map state (a custom trigger's window contents, by
    /// window end).
    Plain,
    /// `(u64, ACC)`: a map state's values (a session's start and accumulator, by session
    /// end) or a value state (a count window's records so far and accumulator).
    Counted,
    /// `(u64, VecDeque<ACC>)`: a value state of records, not accumulators (a sliding count
    /// window's records since it last fired and its last records, `ACC` the record type).
    Records,
}

impl std::fmt::Debug for AccEvolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccEvolution")
            .field("version", &self.version)
            .field("migration", &self.make.as_ref().map(|_| self.acc_type))
            .finish()
    }
}

impl AccEvolution {
    /// With declared version `version` (recorded with the accumulators' schema).
    pub(crate) fn with_version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// With a migration from accumulators of type `Old` (as the checkpoint recorded them).
    pub(crate) fn with_migration<Old: StateValue, ACC: StateValue>(
        mut self,
        migrate: impl Fn(Old) -> ACC + Send + Sync + 'static,
    ) -> Self {
        let migrate = Arc::new(migrate);
        self.make = Some(Arc::new(move |shape| {
            let f = migrate.clone();
            match shape {
                AccShape::Slot => {
                    let decode: ValueDecoder<WindowSlot<ACC>> = Rc::new(move |de| {
                        WindowSlot::<Old>::deserialize(de)
                            .map(|s| WindowSlot {
                                end: s.end,
                                acc: f(s.acc),
                                pending: s.pending,
                            })
                            .map_err(|e| e.to_string())
                    });
                    let from = schema_of::<WindowSlot<Old>>(0);
                    Box::new(Migration::new(from, decode)) as Box<dyn Any>
                }
                AccShape::Plain => Box::new(MigrationFns::new(move |old: Old| f(old))),
                AccShape::Counted => {
                    Box::new(MigrationFns::new(move |(n, old): (u64, Old)| (n, f(old))))
                }
                AccShape::Records => {
                    Box::new(MigrationFns::new(move |(n, olds): (u64, VecDeque<Old>)| {
                        (
                            n,
                            olds.into_iter()
                                .map(|old| f(old))
                                .collect::<VecDeque<ACC>>(),
                        )
                    }))
                }
            }
        }));
        self.acc_type = std::any::type_name::<ACC>();
        self
    }

    /// The declared version.
    pub(crate) fn version(&self) -> u32 {
        self.version
    }

    /// The migration for accumulators `ACC` kept in `shape`, as `X` (what `make` builds
    /// for that shape), or why the attached one does not fit them.
    fn migration<ACC: StateValue, X: 'static>(&self, shape: AccShape) -> Result<Option<X>> {
        let Some(make) = &self.make else {
            return Ok(None);
        };
        let (what, kept) = match shape {
            AccShape::Records => ("records", "the window keeps records of type"),
            _ => ("accumulators", "the window's aggregate accumulates"),
        };
        match make(shape).downcast::<X>() {
            Ok(m) => Ok(Some(*m)),
            Err(_) => Err(Error::InvalidJob(format!(
                "the migration function attached to the window {what} returns {}, but {kept} \
                 {}; make it return that type",
                self.acc_type,
                std::any::type_name::<ACC>()
            ))),
        }
    }
}

/// A window state of a keyed operator: per (key, window end) an accumulator `ACC`.
pub(crate) struct WindowState<ACC> {
    index: usize,
    _acc: PhantomData<fn() -> ACC>,
}

impl<ACC> Clone for WindowState<ACC> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<ACC> Copy for WindowState<ACC> {}

impl<ACC> StateHandle for WindowState<ACC> {
    fn index(&self) -> usize {
        self.index
    }
}

/// One key's accumulator of one window, as stored and encoded.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct WindowSlot<ACC> {
    /// The window's end (exclusive): which pane the entry belongs to on restore.
    end: u64,
    acc: ACC,
    /// The window still has to fire for this key.
    pending: bool,
}

/// One window's accumulators, by key.
struct Pane<K, ACC> {
    end: u64,
    table: Table<K, WindowSlot<ACC>>,
    /// Some entry may be pending (in memory only: set on restore and whenever an entry
    /// becomes pending), so a fired pane is not scanned again for nothing.
    pending: bool,
}

impl<K: Key, ACC: StateValue> Pane<K, ACC> {
    fn new(end: u64, disk: Option<&PanesOnDisk>) -> Result<Self> {
        let table = match disk {
            None => Table::new(StateKind::Window, None),
            Some(d) => Table::on_disk(
                StateKind::Window,
                None,
                d.store.tier_in(d.index, Some(end), d.max_parallelism)?,
            ),
        };
        Ok(Pane {
            end,
            table,
            pending: false,
        })
    }
}

/// Where a window table's panes live on the disk backend: one keyspace for the state,
/// each pane a namespace of it (its window end first, so a pane is one key range).
pub(crate) struct PanesOnDisk {
    store: std::sync::Arc<super::disk::DiskStore>,
    index: usize,
    max_parallelism: u32,
}

/// The table behind a [`WindowState`]: its panes in ascending window end.
pub(crate) struct WindowTable<K, ACC> {
    panes: Vec<Pane<K, ACC>>,
    /// The index of the pane last looked up (checked first).
    last: usize,
    /// On the disk backend: where new panes are made.
    disk: Option<PanesOnDisk>,
}

/// A failed read or write of a pane on disk fails the task (window accessors return
/// references), which restarts from its last checkpoint.
fn on_disk<T>(r: Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("window state on disk: {e}"))
}

impl<K: Key, ACC: StateValue> WindowTable<K, ACC> {
    /// The pane of the window ending at `end`, created if absent. Searched from the newest:
    /// records mostly belong to the latest windows.
    #[inline]
    fn pane_mut(&mut self, end: u64) -> &mut Pane<K, ACC> {
        // Consecutive records mostly share their window.
        if self.panes.get(self.last).is_some_and(|p| p.end == end) {
            return &mut self.panes[self.last];
        }
        self.last = self.find_or_insert(end);
        &mut self.panes[self.last]
    }

    /// The index of the pane ending at `end`, inserted if absent.
    #[inline(never)]
    fn find_or_insert(&mut self, end: u64) -> usize {
        let at = match self.panes.iter().rposition(|p| p.end <= end) {
            Some(i) if self.panes[i].end == end => return i,
            Some(i) => i + 1,
            None => 0,
        };
        self.panes
            .insert(at, on_disk(Pane::new(end, self.disk.as_ref())));
        at
    }

    /// `key`'s accumulator of the window ending at `end`, created with `create` if absent,
    /// and whether it was created; `pending` marks the window to fire for the key.
    #[inline]
    pub(crate) fn accumulator(
        &mut self,
        key: &K,
        end: u64,
        pending: bool,
        create: impl FnOnce() -> ACC,
    ) -> (&mut ACC, bool) {
        let pane = self.pane_mut(end);
        pane.pending |= pending;
        let mut created = false;
        let slot = pane.table.access(key, true).get_or_insert_with(key, || {
            created = true;
            WindowSlot {
                end,
                acc: create(),
                pending,
            }
        });
        slot.pending |= pending;
        (&mut slot.acc, created)
    }

    /// Fires the earliest window due at `watermark` (its last millisecond at or below it):
    /// calls `emit(key, end, acc)` for every key it is pending for, and returns the
    /// window's last millisecond, the results' timestamp. A window whose cleanup time (last
    /// millisecond plus `lateness`) has passed is removed whole. `None`: nothing is due.
    pub(crate) fn fire_next(
        &mut self,
        watermark: u64,
        lateness: u64,
        mut emit: impl FnMut(&K, u64, &ACC),
    ) -> Option<u64> {
        let mut i = 0;
        while i < self.panes.len() {
            let end = self.panes[i].end;
            let last = end.saturating_sub(1);
            if last > watermark {
                return None;
            }
            let fire = self.panes[i].pending;
            if self.disk.is_some() {
                let removed = last.saturating_add(lateness) <= watermark;
                if !removed && !fire {
                    i += 1;
                    continue;
                }
                on_disk(self.fire_on_disk(i, removed, &mut emit));
                if !fire {
                    continue;
                }
                return Some(last);
            }
            if last.saturating_add(lateness) <= watermark {
                let pane = self.panes.remove(i);
                if !fire {
                    continue;
                }
                for (k, slot) in pane.table.map.iter().filter(|(_, s)| s.pending) {
                    emit(k, end, &slot.acc);
                }
                return Some(last);
            }
            if fire {
                let pane = &mut self.panes[i];
                pane.pending = false;
                for (k, slot) in pane.table.map.iter_mut().filter(|(_, s)| s.pending) {
                    slot.pending = false;
                    emit(k, end, &slot.acc);
                }
                return Some(last);
            }
            i += 1;
        }
        None
    }

    /// [`WindowTable::fire_next`] of pane `i` on disk: streams its pending entries from
    /// the LSM to `emit`; then drops the pane (`remove`) or clears their pending marks.
    #[inline(never)]
    fn fire_on_disk(
        &mut self,
        i: usize,
        remove: bool,
        emit: &mut impl FnMut(&K, u64, &ACC),
    ) -> Result<()> {
        let pane = &mut self.panes[i];
        let end = pane.end;
        let mut fired = Vec::new();
        if pane.pending {
            for (k, slot) in pane.table.entries(0).filter(|(_, s)| s.pending) {
                emit(&k, end, &slot.acc);
                if !remove {
                    fired.push((k, slot));
                }
            }
        }
        if remove {
            let mut pane = self.panes.remove(i);
            self.last = 0;
            return pane.table.clear_disk();
        }
        pane.pending = false;
        for (k, mut slot) in fired {
            slot.pending = false;
            pane.table.access(&k, true).insert(k, slot);
        }
        Ok(())
    }
}

impl<K: Key, ACC: StateValue> StateTable<K> for WindowTable<K, ACC> {
    fn kind(&self) -> StateKind {
        StateKind::Window
    }
    fn has_ttl(&self) -> bool {
        false
    }
    fn snapshot(
        &mut self,
        range: KeyGroupRange,
        max_parallelism: u32,
    ) -> Result<Option<Box<dyn TableSnapshot>>> {
        let mut panes = Vec::new();
        for p in &mut self.panes {
            if let Some(view) = p.table.snapshot(range, max_parallelism)? {
                panes.push(view);
            }
        }
        Ok((!panes.is_empty()).then(|| Box::new(PanesSnapshot(panes)) as Box<dyn TableSnapshot>))
    }
    fn restore(
        &mut self,
        name: &str,
        sections: &[SharedBytes],
        changes: &[SharedBytes],
    ) -> Result<()> {
        if !changes.is_empty() {
            // Window states are always written whole (`take_changes` is `None`).
            return Err(Error::Restore(format!(
                "keyed window state '{name}' comes with incremental changes, which Weir never \
                 writes for a window state; the checkpoint is damaged, restore from another one"
            )));
        }
        let decoded = decode_sections::<(K, WindowSlot<ACC>)>(sections, restore_threads(sections))
            .map_err(|e| Error::StateDecode {
                what: format!("keyed window state '{name}'"),
                cause: e.to_string(),
            })?;
        for (k, slot) in decoded.into_iter().flatten() {
            let pane = self.pane_mut(slot.end);
            pane.pending |= slot.pending;
            // On disk through the cache, which writes back in batches as it fills.
            pane.table.access(&k, true).insert(k, slot);
        }
        Ok(())
    }
    fn len(&mut self) -> Result<usize> {
        let mut n = 0;
        for p in &mut self.panes {
            n += StateTable::len(&mut p.table)?;
        }
        Ok(n)
    }
    fn memory_entries(&self) -> usize {
        self.panes.iter().map(|p| p.table.map.len()).sum()
    }
    fn keys(&mut self) -> Result<Vec<K>> {
        let mut seen = FxHashSet::default();
        for p in &mut self.panes {
            p.table.for_each_entry(0, |k, _| {
                if !seen.contains(k) {
                    seen.insert(k.clone());
                }
            })?;
        }
        Ok(seen.into_iter().collect())
    }
}

/// A window table's snapshot: the views of its panes, one after the other (the writer
/// regroups every shard's entries by key group, so panes need no alignment).
struct PanesSnapshot(Vec<Box<dyn TableSnapshot>>);

impl TableSnapshot for PanesSnapshot {
    fn shards(&self) -> usize {
        self.0.iter().map(|v| v.shards()).sum()
    }

    fn take_shard(&self, shard: usize) -> Result<EncodedShard> {
        let mut i = shard;
        for view in &self.0 {
            if i < view.shards() {
                return view.take_shard(i);
            }
            i -= view.shards();
        }
        Err(Error::StateDecode {
            what: "keyed window state (encoding)".into(),
            cause: format!("shard {shard} of a snapshot does not exist"),
        })
    }
}

impl<K: Key> KeyedStateBackend<K> {
    /// The window table behind `index`.
    ///
    /// # Panics
    /// If it is another table (a handle used with a backend that did not issue it).
    #[inline]
    fn window_table_mut<ACC: StateValue>(&mut self, index: usize) -> &mut WindowTable<K, ACC> {
        assert!(
            self.table_types[index] == TypeId::of::<WindowTable<K, ACC>>(),
            "a window state handle is only issued for a window table of its type"
        );
        let t: &mut dyn StateTable<K> = &mut *self.tables[index];
        // SAFETY: the `TypeId` recorded at declaration (`declare_window`) for the box at
        // `index` is that of a `WindowTable<K, ACC>`; `&mut self` makes the borrow unique.
        unsafe { &mut *(t as *mut dyn StateTable<K>).cast::<WindowTable<K, ACC>>() }
    }

    fn declare_window<ACC: StateValue>(
        &mut self,
        name: &str,
        version: u32,
        migration: Option<Migration<WindowSlot<ACC>>>,
    ) -> Result<usize> {
        if self.names.iter().any(|n| n == name) {
            return Err(Error::InvalidJob(format!(
                "keyed state '{name}' declared twice in one operator"
            )));
        }
        let mut table = WindowTable::<K, ACC> {
            panes: Vec::new(),
            last: 0,
            disk: self.disk.as_ref().map(|store| PanesOnDisk {
                store: store.clone(),
                index: self.tables.len(),
                max_parallelism: self.max_parallelism,
            }),
        };
        let mut restored = self.restored.remove(name);
        // Panes are dropped whole by window end, not fetched by key group: eager.
        self.take_remote::<WindowSlot<ACC>>(&mut restored, 0, false)?;
        if let Some(r) = restored
            .as_ref()
            .filter(|r| r.kind != StateKind::Window || r.ttl)
        {
            let why = format!(
                "keyed state '{name}' was a {} state in the checkpoint and is declared as a \
                 window state now; keep its kind or give the new state another name",
                r.kind.name()
            );
            self.refuse::<WindowSlot<ACC>>(name, StateKind::Window, 0, why)?;
        } else {
            let (sections, changes) =
                self.evolve(name, StateKind::Window, version, false, restored, migration)?;
            if !sections.is_empty() || !changes.is_empty() {
                table.restore(name, &sections, &changes)?;
            }
        }
        self.names.push(name.to_string());
        self.table_types.push(TypeId::of::<WindowTable<K, ACC>>());
        self.tables.push(Box::new(table));
        Ok(self.tables.len() - 1)
    }
}

impl<K: Key> KeyedStateStore<'_, K> {
    /// Declares window state `name` (an engine state: the window operator's).
    pub(crate) fn window_state<ACC: StateValue>(
        &mut self,
        name: &str,
        evolution: &AccEvolution,
    ) -> Result<WindowState<ACC>> {
        let migration = evolution.migration::<ACC, Migration<WindowSlot<ACC>>>(AccShape::Slot)?;
        Ok(WindowState {
            index: self
                .backend
                .declare_window::<ACC>(name, evolution.version, migration)?,
            _acc: PhantomData,
        })
    }

    /// Gives the next declared state — the keyed state a window operator keeps its
    /// accumulators `ACC` in, as `shape` says (not [`AccShape::Slot`]: that is
    /// [`KeyedStateStore::window_state`]'s) — the version and migration of `evolution`.
    pub(crate) fn with_window_evolution<ACC: StateValue>(
        &mut self,
        evolution: &AccEvolution,
        shape: AccShape,
    ) -> Result<&mut Self> {
        let fns: Option<Box<dyn Any>> = match shape {
            AccShape::Plain => evolution
                .migration::<ACC, MigrationFns<ACC>>(shape)?
                .map(|m| Box::new(m) as Box<dyn Any>),
            AccShape::Counted => evolution
                .migration::<ACC, MigrationFns<(u64, ACC)>>(shape)?
                .map(|m| Box::new(m) as Box<dyn Any>),
            AccShape::Records => evolution
                .migration::<ACC, MigrationFns<(u64, VecDeque<ACC>)>>(shape)?
                .map(|m| Box::new(m) as Box<dyn Any>),
            AccShape::Slot => {
                return Err(Error::InvalidJob(
                    "window state takes its evolution where it is declared (window_state)".into(),
                ))
            }
        };
        self.with_version(evolution.version());
        if let Some(fns) = fns {
            self.set_migration(fns);
        }
        Ok(self)
    }

    /// The kind state `name` was restored as, if the checkpoint had it and nothing
    /// declared it yet.
    pub(crate) fn restored_kind(&self, name: &str) -> Option<StateKind> {
        self.backend.restored.get(name).map(|r| r.kind)
    }

    /// Moves the windows of `old` — the previous shape: a map state (window end →
    /// accumulator) with an event-time timer at each pending window's last millisecond and,
    /// with `lateness`, one at its cleanup time — into `new`, deleting those timers. A
    /// window is pending exactly when its firing timer was registered, so a restore from an
    /// old checkpoint fires what it would have fired.
    pub(crate) fn migrate_window_map<ACC: StateValue>(
        &mut self,
        old: &MapState<u64, ACC>,
        new: WindowState<ACC>,
        lateness: u64,
    ) -> Result<()> {
        let b = &mut *self.backend;
        // Every entry, from the LSM too on disk (a one-time move of an old checkpoint).
        let mut entries: Vec<(K, UserMap<u64, ACC>)> = Vec::new();
        b.table_mut::<UserMap<u64, ACC>>(old.index())
            .for_each_entry(0, |k, m| entries.push((k.clone(), m.clone())))?;
        let timers = b.event_timers.as_ref().map(|(i, _)| *i);
        for (key, windows) in entries {
            b.slot::<UserMap<u64, ACC>>(old.index(), &key, true)
                .remove(&key);
            let registered: Vec<u64> = timers
                .and_then(|i| b.slot::<Vec<u64>>(i, &key, false).get(&key).cloned())
                .unwrap_or_default();
            let mut ctx = KeyedContext {
                key: &key,
                backend: &mut *b,
            };
            for (end, acc) in windows {
                let last = end.saturating_sub(1);
                let pending = registered.contains(&last);
                let mut acc = Some(acc);
                let (slot, _) = ctx.backend.window_table_mut::<ACC>(new.index).accumulator(
                    &key,
                    end,
                    pending,
                    || acc.take().expect("created once"),
                );
                if let Some(acc) = acc {
                    *slot = acc; // not expected: one entry per window end
                }
                ctx.delete_event_time_timer(last);
                if lateness > 0 {
                    ctx.delete_event_time_timer(last.saturating_add(lateness));
                }
            }
        }
        Ok(())
    }
}

impl<K: Key> KeyedContext<'_, K> {
    /// The current key's accumulator of the window ending at `end` in `state` (created
    /// with `create` if absent, and whether it was); `pending` marks the window to fire
    /// for the key when the watermark passes it.
    #[inline]
    pub(crate) fn window_accumulator<ACC: StateValue>(
        &mut self,
        state: WindowState<ACC>,
        end: u64,
        pending: bool,
        create: impl FnOnce() -> ACC,
    ) -> (&mut ACC, bool) {
        self.backend
            .window_table_mut::<ACC>(state.index)
            .accumulator(self.key, end, pending, create)
    }
}

impl<K: Key> KeyedEndContext<'_, K> {
    /// Fires the earliest window of `state` due at `watermark` (see
    /// [`WindowTable::fire_next`]).
    pub(crate) fn fire_next_window<ACC: StateValue>(
        &mut self,
        state: WindowState<ACC>,
        watermark: u64,
        lateness: u64,
        emit: impl FnMut(&K, u64, &ACC),
    ) -> Option<u64> {
        self.backend
            .window_table_mut::<ACC>(state.index)
            .fire_next(watermark, lateness, emit)
    }
}

#[cfg(test)]
mod tests;
