//! The jobs the rows run — W1 (optionally with one injected failure), the large-state
//! recovery job — and the floor loop, each returning an [`Outcome`] that a child process
//! prints as one line for the parent to parse.

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir::api::execution::RestoreInfo;
use weir::prelude::*;

use super::keying::{check_counts, check_summaries, CountSummary, Keying};
use super::measure::{peak_rss_bytes, Meter};
use super::rows::Fail;

/// The panic message of the bench's own injected failures (the panic hook stays quiet
/// about them).
pub const INJECTED: &str = "keyed_count bench: injected failure";

/// One completed checkpoint, in seconds and bytes.
#[derive(Clone, Copy, Debug)]
pub struct Ckpt {
    pub duration: f64,
    pub sync: f64,
    pub alignment: f64,
    pub bytes: u64,
}

/// What one run of one row measured.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub wall: f64,
    pub cpu: Option<f64>,
    pub others: Option<f64>,
    /// Peak resident memory of the (child) process.
    pub peak: Option<u64>,
    /// Records the sources emitted, replays included.
    pub source_records: u64,
    pub attempts: u32,
    /// Failure to the first record processed after the restart (failure rows only).
    pub downtime: Option<f64>,
    /// The restore the last attempt started from (failure rows only), checked by
    /// [`check_recovered`]: checkpoint id, records before its source positions, records
    /// the last attempt read.
    pub restored: Option<Restored>,
    pub checkpoints: Vec<Ckpt>,
}

/// A checked restore: the last attempt restored checkpoint `id`, whose source positions
/// were `position` records into the input, and then read `read` records (`position +
/// read` = N).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restored {
    pub id: u64,
    pub position: u64,
    pub read: u64,
}

impl Outcome {
    /// The one-line form a child prints (`RESULT key=value …`).
    pub fn to_line(&self) -> String {
        let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.6}"));
        let ckpts: Vec<String> = self
            .checkpoints
            .iter()
            .map(|c| {
                format!(
                    "{:.6}:{:.6}:{:.6}:{}",
                    c.duration, c.sync, c.alignment, c.bytes
                )
            })
            .collect();
        format!(
            "RESULT wall={:.6} cpu={} others={} peak={} records={} attempts={} downtime={} \
             restored={} ckpts={}",
            self.wall,
            opt(self.cpu),
            opt(self.others),
            self.peak.map_or("-".into(), |p| p.to_string()),
            self.source_records,
            self.attempts,
            opt(self.downtime),
            self.restored.map_or("-".into(), |r| format!(
                "{}:{}:{}",
                r.id, r.position, r.read
            )),
            if ckpts.is_empty() {
                "-".into()
            } else {
                ckpts.join(",")
            }
        )
    }

    /// Parses [`Outcome::to_line`]'s output.
    pub fn parse(line: &str) -> Option<Outcome> {
        let fields: HashMap<&str, &str> = line
            .strip_prefix("RESULT ")?
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let f = |k: &str| fields.get(k).and_then(|v| v.parse::<f64>().ok());
        let checkpoints = match fields.get("ckpts") {
            Some(&"-") | None => Vec::new(),
            Some(list) => list
                .split(',')
                .map(|c| {
                    let v: Vec<&str> = c.split(':').collect();
                    Some(Ckpt {
                        duration: v.first()?.parse().ok()?,
                        sync: v.get(1)?.parse().ok()?,
                        alignment: v.get(2)?.parse().ok()?,
                        bytes: v.get(3)?.parse().ok()?,
                    })
                })
                .collect::<Option<Vec<_>>>()?,
        };
        Some(Outcome {
            wall: f("wall")?,
            cpu: f("cpu"),
            others: f("others"),
            peak: fields.get("peak").and_then(|v| v.parse().ok()),
            source_records: fields.get("records")?.parse().ok()?,
            attempts: fields.get("attempts")?.parse().ok()?,
            downtime: f("downtime"),
            restored: fields.get("restored").and_then(|v| {
                let v: Vec<u64> = v
                    .split(':')
                    .map(|x| x.parse().ok())
                    .collect::<Option<_>>()?;
                match v[..] {
                    [id, position, read] => Some(Restored { id, position, read }),
                    _ => None,
                }
            }),
            checkpoints,
        })
    }
}

