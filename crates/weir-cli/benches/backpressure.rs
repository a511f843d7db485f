//! Benchmark W3 (issue 13): checkpoints under backpressure. W1 (keyed count, p=2,
//! checkpoints every 1 s) with a sink limited to a tenth of the source's rate, in three
//! modes — aligned, unaligned, and aligned with a 100 ms aligned-checkpoint timeout — each
//! with its end-to-end checkpoint duration (p50, p99), alignment time, persisted in-flight
//! bytes, throughput and time lost to one failure; printed as one table.
//!
//! ```text
//! cargo bench -p weir-cli --bench backpressure                # full sizes, 3 rounds
//! cargo bench -p weir-cli --bench backpressure -- --quick     # small sizes in release (CI runs the smoke sizes: `cargo test --bench NAME`)
//! cargo bench -p weir-cli --bench backpressure -- --runs 1 --only unaligned
//! ```
//!
//! The job: `GeneratorSource(n)` paced to `source_rate` → `key_by(i % K)` → a keyed count
//! emitting `(key, count)` per record → a sink paced to `source_rate / 10` (both at p=2;
//! the count and the sink are chained into one task, so the count's input channels are
//! the queues that fill). Every run checks the exact final counts.
//!
//! **Time lost to one failure**: each round runs every mode twice, once clean and once
//! with one injected failure (the count's subtask 0 panics `fail_at` into the run, or at
//! its first record after a checkpoint completed if that is later; the default restart
//! strategy restarts the job from the latest checkpoint). The sink paces the run, so the
//! clean run's wall time is the time the sink needs for the input; the failed run's is
//! that plus the restart and the records the sink must process again (everything after
//! the restored checkpoint's cut). Time lost = wall(failed) − wall(clean), per round,
//! median over rounds. The failed run also checks that the restart restored a checkpoint
//! of this run at a position past 0 (`weir::testing::assert_resumed`).
//!
//! Checkpoint statistics come from what the job reports (`JobResult::checkpoints`: trigger
//! to `_metadata` duration, the longest alignment of any task, the tasks that snapshotted
//! unaligned and the in-flight bytes saved), over the clean runs, leaving out the
//! checkpoints cut once a source subtask had ended its input (the final one among them):
//! the engine keeps those aligned in every mode (docs/architecture.md §3), so they wait for
//! the queues to drain; the last column shows how many there were and the longest. Without
//! `--bench` (under `cargo test --all-targets`) it runs each mode once at tiny sizes.

#[path = "shared/quiet_panics.rs"]
mod quiet_panics;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir::api::execution::RestoreInfo;
use weir::prelude::*;

/// The panic message of the injected failure (the panic hook stays quiet about it).
const INJECTED: &str = "backpressure bench: injected failure";

/// The three checkpointing modes compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Aligned,
    Unaligned,
    /// Aligned, switching to unaligned after this alignment.
    AlignedTimeout(Duration),
}

impl Mode {
    fn label(self) -> String {
        match self {
            Mode::Aligned => "aligned".into(),
            Mode::Unaligned => "unaligned".into(),
            Mode::AlignedTimeout(d) => format!("aligned, timeout {} ms", d.as_millis()),
        }
    }
}

/// Sizes of one preset.
struct Sizes {
    name: &'static str,
    events: u64,
    keys: u64,
    /// Events per second of the source (all subtasks); the sink takes a tenth of it.
    source_rate: f64,
    interval: Duration,
    /// When the failure is due, from the start of the run.
    fail_at: Duration,
    runs: usize,
}

fn sizes(preset: &str) -> Sizes {
    match preset {
        // The sink at 10 k/s drains the count's full input channels (2 × 4 batches of
        // 4096 per subtask) in ~6.5 s: what an aligned barrier waits behind.
        "full" => Sizes {
            name: "full",
            events: 200_000,
            keys: 1_000,
            source_rate: 100_000.0,
            interval: Duration::from_secs(1),
            fail_at: Duration::from_millis(10_500),
            runs: 3,
        },
        "quick" => Sizes {
            name: "quick",
            events: 100_000,
            keys: 1_000,
            source_rate: 400_000.0,
            interval: Duration::from_millis(200),
            fail_at: Duration::from_millis(1_200),
            runs: 1,
        },
        // A debug build (`cargo test`): the sink at 200 k/s drains the full channels in
        // ~0.3 s, so an aligned checkpoint completes before the failure is due.
        _ => Sizes {
            name: "smoke",
            events: 200_000,
            keys: 100,
            source_rate: 2_000_000.0,
            interval: Duration::from_millis(100),
            fail_at: Duration::from_millis(600),
            runs: 1,
        },
    }
}

