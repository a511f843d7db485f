//! Keyed state: state scoped to the current key after `key_by` (docs/architecture.md §5).
//!
//! A keyed operator owns one [`KeyedStateBackend`] per subtask. Functions declare their
//! states once, in `open`, through the [`KeyedStateStore`] and get back small handles
//! ([`ValueState`], [`ListState`], [`MapState`], [`ReducingState`], [`AggregatingState`]);
//! on each record the [`KeyedContext`] resolves a handle to the current key's slot. Tables
//! are hash maps keyed by the key itself — no serialization on the hot path; encoding
//! happens only in the asynchronous part of a snapshot.
//!
//! Snapshots are taken per key group: the synchronous part shares each table's
//! copy-on-write shards (O(shards), not O(entries)); the asynchronous part (on a writer
//! thread) splits the view by key group and encodes it, so a restore at any parallelism
//! reads exactly the key groups it owns.
//!
//! Each kind stores one value per key (Flink's semantics): a list state whose list becomes
//! empty, or a map state whose map becomes empty, has no entry for that key any more.

// Selected through `StateBackendKind` (the job's `--state-backend`, issue 25).
mod bound;
#[cfg(feature = "disk-state")]
mod disk;
#[cfg(not(feature = "disk-state"))]
#[path = "disk_off.rs"]
mod disk;
pub(crate) mod entries;
mod evolve;
mod handles;
mod incremental;
mod remote;
mod table;
mod timers;
mod ttl;
mod view;
mod windows;

use std::any::TypeId;
use std::collections::BTreeMap;

pub use bound::cache_report;
pub use disk::{restore_report, start_restore_report};
pub use handles::{
    AggregateFunction, AggregatingAccess, AggregatingState, ListAccess, ListState, MapAccess,
    MapState, ReducingAccess, ReducingState, StateHandle, ValueState,
};
pub use incremental::{ChainFile, IncrementalSnapshot};
pub use remote::{
    fetch_report, is_known_bad, FileIndex, GroupRead, GroupSpans, RemoteFile, RemoteSection,
    SectionSpan, SharedHome,
};
pub use table::{EncodedShard, TableSnapshot};
pub use ttl::{StateTtlConfig, TtlUpdate};
pub(crate) use windows::{AccEvolution, AccShape, WindowState};

#[cfg(feature = "disk-state")]
pub use disk::DiskOptions;

use super::cow_map::CowMap;
use super::key_group::KeyGroupRange;
use super::{Key, StateKind, StateValue};
use crate::error::{Error, Result};
use crate::storage::shared_bytes::SharedBytes;
use table::{StateTable, Table};
pub use timers::TimeDomain;
use timers::{TimeContext, TimerIndex};

/// One restored keyed state: its kind, whether its entries carry TTL stamps, and its
/// encoded key-group sections.
#[derive(Debug, Clone)]
pub struct RestoredState {
    /// The kind it was written as.
    pub kind: StateKind,
    /// Whether it was written with TTL stamps.
    pub ttl: bool,
    /// One encoded section per key group that had entries (ranges of the loaded file).
    pub sections: Vec<SharedBytes>,
    /// The deltas of an incremental checkpoint, applied after `sections` in this order:
    /// per delta file of the chain (oldest first), one section per key group, entries
    /// `(key, Option<value>)` (empty for a full checkpoint).
    pub changes: Vec<SharedBytes>,
    /// The schema it was written with (`None`: a checkpoint from before schemas were
    /// recorded, restored as unversioned).
    pub schema: Option<crate::state::schema::StateSchema>,
    /// Sections left in the checkpoint storage by a lazy restore (issue 25 item 4), per key
    /// group in chain order (base, then deltas): the disk backend fetches a group's on its
    /// first access; the memory backend, and a state whose schema migrates, at declaration.
    pub remote: Vec<RemoteSection>,
}

/// Encoded keyed state restored for this subtask, by state name.
pub type RestoredKeyedState = BTreeMap<String, RestoredState>;

