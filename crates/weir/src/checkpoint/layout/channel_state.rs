//! Channel-state files: the records an unaligned checkpoint saved from one input channel of
//! one subtask (issue 13; docs/architecture.md §3, §6).
//!
//! | file | envelope kind | payload (postcard) | written when |
//! |------|---------------|--------------------|--------------|
//! | `ch-<subtask>-<channel>` ([`channel_state_file_name`]) | [`CHANNEL_STATE_KIND`] | [`ChannelStateFile`], then its record type's schema | the checkpoint was unaligned at that subtask and the channel had records in flight |
//!
//! The file lives in the folder of the task's head operator (`<uid>/ch-…`), one per subtask
//! and input channel, so no two subtasks write the same file. Like every state file it is
//! one envelope (magic, format version, kind, length, CRC-32C): a corrupt or truncated file
//! is refused, and `--restore latest` falls back past its checkpoint like any other.
//!
//! **Content.** The channel's captured batches in the order they were read, each the
//! records' codec bytes ([`crate::runtime::codec`]: postcard, one record after another) and,
//! for a stream in event time, the records' timestamps. Watermarks are not saved: they are
//! not checkpointed (§6a). The sender (its subtask on the input edge) is recorded so that a
//! restore at another parallelism can route the records of a non-keyed edge by sender.
//!
//! **Schema** (issue 26). After the file's fields comes the [`StateSchema`] of the record
//! type the batches were encoded with ([`ChannelStateFile::schema`]), so that a job whose
//! edge type changed reads the old records through serde or refuses them by name, instead
//! of decoding them wrongly. Files written before schemas end after the batches and decode
//! with none (restored *unversioned*, straight into the new type): that trailing, optional
//! section is what keeps them readable, as for operator state.

use serde::{Deserialize, Serialize};

use crate::checkpoint::format::FileKind;
use crate::error::{Error, Result};
use crate::state::schema::StateSchema;

/// The envelope kind of a channel-state file, which a reader demands so that another state
/// file put in its place is refused rather than misread.
pub const CHANNEL_STATE_KIND: FileKind = FileKind::ChannelState;

/// The name of subtask `subtask`'s channel-state file for its input channel `channel` (the
/// channel's index over all the task's inputs, in edge order).
pub fn channel_state_file_name(subtask: u32, channel: u32) -> String {
    format!("ch-{subtask}-{channel}")
}

/// One batch of captured records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelBatch {
    /// Number of records (never zero).
    pub records: u32,
    /// Whether the records carry event timestamps.
    pub timestamped: bool,
    /// The records' timestamps (`records` of them when `timestamped`, else none).
    pub timestamps: Vec<u64>,
    /// The records, encoded by the record type's codec.
    #[serde(with = "byte_run")]
    pub data: Vec<u8>,
}

/// Payload of a channel-state file; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelStateFile {
    /// The receiving subtask.
    pub subtask: u32,
    /// The input channel at that subtask.
    pub channel: u32,
    /// The input edge the channel belongs to (position among the task's inputs).
    pub edge: u32,
    /// The sending subtask on that edge.
    pub sender: u32,
    /// The captured batches, in the order they were read.
    pub batches: Vec<ChannelBatch>,
    /// The schema of the record type the batches were encoded with; `None` in files
    /// written before schemas were recorded. Encoded after the other fields, not among
    /// them (see the module docs), so it is skipped by the derive.
    #[serde(skip)]
    pub schema: Option<StateSchema>,
}

impl ChannelStateFile {
    /// Records saved in the file.
    pub fn records(&self) -> u64 {
        self.batches.iter().map(|b| b.records as u64).sum()
    }

    /// Encoded bytes of the records in flight (what `weir checkpoints inspect` reports).
    pub fn in_flight_bytes(&self) -> u64 {
        self.batches
            .iter()
            .map(|b| (b.data.len() + 8 * b.timestamps.len()) as u64)
            .sum()
    }

    /// The payload to wrap in the envelope: the fields, then the schema when known.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let fail = |e: postcard::Error| Error::StateDecode {
            what: "channel state (encoding)".into(),
            cause: e.to_string(),
        };
        let mut out = postcard::to_stdvec(self).map_err(fail)?;
        if let Some(schema) = &self.schema {
            out = postcard::to_extend(schema, out).map_err(fail)?;
        }
        Ok(out)
    }

    /// Decodes and checks a payload; `what` (the file's path) goes into the error, which
    /// says what is wrong and that the checkpoint cannot be used.
    pub fn decode(payload: &[u8], what: &str) -> Result<Self> {
        let undecodable = |cause: String| Error::StateDecode {
            what: format!("channel state {what}"),
            cause,
        };
        let (mut file, rest): (ChannelStateFile, _) =
            postcard::take_from_bytes(payload).map_err(|e| undecodable(e.to_string()))?;
        if !rest.is_empty() {
            let schema = postcard::from_bytes(rest).map_err(|e| {
                undecodable(format!("the record type's schema after the batches: {e}"))
            })?;
            file.schema = Some(schema);
        }
        file.check().map_err(|cause| {
            Error::Restore(format!(
                "channel state {what} is malformed: {cause}; restore from another checkpoint"
            ))
        })?;
        Ok(file)
    }

    /// What every reader checks before trusting a decoded file (an intact envelope says only
    /// that the bytes are the ones written): no empty batch, and timestamps exactly where
    /// and as many as the batch says.
    pub fn check(&self) -> std::result::Result<(), String> {
        for (i, b) in self.batches.iter().enumerate() {
            if b.records == 0 {
                return Err(format!("batch {i} is empty"));
            }
            let expected = if b.timestamped { b.records as usize } else { 0 };
            if b.timestamps.len() != expected {
                return Err(format!(
                    "batch {i} has {} records but {} timestamps",
                    b.records,
                    b.timestamps.len()
                ));
            }
        }
        Ok(())
    }
}

