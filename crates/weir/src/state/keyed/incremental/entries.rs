//! The delta entries a barrier's write-back encodes as it goes ([`DeltaEntries`]), so an
//! incremental checkpoint's delta takes them as they are instead of looking each key up
//! again in the LSM (docs/design-notes.md, "Incremental checkpoints": "A delta fed from the
//! write-back").

/// Where one entry lies in [`DeltaEntries::bytes`].
#[derive(Debug, Clone, Copy)]
struct EntryAt {
    /// Its key group (the LSM key's first two bytes).
    group: u16,
    /// Where it starts.
    start: usize,
    /// Length of its key tail (`postcard(key)`).
    key_len: u32,
    /// Length of the whole entry (key tail, tag and value).
    len: u32,
}

/// The entries of one write-back in a delta's encoding, `postcard((key, Option<value>))`
/// — the LSM key's tail, a tag byte (1: the LSM value follows; 0: deleted) — in the
/// write-back's order, which is LSM-key order and so key-group order.
///
/// Memory: the same bytes the write-back's batch holds (key and value once more, plus 20
/// bytes of index per entry), held from the write-back until the delta that reads them is
/// written, or dropped when no delta will (a base instead, a savepoint, the next barrier).
#[derive(Debug, Default)]
pub struct DeltaEntries {
    bytes: Vec<u8>,
    index: Vec<EntryAt>,
}

/// One entry: its key tail and its LSM value (`None`: deleted).
pub(crate) type Entry<'a> = (&'a [u8], Option<&'a [u8]>);

impl DeltaEntries {
    /// Room for `entries` entries.
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn with_capacity(entries: usize) -> Self {
        DeltaEntries {
            bytes: Vec::new(),
            index: Vec::with_capacity(entries),
        }
    }

    /// Appends the entry of LSM key `key` (key group ‖ postcard(key), after the tier's
    /// prefix) with its LSM `value`, or a delete; keys come in ascending order. A key too
    /// short to hold a key group (none is) is left out.
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let Some((group, tail)) = key.split_first_chunk::<2>() else {
            return;
        };
        let start = self.bytes.len();
        self.bytes.extend_from_slice(tail);
        match value {
            Some(v) => {
                self.bytes.push(1);
                self.bytes.extend_from_slice(v);
            }
            None => self.bytes.push(0),
        }
        self.index.push(EntryAt {
            group: u16::from_be_bytes(*group),
            start,
            key_len: tail.len() as u32,
            len: (self.bytes.len() - start) as u32,
        });
    }

    /// Number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// The entries of key group `group`, in key order.
    #[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
    pub(crate) fn group(&self, group: u32) -> impl Iterator<Item = Entry<'_>> + '_ {
        let from = self.index.partition_point(|e| (e.group as u32) < group);
        let to = self.index.partition_point(|e| (e.group as u32) <= group);
        self.index[from..to].iter().map(|e| {
            let entry = &self.bytes[e.start..e.start + e.len as usize];
            let (key, rest) = entry.split_at(e.key_len as usize);
            let value = (rest.first() == Some(&1)).then(|| &rest[1..]);
            (key, value)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_back_by_key_group_with_their_values_and_deletes() {
        let mut e = DeltaEntries::with_capacity(4);
        e.push(&[0, 1, 7], Some(b"a"));
        e.push(&[0, 1, 8], None);
        e.push(&[0, 3, 9, 9], Some(b""));
        e.push(&[5], Some(b"x")); // no key group: left out
        assert_eq!(e.len(), 3);
        let g1: Vec<_> = e.group(1).collect();
        assert_eq!(g1, [(&[7u8][..], Some(&b"a"[..])), (&[8u8][..], None)]);
        assert_eq!(e.group(2).count(), 0);
        assert_eq!(
            e.group(3).collect::<Vec<_>>(),
            [(&[9u8, 9][..], Some(&b""[..]))]
        );
        assert_eq!(e.group(4).count(), 0);
    }
}
