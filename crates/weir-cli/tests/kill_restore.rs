//! Whole-process SIGKILL at seeded-random moments, then `--restore latest`: the final
//! counts are exact in exactly-once mode and never low in at-least-once mode, and a killed
//! run never leaves a partial `--output`.

mod common;

use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use common::*;

/// Events of the killed job; at [`RATE`] an unkilled run lasts 6 s, longer than the five
/// killed runs together (at most 4.5 s), so the kills always hit a running job.
const EVENTS: u64 = 600_000;
/// Keys (not a divisor of [`EVENTS`], so the `k < N % K` term matters).
const KEYS: u64 = 97;
/// Events per second over all sources.
const RATE: &str = "100000";
/// SIGKILLs per loop.
const KILLS: usize = 5;

/// The keyed-count command line of the kill loops.
fn keyed_count_args(d: &Path, o: &Path, mode: &str, restore: bool) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "keyed-count",
        "--events",
        &EVENTS.to_string(),
        "--keys",
        &KEYS.to_string(),
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "50ms",
        "--rate",
        RATE,
        "--checkpoint-dir",
        &checkpoint_arg(d),
        "--output",
        &s(o),
        "--restart-delay",
        "10ms",
        "--mode",
        mode,
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    if restore {
        a.extend(["--restore".into(), "latest".into()]);
    }
    a
}

/// The kill loop of both modes: `KILLS` runs SIGKILLed 300–900 ms after their start
/// (`common::kill_loop`); returns the newest complete checkpoint.
fn kill_keyed_count(
    tmp: &Path,
    d: &Path,
    o: &Path,
    mode: &str,
    seed: u64,
    after_kill: impl Fn(usize),
) -> u64 {
    let args = |restore| keyed_count_args(d, o, mode, restore);
    kill_loop(
        tmp,
        &d.join("keyed-count"),
        (KILLS, (300, 900)),
        seed,
        args,
        after_kill,
    )
}

/// Asserts that the final run restored from exactly `chk-<id>` of `d`.
fn assert_restored_from(run: &Run, d: &Path, id: u64) {
    let from = restored_from(&run.stdout)
        .unwrap_or_else(|| panic!("the final run did not restore\n{}", run.describe()));
    let want: PathBuf = checkpoint_dir(d)
        .join("keyed-count")
        .join(format!("chk-{id}"));
    assert_eq!(
        from,
        want,
        "restored from the wrong checkpoint\n{}",
        run.describe()
    );
}

/// 5 SIGKILLs + `--restore latest` in exactly-once mode: exact counts, never a partial output.
#[test]
fn sigkill_loop_exactly_once_counts_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    assert!(!o.exists());
    let newest = kill_keyed_count(tmp.path(), &d, &o, "exactly-once", 0x5eed_0001, |i| {
        assert!(
            !o.exists(),
            "killed run {i} left a partial output folder {}",
            o.display()
        );
    });
    let mut args = keyed_count_args(&d, &o, "exactly-once", true);
    args.push("--verify".into());
    let run = run(&mut weir(tmp.path(), args));
    run.assert_success();
    assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    assert_restored_from(&run, &d, newest);
    assert_resumed(&run, EVENTS);
    assert_keyed_count_exact(&o, EVENTS, KEYS);
    assert!(
        !tmp.path().join(".out.inprogress").exists(),
        "the staging folder was not moved into place"
    );
}

/// 5 SIGKILLs + `--restore latest` at-least-once: no count low, previous output kept intact.
#[test]
fn sigkill_loop_at_least_once_never_undercounts() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    // A previous, complete output in place: killed runs must leave it alone.
    let prev = run(&mut weir(
        tmp.path(),
        [
            "run",
            "keyed-count",
            "--events",
            "10",
            "--keys",
            &KEYS.to_string(),
            "--checkpoint-dir",
            &checkpoint_arg(&tmp.path().join("prev-chk")),
            "--output",
            &s(&o),
        ],
    ));
    prev.assert_success();
    let before = tree(&o);
    assert!(before.contains_key(Path::new("_SUCCESS")));
    kill_keyed_count(tmp.path(), &d, &o, "at-least-once", 0x5eed_0002, |i| {
        assert!(
            tree(&o) == before,
            "killed run {i} changed the previous output {}",
            o.display()
        );
    });
    let run = run(&mut weir(
        tmp.path(),
        keyed_count_args(&d, &o, "at-least-once", true),
    ));
    run.assert_success();
    assert!(restored_from(&run.stdout).is_some(), "{}", run.describe());
    // At-least-once rewinds the sources to the checkpoint too: only the rest is read.
    assert_resumed(&run, EVENTS);
    assert!(o.join("_SUCCESS").is_file());
    let got = keyed_counts(&o);
    assert_eq!(got.len() as u64, KEYS, "keys missing or extra: {got:?}");
    let mut over = 0;
    for k in 0..KEYS {
        let want = expected_count(EVENTS, KEYS, k);
        let have = got[&k];
        assert!(
            have >= want,
            "key {k}: counted {have}, below the truth {want}"
        );
        over += u64::from(have > want);
    }
    eprintln!("at-least-once: {over} of {KEYS} keys over-counted");
}

