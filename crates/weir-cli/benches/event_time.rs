//! The issue-12 benchmarks: W2 (a 1 s tumbling-window sum over 100 k keys in event time)
//! and the Nexmark queries, each run as the CLI runs them, printed as one table beside
//! Flink 2.3's numbers from the issue.
//!
//! ```text
//! cargo bench -p weir-cli --bench event_time                  # the issue's sizes, 3 runs
//! cargo bench -p weir-cli --bench event_time -- --quick       # small sizes in release (CI runs the smoke sizes: `cargo test --bench NAME`)
//! cargo bench -p weir-cli --bench event_time -- --runs 5 --only q0
//! cargo bench -p weir-cli --bench event_time -- --events 20000000 --w2-events 200000000
//! ```
//!
//! Every run is a child process of the `weir` binary built with this bench:
//! `weir run window-sum --events N --keys 100000 …` for W2 and `weir run nexmark --query qN
//! --events N --discard-output …` for Nexmark, at parallelism 1 and 2, with exactly-once
//! checkpoints every 1 s into a fresh temporary folder. Wall time is measured around the
//! child; CPU time (user + system) and peak memory (`ru_maxrss`) are the child's own,
//! from `wait4(2)`. Runs go round-robin over the rows, so a burst of outside load spreads
//! over all of them; the table shows medians.
//!
//! The queries are data ([`QUERIES`]): the queries of issue 12 with Flink's column. A query
//! the engine does not run yet (the CLI refuses it with a usage error) is skipped with the
//! CLI's reason as a note, so queries added under the same CLI join the table by
//! themselves.
//!
//! Without `--bench` on the command line (under `cargo test --all-targets`, which runs
//! bench targets once as tests) it runs every row once at tiny sizes.

#[allow(dead_code)] // shared with the keyed_count bench, which uses more of it
#[path = "keyed_count/measure.rs"]
mod measure;

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::Instant;

use measure::{bytes, count, load_average, median, rate};

/// A Nexmark query of the table, with issue 12's Flink 2.3 numbers where it has them.
struct QuerySpec {
    /// The name `--query` takes.
    name: &'static str,
    /// Flink 2.3's events/s (p=1, exactly-once every 1 s, 10 M events), as text.
    flink_eps: &'static str,
    /// Flink 2.3's events per CPU-second, as text.
    flink_epc: &'static str,
    /// The issue's target: events per CPU-second (10× Flink's).
    target_epc: Option<f64>,
    /// Whether the issue asks for this query's peak memory.
    memory: bool,
}

/// The queries of issue 12, in its order; the CLI decides which run today.
const QUERIES: &[QuerySpec] = &[
    q("q0", "494 k", "446 k", Some(4.5e6), false),
    q("q1", "-", "-", None, false),
    q("q2", "-", "-", None, false),
    q("q3", "-", "-", None, false),
    q("q4", "-", "-", None, false),
    q("q5", "262 k", "174 k", Some(1.7e6), true),
    q("q7", "94 k ¹", "50 k", Some(0.5e6), true),
    q("q8", "396 k", "278 k", Some(2.8e6), true),
    q("q11", "-", "-", None, false),
];

const fn q(
    name: &'static str,
    flink_eps: &'static str,
    flink_epc: &'static str,
    target_epc: Option<f64>,
    memory: bool,
) -> QuerySpec {
    QuerySpec {
        name,
        flink_eps,
        flink_epc,
        target_epc,
        memory,
    }
}

/// Sizes of one preset.
struct Sizes {
    name: &'static str,
    nexmark_events: u64,
    w2_events: u64,
    keys: u64,
    runs: usize,
}

fn sizes(preset: &str) -> Sizes {
    match preset {
        "full" => Sizes {
            name: "full",
            nexmark_events: 10_000_000,
            w2_events: 100_000_000,
            keys: 100_000,
            runs: 3,
        },
        "quick" => Sizes {
            name: "quick",
            nexmark_events: 300_000,
            w2_events: 3_000_000,
            keys: 100_000,
            runs: 1,
        },
        _ => Sizes {
            name: "smoke",
            nexmark_events: 20_000,
            w2_events: 100_000,
            keys: 1_000,
            runs: 1,
        },
    }
}

/// What one child run measured.
struct Sample {
    wall: f64,
    cpu: f64,
    peak: u64,
}

/// One row of the table: a workload at one parallelism.
struct Row {
    label: String,
    events: u64,
    parallelism: u32,
    /// `weir run …` arguments besides the parallelism and checkpoint flags.
    args: Vec<String>,
    query: Option<&'static QuerySpec>,
    samples: Vec<Sample>,
    /// Why the row was skipped (the CLI's refusal), if it was.
    skipped: Option<String>,
}

