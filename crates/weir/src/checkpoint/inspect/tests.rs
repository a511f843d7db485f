//! Unit tests of checkpoint inspection on hand-built checkpoints.
use super::*;
use crate::checkpoint::format::FileKind;
use crate::checkpoint::layout::{
    self, KeyGroupSection, KeyedStateFile, OperatorStateFile, KEYED_STATE_KIND, OPERATOR_STATE_KIND,
};
use crate::checkpoint::metadata::{
    CheckpointMetadata, FileRef, KeyedFileRef, OperatorMeta, SubtaskStateMeta, TaskCheckpointStats,
};
use crate::checkpoint::storage::CheckpointStorage;
use crate::state::key_group::KeyGroupRange;
use crate::state::operator::ListSnapshot;

/// A checkpoint with operator "src" (an operator list "pos" on two subtasks and a
/// union list "seen") and keyed operator "agg" (states "a" and "b" in one file, "c"
/// alone in another file), written through the real storage layer.
fn write_sample(dir: &Path) -> PathBuf {
    let storage = CheckpointStorage::open(dir, "job").unwrap();
    let mut src_subtasks = Vec::new();
    for subtask in 0..2u32 {
        let mut lists = OperatorStateFile::new();
        lists.insert(
            "pos".into(),
            ListSnapshot {
                kind: Some(StateKind::OperatorList),
                elements: vec![enc(&(subtask as u64 * 10)), enc(&7u64)],
                schema: None,
            },
        );
        if subtask == 0 {
            lists.insert(
                "seen".into(),
                ListSnapshot {
                    kind: Some(StateKind::UnionList),
                    elements: vec![enc(&"x".to_string())],
                    schema: None,
                },
            );
        }
        let payload = postcard::to_stdvec(&lists).unwrap();
        let name = layout::operator_state_file_name(subtask);
        let crate::checkpoint::storage::StoredFile { path, size, .. } = storage
            .write_state_file(1, "src", &name, OPERATOR_STATE_KIND, &payload)
            .unwrap();
        src_subtasks.push(SubtaskStateMeta {
            subtask,
            operator_state: Some(FileRef { path, size }),
            keyed_state: None,
        });
    }
    // Subtask 0: groups 0..2 with states a and b; subtask 1: groups 2..4 with c only.
    let pair = |k: u64, v: u64| postcard::to_stdvec(&(k, v)).unwrap();
    let mut ab_group0 = pair(1, 100);
    ab_group0.extend(pair(2, 200));
    let files = [
        (
            0u32,
            KeyGroupRange { start: 0, end: 2 },
            vec![("a", StateKind::Value), ("b", StateKind::Value)],
            vec![
                KeyGroupSection {
                    group: 0,
                    states: vec![ab_group0, pair(3, 3)],
                },
                KeyGroupSection {
                    group: 1,
                    states: vec![Vec::new(), pair(4, 4)],
                },
            ],
            4u64,
        ),
        (
            1u32,
            KeyGroupRange { start: 2, end: 4 },
            vec![("c", StateKind::Value), ("a", StateKind::Value)],
            vec![KeyGroupSection {
                group: 3,
                states: vec![pair(5, 5), Vec::new()],
            }],
            1u64,
        ),
    ];
    let mut agg_subtasks = Vec::new();
    for (subtask, range, states, groups, entries) in files {
        let ttl = vec![false; states.len()];
        let file = KeyedStateFile {
            range,
            max_parallelism: 4,
            states: states
                .into_iter()
                .map(|(n, k)| (n.to_string(), k))
                .collect(),
            groups,
            ttl,
        };
        let payload = postcard::to_stdvec(&file).unwrap();
        let name = layout::keyed_state_file_name(range);
        let crate::checkpoint::storage::StoredFile { path, size, .. } = storage
            .write_state_file(1, "agg", &name, KEYED_STATE_KIND, &payload)
            .unwrap();
        agg_subtasks.push(SubtaskStateMeta {
            subtask,
            operator_state: None,
            keyed_state: Some(KeyedFileRef {
                file: FileRef { path, size },
                range,
                entries,
            }),
        });
    }
    let meta = CheckpointMetadata {
        checkpoint_id: 1,
        job_name: "job".into(),
        trigger_timestamp_ms: 1_700_000_000_000,
        completed_timestamp_ms: 1_700_000_000_050,
        mode: CheckpointingMode::ExactlyOnce,
        max_parallelism: 4,
        operators: vec![
            OperatorMeta {
                uid: "src".into(),
                parallelism: 2,
                subtasks: src_subtasks,
            },
            OperatorMeta {
                uid: "agg".into(),
                parallelism: 2,
                subtasks: agg_subtasks,
            },
            OperatorMeta {
                uid: "sink".into(),
                parallelism: 1,
                subtasks: vec![SubtaskStateMeta {
                    subtask: 0,
                    operator_state: None,
                    keyed_state: None,
                }],
            },
        ],
        stats: TaskCheckpointStats::default(),
        tasks: Vec::new(),
        snapshot: crate::checkpoint::metadata::SnapshotKind::Checkpoint,
        weir_version: "test".into(),
        sources: Vec::new(),
        run_id: String::new(),
        files: Vec::new(),
        channel_state: Vec::new(),
        unaligned_tasks: 0,
        schemas: Vec::new(),
        incremental: Vec::new(),
        incremental_index: Vec::new(),
    };
    storage
        .write_metadata(1, &postcard::to_stdvec(&meta).unwrap())
        .unwrap()
}