/// A run SIGKILLed at parallelism 2 resumes at parallelism 3 from its newest checkpoint, exact.
#[test]
fn sigkill_then_restore_at_other_parallelism_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    let (n, keys) = (200_000u64, 1000u64);
    let args = |p: &str, restore: bool| {
        let mut a: Vec<String> = [
            "run",
            "keyed-count",
            "--events",
            &n.to_string(),
            "--keys",
            &keys.to_string(),
            "--parallelism",
            p,
            "--checkpoint-interval",
            "50ms",
            // The killed run lasts 10 s at its rate, far longer than its two checkpoints
            // take on a loaded machine; the restore runs at full speed.
            "--rate",
            if restore { "10000000" } else { "20000" },
            "--checkpoint-dir",
            &checkpoint_arg(&d),
            "--output",
            &s(&o),
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        if restore {
            a.extend(["--restore", "latest", "--verify"].map(String::from));
        }
        a
    };
    let job = d.join("keyed-count");
    let mut child = spawn_logged(
        &mut weir(tmp.path(), args("2", false)),
        &tmp.path().join("p2.log"),
    );
    wait_for_checkpoints(&mut child, &job, 2, RUN_TIMEOUT);
    thread::sleep(Duration::from_millis(200));
    sigkill_running(&mut child, "parallelism-2 run");
    wait_for_dead_lease();
    let newest = *completed_checkpoints(&job).last().unwrap();
    let run = run(&mut weir(tmp.path(), args("3", true)));
    run.assert_success();
    assert!(run.stdout.contains("parallelism 3"), "{}", run.describe());
    assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    assert_restored_from(&run, &d, newest);
    assert_resumed(&run, n);
    assert_keyed_count_exact(&o, n, keys);
}

/// Issue 11's hostile user: two `weir run` processes with the same `--checkpoint-dir` and
/// job name. The second is refused at once (exit 1) naming the first's process as the
/// holder and the way out, and it touches nothing: the first run's checkpoints stay (its
/// retention is its own), and it finishes with exact counts (`--verify`). Locally the
/// holder has an exclusive lock; on S3 (`WEIR_TEST_CHECKPOINT_DIR=s3`) a lease.
#[test]
fn a_second_run_on_the_same_checkpoint_folder_is_refused_naming_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    let job_dir = d.join("keyed-count");
    let mut first = keyed_count_args(&d, &o, "exactly-once", false);
    first.push("--verify".into());
    // Another output: what is refused here is the checkpoint folder (the same --output is
    // refused by its own lock: the next test).
    let other = tmp.path().join("out-2");
    let log = tmp.path().join("first.log");
    let mut child = spawn_logged(&mut weir(tmp.path(), &first), &log);
    wait_for_checkpoints(&mut child, &job_dir, 2, RUN_TIMEOUT);
    let before = completed_checkpoints(&job_dir);
    let second = run(&mut weir(
        tmp.path(),
        keyed_count_args(&d, &other, "exactly-once", false),
    ));
    assert_clean_error(
        &second,
        1,
        &[
            "is in use by another run",
            &format!("process {}", child.id()),
            "--job-name or --checkpoint-dir",
        ],
    );
    let status = wait_deadline(&mut child, RUN_TIMEOUT, "the first run");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("verify: OK"), "{text}");
    assert!(
        !text.contains("in use"),
        "the refused run disturbed the first\n{text}"
    );
    // The first run went on checkpointing past what it had when the second was refused.
    let after = completed_checkpoints(&job_dir);
    assert!(
        after.last() > before.last(),
        "no checkpoint after {before:?}: {after:?}"
    );
    assert_keyed_count_exact(&o, EVENTS, KEYS);
    assert!(!other.exists(), "the refused run published an output");
}

/// A second run given a running job's `--output` (with its own checkpoint folder) is
/// refused before it touches the staging folder, so the first run's staged and committed
/// part files survive and it finishes exact.
#[test]
fn a_second_run_on_the_same_output_is_refused_and_leaves_the_first_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    let job_dir = d.join("keyed-count");
    let mut first = keyed_count_args(&d, &o, "exactly-once", false);
    first.push("--verify".into());
    let log = tmp.path().join("first.log");
    let mut child = spawn_logged(&mut weir(tmp.path(), &first), &log);
    wait_for_checkpoints(&mut child, &job_dir, 2, RUN_TIMEOUT);
    let second = run(&mut weir(
        tmp.path(),
        keyed_count_args(&tmp.path().join("chk-2"), &o, "exactly-once", false),
    ));
    assert_clean_error(
        &second,
        1,
        &[
            "is being written by another run",
            &format!("process {}", child.id()),
            "choose another --output",
        ],
    );
    let status = wait_deadline(&mut child, RUN_TIMEOUT, "the first run");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("verify: OK"), "{text}");
    assert_keyed_count_exact(&o, EVENTS, KEYS);
}