/// Serde for one encoded run of bytes: `serialize_bytes`, so postcard copies it as one run
/// instead of one call per byte (the same bytes as a derived `Vec<u8>`).
mod byte_run {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        Vec::<u8>::deserialize(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::format;
    use std::path::Path;

    /// Records encoded as the runtime's codecs do: postcard, one after another.
    fn enc(records: &[(&str, u64)]) -> Vec<u8> {
        records
            .iter()
            .flat_map(|r| postcard::to_allocvec(r).unwrap())
            .collect()
    }

    fn sample() -> ChannelStateFile {
        let plain = enc(&[("a", 1), ("b", 2)]);
        let stamped = enc(&[("c", 3)]);
        ChannelStateFile {
            subtask: 1,
            channel: 3,
            edge: 0,
            sender: 2,
            batches: vec![
                ChannelBatch {
                    records: 2,
                    timestamped: false,
                    timestamps: vec![],
                    data: plain,
                },
                ChannelBatch {
                    records: 1,
                    timestamped: true,
                    timestamps: vec![77],
                    data: stamped,
                },
            ],
            schema: Some(crate::state::schema::schema_of::<(String, u64)>(0)),
        }
    }

    #[test]
    fn names_carry_the_subtask_and_the_channel() {
        assert_eq!(channel_state_file_name(12, 3), "ch-12-3");
    }

    #[test]
    fn a_file_round_trips_through_its_envelope_and_its_records_decode() {
        let file = sample();
        assert_eq!(file.records(), 3);
        assert!(file.in_flight_bytes() > 8);
        let bytes = format::encode(CHANNEL_STATE_KIND, &file.encode().unwrap());
        let payload = format::decode(Path::new("ch-1-3"), CHANNEL_STATE_KIND, &bytes).unwrap();
        let back = ChannelStateFile::decode(payload, "ch-1-3").unwrap();
        assert_eq!(back, file);
        let mut records = Vec::new();
        for b in &back.batches {
            let mut rest = &b.data[..];
            for _ in 0..b.records {
                let (r, more) = postcard::take_from_bytes::<(String, u64)>(rest).unwrap();
                records.push(r);
                rest = more;
            }
            assert!(rest.is_empty());
        }
        assert_eq!(
            records,
            [("a".into(), 1), ("b".into(), 2), ("c".to_string(), 3)]
        );
    }

    #[test]
    fn a_file_written_before_schemas_decodes_without_one_and_a_bad_schema_is_refused() {
        let mut old = sample();
        old.schema = None;
        // What a file from before schemas holds: the fields and nothing after them.
        let payload = old.encode().unwrap();
        let fields_only = postcard::to_stdvec(&old).unwrap();
        assert_eq!(payload, fields_only);
        let back = ChannelStateFile::decode(&payload, "ch-1-3").unwrap();
        assert_eq!(back.schema, None);
        assert_eq!(back.batches, old.batches);
        // The schema section is read back exactly, and a garbled one is an error naming
        // the file, not a file without schema.
        let with = sample().encode().unwrap();
        assert!(with.len() > payload.len());
        let back = ChannelStateFile::decode(&with, "ch-1-3").unwrap();
        assert_eq!(back.schema, sample().schema);
        let mut bad = payload.clone();
        bad.extend_from_slice(&[0xff, 0xff, 0xff]);
        let e = ChannelStateFile::decode(&bad, "ch-1-3").unwrap_err();
        assert!(e.to_string().contains("ch-1-3"), "{e}");
        assert!(e.to_string().contains("schema"), "{e}");
    }

    #[test]
    fn a_corrupt_truncated_or_misplaced_file_is_refused() {
        let bytes = format::encode(CHANNEL_STATE_KIND, &sample().encode().unwrap());
        let path = Path::new("chk-3/map/ch-1-3");
        for i in [format::HEADER_LEN, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            let e = format::decode(path, CHANNEL_STATE_KIND, &bad).unwrap_err();
            assert!(e.to_string().contains("ch-1-3"), "{e}");
        }
        let cut = format::decode(path, CHANNEL_STATE_KIND, &bytes[..bytes.len() - 3]);
        assert!(cut.is_err());
        let keyed = format::encode(FileKind::KeyedState, &sample().encode().unwrap());
        let e = format::decode(path, CHANNEL_STATE_KIND, &keyed).unwrap_err();
        assert!(e.to_string().contains("channel state"), "{e}");
    }

    #[test]
    fn a_well_enveloped_but_inconsistent_payload_is_refused() {
        let mut file = sample();
        file.batches[1].timestamps.clear();
        let e = ChannelStateFile::decode(&file.encode().unwrap(), "ch-1-3").unwrap_err();
        assert!(e.to_string().contains("1 records but 0 timestamps"), "{e}");
        let mut file = sample();
        file.batches[0].records = 0;
        assert!(ChannelStateFile::decode(&file.encode().unwrap(), "x").is_err());
        assert!(ChannelStateFile::decode(&[0xff, 0xff], "x").is_err());
    }
}
