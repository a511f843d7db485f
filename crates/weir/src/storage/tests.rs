//! Unit tests of checkpoint storage: layout, atomic writes, reads that reject damage.

use super::format::{HEADER_LEN, TRAILER_LEN};
use super::read::{read_checksummed, PARALLEL_READ_BYTES, READ_CHUNK};
use super::*;
use std::fs::{self, OpenOptions};

fn setup() -> (tempfile::TempDir, CheckpointStorage) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let storage = CheckpointStorage::open(tmp.path(), "job-1").expect("open");
    (tmp, storage)
}

fn names(dir: &Path) -> Vec<String> {
    let entries = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry"));
    let mut out: Vec<_> = entries
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    out.sort();
    out
}

/// Asserts the call failed with a message containing each `|`-separated part.
fn fails<T: std::fmt::Debug>(result: Result<T, StorageError>, wants: &str) {
    let msg = result.unwrap_err().to_string();
    let missing: Vec<_> = wants.split('|').filter(|w| !msg.contains(w)).collect();
    assert!(missing.is_empty(), "{msg:?} lacks {missing:?}");
}

#[test]
fn round_trip_leaves_no_temp_files_and_is_relocatable() {
    let (tmp, s) = setup();
    assert_eq!(s.root(), tmp.path().join("job-1"));
    let kind = FileKind::KeyedState;
    let StoredFile {
        path: rel, size, ..
    } = s
        .write_state_file(3, "count", "kg-0-63", kind, b"state")
        .unwrap();
    assert_eq!(rel, "count/kg-0-63");
    let chk = s.write_metadata(3, b"meta").unwrap();
    assert_eq!(chk, tmp.path().join("job-1/chk-3"));
    assert_eq!(fs::metadata(chk.join(&rel)).unwrap().len(), size);
    assert_eq!(names(&chk), ["_metadata", "count"]);
    assert_eq!(names(&chk.join("count")), ["kg-0-63"]);
    assert_eq!(names(s.root()), ["_lock", "chk-3"]);
    let moved = tmp.path().join("elsewhere");
    fs::rename(&chk, &moved).unwrap();
    assert_eq!(read_metadata(&moved).unwrap(), b"meta");
    assert_eq!(read_state_file(&moved, &rel, kind, None).unwrap(), b"state");
}

#[test]
fn streamed_files_equal_whole_ones() {
    let (_tmp, s) = setup();
    let kind = FileKind::KeyedState;
    let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let StoredFile {
        path: whole, size, ..
    } = s.write_state_file(1, "op", "a", kind, &payload).unwrap();
    let StoredFile {
        path: streamed,
        size: size2,
        ..
    } = s
        .write_state_file_streamed(1, "op", "b", kind, |w| {
            for part in payload.chunks(70_001) {
                w.write(part)?;
            }
            Ok::<(), StorageError>(())
        })
        .unwrap();
    assert_eq!(size, size2);
    let chk = s.checkpoint_path(1);
    let (a, b) = (
        fs::read(chk.join(whole)).unwrap(),
        fs::read(chk.join(&streamed)),
    );
    let want = format::encode(kind, &payload);
    assert!(
        a == want && b.unwrap() == want,
        "a written file is not the envelope"
    );
    assert_eq!(
        read_state_file(&chk, &streamed, kind, None).unwrap(),
        payload
    );
    // A failed payload leaves no file, temporary or real.
    let failed = s.write_state_file_streamed(1, "op", "c", kind, |w| {
        w.write(b"partial")?;
        Err(StorageError::NotACheckpoint {
            path: PathBuf::from("x"),
            reason: "test",
        })
    });
    assert!(failed.is_err());
    assert_eq!(names(&chk.join("op")), ["a", "b"]);
}

#[test]
fn spill_files_read_back_and_leave_nothing() {
    let (_tmp, s) = setup();
    let mut spill = s.spill_file(4, "op").unwrap();
    assert_eq!(spill.append(b"hello ").unwrap(), 0);
    assert_eq!(spill.append(b"world").unwrap(), 6);
    let mut buf = [0u8; 5];
    spill.read_at(6, &mut buf).unwrap();
    assert_eq!(&buf, b"world");
    spill.read_at(1, &mut buf).unwrap();
    assert_eq!(
        spill.append(b"!").unwrap(),
        11,
        "appends after reads go at the end"
    );
    assert_eq!(&buf, b"ello ");
    drop(spill);
    assert!(names(&s.checkpoint_path(4).join("op")).is_empty());
}

