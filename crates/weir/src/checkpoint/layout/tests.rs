//! Unit tests of the state-file layout: the streamed pieces, the derived encoding and the
//! borrowed decoding agree byte for byte, and the shape checks refuse what readers must.
use super::*;

/// The layout `KeyGroupSection` had with derived serde for its `Vec<Vec<u8>>`.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct DerivedSection {
    group: u32,
    states: Vec<Vec<u8>>,
}

/// A file of key groups `3..end` under `max_parallelism`, with two states and two
/// sections, group 3's and `second`'s (whose second state is TTL'd); shared with the
/// restore tests.
pub(crate) fn sample_file(end: u32, max_parallelism: u32, second: u32) -> KeyedStateFile {
    KeyedStateFile {
        range: KeyGroupRange { start: 3, end },
        max_parallelism,
        states: vec![
            ("a".into(), StateKind::Value),
            ("b".into(), StateKind::List),
        ],
        groups: vec![
            KeyGroupSection {
                group: 3,
                states: vec![vec![1, 2, 3], vec![]],
            },
            KeyGroupSection {
                group: second,
                states: vec![vec![9; 300], vec![4]],
            },
        ],
        ttl: vec![false, true],
    }
}

/// `file`'s sections as `(group, states)`: what a decoding must give back.
pub(crate) fn sections_of(file: &KeyedStateFile) -> Vec<(u32, Vec<Vec<u8>>)> {
    file.groups
        .iter()
        .map(|s| (s.group, s.states.clone()))
        .collect()
}

fn sample() -> KeyedStateFile {
    // A group id above 127 takes a two-byte varint.
    sample_file(200, 256, 150)
}

#[test]
fn sections_encode_exactly_as_the_derived_layout() {
    let long: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    let section = KeyGroupSection {
        group: 7,
        states: vec![vec![], vec![1, 2, 255], long.clone()],
    };
    let derived = DerivedSection {
        group: 7,
        states: section.states.clone(),
    };
    let ours = postcard::to_allocvec(&section).unwrap();
    assert_eq!(ours, postcard::to_allocvec(&derived).unwrap());
    let back: KeyGroupSection = postcard::from_bytes(&ours).unwrap();
    assert_eq!(back, section);
    let old: DerivedSection = postcard::from_bytes(&ours).unwrap();
    assert_eq!(old.states, derived.states);
}

#[test]
fn the_streamed_pieces_are_the_derived_encoding_of_the_file() {
    let file = sample();
    let states: Vec<(&str, StateKind)> =
        file.states.iter().map(|(n, k)| (n.as_str(), *k)).collect();
    let mut out = Vec::new();
    KeyedFileEncoder::header(
        file.range,
        file.max_parallelism,
        &states,
        file.groups.len(),
        &mut out,
    )
    .unwrap();
    for g in &file.groups {
        KeyedFileEncoder::group(g.group, g.states.len(), &mut out);
        for s in &g.states {
            KeyedFileEncoder::section(s.len(), &mut out);
            out.extend_from_slice(s);
        }
    }
    KeyedFileEncoder::trailer(&file.ttl, &mut out).unwrap();
    assert_eq!(out, postcard::to_allocvec(&file).unwrap());
}

#[test]
fn borrowed_decoding_reads_the_same_fields() {
    let file = sample();
    let bytes = postcard::to_allocvec(&file).unwrap();
    let r: KeyedStateFileRef<'_> = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(r.range, file.range);
    assert_eq!(r.max_parallelism, file.max_parallelism);
    assert_eq!(r.states, file.states);
    assert_eq!(r.ttl, file.ttl);
    let groups: Vec<(u32, Vec<Vec<u8>>)> = r
        .groups
        .iter()
        .map(|s| (s.group, s.states.iter().map(|b| b.to_vec()).collect()))
        .collect();
    assert_eq!(groups, sections_of(&file));
    assert_eq!(r.check(256), Ok(()));
}