/// One completed checkpoint of a clean run.
#[derive(Clone, Copy, Debug)]
struct Ckpt {
    /// Cut once a source subtask had ended its input (kept aligned by the engine).
    ended: bool,
    duration: f64,
    alignment: f64,
    unaligned: bool,
    in_flight_bytes: u64,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
struct Outcome {
    wall: f64,
    checkpoints: Vec<Ckpt>,
    failed_checkpoints: u64,
    /// Failure to the first record the count processed after the restart.
    downtime: Option<f64>,
    /// The restored checkpoint and its source position (failed runs).
    restored: Option<(u64, u64)>,
}

/// The injected failure: when it is due and what it saw of the recovery.
#[derive(Default)]
struct FailPlan {
    due: Option<Instant>,
    fired: AtomicBool,
    t_fail: Mutex<Option<Instant>>,
    t_first: Mutex<Option<Instant>>,
}

/// Final `(key, count)` pairs per count subtask, for the check.
type Finals = Arc<Mutex<BTreeMap<u32, Vec<(u64, u64)>>>>;

/// W1's count with an optional failure; hands its final counts over for the check.
#[derive(Clone)]
struct Count {
    state: Option<ValueState<u64>>,
    finals: Finals,
    subtask: u32,
    plan: Option<Arc<FailPlan>>,
    /// A checkpoint completed since this instance opened: the failure may fire.
    armed: bool,
    /// This instance opened after the failure and has not processed a record yet.
    first_after: bool,
    seen: u64,
}

impl CheckpointedFunction for Count {
    fn initialize_state(&mut self, ctx: &InitContext) -> weir::Result<()> {
        self.subtask = ctx.subtask_index();
        self.first_after = self
            .plan
            .as_ref()
            .is_some_and(|p| p.fired.load(Ordering::Relaxed));
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> weir::Result<()> {
        self.armed = true;
        Ok(())
    }
}

impl KeyedProcessFunction<u64, u64, (u64, u64)> for Count {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> weir::Result<()> {
        self.state = Some(states.value_state("count")?);
        Ok(())
    }