#[test]
fn completeness_max_id_and_discard() {
    let (tmp, s) = setup();
    assert_eq!(s.completed_checkpoints().unwrap(), Vec::<u64>::new());
    assert_eq!(s.max_checkpoint_id().unwrap(), 0);
    for id in [2, 10, 11] {
        let kind = FileKind::OperatorState;
        s.write_state_file(id, "op", "0", kind, b"x").unwrap();
    }
    s.write_metadata(10, b"m").unwrap();
    s.write_metadata(2, b"m").unwrap();
    for junk in "chk-x chk-007 chk-+5 chk- savepoint-99 chk-99.tmp".split(' ') {
        fs::create_dir(s.root().join(junk)).unwrap();
    }
    assert_eq!(s.completed_checkpoints().unwrap(), [2, 10]);
    assert_eq!(s.max_checkpoint_id().unwrap(), 11);
    let chk11 = s.checkpoint_path(11);
    fails(
        read_metadata(&chk11),
        "not a complete checkpoint (no _metadata): |chk-11",
    );
    fails(read_metadata(&tmp.path().join("no")), "(no such folder)");
    fails(read_metadata(&chk11.join("op/0")), "(not a folder)");
    fails(s.write_metadata(10, b"again"), "complete checkpoint|reused");
    s.discard(10).unwrap();
    assert!(!s.checkpoint_path(10).exists());
    assert_eq!(s.completed_checkpoints().unwrap(), [2]);
    s.discard(10).unwrap();
    assert_eq!(s.max_checkpoint_id().unwrap(), 11);
}

#[test]
fn unwritable_dir_fails_at_open_with_a_way_out() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    fs::write(&file, b"not a folder").unwrap();
    let result = CheckpointStorage::open(&file.join("sub"), "job");
    let msg = result.unwrap_err().to_string();
    let path = file.join("sub/job").display().to_string();
    let want = format!("cannot create checkpoint directory {path}: ");
    assert!(msg.starts_with(&want), "{msg}");
    assert!(msg.ends_with("or pass --checkpoint-dir)"), "{msg}");
    assert!(!msg.contains("os error"), "{msg}");
}

#[test]
fn failed_write_leaves_no_temp_file() {
    let (_tmp, s) = setup();
    let dir = s.checkpoint_path(1).join("op");
    fs::create_dir_all(dir.join("0/in-the-way")).unwrap();
    let result = s.write_state_file(1, "op", "0", FileKind::KeyedState, b"x");
    fails(result, "cannot rename temporary file to |op/0: ");
    assert_eq!(names(&dir), ["0"]);
}

#[test]
fn damaged_state_files_are_named() {
    let (_tmp, s) = setup();
    let (chk, kind) = (s.checkpoint_path(1), FileKind::OperatorState);
    let StoredFile {
        path: rel, size, ..
    } = s.write_state_file(1, "op", "0", kind, b"abc").unwrap();
    let file = chk.join(&rel);
    let path = file.display().to_string();
    let handle = OpenOptions::new().write(true).open(&file).unwrap();
    handle.set_len(size - 2).unwrap();
    fails(
        read_state_file(&chk, &rel, kind, None),
        &format!("{path} is truncated"),
    );
    let mut bytes = format::encode(kind, b"abc");
    bytes[HEADER_LEN] ^= 0x40;
    fs::write(&file, &bytes).unwrap();
    let want = format!("{path} is corrupted (checksum mismatch");
    fails(read_state_file(&chk, &rel, kind, None), &want);
    let missing = read_state_file(&chk, "op/1", kind, None);
    fails(missing, "op/1: No such file|copied without all its files");
    s.write_state_file(1, "op", "2", kind, b"abc").unwrap();
    let wrong = read_state_file(&chk, "op/2", FileKind::KeyedState, None);
    fails(wrong, "expected keyed state, found operator state");
}

