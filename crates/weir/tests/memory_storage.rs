//! A real job checkpointing into the in-memory storage backend and restoring from it: the
//! checkpoint protocol runs on the storage trait alone, with no local folder involved.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use weir::inspect::source_progress;
use weir::prelude::*;
use weir::storage::memory::MemoryStore;

/// The newest complete checkpoint of `job` in `store` and the records its sources read.
fn newest_in(store: &MemoryStore, job: &str) -> (PathBuf, u64) {
    let prefix = format!("ckpts/{job}/chk-");
    let id = store
        .keys()
        .iter()
        .filter_map(|k| {
            k.strip_prefix(&prefix)?
                .strip_suffix("/_metadata")?
                .parse()
                .ok()
        })
        .max()
        .expect("a complete checkpoint in memory");
    let _: u64 = id;
    let path = PathBuf::from(format!("mem://{}/{prefix}{id}", "mem-job"));
    let sources = source_progress(&path).unwrap();
    (path, sources.iter().map(|s| s.records).sum())
}

#[test]
fn a_job_checkpoints_into_memory_and_resumes_from_it() {
    let store = MemoryStore::register("mem-job");
    let dir = Path::new("mem://mem-job/ckpts");
    let n = 400_000;
    let mut cfg = config("counted", dir, 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    cfg.restart = RestartStrategy::None;
    assert_stopped_mid_run(run_keyed_count_stopping(cfg.clone(), n, 777, 40_000));
    let (mid, at) = newest_in(&store, "counted");
    assert!(at > 0 && at < n, "the run stopped at {at} records");
    // Only complete checkpoints are left, and nothing of the run went to a local folder.
    assert!(!Path::new("mem:").exists());
    assert!(
        store.keys().iter().all(|k| !k.contains("/.")),
        "{:?}",
        store.keys()
    );

    let mut c = cfg.clone();
    c.restore = RestoreFrom::Latest;
    let (counts, r) = run_keyed_count(c, n, 777, None).unwrap();
    assert_resumed_mid_run(&r, &mid, n);
    assert_eq!(counts, expected(n, 777));
}

#[test]
fn a_damaged_object_in_memory_is_skipped_like_a_damaged_file() {
    let store = MemoryStore::register("mem-damaged");
    let dir = Path::new("mem://mem-damaged/ckpts");
    let mut cfg = config("counted", dir, 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(10));
    // Each source subtask pauses for a checkpoint every 25 000 of its 75 000 records: a
    // mid-run checkpoint before the newest however fast the run.
    let (counts, r) =
        run_keyed_count_pausing(cfg.clone(), 300_000, 100, Some(600_000.0), 25_000).unwrap();
    assert_eq!(counts, expected(300_000, 100));
    assert!(r.checkpoints.len() >= 2, "need two checkpoints");
    let newest = store
        .keys()
        .into_iter()
        .filter(|k| k.contains("/count/kg-"))
        .max_by_key(|k| k.split('/').nth(2).and_then(|c| c[4..].parse::<u64>().ok()))
        .unwrap();
    let mut bytes = store.object(&newest).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    store.set_object(&newest, bytes);
    let mut c = cfg;
    c.restore = RestoreFrom::Latest;
    let (counts, r) = run_keyed_count(c, 300_000, 100, None).unwrap();
    assert_eq!(counts, expected(300_000, 100));
    // It resumed from the previous checkpoint, not from the beginning.
    weir::testing::assert_resumed(&r, 300_000);
    let notice = r.notices.join("\n");
    assert!(notice.contains("skipping checkpoint"), "{notice}");
    assert!(notice.contains(&newest), "names the object: {notice}");
}

#[test]
fn an_unregistered_store_and_an_unknown_scheme_are_clear_errors() {
    for (dir, want) in [
        ("mem://nobody/x", "no in-memory store named \"nobody\""),
        ("ftp://host/x", "unknown storage scheme \"ftp\""),
    ] {
        let cfg = config("counted", Path::new(dir), 1, CheckpointingMode::ExactlyOnce);
        let err = run_keyed_count(cfg, 10, 2, None).err().unwrap().to_string();
        assert!(err.contains(want) && err.contains(dir), "{err}");
    }
}

/// A full disk under the checkpoints, with `weir run`'s defaults (no tolerated checkpoint
/// failure, restarts without end, the identical-failure limit): every checkpoint fails the
/// same way, so the job ends with the cause after a few attempts instead of restarting for
/// ever, and the failed checkpoints leave none of their files behind to keep the disk full.
#[test]
fn a_full_store_ends_the_job_with_its_cause_and_leaves_no_partial_checkpoint() {
    let store = MemoryStore::register("full-disk");
    let mut cfg = JobConfig::new("full");
    cfg.parallelism = 2;
    cfg.checkpoint_dir = PathBuf::from("mem://full-disk/ckpts");
    cfg.checkpointing.interval = Some(Duration::from_millis(20));
    cfg.restart = RestartStrategy::ExponentialDelay {
        attempts: u32::MAX,
        initial: Duration::from_millis(5),
        max: Duration::from_millis(20),
    };
    // Room for the write probe at the start, not for a checkpoint's state files.
    store.set_capacity(Some(64));
    let err = run_keyed_count(cfg, 400_000, 777, Some(400_000.0)).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("mem://full-disk/ckpts/full/chk-"),
        "names the file: {msg}"
    );
    assert!(
        msg.contains("storage full") || msg.contains("no storage space"),
        "{msg}"
    );
    assert!(msg.contains("not restarting"), "{msg}");
    let Error::JobFailed { attempts, .. } = err else {
        panic!("expected JobFailed, got {err:?}");
    };
    // Five identical failures in a row end it; which file of which subtask fails first
    // varies between attempts (more so on a loaded machine), and a different file is a
    // different failure, so more attempts may come first — a bounded number, never an
    // endless loop.
    assert!((5..=200).contains(&attempts), "{attempts} attempts: {msg}");
    let left: Vec<String> = store.keys();
    assert!(left.is_empty(), "left behind: {left:?}");
}
