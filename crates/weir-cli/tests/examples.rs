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

#[allow(dead_code)]
#[path = "../../weir/examples/hello.rs"]
mod hello;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use common::kill_resume::{kill_after_checkpoint, resume_from, Kill};
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
        "hello" => runner.run(hello::build),
        other => panic!("no example {other}"),
    });
}

/// The example `name` as a command run in `cwd` with `args`. Locally it keeps its
/// checkpoints and savepoints in the default folders of `cwd` (`weir-checkpoints`,
/// `weir-savepoints`), as a user's first run does; with `WEIR_TEST_CHECKPOINT_DIR=s3` in
/// the S3 twins of those folders ([`checkpoint_dir`]).
fn job(name: &str, cwd: &Path, args: &[&str]) -> Command {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    if on_s3() {
        for (flag, folder) in [
            ("--checkpoint-dir", "weir-checkpoints"),
            ("--savepoint-dir", "weir-savepoints"),
        ] {
            all.extend([flag.to_string(), checkpoint_arg(&cwd.join(folder))]);
        }
    }
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    child_job::command(CHILD, name, cwd, &all)
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

/// Runs the example `name` with `args` at parallelism 2 and 50 ms checkpoints, SIGKILLs it
/// 0–300 ms (seeded) after its second or third checkpoint, and resumes it with
/// `--restore latest`; the killed run adds `rates.0` (flags that make it last seconds), the
/// resumed one `rates.1`. Returns the resumed run, which must have succeeded and restored
/// the killed run's newest checkpoint.
fn kill_and_resume(name: &str, cwd: &Path, args: &[&str], rates: [&str; 2], seed: u64) -> Run {
    let job_dir = cwd.join("weir-checkpoints").join(name);
    let mut rng = XorShift::from_env(seed);
    let flags = ["--parallelism", "2", "--checkpoint-interval", "50ms"];
    let killed: Vec<&str> = args
        .iter()
        .chain(&flags)
        .chain(&["--rate", rates[0]])
        .copied()
        .collect();
    let resumed: Vec<&str> = args
        .iter()
        .chain(&flags)
        .chain(&["--rate", rates[1], "--restore", "latest"])
        .copied()
        .collect();
    let kill = Kill {
        job_dir: &job_dir,
        log: &cwd.join("killed.log"),
        after_checkpoint: rng.range(2, 3),
        delay_ms: rng.range(0, 300),
        what: name,
    };
    let newest = kill_after_checkpoint(&mut job(name, cwd, &killed), &kill);
    resume_from(&mut job(name, cwd, &resumed), newest, name)
}

/// Every example that runs without a server (the PostgreSQL one has its own SIGKILL test in
/// `example_postgres.rs`, click_sessions a loop of its own below) is SIGKILLed mid-run
/// after a checkpoint and resumed with `--restore latest`: its committed output is exact
/// (each line once), and the resumed run read only what the checkpoint had not covered.
#[test]
fn every_example_is_exact_after_a_sigkill_and_a_restore() {
    // hello: `key,count` for every event, so key k's lines are k,1 … k,n_k.
    let tmp = tempfile::tempdir().unwrap();
    let (n, keys) = (200_000u64, 7u64);
    let args = ["--events", "200000", "--keys", "7", "--output", "counts"];
    let run = kill_and_resume("hello", tmp.path(), &args, ["40000", "4000000"], 31);
    assert_resumed(&run, n);
    let mut want: Vec<String> = (0..keys)
        .flat_map(|k| (1..=expected_count(n, keys, k)).map(move |c| format!("{k},{c}")))
        .collect();
    want.sort();
    let got = committed_lines(&tmp.path().join("counts"));
    assert_eq!(
        got.len(),
        want.len(),
        "hello's line count\n{}",
        run.describe()
    );
    assert!(got == want, "hello's counts differ from the truth");

    // fraud_detection: the alerts, each once.
    let tmp = tempfile::tempdir().unwrap();
    let (n, accounts) = (200_000u64, 37u64);
    let args = [
        "--transactions",
        "200000",
        "--accounts",
        "37",
        "--output",
        "alerts",
    ];
    let run = kill_and_resume(
        "fraud_detection",
        tmp.path(),
        &args,
        ["40000", "4000000"],
        32,
    );
    assert_resumed(&run, n);
    let got = committed_lines(&tmp.path().join("alerts"));
    assert!(
        got == fraud_truth(n, accounts),
        "the alerts differ from the truth after a SIGKILL"
    );
}

/// The input of the click-session tests: clicks, users, pages, spacing and maximum delay
/// (ms of event time), and the session gap (ms). A user clicks every 41 ms on average, so
/// a gap of 80 ms ends about one session in seven clicks; delays of up to 50 ms put clicks
/// out of order, some of them into the pause between two sessions, which they join.
const CLICKS: (u64, u64, u64, u64, u64, u64) = (60_000, 41, 13, 1, 50, 80);

/// The click-session example's arguments for [`CLICKS`], at `rate` clicks per second.
fn click_args(rate: &str) -> Vec<String> {
    let (n, users, pages, spacing, delay, gap) = CLICKS;
    let mut a = vec![];
    for (flag, v) in [
        ("--clicks", n),
        ("--users", users),
        ("--pages", pages),
        ("--spacing-ms", spacing),
        ("--max-delay-ms", delay),
        ("--gap-ms", gap),
    ] {
        a.extend([flag.to_string(), v.to_string()]);
    }
    a.extend(["--rate", rate, "--output", "sessions"].map(String::from));
    a
}

/// The sessions [`CLICKS`] must give, as output lines, computed without windows: per user,
/// the clicks sorted by event time, cut wherever two consecutive clicks are more than the
/// gap apart (session windows `[t, t + gap)` merge when they overlap or touch); each
/// session `[first, last + gap)` with its clicks, distinct pages and most clicked page (the
/// lowest on a tie). The watermark trails by the maximum delay, so no click is late.
fn session_truth() -> Vec<String> {
    let (n, users, pages, spacing, delay, gap) = CLICKS;
    let mut by_user: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for i in 0..n {
        let c = click_sessions::Click::generate(i, users, pages, spacing, delay);
        assert!(c.user < users && c.page < pages);
        assert!((i * spacing..=i * spacing + delay).contains(&c.time_ms));
        by_user.entry(c.user).or_default().push((c.time_ms, c.page));
    }
    let mut rows = Vec::new();
    for (user, mut clicks) in by_user {
        clicks.sort();
        let mut session: Vec<(u64, u64)> = Vec::new();
        let mut close = |session: &mut Vec<(u64, u64)>| {
            let mut per_page: BTreeMap<u64, u64> = BTreeMap::new();
            for (_, p) in session.iter() {
                *per_page.entry(*p).or_default() += 1;
            }
            let most = per_page.values().max().copied().unwrap();
            let top = per_page.iter().find(|(_, c)| **c == most).unwrap().0;
            let (start, end) = (session[0].0, session.last().unwrap().0 + gap);
            let (clicks, distinct) = (session.len(), per_page.len());
            rows.push(format!("{user},{start},{end},{clicks},{distinct},{top}"));
            session.clear();
        };
        for c in clicks {
            if session.last().is_some_and(|last| c.0 - last.0 > gap) {
                close(&mut session);
            }
            session.push(c);
        }
        close(&mut session);
    }
    rows.sort();
    rows
}

/// Checks the committed sessions in `cwd` against [`session_truth`], and that the input
/// holds what the test means to exercise: many sessions, and clicks that arrived after a
/// newer click of the same user (out of order).
fn assert_sessions_exact(cwd: &Path, run: &Run) {
    let want = session_truth();
    let (n, users, pages, spacing, delay, _) = CLICKS;
    assert!(want.len() > 5_000, "{} sessions", want.len());
    let mut newest: HashMap<u64, u64> = HashMap::new();
    let out_of_order = (0..n)
        .map(|i| click_sessions::Click::generate(i, users, pages, spacing, delay))
        .filter(|c| {
            let seen = newest.entry(c.user).or_insert(0);
            let late = c.time_ms < *seen;
            *seen = (*seen).max(c.time_ms);
            late
        })
        .count();
    assert!(out_of_order > 1000, "{out_of_order} clicks out of order");
    let got = committed_lines(&cwd.join("sessions"));
    assert_eq!(got.len(), want.len(), "session count\n{}", run.describe());
    assert!(got == want, "the sessions differ from the truth");
}

#[test]
fn click_sessions_are_exact_through_injected_failures() {
    let tmp = tempfile::tempdir().unwrap();
    // Paced below what the session windows take in a debug build on a loaded machine, so
    // barriers do not queue behind a backlog and every failure finds a checkpoint to follow.
    let args = click_args("15000");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = run_with_failures("click_sessions", tmp.path(), &args, 3, CLICKS.0);
    assert_sessions_exact(tmp.path(), &run);
}

/// SIGKILL twice, each time soon after the run completed a checkpoint of its own, then a
/// last run that resumes with `--restore latest` and fails twice more by injected panics:
/// the sessions are exact, and every run resumed where a checkpoint left it.
#[test]
fn click_sessions_are_exact_through_sigkills_and_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let job_dir = tmp.path().join("weir-checkpoints/click_sessions");
    let mut rng = XorShift::from_env(23);
    let mut newest = 0;
    for i in 0..2 {
        let mut args = click_args("15000");
        args.extend(["--parallelism", "2", "--checkpoint-interval", "50ms"].map(String::from));
        if i > 0 {
            args.extend(["--restore", "latest"].map(String::from));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let log = tmp.path().join(format!("run-{i}.log"));
        let mut child = spawn_logged(&mut job("click_sessions", tmp.path(), &args), &log);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while completed_checkpoints(&job_dir).last().copied().unwrap_or(0) <= newest {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("run {i} ended ({status}) before completing a checkpoint\n{log}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "run {i}: no checkpoint"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::thread::sleep(std::time::Duration::from_millis(rng.range(0, 150)));
        sigkill_running(&mut child, &format!("click_sessions run {i}"));
        wait_for_dead_lease();
        let now = completed_checkpoints(&job_dir).last().copied().unwrap_or(0);
        assert!(now > newest, "run {i} completed no checkpoint");
        newest = now;
    }
    let mut args = click_args("15000");
    args.extend(["--restore", "latest"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = run_with_failures("click_sessions", tmp.path(), &args, 2, CLICKS.0);
    let first = restored_from(&run.stdout).expect("the last run restored a checkpoint");
    assert!(
        first.ends_with(format!("chk-{newest}")),
        "the last run restored {} instead of the newest checkpoint, chk-{newest}",
        first.display()
    );
    assert_sessions_exact(tmp.path(), &run);
}

/// The example under the control commands, as a user runs it: `weir savepoint --job` and
/// then `weir stop --job` against its control endpoint while it runs at parallelism 2,
/// and a resume from the stop's savepoint at parallelism 3 (open sessions and window
/// contents move to other subtasks): the sessions are exact, and the resume read only
/// what the savepoint had not covered.
#[test]
fn click_sessions_savepoint_stop_and_rescaled_resume_are_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let mut first = click_args("10000");
    first.extend(["--parallelism", "2", "--checkpoint-interval", "100ms"].map(String::from));
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let log = t.join("job.log");
    let mut child = spawn_logged(&mut job("click_sessions", t, &first), &log);
    let deadline = std::time::Instant::now() + RUN_TIMEOUT;
    let addr = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let found = text
            .lines()
            .filter(|l| l.contains(" (weir status"))
            .find_map(|l| l.split("control endpoint ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .map(String::from);
        let checkpointed =
            !completed_checkpoints(&t.join("weir-checkpoints/click_sessions")).is_empty();
        match found {
            Some(addr) if checkpointed => break addr,
            _ => {}
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            panic!("no control address or checkpoint in\n{text}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let sp = run(&mut weir(t, ["savepoint", "--job", &addr]));
    sp.assert_success();
    let sp_path = match sp.stdout.trim() {
        remote if remote.contains("://") => std::path::PathBuf::from(remote),
        local => t.join(local),
    };
    assert!(is_object(&sp_path.join("_metadata")), "{}", sp.describe());
    let stop = run(&mut weir(t, ["stop", "--job", &addr]));
    stop.assert_success();
    let stopped_at = stop.stdout.trim().to_string();
    let status = wait_deadline(&mut child, RUN_TIMEOUT, "the click_sessions job");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("stopped with savepoint"), "{text}");

    let mut resume = click_args("400000");
    resume.extend(["--parallelism", "3", "--restore", &stopped_at].map(String::from));
    let resume: Vec<&str> = resume.iter().map(String::as_str).collect();
    let run = run(&mut job("click_sessions", t, &resume));
    run.assert_success();
    let restored = restored_from(&run.stdout).expect("restored the savepoint");
    assert_eq!(
        restored.file_name(),
        Path::new(&stopped_at).file_name(),
        "{}",
        run.describe()
    );
    assert_resumed(&run, CLICKS.0);
    assert_sessions_exact(t, &run);
}
