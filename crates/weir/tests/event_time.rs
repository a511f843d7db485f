//! Event time: watermarks from a bounded-out-of-orderness strategy fire event-time timers
//! exactly — once per (key, time), never before the watermark passed them, with every
//! record counted — across injected failures and restores at another parallelism.
//!
//! The job: the generator's record `i` has key `i % KEYS` and event time `ts(i)`, `i` plus
//! up to 99 ms of jitter (so records arrive out of order). A keyed function counts records
//! per key and tumbling event-time window of `WINDOW` ms, with an event-time timer at the
//! window's last millisecond; when it fires, the window's count moves to a results map
//! (with the number of firings). At end of input every result is emitted; the truth is
//! computed from `ts` directly.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{assert_resumed_mid_run, assert_stopped_mid_run, config, StopMidRun};
use weir::prelude::*;

const KEYS: u64 = 10;
const WINDOW: u64 = 1_000;
/// Larger than the jitter, and than the lag between two splits a rescaled generator
/// subtask reads alternately (a batch of each, 2 × 4096 values apart at most).
const BOUND_MS: u64 = 10_000;

/// The event time of record `i`.
fn ts(i: u64) -> u64 {
    i + (i * 7919) % 100
}

/// `(key, window start, count, firings)`; firings is 0 for the live output of a timer.
type Row = (u64, u64, u64, u64);

/// What the test sees outside the state, summed over subtasks and attempts.
#[derive(Clone, Default)]
struct Probes {
    /// Records at or below the watermark when they arrived (must stay 0: the bound holds).
    late: Arc<AtomicU64>,
    /// Timers fired by a watermark below the maximum: event time advanced mid-stream.
    fired_mid_stream: Arc<AtomicU64>,
    /// Timers fired in all.
    fired: Arc<AtomicU64>,
    /// Windows opened (a window's first record).
    opened: Arc<AtomicU64>,
    /// Live outputs whose timestamp downstream was not the timer's time.
    bad_timestamps: Arc<AtomicU64>,
    /// Records processed (replays included).
    records: Arc<AtomicU64>,
}

#[derive(Clone)]
struct WindowCount {
    counts: Option<MapState<u64, u64>>,
    results: Option<MapState<u64, (u64, u64)>>,
    probes: Probes,
}

impl CheckpointedFunction for WindowCount {}

impl KeyedProcessFunction<u64, u64, Row> for WindowCount {
    fn open(&mut self, s: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.counts = Some(s.map_state("counts")?);
        self.results = Some(s.map_state("results")?);
        Ok(())
    }

    fn process(
        &mut self,
        i: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, Row>,
    ) -> Result<()> {
        let t = ctx
            .timestamp()
            .ok_or_else(|| Error::user("a record without a timestamp"))?;
        if t != ts(i) {
            return Err(Error::user(format!("record {i}: timestamp {t}")));
        }
        if ctx.time_domain().is_some() {
            return Err(Error::user("a time domain while processing a record"));
        }
        if ctx.current_watermark().is_some_and(|w| t <= w) {
            self.probes.late.fetch_add(1, Ordering::Relaxed);
        }
        self.probes.records.fetch_add(1, Ordering::SeqCst);
        let start = t / WINDOW * WINDOW;
        let counts = self.counts.as_ref().unwrap();
        let mut m = ctx.map(counts);
        let c = m.get(&start).copied().unwrap_or(0);
        m.put(start, c + 1);
        if c == 0 {
            self.probes.opened.fetch_add(1, Ordering::Relaxed);
        }
        ctx.register_event_time_timer(start + WINDOW - 1);
        // A timer registered and deleted never fires.
        ctx.register_event_time_timer(start + 1_000 * WINDOW);
        ctx.delete_event_time_timer(start + 1_000 * WINDOW);
        Ok(())
    }