/// Where a keyed operator keeps its keyed state (DESIGN.md §13).
#[derive(Debug, Clone, Default)]
pub enum StateBackendKind {
    /// Copy-on-write hash tables in memory (the default): the fastest, bounded by memory.
    #[default]
    Memory,
    /// An embedded LSM per operator subtask, the tables in memory caching it: state larger
    /// than memory. Timers and window panes stay in memory tables.
    #[cfg(feature = "disk-state")]
    Disk(DiskOptions),
}

/// The keyed state of one subtask of one keyed operator.
pub struct KeyedStateBackend<K> {
    range: KeyGroupRange,
    max_parallelism: u32,
    names: Vec<String>,
    tables: Vec<Box<dyn StateTable<K>>>,
    /// The concrete type (`Table<K, S>`) boxed at each index of `tables`, recorded at
    /// declaration. Resolving a handle checks it instead of going through `Any`: that took
    /// two dynamic calls per state access (`as_any_mut`, then `type_id`), a measurable part
    /// of every record (see BENCHMARKS.md).
    table_types: Vec<TypeId>,
    restored: RestoredKeyedState,
    /// Index of the processing-time timers table, and the timers' firing order.
    timers: Option<(usize, TimerIndex<K>)>,
    /// Index of the event-time timers table, and the timers' firing order.
    event_timers: Option<(usize, TimerIndex<K>)>,
    /// The time the function's context reports: the current record's timestamp, the
    /// operator's watermark, the domain of the firing timer.
    pub(crate) time: TimeContext,
    /// The LSM of the disk backend (`None`: memory backend).
    disk: Option<std::sync::Arc<disk::DiskStore>>,
    /// Every declared state with its restore decision (schema evolution, issue 26).
    declared: Vec<crate::state::schema::DeclaredState>,
    /// A probe backend decides and records declarations but loads nothing.
    probing: bool,
    /// The operator's uid, for messages.
    owner: String,
    /// With incremental checkpoints on disk: what the last confirmed checkpoint wrote and
    /// what changed since, and the most keys a delta may hold per state.
    incremental: Option<(incremental::Tracker, usize)>,
}

impl<K: Key> KeyedStateBackend<K> {
    /// A backend in memory for key groups `range`, optionally loaded from a restore: the
    /// tests' backend, and the schema probe's (`runtime/schema_check.rs`), which loads no
    /// entries and so needs no disk whatever the job's backend.
    pub(crate) fn new(
        range: KeyGroupRange,
        max_parallelism: u32,
        restored: RestoredKeyedState,
    ) -> Self {
        Self::memory(range, max_parallelism, restored)
    }

    /// A backend of kind `kind` for key groups `range`, optionally loaded from a restore.
    pub(crate) fn with_kind(
        kind: &StateBackendKind,
        range: KeyGroupRange,
        max_parallelism: u32,
        restored: RestoredKeyedState,
    ) -> Result<Self> {
        #[cfg_attr(not(feature = "disk-state"), allow(unused_mut))]
        let mut backend = Self::memory(range, max_parallelism, restored);
        match kind {
            StateBackendKind::Memory => {}
            #[cfg(feature = "disk-state")]
            StateBackendKind::Disk(options) => {
                let store = disk::DiskStore::open(options.clone())?;
                if options.incremental {
                    let limit = store.change_limit;
                    backend.incremental = Some((incremental::Tracker::default(), limit));
                }
                backend.disk = Some(store);
            }
        }
        Ok(backend)
    }

    fn memory(range: KeyGroupRange, max_parallelism: u32, restored: RestoredKeyedState) -> Self {
        KeyedStateBackend {
            range,
            max_parallelism,
            names: Vec::new(),
            tables: Vec::new(),
            table_types: Vec::new(),
            restored,
            timers: None,
            event_timers: None,
            time: TimeContext::default(),
            disk: None,
            declared: Vec::new(),
            probing: false,
            owner: String::new(),
            incremental: None,
        }
    }

    /// Names of restored states that no descriptor claimed (dropped from later snapshots).
    /// Called once every state is declared; forgets their entries, which would otherwise keep
    /// the whole loaded state file alive (restored sections are ranges of its buffer).
    pub(crate) fn unclaimed(&mut self) -> Vec<String> {
        std::mem::take(&mut self.restored).into_keys().collect()
    }

