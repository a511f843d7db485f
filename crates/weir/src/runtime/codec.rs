//! Record codecs: how the records of a network channel become bytes, for unaligned
//! checkpoints (issue 13), whose channel state is records in flight.
//!
//! **Why a registry.** A stream's record type is only `Data` (`Clone + Send + 'static`):
//! aligned checkpoints never encode a record, and requiring `Serialize` of every stream
//! would burden every job for one mode. So encodability is opt-in per type, as in Flink's
//! `registerType`: a job registers the record types that cross a network channel
//! ([`TypeRegistry::register`]); common types are registered already. Before an unaligned
//! job runs, [`check_network_edges`] refuses it when an edge carries a type without a codec,
//! naming the edge, the type and the fix — the job is never discovered unencodable at its
//! first checkpoint.
//!
//! Records are encoded with postcard, like keyed and operator state, one after another
//! without framing: a reader knows how many it expects ([`RecordCodec::decode`]).
//!
//! **Schemas** (issue 26). Postcard is not self-describing, so channel state records the
//! record type's schema ([`RecordCodec::schema`], as keyed and operator state do), and a
//! restore brings every file to the type the job has now before any record flows
//! ([`RecordCodec::adopt`]): the same shape is used as is, a shape serde can read (a field
//! added with a default, removed, renamed with an alias) is migrated record by record, and
//! anything else is refused naming the operator, the channel, both schemas and the ways
//! out.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::checkpoint::layout::ChannelStateFile;
use crate::error::{Error, Result};
use crate::state::schema::{decide, schema_of, serde_decoder, Decision, StateSchema};

/// Encodes and decodes records of one type, for channel state.
pub trait RecordCodec<T>: Send + Sync {
    /// Appends the encoding of every record of `records` to `out`.
    fn encode(&self, records: &[T], out: &mut Vec<u8>) -> Result<()>;
    /// Decodes exactly `count` records from `bytes` (all of them, nothing left over) onto
    /// `out`; `what` names the bytes in an error (a channel-state file).
    fn decode(&self, bytes: &[u8], count: usize, what: &str, out: &mut Vec<T>) -> Result<()>;
    /// The record type's schema, recorded with the channel state it encodes so that a
    /// later job with another record type can tell (traced once per type and process).
    fn schema(&self) -> StateSchema;
    /// Brings restored channel state `file` of operator `uid` to the record type as it is
    /// now, before any of its records is decoded: unchanged when the recorded schema is
    /// this type's (or absent: written before schemas, restored unversioned), re-encoded
    /// record by record when serde reads the old shape into the new type; otherwise an
    /// error naming the operator, the channel, both schemas and the ways out.
    fn adopt(&self, file: ChannelStateFile, uid: &str) -> Result<ChannelStateFile>;
    /// What [`adopt`](Self::adopt) does with records saved with schema `old`, decided from
    /// the schemas alone (for `savepoint check` and the run's check before it starts), with
    /// the record type's schema now.
    fn decide(&self, old: &StateSchema) -> (StateSchema, Decision);
}

/// Why a run refuses restored channel state of operator `uid` (`channel` names where it
/// was saved) whose records were saved as `old` and cannot be read as `new`, and the ways
/// out: a savepoint holds no channel state, so the old job's savepoint restores.
pub(crate) fn channel_state_refusal(
    uid: &str,
    channel: &str,
    old: &StateSchema,
    new: &StateSchema,
    why: &str,
) -> String {
    format!(
        "operator '{uid}', channel state of {channel}: the records in flight were saved as \
         {old} and cannot be read as {new}: {why}. Ways out: restore the old job from this \
         checkpoint and take a savepoint (`weir savepoint` or `weir stop`; savepoints are \
         aligned and never hold channel state), then start this job from that savepoint; or \
         start fresh without --restore"
    )
}

/// The postcard codec of a serde type.
struct Postcard<T>(PhantomData<fn() -> T>);

