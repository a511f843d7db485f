//! The LSM's encoding of keyed state: keys `prefix ‖ key_group (2 bytes, big-endian) ‖
//! postcard(key)`, values `postcard(value)` or with TTL `postcard((value, stamp))`.

use super::super::super::key_group::key_group;
use super::{Key, StateValue};
use crate::error::{Error, Result};

/// Encodes `k`'s LSM key into `buf`: `prefix`, its key group, then its postcard bytes.
pub(super) fn lsm_key<K: Key>(
    prefix: &[u8],
    k: &K,
    max_parallelism: u32,
    buf: &mut Vec<u8>,
) -> Result<()> {
    buf.clear();
    buf.extend_from_slice(prefix);
    let g = key_group(k, max_parallelism) as u16;
    buf.extend_from_slice(&g.to_be_bytes());
    let out = postcard::to_extend(k, std::mem::take(buf)).map_err(|e| Error::StateDecode {
        what: "a key of keyed state (encoding)".into(),
        cause: e.to_string(),
    })?;
    *buf = out;
    Ok(())
}

/// Encodes an LSM value into `buf` (cleared first): `postcard(v)`, or with TTL (`stamp`
/// set) `postcard((v, stamp))`. Into a buffer the caller reuses, because the LSM copies the
/// bytes anyway: a fresh `Vec` per value was one allocation and free per key written back.
pub(super) fn lsm_value_into<S: StateValue>(
    v: &S,
    stamp: Option<u64>,
    buf: &mut Vec<u8>,
) -> Result<()> {
    buf.clear();
    let taken = std::mem::take(buf);
    let out = match stamp {
        None => postcard::to_extend(v, taken),
        Some(stamp) => postcard::to_extend(&(v, stamp), taken),
    }
    .map_err(|e| Error::StateDecode {
        what: "keyed state written to disk (encoding)".into(),
        cause: e.to_string(),
    })?;
    *buf = out;
    Ok(())
}

/// Decodes one LSM entry: its key, its value and (`ttl`) its TTL stamp.
pub(super) fn decode_entry<K: Key, S: StateValue>(
    lsm_key: &[u8],
    prefix: usize,
    value: &[u8],
    ttl: bool,
) -> Result<(K, S, Option<u64>)> {
    let key = decode_key::<K>(lsm_key, prefix)?;
    let err = |e: postcard::Error| Error::StateDecode {
        what: "keyed state read from disk".into(),
        cause: e.to_string(),
    };
    Ok(if ttl {
        let (v, stamp) = postcard::from_bytes::<(S, u64)>(value).map_err(err)?;
        (key, v, Some(stamp))
    } else {
        (key, postcard::from_bytes(value).map_err(err)?, None)
    })
}

/// Decodes the user key of an LSM key (after its `prefix` bytes and two key-group bytes).
pub(super) fn decode_key<K: Key>(lsm_key: &[u8], prefix: usize) -> Result<K> {
    let bytes = lsm_key.get(prefix + 2..).unwrap_or_default();
    postcard::from_bytes(bytes).map_err(|e| Error::StateDecode {
        what: "a key of keyed state read from disk".into(),
        cause: e.to_string(),
    })
}
