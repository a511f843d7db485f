//! Loading a checkpoint into a tier: a base's entries put into the LSM, an incremental
//! delta's changes applied on top; on a decode error the state is left empty.

use super::super::super::key_group::key_group;
use super::{DiskTier, Key, StateValue};
use crate::error::{Error, Result};
use crate::state::keyed::entries::Entries;
use crate::storage::shared_bytes::SharedBytes;

impl<K: Key, S: StateValue> DiskTier<K, S> {
    /// Applies the changes of incremental deltas on top of a restored base: `sections` (one
    /// per key group and delta, in chain order) hold `postcard((k, Option<v>))` entries (with
    /// TTL `Option<(v, stamp)>`), each checked to decode; a `None` deletes the key.
    pub(crate) fn apply_changes(
        &mut self,
        what: &str,
        sections: &[SharedBytes],
        ttl: bool,
    ) -> Result<()> {
        let result = self.apply_changes_inner(what, sections, ttl);
        if result.is_err() {
            self.clear()?;
        }
        result
    }

    pub(super) fn apply_changes_inner(
        &mut self,
        what: &str,
        sections: &[SharedBytes],
        ttl: bool,
    ) -> Result<()> {
        let mut key = Vec::new();
        // One batch per section: a key appears at most once in a section, while later
        // sections (later deltas) must override earlier ones.
        for section in sections {
            let mut batch = self.store.db.batch().durability(None);
            if ttl {
                self.batch_changes::<(S, u64)>(what, section, &mut key, &mut batch)?;
            } else {
                self.batch_changes::<S>(what, section, &mut key, &mut batch)?;
            }
            batch.commit().map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Adds one delta section's changes to `batch`: a put of the stored bytes for
    /// `(k, Some(v))` (`V`: the value as stored, with its stamp under TTL, decoded only to
    /// check it), a remove for `(k, None)`.
    fn batch_changes<V: serde::de::DeserializeOwned>(
        &mut self,
        what: &str,
        section: &[u8],
        key: &mut Vec<u8>,
        batch: &mut fjall::OwnedWriteBatch,
    ) -> Result<()> {
        for entry in Entries::<K, V>::delta(section) {
            let entry = entry.map_err(|e| Error::StateDecode {
                what: what.to_string(),
                cause: format!("byte {} of a delta's section: {}", e.at, e.cause),
            })?;
            key.clear();
            key.extend_from_slice(&self.prefix);
            let g = key_group(&entry.key, self.max_parallelism) as u16;
            key.extend_from_slice(&g.to_be_bytes());
            key.extend_from_slice(entry.key_bytes);
            match entry.value {
                Some((_, value)) => {
                    // Before the LSM can hold it.
                    self.filter.insert(key);
                    batch.insert(&self.ks, key.as_slice(), value)
                }
                None => batch.remove(&self.ks, key.as_slice()),
            }
        }
        Ok(())
    }

    /// Loads encoded sections (one per key group, each entry `postcard((k, v))` or with
    /// TTL `postcard((k, (v, stamp)))`) into the LSM, checking that every entry decodes;
    /// on an error the state is left empty.
    pub(crate) fn restore(
        &mut self,
        what: &str,
        sections: &[SharedBytes],
        ttl: bool,
    ) -> Result<()> {
        self.settle()?;
        let result = self.restore_inner(what, sections, ttl);
        if result.is_err() {
            self.clear()?;
        }
        result
    }

    pub(super) fn restore_inner(
        &mut self,
        what: &str,
        sections: &[SharedBytes],
        ttl: bool,
    ) -> Result<()> {
        /// Entries, and bytes, per write batch: bound the memory a restore holds (a batch
        /// copies its entries; 64 Ki entries of 64 KiB values would be 4 GiB).
        const BATCH: usize = 1 << 16;
        const BATCH_BYTES: usize = 4 << 20;
        let err = |e: postcard::Error| Error::StateDecode {
            what: what.to_string(),
            cause: e.to_string(),
        };
        let mut batch = self.store.db.batch().durability(None);
        let (mut key, mut bytes) = (Vec::new(), 0);
        for section in sections {
            let mut rest: &[u8] = section;
            while !rest.is_empty() {
                let (k, after_key) = postcard::take_from_bytes::<K>(rest).map_err(err)?;
                let after_value = if ttl {
                    postcard::take_from_bytes::<(S, u64)>(after_key)
                        .map_err(err)?
                        .1
                } else {
                    postcard::take_from_bytes::<S>(after_key).map_err(err)?.1
                };
                let key_len = rest.len() - after_key.len();
                let value_len = after_key.len() - after_value.len();
                key.clear();
                key.extend_from_slice(&self.prefix);
                let g = key_group(&k, self.max_parallelism) as u16;
                key.extend_from_slice(&g.to_be_bytes());
                key.extend_from_slice(&rest[..key_len]);
                // Before the LSM can hold it.
                self.filter.insert(&key);
                batch.insert(&self.ks, key.as_slice(), &after_key[..value_len]);
                bytes += key.len() + value_len;
                if batch.len() >= BATCH || bytes >= BATCH_BYTES {
                    bytes = 0;
                    let full =
                        std::mem::replace(&mut batch, self.store.db.batch().durability(None));
                    self.store.commit(&self.ks, full, BATCH_BYTES)?;
                }
                rest = after_value;
            }
        }
        self.store.commit(&self.ks, batch, bytes)
    }
}
