//! Throughput of the `keyed-count` job (workload W1) next to a plain hash-map floor.
//!
//! ```text
//! cargo bench -p weir-cli --bench keyed_count
//! cargo bench -p weir-cli --bench keyed_count -- --events 50000000 --keys 100000 --runs 3
//! cargo bench -p weir-cli --bench keyed_count -- --quick      # 2 M events: proves it works
//! cargo bench -p weir-cli --bench keyed_count -- --only p=2    # some rows (+ the floor)
//! ```
//!
//! Every row is run `--runs` times (default 3); the runs go round-robin over the rows so a
//! burst of load from other processes spreads over all rows instead of spoiling one. The
//! table shows medians. Each job run is checked against the exact counts and the bench
//! panics on any mismatch, so a wrong-result run is never reported.
//!
//! CPU time comes from `/proc/self/stat` (this process, all threads); the last column
//! subtracts it from the machine's busy time in `/proc/stat` to show how much CPU other
//! processes took during the run, since the numbers mean little on a loaded machine.
//!
//! The job is built here with the public engine API (the CLI's job code is private to the
//! binary): `GeneratorSource(N)` → `key_by(i % K)` → a keyed process function counting in
//! value state → `CollectSink` of the final `(key, count)` pairs. The `updates` rows emit
//! `(key, count)` for every record into a `DiscardSink` instead (like
//! `weir run keyed-count --emit updates --discard-output`).
//!
//! Without `--bench` on the command line (that is, under `cargo test --all-targets`, which
//! runs bench targets once as tests) it runs a small smoke test and ignores unknown flags.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir::prelude::*;
use weir::runtime::executor::CompletedCheckpointStats;

/// Command-line settings of one bench invocation.
struct Opts {
    /// Events per run (N).
    events: u64,
    /// Distinct keys (K).
    keys: u64,
    /// Runs per row (R).
    runs: usize,
    /// Label of the size preset for the header.
    preset: &'static str,
    /// Run only rows whose label contains this (plus the HashMap floor, the ratios' base).
    only: Option<String>,
}

/// Prints the usage line to stderr.
fn usage() {
    eprintln!(
        "usage: cargo bench -p weir-cli --bench keyed_count -- \
         [--events N] [--keys K] [--runs R] [--quick] [--only TEXT]"
    );
}

/// Parses a numeric flag value or exits with status 2.
fn number<T: std::str::FromStr>(flag: &str, value: Option<String>) -> T {
    match value
        .as_deref()
        .map(|v| v.replace('_', ""))
        .map(|v| v.parse())
    {
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
    let (mut events, mut keys, mut runs) = (None, None, None);
    let mut quick = false;
    let mut only = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--events" => events = Some(number("--events", it.next())),
            "--keys" => keys = Some(number("--keys", it.next())),
            "--runs" => runs = Some(number("--runs", it.next())),
            "--quick" => quick = true,
            "--only" => only = it.next(),
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
    let (preset, default_events, default_keys) = if !bench_mode {
        ("smoke test (no --bench: cargo test)", 200_000, 1_000)
    } else if quick {
        ("quick", 2_000_000, 100_000)
    } else {
        ("full", 50_000_000, 100_000)
    };
    let opts = Opts {
        events: events.unwrap_or(default_events),
        keys: keys.unwrap_or(default_keys),
        runs: runs.unwrap_or(if bench_mode { 3 } else { 1 }),
        preset,
        only,
    };
    if opts.keys == 0 || opts.runs == 0 {
        eprintln!("keyed_count: --keys and --runs must be at least 1");
        std::process::exit(2);
    }
    opts
}

/// Clock ticks per second of `/proc` CPU times: `getconf CLK_TCK`, else 100.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// User + system CPU seconds of this process (all threads, exited ones included), from
/// fields 14 and 15 of `/proc/self/stat`; `None` where there is no `/proc`.
fn cpu_seconds(ticks_per_second: f64) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Field 2 (the command) is in parentheses and may contain spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3, so field n is fields[n - 3].
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / ticks_per_second)
}

/// Busy CPU seconds of the whole machine (every process), from the `cpu` line of
/// `/proc/stat`: user + nice + system + irq + softirq + steal.
fn machine_busy_seconds(ticks_per_second: f64) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let busy = [0, 1, 2, 5, 6, 7]
        .iter()
        .map(|&i| v.get(i).copied().unwrap_or(0));
    Some(busy.sum::<u64>() as f64 / ticks_per_second)
}

/// Measures one run: wall time, this process's CPU time, and the CPU time every other
/// process on the machine used meanwhile (the shared-machine noise).
struct Meter {
    ticks: f64,
    t0: Instant,
    own0: Option<f64>,
    machine0: Option<f64>,
}

