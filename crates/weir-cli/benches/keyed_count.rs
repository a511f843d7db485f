//! Throughput of the `keyed-count` job (workload W1) next to a plain hash-map floor.
//!
//! ```text
//! cargo bench -p weir-cli --bench keyed_count
//! cargo bench -p weir-cli --bench keyed_count -- --events 50000000 --keys 100000 --runs 3
//! cargo bench -p weir-cli --bench keyed_count -- --quick      # 2 M events: proves it works
//! cargo bench -p weir-cli --bench keyed_count -- --only p=2    # some rows (+ the floor)
//! cargo bench -p weir-cli --bench keyed_count -- --scramble-keys   # keys in scattered order
//! cargo bench -p weir-cli --bench keyed_count -- --state-sizes     # 1 M and 10 M keys
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
//! `--scramble-keys` keys event `i` by a fixed pseudo-random permutation of `0..K` applied
//! to `i % K` (in the floor loops too): the same keys and counts, but consecutive events
//! hit scattered keys instead of `0, 1, 2, …`.
//!
//! `--state-sizes` replaces the table with the state-size rows: `updates` at p=1 with
//! 1 M and 10 M keys of value state (N = 60 M events each unless `--events` says otherwise),
//! checkpoints off and EXACTLY_ONCE every second, reporting checkpoint durations, the
//! longest synchronous snapshot pause and the size of the last checkpoint.
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
    /// Events per run (N); `None`: the preset's (for `--state-sizes`, each row's own).
    events: Option<u64>,
    /// Distinct keys (K).
    keys: u64,
    /// Runs per row (R).
    runs: usize,
    /// Label of the size preset for the header.
    preset: &'static str,
    /// Run only rows whose label contains this (plus the HashMap floor, the ratios' base).
    only: Option<String>,
    /// Key events by a pseudo-random permutation of `i % K` instead of `i % K`.
    scramble: bool,
    /// Run the state-size rows (1 M and 10 M keys) instead of the main table.
    state_sizes: bool,
    /// `--quick`: small sizes.
    quick: bool,
}

