//! Streaming a task's keyed state into a keyed-state file, laid out by key group
//! ([`layout`](crate::checkpoint::layout)) without holding the state's encoding in memory.

use super::super::layout::KeyedFileEncoder;
use super::super::storage::{PayloadWriter, SpillFile};
use super::StateBytes;
use crate::error::Result;
use crate::state::keyed::{EncodedShard, FileIndex, GroupSpans, KeyedSnapshot, SectionSpan};
use crate::state::StateKind;

/// Where an encoded keyed-state payload goes: a file being written, or memory.
pub(super) trait Sink {
    fn put(&mut self, bytes: &[u8]) -> Result<()>;
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.extend_from_slice(bytes);
        Ok(())
    }
}

impl Sink for SpillFile {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.append(bytes)?;
        Ok(())
    }
}

impl Sink for PayloadWriter {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        Ok(self.write(bytes)?)
    }
}

/// Where encoded shards wait to be laid out by key group: a scratch file (or memory, in
/// tests).
pub(super) trait Spill {
    /// Appends `bytes`, returning the offset they start at.
    fn append(&mut self, bytes: &[u8]) -> Result<u64>;
    /// Fills `buf` from offset `at`.
    fn read_at(&mut self, at: u64, buf: &mut [u8]) -> Result<()>;
}

impl Spill for SpillFile {
    fn append(&mut self, bytes: &[u8]) -> Result<u64> {
        Ok(SpillFile::append(self, bytes)?)
    }
    fn read_at(&mut self, at: u64, buf: &mut [u8]) -> Result<()> {
        Ok(SpillFile::read_at(self, at, buf)?)
    }
}

impl Spill for Vec<u8> {
    fn append(&mut self, bytes: &[u8]) -> Result<u64> {
        let at = self.len() as u64;
        self.extend_from_slice(bytes);
        Ok(at)
    }
    fn read_at(&mut self, at: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(&self[at as usize..at as usize + buf.len()]);
        Ok(())
    }
}

/// How many bytes of encoded keyed state a writer holds in memory before it moves them to
/// a spill file (see [`stream_keyed`]).
pub(super) const SPILL_BUDGET: usize = 8 << 20;

/// Encoded shards on their way into a file laid out by key group: regrouped in memory,
/// and moved to a spill file (still grouped) whenever they exceed the budget.
struct Regroup<S> {
    /// `[table][group]`: the current batch's bytes.
    batch: Vec<Vec<Vec<u8>>>,
    batch_bytes: usize,
    /// `[table][group]`: `(offset, length)` of the group's run in each spilled batch.
    spilled: Vec<Vec<Vec<(u64, usize)>>>,
    spill: Option<S>,
}

impl<S: Spill> Regroup<S> {
    fn new(tables: usize, groups: usize) -> Self {
        Regroup {
            batch: vec![vec![Vec::new(); groups]; tables],
            batch_bytes: 0,
            spilled: vec![vec![Vec::new(); groups]; tables],
            spill: None,
        }
    }

    /// Adds table `t`'s shard, returning its bytes; spills the batch if it is over
    /// `budget`.
    fn add(
        &mut self,
        t: usize,
        shard: &EncodedShard,
        first_group: u32,
        budget: usize,
        new_spill: &mut impl FnMut() -> Result<S>,
    ) -> Result<u64> {
        let mut at = 0;
        for &(g, len) in &shard.runs {
            self.batch[t][(g - first_group) as usize].extend_from_slice(&shard.bytes[at..at + len]);
            at += len;
        }
        self.batch_bytes += at;
        if self.batch_bytes > budget {
            let spill = match &mut self.spill {
                Some(spill) => spill,
                None => self.spill.insert(new_spill()?),
            };
            for (runs, spilled) in self
                .batch
                .iter_mut()
                .flatten()
                .zip(self.spilled.iter_mut().flatten())
            {
                if !runs.is_empty() {
                    spilled.push((spill.append(runs)?, runs.len()));
                    // Freed, not cleared: a batch holds at most the budget, not its peak.
                    *runs = Vec::new();
                }
            }
            self.batch_bytes = 0;
        }
        Ok(at as u64)
    }

    /// Whether key group index `g` has entries in any table.
    /// The length of table `t`'s section of key group index `g`.
    fn section_len(&self, t: usize, g: usize) -> usize {
        self.spilled[t][g].iter().map(|(_, len)| len).sum::<usize>() + self.batch[t][g].len()
    }

    fn has(&self, g: usize) -> bool {
        (0..self.batch.len())
            .any(|t| !self.batch[t][g].is_empty() || !self.spilled[t][g].is_empty())
    }

