//! `weir run nexmark` for the windowed queries q7, q8 and q11: the engine's rows equal the
//! reference evaluator's — bounded, under injected panics and after whole-process SIGKILLs
//! while windows fire (resumed with `--restore latest`), restored at another parallelism,
//! and for q7's bids exactly at a window's end.
//!
//! The generator runs at a low `--tps` (events per second of event time), so that a few
//! hundred thousand events span tens of 10 s windows, which fire all through a run.

mod common;

use std::fs;
use std::path::Path;

use common::nexmark::{
    self, assert_four_panics_resumed, four_panics, restoring, run_args, run_last_from_newest,
};
use common::*;

/// A windowed query and the generated input of its tests: small enough for a debug
/// build to run in a few seconds, long enough in event time for many windows.
#[derive(Clone, Copy)]
struct Case {
    query: &'static str,
    events: u64,
    /// Events per second of event time.
    tps: u64,
    /// The `--rate` (events per wall-clock second) of the SIGKILL runs, so that each lasts
    /// several seconds.
    kill_rate: u64,
}

/// 200 k bids and others over 200 s of event time: 20 windows.
const Q7: Case = Case {
    query: "q7",
    events: 200_000,
    tps: 1_000,
    kill_rate: 40_000,
};
/// 300 k events over 200 s, of which q8 reads the 8 % persons and auctions.
const Q8: Case = Case {
    query: "q8",
    events: 300_000,
    tps: 1_500,
    kill_rate: 60_000,
};
/// q11's session windows cost the most per bid in a debug build: 60 k events over 120 s.
const Q11: Case = Case {
    query: "q11",
    events: 60_000,
    tps: 500,
    kill_rate: 12_000,
};

impl Case {
    /// The generator flags shared by the engine's run and the reference.
    fn input(&self) -> Vec<String> {
        [
            "--events",
            &self.events.to_string(),
            "--tps",
            &self.tps.to_string(),
        ]
        .map(String::from)
        .to_vec()
    }

    /// `weir run nexmark` over the case's events at `parallelism`, into `o` with
    /// checkpoints in `d`, plus `extra`.
    fn args(&self, parallelism: u32, d: &Path, o: &Path, extra: &[&str]) -> Vec<String> {
        run_args(self.query, parallelism, &self.input(), d, o, extra)
    }
}

/// Asserts that the published `o/<q>.csv` equals the reference's over `input`, which has
/// more than a few rows.
fn assert_same_as_reference(tmp: &Path, o: &Path, q: &str, input: &[String]) {
    nexmark::assert_same_as_reference(tmp, o, q, input, 5);
}

#[test]
fn bounded_runs_equal_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    for case in [Q7, Q8, Q11] {
        let q = case.query;
        let (d, o) = (tmp.path().join(format!("chk-{q}")), tmp.path().join(q));
        let run = run(&mut weir(tmp.path(), case.args(1, &d, &o, &["--verify"])));
        run.assert_success();
        assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
        assert_same_as_reference(tmp.path(), &o, q, &case.input());
    }
}

/// q8 keys its distinct persons by id alone (cheaper than `(id, name)`); a file may still
/// repeat a person's id with another name, and then the SQL's `GROUP BY id, name` keeps
/// both names: every person of a generated file appears again under a second name, and
/// once more unchanged, and q8 still equals the reference — with both names in its rows.
#[test]
fn q8_keeps_every_name_of_a_repeated_person_id() {
    let tmp = tempfile::tempdir().unwrap();
    let generated = tmp.path().join("generated.jsonl");
    let mut generate = vec!["nexmark".to_string(), "generate".into()];
    generate.extend(Q8.input());
    generate.extend(["--output".to_string(), s(&generated)]);
    run(&mut weir(tmp.path(), generate)).assert_success();
    let mut events = String::new();
    for line in fs::read_to_string(&generated).unwrap().lines() {
        events.push_str(line);
        events.push('\n');
        if line.starts_with("{\"event_type\":0,") {
            let (head, tail) = line.split_once("\"name\":\"").expect("a person has a name");
            events.push_str(&format!("{head}\"name\":\"Other {tail}\n"));
            events.push_str(line);
            events.push('\n');
        }
    }
    let file = tmp.path().join("events.jsonl");
    fs::write(&file, events).unwrap();
    let input = ["--input".to_string(), s(&file)];
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    let mut args: Vec<String> = ["run", "nexmark", "--query", "q8"]
        .map(String::from)
        .to_vec();
    args.extend(input.clone());
    args.extend(
        [
            "--parallelism",
            "2",
            "--checkpoint-dir",
            &s(&d),
            "--output",
            &s(&o),
            "--verify",
        ]
        .map(String::from),
    );
    let r = run(&mut weir(tmp.path(), args));
    r.assert_success();
    assert!(r.stdout.contains("verify: OK"), "{}", r.describe());
    assert_same_as_reference(tmp.path(), &o, "q8", &input);
    let rows = fs::read_to_string(o.join("q8.csv")).unwrap();
    let renamed = rows.lines().filter(|l| l.contains(",Other ")).count();
    assert!(
        renamed > 0 && 2 * renamed == rows.lines().count() - 1,
        "each person row should appear under both names once: {renamed} renamed of {}",
        rows.lines().count() - 1
    );
}

/// Injected panics at random moments in random subtasks (window operators included), each
/// once a checkpoint completed in its attempt: every restart resumes from a checkpoint,
/// and the output is exactly the reference's.
fn injected_panics(case: Case, seed: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    let rate = (case.kill_rate * 4).to_string();
    let args = run_args(
        case.query,
        2,
        &case.input(),
        &d,
        &o,
        &four_panics(&rate, seed),
    );
    let run = run(&mut weir(tmp.path(), args));
    assert_four_panics_resumed(&run, case.events);
    assert_same_as_reference(tmp.path(), &o, case.query, &case.input());
}