#[test]
fn shape_checks_refuse_what_a_reader_cannot_trust() {
    let mut file = sample();
    assert_eq!(file.check(256), Ok(()));
    let err = file.check(128).unwrap_err();
    assert_eq!(
        err,
        "written with max parallelism 256 but the checkpoint says 128"
    );
    file.groups[1].group = 200;
    let err = file.check(256).unwrap_err();
    assert_eq!(err, "key group 200 lies outside the file's range 3..200");
    file.groups[1].group = 150;
    file.groups[0].states.pop();
    let err = file.check(256).unwrap_err();
    assert_eq!(
        err,
        "key group 3 has 1 state sections but the file declares 2 states"
    );
    // The borrowed decoding is checked by the same rule.
    let bytes = postcard::to_allocvec(&file).unwrap();
    let r: KeyedStateFileRef<'_> = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(r.check(256).unwrap_err(), err);
}

#[test]
fn file_names_and_the_files_a_subtask_reads() {
    assert_eq!(operator_state_file_name(3), "op-3");
    let r = KeyGroupRange::for_subtask(1, 2, 128);
    assert_eq!(keyed_state_file_name(r), "kg-64-128");
    // Rescaled from 2 to 3 subtasks: the middle one needs both old files.
    let old = [
        KeyGroupRange::for_subtask(0, 2, 128),
        KeyGroupRange::for_subtask(1, 2, 128),
    ];
    let mine = KeyGroupRange::for_subtask(1, 3, 128);
    assert!(old.iter().all(|f| file_holds_groups_of(*f, mine)));
    let first = KeyGroupRange::for_subtask(0, 3, 128);
    assert!(file_holds_groups_of(old[0], first) && !file_holds_groups_of(old[1], first));
}

#[test]
fn shared_file_names_carry_their_owner_checkpoint() {
    let range = KeyGroupRange { start: 4, end: 9 };
    let base = shared_keyed_file_name(12, range, false);
    let delta = shared_keyed_file_name(13, range, true);
    assert_eq!(
        (base.as_str(), delta.as_str()),
        ("chk-12-kg-4-9", "chk-13-kgd-4-9")
    );
    assert_eq!(shared_file_owner(&base), Some(12));
    assert_eq!(shared_file_owner(&delta), Some(13));
    for foreign in ["kg-4-9", "chk-x-kg-4-9", ".chk-12-kg-4-9.tmp", "chk-12"] {
        assert_eq!(shared_file_owner(foreign), None, "{foreign}");
    }
}

#[test]
fn operator_state_files_carry_their_lists_schemas_and_old_files_still_decode() {
    use crate::state::operator::{ListSnapshot, SnapshotContext};
    let mut ctx = SnapshotContext::new(1);
    ctx.set_operator_list("offsets", &[1u64, 2]).unwrap();
    ctx.set_union_list("names", &["a".to_string()]).unwrap();
    let lists = ctx.lists;
    let payload = encode_operator_state_file(&lists).unwrap();
    let back = decode_operator_state_file(&payload).unwrap();
    assert_eq!(back, lists, "lists, elements and schemas");
    assert!(back.values().all(|l| l.schema.as_ref().unwrap().traced()));
    // A file written before schemas: the lists alone.
    let old = postcard::to_stdvec(&lists).unwrap();
    let read = decode_operator_state_file(&old).unwrap();
    assert!(read.values().all(|l| l.schema.is_none()), "unversioned");
    let unversioned = lists.iter().map(|(n, l)| {
        let l = ListSnapshot {
            schema: None,
            ..l.clone()
        };
        (n.clone(), l)
    });
    assert_eq!(read, unversioned.collect());
    // Damaged schemas, or a schema for a list the file lacks, are errors, not panics.
    let mut cut = payload.clone();
    cut.truncate(old.len() + 3);
    assert!(decode_operator_state_file(&cut).is_err());
}