    /// Synchronous phase of a snapshot: an immutable view of every non-empty table (an
    /// empty table restores as empty without being written). On disk this writes the
    /// tables' caches back and pins the LSM; an I/O error fails the checkpoint.
    pub(crate) fn snapshot(&mut self) -> Result<KeyedSnapshot> {
        let mut tables = Vec::new();
        for (name, t) in self.names.iter().zip(&mut self.tables) {
            if let Some(view) = t.snapshot(self.range, self.max_parallelism)? {
                tables.push(SnapshotTable {
                    name: name.clone(),
                    kind: t.kind(),
                    ttl: t.has_ttl(),
                    view,
                });
            }
        }
        Ok(KeyedSnapshot {
            range: self.range,
            max_parallelism: self.max_parallelism,
            tables,
            incremental: None,
            local: self.local_size(),
        })
    }

    /// Where the state lives at this moment: the bytes its LSM occupies on local disk (0
    /// on the memory backend) and the entries held decoded in memory (on disk: the
    /// write-back caches; in memory: every entry). Cheap (the LSM keeps its tables'
    /// sizes): taken at each checkpoint's barrier for the dashboard (issue 25 item 6).
    pub(crate) fn local_size(&self) -> LocalStateSize {
        let disk_bytes = self.disk.as_ref().map_or(0, |d| d.disk_bytes());
        if let Some(d) = self.disk.as_ref().filter(|d| d.local_bound().is_some()) {
            bound::note_local_at_barrier(d.table_bytes());
        }
        LocalStateSize {
            disk_bytes,
            memory_entries: self.tables.iter().map(|t| t.memory_entries() as u64).sum(),
        }
    }

    /// Synchronous phase of checkpoint `id`'s snapshot (not a savepoint's: those are always
    /// full, [`KeyedStateBackend::snapshot`]). With incremental checkpoints the tables'
    /// changed keys are taken and the snapshot is either a new base (the full state) or a
    /// delta holding only the keys changed since the last confirmed checkpoint; without,
    /// the full state as always.
    pub(crate) fn snapshot_checkpoint(&mut self, id: u64) -> Result<KeyedSnapshot> {
        let Some((tracker, limit)) = &mut self.incremental else {
            return self.snapshot();
        };
        let mut sets = Vec::with_capacity(self.tables.len());
        for t in &mut self.tables {
            sets.push(t.take_changes()?);
        }
        let plan = tracker.plan(id, sets, *limit);
        if let Some(d) = &self.disk {
            let (incremental::Plan::Base(p) | incremental::Plan::Delta(p, _)) = &plan;
            (d.unconfirmed()).snapshot_taken(id, p.written.clone(), p.home.clone());
        }
        match plan {
            incremental::Plan::Base(plan) => {
                let mut snapshot = self.snapshot()?;
                snapshot.incremental = Some(plan);
                Ok(snapshot)
            }
            incremental::Plan::Delta(plan, per_state) => {
                let mut tables = Vec::new();
                let states = self.names.iter().zip(&mut self.tables).zip(per_state);
                for ((name, t), sets) in states {
                    if sets.is_empty() {
                        continue;
                    }
                    if let Some(view) = t.delta_snapshot(sets, self.range)? {
                        tables.push(SnapshotTable {
                            name: name.clone(),
                            kind: t.kind(),
                            ttl: t.has_ttl(),
                            view,
                        });
                    }
                }
                Ok(KeyedSnapshot {
                    range: self.range,
                    max_parallelism: self.max_parallelism,
                    tables,
                    incremental: Some(plan),
                    local: self.local_size(),
                })
            }
        }
    }

