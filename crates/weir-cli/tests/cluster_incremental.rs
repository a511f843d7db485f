//! Incremental checkpoints on the disk backend across worker processes (issues 24 and 25):
//! a coordinator and two workers run keyed-count with `--state-backend disk
//! --incremental-checkpoints`; the workers write bases and deltas into the job folder's
//! `shared/` and their acknowledgements carry the chains, which the coordinator lists in
//! `_metadata`.
//!
//! The input is held at successive counts (`--hold-at A,B,…`, one release file each): at
//! each hold the state stops changing, so the chain every later checkpoint lists is settled
//! before the test looks at it. The first hold covers every key (its chain is a base, or a
//! base and deltas); each later one changes a few keys, so the checkpoint after it is a
//! delta on the confirmed chain. Once the newest checkpoint of a hold lists a delta, a
//! worker is SIGKILLed there — the kill lands at a known position whatever the machine's
//! speed — and the restarted attempt resumes from a checkpoint of that hold, exactly, its
//! first checkpoint continuing the restored chains on both workers (a delta). The
//! finished run leaves no shared file that no retained checkpoint lists, and the same
//! checkpoint restores exactly in one process at parallelism 3 and on three workers. With
//! `--retained-checkpoints 3`, the coordinator's retention removes every shared file the
//! workers wrote that no retained checkpoint lists.

mod cluster_support;
mod common;

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use cluster_support::{Cluster, TIMEOUT};
use common::*;

/// Events of the job.
const EVENTS: u64 = 200_000;
/// Keys: every one is counted before the first hold, and a step between two holds changes
/// a few of them (so a delta stays far below half its base and never materialises).
const KEYS: u64 = 2_000;
/// Events per generator subtask at the first hold.
const FIRST_HOLD: u64 = 20_000;
/// Events per generator subtask between two holds.
const STEP: u64 = 50;
/// Holds: the first, and the steps after it that the test may release in turn.
const HOLDS: u64 = 5;
/// Generator subtasks (the job's parallelism).
const P: u64 = 2;

/// Where generator subtasks hold for the `i`-th time (0-based), in events per subtask.
fn hold(i: u64) -> u64 {
    FIRST_HOLD + i * STEP
}

/// The release file of the `i`-th hold.
fn release_file(i: u64) -> String {
    format!("release-{i}")
}

