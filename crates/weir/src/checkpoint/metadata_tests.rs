//! Unit tests of [`super`] (metadata.rs).

use super::*;

fn sample_meta(sources: Vec<SourceProgress>) -> CheckpointMetadata {
    CheckpointMetadata {
        checkpoint_id: 7,
        job_name: "job".into(),
        trigger_timestamp_ms: 1,
        completed_timestamp_ms: 2,
        mode: CheckpointingMode::ExactlyOnce,
        max_parallelism: 128,
        operators: Vec::new(),
        stats: TaskCheckpointStats::default(),
        tasks: Vec::new(),
        snapshot: SnapshotKind::Savepoint,
        weir_version: "0.1.0".into(),
        sources,
        run_id: String::new(),
        files: Vec::new(),
        channel_state: Vec::new(),
        unaligned_tasks: 0,
        schemas: Vec::new(),
        incremental: Vec::new(),
        incremental_index: Vec::new(),
    }
}

/// Layout 6's bytes: layout 7 without its trailing incremental keyed state.
fn layout_6_bytes(meta: &CheckpointMetadata) -> Vec<u8> {
    let mut bytes = postcard::to_allocvec(meta).unwrap();
    assert!(meta.incremental.is_empty());
    assert_eq!(bytes.split_off(bytes.len() - 1), [0]);
    bytes
}

/// Layout 5's bytes: layout 6 without its trailing schemas.
fn layout_5_bytes(meta: &CheckpointMetadata) -> Vec<u8> {
    let mut bytes = layout_6_bytes(meta);
    assert!(meta.schemas.is_empty());
    assert_eq!(bytes.split_off(bytes.len() - 1), [0]);
    bytes
}

/// Layout 4's bytes: layout 5 without its two trailing fields.
fn layout_4_bytes(meta: &CheckpointMetadata) -> Vec<u8> {
    let mut bytes = layout_5_bytes(meta);
    assert!(meta.channel_state.is_empty() && meta.unaligned_tasks == 0);
    assert_eq!(bytes.split_off(bytes.len() - 2), [0, 0]);
    bytes
}

/// Layout 3's bytes: layout 4 without its two trailing fields.
fn layout_3_bytes(meta: &CheckpointMetadata) -> Vec<u8> {
    let mut bytes = layout_4_bytes(meta);
    assert!(meta.run_id.is_empty() && meta.files.is_empty());
    assert_eq!(bytes.split_off(bytes.len() - 2), [0, 0]);
    bytes
}

#[test]
fn layout_6_round_trips_its_schemas() {
    let mut meta = sample_meta(Vec::new());
    meta.run_id = "run-a".into();
    meta.schemas = vec![OperatorSchemas {
        uid: "count".into(),
        key: Some(crate::state::schema::schema_of::<u64>(0)),
        states: vec![crate::state::schema::RecordedState {
            name: "acc".into(),
            kind: crate::state::StateKind::Value,
            schema: crate::state::schema::schema_of::<(u64, String)>(3),
        }],
    }];
    let back = CheckpointMetadata::decode(&postcard::to_allocvec(&meta).unwrap()).unwrap();
    assert_eq!(back, meta);
    assert_eq!(back.state_schema("count", "acc").unwrap().version, 3);
}

fn shared(path: &str, id: u64, size: u64) -> SharedFile {
    SharedFile {
        path: path.into(),
        size,
        crc32c: 9,
        checkpoint_id: id,
        run_id: "run-a".into(),
    }
}

