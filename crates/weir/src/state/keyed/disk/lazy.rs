//! The disk tier's part of a lazy restore (issue 25 item 4): the sections a restore left
//! in the checkpoint storage, by key group, fetched and loaded into the LSM when a key of
//! the group is first read or written, and all of them before anything reads the whole
//! state (a snapshot, `keys()`, iteration, end of input).
//!
//! Why loading a group then is exact: no key of it has been read or written yet (every
//! access loads its key first, [`DiskTier::fault_in`]), so it is in neither the cache nor a
//! pending write-back, and writing the restored entries straight into the LSM orders them
//! before every later write of those keys.
//!
//! A full snapshot (a new base, a savepoint) does *not* fetch them: its view captures the
//! groups still in storage at the barrier ([`RemoteAtBarrier`]) and the writer thread
//! produces each one's section from the chain, one key group at a time in memory
//! ([`merge_group`]), without loading it into the LSM. Exact for the same reason: a group
//! untouched before the barrier is exactly its chain's content at the barrier.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::entries::Entries;
use super::super::remote::{self, ConfirmedChain, RemoteSection, RemoteState};
use super::super::table::EncodedShard;
use super::super::ttl::StateTtlConfig;
use super::{DiskStore, DiskTier, Key, StateValue};
use crate::error::{Error, Result};
use crate::state::key_group::key_group;

impl DiskStore {
    /// Bytes the subtask's LSM occupies on local disk (its tables and journal, as fjall
    /// counts them): after a lazy restore, the part of the state fetched or written since,
    /// the rest staying in the checkpoint storage. For the dashboard (issue 25 item 6).
    pub(crate) fn disk_bytes(&self) -> u64 {
        // fjall fails only to list its journal's folder: a figure for a dashboard, left
        // out then rather than failing the checkpoint.
        self.db.disk_space().unwrap_or(0)
    }

    /// Bytes of the LSM's tables on local disk and of its memtables (flushed to tables as
    /// they fill): what `--state-cache-size` bounds. The journal is left out: fjall
    /// preallocates it (64 MiB) and bounds it itself, rotating it as memtables are flushed.
    pub(crate) fn table_bytes(&self) -> u64 {
        let journal = self.db.journal_disk_space().unwrap_or(0);
        let tables = self.disk_bytes().saturating_sub(journal);
        tables + self.db.write_buffer_size()
    }

    /// The most bytes the LSM should keep on local disk (`--state-cache-size`; `None`:
    /// unbounded).
    pub(crate) fn local_bound(&self) -> Option<u64> {
        self.options.local_disk_bytes
    }
}

/// What a lazy restore (or an eviction) left in storage for one state.
pub(super) struct Remote {
    /// The state they belong to: its name in the chains, how to name and decode it.
    state: Arc<RemoteState>,
    /// Per key group not yet fetched, its sections in chain order (base, then deltas):
    /// shared with the views of full snapshots taken since (an `Arc` each, so capturing
    /// them at a barrier copies no section).
    groups: BTreeMap<u32, Arc<[RemoteSection]>>,
}

/// The key groups of one state still in storage at a full snapshot's barrier, which the
/// snapshot's view reads from the chain instead of the LSM ([`merge_group`]).
pub(super) struct RemoteAtBarrier {
    /// The state they belong to (`what` for messages, `ttl` to decode).
    state: Arc<RemoteState>,
    /// Per key group still in storage at the barrier, its sections in chain order.
    groups: BTreeMap<u32, Arc<[RemoteSection]>>,
    /// [`merge_group`] for the state's key and value types (the view knows neither).
    merge: MergeFn,
}

/// [`merge_group`] for one state's key and value types.
/// Returns the group's encoded entries and their number.
type MergeFn =
    fn(&str, &[RemoteSection], bool, Option<(StateTtlConfig, u64)>) -> Result<(Vec<u8>, u64)>;

impl RemoteAtBarrier {
    /// Key group `g`'s entries as a full snapshot writes them, if `g` was still in storage
    /// at the barrier (`None`: read the LSM). `expiry`: with TTL, the config and the
    /// snapshot's time (expired entries are left out, as the LSM path leaves them out).
    pub(super) fn shard(
        &self,
        g: u32,
        expiry: Option<(StateTtlConfig, u64)>,
    ) -> Option<Result<EncodedShard>> {
        let sections = self.groups.get(&g)?;
        let state = &self.state;
        Some(
            (self.merge)(&state.what, sections, state.ttl, expiry).map(|(bytes, entries)| {
                let runs = if bytes.is_empty() {
                    Vec::new()
                } else {
                    vec![(g, bytes.len())]
                };
                EncodedShard {
                    bytes,
                    runs,
                    entries,
                }
            }),
        )
    }
}

