//! `--incremental-checkpoints` on the disk backend end to end (issue 25, item 3):
//! keyed-count SIGKILLed once its newest checkpoint is a chain with a delta, then resumed
//! with `--restore latest` from that very checkpoint — at the same parallelism, and
//! rescaled from 2 to 3 — is exact (`--verify`), and the finished run leaves every shared
//! file listed by a retained checkpoint. At the same parallelism the resumed run's first
//! checkpoint continues the restored chains (a delta after the restored files); rescaled
//! it is a new base.
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
        ]
        .into_iter()
        .map(String::from)
        .collect();
        if !restore {
            a.extend(["--retained-checkpoints", "3"].map(String::from));
        }
        if restore {
            a.extend(["--restore", "latest", "--verify"].map(String::from));
            // Each generator subtask holds after 100 events of the resumed run until the
            // test has read the run's first checkpoint (every one is retained until then).
            let release = s(&tmp.path().join("release"));
            a.extend(["--hold-at", "100", "--release-file", &release].map(String::from));
            a.extend(["--retained-checkpoints", "1000"].map(String::from));
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
    let restored = chains(&job, newest).expect("the restored checkpoint reads");
    let first = {
        let (job, release) = (job.clone(), tmp.path().join("release"));
        let at = records_at(&job, newest).expect("the restored checkpoint reads");
        // The generator keeps its splits (one per subtask of the first run) when rescaled:
        // that many subtasks hold after 100 events each.
        let held = at + u64::from(p) * 100;
        thread::spawn(move || first_checkpoint_after(&job, newest, held, &release))
    };
    let run = resume_from(
        &mut weir(tmp.path(), args(resume_p, true)),
        newest,
        "incremental checkpoints",
    );
    let (first, first_chains) = first.join().expect("the watcher read the first checkpoint");
    assert_continues(&restored, first, &first_chains, p == resume_p);
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

/// Waits until the resumed run (restored from checkpoint `restored` of `job`) completed a
/// checkpoint at its hold (`held` records read), then returns the first checkpoint it
/// completed and that one's chains, and releases the hold (also on failure, so the run
/// ends either way).
fn first_checkpoint_after(
    job: &Path,
    restored: u64,
    held: u64,
    release: &Path,
) -> (u64, Vec<weir::inspect::IncrementalKeyedRef>) {
    struct Release<'a>(&'a Path);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            let _ = std::fs::write(self.0, b"");
        }
    }
    let _release = Release(release);
    wait_for_checkpoint_at(None, job, restored, held);
    let first = completed_checkpoints(job)
        .into_iter()
        .find(|&id| id > restored)
        .expect("a checkpoint after the restore");
    (first, chains(job, first).expect("it is retained"))
}

/// The resumed run's first checkpoint `first` (its `chains`) against the chains `restored`
/// of the checkpoint it restored: at the same parallelism (`same_p`) each subtask continues
/// its restored chain — a delta after the restored files — unless that chain was due for a
/// new base (its deltas past half the base, or 16 of them: `state/keyed/incremental.rs`);
/// rescaled, every chain is a new base.
fn assert_continues(
    restored: &[weir::inspect::IncrementalKeyedRef],
    first: u64,
    chains: &[weir::inspect::IncrementalKeyedRef],
    same_p: bool,
) {
    let due = |c: &weir::inspect::IncrementalKeyedRef| {
        let deltas: u64 = c.deltas.iter().map(|d| d.size).sum();
        c.deltas.len() >= 16 || 2 * deltas > c.base.size
    };
    assert!(!chains.is_empty());
    for chain in chains {
        let old = restored.iter().find(|c| c.subtask == chain.subtask);
        match old.filter(|c| same_p && !due(c)) {
            Some(old) => {
                assert_eq!(chain.base, old.base, "subtask {}", chain.subtask);
                assert_eq!(chain.deltas[..old.deltas.len()], old.deltas[..]);
                assert_eq!(
                    chain.deltas.len(),
                    old.deltas.len() + 1,
                    "checkpoint {first}: a delta of what changed since the restore: {chain:?}"
                );
            }
            None => {
                assert!(chain.deltas.is_empty(), "a new base: {chain:?}");
                assert_eq!(chain.base.checkpoint_id, first);
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