/// When and how the bench fails a job once, and what it saw of the recovery.
#[derive(Default)]
pub struct FailPlan {
    /// Subtask 0 fails after processing this many records in the first attempt.
    at: u64,
    /// Or on its first record after this moment (checked every 4096 records).
    deadline: Option<Instant>,
    /// Set from outside: subtask 0 fails on its next record.
    now: AtomicBool,
    fired: AtomicBool,
    t_fail: Mutex<Option<Instant>>,
    t_first: Mutex<Option<Instant>>,
}

impl FailPlan {
    /// A plan to fail after `at` records of subtask 0 (`u64::MAX`: only on request).
    pub fn after(at: u64) -> Arc<FailPlan> {
        Arc::new(FailPlan {
            at,
            ..FailPlan::default()
        })
    }

    /// A plan to fail `after` from now (or after `at` records, whichever is first).
    pub fn after_time(at: u64, after: Duration) -> Arc<FailPlan> {
        Arc::new(FailPlan {
            at,
            deadline: Some(Instant::now() + after),
            ..FailPlan::default()
        })
    }

    /// Called per record by a function that carries the plan; panics when the failure is
    /// due and `armed` (the instance has seen a checkpoint complete, so the restart has a
    /// checkpoint with progress to restore), notes the first record after the restart.
    /// `first_after` starts `true` in an instance opened after the failure (see
    /// [`FailPlan::opened`]) and is cleared by its first record.
    #[cold]
    #[inline(never)]
    fn on_record(&self, subtask: u32, seen: u64, armed: bool, first_after: &mut bool) {
        if self.fired.load(Ordering::Relaxed) {
            // Instances of the failed attempt may still be running until they are
            // cancelled: only a restarted instance's records count.
            if *first_after {
                *first_after = false;
                let mut t = self.t_first.lock().unwrap_or_else(|p| p.into_inner());
                t.get_or_insert_with(Instant::now);
            }
        } else if subtask == 0
            && armed
            && (seen >= self.at
                || self.now.load(Ordering::Relaxed)
                || (seen.is_multiple_of(4096)
                    && self.deadline.is_some_and(|d| Instant::now() >= d)))
        {
            *self.t_fail.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            self.fired.store(true, Ordering::Relaxed);
            panic!("{INJECTED}");
        }
    }

    /// Whether the failure fired.
    fn fired(&self) -> bool {
        self.fired.load(Ordering::Relaxed)
    }

    /// Whether a function instance initialised now belongs to an attempt after the failure.
    fn opened(&self) -> bool {
        self.fired.load(Ordering::Relaxed)
    }

    /// Failure to the first record processed after the restart, if both happened.
    fn downtime(&self) -> Option<f64> {
        let fail = (*self.t_fail.lock().unwrap_or_else(|p| p.into_inner()))?;
        let first = (*self.t_first.lock().unwrap_or_else(|p| p.into_inner()))?;
        Some(first.saturating_duration_since(fail).as_secs_f64())
    }
}

/// Final results per subtask, reported at end of input for the correctness check.
type Finals = Arc<Mutex<BTreeMap<u32, Vec<(u64, u64)>>>>;

/// W1's final counts per subtask, checked where they are read (see [`CountSummary`]).
type Summaries = Arc<Mutex<BTreeMap<u32, CountSummary>>>;

/// W1's function: counts records per key in value state and emits `(key, count)` for every
/// record; hands its final counts to `finals` for the check. With a [`FailPlan`] it also
/// fails once.
#[derive(Clone)]
struct Count {
    state: Option<ValueState<u64>>,
    finals: Summaries,
    /// N and the keying, to check the final counts against.
    truth: (u64, Keying),
    subtask: u32,
    fail: Option<Arc<FailPlan>>,
    seen: u64,
    /// A checkpoint completed since this instance opened: the failure may fire.
    armed: bool,
    first_after: bool,
}