    fn on_timer(
        &mut self,
        time: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, Row>,
    ) -> Result<()> {
        if ctx.time_domain() != Some(TimeDomain::EventTime) {
            return Err(Error::user("an event-time timer fired in another domain"));
        }
        let watermark = ctx.current_watermark().unwrap_or(0);
        if watermark < time || ctx.timestamp() != Some(time) {
            return Err(Error::user(format!(
                "timer {time} fired at watermark {watermark}, timestamp {:?}",
                ctx.timestamp()
            )));
        }
        let start = time + 1 - WINDOW;
        let count = ctx
            .map(self.counts.as_ref().unwrap())
            .remove(&start)
            .ok_or_else(|| Error::user(format!("timer {time} without its window")))?;
        let mut results = ctx.map(self.results.as_ref().unwrap());
        let fires = results.get(&start).map_or(0, |r| r.1);
        results.put(start, (count, fires + 1));
        self.probes.fired.fetch_add(1, Ordering::Relaxed);
        if watermark < u64::MAX {
            self.probes.fired_mid_stream.fetch_add(1, Ordering::Relaxed);
        }
        out.collect((*ctx.key(), start, count, 0));
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, Row>,
    ) -> Result<()> {
        let results = self.results.unwrap();
        ctx.apply_to_all_keys(&results, |c| {
            let key = *c.key();
            for (w, (count, fires)) in c.map(&results).entries() {
                out.collect((key, *w, *count, *fires));
            }
            Ok(())
        })
    }
}

/// Downstream of the windows: checks that the live output kept the timer's time as its
/// timestamp across the network, and passes everything on.
#[derive(Clone)]
struct CheckStamps(Probes);

impl CheckpointedFunction for CheckStamps {}

impl KeyedProcessFunction<u64, Row, Row> for CheckStamps {
    fn open(&mut self, _: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        Ok(())
    }
    fn process(
        &mut self,
        r: Row,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, Row>,
    ) -> Result<()> {
        if r.3 == 0 && ctx.timestamp() != Some(r.1 + WINDOW - 1) {
            self.0.bad_timestamps.fetch_add(1, Ordering::Relaxed);
        }
        out.collect(r);
        Ok(())
    }
}

fn run<S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    probes: &Probes,
) -> (Vec<Row>, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(BOUND_MS))
        .with_timestamp_assigner(|i: &u64, _| ts(*i));
    env.add_source_with_watermarks("gen", source, strategy)
        .uid("gen")
        .key_by(|i: &u64| i % KEYS)
        .process(WindowCount {
            counts: None,
            results: None,
            probes: probes.clone(),
        })
        .uid("windows")
        .key_by(|r: &Row| r.0)
        .process(CheckStamps(probes.clone()))
        .uid("check")
        .add_sink("collect", out.clone())
        .uid("sink");
    let r = env.execute();
    (out.take(), r)
}

/// The exact count of every (key, window) over records `0..n`.
fn truth(n: u64) -> HashMap<(u64, u64), u64> {
    truth_of(0..n)
}

/// The exact count of every (key, window) over `records`.
fn truth_of(records: impl Iterator<Item = u64>) -> HashMap<(u64, u64), u64> {
    let mut t = HashMap::new();
    for i in records {
        *t.entry((i % KEYS, ts(i) / WINDOW * WINDOW)).or_default() += 1;
    }
    t
}

/// The final results (rows emitted at end of input) equal the truth over `0..n`, each
/// window fired once.
fn assert_exact(rows: &[Row], n: u64) {
    assert_exact_over(rows, truth(n))
}

fn assert_exact_over(rows: &[Row], want: HashMap<(u64, u64), u64>) {
    let mut got = HashMap::new();
    for &(k, w, count, fires) in rows.iter().filter(|r| r.3 > 0) {
        assert_eq!(fires, 1, "key {k} window {w} fired {fires} times");
        assert!(
            got.insert((k, w), count).is_none(),
            "key {k} window {w} twice"
        );
    }
    assert_eq!(got.len(), want.len(), "windows");
    for (kw, c) in &want {
        assert_eq!(got.get(kw), Some(c), "key {} window {}", kw.0, kw.1);
    }
}