/// Runs `weir run ARGS` once; `Err(reason)` when the CLI refuses it as a usage error (exit
/// 2: a query it does not run yet); panics on any other failure.
fn run_child(row: &Row) -> Result<Sample, String> {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let err_path = dir.path().join("stderr");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.arg("run")
        .args(&row.args)
        .args(["--parallelism", &row.parallelism.to_string()])
        .args(["--mode", "exactly-once", "--checkpoint-interval", "1s"])
        .arg("--checkpoint-dir")
        .arg(dir.path().join("checkpoints"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&err_path).expect("a stderr file"));
    let started = Instant::now();
    // Reaped by `wait4` below, which also gives the child's own CPU time and peak memory.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("start the weir binary");
    let (status, ru) = wait4(child.id() as libc::pid_t);
    let wall = started.elapsed().as_secs_f64();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        return Ok(Sample {
            wall,
            cpu: secs(ru.ru_utime) + secs(ru.ru_stime),
            // Linux reports ru_maxrss in KiB.
            peak: ru.ru_maxrss as u64 * 1024,
        });
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 2 {
        let reason = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let reason = reason.trim();
        return Err(reason.strip_prefix("error: ").unwrap_or(reason).to_string());
    }
    eprint!("{stderr}");
    panic!(
        "{}: `weir run {}` failed (wait status {status})",
        row.label,
        row.args.join(" ")
    );
}

/// Waits for child `pid` and returns its wait status and its own resource usage.
fn wait4(pid: libc::pid_t) -> (i32, libc::rusage) {
    let mut status = 0;
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    loop {
        // SAFETY: wait4 writes the status and the rusage it is pointed at; on success the
        // rusage is initialised (it started zeroed in any case).
        let r = unsafe { libc::wait4(pid, &mut status, 0, ru.as_mut_ptr()) };
        if r == pid {
            // SAFETY: zero-initialised and written by wait4.
            return (status, unsafe { ru.assume_init() });
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            panic!("wait4 on the weir child {pid}: {e}");
        }
    }
}

fn rows(s: &Sizes, only: Option<&str>) -> Vec<Row> {
    let mut rows = Vec::new();
    for p in [1u32, 2] {
        rows.push(Row {
            label: format!("W2 window-sum, K={}, p={p}", count(s.keys as f64)),
            events: s.w2_events,
            parallelism: p,
            args: [
                "window-sum",
                "--events",
                &s.w2_events.to_string(),
                "--keys",
                &s.keys.to_string(),
                "--discard-output",
            ]
            .map(String::from)
            .to_vec(),
            query: None,
            samples: Vec::new(),
            skipped: None,
        });
    }
    for spec in QUERIES {
        for p in [1u32, 2] {
            rows.push(Row {
                label: format!("Nexmark {}, p={p}", spec.name),
                events: s.nexmark_events,
                parallelism: p,
                args: [
                    "nexmark",
                    "--query",
                    spec.name,
                    "--events",
                    &s.nexmark_events.to_string(),
                    "--discard-output",
                ]
                .map(String::from)
                .to_vec(),
                query: Some(spec),
                samples: Vec::new(),
                skipped: None,
            });
        }
    }
    if let Some(only) = only {
        rows.retain(|r| r.label.contains(only));
    }
    rows
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench_mode = args.iter().any(|a| a == "--bench");
    let mut preset = if bench_mode { "full" } else { "smoke" }.to_string();
    let (mut runs, mut only, mut events, mut w2_events) = (None, None, None, None);
    let mut it = args.into_iter();
    let number = |flag: &str, v: Option<String>| -> u64 {
        match v.map(|v| v.replace('_', "").parse::<u64>()) {
            Some(Ok(n)) if n > 0 => n,
            _ => {
                eprintln!("event_time: {flag} needs a number of at least 1");
                std::process::exit(2);
            }
        }
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" if bench_mode => preset = "quick".into(),
            "--runs" => runs = Some(number("--runs", it.next()) as usize),
            "--only" => only = it.next(),
            "--events" => events = Some(number("--events", it.next())),
            "--w2-events" => w2_events = Some(number("--w2-events", it.next())),
            "--bench" => {}
            other if bench_mode => {
                eprintln!(
                    "event_time: unknown argument '{other}'; flags: [--quick] [--runs R] \
                     [--only TEXT] [--events N] [--w2-events N]"
                );
                std::process::exit(2);
            }
            _ => {} // libtest flags passed by `cargo test -- …`
        }
    }
    let mut s = sizes(&preset);
    s.nexmark_events = events.unwrap_or(s.nexmark_events);
    s.w2_events = w2_events.unwrap_or(s.w2_events);
    let runs = runs.unwrap_or(s.runs);
    let mut rows = rows(&s, only.as_deref());
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    println!(
        "event_time bench ({}): W2 N = {}, Nexmark N = {}; exactly-once checkpoints every 1 s; \
         {runs} runs per row, each a `weir run` child; {cores} cores, load average {} at start",
        s.name,
        count(s.w2_events as f64),
        count(s.nexmark_events as f64),
        load_average()
    );
    let started = Instant::now();
    for run in 1..=runs {
        let order: Vec<usize> = if run % 2 == 1 {
            (0..rows.len()).collect()
        } else {
            (0..rows.len()).rev().collect()
        };
        for i in order {
            let r = &mut rows[i];
            if r.skipped.is_some() {
                continue;
            }
            match run_child(r) {
                Ok(x) => {
                    eprintln!(
                        "run {run}/{runs}: {:<28} {:>9} events/s  {:>9} events/CPU-s  {:.2} s  \
                         peak {}  load {}",
                        r.label,
                        rate(r.events as f64 / x.wall),
                        rate(r.events as f64 / x.cpu.max(1e-9)),
                        x.wall,
                        bytes(x.peak as f64),
                        load_average()
                    );
                    r.samples.push(x);
                }
                Err(reason) => {
                    eprintln!("run {run}/{runs}: {:<28} skipped: {reason}", r.label);
                    r.skipped = Some(reason);
                }
            }
        }
    }
    println!();
    print_table(&rows);
    println!(
        "all runs `weir run … --mode exactly-once --checkpoint-interval 1s --discard-output`; \
         {:.1} s in total; load average {} at end",
        started.elapsed().as_secs_f64(),
        load_average()
    );
}

