//! The entries of one state's section of a key group, read one at a time — the one place
//! that knows how they are framed: `postcard((key, value))` pairs in a full keyed file,
//! `postcard((key, Option<value>))` in a delta (`checkpoint::layout`'s
//! `KEYED_DELTA_KIND`), concatenated without framing. The memory and disk backends' restores and inspection's decoding all
//! read deltas through [`Entries`], so a change of the delta's encoding is made once.
//!
//! `V` is the value as stored: the state's value, or `(value, stamp)` with a TTL.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

/// One entry of a section, with the bytes it was decoded from (what the disk backend
/// copies into its LSM without encoding again, and what inspection compares keys by).
#[derive(Debug)]
pub(crate) struct Entry<'a, K, V> {
    /// The key.
    pub key: K,
    /// The key's postcard encoding.
    pub key_bytes: &'a [u8],
    /// The value and its postcard encoding; `None`: a delta's delete.
    pub value: Option<(V, &'a [u8])>,
}

/// Why an entry did not decode, and at which byte of its section.
#[derive(Debug)]
pub(crate) struct EntryError {
    /// Offset of the entry's first byte in the section.
    pub at: usize,
    /// What was wrong.
    pub cause: String,
}

/// An iterator over the entries of a section: stops at the end of its bytes, or after the
/// first entry that does not decode (yielding that error).
pub(crate) struct Entries<'a, K, V> {
    section: &'a [u8],
    rest: &'a [u8],
    delta: bool,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<'a, K, V> Entries<'a, K, V> {
    /// The entries of a full file's section: every one `(key, value)`.
    pub(crate) fn full(section: &'a [u8]) -> Self {
        Self::new(section, false)
    }

    /// The entries of a delta's section: `(key, Some(value))` puts, `(key, None)` deletes.
    pub(crate) fn delta(section: &'a [u8]) -> Self {
        Self::new(section, true)
    }

    fn new(section: &'a [u8], delta: bool) -> Self {
        Self {
            section,
            rest: section,
            delta,
            _types: PhantomData,
        }
    }
}

impl<'a, K: DeserializeOwned, V: DeserializeOwned> Entries<'a, K, V> {
    fn decode(&self) -> Result<(Entry<'a, K, V>, &'a [u8]), String> {
        let rest = self.rest;
        let (key, after_key) =
            postcard::take_from_bytes::<K>(rest).map_err(|e| format!("reading a key: {e}"))?;
        let key_bytes = &rest[..rest.len() - after_key.len()];
        let value_bytes = if self.delta {
            match after_key.split_first() {
                None => return Err("an entry of a delta ends after its key".into()),
                Some((0, after)) => {
                    let entry = Entry {
                        key,
                        key_bytes,
                        value: None,
                    };
                    return Ok((entry, after));
                }
                Some((1, value)) => value,
                Some((other, _)) => {
                    return Err(format!(
                        "an entry of a delta has the tag {other}, not 0 or 1"
                    ))
                }
            }
        } else {
            after_key
        };
        let (value, after) = postcard::take_from_bytes::<V>(value_bytes)
            .map_err(|e| format!("reading a value: {e}"))?;
        let encoded = &value_bytes[..value_bytes.len() - after.len()];
        let entry = Entry {
            key,
            key_bytes,
            value: Some((value, encoded)),
        };
        Ok((entry, after))
    }
}

impl<'a, K: DeserializeOwned, V: DeserializeOwned> Iterator for Entries<'a, K, V> {
    type Item = Result<Entry<'a, K, V>, EntryError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let at = self.section.len() - self.rest.len();
        match self.decode() {
            Ok((entry, after)) => {
                self.rest = after;
                Some(Ok(entry))
            }
            Err(cause) => {
                self.rest = &[];
                Some(Err(EntryError { at, cause }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc<T: serde::Serialize>(v: &T, out: &mut Vec<u8>) {
        out.extend(postcard::to_allocvec(v).unwrap());
    }

    fn collect<V: DeserializeOwned>(
        it: Entries<'_, String, V>,
    ) -> Result<Vec<(String, Option<V>)>, EntryError> {
        it.map(|e| e.map(|e| (e.key, e.value.map(|(v, _)| v))))
            .collect()
    }

    #[test]
    fn full_and_delta_sections_decode_with_their_bytes() {
        let mut full = Vec::new();
        enc(&("a".to_string(), 1u64), &mut full);
        enc(&("bb".to_string(), 300u64), &mut full);
        let got = collect::<u64>(Entries::full(&full)).unwrap();
        assert_eq!(got, [("a".into(), Some(1)), ("bb".into(), Some(300))]);

        let mut delta = Vec::new();
        enc(&("a".to_string(), Some(7u64)), &mut delta);
        enc(&("c".to_string(), Option::<u64>::None), &mut delta);
        let got = collect::<u64>(Entries::delta(&delta)).unwrap();
        assert_eq!(got, [("a".into(), Some(7)), ("c".into(), None)]);

        // The bytes handed out are the entry's own: key ‖ value re-encode the pair.
        let first = Entries::<String, u64>::full(&full).next().unwrap().unwrap();
        let (_, value_bytes) = first.value.unwrap();
        assert_eq!([first.key_bytes, value_bytes].concat(), full[..3]);
    }

    #[test]
    fn a_bad_tag_a_cut_entry_and_a_wrong_type_are_errors_with_their_offset() {
        let mut delta = Vec::new();
        enc(&("a".to_string(), Some(7u64)), &mut delta);
        let good = delta.len();
        enc(&"b".to_string(), &mut delta);
        let mut bad_tag = delta.clone();
        bad_tag.push(2);
        let e = collect::<u64>(Entries::delta(&bad_tag)).unwrap_err();
        assert_eq!(e.at, good);
        assert!(e.cause.contains("tag 2"), "{}", e.cause);

        let e = collect::<u64>(Entries::delta(&delta)).unwrap_err();
        assert!(e.cause.contains("ends after its key"), "{}", e.cause);

        // A 5 where a bool stands: the value does not decode.
        let mut wrong = Vec::new();
        enc(&("a".to_string(), 5u8), &mut wrong);
        let mut it = Entries::<String, bool>::full(&wrong);
        let e = it.next().unwrap().unwrap_err();
        assert_eq!(e.at, 0);
        assert!(e.cause.contains("reading a value"), "{}", e.cause);
        // After an error the iterator ends.
        assert!(it.next().is_none());
    }
}