fn enc<T: serde::Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).unwrap()
}

fn state<'a>(d: &'a CheckpointDescription, uid: &str, name: &str) -> &'a StateDescription {
    let op = d.operators.iter().find(|o| o.uid == uid).unwrap();
    op.states.iter().find(|s| s.name == name).unwrap()
}

#[test]
fn describe_lists_operators_states_kinds_and_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let chk = write_sample(tmp.path());
    let d = describe(&chk).unwrap();
    assert_eq!(
        (d.checkpoint_id, d.job_name.as_str(), d.max_parallelism),
        (1, "job", 4)
    );
    assert_eq!(d.mode, CheckpointingMode::ExactlyOnce);
    let uids: Vec<_> = d.operators.iter().map(|o| o.uid.as_str()).collect();
    assert_eq!(uids, ["src", "agg", "sink"]);
    assert_eq!(d.state_files, 4);
    let on_disk: u64 = ["src/op-0", "src/op-1", "agg/kg-0-2", "agg/kg-2-4"]
        .iter()
        .map(|f| std::fs::metadata(chk.join(f)).unwrap().len())
        .sum();
    assert_eq!(d.state_file_bytes, on_disk);
    let meta_len = std::fs::metadata(chk.join("_metadata")).unwrap().len();
    assert_eq!(d.total_bytes(), on_disk + meta_len);

    let pos = state(&d, "src", "pos");
    assert_eq!(
        (pos.kind_name().as_str(), pos.entries, pos.bytes),
        ("operator list", Some(4), 4)
    );
    let seen = state(&d, "src", "seen");
    assert_eq!(
        (seen.kind_name().as_str(), seen.entries),
        ("union list", Some(1))
    );
    // a and b share subtask 0's file: its 4 entries cannot be split between them.
    let a = state(&d, "agg", "a");
    assert_eq!((a.kind_name().as_str(), a.entries), ("keyed value", None));
    assert_eq!((a.key_groups, a.bytes), (1, 5));
    assert_eq!(state(&d, "agg", "b").entries, None);
    // c is the only non-empty state of subtask 1's file.
    let c = state(&d, "agg", "c");
    assert_eq!((c.entries, c.key_groups, c.bytes), (Some(1), 1, 2));
    let names: Vec<_> = d.operators[1].states.iter().map(|s| &s.name).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(d.operators[2].states.is_empty());
    assert_eq!(d.operators[2].files, 0);
}

#[test]
fn raw_state_reads_keyed_groups_and_list_elements() {
    let tmp = tempfile::tempdir().unwrap();
    let chk = write_sample(tmp.path());
    let a = raw_state(&chk, "agg", "a").unwrap();
    assert_eq!(
        (a.scope, a.kind, a.element_count()),
        (StateScope::Keyed, StateKind::Value, None)
    );
    let entries = a.keyed_entries::<u64, u64>().unwrap();
    let kv: Vec<_> = entries
        .iter()
        .map(|e| (e.key_group, e.key, e.value))
        .collect();
    assert_eq!(kv, [(0, 1, 100), (0, 2, 200)]);
    let c = raw_state(&chk, "agg", "c").unwrap();
    let RawEntries::Keyed(groups) = &c.entries else {
        panic!("keyed state read as {:?}", c.entries)
    };
    assert_eq!((groups[0].subtask, groups[0].key_group), (1, 3));

    let pos = raw_state(&chk, "src", "pos").unwrap();
    assert_eq!(
        (pos.scope, pos.element_count()),
        (StateScope::Operator, Some(4))
    );
    let els: Vec<_> = pos
        .list_elements::<u64>()
        .unwrap()
        .into_iter()
        .map(|e| (e.subtask, e.index, e.value))
        .collect();
    assert_eq!(els, [(0, 0, 0), (0, 1, 7), (1, 0, 10), (1, 1, 7)]);
    assert_eq!(pos.job_name, "job");
}