impl Meter {
    /// Starts measuring.
    fn start(ticks: f64) -> Meter {
        Meter {
            ticks,
            machine0: machine_busy_seconds(ticks),
            own0: cpu_seconds(ticks),
            t0: Instant::now(),
        }
    }

    /// Stops: `(wall, own CPU seconds, other processes' CPU seconds)`.
    fn stop(self) -> (Duration, Option<f64>, Option<f64>) {
        let wall = self.t0.elapsed();
        let own = cpu_seconds(self.ticks).zip(self.own0).map(|(b, a)| b - a);
        let machine = machine_busy_seconds(self.ticks)
            .zip(self.machine0)
            .map(|(b, a)| b - a);
        let others = machine.zip(own).map(|(m, o)| (m - o).max(0.0));
        (wall, own, others)
    }
}

/// The exact count of key `k` among events `0..n` keyed by `i % keys`.
fn expected_count(n: u64, keys: u64, k: u64) -> u64 {
    n / keys + u64::from(k < n % keys)
}

/// Panics unless `counts` holds every key of `0..min(keys, n)` exactly once with its exact
/// count.
fn check_counts(row: &str, n: u64, keys: u64, counts: impl IntoIterator<Item = (u64, u64)>) {
    let distinct = keys.min(n);
    let mut seen = vec![false; distinct as usize];
    let mut total = 0u64;
    for (k, c) in counts {
        assert!(k < distinct, "{row}: WRONG RESULT: unexpected key {k}");
        assert!(
            !seen[k as usize],
            "{row}: WRONG RESULT: key {k} reported twice"
        );
        seen[k as usize] = true;
        let want = expected_count(n, keys, k);
        assert_eq!(
            c, want,
            "{row}: WRONG RESULT: key {k} counted {c}, expected {want}"
        );
        total += 1;
    }
    assert_eq!(
        total, distinct,
        "{row}: WRONG RESULT: {total} keys reported, {distinct} expected"
    );
}

/// Final counts per subtask, reported by the `updates` variant (whose sink discards).
type Finals = Arc<Mutex<BTreeMap<u32, Vec<(u64, u64)>>>>;

/// Counts records per key in keyed value state. Emits the final `(key, count)` pairs at end
/// of input, or, with `emit_updates`, `(key, count)` for every record (and hands the final
/// counts to `finals` for the correctness check).
#[derive(Clone)]
struct Count {
    state: Option<ValueState<u64>>,
    emit_updates: bool,
    finals: Finals,
    subtask: u32,
}

impl CheckpointedFunction for Count {
    /// Remembers the subtask index (the key of this subtask's `finals` entry).
    fn initialize_state(&mut self, ctx: &InitContext) -> weir::Result<()> {
        self.subtask = ctx.subtask_index();
        Ok(())
    }
}

impl KeyedProcessFunction<u64, u64, (u64, u64)> for Count {
    /// Declares the `count` value state.
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> weir::Result<()> {
        self.state = Some(states.value_state("count")?);
        Ok(())
    }

    /// Adds one to the key's count; emits the new count only in `updates` mode.
    #[inline]
    fn process(
        &mut self,
        _record: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() declares the state");
        let c = ctx.get_mut_or_insert_with(state, || 0);
        *c += 1;
        if self.emit_updates {
            let c = *c;
            out.collect((*ctx.key(), c));
        }
        Ok(())
    }

    /// Emits (or, in `updates` mode, reports) the final count of every key of this subtask.
    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() declares the state");
        if self.emit_updates {
            let all: Vec<(u64, u64)> = ctx.entries(state).map(|(k, v)| (*k, *v)).collect();
            self.finals
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(self.subtask, all);
        } else {
            for (k, v) in ctx.entries(state) {
                out.collect((*k, *v));
            }
        }
        Ok(())
    }
}

/// What a row measures.
#[derive(Clone, Copy)]
enum Kind {
    /// The single-threaded loop on `std::collections::HashMap` (SipHash).
    FloorStd,
    /// The same loop on `rustc_hash::FxHashMap`.
    FloorFx,
    /// The keyed-count job.
    Job {
        parallelism: u32,
        mode: Option<CheckpointingMode>,
        emit_updates: bool,
    },
}

/// One row of the table.
struct Row {
    label: String,
    kind: Kind,
    samples: Vec<Sample>,
}

/// One measured run.
struct Sample {
    wall: Duration,
    cpu: Option<f64>,
    /// CPU seconds other processes used during the run.
    others: Option<f64>,
    checkpoints: Vec<CompletedCheckpointStats>,
}

