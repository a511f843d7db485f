//! `weir run window-sum`: workload W2 of issue 12, a tumbling-window sum per key in event
//! time, run by the same [`weir::runner::Runner`] as every built-in job (all of
//! keyed-count's operational flags: checkpoints, restore, restarts, failure injection).
//!
//! ```text
//! weir run window-sum --events 100000000 --keys 100000 --parallelism 2 --discard-output
//! weir run window-sum --events 1000000 --keys 1000 --output w2-out --verify
//! ```
//!
//! Event `i` in `0..N` has key `i % K`, value `i` and event time `⌊i × 1000 / tps⌋` ms
//! (`--tps` events per second of event time, default 10 M as in Nexmark); the generator's
//! subtask `s` of `p` emits `s, s+p, …`, so each split's timestamps are monotonous and the
//! watermark follows them (`for_monotonous_timestamps`). The job sums the values of each
//! key in tumbling windows of `--window-ms` (default 1 s) and writes one `window_end,key,sum`
//! line per key and window, exactly once (a two-phase-commit file sink). `--verify` recomputes every sum with a plain loop over
//! `0..N` (nothing shared with the engine's windows) and compares the published lines.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use clap::Args;
use weir::connectors::files::Encoder;
use weir::prelude::*;
use weir::runner::{BoxError, Job, UsageError, Verdict};

use crate::builtin::OutputArgs;

/// The flags of `weir run window-sum` besides the runner's.
#[derive(Args, Debug)]
pub struct WindowSumArgs {
    /// Number of events (0..N).
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Number of distinct keys (event i has key i % K).
    #[arg(long, default_value_t = 100_000, value_parser = positive_u64)]
    keys: u64,
    /// Events per second of event time: event i happens at ⌊i × 1000 / tps⌋ ms.
    #[arg(long, default_value_t = 10_000_000, value_parser = positive_u64)]
    tps: u64,
    /// Limit the generator to about this many events per second in total (wall clock;
    /// event time still follows --tps).
    #[arg(long, value_parser = crate::builtin::parse_rate)]
    rate: Option<f64>,
    /// The tumbling window's size in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = positive_u64)]
    window_ms: u64,
    /// Recompute every window's sum with a plain loop and compare it with the published
    /// --output; exit 3 on a difference.
    #[arg(long)]
    verify: bool,
    #[command(flatten)]
    out: OutputArgs,
}

fn positive_u64(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number of 1 or more")),
    }
}

/// The event time of event `i` at `tps` events per second of event time, in ms.
fn timestamp(i: u64, tps: u64) -> u64 {
    // In 64 bits unless `i × 1000` overflows (a 128-bit division is a library call).
    match i.checked_mul(1000) {
        Some(ms) => ms / tps,
        None => (i as u128 * 1000 / tps as u128) as u64,
    }
}

/// Builds `weir run window-sum` into `job` from its flags.
pub fn build(job: &mut Job, args: &WindowSumArgs) -> Result<(), BoxError> {
    if args.verify && args.out.discard_output {
        return Err(UsageError::new(
            "--verify compares the lines written to --output with a plain computation: drop \
             --discard-output",
        )
        .into());
    }
    let (keys, tps) = (args.keys, args.tps);
    let window = TumblingEventTimeWindows::of(Duration::from_millis(args.window_ms))
        .map_err(|e| UsageError::new(format!("--window-ms: {e}")))?;
    // The source and the window count every record.
    job.expect_records(args.events.saturating_mul(2));
    let sums = job
        .add_source(
            "generator",
            GeneratorSource::new(args.events).with_rate(args.rate),
        )
        .uid("generator")
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_monotonous_timestamps()
                .with_timestamp_assigner(move |i: &u64, _| timestamp(*i, tps)),
        )
        .key_by(move |i: &u64| i % keys)
        .window(window)
        .reduce_with_window(
            |a: u64, b: u64| a.wrapping_add(b),
            |k: &u64, w: TimeWindow, sum: u64| (w.end, *k, sum),
        )
        .name("window-sum")
        .uid("window-sum");
    if args.out.discard_output {
        sums.add_sink("discard", DiscardSink).uid("discard");
        return Ok(());
    }
    // Windows fire all through the run: their lines go out exactly once through the
    // two-phase-commit file sink (committed with each checkpoint), not a plain text sink.
    let dir = job.output(&args.out.output)?;
    sums.add_sink("output", TwoPhaseCommit::new(FileSink::new(dir, SumLines)))
        .uid("output");
    if args.verify {
        let (events, window_ms, out) = (args.events, args.window_ms, args.out.output.clone());
        job.verify(move |_| {
            let got = read_sums(&out)?;
            Ok(match compare(&got, &truth(events, keys, tps, window_ms)) {
                Ok(m) => Verdict::Correct(m),
                Err(m) => Verdict::Wrong(m),
            })
        });
    }
    Ok(())
}

