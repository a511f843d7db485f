//! The layout of a checkpoint's state files, defined once: the writer, the metadata, the
//! restore and the inspect tools (`weir state`, `weir checkpoints inspect`) all use this
//! module, so the format has no hand-kept copies (docs/architecture.md §6).
//!
//! A checkpoint folder holds `_metadata` (written last; see [`crate::storage`] for the
//! folder and the envelope every file is wrapped in) and, per operator uid, one folder with
//! its subtasks' files, each named by its path relative to the checkpoint folder,
//! `<uid>/<file name>`:
//!
//! | file | envelope kind | payload (postcard) | written when |
//! |------|---------------|--------------------|--------------|
//! | `op-<subtask>` ([`operator_state_file_name`]) | [`OPERATOR_STATE_KIND`] | [`OperatorStateFile`], then its lists' schemas ([`encode_operator_state_file`]) | the subtask has operator state |
//! | `kg-<start>-<end>` ([`keyed_state_file_name`]) | [`KEYED_STATE_KIND`] | [`KeyedStateFile`] | the operator is keyed |
//! | `ch-<subtask>-<channel>` ([`channel_state_file_name`]) | [`CHANNEL_STATE_KIND`] | [`ChannelStateFile`] | an unaligned checkpoint saved records in flight ([`channel_state`]) |
//! | `../shared/<uid>/chk-<id>-kg-<start>-<end>` ([`shared_keyed_file_name`]) | [`KEYED_STATE_KIND`] | [`KeyedStateFile`] | an incremental checkpoint's base |
//! | `../shared/<uid>/chk-<id>-kgd-<start>-<end>` | [`KEYED_DELTA_KIND`] | [`KeyedStateFile`] of `(key, Option<value>)` entries | an incremental checkpoint's delta |
//!
//! **Incremental checkpoints** (`--incremental-checkpoints`, disk backend) keep keyed
//! state in the job folder's `shared/` folder, where several checkpoints reference it:
//! each subtask's state is a base (a full keyed file) and the deltas written since, listed
//! in `_metadata` ([`IncrementalKeyedRef`](super::metadata::IncrementalKeyedRef)). A
//! delta has the layout of a keyed file; each of its entries is `postcard((key,
//! Option<value>))`, so a key changed since the previous file of the chain carries its new
//! value and a deleted one `None`. A restore applies base then deltas in order, key group
//! by key group, so rescaling works as for full files. `_metadata` (layout 8) also records
//! where each state's section of each key group lies in every shared file, with its
//! CRC-32C ([`FileIndex`](crate::state::keyed::FileIndex)), so a restore from object
//! storage can read one key group alone.
//!
//! **How key groups map to files.** Subtask `i` of `p` owns the key groups
//! [`KeyGroupRange::for_subtask`]`(i, p, max_parallelism)` and writes them all into one
//! keyed file named after that range. A restore at any parallelism reads every file whose
//! range overlaps the groups it now owns ([`file_holds_groups_of`]) and takes the sections
//! of its own groups from them; whole groups move, never parts of one.
//!
//! **A keyed file**, in order: the header — its key-group range, the job's max parallelism,
//! and the name and kind of each state (the *state index* is the position in that list);
//! then the non-empty key groups in ascending order, each with one section per state
//! (possibly empty) holding that state's entries of the group, postcard-encoded
//! `(key, value)` pairs (`(key, (value, last_refresh_ms))` for a state with a TTL)
//! concatenated without framing; then per state whether it has a TTL. The writer streams
//! these bytes piece by piece ([`KeyedFileEncoder`]); they equal the derived encoding of a
//! [`KeyedStateFile`] with the same content (tested), which inspection decodes whole and a
//! restore decodes borrowing its sections ([`KeyedStateFileRef`]). [`check_keyed_file`]
//! is what every reader checks before it trusts the file's shape.

pub mod channel_state;

pub use channel_state::{
    channel_state_file_name, ChannelBatch, ChannelStateFile, CHANNEL_STATE_KIND,
};

use serde::{Deserialize, Serialize};

