//! Incremental checkpoints of keyed state on disk: which keys changed since the last
//! confirmed checkpoint, and whether the next checkpoint writes a delta or a new base
//! (docs/design-notes.md, "Incremental checkpoints"; Flink's FLIP-158 changelog).
//!
//! Guarantees:
//! * Each state's disk tier records the LSM key of every entry it writes back, deletes or
//!   sweeps ([`ChangeSet`]); a checkpoint's snapshot takes the set, so the sets of the
//!   snapshots taken since the last *confirmed* checkpoint hold every key changed since it.
//! * A checkpoint's delta holds the union of those sets (not only its own), and its chain is
//!   the confirmed checkpoint's chain plus the delta: it references files of confirmed
//!   checkpoints only. A checkpoint that is aborted, or never confirmed, changes nothing:
//!   its set stays in the union until a later checkpoint is confirmed (its changes are
//!   "merged back").
//! * A restore of this subtask's own chain (same key groups, this job's folder) continues
//!   it ([`Tracker::continue_restored`]): the restored checkpoint is complete, so its chain
//!   is confirmed, and the first checkpoint after the restore is a delta of what changed
//!   since (what the restore loaded is not a change). Any other restore starts without one.
//! * A base (full file) is written when there is no confirmed chain (the first checkpoint
//!   of an attempt that did not continue a restored chain), when a set overflowed its bound
//!   (its keys are unknown), or when the chain's deltas grew past [`MATERIALIZE_RATIO`] of
//!   the base or past [`MAX_DELTAS`] files ("materialisation"), bounding restore work and
//!   disk; the restored chain's deltas count like any others.
//! * Savepoints never touch any of this: they are full and canonical.

use std::sync::{Arc, Mutex, OnceLock};

use rustc_hash::FxHashSet;

mod entries;
pub use entries::DeltaEntries;

/// A new base is written once the chain's deltas hold more bytes than this fraction of the
/// base: a restore then reads at most 1.5× the state, and retention keeps about as much.
pub const MATERIALIZE_RATIO: f64 = 0.5;

/// Keys a state's change set, and the union of the sets a delta reads, may hold before they
/// overflow and the next checkpoint is a base: twice the cache (`cache_entries`). A full
/// cache's eviction records every key it writes back — as many as the cache holds — so with
/// the cache's own size as the bound the next barrier's keys overflowed the set after every
/// eviction, and a job touching more keys than its cache holds (W1 at 10 M keys: each access
/// a new or evicted key) wrote a whole base each time a subtask's cache filled. Twice leaves
/// room for one eviction and the barriers around it. A recorded key costs ~50 bytes (its
/// boxed bytes and a hash slot): ~100 MB per state at the default cache, at worst.
#[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
pub(crate) fn change_limit(cache_entries: usize) -> usize {
    cache_entries.max(1).saturating_mul(2)
}

/// A new base is written once the chain has this many deltas (each is one more file to
/// read and apply at a restore).
pub const MAX_DELTAS: usize = 16;

/// The keys (LSM keys: key group ‖ postcard(key)) of one state changed since its last
/// snapshot, or "too many to track" once more than its bound changed: the next checkpoint
/// is then a base, and memory stays bounded however much changes between checkpoints.
///
/// Keys come two ways: recorded one by one as the processing thread writes them to the LSM
/// (a cache eviction, a clear), and, for the dirty keys of the cache at a barrier, as a
/// [`DeferredKeys`] the asynchronous write-back fills: the barrier only counts them.
#[derive(Debug, Default, Clone)]
pub struct ChangeSet {
    keys: FxHashSet<Box<[u8]>>,
    /// Keys of barrier write-backs, known once each has run (see [`DeferredKeys`]).
    deferred: Vec<Arc<DeferredKeys>>,
    /// Keys counted in `deferred` (an upper bound of the distinct keys they add).
    deferred_len: usize,
    overflowed: bool,
}

impl ChangeSet {
    /// Records that the entry under LSM key `key` was put or deleted; past `limit` keys
    /// the set forgets them and only remembers it overflowed.
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn record(&mut self, key: &[u8], limit: usize) {
        if self.overflowed || self.keys.contains(key) {
            return;
        }
        if self.len() >= limit {
            self.overflow();
            return;
        }
        self.keys.insert(key.into());
    }

