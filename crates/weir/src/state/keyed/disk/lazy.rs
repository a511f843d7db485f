//! The disk tier's part of a lazy restore (issue 25 item 4): the sections a restore left
//! in the checkpoint storage, by key group, fetched and loaded into the LSM when a key of
//! the group is first read or written, and all of them before anything reads the whole
//! state (a snapshot, `keys()`, iteration, end of input).
//!
//! Why loading a group then is exact: no key of it has been read or written yet (every
//! access loads its key first, [`DiskTier::fault_in`]), so it is in neither the cache nor a
//! pending write-back, and writing the restored entries straight into the LSM orders them
//! before every later write of those keys.

use std::collections::BTreeMap;

use super::super::remote::{self, RemoteSection};
use super::{DiskStore, DiskTier, Key, StateValue};
use crate::error::Result;
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
}

/// What a lazy restore left in storage for one state.
pub(super) struct Remote {
    /// The state, for messages.
    what: String,
    /// Whether its entries carry TTL stamps.
    ttl: bool,
    /// Per key group not yet fetched, its sections in chain order (base, then deltas).
    groups: BTreeMap<u32, Vec<RemoteSection>>,
}

impl<K: Key, S: StateValue> DiskTier<K, S> {
    /// Takes the sections of a lazy restore (state `what`, with TTL stamps if `ttl`).
    pub(crate) fn set_remote(&mut self, what: String, sections: Vec<RemoteSection>, ttl: bool) {
        let mut groups: BTreeMap<u32, Vec<RemoteSection>> = BTreeMap::new();
        for s in sections {
            groups.entry(s.group).or_default().push(s);
        }
        self.remote = (!groups.is_empty()).then(|| Box::new(Remote { what, ttl, groups }));
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
        self.load_sections(sections)?;
        if done {
            self.remote = None;
        }
        Ok(())
    }

    /// Fetches and loads every key group still in storage: before anything reads the
    /// whole state.
    pub(super) fn fetch_all_remote(&mut self) -> Result<()> {
        while let Some(sections) = self
            .remote
            .as_mut()
            .and_then(|r| r.groups.pop_first())
            .map(|(_, s)| s)
        {
            self.load_sections(sections)?;
        }
        self.remote = None;
        Ok(())
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

    /// Fetches one key group's sections (in chain order) and loads them into the LSM: the
    /// base's entries put, each delta's applied on top.
    fn load_sections(&mut self, sections: Vec<RemoteSection>) -> Result<()> {
        let (what, ttl) = match &self.remote {
            Some(r) => (r.what.clone(), r.ttl),
            None => return Ok(()),
        };
        for s in sections {
            let bytes = remote::fetch(&s)?;
            if s.delta {
                self.apply_changes_inner(&what, &[bytes], ttl)?;
            } else {
                self.restore_inner(&what, &[bytes], ttl)?;
            }
        }
        Ok(())
    }
}