use crate::checkpoint::format::FileKind;
use crate::error::{Error, Result};
use crate::state::key_group::KeyGroupRange;
use std::collections::BTreeMap;

use crate::state::operator::OperatorStateSnapshot;
use crate::state::schema::StateSchema;
use crate::state::StateKind;

/// The envelope kind of an operator-state file, which a reader demands so that a keyed
/// file (or any other) put in its place is refused rather than misread.
pub const OPERATOR_STATE_KIND: FileKind = FileKind::OperatorState;

/// The envelope kind of a keyed-state file (see [`OPERATOR_STATE_KIND`] for why).
pub const KEYED_STATE_KIND: FileKind = FileKind::KeyedState;

/// The envelope kind of an incremental checkpoint's keyed-state delta: the layout of a
/// keyed-state file, whose entries are `(key, Option<value>)` (`None`: the key was
/// deleted). Its own kind, so a delta is never read as a full file or the other way round.
pub const KEYED_DELTA_KIND: FileKind = FileKind::KeyedStateDelta;

/// The name, in the job folder's `shared/<uid>/`, of the keyed file an incremental
/// checkpoint `id` writes for key groups `range`: a base (`chk-<id>-kg-<start>-<end>`) or a
/// delta (`chk-<id>-kgd-<start>-<end>`). The owner's id leads, so the files of a checkpoint
/// that never completed are found by name ([`shared_file_owner`]).
pub fn shared_keyed_file_name(id: u64, range: KeyGroupRange, delta: bool) -> String {
    let kind = if delta { "kgd" } else { "kg" };
    format!("chk-{id}-{kind}-{}-{}", range.start, range.end)
}

/// The checkpoint that wrote the shared file named `name` (see
/// [`shared_keyed_file_name`]), or `None` for a name Weir does not write.
pub fn shared_file_owner(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("chk-")?;
    let (id, _) = rest.split_once('-')?;
    id.parse().ok()
}

/// The name of subtask `subtask`'s operator-state file in its operator's folder; one file
/// per subtask, so subtasks never write the same file.
pub fn operator_state_file_name(subtask: u32) -> String {
    format!("op-{subtask}")
}

/// The name of the keyed-state file covering key groups `range` (a subtask's whole range):
/// named by range rather than subtask, so the name says which groups a file holds after a
/// rescale too.
pub fn keyed_state_file_name(range: KeyGroupRange) -> String {
    format!("kg-{}-{}", range.start, range.end)
}

/// Whether the keyed file covering `file` holds key groups a subtask owning `mine` needs:
/// a restore reads only those files.
pub fn file_holds_groups_of(file: KeyGroupRange, mine: KeyGroupRange) -> bool {
    file.intersects(&mine)
}

/// Payload of an operator-state file: the subtask's named lists, each element encoded.
pub type OperatorStateFile = OperatorStateSnapshot;

/// The payload of an operator-state file: postcard of the lists ([`OperatorStateFile`],
/// whose encoding predates schemas and leaves them out), then, when any list has one,
/// postcard of list name → element schema (issue 26). Files written before schemas end
/// after the lists, and decode with no schemas: that is what keeps them readable.
pub fn encode_operator_state_file(lists: &OperatorStateFile) -> Result<Vec<u8>> {
    let fail = |e: postcard::Error| Error::StateDecode {
        what: "operator state (encoding)".into(),
        cause: e.to_string(),
    };
    let mut out = postcard::to_stdvec(lists).map_err(fail)?;
    let schemas: BTreeMap<&str, &StateSchema> = lists
        .iter()
        .filter_map(|(name, l)| l.schema.as_ref().map(|s| (name.as_str(), s)))
        .collect();
    if !schemas.is_empty() {
        out = postcard::to_extend(&schemas, out).map_err(fail)?;
    }
    Ok(out)
}