fn event_time_config(name: &str, dir: &std::path::Path, p: u32) -> JobConfig {
    let mut cfg = config(name, dir, p, CheckpointingMode::ExactlyOnce);
    cfg.auto_watermark_interval = Duration::from_millis(5);
    cfg
}

/// Out-of-order input under a bounded-out-of-orderness strategy: no record is late, every
/// window's timer fires once with the exact count, timers fire while the input is still
/// being read (not only at its end), and the output keeps the timers' timestamps.
#[test]
fn bounded_out_of_orderness_fires_event_time_timers_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let n = 100_000;
    let cfg = event_time_config("event-time", dir.path(), 2);
    let probes = Probes::default();
    let source = GeneratorSource::new(n).with_rate(Some(200_000.0));
    let (rows, r) = run(cfg, source, &probes);
    r.unwrap();
    assert_exact(&rows, n);
    let windows = truth(n).len() as u64;
    assert_eq!(probes.late.load(Ordering::Relaxed), 0, "late records");
    assert_eq!(probes.fired.load(Ordering::Relaxed), windows);
    assert_eq!(probes.opened.load(Ordering::Relaxed), windows);
    assert!(
        probes.fired_mid_stream.load(Ordering::Relaxed) > windows / 2,
        "most windows fire before the end of input: {} of {windows}",
        probes.fired_mid_stream.load(Ordering::Relaxed)
    );
    let live = rows.iter().filter(|r| r.3 == 0).count() as u64;
    assert_eq!(live, windows, "every firing emitted once");
    assert_eq!(probes.bad_timestamps.load(Ordering::Relaxed), 0);
}

/// Exactly-once in event time: 4 failures, each after a checkpoint of its attempt; the
/// restarts resume from checkpoints (watermarks start again from the minimum, restored
/// timers fire when it passes them) and every window fires exactly once in the state.
#[test]
fn event_time_timers_fire_exactly_once_under_failures() {
    for seed in [5, 6] {
        let dir = tempfile::tempdir().unwrap();
        let n = 100_000;
        let mut cfg = event_time_config("event-time-failures", dir.path(), 2);
        cfg.checkpointing.interval = Some(Duration::from_millis(10));
        cfg.failure_injection = Some(FailureInjection::after_checkpoints(4, seed, n / 4));
        let probes = Probes::default();
        let source = GeneratorSource::new(n).with_rate(Some(common::paced(100_000.0)));
        let (rows, r) = run(cfg, source, &probes);
        let r = r.unwrap();
        assert_eq!(r.injected_failures.unwrap().0, 4);
        weir::testing::assert_resumed(&r, n);
        assert_exact(&rows, n);
        assert_eq!(probes.late.load(Ordering::Relaxed), 0, "late records");
    }
}

/// Pending event-time timers are checkpointed by key group and fire after a restore at
/// another parallelism, once the new run's watermark passes them.
#[test]
fn pending_event_time_timers_survive_a_restore_at_another_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let n = 60_000;
    let cfg = event_time_config("event-time-rescale", dir.path(), 2);
    // The first run stops mid-input (no restart) once a checkpoint taken after 2 000
    // records per subtask completed: the watermark (at most 4 099 - 10 001) never
    // reached a timer, so every window opened so far is pending in that checkpoint.
    let mut first = cfg.clone();
    first.restart = RestartStrategy::None;
    let probes = Probes::default();
    let (_, r) = run(
        first,
        StopMidRun::new(GeneratorSource::new(n), 2_000),
        &probes,
    );
    assert_stopped_mid_run(r);
    let opened_first = probes.opened.load(Ordering::Relaxed);
    assert!(opened_first >= 4 * KEYS, "windows opened: {opened_first}");
    assert_eq!(
        probes.fired.load(Ordering::Relaxed),
        0,
        "a timer fired in the first run: the premise (timers pending) failed"
    );
    let (mid, _) = common::newest_checkpoint(dir.path(), "event-time-rescale");
    for p in [3, 1] {
        let mut c = cfg.clone();
        c.parallelism = p;
        c.restore = RestoreFrom::Path(mid.clone());
        let probes = Probes::default();
        let (rows, r) = run(c, GeneratorSource::new(n), &probes);
        assert_resumed_mid_run(&r.unwrap(), &mid, n);
        assert_exact(&rows, n);
        assert_eq!(
            probes.late.load(Ordering::Relaxed),
            0,
            "parallelism {p}: late"
        );
        // The windows of the first run's records were restored, not opened again.
        let windows = truth(n).len() as u64;
        assert_eq!(
            opened_first + probes.opened.load(Ordering::Relaxed),
            windows,
            "parallelism {p}: windows opened in the checkpoint and after it"
        );
        assert_eq!(
            probes.fired.load(Ordering::Relaxed),
            windows,
            "parallelism {p}"
        );
    }
}

