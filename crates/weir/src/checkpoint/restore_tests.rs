//! Unit tests of [`super`] (restore.rs).

use super::*;
use crate::checkpoint::layout::tests::{sample_file, sections_of};
use crate::checkpoint::layout::KeyedStateFile;
use crate::checkpoint::shared_bytes::SharedBytes;

fn sample() -> KeyedStateFile {
    sample_file(9, 16, 7)
}

#[test]
fn borrowed_layout_matches_the_file_layout() {
    let file = sample();
    let payload = SharedBytes::from(postcard::to_allocvec(&file).unwrap());
    let loaded = LoadedKeyedFile::decode(Path::new("f"), &payload, 16).unwrap();
    assert_eq!(loaded.range, file.range);
    assert_eq!(loaded.states, file.states);
    assert_eq!(loaded.ttl, file.ttl);
    let groups: Vec<(u32, Vec<Vec<u8>>)> = loaded
        .groups
        .iter()
        .map(|(g, s)| (*g, s.iter().map(|b| b.to_vec()).collect()))
        .collect();
    assert_eq!(groups, sections_of(&file));
    // The sections are ranges of the payload, not copies.
    let range = payload.as_ptr_range();
    for (_, sections) in &loaded.groups {
        for s in sections.iter().filter(|s| !s.is_empty()) {
            assert!(range.contains(&s.as_ptr()));
        }
    }
}

fn restored(uids: &[&str], max_parallelism: u32) -> RestoredCheckpoint {
    use crate::checkpoint::metadata::{OperatorMeta, SnapshotKind, TaskCheckpointStats};
    RestoredCheckpoint {
        path: PathBuf::from("/c/chk-3"),
        meta: CheckpointMetadata {
            checkpoint_id: 3,
            job_name: "job".into(),
            trigger_timestamp_ms: 0,
            completed_timestamp_ms: 0,
            mode: crate::checkpoint::barrier::CheckpointingMode::ExactlyOnce,
            max_parallelism,
            operators: uids
                .iter()
                .map(|u| OperatorMeta {
                    uid: u.to_string(),
                    parallelism: 1,
                    subtasks: Vec::new(),
                })
                .collect(),
            stats: TaskCheckpointStats::default(),
            tasks: Vec::new(),
            snapshot: SnapshotKind::Checkpoint,
            weir_version: "test".into(),
            sources: Vec::new(),
            run_id: String::new(),
            files: Vec::new(),
            channel_state: Vec::new(),
            unaligned_tasks: 0,
            schemas: Vec::new(),
            incremental: Vec::new(),
            incremental_index: Vec::new(),
        },
        operator_state: HashMap::new(),
        keyed_state: HashMap::new(),
        keyed_deltas: HashMap::new(),
        channel_state: HashMap::new(),
        dropped: Default::default(),
        remote_chains: Default::default(),
    }
}

#[test]
fn a_restore_needs_the_same_key_groups_and_drops_state_only_when_allowed() {
    let job: Vec<String> = vec!["src".into(), "count".into()];
    let r = restored(&["src", "count"], 128);
    assert_eq!(r.check_compatible(&job, 128, false).unwrap(), None);
    let err = r.check_compatible(&job, 64, true).unwrap_err().to_string();
    assert!(
        err.contains(
            "taken with max parallelism 128, the job uses 64; run with --max-parallelism 128"
        ),
        "{err}"
    );
    let r = restored(&["src", "old", "gone"], 128);
    let err = r
        .check_compatible(&job, 128, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("(uids: old, gone)"), "{err}");
    assert!(err.contains("--allow-non-restored-state"), "{err}");
    let notice = r.check_compatible(&job, 128, true).unwrap();
    assert_eq!(
        notice.as_deref(),
        Some("dropping state of operators no longer in the job: old, gone")
    );
}

#[test]
fn damaged_keyed_payloads_are_decode_errors_naming_the_file() {
    let bytes = postcard::to_allocvec(&sample()).unwrap();
    for len in 0..bytes.len() {
        let cut = SharedBytes::from(bytes[..len].to_vec());
        let err = LoadedKeyedFile::decode(Path::new("/c/op/0"), &cut, 16)
            .err()
            .unwrap_or_else(|| panic!("accepted a payload cut to {len} bytes"));
        assert!(err.to_string().contains("keyed state in /c/op/0"), "{err}");
    }
}
