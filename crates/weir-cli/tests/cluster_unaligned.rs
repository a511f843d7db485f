//! Unaligned checkpoints across worker processes (issue 24): a coordinator (`weir run …
//! --workers N --cluster-listen 127.0.0.1:0`) and `weir worker` processes on loopback.
//!
//! keyed-count with `--unaligned` on two workers, its counting stage slowed
//! (`--sink-rate`) so that the records between the generators and the counts wait in the
//! channels, half of which cross from one worker to the other. The input holds after
//! [`HOLD_AT`] events per generator subtask (`--hold-at`), so the kill lands mid-input
//! and records stay in flight until the slow counts drain them. Periodic checkpoints are off: the
//! test triggers each one (`weir checkpoint`), so the checkpoint it inspects is the one a
//! restart restores. Every wait is bounded and says what it waited for.

mod cluster_support;
mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cluster_support::{Cluster, TIMEOUT};
use common::*;

/// Events of the job.
const EVENTS: u64 = 60_000;
/// Keys (not a divisor of [`EVENTS`]).
const KEYS: u64 = 97;
/// Events per generator subtask before the input holds (until `release` exists).
const HOLD_AT: u64 = 20_000;
/// Events per second the counting stage takes in total: the held input's 40 000 events
/// take it 8 s, far longer than a checkpoint, so they are in flight when one is taken.
const SINK_RATE: &str = "5000";

/// keyed-count at parallelism `p` with unaligned checkpoints taken only when triggered,
/// its counting stage slowed; plus `extra`.
fn job(p: u32, extra: &[&str]) -> Vec<String> {
    let (events, keys, p) = (EVENTS.to_string(), KEYS.to_string(), p.to_string());
    let mut a: Vec<String> = ["run", "keyed-count", "--events", &events, "--keys", &keys]
        .into_iter()
        .chain(["--parallelism", &p, "--unaligned", "--sink-rate", SINK_RATE])
        .chain(["--checkpoint-interval", "3600s", "--checkpoint-dir", "chk"])
        .chain(["--verify", "--restart-delay", "10ms"])
        .map(String::from)
        .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// `weir checkpoints inspect PATH --format json`.
fn inspect(dir: &Path, chk: &Path) -> serde_json::Value {
    let r = run(&mut weir(
        dir,
        ["checkpoints", "inspect", &s(chk), "--format", "json"],
    ));
    r.assert_success();
    serde_json::from_str(&r.stdout).unwrap()
}

/// The in-flight bytes checkpoint `v` saved on channels from one worker to another: with
/// `workers` workers, subtask `i` of each operator runs on worker `i mod workers`.
fn cross_worker_bytes(v: &serde_json::Value, workers: u64) -> u64 {
    let channels = v["channel_state"].as_array().expect("channel_state");
    channels
        .iter()
        .filter(|c| {
            c["sender"].as_u64().unwrap() % workers != c["subtask"].as_u64().unwrap() % workers
        })
        .map(|c| c["in_flight_bytes"].as_u64().unwrap())
        .sum()
}

/// Triggers checkpoints (`weir checkpoint --job ADDR`) until one saved records in flight
/// on a channel between two workers; returns its folder and id.
fn checkpoint_with_cross_worker_state(c: &mut Cluster, workers: u64) -> (PathBuf, u64) {
    let addr = c.control_address();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let r = run(&mut weir(&c.dir, ["checkpoint", "--job", &addr]));
        r.assert_success();
        let chk = PathBuf::from(r.stdout.trim());
        let v = inspect(&c.dir, &chk);
        if v["unaligned"] == true && cross_worker_bytes(&v, workers) > 0 {
            let id = v["checkpoint_id"].as_u64().expect("checkpoint_id");
            return (chk, id);
        }
        // Before the generators sent anything, nothing is in flight: the next one.
        assert!(
            Instant::now() < deadline,
            "no checkpoint saved records in flight between workers within {TIMEOUT:?}: {v}\n{}",
            c.text()
        );
    }
}