    /// Adds the keys a barrier's write-back will write (counted now, listed once it ran);
    /// past `limit` keys in all the set overflows as with [`ChangeSet::record`].
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn defer(&mut self, keys: Arc<DeferredKeys>, limit: usize) {
        if self.overflowed || keys.len == 0 {
            return;
        }
        if self.len() + keys.len > limit {
            self.overflow();
            return;
        }
        self.deferred_len += keys.len;
        self.deferred.push(keys);
    }

    fn overflow(&mut self) {
        self.keys = FxHashSet::default();
        self.deferred = Vec::new();
        self.deferred_len = 0;
        self.overflowed = true;
    }

    /// Whether more keys changed than the set could hold.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Number of keys recorded (those of write-backs not yet run counted as they will be
    /// written: an upper bound).
    pub fn len(&self) -> usize {
        self.keys.len() + self.deferred_len
    }

    /// Whether no key changed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0 && !self.overflowed
    }

    /// The keys recorded one by one (not those of deferred write-backs).
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.keys.iter().map(|k| &**k)
    }

    /// The keys of the barrier write-backs of this set but `except` (the one whose delta
    /// entries a delta took); `None` if one has not run yet. A delta reads them after its
    /// own write-back ran, which runs every earlier one of its state first, so there they
    /// are all known.
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn deferred_keys_except(
        &self,
        except: Option<&Arc<DeferredKeys>>,
    ) -> Option<impl Iterator<Item = &[u8]>> {
        let lists: Option<Vec<&[Box<[u8]>]>> = self
            .deferred
            .iter()
            .filter(|d| !except.is_some_and(|e| Arc::ptr_eq(d, e)))
            .map(|d| d.keys.get().map(Vec::as_slice))
            .collect();
        Some(lists?.into_iter().flatten().map(|k| &**k))
    }

    /// The keys of the barrier write-backs of this set; `None` if one has not run yet.
    #[cfg(test)]
    pub(crate) fn deferred_keys(&self) -> Option<impl Iterator<Item = &[u8]>> {
        self.deferred_keys_except(None)
    }
}

/// The LSM keys of the dirty entries a barrier handed to the asynchronous write-back
/// (`state/keyed/disk/writeback.rs`): counted at the barrier, listed by the write-back as
/// it encodes them, so the barrier encodes nothing.
///
/// The write-back also keeps each entry in a delta's encoding ([`DeltaEntries`]) while
/// they are wanted: the delta of the checkpoint whose barrier this is takes them and looks
/// none of these keys up in the LSM (their values are exactly those at the barrier). They
/// are released — or never kept — once no delta will read them
/// ([`DeferredKeys::release_entries`]); a delta that finds them gone looks the keys up.
#[derive(Debug)]
pub struct DeferredKeys {
    len: usize,
    keys: OnceLock<Vec<Box<[u8]>>>,
    entries: Mutex<Captured>,
}

/// Where a write-back's delta entries stand.
#[derive(Debug)]
enum Captured {
    /// Not written yet; the write-back keeps them.
    Wanted,
    /// Written, not taken yet.
    Kept(DeltaEntries),
    /// Taken by a delta, or released: not kept.
    Gone,
}

impl DeferredKeys {
    /// Room for the `len` keys of one write-back.
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn new(len: usize) -> Arc<Self> {
        Arc::new(DeferredKeys {
            len,
            keys: OnceLock::new(),
            entries: Mutex::new(Captured::Wanted),
        })
    }

    /// The write-back's keys, once written, and its delta entries if it kept them (later
    /// calls change nothing).
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn fill(&self, keys: Vec<Box<[u8]>>, entries: Option<DeltaEntries>) {
        if self.keys.set(keys).is_err() {
            return;
        }
        let mut captured = self.captured();
        if matches!(*captured, Captured::Wanted) {
            *captured = entries.map_or(Captured::Gone, Captured::Kept);
        }
    }

    /// Whether the write-back should keep its delta entries (a delta may still read them).
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn wants_entries(&self) -> bool {
        matches!(*self.captured(), Captured::Wanted)
    }

    /// Takes the delta entries (`None` if they were not kept, were released or taken):
    /// only after the write-back ran.
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn take_entries(&self) -> Option<DeltaEntries> {
        match std::mem::replace(&mut *self.captured(), Captured::Gone) {
            Captured::Kept(entries) => Some(entries),
            Captured::Wanted | Captured::Gone => None,
        }
    }

    /// No delta will read the entries: drops them, or tells the write-back not to keep them.
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn release_entries(&self) {
        *self.captured() = Captured::Gone;
    }