impl CheckpointedFunction for Count {
    fn initialize_state(&mut self, ctx: &InitContext) -> weir::Result<()> {
        self.subtask = ctx.subtask_index();
        self.first_after = self.fail.as_ref().is_some_and(|p| p.opened());
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
        let c = *c;
        out.collect((*ctx.key(), c));
        if let Some(plan) = &self.fail {
            self.seen += 1;
            plan.on_record(self.subtask, self.seen, self.armed, &mut self.first_after);
        }
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        _out: &mut Collector<'_, (u64, u64)>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() declares the state");
        let (n, keying) = self.truth;
        let summary = CountSummary::of(n, keying, ctx.entries(state));
        self.finals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.subtask, summary);
        Ok(())
    }
}

/// The checkpointing of a W1 run.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    Off,
    /// EXACTLY_ONCE every 1 s (the W1).
    ExactlyOnce,
    /// EXACTLY_ONCE every this many milliseconds (to show what a shorter interval buys).
    ExactlyOnceEvery(u64),
    AtLeastOnce,
    /// EXACTLY_ONCE every 1 s with unaligned checkpoints (issue 13): what they cost
    /// without backpressure.
    Unaligned,
}

/// The job configuration shared by the rows: checkpoints into `dir`, `restart` on failure.
fn config(dir: &std::path::Path, p: u32, mode: Mode, restart: RestartStrategy) -> JobConfig {
    let mut cfg = JobConfig::new("keyed-count-bench");
    cfg.parallelism = p;
    cfg.checkpoint_dir = dir.to_path_buf();
    cfg.checkpointing.interval = match mode {
        Mode::Off => None,
        Mode::ExactlyOnceEvery(ms) => Some(Duration::from_millis(ms)),
        _ => Some(Duration::from_secs(1)),
    };
    match mode {
        Mode::AtLeastOnce => cfg.checkpointing.mode = CheckpointingMode::AtLeastOnce,
        Mode::Unaligned => cfg.checkpointing.unaligned = true,
        _ => {}
    }
    cfg.restart = restart;
    cfg
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("weir-bench-")
        .tempdir()
        .expect("create a temporary checkpoint folder")
}

fn checkpoints(result: &JobResult) -> Vec<Ckpt> {
    result
        .checkpoints
        .iter()
        .map(|c| Ckpt {
            duration: c.duration.as_secs_f64(),
            sync: c.max_sync.as_secs_f64(),
            alignment: c.max_alignment.as_secs_f64(),
            bytes: c.bytes,
        })
        .collect()
}

/// When a [`Fail::Once`] failure is due: after subtask 0 processed `records` records, or
/// `after` into the run, whichever comes first (and not before a checkpoint completed).
#[derive(Clone, Copy, Debug)]
pub struct Due {
    pub records: u64,
    pub after: Duration,
}

/// Runs W1 once — `GeneratorSource(n)` → `key_by` → [`Count`] → `DiscardSink` — and checks
/// the final counts. With [`Fail::Once`], subtask 0 fails once when `due` (in full runs
/// 1.5 s in: half-way between two checkpoints, the average position of a failure), but
/// only once a checkpoint has completed in the attempt; the job recovers with the default
/// restart strategy, and the run checks that the restart restored that checkpoint
/// ([`check_recovered`]).
#[allow(clippy::too_many_arguments)]
pub fn run_w1(
    row: &str,
    p: u32,
    mode: Mode,
    n: u64,
    keying: Keying,
    fail: Fail,
    due: Due,
    ticks: f64,
) -> Outcome {
    if keying.scramble {
        run_w1_keyed_by(row, p, mode, n, keying, fail, due, ticks, move |i: &u64| {
            keying.key(*i)
        })
    } else {
        let keys = keying.keys;
        run_w1_keyed_by(row, p, mode, n, keying, fail, due, ticks, move |i: &u64| {
            i % keys
        })
    }
}

