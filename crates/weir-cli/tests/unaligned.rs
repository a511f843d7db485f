//! Unaligned checkpoints from the command line (issue 13): a keyed count whose counting
//! stage runs at a tenth of the generator's rate (`--sink-rate`), SIGKILLed at
//! seeded-random moments and resumed with `--restore latest`, counts exactly; the run
//! summary says how many checkpoints were unaligned and what they saved in flight. The
//! same for a user's three-stage job (source → a middle task → the slow count) run as a
//! program of its own: there the middle task is blocked sending when the barrier arrives.

mod common;

#[allow(dead_code)]
#[path = "../../weir/tests/support/slow_count.rs"]
mod slow_count;

use std::path::Path;
use std::process::Command;

use common::*;
use weir::prelude::*;
use weir::runner::{clap, BoxError, Job, Runner};

/// Events of the killed job: at [`SINK_RATE`] an unkilled run lasts 8 s, longer than the
/// killed runs together, so the kills always hit a running job.
const EVENTS: u64 = 320_000;
/// Keys (not a divisor of [`EVENTS`]).
const KEYS: u64 = 97;
/// Events per second the counting stage takes; the generator emits ten times as many.
const SINK_RATE: &str = "40000";
/// Events per second of the generator.
const RATE: &str = "400000";

fn args(d: &Path, o: &Path, extra: &[&str], restore: bool) -> Vec<String> {
    let (d, o) = (checkpoint_arg(d), s(o));
    let mut flags: Vec<&str> = vec![
        "--checkpoint-interval",
        "100ms",
        "--rate",
        RATE,
        "--sink-rate",
        SINK_RATE,
        "--checkpoint-dir",
        &d,
        "--output",
        &o,
        "--restart-delay",
        "10ms",
        "--unaligned",
    ];
    flags.extend_from_slice(extra);
    keyed_count_args(EVENTS, KEYS, &flags, restore)
}

/// The number of unaligned checkpoints and the records they saved, from the summary line.
fn unaligned_summary(stdout: &str) -> Option<(u64, u64)> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("unaligned checkpoints: "))?;
    let count = line.split(' ').next()?.parse().ok()?;
    let records = line
        .split("in flight saved: ")
        .nth(1)?
        .split(' ')
        .next()?
        .parse()
        .ok()?;
    Some((count, records))
}

/// Kills the backpressured job at random moments, then resumes it to the end and checks
/// the counts; with `inspect_newest`, first inspects the newest checkpoint the kills left.
fn sigkill_loop(extra: &[&str], seed: u64, inspect_newest: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    let newest = kill_loop(
        tmp.path(),
        &d.join("keyed-count"),
        (4, (300, 900)),
        seed,
        |restore| args(&d, &o, extra, restore),
        |i| assert!(!o.exists(), "killed run {i} left a partial output"),
    );
    if inspect_newest {
        // Mid-run under backpressure the newest checkpoint is unaligned with records in
        // flight, and `weir checkpoints inspect` shows them per subtask and channel.
        let chk = checkpoint_dir(&d)
            .join("keyed-count")
            .join(format!("chk-{newest}"));
        let args = ["checkpoints", "inspect", &s(&chk), "--format", "json"];
        let run = run(&mut weir(tmp.path(), args));
        run.assert_success();
        let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(v["unaligned"], true, "{}", run.describe());
        let channels = v["channel_state"].as_array().unwrap();
        let bytes: u64 = channels
            .iter()
            .map(|c| c["in_flight_bytes"].as_u64().unwrap())
            .sum();
        assert!(bytes > 0, "{}", run.describe());
        assert!(
            channels.iter().all(|c| c["uid"] == "count"),
            "{}",
            run.describe()
        );
        let text = run_text(tmp.path(), &chk);
        assert!(text.contains("IN_FLIGHT_BYTES"), "{text}");
    }
    let run = run(&mut weir(tmp.path(), args(&d, &o, extra, true)));
    run.assert_success();
    assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    assert_resumed(&run, EVENTS);
    assert_keyed_count_exact(&o, EVENTS, KEYS);
    let (unaligned, records) = unaligned_summary(&run.stdout)
        .unwrap_or_else(|| panic!("no unaligned summary line\n{}", run.describe()));
    assert!(
        unaligned > 0 && records > 0,
        "no checkpoint saved records in flight\n{}",
        run.describe()
    );
}

/// 4 SIGKILLs under backpressure with unaligned checkpoints, then `--restore latest`:
/// exact counts, resumed from a checkpoint, channel state saved.
#[test]
fn sigkill_loop_unaligned_under_backpressure_counts_exactly() {
    sigkill_loop(&[], 0x5eed_0a11, true);
}

/// The same with `--aligned-checkpoint-timeout`: checkpoints start aligned and switch.
#[test]
fn sigkill_loop_with_aligned_timeout_counts_exactly() {
    sigkill_loop(
        &["--aligned-checkpoint-timeout", "20ms"],
        0x5eed_0a12,
        false,
    );
}

/// `weir checkpoints inspect CHK` as text.
fn run_text(tmp: &Path, chk: &Path) -> String {
    let run = run(&mut weir(tmp, ["checkpoints", "inspect", &s(chk)]));
    run.assert_success();
    run.stdout
}

/// The environment variable that makes this test binary the three-stage job: its value is
/// the job's arguments, separated by ASCII unit separators.
const CHILD: &str = "WEIR_UNALIGNED_TEST_JOB";