    fn captured(&self) -> std::sync::MutexGuard<'_, Captured> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One file of a chain: what the checkpoint layer records of a shared file
/// (`checkpoint::metadata::SharedFile`), kept by the backend for the next checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainFile {
    /// Path relative to the job's checkpoint folder (`shared/<uid>/<file>`).
    pub path: String,
    /// Size in bytes, envelope included.
    pub size: u64,
    /// Its checksum (CRC-32C of the bytes before its trailer).
    pub crc32c: u32,
    /// The checkpoint it was written for.
    pub checkpoint_id: u64,
    /// The run that wrote it.
    pub run_id: String,
    /// Where its key groups' sections lie (`None`: not known, as for a file of a chain
    /// restored from a checkpoint without an index).
    pub index: Option<Arc<super::remote::FileIndex>>,
}

/// Where the writer reports the chain a snapshot produced (base first), once its file is
/// written; the backend adopts it when the checkpoint is confirmed.
pub type ChainSlot = Arc<Mutex<Option<Vec<ChainFile>>>>;

/// What an incremental checkpoint's snapshot asks the writer for.
#[derive(Debug, Clone)]
pub struct IncrementalSnapshot {
    /// `true`: the views hold a delta (entries `(key, Option<value>)`) to chain after
    /// `chain`; `false`: they hold the full state, a new base (`chain` is empty).
    pub delta: bool,
    /// The confirmed chain the delta applies to, base first.
    pub chain: Vec<ChainFile>,
    /// Filled by the writer with the chain this checkpoint references.
    pub written: ChainSlot,
    /// Filled by the writer with where it wrote the chain's new file: key groups a lazy
    /// restore left in storage are re-pointed at a new base once it is confirmed.
    pub home: Arc<OnceLock<super::remote::SharedHome>>,
}

/// A newly confirmed chain ([`Tracker::on_complete`]) and where its files lie (`None`: not
/// known — cannot happen, the writer reports it with the chain).
#[derive(Debug)]
pub(crate) struct Confirmed {
    /// The chain, base first.
    pub chain: Vec<ChainFile>,
    /// The job folder its files are in (a subtask's chain is always in its job's folder).
    pub home: Option<super::remote::SharedHome>,
}

/// One snapshot taken since the last confirmed checkpoint.
#[derive(Debug)]
struct Pending {
    id: u64,
    /// Per state (by table index): its keys changed before this snapshot (since the
    /// previous one); `None` when the state cannot tell (it is written whole).
    sets: Vec<Option<Arc<ChangeSet>>>,
    written: ChainSlot,
    home: Arc<OnceLock<super::remote::SharedHome>>,
}

/// What the next checkpoint of a backend writes ([`Tracker::plan`]).
#[derive(Debug)]
pub(crate) enum Plan {
    /// A new base: the full state.
    Base(IncrementalSnapshot),
    /// A delta: per state, the sets whose keys it writes (empty: the state is unchanged).
    Delta(IncrementalSnapshot, Vec<Vec<Arc<ChangeSet>>>),
}

/// The incremental-checkpoint bookkeeping of one keyed backend (one operator subtask).
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    /// The chain of the newest confirmed checkpoint of this attempt, or the restored chain
    /// it continues (base first).
    confirmed: Option<Vec<ChainFile>>,
    /// Snapshots since, ascending by id.
    pending: Vec<Pending>,
}

impl Tracker {
    /// Continues `chain`, this subtask's own chain as the restored checkpoint lists it
    /// (Flink's claim mode): it becomes the confirmed chain, so the next checkpoint is a
    /// delta on it holding only the keys changed since the restore. Safe because that
    /// checkpoint is complete (its `_metadata` exists), so every file of its chain is
    /// confirmed by definition, and retention keeps them while a checkpoint lists them.
    /// Only before the first snapshot: a chain confirmed in this attempt is never replaced.
    pub(crate) fn continue_restored(&mut self, chain: Vec<ChainFile>) {
        if self.confirmed.is_none() && self.pending.is_empty() && !chain.is_empty() {
            self.confirmed = Some(chain);
        }
    }

