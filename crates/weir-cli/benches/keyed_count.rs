//! The issue-6 benchmark: workload W1 and its checkpointing, recovery and memory rows,
//! printed as one table of runs plus the issue's targets.
//!
//! ```text
//! cargo bench -p weir-cli --bench keyed_count                  # the issue's sizes, 3 runs
//! cargo bench -p weir-cli --bench keyed_count -- --quick       # small sizes in release (CI runs the smoke sizes: `cargo test --bench NAME`)
//! cargo bench -p weir-cli --bench keyed_count -- --runs 5 --only W1
//! cargo bench -p weir-cli --bench keyed_count -- --events 200000000 --scramble-keys
//! cargo bench -p weir-cli --bench keyed_count -- --ab OTHER_BENCH_BINARY --runs 5 --rows floor,p2-eo
//! ```
//!
//! `--ab OTHER`: an interleaved A/B of another build of this bench (A, e.g. built from an
//! older commit) against this one (B): per round and row, the two children run back to
//! back, A first in odd rounds; medians and the median of per-round ratios. `--ab-b B`
//! takes B from another build too (this binary then only drives). The other builds must
//! know the rows picked (`--only`) by id and print the same `RESULT` line (any build of
//! this bench since issue 6 does).
//!
//! W1: event `i` in `0..N` has key `i % K` (`--scramble-keys`: a fixed permutation of it),
//! source subtask `s` of `p` emits `s, s+p, …`; a keyed process function counts in value
//! state and emits `(key, count)` for every event into a discarding sink. Every run is
//! checked against the exact counts and panics on a mismatch, so a wrong result never
//! reaches the table.
//!
//! The one-failure rows and the large-state recovery row also prove the recovery: the
//! injected failure fired (only after a checkpoint completed), the restart restored a
//! checkpoint of this run at a source position past 0, and the last attempt read only the
//! rest of the input (`JobResult::history`, `weir::testing::assert_resumed`); a run that
//! started over fails loudly. Each one-failure row has a clean reference row (same N, same
//! interval, the same failure plan that never fires): time lost to the failure is the
//! median over rounds of the two walls' difference, measured; the downtime + replay model
//! is printed beside it, labelled as an estimate.
//!
//! Each run of each row is a child process (this binary re-run with `--child ROW`), so
//! every row's peak memory (`VmHWM`) is its own and rows do not warm each other's caches
//! or allocator. Runs go round-robin over the rows, so a burst of outside load spreads
//! over all rows; ratios between rows are medians of per-round ratios.
//!
//! Without `--bench` on the command line (under `cargo test --all-targets`, which runs
//! bench targets once as tests) it runs every row once at tiny sizes and ignores unknown
//! flags.

#[path = "keyed_count/keying.rs"]
mod keying;
#[path = "keyed_count/measure.rs"]
mod measure;
#[path = "keyed_count/report.rs"]
mod report;
#[path = "keyed_count/rows.rs"]
mod rows;
#[path = "keyed_count/workload.rs"]
mod workload;

#[path = "shared/quiet_panics.rs"]
mod quiet_panics;

use std::process::Command;
use std::time::{Duration, Instant};

use keying::Keying;
use measure::{bytes, clock_ticks, count, load_average, median, rate};
use rows::{rows, sizes, Kind, Row};
use workload::{run_floor, run_recovery, run_w1, Due, Outcome, INJECTED};

/// Command-line settings of one bench invocation.
struct Opts {
    /// `full`, `quick` or `smoke`.
    preset: String,
    events: Option<u64>,
    keys: Option<u64>,
    runs: Option<usize>,
    only: Option<String>,
    /// `--rows ID,ID…`: exactly these rows (by id, as `--child` takes them).
    ids: Option<Vec<String>>,
    scramble: bool,
    /// Set in a child: the row to run once.
    child: Option<String>,
    /// `--ab BENCH`: interleaved A/B of another build of this bench (A) against this one
    /// (B), row by row.
    ab: Option<String>,
    /// `--ab-b BENCH`: B is this build instead of the running one (to compare two other
    /// builds, e.g. two past commits, with this binary only driving).
    ab_b: Option<String>,
}