    /// Once every state is declared (after [`KeyedStateBackend::unclaimed`], which returned
    /// `unclaimed`): continues `chain`, this subtask's own chain in the restored checkpoint
    /// (`RestoredCheckpoint::own_chain` decided it is: same key groups, this job's folder),
    /// so the first checkpoint after the restore is a delta rather than a new base that
    /// reads every key group (a lazy restore's too). Not with incremental checkpoints off,
    /// and not when the chain's entries are not what a delta in this job may follow: a
    /// restored state dropped or left undeclared (the chain would bring its entries back),
    /// or re-encoded by a migration (the chain holds the old encoding). Returns whether it
    /// continued.
    pub(crate) fn continue_restored_chain(
        &mut self,
        chain: Option<Vec<ChainFile>>,
        unclaimed: &[String],
    ) -> bool {
        use crate::state::schema::Decision;
        let (Some(chain), Some((tracker, _))) = (chain, &mut self.incremental) else {
            return false;
        };
        let as_written = self.declared.iter().all(|d| {
            matches!(
                d.decision,
                Decision::AsIs | Decision::Unversioned | Decision::New
            )
        });
        if !unclaimed.is_empty() || !as_written || self.probing {
            return false;
        }
        tracker.continue_restored(chain);
        true
    }

    /// Checkpoint `id` completed: with incremental checkpoints, the chain it wrote is the
    /// one later deltas build on, and the key groups still in storage (a lazy restore's)
    /// point at it from now on — retention may delete the chains before it. An error only
    /// if the chain's index is unknown and fetching the groups instead fails.
    pub(crate) fn notify_complete(&mut self, id: u64) -> Result<()> {
        let Some((tracker, _)) = &mut self.incremental else {
            return Ok(());
        };
        let Some(confirmed) = tracker.on_complete(id) else {
            return Ok(());
        };
        if let Some(d) = &self.disk {
            d.unconfirmed().confirmed(id);
        }
        let chain = (confirmed.home.as_ref())
            .and_then(|home| remote::ConfirmedChain::new(home, &confirmed.chain));
        for (name, t) in self.names.iter().zip(&mut self.tables) {
            t.repoint_remote(name, chain.as_ref())?;
        }
        match &chain {
            Some(chain) => self.hold_local_bound(chain),
            None => Ok(()),
        }
    }

    /// Checkpoint `id` was aborted: no later checkpoint builds on what it wrote, and the
    /// keys it held go into the next delta.
    pub(crate) fn notify_aborted(&mut self, id: u64) {
        if let Some((tracker, _)) = &mut self.incremental {
            tracker.on_abort(id);
            if let Some(d) = &self.disk {
                d.unconfirmed().aborted(id);
            }
        }
    }

    /// Key groups a lazy restore left in storage and no table fetched yet, per state, for
    /// tests.
    #[cfg(all(test, feature = "disk-state"))]
    pub(crate) fn remote_groups(&self) -> Vec<(String, usize)> {
        self.names
            .iter()
            .zip(&self.tables)
            .map(|(n, t)| (n.clone(), t.remote_groups()))
            .collect()
    }

    /// Number of keys with state, per state, for tests.
    #[cfg(test)]
    pub fn sizes(&mut self) -> Vec<(String, usize)> {
        self.names
            .iter()
            .zip(&mut self.tables)
            .map(|(n, t)| (n.clone(), t.len().expect("state readable")))
            .collect()
    }

    /// The table behind `index`, which stores `S` per key. (There is no direct access to
    /// a table's map: on disk it is only a cache, reached through [`Table::access`].)
    ///
    /// # Panics
    /// If it stores another type (a handle used with a backend that did not issue it).
    #[inline]
    fn table_mut<S: StateValue>(&mut self, index: usize) -> &mut Table<K, S> {
        self.check_type::<S>(index);
        let t: &mut dyn StateTable<K> = &mut *self.tables[index];
        // SAFETY: `check_type` verified that the box at `index` holds a `Table<K, S>` (its
        // `TypeId` was recorded from the boxed value in `declare_with`), so the trait
        // object's data pointer points to one; the `&mut self` borrow makes it unique.
        unsafe { &mut *(t as *mut dyn StateTable<K>).cast::<Table<K, S>>() }
    }

    #[inline]
    fn check_type<S: StateValue>(&self, index: usize) {
        assert!(
            self.table_types[index] == TypeId::of::<Table<K, S>>(),
            "a state handle is only issued for a table of its stored type"
        );
    }

    /// The map behind `index`, after TTL bookkeeping for an access to `key`.
    #[inline]
    pub(crate) fn slot<S: StateValue>(
        &mut self,
        index: usize,
        key: &K,
        write: bool,
    ) -> &mut CowMap<K, S> {
        self.table_mut::<S>(index).access(key, write)
    }

