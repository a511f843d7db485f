//! Unaligned checkpoints (issue 13) end to end, under heavy backpressure: the keyed stage
//! processes at a tenth of the sources' rate, so the channels between them stay full and
//! every unaligned checkpoint saves records in flight. Exactly-once is checked by exact
//! counts after injected panics, with proof the runs resumed from checkpoints; a corrupted
//! channel-state file makes `--restore latest` fall back to the checkpoint before.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use weir::prelude::*;

/// Records per second the keyed stage processes, over all its subtasks.
const SINK_RATE: f64 = 40_000.0;
/// Records per second the sources emit, over all their subtasks: ten times the sink's.
const SOURCE_RATE: f64 = 10.0 * SINK_RATE;

#[path = "support/slow_count.rs"]
mod slow_count;
use slow_count::SlowCount;

/// Settings of an unaligned job at parallelism `p` checkpointing every 100 ms.
fn unaligned_config(name: &str, dir: &Path, p: u32, timeout: Option<Duration>) -> JobConfig {
    let mut cfg = config(name, dir, p, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(100));
    cfg.checkpointing.unaligned = true;
    cfg.checkpointing.aligned_checkpoint_timeout = timeout;
    cfg
}

/// Two generator sources of `n` records in all, at [`SOURCE_RATE`] → `key_by` → the slow
/// count → collected. Returns the counts and the job result.
fn run_backpressured(cfg: JobConfig, n: u64, keys: u64) -> Result<(HashMap<u64, u64>, JobResult)> {
    let p = cfg.parallelism;
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let rate = Some(SOURCE_RATE / 2.0);
    let a = env
        .add_source("events-a", GeneratorSource::new(n / 2).with_rate(rate))
        .uid("events-a");
    let half = n / 2;
    let b = env
        .add_source("events-b", GeneratorSource::new(n - half).with_rate(rate))
        .uid("events-b")
        .map(move |i| i + half);
    a.union(b)
        .key_by(move |i: &u64| i % keys)
        .process(SlowCount::new(SINK_RATE, p))
        .uid("count")
        .add_sink("collect", out.clone())
        .uid("sink");
    let result = env.execute()?;
    Ok((final_counts(out.take()), result))
}

/// Checkpoints were taken unaligned and saved records in flight.
fn assert_saved_channel_state(r: &JobResult) {
    let unaligned = r
        .checkpoints
        .iter()
        .filter(|c| c.unaligned_tasks > 0)
        .count();
    let records: u64 = r.checkpoints.iter().map(|c| c.in_flight_records).sum();
    let bytes: u64 = r.checkpoints.iter().map(|c| c.in_flight_bytes).sum();
    assert!(
        unaligned > 0,
        "no checkpoint was unaligned: {:#?}",
        r.checkpoints
    );
    assert!(
        records > 0 && bytes >= records,
        "no channel state saved: {:#?}",
        r.checkpoints
    );
}

#[test]
fn unaligned_checkpoints_under_backpressure_count_exactly_without_failures() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = unaligned_config("plain", dir.path(), 2, None);
    let n = 60_000;
    let (counts, r) = run_backpressured(cfg, n, 500).unwrap();
    assert_eq!(counts, expected(n, 500));
    assert_eq!(r.attempts, 1);
    assert_saved_channel_state(&r);
}

#[test]
fn unaligned_checkpoints_survive_injected_panics_with_exact_counts() {
    for seed in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = unaligned_config("panics", dir.path(), 2, None);
        let n = 120_000;
        cfg.failure_injection = Some(FailureInjection::after_checkpoints(3, seed, n / 2));
        let (counts, r) = run_backpressured(cfg, n, 500).unwrap();
        weir::testing::assert_resumed(&r, n);
        let (fired, planned) = r.injected_failures.unwrap();
        assert_eq!(fired, planned, "seed {seed}: every planned failure fired");
        assert!(r.attempts > 1, "seed {seed}: {r:#?}");
        assert_eq!(counts, expected(n, 500), "seed {seed}: exact counts");
        assert_saved_channel_state(&r);
    }
}

#[test]
fn the_aligned_timeout_switches_to_unaligned_and_stays_exact_after_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = unaligned_config("timeout", dir.path(), 2, Some(Duration::from_millis(20)));
    let n = 120_000;
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(3, 7, n / 2));
    let (counts, r) = run_backpressured(cfg, n, 500).unwrap();
    weir::testing::assert_resumed(&r, n);
    assert_eq!(counts, expected(n, 500));
    assert_saved_channel_state(&r);
}

/// The newest complete checkpoint with a channel-state file, and that file (a local path
/// or an `s3://` URL), read through the storage trait so it works on either storage.
fn newest_with_channel_state(dir: &Path, name: &str) -> Option<(u64, PathBuf)> {
    let job = checkpoint_dir(dir).join(name);
    let backend = weir::storage::open_backend(&job).ok()?;
    let mut found = None;
    for entry in job_folder_entries(dir, name) {
        let Some(id) = entry
            .strip_prefix("chk-")
            .and_then(|i| i.parse::<u64>().ok())
        else {
            continue;
        };
        if backend.size(&format!("{entry}/_metadata")).is_err() {
            continue;
        }
        let Ok(files) = backend.list(&format!("{entry}/count")) else {
            continue;
        };
        if let Some(f) = files.iter().find(|f| f.starts_with("ch-")) {
            if found.as_ref().is_none_or(|(best, _)| id > *best) {
                found = Some((id, job.join(&entry).join("count").join(f)));
            }
        }
    }
    found
}