/// The three-stage job's own flags (the runner's come beside them).
#[derive(clap::Args)]
struct ThreeStages {
    /// Events to generate.
    #[arg(long)]
    events: u64,
    /// Distinct keys (event i has key i % keys).
    #[arg(long)]
    keys: u64,
    /// Events per second of the generator.
    #[arg(long)]
    rate: f64,
    /// Events per second the counting stage takes, over its subtasks.
    #[arg(long)]
    count_rate: f64,
    /// Folder for the `key,count` lines, published on success.
    #[arg(long)]
    output: std::path::PathBuf,
}

/// generator → rebalance → a middle map → `key_by` → the slow count → text files: three
/// tasks per subtask. Under backpressure the middle task spends its time blocked sending
/// into the count's full channels, so that is where the barriers find it.
fn build_three_stages(job: &mut Job, a: &ThreeStages) -> Result<(), BoxError> {
    let (keys, p) = (a.keys, job.config().parallelism);
    let out = job.output(&a.output)?;
    let line = |r: &(u64, u64), l: &mut String| l.push_str(&format!("{},{}", r.0, r.1));
    job.add_source(
        "events",
        GeneratorSource::new(a.events).with_rate(Some(a.rate)),
    )
    .uid("events")
    .rebalance()
    .map(|i: u64| i)
    .uid("middle")
    .key_by(move |i: &u64| i % keys)
    .process(slow_count::SlowCount::new(a.count_rate, p))
    .uid("count")
    .add_sink("output", TextFileSink::new(out, line))
    .uid("output");
    Ok(())
}

/// Not a test (ignored, so a normal run neither runs nor counts it): the three-stage job's
/// `main` when the binary is re-executed with [`CHILD`] set.
#[test]
#[ignore = "the job's process, run by the other tests in a child"]
fn job_process() {
    if let Some(args) = child_job::args(CHILD) {
        child_job::exit(
            Runner::new("three-stages")
                .args(args)
                .run(build_three_stages),
        );
    }
}

/// The three-stage job at parallelism 2 with checkpoints in `d`, output in `o`, `extra`
/// flags, resumed from the newest checkpoint with `restore`.
fn three_stages(tmp: &Path, d: &Path, o: &Path, extra: &[&str], restore: bool) -> Command {
    let (events, keys, d, o) = (
        EVENTS.to_string(),
        KEYS.to_string(),
        checkpoint_arg(d),
        s(o),
    );
    let mut args = vec![
        "--events",
        &events,
        "--keys",
        &keys,
        "--rate",
        RATE,
        "--count-rate",
        SINK_RATE,
        "--output",
        &o,
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "100ms",
        "--checkpoint-dir",
        &d,
        "--restart-delay",
        "10ms",
        "--unaligned",
    ];
    args.extend_from_slice(extra);
    if restore {
        args.extend(["--restore", "latest"]);
    }
    child_job::command(CHILD, "three-stages", tmp, &args)
}

/// Kills the three-stage job at seeded-random moments, resumes it to the end and checks:
/// exact counts, resumed from a checkpoint (not from the start), and that checkpoint saved
/// records in flight as channel state (so the counts come out exact only if the restore
/// replayed them, once).
fn three_stages_sigkill_loop(extra: &[&str], seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    kill_loop_command(
        tmp.path(),
        &d.join("three-stages"),
        (4, (300, 900)),
        seed,
        |restore| three_stages(tmp.path(), &d, &o, extra, restore),
        |i| assert!(!o.exists(), "killed run {i} left a partial output"),
    );
    let run = run(&mut three_stages(tmp.path(), &d, &o, extra, true));
    run.assert_success();
    assert_resumed(&run, EVENTS);
    assert_keyed_count_exact(&o, EVENTS, KEYS);
    let chk = restored_from(&run.stdout).expect("checked by assert_resumed");
    let args = ["checkpoints", "inspect", &s(&chk), "--format", "json"];
    let inspect = common::run(&mut weir(tmp.path(), args));
    inspect.assert_success();
    let v: serde_json::Value = serde_json::from_str(&inspect.stdout).unwrap();
    let in_flight = |uid: &str| -> u64 {
        let channels = v["channel_state"].as_array().unwrap();
        channels
            .iter()
            .filter(|c| c["uid"] == uid)
            .map(|c| c["in_flight_bytes"].as_u64().unwrap())
            .sum()
    };
    // Unaligned from the start, both the middle task's input (the generator's records it
    // had not taken) and the count's (what the blocked middle task had sent or could not
    // send) are saved; with the timeout, a task whose barriers aligned within it saves none.
    let saved = if extra.is_empty() {
        in_flight("middle") > 0 && in_flight("count") > 0
    } else {
        in_flight("middle") + in_flight("count") > 0
    };
    assert!(
        v["unaligned"] == true && saved,
        "the run resumed from {}, which lacks records in flight of the middle task or the \
         count\n{}\n{}",
        chk.display(),
        inspect.stdout,
        run.describe()
    );
}

/// 4 SIGKILLs of the three-stage job under backpressure with unaligned checkpoints, then
/// `--restore latest`: exact counts, resumed from a checkpoint holding channel state.
#[test]
fn three_stages_sigkill_loop_unaligned_counts_exactly() {
    three_stages_sigkill_loop(&[], 0x5eed_0a13);
}

/// The same with `--aligned-checkpoint-timeout`: checkpoints start aligned and switch.
#[test]
fn three_stages_sigkill_loop_with_aligned_timeout_counts_exactly() {
    three_stages_sigkill_loop(&["--aligned-checkpoint-timeout", "20ms"], 0x5eed_0a14);
}
