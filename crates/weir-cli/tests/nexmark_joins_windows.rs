//! `weir run nexmark` for q3 (regular join), q4 (join with expiry timers, then an average)
//! and q5 (sliding windows, then a second windowed stage): a bounded run, injected panics,
//! and whole-process SIGKILLs resumed with `--restore latest` (once at another
//! parallelism) all give exactly the reference evaluator's rows.
//!
//! The events run at 5 k events per second of event time (`--tps`), so that 200 k events
//! span 40 s of event time: q5's windows (every 2 s) and q4's auctions expire all through
//! a run, also while it is killed.

mod common;

use std::fs;
use std::path::Path;

use common::nexmark::{
    self, assert_four_panics_resumed, four_panics, restoring, run_args, run_last_from_newest,
};
use common::*;

/// Generated events per test.
const EVENTS: u64 = 200_000;
/// Events per second of event time.
const TPS: &str = "5000";

/// The generator flags: `EVENTS` events at `TPS`.
fn generated() -> [String; 4] {
    [
        "--events".into(),
        EVENTS.to_string(),
        "--tps".into(),
        TPS.into(),
    ]
}

/// `weir run nexmark --query q` over the [`generated`] events at parallelism `p`, into
/// `o` with checkpoints in `d`, plus `extra`.
fn args(q: &str, p: u32, d: &Path, o: &Path, extra: &[impl AsRef<str>]) -> Vec<String> {
    run_args(q, p, &generated(), d, o, extra)
}

/// Asserts that the published `o/<q>.csv` equals the CSV `weir nexmark reference` writes
/// over the same events, as multisets of rows, and has at least `min_rows` rows.
fn assert_same_as_reference(tmp: &Path, o: &Path, q: &str, min_rows: usize) {
    nexmark::assert_same_as_reference(tmp, o, q, &generated(), min_rows);
}

/// The fewest rows each query's reference has over these events: enough that a dropped
/// or doubled window, pair or auction shows.
fn min_rows(q: &str) -> usize {
    match q {
        "q3" => 500,
        "q4" => 5,
        _ => 9,
    }
}

/// A bounded run without failures, at parallelism 2, verified in the run and here.
fn bounded_run(q: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    let run = run(&mut weir(tmp.path(), args(q, 2, &d, &o, &["--verify"])));
    run.assert_success();
    assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    assert_same_as_reference(tmp.path(), &o, q, min_rows(q));
}

#[test]
fn q3_equals_the_reference() {
    bounded_run("q3");
}

#[test]
fn q4_equals_the_reference() {
    bounded_run("q4");
}

#[test]
fn q5_equals_the_reference() {
    bounded_run("q5");
}

/// Injected panics at random moments, each once a checkpoint completed in its attempt:
/// every restart resumes from a checkpoint (windows, timers and join state restored), and
/// the output is exactly the reference's.
fn injected_panics(q: &str, seed: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    let run = run(&mut weir(
        tmp.path(),
        args(q, 2, &d, &o, &four_panics("100000", seed)),
    ));
    assert_four_panics_resumed(&run, EVENTS);
    assert_same_as_reference(tmp.path(), &o, q, min_rows(q));
}

#[test]
fn q3_is_exact_under_injected_panics() {
    injected_panics("q3", "31");
}

#[test]
fn q4_is_exact_under_injected_panics() {
    injected_panics("q4", "41");
}

#[test]
fn q5_is_exact_under_injected_panics() {
    injected_panics("q5", "51");
}

/// The committed part files in the output's staging folder `staging`.
fn committed_parts(staging: &Path) -> usize {
    fs::read_dir(staging).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("part-"))
            .count()
    })
}