/// Subtask 0 emits `0..n` at a rate; subtask 1 emits nothing and stays open (idle, not
/// finished) until the window operator has processed every record subtask 0 emitted: a
/// source split without data. When it finishes it records in `fired_before_end` how many
/// timers had fired until then, while it was open and idle.
///
/// With `slow_until_fired_mid_stream`, subtask 0 emits the second half of its input one
/// record a millisecond until a timer has fired mid-stream: its watermark keeps coming
/// (it never looks idle itself) for as long as that takes, instead of for as long as its
/// input happens to last on this machine.
#[derive(Clone)]
struct OneSplitIdle {
    inner: GeneratorSource,
    subtask: u32,
    probes: Probes,
    /// The records subtask 0 emits.
    records: u64,
    emitted: u64,
    slow_until_fired_mid_stream: bool,
    fired_before_end: Arc<AtomicU64>,
}

impl CheckpointedFunction for OneSplitIdle {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        // Subtask 0 reads the even numbers (its stride of the sequence), subtask 1 nothing.
        self.subtask = ctx.subtask_index();
        self.inner.initialize_state(ctx)
    }
}

impl SourceFunction<u64> for OneSplitIdle {
    fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourceStatus> {
        if self.subtask == 0 {
            let slow = self.slow_until_fired_mid_stream
                && self.emitted >= self.records / 2
                && self.probes.fired_mid_stream.load(Ordering::SeqCst) == 0;
            if slow {
                std::thread::sleep(Duration::from_millis(1));
            }
            let before = out.len();
            let status = self.inner.poll(out, if slow { 1 } else { max })?;
            self.emitted += (out.len() - before) as u64;
            return Ok(status);
        }
        // Finish once everything subtask 0 sent has been processed, so the watermark was
        // held back (or not) over the whole input.
        if self.probes.records.load(Ordering::SeqCst) >= self.records {
            let fired = self.probes.fired.load(Ordering::SeqCst);
            self.fired_before_end.store(fired, Ordering::SeqCst);
            return Ok(SourceStatus::Finished);
        }
        Ok(SourceStatus::Idle)
    }
}