/// Decodes an operator-state file's payload ([`encode_operator_state_file`]); the error
/// names what could not be read.
pub fn decode_operator_state_file(
    payload: &[u8],
) -> std::result::Result<OperatorStateFile, String> {
    let (mut lists, rest): (OperatorStateFile, _) =
        postcard::take_from_bytes(payload).map_err(|e| e.to_string())?;
    if !rest.is_empty() {
        let schemas: BTreeMap<String, StateSchema> = postcard::from_bytes(rest)
            .map_err(|e| format!("the lists' schemas after the lists: {e}"))?;
        for (name, schema) in schemas {
            let list = lists.get_mut(&name).ok_or_else(|| {
                format!("a schema for list '{name}', which the file does not hold")
            })?;
            list.schema = Some(schema);
        }
    }
    Ok(lists)
}

/// One key group's section of a keyed-state file: one encoded blob per state, in the order
/// of [`KeyedStateFile::states`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGroupSection {
    /// The key group.
    pub group: u32,
    /// Encoded `(key, value)` entries of each state.
    #[serde(with = "byte_runs")]
    pub states: Vec<Vec<u8>>,
}

/// Payload of a keyed-state file; see the module docs for what each part holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedStateFile {
    /// Key groups covered.
    pub range: KeyGroupRange,
    /// The job's max parallelism when written.
    pub max_parallelism: u32,
    /// `(name, kind)` of each state.
    pub states: Vec<(String, StateKind)>,
    /// Non-empty key groups only.
    pub groups: Vec<KeyGroupSection>,
    /// Per state (in the order of `states`): whether its entries carry a TTL stamp,
    /// encoded as `(key, (value, last_refresh_ms))` instead of `(key, value)`.
    pub ttl: Vec<bool>,
}

/// [`KeyedStateFile`] decoded without copying its sections: the same fields in the same
/// order (postcard writes no field names), each section borrowed from the payload. The
/// test `borrowed_layout_matches_the_file_layout` keeps the two in step.
#[derive(Debug, Deserialize)]
pub struct KeyedStateFileRef<'a> {
    /// Key groups covered.
    pub range: KeyGroupRange,
    /// The job's max parallelism when written.
    pub max_parallelism: u32,
    /// `(name, kind)` of each state.
    pub states: Vec<(String, StateKind)>,
    /// Non-empty key groups only, sections borrowed.
    #[serde(borrow)]
    pub groups: Vec<KeyGroupSectionRef<'a>>,
    /// Per state: whether its entries carry a TTL stamp.
    pub ttl: Vec<bool>,
}

/// [`KeyGroupSection`], borrowed from the payload it was decoded from.
#[derive(Debug, Deserialize)]
pub struct KeyGroupSectionRef<'a> {
    /// The key group.
    pub group: u32,
    /// Encoded entries of each state, as ranges of the payload.
    #[serde(borrow)]
    pub states: Vec<&'a [u8]>,
}

impl KeyedStateFile {
    /// Checks the file's shape against its checkpoint ([`check_keyed_file`]).
    pub fn check(&self, max_parallelism: u32) -> std::result::Result<(), String> {
        let groups = self.groups.iter().map(|s| (s.group, s.states.len()));
        check_keyed_file(
            self.range,
            self.max_parallelism,
            self.states.len(),
            groups,
            max_parallelism,
        )
    }
}

impl KeyedStateFileRef<'_> {
    /// Checks the file's shape against its checkpoint ([`check_keyed_file`]).
    pub fn check(&self, max_parallelism: u32) -> std::result::Result<(), String> {
        let groups = self.groups.iter().map(|s| (s.group, s.states.len()));
        check_keyed_file(
            self.range,
            self.max_parallelism,
            self.states.len(),
            groups,
            max_parallelism,
        )
    }
}