    fn process(
        &mut self,
        _record: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() declares the state");
        let c = ctx.get_mut_or_insert_with(state, || 0);
        *c += 1;
        let c = *c;
        out.collect((*ctx.key(), c));
        if let Some(plan) = &self.plan {
            self.seen += 1;
            if self.first_after {
                self.first_after = false;
                let mut t = plan.t_first.lock().unwrap_or_else(|p| p.into_inner());
                t.get_or_insert_with(Instant::now);
            } else if self.subtask == 0
                && self.armed
                && self.seen.is_multiple_of(64)
                && !plan.fired.load(Ordering::Relaxed)
                && plan.due.is_some_and(|d| Instant::now() >= d)
            {
                *plan.t_fail.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                plan.fired.store(true, Ordering::Relaxed);
                panic!("{INJECTED}");
            }
        }
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        _out: &mut Collector<'_, (u64, u64)>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() declares the state");
        let counts = ctx.entries(state).collect();
        self.finals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.subtask, counts);
        Ok(())
    }
}

/// A sink that takes about `rate` records per second over all subtasks: the slow end that
/// backs the job up. It sleeps per batch while it is ahead of its share.
#[derive(Clone)]
struct SlowSink {
    rate: f64,
    parallelism: u32,
    started: Option<Instant>,
    seen: u64,
}

impl CheckpointedFunction for SlowSink {
    fn initialize_state(&mut self, ctx: &InitContext) -> weir::Result<()> {
        self.parallelism = ctx.parallelism();
        Ok(())
    }
}

impl SinkFunction<(u64, u64)> for SlowSink {
    fn invoke(&mut self, batch: &mut Vec<(u64, u64)>) -> weir::Result<()> {
        let started = *self.started.get_or_insert_with(Instant::now);
        self.seen += batch.len() as u64;
        batch.clear();
        let share = self.rate / f64::from(self.parallelism.max(1));
        let due = Duration::from_secs_f64(self.seen as f64 / share);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        Ok(())
    }
}

/// The generator, noting how many records all its subtasks had emitted when the first of
/// them reached the end of its input: checkpoints cut at or past that are taken while an
/// input has ended, which the engine keeps aligned (docs/architecture.md §3), so the
/// steady-state figures leave them out.
#[derive(Clone)]
struct EndWatch {
    inner: GeneratorSource,
    emitted: Arc<AtomicU64>,
    first_end: Arc<AtomicU64>,
}

impl CheckpointedFunction for EndWatch {
    fn initialize_state(&mut self, ctx: &InitContext) -> weir::Result<()> {
        self.inner.initialize_state(ctx)
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> weir::Result<()> {
        self.inner.snapshot_state(ctx)
    }
    fn notify_checkpoint_complete(&mut self, id: u64) -> weir::Result<()> {
        self.inner.notify_checkpoint_complete(id)
    }
    fn notify_checkpoint_aborted(&mut self, id: u64) -> weir::Result<()> {
        self.inner.notify_checkpoint_aborted(id)
    }
}

impl SourceFunction<u64> for EndWatch {
    fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> weir::Result<SourceStatus> {
        let before = out.len();
        let status = self.inner.poll(out, max)?;
        let total = self
            .emitted
            .fetch_add((out.len() - before) as u64, Ordering::SeqCst)
            + (out.len() - before) as u64;
        if status == SourceStatus::Finished {
            self.first_end.fetch_min(total, Ordering::SeqCst);
        }
        Ok(status)
    }
}

/// Runs W3 once in `mode`, with one failure when `fail`, and checks the counts.
fn run(s: &Sizes, mode: Mode, fail: bool) -> Outcome {
    let dir = tempfile::Builder::new()
        .prefix("weir-bench-w3-")
        .tempdir()
        .expect("create a temporary checkpoint folder");
    let mut cfg = JobConfig::new("w3-bench");
    cfg.parallelism = 2;
    cfg.checkpoint_dir = dir.path().to_path_buf();
    cfg.checkpointing.interval = Some(s.interval);
    // Slow aligned checkpoints must not fail the job: they are what is measured.
    cfg.checkpointing.tolerable_failures = u32::MAX;
    match mode {
        Mode::Aligned => {}
        Mode::Unaligned => cfg.checkpointing.unaligned = true,
        Mode::AlignedTimeout(d) => {
            cfg.checkpointing.unaligned = true;
            cfg.checkpointing.aligned_checkpoint_timeout = Some(d);
        }
    }
    cfg.restart = if fail {
        RestartStrategy::default()
    } else {
        RestartStrategy::None
    };
    let env = StreamEnvironment::new(cfg);
    let (n, keys) = (s.events, s.keys);
    let finals: Finals = Arc::default();
    let started = Instant::now();
    let plan = fail.then(|| {
        Arc::new(FailPlan {
            due: Some(started + s.fail_at),
            ..FailPlan::default()
        })
    });
    let first_end = Arc::new(AtomicU64::new(u64::MAX));
    let source = EndWatch {
        inner: GeneratorSource::new(n).with_rate(Some(s.source_rate)),
        emitted: Arc::default(),
        first_end: first_end.clone(),
    };
    env.add_source("generator", source)
        .uid("generator")
        .key_by(move |i: &u64| i % keys)
        .process(Count {
            state: None,
            finals: finals.clone(),
            subtask: 0,
            plan: plan.clone(),
            armed: false,
            first_after: false,
            seen: 0,
        })
        .name("count")
        .uid("count")
        .add_sink(
            "slow-sink",
            SlowSink {
                rate: s.source_rate / 10.0,
                parallelism: 1,
                started: None,
                seen: 0,
            },
        )
        .uid("slow-sink");
    let result = env
        .execute()
        .unwrap_or_else(|e| panic!("W3 {}: the job failed: {e}", mode.label()));
    let wall = started.elapsed().as_secs_f64();
    let label = mode.label();
    check_counts(&label, n, keys, &finals);
    let restored = match &plan {
        Some(plan) => Some(check_recovered(&label, &result, plan, n)),
        None => {
            assert_eq!(result.attempts, 1, "W3 {label}: unexpected restart");
            None
        }
    };
    let downtime = plan.as_ref().and_then(|p| {
        let f = (*p.t_fail.lock().unwrap_or_else(|e| e.into_inner()))?;
        let t = (*p.t_first.lock().unwrap_or_else(|e| e.into_inner()))?;
        Some(t.saturating_duration_since(f).as_secs_f64())
    });
    Outcome {
        wall,
        checkpoints: result
            .checkpoints
            .iter()
            .filter(|c| c.source_records < n)
            .map(|c| Ckpt {
                ended: c.source_records >= first_end.load(Ordering::SeqCst),
                duration: c.duration.as_secs_f64(),
                alignment: c.max_alignment.as_secs_f64(),
                unaligned: c.unaligned_tasks > 0,
                in_flight_bytes: c.in_flight_bytes,
            })
            .collect(),
        failed_checkpoints: result.failed_checkpoints,
        downtime,
        restored,
    }
}

/// Panics unless every key's final count is exact.
fn check_counts(label: &str, n: u64, keys: u64, finals: &Mutex<BTreeMap<u32, Vec<(u64, u64)>>>) {
    let finals = finals.lock().unwrap_or_else(|p| p.into_inner());
    let mut seen = 0;
    for (k, c) in finals.values().flatten() {
        let want = n / keys + u64::from(*k < n % keys);
        assert_eq!(
            *c, want,
            "W3 {label}: WRONG RESULT: key {k} counted {c}, not {want}"
        );
        seen += 1;
    }
    assert_eq!(
        seen, keys,
        "W3 {label}: WRONG RESULT: {seen} keys of {keys}"
    );
}

/// Panics unless the run failed once by the injected failure and resumed from a checkpoint
/// of this run at a position past 0; returns that checkpoint and position.
fn check_recovered(label: &str, result: &JobResult, plan: &FailPlan, n: u64) -> (u64, u64) {
    assert!(
        plan.fired.load(Ordering::Relaxed),
        "W3 {label}: the failure never fired (no checkpoint completed before the input \
         ended?): raise the number of events"
    );
    let h = &result.history;
    assert_eq!(
        result.attempts, 2,
        "W3 {label}: expected one restart: {h:#?}"
    );
    let Some(RestoreInfo {
        checkpoint_id,
        source_records,
        ..
    }) = h[1].restored.clone()
    else {
        panic!("W3 {label}: the restart started from scratch: {h:#?}");
    };
    weir::testing::assert_resumed(result, n);
    (checkpoint_id, source_records)
}

fn quantile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    Some(v[i])
}

fn median(v: Vec<f64>) -> Option<f64> {
    quantile(v, 0.5)
}

fn secs(x: Option<f64>) -> String {
    x.map_or("-".into(), |s| {
        if s < 1.0 {
            format!("{:.0} ms", s * 1000.0)
        } else {
            format!("{s:.2} s")
        }
    })
}

fn kib(x: Option<f64>) -> String {
    x.map_or("-".into(), |b| format!("{:.0} KiB", b / 1024.0))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let mut preset = if bench { "full" } else { "smoke" };
    let (mut runs, mut only) = (None, None::<String>);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" if bench => preset = "quick",
            "--runs" => runs = it.next().and_then(|v| v.parse::<usize>().ok()),
            "--only" => only = it.next().cloned(),
            "--bench" => {}
            other if bench => {
                eprintln!(
                    "backpressure: unknown argument '{other}'\nusage: cargo bench -p weir-cli \
                     --bench backpressure -- [--quick] [--runs R] [--only TEXT]"
                );
                std::process::exit(2);
            }
            _ => {} // libtest flags under `cargo test`
        }
    }
    quiet_panics::quiet_injected_panics(INJECTED);
    let s = sizes(preset);
    let runs = runs.unwrap_or(s.runs).max(1);
    let mut modes = vec![
        Mode::Aligned,
        Mode::Unaligned,
        Mode::AlignedTimeout(Duration::from_millis(100)),
    ];
    if let Some(only) = &only {
        modes.retain(|m| m.label().contains(only.as_str()));
    }
    println!(
        "W3 backpressure bench ({}): N = {}, K = {}, p = 2, source {:.0} events/s, sink {:.0} \
         events/s, checkpoints every {} ms, failure due {} ms in; {runs} rounds",
        s.name,
        s.events,
        s.keys,
        s.source_rate,
        s.source_rate / 10.0,
        s.interval.as_millis(),
        s.fail_at.as_millis()
    );
    // Per mode: clean runs, failed runs.
    let mut clean: Vec<Vec<Outcome>> = modes.iter().map(|_| Vec::new()).collect();
    let mut failed: Vec<Vec<Outcome>> = modes.iter().map(|_| Vec::new()).collect();
    for round in 1..=runs {
        // Odd rounds go down the modes, even rounds up; the clean and the failed run of a
        // mode swap order every round.
        let mut order: Vec<usize> = (0..modes.len()).collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for i in order {
            for fail in if round % 2 == 1 {
                [false, true]
            } else {
                [true, false]
            } {
                let o = run(&s, modes[i], fail);
                let ckpts = &o.checkpoints;
                eprintln!(
                    "round {round}/{runs}: {:<24} {:<8} {:6.2} s  {} checkpoints ({} unaligned, \
                     {} failed), p50 {} (ms:{}){}",
                    modes[i].label(),
                    if fail { "failure" } else { "clean" },
                    o.wall,
                    ckpts.len(),
                    ckpts.iter().filter(|c| c.unaligned).count(),
                    o.failed_checkpoints,
                    secs(median(ckpts.iter().map(|c| c.duration).collect())),
                    o.checkpoints
                        .iter()
                        .map(|c| format!(
                            " {:.0}{}",
                            c.duration * 1000.0,
                            if c.ended { "e" } else { "" }
                        ))
                        .collect::<String>(),
                    o.restored.map_or(String::new(), |(id, pos)| format!(
                        ", restored chk-{id} at {pos} records, downtime {}",
                        secs(o.downtime)
                    )),
                );
                if fail {
                    failed[i].push(o);
                } else {
                    clean[i].push(o);
                }
            }
        }
    }
    println!();
    println!(
        "| mode | ckpts (unaligned) | ckpt p50 | ckpt p99 | alignment p50 / max | in-flight \
         p50 / max | events/s | time lost to one failure | downtime | after an input ended: \
         ckpts, max |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, m) in modes.iter().enumerate() {
        let all: Vec<Ckpt> = clean[i]
            .iter()
            .flat_map(|o| o.checkpoints.clone())
            .collect();
        let (ended, ck): (Vec<Ckpt>, Vec<Ckpt>) = all.into_iter().partition(|c| c.ended);
        let ended_max = quantile(ended.iter().map(|c| c.duration).collect(), 1.0);
        let d: Vec<f64> = ck.iter().map(|c| c.duration).collect();
        let a: Vec<f64> = ck.iter().map(|c| c.alignment).collect();
        let b: Vec<f64> = ck.iter().map(|c| c.in_flight_bytes as f64).collect();
        let eps = median(clean[i].iter().map(|o| s.events as f64 / o.wall).collect());
        let lost = median(
            clean[i]
                .iter()
                .zip(&failed[i])
                .map(|(c, f)| f.wall - c.wall)
                .collect(),
        );
        let down = median(failed[i].iter().filter_map(|o| o.downtime).collect());
        let failed_ckpts: u64 = clean[i].iter().map(|o| o.failed_checkpoints).sum();
        println!(
            "| {} | {} ({}){} | {} | {} | {} / {} | {} / {} | {} | {} | {} | {}, {} |",
            m.label(),
            ck.len(),
            ck.iter().filter(|c| c.unaligned).count(),
            if failed_ckpts > 0 {
                format!(", {failed_ckpts} failed")
            } else {
                String::new()
            },
            secs(quantile(d.clone(), 0.5)),
            secs(quantile(d, 0.99)),
            secs(quantile(a.clone(), 0.5)),
            secs(quantile(a, 1.0)),
            kib(quantile(b.clone(), 0.5)),
            kib(quantile(b, 1.0)),
            eps.map_or("-".into(), |x| format!("{x:.0}")),
            secs(lost),
            secs(down),
            ended.len(),
            secs(ended_max),
        );
    }
    println!();
    println!(
        "ckpts: completed checkpoints of the clean runs cut while every source subtask was \
         still running (in parentheses: taken unaligned by at least one task); the final one \
         and those cut after a source subtask ended its input are left out (the engine keeps \
         them aligned: the last column); ckpt: trigger to _metadata; \
         alignment: the longest of any task per checkpoint; in-flight: channel state saved \
         per checkpoint; events/s: N ÷ wall of the clean runs (the sink's pace); time lost: \
         wall of the run with one failure − wall of the clean run, per round, median; \
         downtime: failure → first record counted after the restart. All counts exact."
    );
}