fn usage() {
    eprintln!(
        "usage: cargo bench -p weir-cli --bench keyed_count -- \
         [--quick] [--events N] [--keys K] [--runs R] [--only TEXT] [--rows ID,ID...] \
         [--scramble-keys] \
         [--ab OTHER_BENCH_BINARY [--ab-b BENCH_BINARY]]"
    );
}

/// Parses a numeric flag value or exits with status 2.
fn number<T: std::str::FromStr>(flag: &str, value: Option<String>) -> T {
    match value.map(|v| v.replace('_', "").parse()) {
        Some(Ok(n)) => n,
        _ => {
            eprintln!("keyed_count: {flag} needs a number");
            usage();
            std::process::exit(2);
        }
    }
}

/// Reads the flags. `cargo bench` passes `--bench`; without it this is a `cargo test` run.
fn parse_args() -> Opts {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench_mode = args.iter().any(|a| a == "--bench");
    let mut o = Opts {
        preset: if bench_mode { "full" } else { "smoke" }.into(),
        events: None,
        keys: None,
        runs: None,
        only: None,
        ids: None,
        scramble: false,
        child: None,
        ab: None,
        ab_b: None,
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--events" => o.events = Some(number("--events", it.next())),
            "--keys" => o.keys = Some(number("--keys", it.next())),
            "--runs" => o.runs = Some(number("--runs", it.next())),
            "--quick" if bench_mode => o.preset = "quick".into(),
            "--only" => o.only = it.next(),
            "--rows" => {
                o.ids = it
                    .next()
                    .map(|v| v.split(',').map(|x| x.trim().to_string()).collect())
            }
            "--scramble-keys" => o.scramble = true,
            "--preset" => o.preset = it.next().unwrap_or_default(),
            "--child" => o.child = it.next(),
            "--ab" => o.ab = it.next(),
            "--ab-b" => o.ab_b = it.next(),
            "--bench" => {}
            "-h" | "--help" => {
                usage();
                std::process::exit(0);
            }
            other if bench_mode => {
                eprintln!("keyed_count: unknown argument '{other}'");
                usage();
                std::process::exit(2);
            }
            _ => {} // libtest flags passed by `cargo test -- …`
        }
    }
    if o.keys == Some(0) || o.runs == Some(0) {
        eprintln!("keyed_count: --keys and --runs must be at least 1");
        std::process::exit(2);
    }
    o
}

/// In a child: runs row `id` once and prints its [`Outcome`] line.
fn child(o: &Opts, id: &str) {
    // The bench's own injected failures are expected: keep their panics quiet.
    quiet_panics::quiet_injected_panics(INJECTED);
    let s = sizes(&o.preset);
    let row = rows(&s, o.events, o.keys)
        .into_iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("no row '{id}'"));
    let ticks = clock_ticks();
    let keying = Keying::new(row.keys, o.scramble);
    let (n, label) = (row.events, row.label.as_str());
    let outcome = match row.kind {
        Kind::Floor => run_floor(label, n, keying, ticks),
        Kind::W1 { p, mode, fail } => {
            // A failure `fail_after_ms` into the run, or 60 % into subtask 0's share of the
            // input if that comes first.
            let due = Due {
                records: n / u64::from(p) * 3 / 5,
                after: Duration::from_millis(s.fail_after_ms),
            };
            run_w1(label, p, mode, n, keying, fail, due, ticks)
        }
        Kind::Recovery {
            value_bytes,
            rate,
            seconds,
        } => run_recovery(label, row.keys, value_bytes, rate, seconds, ticks),
    };
    println!("{}", outcome.to_line());
}