impl<T: Serialize + DeserializeOwned + 'static> RecordCodec<T> for Postcard<T> {
    fn encode(&self, records: &[T], out: &mut Vec<u8>) -> Result<()> {
        let mut buf = std::mem::take(out);
        for r in records {
            buf = postcard::to_extend(r, buf).map_err(|e| Error::StateDecode {
                what: format!("a record of type {} (encoding)", std::any::type_name::<T>()),
                cause: e.to_string(),
            })?;
        }
        *out = buf;
        Ok(())
    }

    fn decode(&self, mut bytes: &[u8], count: usize, what: &str, out: &mut Vec<T>) -> Result<()> {
        let fail = |cause: String| Error::StateDecode {
            what: format!("{what} (records of type {})", std::any::type_name::<T>()),
            cause,
        };
        out.reserve(count);
        for _ in 0..count {
            let (r, rest) =
                postcard::take_from_bytes::<T>(bytes).map_err(|e| fail(e.to_string()))?;
            out.push(r);
            bytes = rest;
        }
        if !bytes.is_empty() {
            return Err(fail(format!(
                "{} bytes left after {count} records",
                bytes.len()
            )));
        }
        Ok(())
    }

    fn schema(&self) -> StateSchema {
        schema_of::<T>(0)
    }

    fn adopt(&self, file: ChannelStateFile, uid: &str) -> Result<ChannelStateFile> {
        adopt::<T>(file, uid)
    }

    fn decide(&self, old: &StateSchema) -> (StateSchema, Decision) {
        let new = schema_of::<T>(0);
        let decision = decide::<T>(old, &new, None);
        (new, decision)
    }
}

/// [`RecordCodec::adopt`] of the postcard codec of `T`.
fn adopt<T: Serialize + DeserializeOwned + 'static>(
    mut file: ChannelStateFile,
    uid: &str,
) -> Result<ChannelStateFile> {
    let Some(old) = file.schema.take() else {
        return Ok(file); // unversioned: decoded straight into T, as before schemas
    };
    let new = schema_of::<T>(0);
    let channel = format!("subtask {} channel {}", file.subtask, file.channel);
    match decide::<T>(&old, &new, None) {
        Decision::MigratesBySerde | Decision::MigratesByFunction => {
            let undecodable = |cause: String| Error::StateDecode {
                what: format!(
                    "channel state of operator '{uid}', {channel} (records of {old} read as \
                     {new})"
                ),
                cause,
            };
            let decode = serde_decoder::<T>(&old).map_err(undecodable)?;
            for b in &mut file.batches {
                let mut data = Vec::with_capacity(b.data.len());
                let mut rest: &[u8] = &b.data;
                for _ in 0..b.records {
                    let mut de = postcard::Deserializer::from_bytes(rest);
                    let record = decode(&mut de).map_err(undecodable)?;
                    rest = de.finalize().map_err(|e| undecodable(e.to_string()))?;
                    data = postcard::to_extend(&record, data)
                        .map_err(|e| undecodable(format!("encoding a migrated record: {e}")))?;
                }
                if !rest.is_empty() {
                    return Err(undecodable(format!(
                        "{} bytes left after {} records",
                        rest.len(),
                        b.records
                    )));
                }
                b.data = data;
            }
            file.schema = Some(new);
            Ok(file)
        }
        Decision::Incompatible(why) => Err(Error::Restore(channel_state_refusal(
            uid, &channel, &old, &new, &why,
        ))),
        Decision::AsIs | Decision::Unversioned | Decision::New => {
            file.schema = Some(old);
            Ok(file)
        }
    }
}

/// One registered type: its name for messages and its codec, type-erased
/// (`Arc<dyn RecordCodec<T>>` behind `Any`).
struct Entry {
    name: &'static str,
    codec: Box<dyn Any + Send + Sync>,
}

/// The record types a job can encode, by `TypeId` (Flink's `ExecutionConfig.registerType`).
pub struct TypeRegistry {
    entries: HashMap<TypeId, Entry>,
}

impl Default for TypeRegistry {
    fn default() -> Self {
        Self::with_common_types()
    }
}

impl std::fmt::Debug for TypeRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.entries.values().map(|e| e.name).collect();
        names.sort_unstable();
        f.debug_struct("TypeRegistry")
            .field("types", &names)
            .finish()
    }
}

impl TypeRegistry {
    /// A registry without any type (tests; jobs start from [`with_common_types`]).
    ///
    /// [`with_common_types`]: Self::with_common_types
    pub fn empty() -> Self {
        TypeRegistry {
            entries: HashMap::new(),
        }
    }

    /// A registry with the types most streams carry: integers, floats, `bool`, `String`,
    /// `Vec<u8>`, and the pairs `(String, u64)`, `(u64, u64)`, `(String, i64)`,
    /// `(u64, String)` that keyed counts produce.
    pub fn with_common_types() -> Self {
        let mut r = Self::empty();
        r.register::<u8>();
        r.register::<u16>();
        r.register::<u32>();
        r.register::<u64>();
        r.register::<usize>();
        r.register::<i32>();
        r.register::<i64>();
        r.register::<f32>();
        r.register::<f64>();
        r.register::<bool>();
        r.register::<String>();
        r.register::<Vec<u8>>();
        r.register::<(String, u64)>();
        r.register::<(u64, u64)>();
        r.register::<(String, i64)>();
        r.register::<(u64, String)>();
        r
    }