/// Runs the backpressured job at parallelism 2 until its sources stop mid-input (half of
/// `n` read), leaving unaligned checkpoints; removes the ones newer than the newest with
/// channel state, and returns that one's id and one of its channel-state files.
fn leave_unaligned_checkpoint(dir: &Path, name: &str, n: u64) -> (u64, PathBuf) {
    let mut cfg = unaligned_config(name, dir, 2, None);
    cfg.restart = RestartStrategy::None;
    cfg.checkpointing.retained = 20;
    let stop_at = n / 8; // per source subtask: half the input in all
    let result = {
        let p = cfg.parallelism;
        let env = StreamEnvironment::new(cfg);
        let rate = Some(SOURCE_RATE / 2.0);
        let half = n / 2;
        let a = env
            .add_source(
                "events-a",
                StopMidRun::new(GeneratorSource::new(half).with_rate(rate), stop_at),
            )
            .uid("events-a");
        let b = env
            .add_source(
                "events-b",
                StopMidRun::new(GeneratorSource::new(n - half).with_rate(rate), stop_at),
            )
            .uid("events-b")
            .map(move |i| i + half);
        a.union(b)
            .key_by(|i: &u64| i % 500)
            .process(SlowCount::new(SINK_RATE, p))
            .uid("count")
            .add_sink("collect", CollectSink::new())
            .uid("sink");
        env.execute()
    };
    assert_stopped_mid_run(result);
    let (id, file) =
        newest_with_channel_state(dir, name).expect("a checkpoint saved records in flight");
    // Drop newer checkpoints without channel state, so this one is the newest.
    let backend = weir::storage::open_backend(&checkpoint_dir(dir).join(name)).unwrap();
    for entry in job_folder_entries(dir, name) {
        let newer = entry
            .strip_prefix("chk-")
            .and_then(|i| i.parse::<u64>().ok())
            .is_some_and(|i| i > id);
        if newer {
            backend.delete_all(&entry).unwrap();
        }
    }
    (id, file)
}

/// A flipped byte in the newest checkpoint's channel-state file makes `--restore latest`
/// skip it (naming the file) for the one before, and the resumed run still counts exactly.
#[test]
fn a_corrupted_channel_state_file_falls_back_to_the_previous_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let n = 120_000;
    let (id, file) = leave_unaligned_checkpoint(dir.path(), "corrupt", n);
    let mut bytes = read_object(&file);
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    write_object(&file, &bytes);

    let mut cfg = unaligned_config("corrupt", dir.path(), 2, None);
    cfg.restore = RestoreFrom::Latest;
    let (counts, r) = run_backpressured(cfg, n, 500).unwrap();
    weir::testing::assert_resumed(&r, n);
    assert_eq!(counts, expected(n, 500));
    let restored = r.history[0].restored.as_ref().expect("restored");
    assert!(restored.checkpoint_id < id, "restored {restored:?}");
    let notice = r.notices.join("\n");
    assert!(
        notice.contains(&format!("skipping checkpoint {id}")),
        "{notice}"
    );
    assert!(
        notice.contains(&file.display().to_string()),
        "names the file: {notice}"
    );
}

/// An unaligned checkpoint taken at parallelism 2 with records in flight to the keyed
/// count restores at parallelism 3 and at 1: the records are re-partitioned by key group
/// to their new owners and the counts are exact.
#[test]
fn an_unaligned_checkpoint_restores_at_parallelism_3_and_1() {
    let dir = tempfile::tempdir().unwrap();
    let n = 120_000;
    let (id, _) = leave_unaligned_checkpoint(dir.path(), "rescale", n);
    let chk = checkpoint_dir(dir.path())
        .join("rescale")
        .join(format!("chk-{id}"));
    for p in [3, 1] {
        let name = format!("rescale-{p}");
        let mut cfg = unaligned_config(&name, dir.path(), p, None);
        cfg.restore = RestoreFrom::Path(chk.clone());
        let (counts, r) = run_backpressured(cfg, n, 500).unwrap();
        assert_resumed_mid_run(&r, &chk, n);
        assert_eq!(counts, expected(n, 500), "parallelism {p}: exact counts");
    }
}

#[derive(Clone, Debug)]
struct Opaque(u64);

/// A record type without a codec on a network edge refuses the job before it runs,
/// naming the edge, the type and the fix; registering the type makes it run.
#[test]
fn an_unregistered_record_type_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = unaligned_config("types", dir.path(), 2, None);
    let env = StreamEnvironment::new(cfg);
    env.add_source("events", GeneratorSource::new(10))
        .map(Opaque)
        .rebalance()
        .map(|o: Opaque| o.0)
        .add_sink("discard", DiscardSink);
    let e = env.execute().unwrap_err().to_string();
    assert!(e.contains("Opaque"), "{e}");
    assert!(e.contains("register_type"), "{e}");
    assert!(
        job_folder_entries(dir.path(), "types").is_empty(),
        "refused before anything ran"
    );

    let mut cfg = unaligned_config("types", dir.path(), 1, None);
    cfg.checkpointing.mode = CheckpointingMode::AtLeastOnce;
    let env = StreamEnvironment::new(cfg);
    env.add_source("events", GeneratorSource::new(10))
        .add_sink("discard", DiscardSink);
    let e = env.execute().unwrap_err().to_string();
    assert!(e.contains("exactly-once"), "{e}");
}
