//! The firing order of timers on disk: a keyspace per timer domain in the subtask's LSM.

use std::sync::Arc;

use super::super::super::Key;
use super::{lsm_error, DiskStore};
use crate::error::{Error, Result};

impl DiskStore {
    /// The firing order of the timers of table `name` (a keyspace of its own, empty: it is
    /// rebuilt from the timers table, never snapshotted).
    pub(crate) fn timer_order<K: Key>(self: &Arc<Self>, name: &str) -> Result<DiskTimerOrder<K>> {
        let ks = self
            .db
            .keyspace(&format!("order{name}"), || self.options.keyspace())
            .map_err(|e| lsm_error(&self.dir, e))?;
        Ok(DiskTimerOrder {
            store: self.clone(),
            ks,
            from: Vec::new(),
            buf: Vec::new(),
            _k: std::marker::PhantomData,
        })
    }
}

/// The firing order of one timer domain on disk (Flink keeps its timers in RocksDB too):
/// keys `time (8 bytes, big-endian) ‖ postcard(key)` with no value, so the earliest timer
/// is the keyspace's first key and the order costs no memory per timer.
///
/// Fired timers leave tombstones at the front of the keyspace until a compaction drops
/// them, and an LSM seek from the start steps over every one (firing n timers would cost
/// n²): the search starts after the last timer removed instead, moved back by any timer
/// registered before it.
pub(crate) struct DiskTimerOrder<K> {
    store: Arc<DiskStore>,
    ks: fjall::Keyspace,
    /// No timer's key is below this (the successor of the last one fired, or lower).
    from: Vec<u8>,
    buf: Vec<u8>,
    _k: std::marker::PhantomData<fn() -> K>,
}

impl<K: Key> DiskTimerOrder<K> {
    fn encode(&mut self, time: u64, key: &K) -> Result<Vec<u8>> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.extend_from_slice(&time.to_be_bytes());
        postcard::to_extend(key, buf).map_err(|e| Error::StateDecode {
            what: "a timer's key (encoding)".into(),
            cause: e.to_string(),
        })
    }

    /// Adds the timer (time, key).
    pub(crate) fn insert(&mut self, time: u64, key: &K) -> Result<()> {
        let k = self.encode(time, key)?;
        if k < self.from {
            self.from.clone_from(&k);
        }
        let r = self.ks.insert(k.as_slice(), []);
        self.buf = k;
        r.map_err(|e| lsm_error(&self.store.dir, e))
    }

    /// Removes the timer (time, key).
    pub(crate) fn remove(&mut self, time: u64, key: &K) -> Result<()> {
        let k = self.encode(time, key)?;
        let r = self.ks.remove(k.as_slice());
        self.buf = k;
        r.map_err(|e| lsm_error(&self.store.dir, e))
    }

    /// Removes the earliest timer, which [`DiskTimerOrder::first`] returned as `(time,
    /// key)`: no timer is below it any more.
    pub(crate) fn remove_first(&mut self, time: u64, key: &K) -> Result<()> {
        let mut k = self.encode(time, key)?;
        let r = self.ks.remove(k.as_slice());
        k.push(0); // the least key above it
        self.from = k;
        r.map_err(|e| lsm_error(&self.store.dir, e))
    }

    /// The earliest timer, if any.
    pub(crate) fn first(&self) -> Result<Option<(u64, K)>> {
        let Some(guard) = self.ks.range(self.from.as_slice()..).next() else {
            return Ok(None);
        };
        let k = guard.key().map_err(|e| lsm_error(&self.store.dir, e))?;
        let bad = |cause: String| Error::StateDecode {
            what: "a timer read from disk".into(),
            cause,
        };
        let (time, key) = k
            .split_at_checked(8)
            .ok_or_else(|| bad("too short".into()))?;
        let time = u64::from_be_bytes(time.try_into().map_err(|_| bad("too short".into()))?);
        let key = postcard::from_bytes(key).map_err(|e| bad(e.to_string()))?;
        Ok(Some((time, key)))
    }
}