#[test]
fn layout_7_round_trips_its_chains_and_counts_new_and_shared_bytes() {
    let mut meta = sample_meta(Vec::new());
    meta.run_id = "run-a".into();
    meta.incremental = vec![IncrementalKeyedRef {
        uid: "count".into(),
        subtask: 1,
        base: shared("shared/count/chk-3-kg-0-63", 3, 1000),
        deltas: vec![
            shared("shared/count/chk-5-kgd-0-63", 5, 30),
            shared("shared/count/chk-7-kgd-0-63", 7, 20),
        ],
    }];
    let back = CheckpointMetadata::decode(&postcard::to_allocvec(&meta).unwrap()).unwrap();
    assert_eq!(back, meta);
    let chain = back.incremental_of("count", 1).unwrap();
    assert_eq!(chain.new_and_shared_bytes(7), (20, 1030));
    assert!(back.incremental_of("count", 0).is_none());
    assert_eq!(back.shared_files().count(), 3);
}

#[test]
fn layout_8_round_trips_its_index_and_layout_7_decodes_without_one() {
    use crate::state::keyed::{FileIndex, GroupSpans, SectionSpan};
    use crate::state::StateKind;
    let mut meta = sample_meta(Vec::new());
    meta.run_id = "run-a".into();
    let chain = IncrementalKeyedRef {
        uid: "count".into(),
        subtask: 0,
        base: shared("shared/count/chk-3-kg-0-63", 3, 1000),
        deltas: vec![shared("shared/count/chk-5-kgd-0-63", 5, 30)],
    };
    meta.incremental = vec![chain.clone()];
    // Layout 7: the chains, and nothing after them.
    let layout_7 = postcard::to_allocvec(&meta).unwrap();
    let index = FileIndex {
        states: vec![("n".into(), StateKind::Value)],
        ttl: vec![false],
        groups: vec![GroupSpans {
            group: 4,
            sections: vec![SectionSpan {
                offset: 40,
                len: 12,
                crc32c: 7,
            }],
        }],
    };
    meta.incremental_index = vec![ChainIndex {
        uid: "count".into(),
        subtask: 0,
        files: vec![index.clone(), FileIndex::default()],
    }];
    let back = CheckpointMetadata::decode(&postcard::to_allocvec(&meta).unwrap()).unwrap();
    assert_eq!(back, meta);
    assert_eq!(
        back.incremental_index_of(&chain),
        Some(&[index, FileIndex::default()][..])
    );
    // An index that does not cover every file of the chain is not used.
    let mut short = back.clone();
    short.incremental_index[0].files.pop();
    assert_eq!(short.incremental_index_of(&chain), None);
    let old = CheckpointMetadata::decode(&layout_7[..layout_7.len() - 1]).unwrap();
    assert_eq!(old.incremental, meta.incremental);
    assert!(old.incremental_index.is_empty());
    assert_eq!(old.incremental_index_of(&chain), None);
}

#[test]
fn layout_6_still_decodes_without_incremental_state() {
    let mut meta = sample_meta(Vec::new());
    meta.run_id = "run-a".into();
    meta.schemas = vec![OperatorSchemas {
        uid: "count".into(),
        key: None,
        states: Vec::new(),
    }];
    let back = CheckpointMetadata::decode(&layout_6_bytes(&meta)).unwrap();
    assert_eq!(back, meta);
    assert!(back.incremental.is_empty());
}

#[test]
fn layout_5_still_decodes_without_schemas_its_states_unversioned() {
    let mut meta = sample_meta(Vec::new());
    meta.run_id = "run-a".into();
    meta.unaligned_tasks = 1;
    let back = CheckpointMetadata::decode(&layout_5_bytes(&meta)).unwrap();
    assert_eq!(back, meta);
    assert!(back.schemas_of("count").is_none());
}

#[test]
fn layout_5_round_trips_its_channel_state() {
    let mut meta = sample_meta(Vec::new());
    meta.run_id = "run-a".into();
    meta.unaligned_tasks = 2;
    meta.channel_state = vec![ChannelStateRef {
        uid: "sink".into(),
        subtask: 1,
        parallelism: 2,
        channel: 3,
        edge: 0,
        sender: 3,
        records: 10,
        in_flight_bytes: 80,
        file: FileRef {
            path: "sink/ch-1-3".into(),
            size: 120,
        },
    }];
    let back = CheckpointMetadata::decode(&postcard::to_allocvec(&meta).unwrap()).unwrap();
    assert_eq!(back, meta);
}