#[test]
fn wrong_types_are_errors_not_garbage() {
    let tmp = tempfile::tempdir().unwrap();
    let chk = write_sample(tmp.path());
    let a = raw_state(&chk, "agg", "a").unwrap();
    // Bytes 1, 100, 2, 200 read as ((u64, u64, u64), String): the string's length
    // (200) runs past the end → an error, never a panic.
    assert!(a.keyed_entries::<(u64, u64, u64), String>().is_err());
    assert!(a.list_elements::<u64>().is_err());
    let seen = raw_state(&chk, "src", "seen").unwrap();
    assert!(seen.keyed_entries::<u64, u64>().is_err());
    // "x" encodes as [1, b'x']: as a u8 there is a byte left over.
    let err = seen.list_elements::<u8>().unwrap_err().to_string();
    assert!(err.contains("left over") && err.contains("'seen'"), "{err}");
}

#[test]
fn unknown_uid_and_state_list_what_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let chk = write_sample(tmp.path());
    let err = raw_state(&chk, "nope", "x").unwrap_err().to_string();
    assert!(
        err.contains("no operator with uid 'nope'")
            && err.contains("its operators are: agg, sink, src"),
        "{err}"
    );
    let err = raw_state(&chk, "agg", "zz").unwrap_err().to_string();
    assert!(err.contains("its states are: a, b, c"), "{err}");
    let err = raw_state(&chk, "sink", "zz").unwrap_err().to_string();
    assert!(err.ends_with("it has none"), "{err}");
}

#[test]
fn missing_foreign_corrupt_and_job_folders_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let chk = write_sample(tmp.path());
    let err = describe(&tmp.path().join("none")).unwrap_err().to_string();
    assert!(
        err.contains("not a complete checkpoint (no such folder)"),
        "{err}"
    );
    let err = describe(&tmp.path().join("job")).unwrap_err().to_string();
    assert!(
        err.contains("is a job's checkpoint folder") && err.contains("chk-1"),
        "{err}"
    );

    let file = chk.join("agg/kg-2-4");
    let good = std::fs::read(&file).unwrap();
    let mut bad = good.clone();
    bad[25] ^= 0x40;
    std::fs::write(&file, &bad).unwrap();
    let err = describe(&chk).unwrap_err().to_string();
    assert!(err.contains("kg-2-4 is corrupted"), "{err}");
    // raw_state of another operator does not read that file.
    assert!(raw_state(&chk, "src", "pos").is_ok());
    assert!(raw_state(&chk, "agg", "a").is_err());
    std::fs::write(&file, &good).unwrap();

    let meta = chk.join("_metadata");
    std::fs::write(&meta, b"{\"not\": \"weir\"}").unwrap();
    let err = describe(&chk).unwrap_err().to_string();
    assert!(err.contains("is not a Weir checkpoint file"), "{err}");
    // An intact envelope around a payload that is not metadata.
    std::fs::write(
        &meta,
        crate::checkpoint::format::encode(FileKind::Metadata, &[0xff; 3]),
    )
    .unwrap();
    let err = describe(&chk).unwrap_err().to_string();
    assert!(err.contains("cannot decode checkpoint metadata"), "{err}");
    std::fs::remove_file(&meta).unwrap();
    let err = describe(&chk).unwrap_err().to_string();
    assert!(err.contains("no _metadata"), "{err}");
}

#[test]
fn kind_names_follow_the_variant_names() {
    assert_eq!(
        kind_name(StateScope::Keyed, StateKind::Value),
        "keyed value"
    );
    assert_eq!(
        kind_name(StateScope::Operator, StateKind::OperatorList),
        "operator list"
    );
    assert_eq!(
        kind_name(StateScope::Operator, StateKind::UnionList),
        "union list"
    );
    for (kind, name) in [
        (StateKind::List, "keyed list"),
        (StateKind::Reducing, "keyed reducing"),
        (StateKind::Aggregating, "keyed aggregating"),
        (StateKind::Map, "keyed map"),
    ] {
        assert_eq!(kind_name(StateScope::Keyed, kind), name);
    }
}