#[test]
fn payload_reads_check_exactly_like_whole_reads() {
    let (_tmp, s) = setup();
    let (chk, kind) = (s.checkpoint_path(1), FileKind::KeyedState);
    let StoredFile {
        path: rel, size: _, ..
    } = s.write_state_file(1, "op", "0", kind, b"payload").unwrap();
    assert_eq!(
        &*read_state_payload(&chk, &rel, kind, None).unwrap(),
        b"payload"
    );
    let mut bytes = format::encode(kind, b"payload");
    bytes[HEADER_LEN + 3] ^= 0x01;
    fs::write(chk.join(&rel), &bytes).unwrap();
    let path = chk.join(&rel).display().to_string();
    fails(
        read_state_payload(&chk, &rel, kind, None),
        &format!("{path} is corrupted (checksum mismatch"),
    );
    fails(
        read_state_payload(&chk, "op/9", kind, None),
        "op/9: No such file",
    );
    assert!(matches!(
        read_state_payload(&chk, "../x", kind, None),
        Err(StorageError::UnsafePath { .. })
    ));
}

#[test]
fn parallel_reads_checksum_what_they_read() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("f");
    for len in [8usize, 9, 10, 1000, 3 * READ_CHUNK + 17] {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        fs::write(&file, &bytes).unwrap();
        let (read, crc) =
            read_checksummed(&local::LocalBackend::new(tmp.path().into()), "f", 0).unwrap();
        assert_eq!(read, bytes, "{len}");
        // On one core (e.g. `taskset -c 0`) a local file is read whole, unchecksummed.
        let two_cores = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
        let want = two_cores.then(|| crc32c::crc32c(&bytes[..len - TRAILER_LEN]));
        assert_eq!(crc, want, "{len}");
        let (read, crc) = read_checksummed(
            &local::LocalBackend::new(tmp.path().into()),
            "f",
            len as u64 + 1,
        )
        .unwrap();
        assert_eq!(
            (read, crc),
            (bytes, None),
            "{len}: small files are read whole"
        );
    }
}

#[test]
fn large_damaged_state_files_are_rejected() {
    let (_tmp, s) = setup();
    let (chk, kind) = (s.checkpoint_path(1), FileKind::KeyedState);
    let payload: Vec<u8> = (0..PARALLEL_READ_BYTES as usize + 5)
        .map(|i| (i % 253) as u8)
        .collect();
    let StoredFile {
        path: rel, size: _, ..
    } = s.write_state_file(1, "op", "0", kind, &payload).unwrap();
    assert!(*read_state_payload(&chk, &rel, kind, None).unwrap() == payload[..]);
    let file = chk.join(&rel);
    let path = file.display().to_string();
    let intact = fs::read(&file).unwrap();
    // A flipped bit in either half, in the trailer, an extra byte, a missing byte.
    for at in [HEADER_LEN + 1, intact.len() / 2 + 3, intact.len() - 1] {
        let mut bytes = intact.clone();
        bytes[at] ^= 0x10;
        fs::write(&file, &bytes).unwrap();
        let want = format!("{path} is corrupted (checksum mismatch");
        fails(read_state_payload(&chk, &rel, kind, None), &want);
    }
    let mut longer = intact.clone();
    longer.push(0);
    fs::write(&file, &longer).unwrap();
    fails(
        read_state_payload(&chk, &rel, kind, None),
        "has trailing bytes",
    );
    fs::write(&file, &intact[..intact.len() - 1]).unwrap();
    fails(read_state_payload(&chk, &rel, kind, None), "is truncated");
}

#[test]
fn hostile_paths_and_unsafe_names_are_rejected() {
    let (tmp, s) = setup();
    let secret = format::encode(FileKind::KeyedState, b"s");
    fs::write(tmp.path().join("secret"), secret).unwrap();
    let chk = s.write_metadata(1, b"m").unwrap();
    let escapes = "../../secret|/etc/passwd|op/../../../secret||op//x|./x|..\\..\\x|o/\0";
    for bad in escapes.split('|') {
        let result = read_state_file(&chk, bad, FileKind::KeyedState, None);
        assert!(
            matches!(result, Err(StorageError::UnsafePath { .. })),
            "{bad:?}"
        );
    }
    let long = "x".repeat(MAX_NAME_LEN + 1);
    let bad_names = "|a/b|a\\b|..|.|.hidden|a\0b|a\nb|_metadata|".to_string() + &long;
    for bad in bad_names.split('|') {
        let uid = s.write_state_file(1, bad, "0", FileKind::KeyedState, b"");
        fails(uid, "invalid operator uid");
        let name = s.write_state_file(1, "op", bad, FileKind::KeyedState, b"");
        fails(name, "invalid state file name");
    }
    fails(
        CheckpointStorage::open(tmp.path(), "../up"),
        "invalid job id",
    );
    assert!(validate_name("operator uid", "my-op_1.v2 (ünïcode)").is_ok());
}

