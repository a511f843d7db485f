//! `--incremental-checkpoints` on the disk backend end to end (issue 25, item 3):
//! keyed-count SIGKILLed once its newest checkpoint is a chain with a delta, then resumed
//! with `--restore latest` from that very checkpoint — at the same parallelism, and
//! rescaled from 2 to 3 — is exact (`--verify`), and the finished run leaves every shared
//! file listed by a retained checkpoint.
//!
//! The checkpoint layer's own tests (`crates/weir/src/checkpoint/incremental_tests.rs`)
//! cover the byte counts, retention and the fallback past damaged shared files.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use common::kill_resume::resume_from;
use common::*;

/// The chains of checkpoint `id` of the job folder `job` (a local folder or its S3 twin),
/// or `None` if it cannot be read (retention may have removed it meanwhile).
fn chains(job: &Path, id: u64) -> Option<Vec<weir::inspect::IncrementalKeyedRef>> {
    weir::inspect::incremental_chains(&job.join(format!("chk-{id}"))).ok()
}

/// Whether checkpoint `id` holds keyed state as a chain with at least one delta.
fn has_delta(job: &Path, id: u64) -> bool {
    chains(job, id).is_some_and(|c| c.iter().any(|c| !c.deltas.is_empty()))
}

fn signal(child: &std::process::Child, sig: i32) {
    // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

/// Runs keyed-count at parallelism `p` on the disk backend with incremental checkpoints,
/// SIGKILLs it once its newest complete checkpoint has a delta (the run is stopped with
/// SIGSTOP while that is checked, so no newer checkpoint completes between the look and
/// the kill), then resumes it at parallelism `resume_p` with `--restore latest --verify`
/// and checks that it restored that checkpoint and ended exact.
fn kill_at_a_delta_then_resume(p: u32, resume_p: u32) {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o, state) = (
        tmp.path().join("chk"),
        tmp.path().join("out"),
        tmp.path().join("state"),
    );
    let (n, keys) = (150_000u64, 5000u64);
    let (chk, out, st) = (checkpoint_arg(&d), s(&o), s(&state));
    let args = |p: u32, restore: bool| {
        let (events, keys, p) = (n.to_string(), keys.to_string(), p.to_string());
        let mut a: Vec<String> = [
            "run",
            "keyed-count",
            "--events",
            &events,
            "--keys",
            &keys,
            "--parallelism",
            &p,
            "--checkpoint-interval",
            "50ms",
            // The killed run lasts 15 s at its rate, far longer than the checkpoints the
            // test waits for take on a loaded machine; the resumed run goes at full speed.
            "--rate",
            if restore { "1000000" } else { "10000" },
            "--checkpoint-dir",
            &chk,
            "--output",
            &out,
            "--state-backend",
            "disk",
            "--state-dir",
            &st,
            "--incremental-checkpoints",
            "--retained-checkpoints",
            "3",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        if restore {
            a.extend(["--restore", "latest", "--verify"].map(String::from));
        }
        a
    };
    let job = checkpoint_dir(&d).join("keyed-count");
    let mut child = spawn_logged(
        &mut weir(tmp.path(), args(p, false)),
        &tmp.path().join("first.log"),
    );
    // The 120 s limit is a safety net, not a pass condition.
    let deadline = Instant::now() + Duration::from_secs(120);
    let newest = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            panic!("the run exited ({st}) before a checkpoint with a delta completed");
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint with a delta completed"
        );
        let last = completed_checkpoints(&job).last().copied();
        if last.is_some_and(|id| has_delta(&job, id)) {
            signal(&child, libc::SIGSTOP);
            let last = completed_checkpoints(&job).last().copied();
            match last.filter(|&id| has_delta(&job, id)) {
                Some(id) => break id,
                None => signal(&child, libc::SIGCONT),
            }
        }
        thread::sleep(Duration::from_millis(20));
    };
    sigkill_running(&mut child, "the run with incremental checkpoints");
    wait_for_dead_lease();
    assert_eq!(
        completed_checkpoints(&job).last().copied(),
        Some(newest),
        "nothing completed after the stop"
    );
    let run = resume_from(
        &mut weir(tmp.path(), args(resume_p, true)),
        newest,
        "incremental checkpoints",
    );
    assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    assert!(
        run.stdout.contains(&format!("parallelism {resume_p}")) || resume_p == p,
        "{}",
        run.describe()
    );
    assert_resumed(&run, n);
    assert_keyed_count_exact(&o, n, keys);
    // The tools tell what the restored checkpoint wrote from what it shares.
    let chk = job.join(format!("chk-{newest}"));
    let inspect = common::run(&mut weir(tmp.path(), ["checkpoints", "inspect", &s(&chk)]));
    inspect.assert_success();
    assert!(
        inspect.stdout.contains("shared with earlier checkpoints"),
        "{}",
        inspect.describe()
    );
    let list = common::run(&mut weir(
        tmp.path(),
        ["checkpoints", "list", &s(&job), "--format", "json"],
    ));
    list.assert_success();
    assert!(
        list.stdout.contains("\"shared_bytes\""),
        "{}",
        list.describe()
    );
    // Every shared file left is listed by a retained checkpoint.
    if !on_s3() {
        let mut listed = HashSet::new();
        for id in completed_checkpoints(&job) {
            for chain in chains(&job, id).expect("a retained checkpoint reads") {
                for f in std::iter::once(&chain.base).chain(&chain.deltas) {
                    listed.insert(job.join(&f.path));
                }
            }
        }
        for uid in std::fs::read_dir(job.join("shared")).into_iter().flatten() {
            for f in std::fs::read_dir(uid.unwrap().path()).unwrap() {
                let f = f.unwrap().path();
                assert!(listed.contains(&f), "orphaned shared file {}", f.display());
            }
        }
    }
}

#[test]
fn keyed_count_with_incremental_checkpoints_survives_a_sigkill_exactly() {
    kill_at_a_delta_then_resume(2, 2);
}

#[test]
fn an_incremental_checkpoint_restores_rescaled_from_two_to_three_exactly() {
    kill_at_a_delta_then_resume(2, 3);
}