    /// Declares table `name` storing `S` per key, loading its restored entries.
    fn declare<S: StateValue>(&mut self, name: &str, kind: StateKind) -> Result<usize> {
        self.declare_with::<S>(name, kind, None, 0, None)
    }

    /// Declares table `name`, with TTL if `ttl` is set.
    fn declare_with<S: StateValue>(
        &mut self,
        name: &str,
        kind: StateKind,
        ttl: Option<StateTtlConfig>,
        version: u32,
        migration: Option<evolve::Migration<S>>,
    ) -> Result<usize> {
        if self.names.iter().any(|n| n == name) {
            return Err(Error::InvalidJob(format!(
                "keyed state '{name}' declared twice in one operator"
            )));
        }
        let ttl = ttl.map(ttl::Ttl::new);
        // Every table of a disk backend is on disk, the timers' registrations included.
        let mut table = match &self.disk {
            Some(store) => Table::on_disk(
                kind,
                ttl,
                store.tier::<K, S>(self.tables.len(), self.max_parallelism)?,
            ),
            _ => Table::new(kind, ttl),
        };
        let mut restored = self.restored.remove(name);
        let remote = self.take_remote::<S>(&mut restored, version, table.is_on_disk())?;
        if let Some(r) = &restored {
            let mismatch = if r.kind != kind {
                Some(format!(
                    "keyed state '{name}' was a {} state in the checkpoint and is declared as a \
                     {} state now; keep its kind or give the new state another name",
                    r.kind.name(),
                    kind.name()
                ))
            } else if r.ttl != table.has_ttl() {
                Some(format!(
                    "keyed state '{name}' was written {} a time-to-live and is declared {} one \
                     now; adding or removing TTL needs a new state name",
                    if r.ttl { "with" } else { "without" },
                    if table.has_ttl() { "with" } else { "without" },
                ))
            } else {
                None
            };
            if let Some(why) = mismatch {
                self.refuse::<S>(name, kind, version, why)?;
                // (a probe records the refusal and goes on declaring)
                self.names.push(name.to_string());
                self.table_types.push(TypeId::of::<Table<K, S>>());
                self.tables.push(Box::new(table));
                return Ok(self.tables.len() - 1);
            }
        }
        let ttl = table.has_ttl();
        let (sections, changes) =
            self.evolve::<S>(name, kind, version, ttl, restored, migration)?;
        if !sections.is_empty() || !changes.is_empty() {
            table.restore(name, &sections, &changes)?;
        }
        if !remote.is_empty() {
            table.set_remote(name, remote);
        }
        self.names.push(name.to_string());
        self.table_types.push(TypeId::of::<Table<K, S>>());
        self.tables.push(Box::new(table));
        Ok(self.tables.len() - 1)
    }
}

/// Immutable view of a backend, produced synchronously at the barrier.
pub struct KeyedSnapshot {
    /// Key groups covered.
    pub range: KeyGroupRange,
    /// The job's max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// One view per non-empty state (with a delta: per state with changed keys).
    pub tables: Vec<SnapshotTable>,
    /// With incremental checkpoints: whether the views hold a delta or a new base, the
    /// confirmed chain a delta applies to, and where the writer reports the chain written.
    /// `None`: a full snapshot written into the checkpoint's own folder.
    pub incremental: Option<IncrementalSnapshot>,
    /// Where the state lived at the barrier (local disk, memory): not part of the
    /// checkpoint, shown beside its sizes by the dashboard.
    pub local: LocalStateSize,
}

/// Where one subtask's keyed state lives locally at a moment: what the checkpoint's own
/// sizes (its encoded bytes, its new and shared files) cannot tell — with the disk backend
/// the state's working copy is an LSM on local disk with a bounded cache of decoded
/// entries in front, and after a lazy restore part of it is still only in the checkpoint
/// storage (issue 25 item 6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LocalStateSize {
    /// Bytes the subtask's LSM occupies on local disk (table files, journal); 0 on the
    /// memory backend.
    pub disk_bytes: u64,
    /// Entries held decoded in memory: on disk the write-back caches' entries, in memory
    /// every entry.
    pub memory_entries: u64,
}