fn print_table(rows: &[Row]) {
    println!(
        "| workload | p | events | events/s | events per CPU-second | peak memory | \
         Flink events/s | Flink events per CPU-second | target events per CPU-second |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut notes = Vec::new();
    for r in rows {
        let (name, p) = r.label.rsplit_once(", p=").unwrap_or((&r.label, "?"));
        if let Some(reason) = &r.skipped {
            if r.parallelism == 1 {
                notes.push(format!("{name}: skipped — {reason}"));
            }
            continue;
        }
        let n = r.events as f64;
        let eps = median(r.samples.iter().map(|x| n / x.wall).collect());
        let epc = median(r.samples.iter().map(|x| n / x.cpu.max(1e-9)).collect());
        let peak = median(r.samples.iter().map(|x| x.peak as f64).collect());
        let show = |x: Option<f64>| x.map_or("-".to_string(), rate);
        let (flink_eps, flink_epc, target) = match r.query {
            Some(q) => {
                let target = match (q.target_epc, epc) {
                    (Some(t), Some(got)) => format!(
                        "≥ {} — {}",
                        rate(t),
                        if got >= t { "met" } else { "missed" }
                    ),
                    _ => "-".to_string(),
                };
                (q.flink_eps, q.flink_epc, target)
            }
            None => {
                let target = match (r.parallelism, eps) {
                    (2, Some(got)) => format!(
                        "≥ 20 M events/s — {}",
                        if got >= 20e6 { "met" } else { "missed" }
                    ),
                    _ => "-".to_string(),
                };
                let flink = if r.parallelism == 2 { "1.84 M" } else { "-" };
                (flink, "-", target)
            }
        };
        let memory = match r.query {
            Some(q) if !q.memory => "-".to_string(),
            _ => peak.map_or("-".to_string(), bytes),
        };
        println!(
            "| {name} | {p} | {} | {} | {} | {memory} | {flink_eps} | {flink_epc} | {target} |",
            count(n),
            show(eps),
            show(epc),
        );
    }
    println!();
    println!(
        "Medians over runs. events/s: events ÷ the child's wall time; events per CPU-second: \
         events ÷ the child's user + system CPU time (wait4); peak memory: the child's \
         ru_maxrss (shown for W2 and the issue's memory queries q5, q7, q8). Flink: issue 12's \
         table (Flink 2.3, p=1, heap state, 10 M events). ¹ Flink's q7 ran 3 M events (at 10 M \
         it ran out of its 4 GB heap); the issue's target for q7 is also < 500 MB peak memory."
    );
    for n in notes {
        println!("{n}");
    }
}
