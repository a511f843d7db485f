//! Unaligned checkpoints from the command line (issue 13): a keyed count whose counting
//! stage runs at a tenth of the generator's rate (`--sink-rate`), SIGKILLed at
//! seeded-random moments and resumed with `--restore latest`, counts exactly; the run
//! summary says how many checkpoints were unaligned and what they saved in flight.

mod common;

use std::path::Path;

use common::*;

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