impl std::ops::AddAssign for LocalStateSize {
    fn add_assign(&mut self, o: Self) {
        self.disk_bytes += o.disk_bytes;
        self.memory_entries += o.memory_entries;
    }
}

/// The captured view of one state.
pub struct SnapshotTable {
    /// The state's name.
    pub name: String,
    /// Its kind.
    pub kind: StateKind,
    /// Whether entries carry TTL stamps.
    pub ttl: bool,
    /// The view, encoded by the writer thread.
    pub view: Box<dyn TableSnapshot>,
}

/// Where functions declare their keyed states (handed to `open`).
///
/// Restored entries are decoded at declaration, so a type mismatch with the checkpoint
/// surfaces as an error at start, naming the state; so does declaring a restored state
/// with another kind, or the same name twice.
pub struct KeyedStateStore<'a, K> {
    backend: &'a mut KeyedStateBackend<K>,
    ttl: Option<StateTtlConfig>,
    /// The next state's declared version ([`KeyedStateStore::with_version`]).
    version: u32,
    /// The next state's migration function ([`KeyedStateStore::with_migration`]), typed
    /// when the state is declared.
    migration: Option<Box<dyn std::any::Any>>,
}

impl<'a, K: Key> KeyedStateStore<'a, K> {
    pub(crate) fn new(backend: &'a mut KeyedStateBackend<K>) -> Self {
        KeyedStateStore {
            backend,
            ttl: None,
            version: 0,
            migration: None,
        }
    }

    /// Gives the *next* declared state a time-to-live (Flink's `enableTimeToLive`):
    /// `states.with_ttl(StateTtlConfig::new(ttl)).value_state::<u64>("seen")?`.
    pub fn with_ttl(&mut self, ttl: StateTtlConfig) -> &mut Self {
        self.ttl = Some(ttl);
        self
    }

    fn declare<S: StateValue>(
        &mut self,
        name: &str,
        kind: StateKind,
        migration: Option<evolve::Migration<S>>,
    ) -> Result<usize> {
        Self::check_name(name)?;
        let ttl = self.ttl.take();
        let version = std::mem::take(&mut self.version);
        self.backend
            .declare_with::<S>(name, kind, ttl, version, migration)
    }

    fn check_name(name: &str) -> Result<()> {
        if name.starts_with("__") {
            return Err(Error::InvalidJob(format!(
                "keyed state name '{name}': names starting with '__' are reserved for the engine"
            )));
        }
        Ok(())
    }

    /// A value per key (Flink's `ValueState`).
    pub fn value_state<V: StateValue>(&mut self, name: &str) -> Result<ValueState<V>> {
        let migration = self.take_migration::<V>(name)?.map(|m| m.for_value());
        let index = self.declare::<V>(name, StateKind::Value, migration)?;
        Ok(ValueState::new(index))
    }

    /// A list per key (Flink's `ListState`).
    pub fn list_state<V: StateValue>(&mut self, name: &str) -> Result<ListState<V>> {
        let migration = self.take_migration::<V>(name)?.map(|m| m.for_list());
        let index = self.declare::<Vec<V>>(name, StateKind::List, migration)?;
        Ok(ListState::new(index))
    }

    /// A map per key (Flink's `MapState`). A migration function
    /// ([`KeyedStateStore::with_migration`]) migrates its values; its user-key type must
    /// stay.
    pub fn map_state<UK: Key, UV: StateValue>(&mut self, name: &str) -> Result<MapState<UK, UV>> {
        let migration = self.take_migration::<UV>(name)?.map(|m| m.for_map::<UK>());
        let index = self.declare::<handles::UserMap<UK, UV>>(name, StateKind::Map, migration)?;
        Ok(MapState::new(index))
    }

    /// A value per key folded with `reduce` on every `add` (Flink's `ReducingState`).
    pub fn reducing_state<V: StateValue>(
        &mut self,
        name: &str,
        reduce: impl Fn(V, V) -> V + Send + Sync + 'static,
    ) -> Result<ReducingState<V>> {
        let migration = self.take_migration::<V>(name)?.map(|m| m.for_value());
        let index = self.declare::<V>(name, StateKind::Reducing, migration)?;
        Ok(ReducingState::new(index, reduce))
    }

