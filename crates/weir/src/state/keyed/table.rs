//! The type-erased table behind every keyed state kind, and its snapshot.
//!
//! Every kind stores one value per key — the value itself, a list, an accumulator, a map —
//! so one generic [`Table`] over a copy-on-write map serves them all; the kind decides only
//! how functions reach the stored value (see `handles`).

use super::super::cow_map::{CowMap, CowSnapshot};
use super::super::key_group::{key_group, KeyGroupRange};
use super::super::{Key, StateKind, StateValue};
use super::ttl::{StateTtlConfig, Ttl};
use crate::error::{Error, Result};

/// One state table, type-erased so a backend can hold states of different value types.
pub(crate) trait StateTable<K>: Send {
    fn kind(&self) -> StateKind;
    /// Whether entries carry TTL stamps (recorded in the file: it changes the encoding).
    fn has_ttl(&self) -> bool;
    /// Synchronous phase: an immutable view that the asynchronous phase may encode.
    fn snapshot(&mut self) -> Box<dyn TableSnapshot>;
    /// Loads encoded entries (one key group's section) into the table.
    fn restore(&mut self, name: &str, bytes: &[u8]) -> Result<()>;
    fn len(&self) -> usize;
    /// Every key that has state in this table (for `apply_to_all_keys`).
    fn keys(&self) -> Vec<K>;
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

/// The stored value `S` of every key, for a state of kind `kind`, with optional TTL.
pub(crate) struct Table<K, S> {
    pub map: CowMap<K, S>,
    pub kind: StateKind,
    pub ttl: Option<Ttl<K>>,
}

impl<K: Key, S: StateValue> Table<K, S> {
    /// The map, after TTL bookkeeping for an access to `key` (a `write` refreshes it).
    #[inline]
    pub fn access(&mut self, key: &K, write: bool) -> &mut CowMap<K, S> {
        if let Some(ttl) = &mut self.ttl {
            ttl.on_access(
                &mut self.map,
                key,
                write,
                crate::runtime::executor::wall_ms(),
            );
        }
        &mut self.map
    }

    /// Whether `key`'s entry is live (not expired) — always, without TTL.
    pub fn live(&self, key: &K, now: u64) -> bool {
        self.ttl.as_ref().is_none_or(|t| t.live(key, now))
    }
}

/// The TTL part of a table view: stamps, the config, and the time of the snapshot.
struct TtlView<K> {
    stamps: CowSnapshot<K, u64>,
    cfg: StateTtlConfig,
    now: u64,
}

struct TableView<K, S> {
    map: CowSnapshot<K, S>,
    ttl: Option<TtlView<K>>,
}

impl<K: Key, S: StateValue> StateTable<K> for Table<K, S> {
    fn kind(&self) -> StateKind {
        self.kind
    }
    fn has_ttl(&self) -> bool {
        self.ttl.is_some()
    }
    fn snapshot(&mut self) -> Box<dyn TableSnapshot> {
        let now = crate::runtime::executor::wall_ms();
        Box::new(TableView {
            map: self.map.snapshot(),
            ttl: self.ttl.as_mut().map(|t| TtlView {
                stamps: t.stamps.snapshot(),
                cfg: t.cfg,
                now,
            }),
        })
    }
    fn restore(&mut self, name: &str, mut bytes: &[u8]) -> Result<()> {
        let err = |e: postcard::Error| Error::StateDecode {
            what: format!("keyed {} state '{name}'", self.kind.name()),
            cause: e.to_string(),
        };
        while !bytes.is_empty() {
            bytes = match &mut self.ttl {
                None => {
                    let ((k, v), rest): ((K, S), &[u8]) =
                        postcard::take_from_bytes(bytes).map_err(err)?;
                    self.map.insert(k, v);
                    rest
                }
                Some(ttl) => {
                    let ((k, (v, stamp)), rest): ((K, (S, u64)), &[u8]) =
                        postcard::take_from_bytes(bytes).map_err(err)?;
                    ttl.stamps.insert(k.clone(), stamp);
                    self.map.insert(k, v);
                    rest
                }
            };
        }
        Ok(())
    }
    fn len(&self) -> usize {
        self.map.len()
    }
    fn keys(&self) -> Vec<K> {
        self.map.iter().map(|(k, _)| k.clone()).collect()
    }
}

impl<K: Key, S: StateValue> TableSnapshot for TableView<K, S> {
    fn encode_groups(
        &self,
        max_parallelism: u32,
        range: KeyGroupRange,
        out: &mut [Vec<u8>],
    ) -> Result<u64> {
        let mut written = 0;
        for (k, v) in self.map.iter() {
            // Expired entries are left out (with TTL each entry carries its stamp).
            let stamp = match &self.ttl {
                None => None,
                Some(t) => match t.stamps.get(k) {
                    Some(s) if t.now < s.saturating_add(t.cfg.ttl_ms()) => Some(*s),
                    _ => continue,
                },
            };
            let g = key_group(k, max_parallelism);
            if !range.contains(g) {
                return Err(Error::InvalidJob(format!(
                    "a key in keyed state belongs to key group {g}, outside this subtask's range {}..{}; \
                     is the key_by function deterministic?",
                    range.start, range.end
                )));
            }
            let slot = &mut out[(g - range.start) as usize];
            let buf = std::mem::take(slot);
            let encoded = match stamp {
                None => postcard::to_extend(&(k, v), buf),
                Some(s) => postcard::to_extend(&(k, (v, s)), buf),
            };
            *slot = encoded.map_err(|e| Error::StateDecode {
                what: "keyed state (encoding)".into(),
                cause: e.to_string(),
            })?;
            written += 1;
        }
        Ok(written)
    }
}