/// [`run_w1`] with the key selector `key` (a separate instance per selector, so the
/// unscrambled job keys by the bare `i % K`).
#[allow(clippy::too_many_arguments)]
fn run_w1_keyed_by<F>(
    row: &str,
    p: u32,
    mode: Mode,
    n: u64,
    keying: Keying,
    fail: Fail,
    due: Due,
    ticks: f64,
    key: F,
) -> Outcome
where
    F: Fn(&u64) -> u64 + Clone + Send + Sync + 'static,
{
    let dir = temp_dir();
    // Without a planned failure, any failure must fail the run rather than be recovered
    // from inside the measurement.
    let restart = match fail {
        Fail::Once => RestartStrategy::default(),
        Fail::No | Fail::Reference => RestartStrategy::None,
    };
    let env = StreamEnvironment::new(config(dir.path(), p, mode, restart));
    let finals: Summaries = Arc::default();
    let plan = match fail {
        Fail::No => None,
        Fail::Once => Some(FailPlan::after_time(due.records, due.after)),
        Fail::Reference => Some(FailPlan::after(u64::MAX)),
    };
    env.add_source("generator", GeneratorSource::new(n))
        .uid("generator")
        .key_by(key)
        .process(Count {
            state: None,
            finals: finals.clone(),
            truth: (n, keying),
            subtask: 0,
            fail: plan.clone(),
            seen: 0,
            armed: false,
            first_after: false,
        })
        .name("count")
        .uid("count")
        .add_sink("discard", DiscardSink)
        .uid("discard");

    let meter = Meter::start(ticks);
    let result = env
        .execute()
        .unwrap_or_else(|e| panic!("{row}: the job failed: {e}"));
    let m = meter.stop();

    let restored = match (fail, &plan) {
        (Fail::Once, Some(plan)) => Some(check_recovered(row, &result, plan, n, None)),
        _ => {
            assert_eq!(
                (result.attempts, result.source_records),
                (1, n),
                "{row}: WRONG RESULT: expected one attempt reading {n} records: {:#?}",
                result.history
            );
            None
        }
    };
    let finals = std::mem::take(&mut *finals.lock().unwrap_or_else(|p| p.into_inner()));
    assert_eq!(
        finals.len(),
        p as usize,
        "{row}: WRONG RESULT: {} of {p} subtasks reported final counts",
        finals.len()
    );
    check_summaries(row, n, keying, finals.into_values().collect());
    Outcome {
        wall: m.wall.as_secs_f64(),
        cpu: m.cpu,
        others: m.others,
        peak: peak_rss_bytes(),
        source_records: result.source_records,
        attempts: result.attempts,
        downtime: plan.as_ref().and_then(|p| p.downtime()),
        restored,
        checkpoints: checkpoints(&result),
    }
}

/// Panics (the row fails loudly) unless the run failed exactly once by the bench's own
/// injected failure and the restart resumed from a checkpoint rather than from the start:
/// * the failure fired, in the first attempt, and the job ran exactly two attempts;
/// * the second attempt restored a checkpoint this run completed (`expect_id`, when the
///   bench triggered it itself), at a source position past 0;
/// * the second attempt read only the remainder: position + records read = `n` (< `n`);
/// * and `weir::testing::assert_resumed` agrees (it also wants the restart notice that
///   names the checkpoint).
///
/// Exact final counts (checked by the caller) then rule out a restore of positions
/// without state (too low) and of state without positions (too high).
fn check_recovered(
    row: &str,
    result: &JobResult,
    plan: &FailPlan,
    n: u64,
    expect_id: Option<u64>,
) -> Restored {
    assert!(
        plan.fired(),
        "{row}: the injected failure never fired (no checkpoint completed before the input \
         ended?): nothing was recovered; history: {:#?}",
        result.history
    );
    let h = &result.history;
    assert!(
        result.attempts == 2 && h.len() == 2,
        "{row}: expected 2 attempts (one failure), got {}: {h:#?}",
        result.attempts
    );
    assert!(
        h[0].failure
            .as_deref()
            .is_some_and(|f| f.contains(INJECTED)),
        "{row}: the first attempt did not end with the injected failure: {:#?}",
        h[0]
    );
    let Some(RestoreInfo {
        checkpoint_id,
        source_records: position,
        ..
    }) = h[1].restored.clone()
    else {
        panic!("{row}: the restart did not restore a checkpoint (a fresh start): {h:#?}");
    };
    assert!(
        result.checkpoints.iter().any(|c| c.id == checkpoint_id),
        "{row}: the restart restored checkpoint {checkpoint_id}, which this run never \
         completed"
    );
    if let Some(id) = expect_id {
        assert_eq!(
            checkpoint_id, id,
            "{row}: the restart restored checkpoint {checkpoint_id}, not the one taken before \
             the failure ({id})"
        );
    }
    let read = h[1].source_records;
    assert!(
        position > 0 && position + read == n && read < n,
        "{row}: the restart restored checkpoint {checkpoint_id} at source position \
         {position} and then read {read} records; expected a position > 0 and only the \
         remaining {n} − {position}"
    );
    weir::testing::assert_resumed(result, n);
    Restored {
        id: checkpoint_id,
        position,
        read,
    }
}