/// Encodes a window's result as its `window_end,key,sum` line.
#[derive(Clone, Default)]
struct SumLines;

impl Encoder<(u64, u64, u64)> for SumLines {
    fn encode(&mut self, r: &(u64, u64, u64), out: &mut Vec<u8>) -> weir::Result<()> {
        use std::io::Write;
        let _ = writeln!(out, "{},{},{}", r.0, r.1, r.2);
        Ok(())
    }
}

/// `(window end, key) → sum` over events `0..n`: the plain computation `--verify` trusts.
fn truth(n: u64, keys: u64, tps: u64, window_ms: u64) -> HashMap<(u64, u64), u64> {
    let mut sums = HashMap::new();
    for i in 0..n {
        let end = (timestamp(i, tps) / window_ms + 1) * window_ms;
        let sum: &mut u64 = sums.entry((end, i % keys)).or_default();
        *sum = sum.wrapping_add(i);
    }
    sums
}

/// The `window_end,key,sum` lines of the part files in `dir`; a line that does not parse,
/// or a (window, key) written twice, is an error naming the file and the line.
fn read_sums(dir: &Path) -> Result<HashMap<(u64, u64), u64>, BoxError> {
    let mut sums = HashMap::new();
    for f in crate::output::part_files(dir)? {
        let text =
            std::fs::read_to_string(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        for (i, line) in text.lines().enumerate() {
            let at = || format!("{}:{}", f.display(), i + 1);
            let fields: Vec<Option<u64>> = line.split(',').map(|x| x.parse().ok()).collect();
            let [Some(end), Some(key), Some(sum)] = fields[..] else {
                return Err(format!("{}: {line:?} is not `window_end,key,sum`", at()).into());
            };
            if sums.insert((end, key), sum).is_some() {
                return Err(format!("{}: window {end} of key {key} written twice", at()).into());
            }
        }
    }
    Ok(sums)
}

/// `Ok(summary)` when `got` is exactly `want`, else the first differences.
fn compare(
    got: &HashMap<(u64, u64), u64>,
    want: &HashMap<(u64, u64), u64>,
) -> Result<String, String> {
    let mut problems = Vec::new();
    let mut wrong = 0usize;
    for (k, w) in want {
        match got.get(k) {
            Some(g) if g == w => {}
            g => {
                wrong += 1;
                if problems.len() < 3 {
                    problems.push(format!(
                        "window ending {} of key {}: expected {w}, got {}",
                        k.0,
                        k.1,
                        g.map_or("nothing".into(), |g| g.to_string())
                    ));
                }
            }
        }
    }
    let extra = got.keys().filter(|k| !want.contains_key(k)).count();
    if wrong == 0 && extra == 0 {
        return Ok(format!("{} window sums, every one exact", want.len()));
    }
    Err(format!(
        "{wrong} window sums wrong or missing, {extra} not expected; {}",
        problems.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truth_by_hand() {
        // 6 events at 4 per second of event time (0, 250, 500, 750, 1000, 1250 ms) over 2
        // keys in 1 s windows: [0, 1000) holds events 0..4, [1000, 2000) events 4 and 5.
        let t = truth(6, 2, 4, 1000);
        let want: HashMap<(u64, u64), u64> = [
            ((1000, 0), 2),
            ((1000, 1), 1 + 3),
            ((2000, 0), 4),
            ((2000, 1), 5),
        ]
        .into();
        assert_eq!(t, want);
        assert!(compare(&want, &t).is_ok());
        let mut off = want.clone();
        off.insert((1000, 0), 3);
        off.insert((3000, 0), 1);
        let e = compare(&off, &t).unwrap_err();
        assert!(
            e.contains("1 window sums wrong or missing, 1 not expected"),
            "{e}"
        );
        assert!(
            e.contains("window ending 1000 of key 0: expected 2, got 3"),
            "{e}"
        );
    }

    #[test]
    fn bad_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("part-0"), "1000,0,2\n1000;1,4\n").unwrap();
        let e = read_sums(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("part-0:2") && e.contains("not `window_end,key,sum`"),
            "{e}"
        );
        std::fs::write(dir.path().join("part-0"), "1000,0,2\n1000,0,2\n").unwrap();
        let e = read_sums(dir.path()).unwrap_err().to_string();
        assert!(e.contains("written twice"), "{e}");
    }
}