/// Prints the usage line to stderr.
fn usage() {
    eprintln!(
        "usage: cargo bench -p weir-cli --bench keyed_count -- \
         [--events N] [--keys K] [--runs R] [--quick] [--only TEXT] [--scramble-keys] \
         [--state-sizes]"
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
    let (mut quick, mut scramble, mut state_sizes) = (false, false, false);
    let mut only = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--events" => events = Some(number("--events", it.next())),
            "--keys" => keys = Some(number("--keys", it.next())),
            "--runs" => runs = Some(number("--runs", it.next())),
            "--quick" => quick = true,
            "--only" => only = it.next(),
            "--scramble-keys" => scramble = true,
            "--state-sizes" => state_sizes = true,
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
    if state_sizes && keys.is_some() {
        eprintln!("keyed_count: --state-sizes sets the key counts itself; drop --keys");
        std::process::exit(2);
    }
    let (preset, default_events, default_keys) = if !bench_mode {
        ("smoke test (no --bench: cargo test)", 200_000, 1_000)
    } else if quick {
        ("quick", 2_000_000, 100_000)
    } else {
        ("full", 50_000_000, 100_000)
    };
    let opts = Opts {
        events: events.or((!state_sizes).then_some(default_events)),
        keys: keys.unwrap_or(default_keys),
        runs: runs.unwrap_or(if bench_mode { 3 } else { 1 }),
        preset,
        only,
        scramble,
        state_sizes,
        quick: quick || !bench_mode,
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

/// How event `i` is keyed: `i % K`, or with `scramble` a fixed pseudo-random permutation
/// of `0..K` applied to `i % K` (same keys, same counts, scattered order).
#[derive(Clone, Copy)]
struct Keying {
    keys: u64,
    scramble: bool,
    /// `2^bits - 1` for the smallest power of two `2^bits >= keys`.
    mask: u64,
    /// `ceil(bits / 2)`: `x ^ (x >> shift)` is then its own inverse on `bits` bits.
    shift: u32,
}

/// Odd multipliers of the scrambling bijection (invertible modulo any power of two).
const MUL: [u64; 2] = [0x9E37_79B9_7F4A_7C15, 0xBF58_476D_1CE4_E5B9];

/// The inverse of odd `a` modulo 2^64 (Newton's iteration; each step doubles the correct
/// low bits, starting from 3).
const fn inverse(a: u64) -> u64 {
    let mut x = a;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

impl Keying {
    /// Keys `0..keys`, scrambled or not.
    fn new(keys: u64, scramble: bool) -> Keying {
        let bits = keys
            .checked_next_power_of_two()
            .map_or(64, u64::trailing_zeros);
        Keying {
            keys,
            scramble,
            mask: if bits >= 64 {
                u64::MAX
            } else {
                (1 << bits) - 1
            },
            shift: bits.div_ceil(2).max(1),
        }
    }

    /// A bijection of `0..=mask`: multiplications by odd numbers and xor-shifts, each
    /// invertible on `bits` bits.
    #[inline]
    fn mix(self, x: u64) -> u64 {
        let x = x.wrapping_mul(MUL[0]) & self.mask;
        let x = x ^ (x >> self.shift);
        let x = x.wrapping_mul(MUL[1]) & self.mask;
        x ^ (x >> self.shift)
    }

    /// The inverse of [`Keying::mix`].
    fn unmix(self, x: u64) -> u64 {
        let x = x ^ (x >> self.shift);
        let x = x.wrapping_mul(inverse(MUL[1])) & self.mask;
        let x = x ^ (x >> self.shift);
        x.wrapping_mul(inverse(MUL[0])) & self.mask
    }

    /// The scrambled key of slot `j < keys`: `mix` repeated until the value is below
    /// `keys` (cycle walking), which makes it a bijection of `0..keys`.
    #[inline]
    fn scrambled(self, j: u64) -> u64 {
        let mut x = self.mix(j);
        while x >= self.keys {
            x = self.mix(x);
        }
        x
    }

    /// The key of event `i`.
    #[inline]
    fn key(self, i: u64) -> u64 {
        if self.scramble {
            self.scrambled(i % self.keys)
        } else {
            i % self.keys
        }
    }

    /// The slot `j` (the `i % K` before scrambling) whose key is `k < keys`.
    fn slot(self, k: u64) -> u64 {
        if !self.scramble {
            return k;
        }
        let mut x = self.unmix(k);
        while x >= self.keys {
            x = self.unmix(x);
        }
        x
    }
}

/// The exact count of slot `j` (key `j` unless scrambled) among events `0..n`.
fn expected_count(n: u64, keys: u64, j: u64) -> u64 {
    n / keys + u64::from(j < n % keys)
}

/// Panics unless `counts` holds every key of the events `0..n` exactly once with its exact
/// count.
fn check_counts(row: &str, n: u64, keying: Keying, counts: impl IntoIterator<Item = (u64, u64)>) {
    let keys = keying.keys;
    let distinct = keys.min(n);
    let mut seen = vec![false; distinct as usize];
    let mut total = 0u64;
    for (k, c) in counts {
        let j = if k < keys { keying.slot(k) } else { u64::MAX };
        assert!(j < distinct, "{row}: WRONG RESULT: unexpected key {k}");
        assert!(
            !seen[j as usize],
            "{row}: WRONG RESULT: key {k} reported twice"
        );
        seen[j as usize] = true;
        let want = expected_count(n, keys, j);
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
    /// Events per run (N).
    events: u64,
    /// Keys (K).
    keys: u64,
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

/// The checkpointing settings the rows compare.
const MODES: [(&str, Option<CheckpointingMode>); 3] = [
    ("checkpoints off", None),
    ("EXACTLY_ONCE 1 s", Some(CheckpointingMode::ExactlyOnce)),
    ("AT_LEAST_ONCE 1 s", Some(CheckpointingMode::AtLeastOnce)),
];

/// The rows of the main table, in order.
fn rows(events: u64, keys: u64) -> Vec<Row> {
    let mut kinds = vec![
        ("floor: std HashMap loop".to_string(), Kind::FloorStd),
        ("floor: FxHashMap loop".to_string(), Kind::FloorFx),
    ];
    for p in [1, 2] {
        for (name, mode) in MODES {
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
    let updates = [
        (1, MODES[0]),
        (1, MODES[1]),
        (2, MODES[1]), // p=2 without checkpoints: see the keyed-count rows
    ];
    for (p, (name, mode)) in updates {
        kinds.push((
            format!("updates p={p}, {name}"),
            Kind::Job {
                parallelism: p,
                mode,
                emit_updates: true,
            },
        ));
    }
    kinds
        .into_iter()
        .map(|(label, kind)| Row {
            label,
            kind,
            events,
            keys,
            samples: Vec::new(),
        })
        .collect()
}

/// The rows of the state-size table: `updates` at p=1 with 1 M and 10 M keys (a tenth of
/// both sizes with `--quick`), checkpoints off and EXACTLY_ONCE every second.
fn state_rows(events: Option<u64>, quick: bool) -> Vec<Row> {
    let scale = if quick { 10 } else { 1 };
    let mut rows = Vec::new();
    for keys in [1_000_000 / scale, 10_000_000 / scale] {
        for (name, mode) in [MODES[0], MODES[1]] {
            rows.push(Row {
                label: format!("updates p=1, {} keys, {name}", count(keys as f64)),
                kind: Kind::Job {
                    parallelism: 1,
                    mode,
                    emit_updates: true,
                },
                events: events.unwrap_or(60_000_000 / scale),
                keys,
                samples: Vec::new(),
            });
        }
    }
    rows
}

/// Counts `key(i)` for `i` in `0..n` in a fresh hash map with hasher `S`; timed, then
/// checked.
fn run_floor<S: BuildHasher + Default>(row: &str, n: u64, keying: Keying, ticks: f64) -> Sample {
    fn count_loop<S: BuildHasher + Default>(
        n: u64,
        key: impl Fn(u64) -> u64,
    ) -> HashMap<u64, u64, S> {
        let mut map: HashMap<u64, u64, S> = HashMap::default();
        for i in 0..n {
            *map.entry(key(i)).or_insert(0) += 1;
        }
        map
    }
    let (n_in, keys_in) = (black_box(n), black_box(keying.keys));
    let meter = Meter::start(ticks);
    let map = if keying.scramble {
        let keying = black_box(keying);
        count_loop::<S>(n_in, |i| keying.key(i))
    } else {
        count_loop::<S>(n_in, |i| i % keys_in)
    };
    let map = black_box(map);
    let (wall, cpu, others) = meter.stop();
    check_counts(row, n, keying, map);
    Sample {
        wall,
        cpu,
        others,
        checkpoints: Vec::new(),
    }
}

/// Runs the keyed-count job once (checkpoints into a temporary folder deleted afterwards),
/// then checks its counts.
fn run_job(row: &str, kind: Kind, n: u64, keying: Keying, ticks: f64) -> Sample {
    if keying.scramble {
        run_job_keyed_by(row, kind, n, keying, ticks, move |i: &u64| keying.key(*i))
    } else {
        let keys = keying.keys;
        run_job_keyed_by(row, kind, n, keying, ticks, move |i: &u64| i % keys)
    }
}

/// [`run_job`] with the key selector `key` (a separate instance per selector, so the
/// unscrambled job keys by the bare `i % K`).
fn run_job_keyed_by<F>(row: &str, kind: Kind, n: u64, keying: Keying, ticks: f64, key: F) -> Sample
where
    F: Fn(&u64) -> u64 + Clone + Send + Sync + 'static,
{
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
        .key_by(key)
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
        check_counts(row, n, keying, finals.into_values().flatten());
    } else {
        check_counts(row, n, keying, collect.take());
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

/// `10M` / `100k` / `500` rendering of a round count.
fn count(x: f64) -> String {
    if x >= 1e6 {
        format!("{}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{}k", x / 1e3)
    } else {
        format!("{x}")
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

/// `47.9 MB`-style rendering of a byte count (decimal units).
fn bytes(b: f64) -> String {
    if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else {
        format!("{:.0} kB", b / 1e3)
    }
}

/// The 1-minute load average from `/proc/loadavg`, for the header.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// The median over the row's runs of events per wall second.
fn events_per_s(r: &Row) -> Option<f64> {
    median(
        r.samples
            .iter()
            .map(|s| r.events as f64 / s.wall.as_secs_f64())
            .collect(),
    )
}

/// The median over the row's runs of events per CPU second of this process.
fn events_per_cpu_s(r: &Row) -> String {
    median(
        r.samples
            .iter()
            .filter_map(|s| s.cpu)
            .filter(|c| *c > 0.0)
            .map(|c| r.events as f64 / c)
            .collect(),
    )
    .map_or("n/a".into(), rate)
}

/// The median wall seconds of the row's runs.
fn wall_s(r: &Row) -> f64 {
    median(r.samples.iter().map(|s| s.wall.as_secs_f64()).collect()).unwrap_or(0.0)
}

/// How many cores other processes kept busy on average, in the row's worst run.
fn others_cpu(r: &Row) -> String {
    r.samples
        .iter()
        .filter_map(|s| s.others.map(|o| o / s.wall.as_secs_f64()))
        .max_by(f64::total_cmp)
        .map_or("n/a".into(), |c| format!("{c:.2} cores"))
}

/// Checkpoint statistics of a row with checkpointing on (`None` otherwise): the median
/// count per run, every completed checkpoint of every run, and the median over the runs
/// of the last checkpoint's size.
struct CheckpointSummary<'a> {
    count: Option<f64>,
    all: Vec<&'a CompletedCheckpointStats>,
    last_bytes: Option<f64>,
}

impl<'a> CheckpointSummary<'a> {
    /// `None` for rows without checkpoints.
    fn of(r: &'a Row) -> Option<CheckpointSummary<'a>> {
        if !matches!(r.kind, Kind::Job { mode: Some(_), .. }) {
            return None;
        }
        Some(CheckpointSummary {
            count: median(
                r.samples
                    .iter()
                    .map(|s| s.checkpoints.len() as f64)
                    .collect(),
            ),
            all: r.samples.iter().flat_map(|s| &s.checkpoints).collect(),
            last_bytes: median(
                r.samples
                    .iter()
                    .filter_map(|s| s.checkpoints.last().map(|c| c.bytes as f64))
                    .collect(),
            ),
        })
    }

    fn count(&self) -> String {
        self.count.map_or("-".into(), |c| format!("{c}"))
    }

    fn median_duration(&self) -> String {
        median(self.all.iter().map(|c| c.duration.as_secs_f64()).collect()).map_or("-".into(), dur)
    }

    fn max_duration(&self) -> String {
        self.all
            .iter()
            .map(|c| c.duration)
            .max()
            .map_or("-".into(), |d| dur(d.as_secs_f64()))
    }

    fn max_sync(&self) -> String {
        self.all
            .iter()
            .map(|c| c.max_sync)
            .max()
            .map_or("-".into(), |d| dur(d.as_secs_f64()))
    }

    fn last_size(&self) -> String {
        self.last_bytes.map_or("-".into(), bytes)
    }
}

/// Prints the main table of medians (Markdown) to stdout.
fn print_table(rows: &[Row]) {
    let floor = events_per_s(&rows[0]).unwrap_or(f64::NAN);
    println!(
        "| row | events/s | ÷ HashMap floor | events/CPU-s | checkpoints | median ckpt | max sync pause | wall s | others' CPU |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let eps = events_per_s(r).unwrap_or(f64::NAN);
        let (count, ckpt, sync) = CheckpointSummary::of(r).map_or_else(
            || ("-".into(), "-".into(), "-".into()),
            |c| (c.count(), c.median_duration(), c.max_sync()),
        );
        println!(
            "| {} | {} | {:.2} | {} | {} | {} | {} | {:.2} | {} |",
            r.label,
            rate(eps),
            eps / floor,
            events_per_cpu_s(r),
            count,
            ckpt,
            sync,
            wall_s(r),
            others_cpu(r)
        );
    }
}

/// Prints the state-size table of medians (Markdown) to stdout.
fn print_state_table(rows: &[Row]) {
    println!(
        "| row | N | events/s | events/CPU-s | checkpoints | median ckpt | max ckpt | max sync pause | last ckpt size | wall s | others' CPU |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let (ckpts, median_ckpt, max_ckpt, sync, size) = CheckpointSummary::of(r).map_or_else(
            || ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
            |c| {
                (
                    c.count(),
                    c.median_duration(),
                    c.max_duration(),
                    c.max_sync(),
                    c.last_size(),
                )
            },
        );
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {} |",
            r.label,
            count(r.events as f64),
            rate(events_per_s(r).unwrap_or(f64::NAN)),
            events_per_cpu_s(r),
            ckpts,
            median_ckpt,
            max_ckpt,
            sync,
            size,
            wall_s(r),
            others_cpu(r)
        );
    }
    for r in rows {
        if let Some(c) = CheckpointSummary::of(r).and_then(|c| c.count) {
            if c < 3.0 {
                println!(
                    "note: {}: median {c} checkpoints per run, fewer than 3; raise --events",
                    r.label
                );
            }
        }
    }
}

/// Runs every row `runs` times, round-robin, and prints the table.
fn main() {
    let opts = parse_args();
    let ticks = clock_ticks();
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    let mut rows = if opts.state_sizes {
        state_rows(opts.events, opts.quick)
    } else {
        rows(opts.events.expect("set without --state-sizes"), opts.keys)
    };
    let sizes = if opts.state_sizes {
        "state sizes".to_string()
    } else {
        format!("N = {} events, K = {} keys", rows[0].events, rows[0].keys)
    };
    println!(
        "keyed_count bench ({}): {sizes}{}, median of {} runs; \
         {cores} cores, load average {} at start",
        opts.preset,
        if opts.scramble {
            ", keys scrambled"
        } else {
            ""
        },
        opts.runs,
        load_average()
    );
    if let Some(only) = &opts.only {
        rows.retain(|r| matches!(r.kind, Kind::FloorStd) || r.label.contains(only.as_str()));
    }
    if opts.scramble {
        // The scrambling must be a bijection the check can invert, or no run would pass.
        for r in &rows {
            let keying = Keying::new(r.keys, true);
            for j in (0..r.keys).take(1000) {
                let k = keying.scrambled(j);
                assert!(
                    k < r.keys && keying.slot(k) == j,
                    "scrambling is not invertible"
                );
            }
        }
    }
    let started = Instant::now();
    for run in 1..=opts.runs {
        for r in &mut rows {
            let (n, keying) = (r.events, Keying::new(r.keys, opts.scramble));
            let sample = match r.kind {
                Kind::FloorStd => {
                    run_floor::<std::collections::hash_map::RandomState>(&r.label, n, keying, ticks)
                }
                Kind::FloorFx => run_floor::<rustc_hash::FxBuildHasher>(&r.label, n, keying, ticks),
                kind @ Kind::Job { .. } => run_job(&r.label, kind, n, keying, ticks),
            };
            eprintln!(
                "run {run}/{}: {:<45} {:>10} events/s  {:.2} s  {} checkpoints  \
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
    if opts.state_sizes {
        print_state_table(&rows);
    } else {
        print_table(&rows);
    }
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