    /// At checkpoint `id`'s snapshot: records `sets` (each state's keys changed since the
    /// previous snapshot) and decides between a base and a delta. `union_limit` bounds the
    /// keys a delta may hold per state (past it a base is cheaper to reason about).
    pub(crate) fn plan(
        &mut self,
        id: u64,
        sets: Vec<Option<ChangeSet>>,
        union_limit: usize,
    ) -> Plan {
        let written: ChainSlot = Arc::default();
        let home: Arc<OnceLock<super::remote::SharedHome>> = Arc::default();
        let states = sets.len();
        self.pending.push(Pending {
            id,
            sets: sets.into_iter().map(|s| s.map(Arc::new)).collect(),
            written: written.clone(),
            home: home.clone(),
        });
        let base = IncrementalSnapshot {
            delta: false,
            chain: Vec::new(),
            written: written.clone(),
            home: home.clone(),
        };
        let Some(chain) = &self.confirmed else {
            return Plan::Base(base);
        };
        let base_bytes = chain.first().map_or(0, |f| f.size);
        let delta_bytes: u64 = chain.iter().skip(1).map(|f| f.size).sum();
        if chain.len() > MAX_DELTAS || delta_bytes as f64 > base_bytes as f64 * MATERIALIZE_RATIO {
            return Plan::Base(base);
        }
        let mut per_state = vec![Vec::new(); states];
        for p in &self.pending {
            if p.sets.len() != states {
                return Plan::Base(base);
            }
            for (t, set) in p.sets.iter().enumerate() {
                match set {
                    None => return Plan::Base(base),
                    Some(s) if s.overflowed() => return Plan::Base(base),
                    Some(s) if s.is_empty() => {}
                    Some(s) => per_state[t].push(s.clone()),
                }
            }
        }
        for sets in &per_state {
            if sets.iter().map(|s| s.len()).sum::<usize>() > union_limit {
                return Plan::Base(base);
            }
        }
        let delta = IncrementalSnapshot {
            delta: true,
            chain: chain.clone(),
            written,
            home,
        };
        Plan::Delta(delta, per_state)
    }

    /// Checkpoint `id` is complete (and so is every earlier one): if this backend took a
    /// snapshot for it, its chain becomes the confirmed one and the sets it covered are
    /// dropped. (A savepoint, which is not tracked, changes nothing.) Returns the chain
    /// confirmed: the one before it may be deleted by retention from now on, so whatever
    /// pointed at its files must point at this one's.
    pub(crate) fn on_complete(&mut self, id: u64) -> Option<Confirmed> {
        let at = self.pending.iter().position(|p| p.id == id)?;
        let chain = self.pending[at]
            .written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        // Without its chain reported (cannot happen: the acknowledgement follows the
        // write), the sets are kept, so nothing is lost.
        let chain = chain?;
        let home = self.pending[at].home.get().cloned();
        self.confirmed = Some(chain.clone());
        self.pending.drain(..=at);
        Some(Confirmed { chain, home })
    }

    /// State `t`'s change sets of the snapshots taken since the confirmed checkpoint (what
    /// its chain does not hold); `None` if one of them cannot tell (the state is written
    /// whole, or was not declared yet then).
    pub(crate) fn unconfirmed_sets(&self, t: usize) -> Option<Vec<Arc<ChangeSet>>> {
        self.pending
            .iter()
            .map(|p| p.sets.get(t).cloned().flatten())
            .collect()
    }

    /// Checkpoint `id` was aborted: its file is never referenced, and its set stays in
    /// the union the next delta writes (nothing to do but say so).
    pub(crate) fn on_abort(&mut self, _id: u64) {}

