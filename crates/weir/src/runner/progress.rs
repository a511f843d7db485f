//! The live progress line (on a terminal only) and the end-of-run summary.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::prelude::{AttemptSummary, JobConfig, JobResult};
use crate::runtime::coordinator::executor::JobMetrics;

/// A background thread that prints the job's notices as they happen (always) and redraws
/// one status line every half second (only when stderr is a terminal).
pub(crate) struct Progress {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

/// Prints pending notices, clearing the status line first on a terminal.
fn print_notices(metrics: &JobMetrics, tty: bool) {
    for n in metrics.take_notices() {
        if tty {
            eprint!("\r\x1b[2K");
        }
        eprintln!("weir: {n}");
    }
}

impl Progress {
    /// Starts the reporting thread.
    pub(crate) fn start(metrics: Arc<JobMetrics>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tty = std::io::stderr().is_terminal();
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let start = Instant::now();
            let (mut last, mut last_t) = (0u64, Instant::now());
            let mut next_line = Instant::now() + Duration::from_millis(500);
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                print_notices(&metrics, tty);
                let now = Instant::now();
                if !tty || now < next_line {
                    continue;
                }
                next_line = now + Duration::from_millis(500);
                let rec = metrics.source_records.load(Ordering::Relaxed);
                let rate = (rec - last.min(rec)) as f64 / (now - last_t).as_secs_f64();
                (last, last_t) = (rec, now);
                eprint!(
                    "\r\x1b[2K{:>6.1}s  {:>8} events/s  {:>10} events  checkpoints {} (last {} ms)  restarts {}",
                    start.elapsed().as_secs_f64(),
                    human(rate),
                    human(rec as f64),
                    metrics.checkpoints_completed.load(Ordering::Relaxed),
                    metrics.last_checkpoint_micros.load(Ordering::Relaxed) / 1000,
                    metrics.restarts.load(Ordering::Relaxed),
                );
            }
            if tty {
                eprint!("\r\x1b[2K");
            }
            print_notices(&metrics, tty);
        });
        Progress {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the thread after it printed every remaining notice, and clears the line.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn human(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.2}G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Prints the end-of-run summary on stdout. It reports what the sources actually read in
/// this run (replays after restarts included) and, apart from it, what a restore let them
/// skip, so a resumed run can be told from one that started over: events/s counts only
/// what was read.
pub(crate) fn summary(label: &str, cfg: &JobConfig, r: &JobResult, outputs: &[PathBuf]) {
    let secs = r.duration.as_secs_f64().max(1e-9);
    let read = r.source_records;
    let mut notes = Vec::new();
    let again = records_read_again(r);
    if again > 0 {
        notes.push(format!("{again} of them again after restarts"));
    }
    let restored = r.records_restored();
    if restored > 0 {
        notes.push(format!("{restored} restored from the checkpoint instead"));
    }
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    };
    println!(
        "{label}: finished in {secs:.2} s — {read} records read{notes}, {} records/s, \
         parallelism {}, {}",
        human(read as f64 / secs),
        cfg.parallelism,
        cfg.checkpointing.mode
    );
    let mut durations: Vec<Duration> = r.checkpoints.iter().map(|c| c.duration).collect();
    durations.sort();
    if durations.is_empty() {
        println!(
            "checkpoints: none completed, {} failed",
            r.failed_checkpoints
        );
    } else {
        let median = durations[durations.len() / 2];
        let max = durations[durations.len() - 1];
        let sync = r
            .checkpoints
            .iter()
            .map(|c| c.max_sync)
            .max()
            .unwrap_or_default();
        let align = r
            .checkpoints
            .iter()
            .map(|c| c.max_alignment)
            .max()
            .unwrap_or_default();
        let last = r.checkpoints.last().map(|c| c.bytes).unwrap_or(0);
        println!(
            "checkpoints: {} completed, {} failed; duration median {}, max {}; max sync pause {}; max alignment {}; last size {} bytes",
            durations.len(),
            r.failed_checkpoints,
            ms(median),
            ms(max),
            ms(sync),
            ms(align),
            last
        );
        if cfg.checkpointing.unaligned {
            println!("{}", unaligned_line(&r.checkpoints));
        }
    }
    let injected = match r.injected_failures {
        Some((fired, planned)) if fired < planned => format!(
            " (injected failures: {fired} of {planned}; the input ended before the other {} \
             could follow a checkpoint)",
            planned - fired
        ),
        Some((fired, planned)) => format!(" (injected failures: {fired} of {planned})"),
        None => String::new(),
    };
    println!("restarts: {}{injected}", r.attempts.saturating_sub(1));
    for line in attempt_lines(r) {
        println!("  {line}");
    }
    for o in outputs {
        println!("output: {}", o.display());
    }
}

/// Records the sources read a second time: for each restart, what the failed attempt had
/// read past the position the restart rewound to.
fn records_read_again(r: &JobResult) -> u64 {
    let start = |a: &AttemptSummary| a.restored.as_ref().map_or(0, |x| x.source_records);
    r.history
        .windows(2)
        .map(|w| (start(&w[0]) + w[0].source_records).saturating_sub(start(&w[1])))
        .sum()
}

/// One line per attempt, when there was more than one or the run restored a checkpoint:
/// where its sources started (the checkpoint's id, path and position, or the beginning),
/// what they read, and whether it failed. Empty for a single fresh attempt.
fn attempt_lines(r: &JobResult) -> Vec<String> {
    if r.history.len() < 2 && r.history.iter().all(|a| a.restored.is_none()) {
        return Vec::new();
    }
    r.history
        .iter()
        .map(|a| {
            let from = match &a.restored {
                Some(x) => format!(
                    "from checkpoint {} at source record {}",
                    x.checkpoint_id, x.source_records
                ),
                None => "from the start".to_string(),
            };
            let failed = if a.failure.is_some() { ", failed" } else { "" };
            let path = match &a.restored {
                Some(x) => format!(" — {}", x.path.display()),
                None => String::new(),
            };
            format!(
                "attempt {}: {from}, read {}{failed}{path}",
                a.attempt, a.source_records
            )
        })
        .collect()
}

/// The summary line of an unaligned run: how many checkpoints were taken unaligned (by at
/// least one task; the rest aligned, e.g. within `--aligned-checkpoint-timeout`) and the
/// records and bytes in flight they saved.
fn unaligned_line(checkpoints: &[crate::api::execution::CompletedCheckpointStats]) -> String {
    let unaligned: Vec<_> = checkpoints
        .iter()
        .filter(|c| c.unaligned_tasks > 0)
        .collect();
    let records: u64 = unaligned.iter().map(|c| c.in_flight_records).sum();
    let max_bytes = unaligned
        .iter()
        .map(|c| c.in_flight_bytes)
        .max()
        .unwrap_or(0);
    format!(
        "unaligned checkpoints: {} of {} (the rest aligned); in flight saved: {records} records, at most {max_bytes} bytes in one checkpoint",
        unaligned.len(),
        checkpoints.len()
    )
}