/// SIGKILLs of the whole process at seeded-random moments at parallelism 2, while windows
/// fire and auctions expire; each run resumes with `--restore latest`, the last at
/// parallelism `last_p` (key groups, windows and timers redistributed). No killed run
/// publishes anything; the last resumes from the newest checkpoint and publishes exactly
/// the reference's rows. With `rows_before_end`, the killed runs must have committed rows
/// (so the restores had results to keep once, not just state).
fn sigkill_and_restore(q: &str, seed: u64, last_p: u32, rows_before_end: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    // At 30 k events/s a run lasts almost 7 s (event time runs 6 s a second, so windows
    // fire from the first second on), far longer than the three killed runs together
    // (each at most 0.9 s past what it waits for).
    let base = ["--rate", "30000", "--checkpoint-interval", "50ms"];
    let run_args = |p: u32, restore: bool| restoring(args(q, p, &d, &o, &base), restore);
    let staging = tmp.path().join(".out.inprogress");
    // With `rows_before_end`, the killed run that waits for a checkpoint of its own also
    // waits for committed rows, so they are there by construction, not by speed.
    let newest = kill_loop_until(
        tmp.path(),
        &d.join("nexmark"),
        (3, (300, 900)),
        seed,
        |restore| run_args(2, restore),
        || !rows_before_end || committed_parts(&staging) > 0,
        |i| {
            assert!(!o.exists(), "killed run {i} published {}", o.display());
        },
    );
    if rows_before_end {
        assert!(
            committed_parts(&staging) > 0,
            "the killed runs of {q} committed no rows in {}",
            staging.display()
        );
    }
    run_last_from_newest(tmp.path(), &d, newest, run_args(last_p, true), EVENTS);
    assert_same_as_reference(tmp.path(), &o, q, min_rows(q));
    assert!(!tmp.path().join(".out.inprogress").exists());
}

#[test]
fn q3_is_exact_after_sigkills_and_restore_latest() {
    sigkill_and_restore("q3", 0x6e78_0003, 2, true);
}

/// q4 writes its rows when the input ends; its join state and expiry timers are what the
/// restores carry. The last run resumes at parallelism 1.
#[test]
fn q4_is_exact_after_sigkills_and_restore_latest_at_parallelism_1() {
    sigkill_and_restore("q4", 0x6e78_0004, 1, false);
}

/// The last run resumes at parallelism 3: the windows of both stages and their timers are
/// redistributed by key group.
#[test]
fn q5_is_exact_after_sigkills_and_restore_latest_at_parallelism_3() {
    sigkill_and_restore("q5", 0x6e78_0005, 3, true);
}

/// A JSON-lines file whose events come out of time order — blocks of 6 s of event time,
/// each reversed — at parallelism 2: bids arrive before their auctions and after the
/// watermark passed their auction's expiry. The regular joins drop nothing, so q3 and q4
/// must still equal the reference exactly (q4 sends a closed auction's raised price as a
/// change).
#[test]
fn out_of_order_events_in_a_file_give_q3_and_q4_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let sorted = tmp.path().join("sorted.jsonl");
    run(&mut weir(
        tmp.path(),
        [
            "nexmark",
            "generate",
            "--events",
            "40000",
            "--tps",
            "2000",
            "--output",
            &s(&sorted),
        ],
    ))
    .assert_success();
    let text = fs::read_to_string(&sorted).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut shuffled = String::new();
    for block in lines.chunks(12_000) {
        for line in block.iter().rev() {
            shuffled.push_str(line);
            shuffled.push('\n');
        }
    }
    let file = tmp.path().join("events.jsonl");
    fs::write(&file, shuffled).unwrap();
    for q in ["q3", "q4"] {
        let (d, o) = (tmp.path().join(format!("chk-{q}")), tmp.path().join(q));
        let run = run(&mut weir(
            tmp.path(),
            [
                "run",
                "nexmark",
                "--query",
                q,
                "--input",
                &s(&file),
                "--parallelism",
                "2",
                "--auto-watermark-interval",
                "5ms",
                "--checkpoint-dir",
                &checkpoint_arg(&d),
                "--output",
                &s(&o),
                "--verify",
            ],
        ));
        run.assert_success();
        assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    }
}