    /// Writes table `t`'s section of key group index `g` (its length, then its bytes) to
    /// `sink`, after `frame`.
    /// Returns the section's length and CRC-32C (for the file's index).
    fn write_section(
        &mut self,
        t: usize,
        g: usize,
        frame: &mut Vec<u8>,
        buf: &mut Vec<u8>,
        sink: &mut impl Sink,
    ) -> Result<(u64, u32)> {
        let spilled = &self.spilled[t][g];
        let len = spilled.iter().map(|(_, len)| len).sum::<usize>() + self.batch[t][g].len();
        KeyedFileEncoder::section(len, frame);
        sink.put(frame)?;
        frame.clear();
        let mut crc = 0;
        for &(at, len) in spilled {
            if let Some(spill) = &mut self.spill {
                buf.resize(len, 0);
                spill.read_at(at, buf)?;
                crc = crc32c::crc32c_append(crc, buf);
                sink.put(buf)?;
            }
        }
        let rest = std::mem::take(&mut self.batch[t][g]);
        crc = crc32c::crc32c_append(crc, &rest);
        sink.put(&rest)?;
        Ok((len as u64, crc))
    }
}

/// A sink that counts the bytes put through it: where each section starts, for the index.
struct Counted<'a, S> {
    inner: &'a mut S,
    at: u64,
}

impl<S: Sink> Sink for Counted<'_, S> {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.at += bytes.len() as u64;
        self.inner.put(bytes)
    }
}

/// What [`stream_keyed`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Streamed {
    /// Entries across all states.
    pub(super) entries: u64,
    /// Per state (the snapshot's tables, in order): its name and its encoded bytes, for
    /// the dashboard's state sizes.
    pub(super) states: Vec<StateBytes>,
    /// Where each key group's sections lie, offsets counted from the payload's start.
    pub(super) index: FileIndex,
}

/// Encodes `keyed` into `sink` as the payload of a keyed-state file
/// ([`KeyedStateFile`](crate::checkpoint::layout::KeyedStateFile)), returning the number
/// of entries and each state's bytes.
///
/// The tables are sharded by hash and the file is laid out by key group, so this goes in
/// two passes. First every shard of every table is taken from its view (encoded, grouped by
/// key group, and let go of, so the processing thread can write to it without a copy) and
/// regrouped: in memory up to `budget` bytes, then in batches appended to a spill file
/// (made by `new_spill` when first needed). Then the file is written key group by key
/// group, each section gathered from the batches. Memory holds at most the budget, one
/// shard's encoding and one run, never the whole state or its encoding.
///
/// The bytes are exactly those of the derived encoding of a `KeyedStateFile` with the
/// same content (tested): [`KeyedFileEncoder`] lays out the pieces, whose lengths are all
/// known once the first pass is done.
pub(super) fn stream_keyed<S: Spill>(
    keyed: &KeyedSnapshot,
    sink: &mut impl Sink,
    budget: usize,
    mut new_spill: impl FnMut() -> Result<S>,
) -> Result<Streamed> {
    let range = keyed.range;
    let mut regroup = Regroup::new(keyed.tables.len(), range.len() as usize);
    let mut entries = 0;
    let mut sizes = Vec::with_capacity(keyed.tables.len());
    for (t, table) in keyed.tables.iter().enumerate() {
        let mut bytes = 0;
        for i in 0..table.view.shards() {
            let shard = table.view.take_shard(i)?;
            bytes += regroup.add(t, &shard, range.start, budget, &mut new_spill)?;
            entries += shard.entries;
        }
        sizes.push(StateBytes {
            name: table.name.clone(),
            keyed: true,
            bytes,
        });
    }
    let groups: Vec<usize> = (0..range.len() as usize)
        .filter(|&g| regroup.has(g))
        .collect();
    let states: Vec<(&str, StateKind)> = keyed
        .tables
        .iter()
        .map(|t| (t.name.as_str(), t.kind))
        .collect();
    let mut frame = Vec::new();
    KeyedFileEncoder::header(
        range,
        keyed.max_parallelism,
        &states,
        groups.len(),
        &mut frame,
    )?;
    let mut buf = Vec::new();
    let mut sink = Counted { inner: sink, at: 0 };
    let mut spans = Vec::with_capacity(groups.len());
    for g in groups {
        let group = range.start + g as u32;
        KeyedFileEncoder::group(group, keyed.tables.len(), &mut frame);
        let mut sections = Vec::with_capacity(keyed.tables.len());
        for t in 0..keyed.tables.len() {
            let mut len_prefix = Vec::new();
            KeyedFileEncoder::section(regroup.section_len(t, g), &mut len_prefix);
            // The section's bytes start after what is framed before them and their length.
            let offset = sink.at + (frame.len() + len_prefix.len()) as u64;
            let (len, crc32c) = regroup.write_section(t, g, &mut frame, &mut buf, &mut sink)?;
            sections.push(SectionSpan {
                offset,
                len,
                crc32c,
            });
        }
        spans.push(GroupSpans { group, sections });
    }
    let ttl: Vec<bool> = keyed.tables.iter().map(|t| t.ttl).collect();
    KeyedFileEncoder::trailer(&ttl, &mut frame)?;
    sink.put(&frame)?;
    Ok(Streamed {
        entries,
        states: sizes,
        index: FileIndex {
            states: states
                .iter()
                .map(|(name, kind)| (name.to_string(), *kind))
                .collect(),
            ttl,
            groups: spans,
        },
    })
}
