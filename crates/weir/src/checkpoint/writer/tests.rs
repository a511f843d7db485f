//! Unit tests of the snapshot writer: the streamed keyed-state payload is the derived
//! encoding of a `KeyedStateFile`, and holds the state as of the barrier.
use super::*;
use crate::checkpoint::layout::{KeyGroupSection, KeyedStateFile};
use crate::state::key_group::key_group;
use crate::state::keyed::{
    KeyedContext, KeyedStateBackend, KeyedStateStore, StateTtlConfig, ValueState,
};
use std::collections::BTreeMap;
use std::time::Duration;

const MAXP: u32 = 16;
const RANGE: KeyGroupRange = KeyGroupRange { start: 3, end: 11 };

/// Keys of [`RANGE`], with two states: `plain` on every key, `aged` (TTL) on every third.
fn backend() -> (KeyedStateBackend<u64>, ValueState<u64>, ValueState<u64>) {
    filled(KeyedStateBackend::new(RANGE, MAXP, BTreeMap::new()))
}

fn filled(
    mut b: KeyedStateBackend<u64>,
) -> (KeyedStateBackend<u64>, ValueState<u64>, ValueState<u64>) {
    let mut store = KeyedStateStore::new(&mut b);
    let plain = store.value_state::<u64>("plain").unwrap();
    let ttl = StateTtlConfig::new(Duration::from_secs(3600));
    let aged = store.with_ttl(ttl).value_state::<u64>("aged").unwrap();
    for k in keys() {
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut b,
        };
        ctx.set(plain, k);
        if k % 3 == 0 {
            ctx.set(aged, k * 10);
        }
    }
    (b, plain, aged)
}

fn keys() -> impl Iterator<Item = u64> {
    (0..3000u64).filter(|k| RANGE.contains(key_group(k, MAXP)))
}

/// The payload as the writer built it before streaming: every group in memory, then the
/// derived serde encoding of the whole file.
fn derived(keyed: &KeyedSnapshot) -> Vec<u8> {
    let per_state: Vec<Vec<Vec<u8>>> = keyed
        .tables
        .iter()
        .map(|t| {
            let mut groups = vec![Vec::new(); RANGE.len() as usize];
            t.view.encode_groups(MAXP, RANGE, &mut groups).unwrap();
            groups
        })
        .collect();
    let groups = (0..RANGE.len() as usize)
        .filter(|&g| per_state.iter().any(|s| !s[g].is_empty()))
        .map(|g| KeyGroupSection {
            group: RANGE.start + g as u32,
            states: per_state.iter().map(|s| s[g].clone()).collect(),
        })
        .collect();
    postcard::to_stdvec(&KeyedStateFile {
        range: RANGE,
        max_parallelism: MAXP,
        states: keyed
            .tables
            .iter()
            .map(|t| (t.name.clone(), t.kind))
            .collect(),
        groups,
        ttl: keyed.tables.iter().map(|t| t.ttl).collect(),
    })
    .unwrap()
}

/// Every `(key, value)` of state `i` in a keyed-state payload.
fn entries(payload: &[u8], i: usize) -> BTreeMap<u64, u64> {
    let file: KeyedStateFile = postcard::from_bytes(payload).unwrap();
    let mut out = BTreeMap::new();
    for section in &file.groups {
        let mut bytes = section.states[i].as_slice();
        while !bytes.is_empty() {
            let (k, rest): (u64, _) = postcard::take_from_bytes(bytes).unwrap();
            let (v, rest): (u64, _) = postcard::take_from_bytes(rest).unwrap();
            // TTL'd entries carry a stamp after the value.
            bytes = if file.ttl[i] {
                postcard::take_from_bytes::<u64>(rest).unwrap().1
            } else {
                rest
            };
            assert_eq!(key_group(&k, MAXP), section.group);
            out.insert(k, v);
        }
    }
    out
}

fn no_spill() -> Result<Vec<u8>> {
    panic!("a state under the budget is not spilled")
}

fn mem_spill() -> Result<Vec<u8>> {
    Ok(Vec::new())
}

/// The disk backend's snapshot streams into the same file format, with the same entries,
/// as the memory backend's: a savepoint does not depend on the backend.
#[cfg(feature = "disk-state")]
#[test]
fn a_disk_snapshot_streams_the_same_file_as_memory() {
    use crate::state::keyed::{DiskOptions, StateBackendKind};
    let kind = StateBackendKind::Disk(DiskOptions {
        cache_entries: 50,
        ..DiskOptions::new(std::env::temp_dir())
    });
    let (mut disk, _, _) =
        filled(KeyedStateBackend::with_kind(&kind, RANGE, MAXP, BTreeMap::new()).unwrap());
    let (mut memory, _, _) = backend();
    let mut on_disk = Vec::new();
    let out = stream_keyed(&disk.snapshot().unwrap(), &mut on_disk, 1 << 10, mem_spill).unwrap();
    assert!(
        on_disk == derived(&disk.snapshot().unwrap()),
        "the disk backend's payload is the derived encoding of a keyed-state file"
    );
    let mut in_memory = Vec::new();
    let want = stream_keyed(
        &memory.snapshot().unwrap(),
        &mut in_memory,
        usize::MAX,
        no_spill,
    )
    .unwrap();
    assert_eq!(out.entries, want.entries);
    for state in 0..2 {
        assert_eq!(
            entries(&on_disk, state),
            entries(&in_memory, state),
            "state {state}"
        );
    }
}