/// The value of key `k` in the large-state job: `len` ASCII bytes that depend on the key.
/// A string, because that is how a payload of bytes travels through serde: a `Vec<u8>`
/// would be encoded and decoded one element at a time.
fn blob(k: u64, len: usize) -> String {
    let digits = format!("{k:016x}");
    digits.chars().cycle().take(len).collect()
}

/// The large-state job: each of `keys` keys holds `value_bytes` bytes of value state.
#[derive(Clone)]
struct Blob {
    state: Option<ValueState<String>>,
    value_bytes: usize,
    /// Keys created so far (the bench checkpoints once they are all there).
    built: Arc<AtomicU64>,
    finals: Finals,
    subtask: u32,
    fail: Arc<FailPlan>,
    first_after: bool,
}

impl CheckpointedFunction for Blob {
    fn initialize_state(&mut self, ctx: &InitContext) -> weir::Result<()> {
        self.subtask = ctx.subtask_index();
        self.first_after = self.fail.opened();
        Ok(())
    }
}

impl KeyedProcessFunction<u64, u64, u64> for Blob {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> weir::Result<()> {
        self.state = Some(states.value_state("blob")?);
        Ok(())
    }

    fn process(
        &mut self,
        _record: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Collector<'_, u64>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() declares the state");
        let (k, len, built) = (*ctx.key(), self.value_bytes, &self.built);
        let v = ctx.get_mut_or_insert_with(state, || {
            built.fetch_add(1, Ordering::Relaxed);
            blob(k, len)
        });
        v.truncate(len - 1);
        v.push(if v.ends_with('a') { 'b' } else { 'a' });
        // Armed: the bench sets `now` only after its triggered checkpoint completed.
        self.fail
            .on_record(self.subtask, 0, true, &mut self.first_after);
        Ok(())
    }

    /// Reports `(keys, keys whose value is intact)` for the check.
    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        _out: &mut Collector<'_, u64>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() declares the state");
        let (mut keys, mut intact, len) = (0, 0, self.value_bytes);
        for (k, v) in ctx.entries(state) {
            keys += 1;
            intact +=
                u64::from(v.len() == self.value_bytes && v[..len - 1] == blob(k, len)[..len - 1]);
        }
        self.finals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.subtask, vec![(keys, intact)]);
        Ok(())
    }
}