#[test]
fn layout_4_still_decodes_without_channel_state() {
    let mut meta = sample_meta(Vec::new());
    meta.run_id = "run-a".into();
    meta.files = vec![FileOrigin {
        path: "count/kg-0-63".into(),
        crc32c: 7,
        checkpoint_id: 7,
        run_id: "run-a".into(),
    }];
    let back = CheckpointMetadata::decode(&layout_4_bytes(&meta)).unwrap();
    assert_eq!(back, meta);
    assert_eq!(back.expected_crc("count/kg-0-63"), Ok(Some(7)));
}

#[test]
fn layout_5_checks_its_file_origins() {
    let mut meta = sample_meta(Vec::new());
    meta.run_id = "run-a".into();
    meta.files = vec![FileOrigin {
        path: "count/kg-0-63".into(),
        crc32c: 0xdead_beef,
        checkpoint_id: 7,
        run_id: "run-a".into(),
    }];
    let back = CheckpointMetadata::decode(&postcard::to_allocvec(&meta).unwrap()).unwrap();
    assert_eq!(back, meta);
    assert_eq!(back.expected_crc("count/kg-0-63"), Ok(Some(0xdead_beef)));
    assert!(back
        .expected_crc("count/kg-64-127")
        .unwrap_err()
        .contains("no checksum"));
    meta.files[0].checkpoint_id = 6;
    let err = meta.expected_crc("count/kg-0-63").unwrap_err();
    assert!(
        err.contains("checkpoint 6 of run run-a, not for checkpoint 7"),
        "{err}"
    );
    meta.files[0] = FileOrigin {
        checkpoint_id: 7,
        run_id: "run-b".into(),
        ..meta.files[0].clone()
    };
    assert!(meta
        .expected_crc("count/kg-0-63")
        .unwrap_err()
        .contains("of run run-b"));
}

#[test]
fn layout_3_round_trips_its_source_positions() {
    let meta = sample_meta(vec![SourceProgress {
        uid: "events".into(),
        records: 12_345,
    }]);
    let back = CheckpointMetadata::decode(&layout_3_bytes(&meta)).unwrap();
    assert_eq!(back, meta);
    assert_eq!(back.source_records("events"), 12_345);
    assert_eq!(back.source_records("other"), 0);
    assert_eq!(
        back.expected_crc("any/file"),
        Ok(None),
        "older layouts are not tied"
    );
}

#[test]
fn layout_2_still_decodes_without_source_positions() {
    // Layout 2 is layout 3 without the trailing `sources` (an empty one is one byte).
    let meta = sample_meta(Vec::new());
    let mut bytes = layout_3_bytes(&meta);
    assert_eq!(bytes.pop(), Some(0));
    let back = CheckpointMetadata::decode(&bytes).unwrap();
    assert_eq!(back, meta);
}

#[test]
fn layout_1_still_decodes_as_a_checkpoint_of_an_early_version() {
    let old = Layout1 {
        checkpoint_id: 9,
        job_name: "old".into(),
        trigger_timestamp_ms: 1,
        completed_timestamp_ms: 2,
        mode: CheckpointingMode::AtLeastOnce,
        max_parallelism: 64,
        operators: Vec::new(),
        stats: TaskCheckpointStats::default(),
        tasks: Vec::new(),
    };
    let meta = CheckpointMetadata::decode(&postcard::to_allocvec(&old).unwrap()).unwrap();
    assert_eq!(meta.checkpoint_id, 9);
    assert_eq!(meta.max_parallelism, 64);
    assert_eq!(meta.mode, CheckpointingMode::AtLeastOnce);
    assert_eq!(meta.snapshot, SnapshotKind::Checkpoint);
    assert_eq!(meta.weir_version, "0.1.0 or earlier");
    assert!(meta.sources.is_empty() && meta.files.is_empty() && meta.run_id.is_empty());
}