    /// An accumulator per key, fed by `add` and read through the aggregate function
    /// (Flink's `AggregatingState`: input, accumulator and output types may all differ).
    pub fn aggregating_state<IN, ACC: StateValue, OUT>(
        &mut self,
        name: &str,
        aggregate: impl AggregateFunction<IN, ACC, OUT> + 'static,
    ) -> Result<AggregatingState<IN, ACC, OUT>> {
        let migration = self.take_migration::<ACC>(name)?.map(|m| m.for_value());
        let index = self.declare::<ACC>(name, StateKind::Aggregating, migration)?;
        Ok(AggregatingState::new(index, aggregate))
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
    pub fn get<V: StateValue>(&mut self, state: ValueState<V>) -> Option<&V> {
        self.backend
            .slot::<V>(state.index(), self.key, false)
            .get(self.key)
    }

    /// Sets the current key's value of `state`.
    #[inline]
    pub fn set<V: StateValue>(&mut self, state: ValueState<V>, value: V) {
        let key = self.key.clone();
        self.backend
            .slot::<V>(state.index(), self.key, true)
            .insert(key, value);
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
            .slot::<V>(state.index(), self.key, true)
            .get_or_insert_with(self.key, default)
    }

    /// Removes the current key's value of `state`.
    pub fn clear<V: StateValue>(&mut self, state: ValueState<V>) {
        self.backend
            .slot::<V>(state.index(), self.key, true)
            .remove(self.key);
    }

    /// The current key's list of `state`. For TTL, taking an accessor (of a list, map,
    /// reducing or aggregating state) counts as a write: it refreshes the entry.
    pub fn list<V: StateValue>(&mut self, state: &ListState<V>) -> ListAccess<'_, K, V> {
        ListAccess::new(self.key, self.backend.slot(state.index(), self.key, true))
    }

    /// The current key's map of `state`.
    pub fn map<UK: Key, UV: StateValue>(
        &mut self,
        state: &MapState<UK, UV>,
    ) -> MapAccess<'_, K, UK, UV> {
        MapAccess::new(self.key, self.backend.slot(state.index(), self.key, true))
    }

    /// The current key's reduced value of `state`.
    pub fn reducing<'s, V: StateValue>(
        &'s mut self,
        state: &'s ReducingState<V>,
    ) -> ReducingAccess<'s, K, V> {
        ReducingAccess::new(
            self.key,
            self.backend.slot(state.index(), self.key, true),
            state,
        )
    }

    /// The current key's accumulator of `state`.
    pub fn aggregating<'s, IN, ACC: StateValue, OUT>(
        &'s mut self,
        state: &'s AggregatingState<IN, ACC, OUT>,
    ) -> AggregatingAccess<'s, K, IN, ACC, OUT> {
        AggregatingAccess::new(
            self.key,
            self.backend.slot(state.index(), self.key, true),
            state,
        )
    }
}

/// Whole-backend access at end of input, for functions that emit final results.
pub struct KeyedEndContext<'a, K> {
    pub(crate) backend: &'a mut KeyedStateBackend<K>,
}

impl<K: Key> KeyedEndContext<'_, K> {
    /// Every `(key, value)` of `state` on this subtask, in no particular order, as owned
    /// pairs: on the disk backend they are decoded from the LSM as the iterator advances,
    /// so a state larger than memory can be emitted whole at end of input.
    pub fn entries<V: StateValue>(
        &mut self,
        state: ValueState<V>,
    ) -> impl Iterator<Item = (K, V)> + '_ {
        let now = crate::clock::wall_ms();
        self.backend.table_mut::<V>(state.index()).entries(now)
    }

    /// Runs `f` once for every key that has `state` on this subtask, with a context scoped
    /// to that key (Flink's `applyToAllKeys`): `f` may read and change any state of the key.
    pub fn apply_to_all_keys<H: StateHandle>(
        &mut self,
        state: &H,
        mut f: impl FnMut(&mut KeyedContext<'_, K>) -> Result<()>,
    ) -> Result<()> {
        for key in self.backend.tables[state.index()].keys()? {
            f(&mut KeyedContext {
                key: &key,
                backend: self.backend,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