impl Remote {
    /// Whether key group `g` is still in storage.
    pub(super) fn has(&self, g: u32) -> bool {
        self.groups.contains_key(&g)
    }
}

impl<K: Key, S: StateValue> DiskTier<K, S> {
    /// Takes the sections of a lazy restore of `state`.
    pub(crate) fn set_remote(&mut self, state: Arc<RemoteState>, sections: Vec<RemoteSection>) {
        let mut by_group: BTreeMap<u32, Vec<RemoteSection>> = BTreeMap::new();
        for s in sections {
            by_group.entry(s.group).or_default().push(s);
        }
        let groups: BTreeMap<u32, Arc<[RemoteSection]>> =
            by_group.into_iter().map(|(g, s)| (g, s.into())).collect();
        self.remote = (!groups.is_empty()).then(|| Box::new(Remote { state, groups }));
    }

    /// At a full snapshot's barrier: the key groups still in storage (`None`: none), which
    /// its view reads from the chain. Cheap: a copy of the map of `Arc`s.
    pub(super) fn remote_at_barrier(&self) -> Option<RemoteAtBarrier> {
        let r = self.remote.as_ref()?;
        Some(RemoteAtBarrier {
            state: r.state.clone(),
            groups: r.groups.clone(),
            merge: merge_group::<K, S>,
        })
    }

    /// Before `key` is read from the LSM: fetches and loads its key group if it is still
    /// in storage.
    pub(super) fn fetch_group_of(&mut self, key: &K) -> Result<()> {
        let Some(remote) = &mut self.remote else {
            return Ok(());
        };
        let group = key_group(key, self.max_parallelism);
        let Some(sections) = remote.groups.remove(&group) else {
            return Ok(());
        };
        remote::note_access_fetch();
        let done = remote.groups.is_empty();
        self.load_sections(group, &sections)?;
        if done {
            self.remote = None;
        }
        Ok(())
    }

    /// Fetches and loads every key group still in storage: before anything reads the
    /// whole state. The groups' sections of each file are read together, a few MiB at a
    /// time ([`remote::coalesce`]), not one request per group.
    pub(super) fn fetch_all_remote(&mut self) -> Result<()> {
        let Some(remote) = &mut self.remote else {
            return Ok(());
        };
        let groups = std::mem::take(&mut remote.groups);
        let mut all: Vec<Vec<RemoteSection>> = groups.values().map(|s| s.to_vec()).collect();
        remote::coalesce(&mut all);
        for (g, sections) in groups.into_keys().zip(all) {
            self.load_sections(g, &sections)?;
        }
        self.remote = None;
        Ok(())
    }

    /// A checkpoint was confirmed: the key groups still in storage point at its chain from
    /// now on (`chain`, state `name`), since retention may delete the chains before it. Its
    /// chain holds each unchanged: a group still in storage has not been touched since
    /// before that checkpoint's barrier ([`DiskTier::fault_in`] fetches it before any
    /// access), so the chain's sections of it are what it was then and is now. Without the
    /// chain's index (`None`; a chain this Weir writes always has one) they are fetched now
    /// instead.
    pub(crate) fn repoint_remote(
        &mut self,
        name: &str,
        chain: Option<&ConfirmedChain>,
    ) -> Result<()> {
        let Some(remote) = &mut self.remote else {
            return Ok(());
        };
        let Some(chain) = chain else {
            return self.fetch_all_remote();
        };
        let groups = std::mem::take(&mut remote.groups);
        for g in groups.into_keys() {
            // A group the chain has no entry of is empty: nothing to fetch.
            let sections = chain.sections(name, g);
            if !sections.is_empty() {
                remote.groups.insert(g, sections.into());
            }
        }
        if remote.groups.is_empty() {
            self.remote = None;
        }
        Ok(())
    }

    /// Makes key group `g` of `state` remote again with `sections` (in chain order): it was
    /// dropped from the LSM ([`DiskTier::evict`]).
    pub(super) fn add_remote(
        &mut self,
        state: &Arc<RemoteState>,
        g: u32,
        sections: Vec<RemoteSection>,
    ) {
        let remote = self.remote.get_or_insert_with(|| {
            Box::new(Remote {
                state: state.clone(),
                groups: BTreeMap::new(),
            })
        });
        remote.groups.insert(g, sections.into());
    }

    /// Forgets the key groups still in storage: the state is being cleared whole.
    pub(super) fn drop_remote(&mut self) {
        self.remote = None;
    }