    /// Makes `T` encodable in channel state. Registering a type twice is harmless.
    pub fn register<T: Serialize + DeserializeOwned + Send + 'static>(&mut self) {
        let codec: Arc<dyn RecordCodec<T>> = Arc::new(Postcard::<T>(PhantomData));
        self.entries.insert(
            TypeId::of::<T>(),
            Entry {
                name: std::any::type_name::<T>(),
                codec: Box::new(codec),
            },
        );
    }

    /// Whether the type `id` has a codec.
    pub fn contains(&self, id: TypeId) -> bool {
        self.entries.contains_key(&id)
    }

    /// The codec of `T`, if registered.
    pub fn codec<T: 'static>(&self) -> Option<Arc<dyn RecordCodec<T>>> {
        self.entries
            .get(&TypeId::of::<T>())?
            .codec
            .downcast_ref::<Arc<dyn RecordCodec<T>>>()
            .cloned()
    }
}

/// A network edge as the unaligned check sees it.
#[derive(Debug, Clone)]
pub struct NetworkEdge {
    /// The sending operator's name (or uid).
    pub from: String,
    /// The receiving operator's name (or uid).
    pub to: String,
    /// The record type's id.
    pub type_id: TypeId,
    /// The record type's name, for the message.
    pub type_name: &'static str,
}

