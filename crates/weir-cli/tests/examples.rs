//! The examples of `crates/weir/examples/` (compiled into this test) run as programs of their
//! own — this test binary re-executes itself as the job — under injected failures, and their
//! exact output is checked against a truth computed here, independently of the job's
//! operators, with proof from the run summary that the run resumed from checkpoints.

mod common;

#[allow(dead_code)]
#[path = "../../weir/examples/fraud_detection.rs"]
mod fraud_detection;

#[allow(dead_code)]
#[path = "../../weir/examples/click_sessions.rs"]
mod click_sessions;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use common::*;

/// The environment variable that makes this test binary a job: the example's name, then
/// its arguments, separated by ASCII unit separators.
const CHILD: &str = "WEIR_EXAMPLES_TEST_JOB";

/// Not a test (ignored, so a normal run does not count it as one): the examples' `main`
/// when the binary is re-executed by [`job`].
#[test]
#[ignore = "the examples' job process, run by the other tests"]
fn job_process() {
    let Some(args) = child_job::args(CHILD) else {
        // `--include-ignored` without the other tests' environment: nothing to run.
        return;
    };
    let name = args.first().cloned().expect("an example's name");
    let runner = weir::runner::Runner::new(name.as_str()).args(args);
    child_job::exit(match name.as_str() {
        "fraud_detection" => runner.run(fraud_detection::build),
        "click_sessions" => runner.run(click_sessions::build),
        other => panic!("no example {other}"),
    });
}

/// The example `name` as a command run in `cwd` with `args`.
fn job(name: &str, cwd: &Path, args: &[&str]) -> Command {
    child_job::command(CHILD, name, cwd, args)
}

/// The flags that make a run fail `failures` times, each after a checkpoint with progress,
/// and restart quickly from the latest checkpoint.
fn failure_flags(failures: u32) -> Vec<String> {
    [
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "50ms",
        "--inject-failures",
        &failures.to_string(),
        "--seed",
        "11",
        "--restart-strategy",
        "fixed-delay",
        "--restart-delay",
        "10ms",
    ]
    .map(String::from)
    .to_vec()
}

/// Every committed line of the visible part files in `dir`, sorted (duplicates kept).
fn committed_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for e in std::fs::read_dir(dir).expect("the output folder") {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        lines.extend(text.lines().map(String::from));
    }
    lines.sort();
    lines
}

/// Runs `name` with `args` plus [`failure_flags`]`(failures)`, asserting that it succeeded,
/// that every failure fired, and that every restart resumed from a checkpoint; returns the
/// run.
fn run_with_failures(name: &str, cwd: &Path, args: &[&str], failures: u32, total: u64) -> Run {
    let flags = failure_flags(failures);
    let all: Vec<&str> = args
        .iter()
        .copied()
        .chain(flags.iter().map(String::as_str))
        .collect();
    let run = run(&mut job(name, cwd, &all));
    run.assert_success();
    assert!(
        run.stdout
            .contains(&format!("(injected failures: {failures} of {failures})")),
        "{}",
        run.describe()
    );
    let attempts = assert_resumed(&run, total);
    assert_eq!(attempts.len(), failures as usize + 1, "{}", run.describe());
    run
}

/// The alerts `n` transactions over `accounts` accounts must raise, as output lines:
/// per account, a transaction under 1.00 directly followed (for that account) by one over
/// 500.00. The one-minute timer never fires in a run of seconds, so it plays no part.
fn fraud_truth(n: u64, accounts: u64) -> Vec<String> {
    let mut small: HashMap<u64, u64> = HashMap::new();
    let mut alerts = Vec::new();
    for i in 0..n {
        let t = fraud_detection::Transaction::generate(i, accounts);
        assert_eq!((t.id, t.account < accounts), (i, true));
        if let Some(s) = small.remove(&t.account) {
            if t.cents > 50_000 {
                let amount = format!("{}.{:02}", t.cents / 100, t.cents % 100);
                alerts.push(format!("{},{s},{i},{amount}", t.account));
            }
        }
        if t.cents < 100 {
            small.insert(t.account, i);
        }
    }
    alerts.sort();
    alerts
}

#[test]
fn fraud_detection_alerts_exactly_once_through_injected_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let (n, accounts) = (200_000u64, 37u64);
    let args = [
        "--transactions",
        &n.to_string(),
        "--accounts",
        &accounts.to_string(),
        "--rate",
        "400000",
        "--output",
        "alerts",
    ];
    let run = run_with_failures("fraud_detection", tmp.path(), &args, 3, n);
    let want = fraud_truth(n, accounts);
    assert!(want.len() > 1000, "the input raises {} alerts", want.len());
    let got = committed_lines(&tmp.path().join("alerts"));
    assert_eq!(got.len(), want.len(), "alert count\n{}", run.describe());
    assert!(got == want, "the alerts differ from the truth");
}

