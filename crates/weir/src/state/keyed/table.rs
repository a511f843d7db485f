//! The type-erased table behind every keyed state kind, and its snapshot.
//!
//! Every kind stores one value per key — the value itself, a list, an accumulator, a map —
//! so one generic [`Table`] over a copy-on-write map serves them all; the kind decides only
//! how functions reach the stored value (see `handles`).

use std::sync::{Arc, Weak};

use super::super::cow_map::CowMap;
use super::super::key_group::KeyGroupRange;
use super::super::{Key, StateKind, StateValue};
use super::ttl::Ttl;
use super::view::View;
use crate::error::{Error, Result};

/// One state table, type-erased so a backend can hold states of different value types.
pub(crate) trait StateTable<K>: Send {
    fn kind(&self) -> StateKind;
    /// Whether entries carry TTL stamps (recorded in the file: it changes the encoding).
    fn has_ttl(&self) -> bool;
    /// Synchronous phase: an immutable view that the asynchronous phase may encode; its
    /// keys belong to key groups `range` of `max_parallelism`.
    fn snapshot(&mut self, range: KeyGroupRange, max_parallelism: u32) -> Box<dyn TableSnapshot>;
    /// Loads encoded entries (one key group's section) into the table.
    fn restore(&mut self, name: &str, bytes: &[u8]) -> Result<()>;
    fn len(&self) -> usize;
    /// Every key that has state in this table (for `apply_to_all_keys`).
    fn keys(&self) -> Vec<K>;
}

/// The encoded entries of one shard of a table's view, grouped by key group: the writer
/// lays the groups out in key-group order across shards.
#[derive(Debug, Clone, Default)]
pub struct EncodedShard {
    /// The entries, each key group's run after the other.
    pub bytes: Vec<u8>,
    /// `(key group, byte length)` of each run of `bytes`, in ascending key-group order.
    pub runs: Vec<(u32, usize)>,
    /// Number of entries.
    pub entries: u64,
}

/// An immutable view of one table, encoded shard by shard off the processing thread (or
/// by the processing thread, for a shard it must write to before the writer got there:
/// see [`crate::state::cow_map::ShardRelease`]).
pub trait TableSnapshot: Send {
    /// Number of shards; shard `i` of every table of a backend holds the same keys.
    fn shards(&self) -> usize;

    /// Shard `shard`'s live entries, encoded and grouped by key group. Each shard is taken
    /// once: the view lets go of it (so the processing thread writes to it without a copy).
    fn take_shard(&self, shard: usize) -> Result<EncodedShard>;

    /// Appends the entries of each key group in `range` to `out[group - range.start]`,
    /// returning the number of entries written (every shard, taken in memory: for tests
    /// and small states; the writer streams instead).
    fn encode_groups(
        &self,
        _max_parallelism: u32,
        range: KeyGroupRange,
        out: &mut [Vec<u8>],
    ) -> Result<u64> {
        let mut written = 0;
        for i in 0..self.shards() {
            let shard = self.take_shard(i)?;
            let mut at = 0;
            for (g, len) in shard.runs {
                out[(g - range.start) as usize].extend_from_slice(&shard.bytes[at..at + len]);
                at += len;
            }
            written += shard.entries;
        }
        Ok(written)
    }
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

impl<K: Key, S: StateValue> StateTable<K> for Table<K, S> {
    fn kind(&self) -> StateKind {
        self.kind
    }
    fn has_ttl(&self) -> bool {
        self.ttl.is_some()
    }
    fn snapshot(&mut self, range: KeyGroupRange, max_parallelism: u32) -> Box<dyn TableSnapshot> {
        let now = crate::runtime::executor::wall_ms();
        let map = self.map.snapshot();
        let ttl = self.ttl.as_mut().map(|t| (t.stamps.snapshot(), t.cfg, now));
        let view = Arc::new(View::new(map, ttl, range, max_parallelism));
        let weak: Weak<View<K, S>> = Arc::downgrade(&view);
        self.map.watch(weak.clone());
        if let Some(t) = &mut self.ttl {
            t.stamps.watch(weak);
        }
        Box::new(TableView(view))
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

/// A table's view on its way to storage (see [`View`]).
struct TableView<K, S>(Arc<View<K, S>>);

impl<K: Key, S: StateValue> TableSnapshot for TableView<K, S> {
    fn shards(&self) -> usize {
        self.0.shards()
    }

    fn take_shard(&self, shard: usize) -> Result<EncodedShard> {
        self.0.take(shard)
    }
}