/// Copies folder `from` to `to` (a checkpoint folder: files and subfolders).
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// keyed-count on two workers (plus `extra`): a checkpoint that saved records in flight
/// between the workers, worker 2 SIGKILLed after it, a replacement; asserts that the run
/// restored that checkpoint on both workers and counted exactly. Returns a copy of the
/// checkpoint (a retained checkpoint may be removed once the job ends), its id and its
/// sources' position.
fn kill_after_a_cross_worker_checkpoint(dir: &Path, extra: &[&str]) -> (PathBuf, u64, u64) {
    let hold = HOLD_AT.to_string();
    let mut flags = vec![
        "--output",
        "out",
        "--hold-at",
        &hold,
        "--release-file",
        "release",
    ];
    flags.extend_from_slice(extra);
    let mut c = Cluster::start(dir, &job(2, &flags), 2, "w");
    let (chk, id) = checkpoint_with_cross_worker_state(&mut c, 2);
    // Where its sources were: at the hold, or short of it if the channels filled first.
    let at: u64 = (weir::inspect::source_progress(&chk).unwrap().iter())
        .map(|s| s.records)
        .sum();
    assert!(at > 0 && at <= 2 * HOLD_AT, "{at}");
    let kept = dir.join("kept").join(format!("chk-{id}"));
    copy_tree(&chk, &kept);

    // Worker 2 dies after it; its replacement and worker 1 restore it, records in flight
    // included, and the counts come out exact.
    c.kill_worker("w2");
    c.release();
    c.add_worker("w2-again");
    let ended = c.finish();
    ended.assert_verified();
    assert_keyed_count_exact(&dir.join("out"), EVENTS, KEYS);
    let restored: Vec<_> = attempts(&ended.out)
        .into_iter()
        .filter_map(|a| a.restored.map(|r| (a.n, r)))
        .collect();
    let (n, (got, position, path)) = restored
        .last()
        .cloned()
        .unwrap_or_else(|| panic!("no attempt restored a checkpoint:\n{}", ended.out));
    assert!(n >= 2, "{}", ended.out);
    assert_eq!(got, id, "restored another checkpoint:\n{}", ended.out);
    assert_eq!(position, at, "{}", ended.out);
    for (name, _, log) in &ended.workers {
        assert!(
            log.contains(&format!("restored from {}", path.display())),
            "{name} did not restore {}:\n{log}",
            path.display()
        );
    }
    (kept, id, at)
}

#[test]
fn an_unaligned_checkpoint_across_two_workers_restores_its_channel_state_after_a_kill_and_on_three_workers(
) {
    let tmp = tempfile::tempdir().unwrap();
    let (kept, id, at) = kill_after_a_cross_worker_checkpoint(tmp.path(), &[]);

    // The same checkpoint on three workers at parallelism 3: its channel state is
    // re-partitioned by key over the new subtasks, exact again.
    let from = s(&kept);
    let c = Cluster::start(
        tmp.path(),
        &job(3, &["--output", "out3", "--restore", &from]),
        3,
        "x",
    );
    let ended = c.finish();
    ended.assert_verified();
    assert_keyed_count_exact(&tmp.path().join("out3"), EVENTS, KEYS);
    let first = attempts(&ended.out).into_iter().next();
    let restored = first.and_then(|a| a.restored);
    assert!(
        matches!(&restored, Some((got, pos, _)) if *got == id && *pos == at),
        "did not resume from checkpoint {id}:\n{}",
        ended.out
    );
}

/// With `--aligned-checkpoint-timeout`, each checkpoint starts aligned and switches to
/// unaligned once its alignment lasted that long: under the slow counts it switches, and
/// the records in flight between the workers are saved and restored the same way.
#[test]
fn an_aligned_checkpoint_that_times_out_across_two_workers_saves_and_restores_its_channel_state() {
    let tmp = tempfile::tempdir().unwrap();
    kill_after_a_cross_worker_checkpoint(tmp.path(), &["--aligned-checkpoint-timeout", "20ms"]);
}