/// Refuses an unaligned job before anything runs when one of its network edges carries a
/// record type without a codec: the error names every such edge, its type and the fix.
pub fn check_network_edges<'a>(
    edges: impl IntoIterator<Item = &'a NetworkEdge>,
    registry: &TypeRegistry,
) -> Result<()> {
    let missing: Vec<String> = edges
        .into_iter()
        .filter(|e| !registry.contains(e.type_id))
        .map(|e| format!("{} -> {} carries {}", e.from, e.to, e.type_name))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::InvalidJob(format!(
        "unaligned checkpoints save the records in flight, but {} cannot be encoded: \
         register the type with `env.register_type::<T>()` (it must implement serde's \
         Serialize and Deserialize), or run with aligned checkpoints (without --unaligned)",
        missing.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Click {
        user: String,
        at: u64,
    }

    #[test]
    fn a_registered_type_round_trips_through_its_codec() {
        let mut r = TypeRegistry::with_common_types();
        assert!(r.codec::<Click>().is_none());
        r.register::<Click>();
        let codec = r.codec::<Click>().unwrap();
        let clicks = vec![
            Click {
                user: "ann".into(),
                at: 1,
            },
            Click {
                user: "bo".into(),
                at: u64::MAX,
            },
        ];
        let mut bytes = b"prefix".to_vec();
        codec.encode(&clicks, &mut bytes).unwrap();
        let mut back = Vec::new();
        codec.decode(&bytes[6..], 2, "test", &mut back).unwrap();
        assert_eq!(back, clicks);
    }

    /// `Click` with a field added with a default.
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct ClickAdded {
        user: String,
        at: u64,
        #[serde(default)]
        weight: u32,
    }

    /// `Click` with a field whose type changed.
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct ClickRetyped {
        user: u64,
        at: u64,
    }

    /// Channel state of `Click`s as a capture writes it: two batches, their schema.
    fn saved_clicks(schema: bool) -> ChannelStateFile {
        use crate::checkpoint::layout::ChannelBatch;
        let mut r = TypeRegistry::empty();
        r.register::<Click>();
        let codec = r.codec::<Click>().unwrap();
        let click = |user: &str, at| Click {
            user: user.into(),
            at,
        };
        let batch = |clicks: &[Click], ts: Vec<u64>| {
            let mut data = Vec::new();
            codec.encode(clicks, &mut data).unwrap();
            ChannelBatch {
                records: clicks.len() as u32,
                timestamped: !ts.is_empty(),
                timestamps: ts,
                data,
            }
        };
        ChannelStateFile {
            subtask: 1,
            channel: 2,
            edge: 0,
            sender: 1,
            batches: vec![
                batch(&[click("ann", 1), click("bo", 2)], vec![]),
                batch(&[click("cy", 3)], vec![30]),
            ],
            schema: schema.then(|| codec.schema()),
        }
    }

    fn decode_all<T: 'static>(codec: &dyn RecordCodec<T>, file: &ChannelStateFile) -> Vec<T> {
        let mut out = Vec::new();
        for b in &file.batches {
            codec
                .decode(&b.data, b.records as usize, "test", &mut out)
                .unwrap();
        }
        out
    }

    #[test]
    fn channel_state_of_the_same_type_is_kept_as_is() {
        let mut r = TypeRegistry::empty();
        r.register::<Click>();
        let codec = r.codec::<Click>().unwrap();
        let file = saved_clicks(true);
        assert_eq!(
            codec.decide(file.schema.as_ref().unwrap()).1,
            Decision::AsIs
        );
        assert_eq!(codec.adopt(file.clone(), "clicks").unwrap(), file);
    }

    #[test]
    fn channel_state_with_a_field_added_migrates_record_by_record() {
        let mut r = TypeRegistry::empty();
        r.register::<ClickAdded>();
        let codec = r.codec::<ClickAdded>().unwrap();
        let file = saved_clicks(true);
        let (new, decision) = codec.decide(file.schema.as_ref().unwrap());
        assert_eq!(decision, Decision::MigratesBySerde);
        let adopted = codec.adopt(file.clone(), "clicks").unwrap();
        assert_eq!(
            adopted.schema,
            Some(new),
            "the file now holds the new shape"
        );
        assert_eq!(adopted.batches[1].timestamps, vec![30]);
        let added = |user: &str, at| ClickAdded {
            user: user.into(),
            at,
            weight: 0,
        };
        assert_eq!(
            decode_all(codec.as_ref(), &adopted),
            [added("ann", 1), added("bo", 2), added("cy", 3)]
        );
    }

    #[test]
    fn channel_state_of_a_retyped_field_is_refused_naming_operator_channel_and_types() {
        let mut r = TypeRegistry::empty();
        r.register::<ClickRetyped>();
        let codec = r.codec::<ClickRetyped>().unwrap();
        let file = saved_clicks(true);
        let d = codec.decide(file.schema.as_ref().unwrap()).1;
        assert!(matches!(d, Decision::Incompatible(_)), "{d:?}");
        let e = codec.adopt(file, "clicks").unwrap_err().to_string();
        for part in [
            "operator 'clicks'",
            "subtask 1 channel 2",
            "Click v0",
            "ClickRetyped",
            "savepoint",
            "fresh",
        ] {
            assert!(e.contains(part), "'{part}' missing from: {e}");
        }
    }

    #[test]
    fn channel_state_written_before_schemas_is_decoded_straight() {
        let mut r = TypeRegistry::empty();
        r.register::<Click>();
        let codec = r.codec::<Click>().unwrap();
        let file = saved_clicks(false);
        let adopted = codec.adopt(file.clone(), "clicks").unwrap();
        assert_eq!(adopted, file);
        assert_eq!(decode_all(codec.as_ref(), &adopted).len(), 3);
    }

    #[test]
    fn decoding_refuses_short_and_long_inputs() {
        let r = TypeRegistry::with_common_types();
        let codec = r.codec::<(String, u64)>().unwrap();
        let mut bytes = Vec::new();
        codec
            .encode(&[("a".into(), 1), ("b".into(), 2)], &mut bytes)
            .unwrap();
        let mut out = Vec::new();
        let short = codec.decode(&bytes, 3, "ch-0-1", &mut out).unwrap_err();
        assert!(short.to_string().contains("ch-0-1"), "{short}");
        let long = codec.decode(&bytes, 1, "ch-0-1", &mut out).unwrap_err();
        assert!(long.to_string().contains("left after 1 records"), "{long}");
    }

    #[test]
    fn an_edge_without_a_codec_is_refused_naming_edge_type_and_fix() {
        let r = TypeRegistry::with_common_types();
        let edge = |to: &str, type_id, type_name| NetworkEdge {
            from: "source".into(),
            to: to.into(),
            type_id,
            type_name,
        };
        let ok = edge("count", TypeId::of::<(String, u64)>(), "(String, u64)");
        let bad = edge(
            "sessions",
            TypeId::of::<Click>(),
            std::any::type_name::<Click>(),
        );
        assert!(check_network_edges([&ok], &r).is_ok());
        let e = check_network_edges([&ok, &bad], &r)
            .unwrap_err()
            .to_string();
        assert!(e.contains("source -> sessions carries"), "{e}");
        assert!(e.contains("Click"), "{e}");
        assert!(e.contains("register_type"), "{e}");
        assert!(!e.contains("count"), "{e}");
    }
}