/// keyed-count at parallelism `p` on the disk backend with incremental checkpoints every
/// 50 ms into `chk` (every checkpoint retained, so the one restored can be read after the
/// run), its output into `out`, verified; plus `extra`.
fn keyed_count(p: u32, chk: &str, out: &str, extra: &[&str]) -> Vec<String> {
    let holds: Vec<String> = (0..HOLDS).map(|i| hold(i).to_string()).collect();
    let files: Vec<String> = (0..HOLDS).map(release_file).collect();
    let (events, keys, p) = (EVENTS.to_string(), KEYS.to_string(), p.to_string());
    let mut a: Vec<String> = ["run", "keyed-count", "--events", &events, "--keys", &keys]
        .into_iter()
        .chain(["--parallelism", &p, "--checkpoint-interval", "50ms"])
        .chain(["--checkpoint-dir", chk, "--output", out, "--verify"])
        .chain([
            "--restart-delay",
            "10ms",
            "--retained-checkpoints",
            "1000000",
        ])
        .chain(["--state-backend", "disk", "--state-dir", "state"])
        .chain(["--incremental-checkpoints"])
        .chain([
            "--hold-at",
            &holds.join(","),
            "--release-file",
            &files.join(","),
        ])
        .map(String::from)
        .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// The chains of the checkpoint at `path` (`None` if it cannot be read).
fn chains(path: &Path) -> Option<Vec<weir::inspect::IncrementalKeyedRef>> {
    weir::inspect::incremental_chains(path).ok()
}

/// Whether the checkpoint at `path` lists a keyed chain with at least one delta.
fn has_delta(path: &Path) -> bool {
    chains(path).is_some_and(|c| c.iter().any(|c| !c.deltas.is_empty()))
}

/// Whether the checkpoint at `path` lists a delta on chains that stay as they are while the
/// state does not change: none is due to be materialised into a new base (its deltas past
/// half its base, or more than 16 of them — `state/keyed/incremental.rs`), so every later
/// checkpoint of the same hold lists them again.
fn settled_delta(path: &Path) -> bool {
    let within = |c: &weir::inspect::IncrementalKeyedRef| {
        let deltas: u64 = c.deltas.iter().map(|d| d.size).sum();
        c.deltas.len() < 16 && 2 * deltas <= c.base.size
    };
    has_delta(path) && chains(path).is_some_and(|c| c.iter().all(within))
}

/// The records the sources of the checkpoint at `path` had read (`None`: unreadable).
fn position(path: &Path) -> Option<u64> {
    let sources = weir::inspect::source_progress(path).ok()?;
    Some(sources.iter().map(|s| s.records).sum())
}

/// Waits until `job` holds a complete checkpoint taken at the `i`-th hold and two more
/// completed after it (the chain the hold's checkpoints list has settled: the first one
/// is confirmed); returns the newest complete checkpoint's id.
fn wait_for_settled_hold(c: &mut Cluster, job: &Path, i: u64) -> u64 {
    let at = P * hold(i);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let done = completed_checkpoints(job);
        let first =
            (done.iter().copied()).find(|id| position(&job.join(format!("chk-{id}"))) == Some(at));
        if let (Some(first), Some(&newest)) = (first, done.last()) {
            if newest >= first + 2 {
                return newest;
            }
        }
        if let Some(st) = c.coordinator.try_wait().expect("try_wait") {
            panic!("the coordinator exited ({st}) at hold {i}:\n{}", c.text());
        }
        assert!(
            Instant::now() < deadline,
            "no settled checkpoint of hold {i} ({at} records) within {TIMEOUT:?}:\n{}",
            c.text()
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Every shared file of the job folder `job` is listed by one of its complete checkpoints,
/// and every file they list exists; `some`: they list at least one.
fn assert_no_orphaned_shared_file(job: &Path, some: bool) {
    let mut listed = HashSet::new();
    for id in completed_checkpoints(job) {
        let path = job.join(format!("chk-{id}"));
        for chain in chains(&path).expect("a retained checkpoint reads") {
            for f in std::iter::once(&chain.base).chain(&chain.deltas) {
                let file = job.join(&f.path);
                assert!(file.exists(), "chk-{id} lists {}, gone", file.display());
                listed.insert(file);
            }
        }
    }
    assert!(
        !some || !listed.is_empty(),
        "no checkpoint lists a shared file"
    );
    for uid in fs::read_dir(job.join("shared")).into_iter().flatten() {
        for f in fs::read_dir(uid.unwrap().path()).unwrap() {
            let f = f.unwrap().path();
            assert!(listed.contains(&f), "orphaned shared file {}", f.display());
        }
    }
}

/// The checkpoints the attempts of a run restored (its summary's `attempt N: from
/// checkpoint …` lines), in order: the attempt, the checkpoint's id, source position and
/// folder.
fn restored(out: &str) -> Vec<(u32, u64, u64, PathBuf)> {
    (attempts(out).into_iter())
        .filter_map(|a| a.restored.map(|(id, at, path)| (a.n, id, at, path)))
        .collect()
}

#[test]
fn incremental_checkpoints_on_two_workers_survive_a_worker_sigkill_at_a_delta_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let args = keyed_count(P as u32, "chk", "out", &[]);
    let mut c = Cluster::start(dir, &args, 2, "w");
    let job = dir.join("chk").join("keyed-count");
    // Hold after hold until the newest checkpoint of one lists a delta.
    let mut delta_at = None;
    for i in 0..HOLDS - 1 {
        let newest = wait_for_settled_hold(&mut c, &job, i);
        if i > 0 && settled_delta(&job.join(format!("chk-{newest}"))) {
            delta_at = Some((i, newest));
            break;
        }
        fs::write(dir.join(release_file(i)), b"go").unwrap();
    }
    let (i, seen) = delta_at.unwrap_or_else(|| {
        panic!(
            "no hold's checkpoint listed a delta (checkpoints: {:?}):\n{}",
            completed_checkpoints(&job),
            c.text()
        )
    });
    // The input is held: every checkpoint from here lists that chain.
    c.kill_worker("w2");
    c.add_worker("w2-again");
    // The restarted attempt counts its holds afresh: released up to hold `i`, it holds at
    // the next, so its first checkpoint is taken before the end of input (not a finished
    // task's full snapshot).
    for r in 0..=i {
        fs::write(dir.join(release_file(r)), b"go").unwrap();
    }
    let held = P * (hold(i) + hold(i + 1));
    let deadline = Instant::now() + TIMEOUT;
    while !(completed_checkpoints(&job).iter())
        .any(|id| position(&job.join(format!("chk-{id}"))) == Some(held))
    {
        if let Some(st) = c.coordinator.try_wait().expect("try_wait") {
            panic!(
                "the coordinator exited ({st}) after the restart:
{}",
                c.text()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint of the restarted attempt at its hold ({held} records):
{}",
            c.text()
        );
        thread::sleep(Duration::from_millis(5));
    }
    for i in 0..HOLDS {
        fs::write(dir.join(release_file(i)), b"go").unwrap();
    }
    let ended = c.finish();
    ended.assert_verified();
    assert_keyed_count_exact(&dir.join("out"), EVENTS, KEYS);
    assert!(
        ended.log.lines().any(|l| l.contains("lost worker 2 (w2)")),
        "{}",
        ended.log
    );
    // The restart resumed from a checkpoint of that hold, a chain with a delta, and the
    // replacement restored it itself.
    let (n, id, at, path) = (restored(&ended.out).pop())
        .unwrap_or_else(|| panic!("no attempt restored a checkpoint:\n{}", ended.out));
    assert!(n >= 2, "{}", ended.out);
    assert!(
        id >= seen,
        "restored {id}, older than {seen}:\n{}",
        ended.out
    );
    assert_eq!(at, P * hold(i), "{}", ended.out);
    // (Paths are as the summary prints them: relative to the test's folder.)
    assert!(
        has_delta(&dir.join(&path)),
        "{} lists no delta",
        path.display()
    );
    // The restarted attempt's first checkpoint continues each restored chain (none was
    // due for a new base: `settled_delta`): the restored files, then a delta of what
    // changed since — on the replacement worker too.
    let restored_chains = chains(&dir.join(&path)).expect("the restored checkpoint reads");
    let first = (completed_checkpoints(&job).into_iter())
        .find(|&c| c > id)
        .expect("the restarted attempt completed a checkpoint");
    let first_chains = chains(&job.join(format!("chk-{first}"))).expect("it reads");
    assert_eq!(first_chains.len(), restored_chains.len(), "chk-{first}");
    for (new, old) in first_chains.iter().zip(&restored_chains) {
        assert_eq!(
            (new.subtask, &new.base),
            (old.subtask, &old.base),
            "chk-{first}"
        );
        assert_eq!(
            new.deltas[..old.deltas.len()],
            old.deltas[..],
            "chk-{first}"
        );
        assert_eq!(
            new.deltas.len(),
            old.deltas.len() + 1,
            "chk-{first}: {new:?}"
        );
    }
    let again = (ended.workers.iter())
        .find(|(name, _, _)| name == "w2-again")
        .expect("the replacement's log");
    assert!(
        again
            .2
            .contains(&format!("restored from {}", path.display())),
        "the replacement did not restore {}:\n{}",
        path.display(),
        again.2
    );
    // The tools tell what the restored checkpoint shares with earlier ones.
    let inspect = run(&mut weir(dir, ["checkpoints", "inspect", &s(&path)]));
    inspect.assert_success();
    assert!(
        inspect.stdout.contains("shared with earlier checkpoints"),
        "{}",
        inspect.describe()
    );
    // Each worker kept its disk state in a folder of its own under the job's --state-dir,
    // removed as it ended (the killed one's by the next attempt on this host).
    let runs: Vec<_> = (fs::read_dir(dir.join("state").join("keyed-count")).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("run-"))
        .collect();
    assert!(runs.is_empty(), "disk state left behind: {runs:?}");
    // Retention and the sweeps ran on the coordinator: nothing orphaned, nothing missing.
    assert_no_orphaned_shared_file(&job, true);

    // The same checkpoint restores exactly in one process, rescaled from 2 to 3.
    let one = keyed_count(3, "chk-one", "out-one", &["--restore", &s(&path)]);
    let single = run(&mut weir(dir, &one));
    single.assert_success();
    assert!(
        single.stdout.contains("verify: OK"),
        "{}",
        single.describe()
    );
    assert_eq!(
        restored(&single.stdout),
        [(1, id, at, path.clone())],
        "{}",
        single.describe()
    );
    assert_keyed_count_exact(&dir.join("out-one"), EVENTS, KEYS);

    // And on three workers at parallelism 3.
    let three = keyed_count(3, "chk-three", "out-three", &["--restore", &s(&path)]);
    let c3 = Cluster::start(dir, &three, 3, "t");
    let ended = c3.finish();
    ended.assert_verified();
    assert_eq!(
        restored(&ended.out),
        [(1, id, at, path.clone())],
        "{}",
        ended.out
    );
    assert_keyed_count_exact(&dir.join("out-three"), EVENTS, KEYS);
    for (name, _, log) in &ended.workers {
        assert!(
            log.contains(&format!("restored from {}", path.display())),
            "{name} did not restore {}:\n{log}",
            path.display()
        );
    }
    // (The run may end before a checkpoint completes: then there is nothing to list.)
    assert_no_orphaned_shared_file(&dir.join("chk-three").join("keyed-count"), false);
}

#[test]
fn retention_on_the_coordinator_removes_the_workers_shared_files_no_retained_checkpoint_lists() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut args = keyed_count(P as u32, "chk", "out", &[]);
    let at = args
        .iter()
        .position(|a| a == "--retained-checkpoints")
        .unwrap();
    args[at + 1] = "3".into();
    let mut c = Cluster::start(dir, &args, 2, "w");
    let job = dir.join("chk").join("keyed-count");
    // Checkpoints of the first hold (bases), then of the second (deltas on them), while
    // retention discards all but the newest three.
    wait_for_settled_hold(&mut c, &job, 0);
    fs::write(dir.join(release_file(0)), b"go").unwrap();
    wait_for_settled_hold(&mut c, &job, 1);
    for i in 0..HOLDS {
        fs::write(dir.join(release_file(i)), b"go").unwrap();
    }
    let ended = c.finish();
    ended.assert_verified();
    assert_keyed_count_exact(&dir.join("out"), EVENTS, KEYS);
    let retained = completed_checkpoints(&job);
    assert!(
        (1..=3).contains(&retained.len()),
        "retained {retained:?}:\n{}",
        ended.out
    );
    assert_no_orphaned_shared_file(&job, true);
}