#[test]
fn checkpoint_dir_names() {
    assert_eq!(parse_checkpoint_dir_name("chk-0"), Some(0));
    assert_eq!(parse_checkpoint_dir_name("chk-42"), Some(42));
    for bad in "chk- chk-007 chk-+1 chk--1 chk-1a chk-99999999999999999999 x".split(' ') {
        assert_eq!(parse_checkpoint_dir_name(bad), None, "{bad}");
    }
}

#[test]
fn one_run_owns_a_job_folder_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let first = CheckpointStorage::open(tmp.path(), "job").unwrap();
    let clone = first.clone();
    let err = CheckpointStorage::open(tmp.path(), "job").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StorageError::InUse { .. }), "{msg}");
    assert!(
        msg.contains(&format!("process {}", std::process::id())),
        "{msg}"
    );
    assert!(msg.contains("--job-name or --checkpoint-dir"), "{msg}");
    // Another job's folder is free.
    CheckpointStorage::open(tmp.path(), "other").unwrap();
    // Held while any clone lives; free once the last is gone.
    drop(first);
    assert!(CheckpointStorage::open(tmp.path(), "job").is_err());
    drop(clone);
    let again = CheckpointStorage::open(tmp.path(), "job").unwrap();
    // The lock file is not a checkpoint.
    assert_eq!(again.max_checkpoint_id().unwrap(), 0);
}

#[test]
fn locations_without_a_bucket_or_with_a_scheme_typo_are_refused() {
    // `s3://` alone would take the job's name (joined after it) for the bucket.
    for bare in ["s3://", "s3:///x", "mem://"] {
        fails(check_location(Path::new(bare)), "no |named after");
        fails(
            CheckpointStorage::open(Path::new(bare), "job"),
            "no |named after",
        );
    }
    // `s3:bkt/x` would be a local folder named `s3:bkt`: refused, naming the URL meant.
    for (typo, meant) in [("s3:bkt/x", "s3://bkt/x"), ("s3:/bkt/x", "s3://bkt/x")] {
        fails(
            check_location(Path::new(typo)),
            &format!("did you mean {meant}?"),
        );
        fails(open_backend(Path::new(typo)).map(|_| ()), meant);
    }
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("s3:bkt");
    // A path that merely contains `s3:` further on, or starts with `./`, is a folder.
    check_location(&typo).unwrap();
    check_location(Path::new("./s3:bkt/x")).unwrap();
    check_location(Path::new("s3://bkt/x")).unwrap();
    check_location(Path::new("weir-checkpoints")).unwrap();
}

#[test]
fn shared_files_live_beside_the_checkpoints_and_only_they_are_deleted_as_shared() {
    let (_tmp, s) = setup();
    let kind = FileKind::KeyedStateDelta;
    let f = s
        .write_shared_file_streamed::<StorageError>("op", "chk-3-kgd-0-7", kind, |w| w.write(b"d"))
        .unwrap();
    assert_eq!(f.path, "shared/op/chk-3-kgd-0-7");
    assert!(s.root().join(&f.path).is_file());
    let payload = read_state_file(s.root(), &f.path, kind, Some(f.crc32c)).unwrap();
    assert_eq!(payload, b"d");
    assert_eq!(s.shared_files().unwrap(), std::slice::from_ref(&f.path));
    assert!(s.shared_file_exists(&f.path));
    // Not a checkpoint, and never listed as one.
    assert_eq!(s.max_checkpoint_id().unwrap(), 0);
    // Only paths under shared/ are deleted through it.
    s.write_state_file(1, "op", "0", FileKind::OperatorState, b"x")
        .unwrap();
    for outside in ["chk-1/op/0", "shared/../chk-1/op/0", "shared//x"] {
        s.delete_shared_file(outside).unwrap();
    }
    assert!(s.checkpoint_path(1).join("op/0").is_file());
    assert!(!s.shared_file_exists("chk-1/op/0"));
    s.delete_shared_file(&f.path).unwrap();
    s.delete_shared_file(&f.path).unwrap();
    assert!(s.shared_files().unwrap().is_empty());
}