    /// Number of snapshots whose sets are kept (tests).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(keys: &[&[u8]]) -> ChangeSet {
        let mut s = ChangeSet::default();
        for k in keys {
            s.record(k, 100);
        }
        s
    }

    fn file(id: u64, size: u64) -> ChainFile {
        ChainFile {
            path: format!("shared/op/chk-{id}"),
            size,
            crc32c: 0,
            checkpoint_id: id,
            run_id: "r".into(),
            index: None,
        }
    }

    fn written(plan: &Plan, chain: Vec<ChainFile>) {
        let s = match plan {
            Plan::Base(s) | Plan::Delta(s, _) => s,
        };
        *s.written.lock().unwrap() = Some(chain);
    }

    fn delta_keys(plan: &Plan) -> Vec<Vec<u8>> {
        let Plan::Delta(_, sets) = plan else {
            panic!("expected a delta, got {plan:?}")
        };
        let mut keys: Vec<Vec<u8>> = sets
            .iter()
            .flatten()
            .flat_map(|s| s.keys().map(<[u8]>::to_vec))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    #[test]
    fn a_set_past_its_bound_overflows_and_forgets_its_keys() {
        let mut s = ChangeSet::default();
        s.record(b"a", 2);
        s.record(b"a", 2);
        s.record(b"b", 2);
        assert_eq!(s.len(), 2);
        s.record(b"c", 2);
        assert!(s.overflowed() && s.keys().next().is_none() && !s.is_empty());
    }

    #[test]
    fn deferred_keys_count_at_once_and_list_once_written() {
        let mut s = set(&[b"a"]);
        let d = DeferredKeys::new(2);
        s.defer(d.clone(), 10);
        assert_eq!(s.len(), 3, "counted before the write-back ran");
        assert!(s.deferred_keys().is_none(), "not listed before it ran");
        d.fill(vec![b"b".to_vec().into(), b"c".to_vec().into()], None);
        let mut keys: Vec<&[u8]> = s.keys().chain(s.deferred_keys().unwrap()).collect();
        keys.sort();
        assert_eq!(keys, [&b"a"[..], b"b", b"c"]);
        s.defer(DeferredKeys::new(8), 10);
        assert!(s.overflowed() && s.deferred_keys().unwrap().next().is_none());
    }

    #[test]
    fn a_write_backs_delta_entries_are_kept_until_taken_or_released() {
        let d = DeferredKeys::new(1);
        assert!(d.wants_entries());
        let mut e = DeltaEntries::with_capacity(1);
        e.push(&[0, 0, 1], Some(b"v"));
        d.fill(vec![b"\0\0\x01".to_vec().into()], Some(e));
        assert_eq!(
            d.take_entries().map(|e| e.len()),
            Some(1),
            "kept once written"
        );
        assert!(d.take_entries().is_none(), "taken once");
        let mut s = ChangeSet::default();
        s.defer(d.clone(), 10);
        assert_eq!(s.deferred_keys().unwrap().count(), 1);
        assert_eq!(s.deferred_keys_except(Some(&d)).unwrap().count(), 0);
        // Released before the write-back ran: it keeps none.
        let d = DeferredKeys::new(1);
        d.release_entries();
        assert!(!d.wants_entries());
        d.fill(Vec::new(), Some(DeltaEntries::default()));
        assert!(d.take_entries().is_none());
        // Released after: dropped.
        let d = DeferredKeys::new(1);
        d.fill(Vec::new(), Some(DeltaEntries::default()));
        d.release_entries();
        assert!(d.take_entries().is_none());
    }

    #[test]
    fn the_first_checkpoint_is_a_base_and_deltas_follow_confirmed_ones() {
        let mut t = Tracker::default();
        let p1 = t.plan(1, vec![Some(set(&[b"a"]))], 100);
        assert!(matches!(p1, Plan::Base(_)));
        written(&p1, vec![file(1, 1000)]);
        t.on_complete(1);
        assert_eq!(t.pending(), 0);
        let p2 = t.plan(2, vec![Some(set(&[b"b"]))], 100);
        let Plan::Delta(s, _) = &p2 else {
            panic!("{p2:?}")
        };
        assert_eq!(s.chain, vec![file(1, 1000)]);
        assert_eq!(delta_keys(&p2), [b"b".to_vec()]);
    }

    #[test]
    fn an_unconfirmed_or_aborted_checkpoint_is_never_chained_on_and_its_keys_carry_over() {
        let mut t = Tracker::default();
        let p1 = t.plan(1, vec![Some(set(&[]))], 100);
        written(&p1, vec![file(1, 1000)]);
        t.on_complete(1);
        // 2 is taken, then 3 before 2 is confirmed: 3 chains on 1 and holds 2's keys too.
        let p2 = t.plan(2, vec![Some(set(&[b"x"]))], 100);
        written(&p2, vec![file(1, 1000), file(2, 10)]);
        let p3 = t.plan(3, vec![Some(set(&[b"y"]))], 100);
        let Plan::Delta(s3, _) = &p3 else {
            panic!("{p3:?}")
        };
        assert_eq!(s3.chain, vec![file(1, 1000)], "2 is not confirmed");
        assert_eq!(delta_keys(&p3), [b"x".to_vec(), b"y".to_vec()]);
        // 2 is aborted, 3 never completes either: 4 still holds x and y.
        t.on_abort(2);
        let p4 = t.plan(4, vec![Some(set(&[b"z"]))], 100);
        assert_eq!(
            delta_keys(&p4),
            [b"x".to_vec(), b"y".to_vec(), b"z".to_vec()]
        );
        written(&p4, vec![file(1, 1000), file(4, 30)]);
        t.on_complete(4);
        assert_eq!(t.pending(), 0, "4 covered every earlier set");
        let p5 = t.plan(5, vec![Some(set(&[b"w"]))], 100);
        let Plan::Delta(s5, _) = &p5 else {
            panic!("{p5:?}")
        };
        assert_eq!(s5.chain, vec![file(1, 1000), file(4, 30)]);
        assert_eq!(delta_keys(&p5), [b"w".to_vec()]);
    }

    #[test]
    fn a_continued_restored_chain_is_confirmed_and_counts_toward_materialisation() {
        let mut t = Tracker::default();
        let restored = vec![file(4, 1000), file(5, 100), file(6, 100)];
        t.continue_restored(restored.clone());
        let p = t.plan(7, vec![Some(set(&[b"a"]))], 100);
        let Plan::Delta(s, _) = &p else {
            panic!("{p:?}")
        };
        assert_eq!(
            s.chain, restored,
            "the first checkpoint after the restore is a delta"
        );
        assert_eq!(delta_keys(&p), [b"a".to_vec()]);
        // Once planned, a later restored chain changes nothing (none can come, but still).
        t.continue_restored(vec![file(9, 1)]);
        let p = t.plan(8, vec![Some(set(&[b"b"]))], 100);
        let Plan::Delta(s, _) = &p else {
            panic!("{p:?}")
        };
        assert_eq!(s.chain, restored);
        // The restored deltas count: past half the base, the next is a base.
        let mut t = Tracker::default();
        t.continue_restored(vec![file(4, 1000), file(5, 300), file(6, 300)]);
        let p = t.plan(7, vec![Some(set(&[b"a"]))], 100);
        assert!(matches!(p, Plan::Base(_)), "{p:?}");
        // So do their number.
        let mut t = Tracker::default();
        let deltas = (1..=MAX_DELTAS as u64).map(|i| file(i, 1));
        t.continue_restored(std::iter::once(file(0, 1_000_000)).chain(deltas).collect());
        let p = t.plan(40, vec![Some(set(&[b"a"]))], 100);
        assert!(matches!(p, Plan::Base(_)), "{p:?}");
    }

    #[test]
    fn a_savepoint_completing_changes_nothing() {
        let mut t = Tracker::default();
        let p1 = t.plan(1, vec![Some(set(&[]))], 100);
        written(&p1, vec![file(1, 1000)]);
        let _p2 = t.plan(3, vec![Some(set(&[b"k"]))], 100);
        t.on_complete(2); // a savepoint: not tracked
        assert_eq!(t.pending(), 2);
    }

    #[test]
    fn overflow_long_chains_and_large_deltas_write_a_new_base() {
        let mut t = Tracker::default();
        let p = t.plan(1, vec![Some(set(&[]))], 100);
        written(&p, vec![file(1, 1000)]);
        t.on_complete(1);
        let mut big = ChangeSet::default();
        for i in 0..3u8 {
            big.record(&[i], 2);
        }
        assert!(matches!(t.plan(2, vec![Some(big)], 100), Plan::Base(_)));
        let mut t = Tracker::default();
        let p = t.plan(1, vec![None], 100);
        assert!(matches!(p, Plan::Base(_)));
        written(&p, vec![file(1, 1000)]);
        t.on_complete(1);
        assert!(
            matches!(t.plan(2, vec![None], 100), Plan::Base(_)),
            "a state that cannot tell its changes is written whole"
        );
        let mut t = Tracker::default();
        let p = t.plan(1, vec![Some(set(&[]))], 100);
        written(&p, vec![file(1, 1000), file(2, 600)]);
        t.on_complete(1);
        assert!(
            matches!(t.plan(2, vec![Some(set(&[b"a"]))], 100), Plan::Base(_)),
            "deltas past half the base"
        );
        let mut t = Tracker::default();
        let p = t.plan(1, vec![Some(set(&[]))], 100);
        written(&p, vec![file(1, 1000)]);
        t.on_complete(1);
        assert!(
            matches!(t.plan(2, vec![Some(set(&[b"a", b"b"]))], 1), Plan::Base(_)),
            "a union past its bound"
        );
    }
}