#[test]
fn streamed_payload_is_the_derived_encoding() {
    let (mut b, _, _) = backend();
    let mut streamed = Vec::new();
    let out = stream_keyed(&b.snapshot().unwrap(), &mut streamed, usize::MAX, no_spill).unwrap();
    let want = derived(&b.snapshot().unwrap());
    assert!(
        streamed == want,
        "streamed payload differs from the derived one"
    );
    let all = keys().count() as u64;
    assert_eq!(
        out.entries,
        all + keys().filter(|k| k % 3 == 0).count() as u64
    );
    // Per state, its entries' bytes: every key in the first, a third of them in the second,
    // together less than the file (which frames them).
    let sizes: Vec<u64> = out.states.iter().map(|s| s.bytes).collect();
    assert!(out.states.iter().all(|s| s.keyed), "{:?}", out.states);
    assert!(sizes[0] > sizes[1] && sizes[1] > 0, "{sizes:?}");
    assert!(sizes.iter().sum::<u64>() < streamed.len() as u64);
    assert_eq!(entries(&streamed, 0).len() as u64, all);
}

#[test]
fn writes_after_the_barrier_are_not_in_the_snapshot() {
    let (mut b, plain, aged) = backend();
    let snap = b.snapshot().unwrap();
    // Write to half of the keys (so their shards are encoded by this thread, before the
    // writer gets to them), delete some, add new ones.
    for k in keys().filter(|k| k % 2 == 0) {
        let mut ctx = KeyedContext {
            key: &k,
            backend: &mut b,
        };
        *ctx.get_mut_or_insert_with(plain, || 0) += 1000;
        ctx.set(aged, 1);
        if k % 10 == 0 {
            ctx.clear(plain);
        }
    }
    let mut streamed = Vec::new();
    stream_keyed(&snap, &mut streamed, 100, mem_spill).unwrap();
    drop(snap);
    let plain_then: BTreeMap<u64, u64> = keys().map(|k| (k, k)).collect();
    let aged_then: BTreeMap<u64, u64> =
        keys().filter(|k| k % 3 == 0).map(|k| (k, k * 10)).collect();
    assert_eq!(entries(&streamed, 0), plain_then);
    assert_eq!(entries(&streamed, 1), aged_then);
    // And the live state has the writes.
    let k = keys().find(|k| k % 2 == 0 && k % 10 != 0).unwrap();
    let mut ctx = KeyedContext {
        key: &k,
        backend: &mut b,
    };
    assert_eq!(ctx.get(plain), Some(&(k + 1000)));
}

#[test]
fn a_key_outside_the_range_fails_the_snapshot() {
    let (mut b, plain, _) = backend();
    let k = (0..100u64)
        .find(|k| !RANGE.contains(key_group(k, MAXP)))
        .unwrap();
    KeyedContext {
        key: &k,
        backend: &mut b,
    }
    .set(plain, 1);
    let err = stream_keyed(&b.snapshot().unwrap(), &mut Vec::new(), 0, mem_spill)
        .unwrap_err()
        .to_string();
    let g = key_group(&k, MAXP);
    assert!(err.contains(&format!("key group {g}, outside")), "{err}");
}

/// A job writing `b`'s keyed state (as operator `count`) into checkpoint `id`.
fn job(b: &mut KeyedStateBackend<u64>, id: u64, frozen: bool) -> SnapshotJob {
    let mut snapshot = TaskSnapshot::new();
    snapshot
        .parts
        .push(crate::checkpoint::snapshot::OperatorSnapshotPart {
            uid: "count".into(),
            operator_state: Default::default(),
            keyed: Some(b.snapshot().unwrap()),
        });
    SnapshotJob {
        attempt: 0,
        task: 0,
        subtask: 0,
        parallelism: 1,
        checkpoint_id: id,
        snapshot: SnapshotPayload::Captured(snapshot),
        sync: Duration::ZERO,
        alignment: Duration::ZERO,
        frozen,
        times: Default::default(),
    }
}

#[test]
fn live_and_frozen_snapshots_write_the_same_file_into_every_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(tmp.path(), "job").unwrap();
    let (mut b, _, _) = backend();
    let read = |id: u64, ack: &TaskAck| {
        let file = ack.operators[0].state.keyed_state.as_ref().unwrap();
        let chk = storage.checkpoint_path(id);
        crate::checkpoint::storage::read_state_file(
            &chk,
            &file.file.path,
            crate::checkpoint::layout::KEYED_STATE_KIND,
            None,
        )
        .unwrap()
    };
    let live = write_snapshot(&storage, job(&mut b, 1, false)).unwrap();
    let frozen = write_snapshot(&storage, job(&mut b, 2, true)).unwrap();
    let Some(Frozen::Here(encoded)) = frozen.frozen.clone() else {
        panic!("a frozen snapshot comes back, encoded here")
    };
    let mut again = job(&mut b, 3, false);
    again.snapshot = SnapshotPayload::Encoded(encoded);
    let later = write_snapshot(&storage, again).unwrap();
    let want = derived(&b.snapshot().unwrap());
    assert!(read(1, &live) == want, "live file differs");
    assert!(read(2, &frozen) == want, "frozen file differs");
    assert!(read(3, &later) == want, "re-written frozen file differs");
    let entries = |a: &TaskAck| a.operators[0].state.keyed_state.as_ref().unwrap().entries;
    assert_eq!(
        (entries(&live), entries(&later)),
        (entries(&frozen), entries(&frozen))
    );
    // Scratch and spill files leave nothing behind.
    drop(later);
    drop(frozen);
    let leftovers: Vec<_> = std::fs::read_dir(storage.root())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