/// Recovery with large state: builds `keys × value_bytes` of value state at p=1 (the
/// generator paced to `rate`, so the job is still running when its state is complete),
/// checkpoints on demand, fails, and measures failure → first record after the restart
/// under the default restart strategy.
pub fn run_recovery(
    row: &str,
    keys: u64,
    value_bytes: usize,
    rate: f64,
    seconds: f64,
    ticks: f64,
) -> Outcome {
    let dir = temp_dir();
    let env = StreamEnvironment::new(config(dir.path(), 1, Mode::Off, RestartStrategy::default()));
    let n = keys + (rate * seconds) as u64;
    let built = Arc::new(AtomicU64::new(0));
    let plan = FailPlan::after(u64::MAX);
    let finals: Finals = Arc::default();
    env.add_source("generator", GeneratorSource::new(n).with_rate(Some(rate)))
        .uid("generator")
        .key_by(move |i: &u64| i % keys)
        .process(Blob {
            state: None,
            value_bytes,
            built: built.clone(),
            finals: finals.clone(),
            subtask: 0,
            fail: plan.clone(),
            first_after: false,
        })
        .name("blob")
        .uid("blob")
        .add_sink("discard", DiscardSink)
        .uid("discard");
    let control = env.control();
    let trigger = {
        let (plan, built) = (plan.clone(), built.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while built.load(Ordering::Relaxed) < keys {
                if t0.elapsed() > Duration::from_secs(120) {
                    return Err("state never complete".to_string());
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            let done = control.trigger_checkpoint().map_err(|e| e.to_string())?;
            plan.now.store(true, Ordering::Relaxed);
            Ok(done.id)
        })
    };
    let meter = Meter::start(ticks);
    let result = env
        .execute()
        .unwrap_or_else(|e| panic!("{row}: the job failed: {e}"));
    let m = meter.stop();
    let id = match trigger.join().expect("trigger thread") {
        Ok(id) => id,
        Err(e) => panic!("{row}: no checkpoint before the failure: {e} (raise the run time)"),
    };
    assert!(
        plan.fired() && plan.downtime().is_some(),
        "{row}: the source ended before the injected failure (the checkpoint of the whole \
         state took longer than the paced part of the run): nothing was measured; rerun on a \
         quieter machine or raise `blob_seconds` in rows.rs"
    );
    // The restart restored the checkpoint taken once every key existed, and read only
    // what came after its source position.
    let restored = check_recovered(row, &result, &plan, n, Some(id));
    // Every key existed in that checkpoint, so a restart that restored the state creates
    // none; one that lost it re-creates every key the rest of the input touches (all of
    // them unless the checkpoint took nearly the whole paced part), which the intact
    // check below could not tell from a restore.
    let created = built.load(Ordering::Relaxed);
    assert_eq!(
        created, keys,
        "{row}: WRONG RESULT: {created} keys created for {keys} keys: the restart did not \
         restore the state"
    );
    let finals = std::mem::take(&mut *finals.lock().unwrap_or_else(|p| p.into_inner()));
    let (k, intact) = finals
        .get(&0)
        .and_then(|v| v.first().copied())
        .unwrap_or((0, 0));
    assert!(
        k == keys && intact == keys,
        "{row}: WRONG RESULT: {k} keys, {intact} intact, {keys} expected"
    );
    Outcome {
        wall: m.wall.as_secs_f64(),
        cpu: m.cpu,
        others: m.others,
        peak: peak_rss_bytes(),
        source_records: result.source_records,
        attempts: result.attempts,
        downtime: plan.downtime(),
        restored: Some(restored),
        checkpoints: checkpoints(&result),
    }
}

/// The floor: `*map.entry(key(i)).or_insert(0) += 1` for `i` in `0..n` in a fresh
/// `FxHashMap`, single-threaded; timed, then checked.
pub fn run_floor(row: &str, n: u64, keying: Keying, ticks: f64) -> Outcome {
    fn count_loop(n: u64, key: impl Fn(u64) -> u64) -> rustc_hash::FxHashMap<u64, u64> {
        let mut map = rustc_hash::FxHashMap::default();
        for i in 0..n {
            *map.entry(key(i)).or_insert(0) += 1;
        }
        map
    }
    let (n_in, keys_in) = (black_box(n), black_box(keying.keys));
    let meter = Meter::start(ticks);
    let map = if keying.scramble {
        let keying = black_box(keying);
        count_loop(n_in, |i| keying.key(i))
    } else {
        count_loop(n_in, |i| i % keys_in)
    };
    let map = black_box(map);
    let m = meter.stop();
    let peak = peak_rss_bytes();
    check_counts(row, n, keying, map);
    Outcome {
        wall: m.wall.as_secs_f64(),
        cpu: m.cpu,
        others: m.others,
        peak,
        source_records: n,
        attempts: 1,
        ..Outcome::default()
    }
}
