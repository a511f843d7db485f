//! A table's snapshot on its way to storage, shard by shard.
//!
//! The view holds the snapshot's shards (one slot per shard of the copy-on-write map). The
//! writer thread takes the shards one after another, encodes each — its entries grouped by
//! key group, which is how the file lays them out — and lets go of it at once. When the
//! processing thread must write to a shard the writer has not reached, the map asks the view
//! to let go first ([`ShardRelease`]): the view encodes that shard on the spot and keeps the
//! bytes (far smaller than the table) for the writer, so the map takes its table back
//! without a copy. Either way every shard is encoded exactly once, from the tables as they
//! were at the barrier.
//!
//! A TTL'd table's values and stamps are maps with the same key type, so shard `i` of both
//! holds the same keys: a slot holds both, and they are encoded (and let go of) together.

use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard};

use super::super::cow_map::{CowSnapshot, ShardRelease, SharedShard};
use super::super::key_group::{stable_hash, KeyGroupRange};
use super::super::{Key, StateValue};
use super::table::EncodedShard;
use super::ttl::StateTtlConfig;
use crate::error::{Error, Result};

/// Scratch buffers above this total capacity are not kept between encodings.
const SCRATCH_KEEP: usize = 16 << 20;

thread_local! {
    /// One buffer per key group, where a shard's entries are sorted by group as they are
    /// encoded; reused from shard to shard (on the processing thread and each writer).
    static SCRATCH: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Why a shard could not be encoded (kept until the writer reports it).
#[derive(Debug, Clone)]
enum EncodeError {
    /// A key of key group `.0`, outside the view's range.
    Stray(u32),
    /// Serialization failed.
    Encode(String),
}

/// The state of one shard of the view.
enum Slot<K, S> {
    /// Not encoded yet: the snapshot's tables (values, and stamps with TTL).
    Live {
        map: SharedShard<K, S>,
        stamps: Option<SharedShard<K, u64>>,
    },
    /// Encoded by the processing thread before a write, waiting for the writer.
    Encoded(EncodedShard),
    /// Encoding on the processing thread failed; the writer reports it.
    Failed(EncodeError),
    /// Handed to the writer.
    Taken,
}

/// See the module docs.
pub(super) struct View<K, S> {
    slots: Vec<Mutex<Slot<K, S>>>,
    range: KeyGroupRange,
    max_parallelism: u32,
    /// The TTL config and the time of the snapshot, for TTL'd tables.
    ttl: Option<(StateTtlConfig, u64)>,
}

impl<K: Key, S: StateValue> View<K, S> {
    /// A view of `map` (with TTL: its stamps, the config and the time of the snapshot),
    /// whose keys belong to key groups `range` of `max_parallelism`.
    pub fn new(
        map: CowSnapshot<K, S>,
        ttl: Option<(CowSnapshot<K, u64>, StateTtlConfig, u64)>,
        range: KeyGroupRange,
        max_parallelism: u32,
    ) -> Self {
        let shards = map.into_shards();
        let (mut stamps, ttl) = match ttl {
            Some((stamps, cfg, now)) => (
                stamps.into_shards().into_iter().map(Some).collect(),
                Some((cfg, now)),
            ),
            None => (Vec::new(), None),
        };
        stamps.resize_with(shards.len(), || None);
        View {
            slots: shards
                .into_iter()
                .zip(stamps)
                .map(|(map, stamps)| Mutex::new(Slot::Live { map, stamps }))
                .collect(),
            range,
            max_parallelism: max_parallelism.max(1),
            ttl,
        }
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.slots.len()
    }

    fn slot(&self, i: usize) -> MutexGuard<'_, Slot<K, S>> {
        self.slots[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer's side: shard `i`'s entries, encoded now or by the processing thread
    /// before, and the view lets go of the shard.
    pub fn take(&self, i: usize) -> Result<EncodedShard> {
        let slot = std::mem::replace(&mut *self.slot(i), Slot::Taken);
        let encoded = match slot {
            // Encoded outside the lock: the processing thread, if it needs this shard
            // meanwhile, copies it rather than wait.
            Slot::Live { map, stamps } => self.encode_grouped(&map, stamps.as_ref()),
            Slot::Encoded(e) => Ok(e),
            Slot::Failed(e) => Err(e),
            Slot::Taken => Err(EncodeError::Encode(format!(
                "shard {i} of a snapshot was taken twice"
            ))),
        };
        encoded.map_err(|e| self.error(e))
    }

    fn error(&self, e: EncodeError) -> Error {
        match e {
            EncodeError::Stray(g) => Error::InvalidJob(format!(
                "a key in keyed state belongs to key group {g}, outside this subtask's range \
                 {}..{}; is the key_by function deterministic?",
                self.range.start, self.range.end
            )),
            EncodeError::Encode(cause) => Error::StateDecode {
                what: "keyed state (encoding)".into(),
                cause,
            },
        }
    }

    /// The key group of `k` (as `key_group::key_group`, with a mask for the usual power of
    /// two: this runs for every entry of every snapshot).
    fn group_of(&self, k: &K) -> u32 {
        let h = stable_hash(k);
        let m = self.max_parallelism as u64;
        (if m.is_power_of_two() {
            h & (m - 1)
        } else {
            h % m
        }) as u32
    }

    /// Encodes the live entries of one shard, grouped by key group (with TTL each carries
    /// its stamp, and expired entries are left out).
    fn encode_grouped(
        &self,
        map: &SharedShard<K, S>,
        stamps: Option<&SharedShard<K, u64>>,
    ) -> std::result::Result<EncodedShard, EncodeError> {
        SCRATCH.with(|scratch| {
            let mut groups = scratch.borrow_mut();
            groups.resize_with(self.range.len() as usize, Vec::new);
            groups.iter_mut().for_each(Vec::clear);
            let result = self.encode_into(map, stamps, &mut groups);
            if groups.iter().map(Vec::capacity).sum::<usize>() > SCRATCH_KEEP {
                *groups = Vec::new();
            }
            result
        })
    }

    fn encode_into(
        &self,
        map: &SharedShard<K, S>,
        stamps: Option<&SharedShard<K, u64>>,
        groups: &mut [Vec<u8>],
    ) -> std::result::Result<EncodedShard, EncodeError> {
        let mut entries = 0;
        for (k, v) in map.iter() {
            let stamp = match &self.ttl {
                None => None,
                Some((cfg, now)) => match stamps.and_then(|s| s.get(k)) {
                    Some(s) if *now < s.saturating_add(cfg.ttl_ms()) => Some(*s),
                    _ => continue,
                },
            };
            let g = self.group_of(k);
            if !self.range.contains(g) {
                return Err(EncodeError::Stray(g));
            }
            let slot = &mut groups[(g - self.range.start) as usize];
            let buf = std::mem::take(slot);
            let encoded = match stamp {
                None => postcard::to_extend(&(k, v), buf),
                Some(s) => postcard::to_extend(&(k, (v, s)), buf),
            };
            *slot = encoded.map_err(|e| EncodeError::Encode(e.to_string()))?;
            entries += 1;
        }
        let mut out = EncodedShard {
            bytes: Vec::with_capacity(groups.iter().map(Vec::len).sum()),
            runs: Vec::new(),
            entries,
        };
        for (g, run) in (self.range.start..).zip(groups.iter()) {
            if !run.is_empty() {
                out.bytes.extend_from_slice(run);
                out.runs.push((g, run.len()));
            }
        }
        Ok(out)
    }
}

impl<K: Key, S: StateValue> ShardRelease for View<K, S> {
    /// The processing thread's side: encodes shard `shard` if the writer has not taken it,
    /// and drops the view's hold on its tables. If the writer is encoding it right now, the
    /// map copies that one shard instead of waiting.
    fn release(&self, shard: usize) {
        let mut slot = self.slot(shard);
        if !matches!(&*slot, Slot::Live { .. }) {
            return;
        }
        let Slot::Live { map, stamps } = std::mem::replace(&mut *slot, Slot::Taken) else {
            unreachable!("checked above")
        };
        *slot = match self.encode_grouped(&map, stamps.as_ref()) {
            Ok(e) => Slot::Encoded(e),
            Err(e) => Slot::Failed(e),
        };
    }
}