#[test]
fn q7_is_exact_under_injected_panics() {
    injected_panics(Q7, "71");
}

#[test]
fn q8_is_exact_under_injected_panics() {
    injected_panics(Q8, "81");
}

#[test]
fn q11_is_exact_under_injected_panics() {
    injected_panics(Q11, "111");
}

/// The committed part files in the output's staging folder, and how many rows they hold.
fn committed_rows(staging: &Path) -> usize {
    let Ok(entries) = fs::read_dir(staging) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        })
        .map(|p| fs::read_to_string(p).unwrap_or_default().lines().count())
        .sum()
}

/// SIGKILLs of the whole process at seeded-random moments, each run resumed with
/// `--restore latest`, the last one at `last_parallelism`: no killed run publishes
/// anything, windows had fired and committed rows before a kill (so kills hit a job whose
/// windows fire), and the last run resumes from the newest checkpoint and publishes
/// exactly the reference's rows.
fn sigkill_and_restore(case: Case, seed: u64, last_parallelism: u32) {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    // 5 s of input at the rate (10 s on S3, where checkpoints take longer): the killed runs
    // together (at most 0.9 s each past what they wait for) never reach its end. A
    // committed window result is waited for, not expected from late kills.
    let (rate, window) = if on_s3() {
        (case.kill_rate / 2, (300, 900))
    } else {
        (case.kill_rate, (300, 900))
    };
    let rate = rate.to_string();
    let base = ["--rate", rate.as_str(), "--checkpoint-interval", "50ms"];
    let args =
        |restore: bool, parallelism: u32| restoring(case.args(parallelism, &d, &o, &base), restore);
    let mut committed = 0;
    let staging = tmp.path().join(".out.inprogress");
    // The killed run that waits for a checkpoint of its own also waits for a committed
    // window result, so a kill certainly hits a job whose windows fire and commit.
    let newest = kill_loop_until(
        tmp.path(),
        &d.join("nexmark"),
        (3, window),
        seed,
        |restore| args(restore, 2),
        || committed_rows(&staging) > 0,
        |i| {
            assert!(!o.exists(), "killed run {i} published {}", o.display());
            committed = committed_rows(&tmp.path().join(".out.inprogress"));
        },
    );
    assert!(
        committed > 0,
        "no window result was committed before the last kill: the kills did not hit \
         firing windows"
    );
    let last = args(true, last_parallelism);
    run_last_from_newest(tmp.path(), &d, newest, last, case.events);
    assert_same_as_reference(tmp.path(), &o, case.query, &case.input());
    assert!(!tmp.path().join(".out.inprogress").exists());
}

#[test]
fn q7_is_exact_after_sigkills_and_restore_latest() {
    sigkill_and_restore(Q7, 0x6e78_0007, 2);
}

#[test]
fn q8_is_exact_after_sigkills_and_restore_at_parallelism_1() {
    sigkill_and_restore(Q8, 0x6e78_0008, 1);
}

#[test]
fn q11_is_exact_after_sigkills_and_restore_at_parallelism_3() {
    sigkill_and_restore(Q11, 0x6e78_0011, 3);
}

/// A bid line of the benchmark's JSON.
fn bid(auction: i64, bidder: i64, price: i64, time: i64) -> String {
    format!(
        r#"{{"event_type":2,"bid":{{"auction":{auction},"bidder":{bidder},"price":{price},"channel":"Google","url":"u","dateTime":{time},"extra":"x{bidder}"}}}}"#
    )
}

/// q7's join is `BETWEEN window_end - 10 s AND window_end`, inclusive: a bid exactly at a
/// window's end counts for the next window's maximum and still joins this one; ties at
/// the maximum all join; and the SQL's positional insert swaps `bidder` and `price`.
#[test]
fn q7_joins_bids_at_the_window_end_and_every_tie() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("bids.jsonl");
    let base = 1_704_067_200_000; // a window boundary (2024-01-01)
    let lines = [
        bid(1, 10, 50, base + 1_000),
        bid(1, 11, 70, base + 2_000),
        bid(2, 12, 70, base + 9_999), // a tie at window 1's maximum
        bid(2, 13, 60, base + 5_000),
        bid(3, 14, 70, base + 10_000), // at window 1's end: joins it, and counts in window 2
        bid(3, 15, 90, base + 10_000), // at the end, above window 1's maximum: joins nothing there
        bid(4, 16, 40, base + 15_000),
        bid(4, 17, 80, base + 20_000), // at window 2's end, below its maximum 90; window 3's
        bid(5, 18, 30, base + 41_000), // window 5, alone; window 4 is empty
    ];
    fs::write(&file, lines.join("\n") + "\n").unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    let run = run(&mut weir(
        tmp.path(),
        [
            "run",
            "nexmark",
            "--query",
            "q7",
            "--input",
            &s(&file),
            "--checkpoint-dir",
            &checkpoint_arg(&d),
            "--output",
            &s(&o),
            "--verify",
        ],
    ));
    run.assert_success();
    assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    let mut rows: Vec<String> = fs::read_to_string(o.join("q7.csv"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    rows[1..].sort();
    let t = |dt: i64| base + dt;
    assert_eq!(
        rows,
        [
            "auction,bidder,price,dateTime,extra".to_string(),
            format!("1,70,11,{},x11", t(2_000)),
            format!("2,70,12,{},x12", t(9_999)),
            format!("3,70,14,{},x14", t(10_000)),
            format!("3,90,15,{},x15", t(10_000)),
            format!("4,80,17,{},x17", t(20_000)),
            format!("5,30,18,{},x18", t(41_000)),
        ]
    );
}
