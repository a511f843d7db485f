//! Corrupt, truncated and foreign checkpoint files: detected by checksum, skipped by
//! `restore latest` with a message, and never loaded as state.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use weir::prelude::*;

/// Runs the keyed count to completion, leaving its retained checkpoints in `dir`.
fn leave_checkpoints(dir: &Path) -> Vec<PathBuf> {
    let mut cfg = config("corrupt", dir, 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    // Each source subtask (75 000 records) pauses for a checkpoint every 25 000: two
    // mid-run checkpoints and the final one at least, however fast the run.
    let (counts, r) =
        run_keyed_count_pausing(cfg, 300_000, 100, Some(paced(600_000.0)), 25_000).unwrap();
    assert_eq!(counts, expected(300_000, 100));
    assert!(r.checkpoints.len() >= 3, "need three checkpoints");
    let (newest, _) = newest_checkpoint(dir, "corrupt");
    let job = newest.parent().unwrap().to_path_buf();
    let mut ids: Vec<u64> = job_folder_entries(dir, "corrupt")
        .iter()
        .filter_map(|n| n.strip_prefix("chk-")?.parse().ok())
        .filter(|id| list_folder(&job.join(format!("chk-{id}"))).contains(&"_metadata".into()))
        .collect();
    ids.sort_unstable();
    ids.iter().map(|id| job.join(format!("chk-{id}"))).collect()
}

/// Restores the newest readable checkpoint and runs to the end; asserts the run did start
/// from it (its state and its sources' positions), not from the beginning.
fn restore_latest(dir: &Path) -> (std::collections::HashMap<u64, u64>, JobResult) {
    let mut cfg = config("corrupt", dir, 2, CheckpointingMode::ExactlyOnce);
    cfg.restore = RestoreFrom::Latest;
    let (counts, r) = run_keyed_count(cfg, 300_000, 100, None).unwrap();
    weir::testing::assert_resumed(&r, 300_000);
    assert_eq!(r.last_restore().map(|i| &i.path), r.restored_from.as_ref());
    (counts, r)
}

/// The error of a restore of the job from `restore` (its config changed by `change`),
/// which must fail.
fn restore_error(dir: &Path, restore: RestoreFrom, change: impl FnOnce(&mut JobConfig)) -> String {
    let mut cfg = config("corrupt", dir, 2, CheckpointingMode::ExactlyOnce);
    cfg.restore = restore;
    change(&mut cfg);
    match run_keyed_count(cfg, 300_000, 100, None) {
        Ok(_) => panic!("the restore was to fail, but the job finished"),
        Err(e) => e.to_string(),
    }
}

/// A keyed state file of checkpoint `chk` (on whichever storage it is).
fn keyed_file(chk: &Path) -> PathBuf {
    let dir = chk.join("count");
    let first = list_folder(&dir)
        .into_iter()
        .next()
        .expect("a keyed state file");
    dir.join(first)
}

/// A flipped byte in the newest checkpoint's keyed state: that checkpoint is skipped.
#[test]
fn corrupted_newest_checkpoint_is_skipped_for_the_previous_one() {
    let dir = tempfile::tempdir().unwrap();
    let chks = leave_checkpoints(dir.path());
    let (newest, previous) = (&chks[chks.len() - 1], &chks[chks.len() - 2]);
    let f = keyed_file(newest);
    let mut bytes = read_object(&f);
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    write_object(&f, &bytes);
    let (counts, r) = restore_latest(dir.path());
    assert_eq!(counts, expected(300_000, 100));
    assert_eq!(r.restored_from.as_deref(), Some(previous.as_path()));
    let notice = r.notices.join("\n");
    assert!(notice.contains("skipping checkpoint"), "{notice}");
    assert!(
        notice.contains(&f.display().to_string()),
        "names the file: {notice}"
    );
    assert!(notice.contains("checksum"), "names the cause: {notice}");
}

/// A state file copied in from the previous checkpoint (intact, just not this checkpoint's)
/// is refused by name like a corrupted one, and `latest` falls back past it.
#[test]
fn a_state_file_copied_from_another_checkpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let chks = leave_checkpoints(dir.path());
    let (newest, previous) = (&chks[chks.len() - 1], &chks[chks.len() - 2]);
    let f = keyed_file(newest);
    let name = f.file_name().unwrap();
    // The newest checkpoints may hold the same final state; copy one that differs.
    let current = read_object(&f);
    let other = chks
        .iter()
        .map(|c| read_object(&c.join("count").join(name)))
        .find(|b| *b != current)
        .expect("an older checkpoint with other counts");
    write_object(&f, &other);

    let err = restore_error(dir.path(), RestoreFrom::Path(newest.clone()), |_| {});
    assert!(
        err.contains(&f.display().to_string()) && err.contains("does not belong"),
        "{err}"
    );
    let (counts, r) = restore_latest(dir.path());
    assert_eq!(counts, expected(300_000, 100));
    assert_eq!(r.restored_from.as_deref(), Some(previous.as_path()));
    let notice = r.notices.join("\n");
    assert!(notice.contains(&f.display().to_string()), "{notice}");
}

/// A truncated `_metadata` is skipped too; an explicit restore of it is a clear error.
#[test]
fn truncated_metadata_is_skipped_and_an_explicit_restore_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let chks = leave_checkpoints(dir.path());
    let newest = &chks[chks.len() - 1];
    let meta = newest.join("_metadata");
    let bytes = read_object(&meta);
    write_object(&meta, &bytes[..bytes.len() / 3]);
    let (counts, r) = restore_latest(dir.path());
    assert_eq!(counts, expected(300_000, 100));
    assert_ne!(r.restored_from.as_deref(), Some(newest.as_path()));

    let err = restore_error(dir.path(), RestoreFrom::Path(newest.clone()), |_| {});
    assert!(
        err.contains("_metadata") && err.contains("truncated"),
        "{err}"
    );
}

/// A foreign file in place of `_metadata` (not a Weir file at all) is rejected by name.
#[test]
fn foreign_metadata_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let chks = leave_checkpoints(dir.path());
    let newest = &chks[chks.len() - 1];
    write_object(&newest.join("_metadata"), b"{\"json\": true}");
    let err = restore_error(dir.path(), RestoreFrom::Path(newest.clone()), |_| {});
    assert!(
        err.contains("not a Weir checkpoint file") || err.contains("foreign"),
        "{err}"
    );
    // `latest` skips it and still ends exact.
    let (counts, _) = restore_latest(dir.path());
    assert_eq!(counts, expected(300_000, 100));
}

/// Restoring with another max parallelism is refused (key groups cannot be remapped).
#[test]
fn other_max_parallelism_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    leave_checkpoints(dir.path());
    let err = restore_error(dir.path(), RestoreFrom::Latest, |c| c.max_parallelism = 64);
    assert!(
        err.contains("max parallelism 128") && err.contains("--max-parallelism 128"),
        "{err}"
    );
}