/// An idle source subtask holds back every downstream watermark (timers fire only at the
/// end of input) — unless the strategy has an idleness timeout, which marks it idle so the
/// watermark follows the subtask that has data.
#[test]
fn an_idle_split_holds_back_the_watermark_unless_marked_idle() {
    for idleness in [None, Some(Duration::from_millis(20))] {
        let dir = tempfile::tempdir().unwrap();
        let n = 30_000;
        let mut cfg = event_time_config("event-time-idle", dir.path(), 2);
        cfg.checkpointing.interval = None;
        let probes = Probes::default();
        let fired_before_end = Arc::new(AtomicU64::new(u64::MAX));
        let source = OneSplitIdle {
            inner: GeneratorSource::new(n).with_rate(Some(60_000.0)),
            subtask: 0,
            probes: probes.clone(),
            records: n / 2,
            emitted: 0,
            slow_until_fired_mid_stream: idleness.is_some(),
            fired_before_end: fired_before_end.clone(),
        };
        let mut strategy =
            WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(BOUND_MS))
                .with_timestamp_assigner(|i: &u64, _| ts(*i));
        if let Some(t) = idleness {
            strategy = strategy.with_idleness(t);
        }
        let env = StreamEnvironment::new(cfg);
        let out = CollectSink::new();
        env.add_source_with_watermarks("gen", source, strategy)
            .key_by(|i: &u64| i % KEYS)
            .process(WindowCount {
                counts: None,
                results: None,
                probes: probes.clone(),
            })
            .add_sink("collect", out.clone());
        env.execute().unwrap();
        assert_exact_over(&out.take(), truth_of((0..n).step_by(2)));
        let mid = probes.fired_mid_stream.load(Ordering::Relaxed);
        match idleness {
            None => assert_eq!(
                fired_before_end.load(Ordering::SeqCst),
                0,
                "the idle split held the watermark at its minimum over the whole input"
            ),
            Some(_) => assert!(
                mid > 0,
                "marked idle, it no longer holds the watermark back"
            ),
        }
    }
}

/// Subtask 0 reads ten times as fast as subtask 1 (100 against 10 records a poll, a poll
/// a millisecond at most), so without alignment it leads by most of the input however
/// loaded the machine is; it records the largest lead its last record had over subtask 1's.
#[derive(Clone)]
struct Lopsided {
    inner: GeneratorSource,
    subtask: usize,
    last: Arc<[AtomicU64; 2]>,
    max_lead: Arc<AtomicU64>,
}

impl CheckpointedFunction for Lopsided {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.subtask = ctx.subtask_index() as usize;
        self.inner.initialize_state(ctx)
    }
}

impl SourceFunction<u64> for Lopsided {
    fn poll(&mut self, out: &mut Vec<u64>, _: usize) -> Result<SourceStatus> {
        let before = out.len();
        let status = self
            .inner
            .poll(out, if self.subtask == 0 { 100 } else { 10 })?;
        if let Some(&i) = out[before..].last() {
            self.last[self.subtask].store(i, Ordering::SeqCst);
        }
        if self.subtask == 0 && status != SourceStatus::Finished {
            let lead = self.last[0]
                .load(Ordering::SeqCst)
                .saturating_sub(self.last[1].load(Ordering::SeqCst));
            self.max_lead.fetch_max(lead, Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_millis(1));
        Ok(status)
    }
}

/// Watermark alignment: the fast split pauses whenever its watermark is more than the
/// drift ahead of the slow one's, so its lead stays near the drift; without alignment it
/// runs off to the end of its input.
#[test]
fn watermark_alignment_pauses_the_split_that_runs_ahead() {
    let n = 40_000;
    let mut leads = Vec::new();
    for aligned in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = event_time_config("event-time-alignment", dir.path(), 2);
        cfg.checkpointing.interval = None;
        let max_lead = Arc::new(AtomicU64::new(0));
        let source = Lopsided {
            inner: GeneratorSource::new(n),
            subtask: 0,
            last: Arc::default(),
            max_lead: max_lead.clone(),
        };
        let mut strategy =
            WatermarkStrategy::for_monotonous_timestamps().with_timestamp_assigner(|i: &u64, _| *i);
        if aligned {
            strategy = strategy.with_watermark_alignment("g", Duration::from_millis(500));
        }
        let env = StreamEnvironment::new(cfg);
        env.add_source_with_watermarks("gen", source, strategy)
            .add_sink("discard", DiscardSink);
        env.execute().unwrap();
        leads.push(max_lead.load(Ordering::SeqCst));
    }
    let (free, aligned) = (leads[0], leads[1]);
    eprintln!("largest lead of the fast split: {free} free, {aligned} aligned");
    assert!(
        free > 15_000,
        "without alignment the fast split runs ahead: {free}"
    );
    assert!(
        aligned < 8_000,
        "with alignment its lead stays near the drift: {aligned}"
    );
}