/// The rows of the table, in order.
fn rows() -> Vec<Row> {
    let mut kinds = vec![
        ("floor: std HashMap loop".to_string(), Kind::FloorStd),
        ("floor: FxHashMap loop".to_string(), Kind::FloorFx),
    ];
    let modes = [
        ("checkpoints off", None),
        ("EXACTLY_ONCE 1 s", Some(CheckpointingMode::ExactlyOnce)),
        ("AT_LEAST_ONCE 1 s", Some(CheckpointingMode::AtLeastOnce)),
    ];
    for p in [1, 2] {
        for (name, mode) in modes {
            kinds.push((
                format!("keyed-count p={p}, {name}"),
                Kind::Job {
                    parallelism: p,
                    mode,
                    emit_updates: false,
                },
            ));
        }
    }
    for p in [1, 2] {
        kinds.push((
            format!("updates p={p}, EXACTLY_ONCE 1 s"),
            Kind::Job {
                parallelism: p,
                mode: Some(CheckpointingMode::ExactlyOnce),
                emit_updates: true,
            },
        ));
    }
    kinds
        .into_iter()
        .map(|(label, kind)| Row {
            label,
            kind,
            samples: Vec::new(),
        })
        .collect()
}

/// Counts `i % keys` for `i` in `0..n` in a fresh hash map with hasher `S`; timed, then
/// checked.
fn run_floor<S: BuildHasher + Default>(row: &str, n: u64, keys: u64, ticks: f64) -> Sample {
    let (n_in, keys_in) = (black_box(n), black_box(keys));
    let meter = Meter::start(ticks);
    let mut map: HashMap<u64, u64, S> = HashMap::default();
    for i in 0..n_in {
        *map.entry(i % keys_in).or_insert(0) += 1;
    }
    let map = black_box(map);
    let (wall, cpu, others) = meter.stop();
    check_counts(row, n, keys, map);
    Sample {
        wall,
        cpu,
        others,
        checkpoints: Vec::new(),
    }
}

/// Runs the keyed-count job once (checkpoints into a temporary folder deleted afterwards),
/// then checks its counts.
fn run_job(row: &str, kind: Kind, n: u64, keys: u64, ticks: f64) -> Sample {
    let Kind::Job {
        parallelism,
        mode,
        emit_updates,
    } = kind
    else {
        unreachable!("run_job runs job rows")
    };
    let dir = tempfile::Builder::new()
        .prefix("weir-bench-")
        .tempdir()
        .expect("create a temporary checkpoint folder");
    let mut cfg = JobConfig::new("keyed-count-bench");
    cfg.parallelism = parallelism;
    cfg.checkpoint_dir = dir.path().to_path_buf();
    cfg.checkpointing.interval = mode.map(|_| Duration::from_secs(1));
    if let Some(m) = mode {
        cfg.checkpointing.mode = m;
    }
    // A failure must fail the run, not be recovered from inside the measurement.
    cfg.restart = RestartStrategy::None;
    let env = StreamEnvironment::new(cfg);
    let finals: Finals = Arc::default();
    let collect = CollectSink::<(u64, u64)>::new();
    let counted = env
        .add_source("generator", GeneratorSource::new(n))
        .uid("generator")
        .key_by(move |i: &u64| i % keys)
        .process(Count {
            state: None,
            emit_updates,
            finals: finals.clone(),
            subtask: 0,
        })
        .name("count")
        .uid("count");
    if emit_updates {
        counted.add_sink("discard", DiscardSink).uid("discard");
    } else {
        counted.add_sink("collect", collect.clone()).uid("collect");
    }

    let meter = Meter::start(ticks);
    let result = env
        .execute()
        .unwrap_or_else(|e| panic!("{row}: the job failed: {e}"));
    let (wall, cpu, others) = meter.stop();

    assert_eq!(
        result.source_records, n,
        "{row}: WRONG RESULT: sources emitted {} records, expected {n}",
        result.source_records
    );
    if emit_updates {
        let finals = std::mem::take(&mut *finals.lock().unwrap_or_else(|p| p.into_inner()));
        assert_eq!(
            finals.len(),
            parallelism as usize,
            "{row}: WRONG RESULT: {} of {parallelism} subtasks reported final counts",
            finals.len()
        );
        check_counts(row, n, keys, finals.into_values().flatten());
    } else {
        check_counts(row, n, keys, collect.take());
    }
    drop(dir);
    Sample {
        wall,
        cpu,
        others,
        checkpoints: result.checkpoints,
    }
}