/// What every reader checks before trusting a decoded keyed file (an intact envelope says
/// only that the bytes are the ones written): it was written with the checkpoint's max
/// parallelism, each of its key groups lies in its range, and each group has one section
/// per declared state. `groups` yields each group and its number of sections. The error
/// says what is wrong, for the caller to put behind the file's path.
pub fn check_keyed_file(
    range: KeyGroupRange,
    file_max_parallelism: u32,
    states: usize,
    groups: impl IntoIterator<Item = (u32, usize)>,
    max_parallelism: u32,
) -> std::result::Result<(), String> {
    if file_max_parallelism != max_parallelism {
        return Err(format!(
            "written with max parallelism {file_max_parallelism} but the checkpoint says \
             {max_parallelism}"
        ));
    }
    for (group, sections) in groups {
        if !range.contains(group) {
            return Err(format!(
                "key group {group} lies outside the file's range {}..{}",
                range.start, range.end
            ));
        }
        if sections != states {
            return Err(format!(
                "key group {group} has {sections} state sections but the file declares \
                 {states} states"
            ));
        }
    }
    Ok(())
}

/// Builds a keyed file's payload in pieces, for a writer that streams it key group by key
/// group instead of building a [`KeyedStateFile`] in memory. Postcard frames nothing but
/// sequences and byte strings, each behind a varint length, so the pieces are: the
/// [`header`](Self::header) (range, max parallelism, states, number of groups), per group a
/// [`group`](Self::group) header and per state a [`section`](Self::section) length followed
/// by the section's bytes, then the [`trailer`](Self::trailer) (the TTL flags). Each method
/// appends to `out`; the caller writes `out` and the section bytes in order.
pub struct KeyedFileEncoder;

impl KeyedFileEncoder {
    /// The header, followed by the number of non-empty groups to come.
    pub fn header(
        range: KeyGroupRange,
        max_parallelism: u32,
        states: &[(&str, StateKind)],
        groups: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        out.extend_from_slice(&encode(&(range, max_parallelism, states))?);
        varint(groups as u64, out);
        Ok(())
    }

    /// The start of key group `group`'s entry, which holds `states` sections.
    pub fn group(group: u32, states: usize, out: &mut Vec<u8>) {
        varint(group as u64, out);
        varint(states as u64, out);
    }

    /// The length of the section whose `len` bytes follow.
    pub fn section(len: usize, out: &mut Vec<u8>) {
        varint(len as u64, out);
    }

    /// The trailer: per state whether it has a TTL.
    pub fn trailer(ttl: &[bool], out: &mut Vec<u8>) -> Result<()> {
        out.extend_from_slice(&encode(&ttl)?);
        Ok(())
    }
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    postcard::to_stdvec(v).map_err(|e| Error::StateDecode {
        what: "keyed state (encoding)".into(),
        cause: e.to_string(),
    })
}

/// Appends `v` as a postcard varint (the encoding of every integer and length above).
fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Serde for the encoded sections: each `Vec<u8>` goes through `serialize_bytes` /
/// `deserialize_byte_buf`. In postcard that is the same bytes as the derived sequence of
/// `u8` (a varint length, then the bytes), so files stay compatible both ways, but each
/// section is copied as one run instead of one serde call per byte — which made writing
/// and restoring large keyed state slow (a 1 GB restore spent about a second here).
mod byte_runs {
    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::ser::{SerializeSeq, Serializer};
    use serde::{Deserialize, Serialize};

    struct Run<'a>(&'a [u8]);

    impl Serialize for Run<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }

    pub fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for run in v {
            seq.serialize_element(&Run(run))?;
        }
        seq.end()
    }

    struct Buf(Vec<u8>);

    impl<'de> Deserialize<'de> for Buf {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_byte_buf(BufVisitor)
        }
    }

    struct BufVisitor;

    impl<'de> Visitor<'de> for BufVisitor {
        type Value = Buf;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("bytes")
        }

        fn visit_bytes<E>(self, v: &[u8]) -> Result<Buf, E> {
            Ok(Buf(v.to_vec()))
        }

        fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Buf, E> {
            Ok(Buf(v))
        }

        /// Formats that write bytes as a sequence (JSON) read back through here.
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Buf, A::Error> {
            let mut v = Vec::with_capacity(a.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = a.next_element::<u8>()? {
                v.push(b);
            }
            Ok(Buf(v))
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        let runs = Vec::<Buf>::deserialize(d)?;
        Ok(runs.into_iter().map(|b| b.0).collect())
    }
}

#[cfg(test)]
pub(crate) mod tests;