    /// Key groups of this state still in storage.
    #[cfg(test)]
    pub(crate) fn remote_groups(&self) -> usize {
        self.remote.as_ref().map_or(0, |r| r.groups.len())
    }

    /// Fetches key group `g`'s sections (in chain order) and loads them into the LSM: the
    /// base's entries put, each delta's applied on top. All are fetched before any is
    /// applied. A file found missing is the retention race (`state/keyed/bound.rs`): the
    /// group is then read whole from the chain of a snapshot taken since, if one can be;
    /// otherwise the fetch fails naming the missing file.
    fn load_sections(&mut self, g: u32, sections: &[RemoteSection]) -> Result<()> {
        // An `Arc`: the loads below need the tier mutably.
        let Some(state) = self.remote.as_ref().map(|r| r.state.clone()) else {
            return Ok(());
        };
        let fetched = match remote::try_fetch_group(sections) {
            Ok(fetched) => fetched,
            Err((at, failed)) => {
                let newer = failed
                    .missing()
                    .then(|| self.store.unconfirmed().fetch_group(&state.name, g));
                match newer.flatten() {
                    Some(fetched) => fetched,
                    None => return Err(failed.into_error(&sections[at])),
                }
            }
        };
        for (delta, bytes) in fetched {
            if delta {
                self.apply_changes_inner(&state.what, &[bytes], state.ttl)?;
            } else {
                self.restore_inner(&state.what, &[bytes], state.ttl)?;
            }
        }
        Ok(())
    }
}

/// One key group of one state as a full snapshot writes it, from its sections in chain
/// order (the base's entries, each delta's applied on top), with TTL (`expiry`) the
/// entries expired at the snapshot's time left out — what loading the group into the LSM
/// and reading it back gives, without the LSM: in memory, one key group at a time.
///
/// Entries come out ordered by their key's postcard bytes, the order the LSM holds them in
/// (its keys are `key group ‖ postcard(key)`), so the file is byte for byte what the LSM
/// path writes. Each section is read alone (not through the [`remote::GroupRead`] the tier
/// shares between its states): a buffer this filled would stay held by the tier's sections
/// for as long as the group stays in storage.
fn merge_group<K: Key, S: StateValue>(
    what: &str,
    sections: &[RemoteSection],
    ttl: bool,
    expiry: Option<(StateTtlConfig, u64)>,
) -> Result<(Vec<u8>, u64)> {
    if ttl {
        merge_entries::<K, (S, u64)>(what, sections, |v| Some(v.1), expiry)
    } else {
        merge_entries::<K, S>(what, sections, |_| None, expiry)
    }
}

/// [`merge_group`] for entries stored as `V` (the value, or `(value, stamp)` with TTL,
/// whose stamp `stamp` gives).
fn merge_entries<K: Key, V: serde::de::DeserializeOwned>(
    what: &str,
    sections: &[RemoteSection],
    stamp: impl Fn(&V) -> Option<u64>,
    expiry: Option<(StateTtlConfig, u64)>,
) -> Result<(Vec<u8>, u64)> {
    // postcard(key) → (postcard(value as stored), its stamp).
    let mut entries: BTreeMap<Vec<u8>, (Vec<u8>, Option<u64>)> = BTreeMap::new();
    for s in sections {
        let alone = RemoteSection {
            shared: None,
            ..s.clone()
        };
        let bytes = remote::fetch(&alone)?;
        let read = if s.delta {
            Entries::<K, V>::delta(&bytes)
        } else {
            Entries::<K, V>::full(&bytes)
        };
        for entry in read {
            let entry = entry.map_err(|e| Error::StateDecode {
                what: what.to_string(),
                cause: format!(
                    "byte {} of key group {}'s section in {}: {}",
                    e.at,
                    s.group,
                    s.file.shown.display(),
                    e.cause
                ),
            })?;
            match entry.value {
                Some((value, encoded)) => {
                    let stamp = stamp(&value);
                    entries.insert(entry.key_bytes.to_vec(), (encoded.to_vec(), stamp));
                }
                None => {
                    entries.remove(entry.key_bytes);
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut written = 0;
    for (k, (v, stamp)) in entries {
        if let (Some((cfg, now)), Some(stamp)) = (&expiry, stamp) {
            if *now >= stamp.saturating_add(cfg.ttl_ms()) {
                continue;
            }
        }
        // postcard((k, v)) is postcard(k) ‖ postcard(v).
        out.extend_from_slice(&k);
        out.extend_from_slice(&v);
        written += 1;
    }
    Ok((out, written))
}