/// The rows `n` clicks over `users` users and `pages` pages must give with groups of
/// `size`: per user, its clicks in order cut into groups of `size` (the last one partial),
/// each with its distinct pages and most clicked page (the lowest on a tie), then one row
/// with the user's groups and clicks. The one-minute idle timer never fires in a run of
/// seconds, so it plays no part.
fn click_truth(n: u64, users: u64, pages: u64, size: u64) -> Vec<String> {
    let mut by_user: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for i in 0..n {
        let c = click_sessions::Click::generate(i, users, pages);
        assert!(c.user < users && c.page < pages);
        by_user.entry(c.user).or_default().push(c.page);
    }
    let mut rows = Vec::new();
    for (user, clicked) in by_user {
        let groups = clicked.chunks(size as usize);
        let count = groups.len();
        for (g, group) in groups.enumerate() {
            let mut per_page: BTreeMap<u64, u64> = BTreeMap::new();
            for p in group {
                *per_page.entry(*p).or_default() += 1;
            }
            let most = per_page.values().max().copied().unwrap();
            let top = per_page.iter().find(|(_, c)| **c == most).unwrap().0;
            rows.push(format!(
                "group,{user},{},{},{},{top}",
                g + 1,
                group.len(),
                per_page.len()
            ));
        }
        rows.push(format!("user,{user},{count},{}", clicked.len()));
    }
    rows.sort();
    rows
}

#[test]
fn click_sessions_rows_are_exact_through_injected_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let (n, users, pages, size) = (200_000u64, 41u64, 13u64, 7u64);
    let args = [
        "--clicks",
        &n.to_string(),
        "--users",
        &users.to_string(),
        "--pages",
        &pages.to_string(),
        "--group-size",
        &size.to_string(),
        "--rate",
        "400000",
        "--output",
        "rows",
    ];
    let run = run_with_failures("click_sessions", tmp.path(), &args, 3, n);
    let want = click_truth(n, users, pages, size);
    // Most users end on a partial group, so the end-of-input rows are checked too.
    let partial = want
        .iter()
        .filter(|r| r.starts_with("group,") && r.split(',').nth(3) != Some("7"))
        .count();
    assert!(partial > users as usize / 2, "{partial} partial groups");
    let got = committed_lines(&tmp.path().join("rows"));
    assert_eq!(got.len(), want.len(), "row count\n{}", run.describe());
    assert!(got == want, "the rows differ from the truth");
}

/// The idle timer: with a slow input and a short `--idle-ms`, users fall idle between
/// clicks and their open groups are reported early. When exactly depends on timing, so this
/// checks what holds however the timers fall: each user's groups are numbered `1..=g`,
/// none is larger than the group size, some closed early, and the clicks add up to the
/// user's clicks in the input and to the summary row.
#[test]
fn click_sessions_idle_timer_flushes_open_groups() {
    let tmp = tempfile::tempdir().unwrap();
    let (n, users, pages, size) = (300u64, 3u64, 5u64, 5u64);
    let run = run(&mut job(
        "click_sessions",
        tmp.path(),
        &[
            "--clicks",
            "300",
            "--users",
            "3",
            "--pages",
            "5",
            "--group-size",
            "5",
            "--rate",
            "100",
            "--idle-ms",
            "30",
            "--output",
            "rows",
        ],
    ));
    run.assert_success();
    let mut clicks_in: BTreeMap<u64, u64> = BTreeMap::new();
    for i in 0..n {
        *clicks_in
            .entry(click_sessions::Click::generate(i, users, pages).user)
            .or_default() += 1;
    }
    // user → (group number → clicks), and user → (groups, clicks) from the summary rows.
    let mut groups: BTreeMap<u64, BTreeMap<u64, u64>> = BTreeMap::new();
    let mut summary: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for line in committed_lines(&tmp.path().join("rows")) {
        let f: Vec<&str> = line.split(',').collect();
        let num = |i: usize| -> u64 { f[i].parse().unwrap() };
        match f[0] {
            "group" => {
                let dup = groups.entry(num(1)).or_default().insert(num(2), num(3));
                assert!(dup.is_none(), "group reported twice: {line}");
            }
            "user" => assert!(summary.insert(num(1), (num(2), num(3))).is_none()),
            _ => panic!("unexpected row {line}"),
        }
    }
    let mut early = 0;
    for (user, want) in &clicks_in {
        let g = &groups[user];
        let numbers: Vec<u64> = g.keys().copied().collect();
        assert_eq!(
            numbers,
            (1..=g.len() as u64).collect::<Vec<_>>(),
            "user {user}"
        );
        assert!(
            g.values().all(|c| (1..=size).contains(c)),
            "user {user}: {g:?}"
        );
        assert_eq!(g.values().sum::<u64>(), *want, "user {user}'s clicks");
        assert_eq!(
            summary[user],
            (g.len() as u64, *want),
            "user {user}'s summary"
        );
        early += g
            .iter()
            .filter(|(k, c)| **c < size && **k < g.len() as u64)
            .count();
    }
    assert!(early > 0, "no group was flushed early\n{}", run.describe());
}