/// The median of `v` (mean of the middle two for an even count); `None` when empty.
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// `12.3 M`-style rendering of a rate.
fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.1} M", x / 1e6)
    } else {
        format!("{:.0} k", x / 1e3)
    }
}

/// `850 µs` / `12.3 ms` / `1.20 s` rendering of a duration in seconds.
fn dur(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// The 1-minute load average from `/proc/loadavg`, for the header.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// Prints the table of medians (Markdown) to stdout.
fn print_table(rows: &[Row], n: u64) {
    let events_per_s = |r: &Row| {
        median(
            r.samples
                .iter()
                .map(|s| n as f64 / s.wall.as_secs_f64())
                .collect(),
        )
    };
    let floor = events_per_s(&rows[0]).unwrap_or(f64::NAN);
    println!(
        "| row | events/s | ÷ HashMap floor | events/CPU-s | checkpoints | median ckpt | max sync pause | wall s | others' CPU |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let eps = events_per_s(r).unwrap_or(f64::NAN);
        let per_cpu = median(
            r.samples
                .iter()
                .filter_map(|s| s.cpu)
                .filter(|c| *c > 0.0)
                .map(|c| n as f64 / c)
                .collect(),
        )
        .map_or("n/a".into(), rate);
        let is_job = matches!(r.kind, Kind::Job { mode: Some(_), .. });
        let (count, ckpt, sync) = if is_job {
            let count = median(
                r.samples
                    .iter()
                    .map(|s| s.checkpoints.len() as f64)
                    .collect(),
            )
            .map_or("-".into(), |c| format!("{c}"));
            let all: Vec<&CompletedCheckpointStats> =
                r.samples.iter().flat_map(|s| &s.checkpoints).collect();
            let ckpt = median(all.iter().map(|c| c.duration.as_secs_f64()).collect())
                .map_or("-".into(), dur);
            let sync = all
                .iter()
                .map(|c| c.max_sync)
                .max()
                .map_or("-".into(), |d| dur(d.as_secs_f64()));
            (count, ckpt, sync)
        } else {
            ("-".into(), "-".into(), "-".into())
        };
        let wall = median(r.samples.iter().map(|s| s.wall.as_secs_f64()).collect()).unwrap_or(0.0);
        // Worst run: how many cores other processes kept busy on average.
        let others = r
            .samples
            .iter()
            .filter_map(|s| s.others.map(|o| o / s.wall.as_secs_f64()))
            .max_by(f64::total_cmp)
            .map_or("n/a".into(), |c| format!("{c:.2} cores"));
        println!(
            "| {} | {} | {:.2} | {} | {} | {} | {} | {:.2} | {} |",
            r.label,
            rate(eps),
            eps / floor,
            per_cpu,
            count,
            ckpt,
            sync,
            wall,
            others
        );
    }
}

/// Runs every row `runs` times, round-robin, and prints the table.
fn main() {
    let opts = parse_args();
    let ticks = clock_ticks();
    let (n, keys) = (opts.events, opts.keys);
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    println!(
        "keyed_count bench ({}): N = {n} events, K = {keys} keys, median of {} runs; \
         {cores} cores, load average {} at start",
        opts.preset,
        opts.runs,
        load_average()
    );
    let mut rows = rows();
    if let Some(only) = &opts.only {
        rows.retain(|r| matches!(r.kind, Kind::FloorStd) || r.label.contains(only.as_str()));
    }
    let started = Instant::now();
    for run in 1..=opts.runs {
        for r in &mut rows {
            let sample = match r.kind {
                Kind::FloorStd => {
                    run_floor::<std::collections::hash_map::RandomState>(&r.label, n, keys, ticks)
                }
                Kind::FloorFx => run_floor::<rustc_hash::FxBuildHasher>(&r.label, n, keys, ticks),
                kind @ Kind::Job { .. } => run_job(&r.label, kind, n, keys, ticks),
            };
            eprintln!(
                "run {run}/{}: {:<40} {:>10} events/s  {:.2} s  {} checkpoints  \
                 others' CPU {:.2} cores",
                opts.runs,
                r.label,
                rate(n as f64 / sample.wall.as_secs_f64()),
                sample.wall.as_secs_f64(),
                sample.checkpoints.len(),
                sample.others.unwrap_or(0.0) / sample.wall.as_secs_f64()
            );
            r.samples.push(sample);
        }
    }
    println!();
    print_table(&rows, n);
    println!();
    println!(
        "others' CPU: cores kept busy by other processes during the worst run of the row \
         (shared-machine noise)."
    );
    println!(
        "all counts exact; {:.1} s in total; load average {} at end",
        started.elapsed().as_secs_f64(),
        load_average()
    );
}