/// Runs row `r` once in a child process of this binary and returns what it measured.
fn run_child(o: &Opts, r: &Row) -> Outcome {
    let exe = std::env::current_exe().expect("the bench binary's path");
    run_child_of(&exe, o, r)
}

/// Runs row `r` once as a child of the bench binary `exe` (this one, or the other side of
/// an A/B) and returns what it measured.
fn run_child_of(exe: &std::path::Path, o: &Opts, r: &Row) -> Outcome {
    let mut cmd = Command::new(exe);
    cmd.args(["--bench", "--preset", &o.preset, "--child", r.id]);
    if let Some(n) = o.events {
        cmd.args(["--events", &n.to_string()]);
    }
    if let Some(k) = o.keys {
        cmd.args(["--keys", &k.to_string()]);
    }
    if o.scramble {
        cmd.arg("--scramble-keys");
    }
    let out = cmd.output().expect("run the bench binary as a child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let parsed = stdout.lines().rev().find_map(Outcome::parse);
    match parsed {
        Some(outcome) if out.status.success() => outcome,
        _ => {
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
            panic!(
                "{}: the child run of {} failed ({})",
                r.label,
                exe.display(),
                out.status
            );
        }
    }
}

fn main() {
    let o = parse_args();
    if let Some(id) = o.child.clone() {
        child(&o, &id);
        return;
    }
    let s = sizes(&o.preset);
    let runs = o.runs.unwrap_or(s.runs);
    let mut rows = rows(&s, o.events, o.keys);
    if let Some(only) = &o.only {
        rows.retain(|r| r.id == "floor" || r.label.contains(only.as_str()));
    }
    if let Some(ids) = &o.ids {
        if let Some(bad) = ids.iter().find(|id| !rows.iter().any(|r| &r.id == id)) {
            eprintln!("keyed_count: no row '{bad}' (or filtered out by --only)");
            std::process::exit(2);
        }
        rows.retain(|r| ids.contains(&r.id.to_string()));
    }
    if let Some(other) = o.ab.clone() {
        ab(&o, std::path::Path::new(&other), &mut rows, runs);
        return;
    }
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    println!(
        "keyed_count bench ({}): N = {}, K = {}{}; {runs} runs per row, each in a child process; \
         {cores} cores, load average {} at start",
        s.name,
        count(rows[0].events as f64),
        count(rows[0].keys as f64),
        if o.scramble { ", keys scrambled" } else { "" },
        load_average()
    );
    let started = Instant::now();
    for run in 1..=runs {
        // Odd rounds go down the rows, even rounds up: no row always runs right after
        // the same neighbour, and the two rows of a pair swap order every round.
        let order: Vec<usize> = if run % 2 == 1 {
            (0..rows.len()).collect()
        } else {
            (0..rows.len()).rev().collect()
        };
        for i in order {
            let r = &mut rows[i];
            let outcome = run_child(&o, r);
            let restored = outcome.restored.map_or(String::new(), |x| {
                format!(
                    "  restored chk-{} at {} records, then read {}",
                    x.id, x.position, x.read
                )
            });
            eprintln!(
                "run {run}/{runs}: {:<45} K={:<5} {:>9} events/s  {:.2} s  {} checkpoints  \
                 others' CPU {:.2} cores  load {}{restored}",
                r.label,
                count(r.keys as f64),
                rate(r.events as f64 / outcome.wall),
                outcome.wall,
                outcome.checkpoints.len(),
                outcome.others.unwrap_or(0.0) / outcome.wall,
                load_average(),
            );
            r.samples.push(outcome);
        }
    }
    println!();
    report::print_runs(&rows);
    println!();
    report::print_targets(&rows);
    println!();
    println!(
        "÷ floor: median over rounds of the row's rate ÷ the floor's (same K) in that round. \
         ckpts: median per run (the job's final checkpoint included); mean/p99 ckpt: trigger \
         to metadata over every checkpoint of every run; peak mem: median VmHWM of the child; \
         downtime: failure → first record after the restart; time lost: per round, wall \
         of the one-failure row − wall of its no-failure reference, median over rounds (the \
         estimate beside it is a model); events/CPU-s: getrusage user + system time of the \
         child; others' CPU: cores kept busy by other processes in the row's worst run."
    );
    println!(
        "all counts exact; {:.1} s in total; load average {} at end",
        started.elapsed().as_secs_f64(),
        load_average()
    );
}

/// `--ab OTHER`: for each round, for each row, runs the row's child of `other` (A) and of
/// this binary (B; or of `--ab-b`) back to back, A first in odd rounds and B first in even ones; prints
/// every run, then per row the medians and the median of the per-round B ÷ A ratios. Both
/// binaries must know the rows (`--only` picks them) and print the same `RESULT` line.
fn ab(o: &Opts, other: &std::path::Path, rows: &mut [Row], runs: usize) {
    let this = match &o.ab_b {
        Some(b) => std::path::PathBuf::from(b),
        None => std::env::current_exe().expect("the bench binary's path"),
    };
    let s = sizes(&o.preset);
    println!(
        "keyed_count A/B ({}): A = {}, B = {}; {runs} rounds, each row's child of A and of B \
         back to back (A first in odd rounds); load average {} at start",
        s.name,
        other.display(),
        this.display(),
        load_average()
    );
    let started = Instant::now();
    let mut a_samples: Vec<Vec<Outcome>> = rows.iter().map(|_| Vec::new()).collect();
    for run in 1..=runs {
        for (i, r) in rows.iter_mut().enumerate() {
            let sides: [(&str, &std::path::Path); 2] = if run % 2 == 1 {
                [("A", other), ("B", &this)]
            } else {
                [("B", &this), ("A", other)]
            };
            for (side, exe) in sides {
                let outcome = run_child_of(exe, o, r);
                eprintln!(
                    "round {run}/{runs} {side}: {:<45} {:>9} events/s  {:.2} s  load {}",
                    r.label,
                    rate(r.events as f64 / outcome.wall),
                    outcome.wall,
                    load_average(),
                );
                if side == "A" {
                    a_samples[i].push(outcome);
                } else {
                    r.samples.push(outcome);
                }
            }
        }
    }
    println!();
    println!(
        "| row | N | K | A events/s | B events/s | B ÷ A (median of rounds) | per-round B ÷ A | \
         A events/CPU-s | B events/CPU-s | A peak mem | B peak mem |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|");
    for (r, a) in rows.iter().zip(&a_samples) {
        let eps = |v: &[Outcome]| median(v.iter().map(|x| r.events as f64 / x.wall).collect());
        let epc = |v: &[Outcome]| {
            median(
                v.iter()
                    .filter_map(|x| x.cpu.filter(|c| *c > 0.0))
                    .map(|c| r.events as f64 / c)
                    .collect(),
            )
        };
        let peak =
            |v: &[Outcome]| median(v.iter().filter_map(|x| x.peak.map(|p| p as f64)).collect());
        let ratios: Vec<f64> = a
            .iter()
            .zip(&r.samples)
            .map(|(x, y)| x.wall / y.wall)
            .collect();
        let list: Vec<String> = ratios.iter().map(|x| format!("{x:.2}")).collect();
        let show = |x: Option<f64>, f: fn(f64) -> String| x.map_or("-".into(), f);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.label,
            count(r.events as f64),
            count(r.keys as f64),
            show(eps(a), rate),
            show(eps(&r.samples), rate),
            show(median(ratios), |x| format!("×{x:.2}")),
            list.join(", "),
            show(epc(a), rate),
            show(epc(&r.samples), rate),
            show(peak(a), bytes),
            show(peak(&r.samples), bytes),
        );
    }
    println!();
    println!(
        "B ÷ A: events/s of B ÷ events/s of A in the same round (= A's wall ÷ B's wall); \
         {:.1} s in total; load average {} at end",
        started.elapsed().as_secs_f64(),
        load_average()
    );
}
