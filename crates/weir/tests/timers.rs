//! Processing-time timers: fired once per (key, timestamp) in the committed state, across
//! injected failures and restores at another parallelism.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{assert_resumed_mid_run, assert_stopped_mid_run, config, StopMidRun};
use weir::prelude::*;
use weir::testing::{Gated, HoldOpen};

const KEYS: u64 = 40;

/// On a key's first event, registers two timers `delays` ms ahead (and the first one again,
/// which must be deduplicated); counts firings and records in value state; emits
/// `(key, fired, records)` at end of input. `arms` and `firings` count, across subtasks and
/// attempts, the keys armed and the timers fired (what the test sees outside the state).
#[derive(Clone)]
struct TwoTimers {
    armed: Option<ValueState<bool>>,
    fired: Option<ValueState<u64>>,
    seen: Option<ValueState<u64>>,
    delays: (u64, u64),
    arms: Arc<AtomicU64>,
    firings: Arc<AtomicU64>,
}

impl TwoTimers {
    fn new(delays: (u64, u64)) -> Self {
        TwoTimers {
            armed: None,
            fired: None,
            seen: None,
            delays,
            arms: Arc::default(),
            firings: Arc::default(),
        }
    }
}

impl CheckpointedFunction for TwoTimers {}

impl KeyedProcessFunction<u64, u64, (u64, u64, u64)> for TwoTimers {
    fn open(&mut self, s: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.armed = Some(s.value_state("armed")?);
        self.fired = Some(s.value_state("fired")?);
        self.seen = Some(s.value_state("seen")?);
        Ok(())
    }

    fn process(
        &mut self,
        _: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, (u64, u64, u64)>,
    ) -> Result<()> {
        *ctx.get_mut_or_insert_with(self.seen.unwrap(), || 0) += 1;
        if ctx.get(self.armed.unwrap()).is_none() {
            ctx.set(self.armed.unwrap(), true);
            self.arms.fetch_add(1, Ordering::Relaxed);
            let now = ctx.current_processing_time();
            ctx.register_processing_time_timer(now + self.delays.0);
            ctx.register_processing_time_timer(now + self.delays.0);
            ctx.register_processing_time_timer(now + self.delays.1);
            ctx.register_processing_time_timer(now + 1_000_000);
            ctx.delete_processing_time_timer(now + 1_000_000);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        _ts: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, (u64, u64, u64)>,
    ) -> Result<()> {
        *ctx.get_mut_or_insert_with(self.fired.unwrap(), || 0) += 1;
        self.firings.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64, u64)>,
    ) -> Result<()> {
        let (fired, seen) = (self.fired.unwrap(), self.seen.unwrap());
        ctx.apply_to_all_keys(&seen, |c| {
            let f = c.get(fired).copied().unwrap_or(0);
            out.collect((*c.key(), f, *c.get(seen).unwrap()));
            Ok(())
        })
    }
}

/// Per key: timers fired and records counted.
type Fired = HashMap<u64, (u64, u64)>;

fn run_over<S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    f: TwoTimers,
) -> (Fired, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    env.add_source("gen", source)
        .uid("gen")
        .key_by(|i: &u64| i % KEYS)
        .process(f)
        .uid("timers")
        .add_sink("collect", out.clone())
        .uid("sink");
    let r = env.execute();
    let mut fired = HashMap::new();
    for (k, f, seen) in out.take() {
        assert!(
            fired.insert(k, (f, seen)).is_none(),
            "key {k} emitted twice"
        );
    }
    (fired, r)
}

/// Every key fired its two timers once, and counted exactly its records of `0..n`.
fn assert_two_each(fired: &Fired, n: u64) {
    assert_eq!(fired.len() as u64, KEYS);
    for (k, (f, seen)) in fired {
        assert_eq!(*f, 2, "key {k} fired {f} times");
        assert_eq!(*seen, n / KEYS, "key {k} counted {seen} records");
    }
}

/// Each key's two timers fire exactly once in the final state despite 4 failures, each
/// after a checkpoint of its attempt (so restarts restore pending and fired timers).
#[test]
fn timers_fire_once_per_key_and_time_under_failures() {
    for seed in [3, 4] {
        let dir = tempfile::tempdir().unwrap();
        let n = 100_000;
        let mut cfg = config("timers", dir.path(), 2, CheckpointingMode::ExactlyOnce);
        cfg.checkpointing.interval = Some(Duration::from_millis(10));
        cfg.failure_injection = Some(FailureInjection::after_checkpoints(4, seed, n / 4));
        let source = GeneratorSource::new(n).with_rate(Some(100_000.0));
        let (fired, r) = run_over(cfg, source, TwoTimers::new((20, 60)));
        let r = r.unwrap();
        assert_eq!(r.injected_failures.unwrap().0, 4);
        weir::testing::assert_resumed(&r, n);
        assert_two_each(&fired, n);
    }
}

/// Pending timers are checkpointed and fire after a restore at another parallelism.
#[test]
fn pending_timers_survive_a_restore_at_another_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let n = 100_000;
    let mut cfg = config(
        "timers-rescale",
        dir.path(),
        2,
        CheckpointingMode::ExactlyOnce,
    );
    cfg.checkpointing.interval = Some(Duration::from_millis(5));
    // The first run stops (no restart) mid-input once a checkpoint taken after 2 000
    // records per subtask (every key seen, every key armed) completed. Its timers are due
    // 1.5 s and 2 s after each key's first record: whatever the load, still pending then.
    let mut first = cfg.clone();
    first.restart = RestartStrategy::None;
    let f = TwoTimers::new((1_500, 2_000));
    let (arms, firings) = (f.arms.clone(), f.firings.clone());
    let (_, r) = run_over(first, StopMidRun::new(GeneratorSource::new(n), 2_000), f);
    assert_stopped_mid_run(r);
    assert_eq!(arms.load(Ordering::Relaxed), KEYS, "every key armed once");
    assert_eq!(
        firings.load(Ordering::Relaxed),
        0,
        "a timer fired before the first run stopped: the test's premise (timers pending in \
         its checkpoint) failed"
    );
    let (mid, _) = common::newest_checkpoint(dir.path(), "timers-rescale");
    for p in [3, 1] {
        let mut c = cfg.clone();
        c.parallelism = p;
        c.restore = RestoreFrom::Path(mid.clone());
        let f = TwoTimers::new((1_500, 2_000));
        let (arms, firings) = (f.arms.clone(), f.firings.clone());
        // Processing-time timers do not fire at end of input: a run restored with timers
        // pending stays open until they fired.
        let fired = firings.clone();
        let gate = HoldOpen::until(move || fired.load(Ordering::Relaxed) >= 2 * KEYS);
        let source = Gated::new(GeneratorSource::new(n), gate);
        let (fired, r) = run_over(c, source, f);
        assert_resumed_mid_run(&r.unwrap(), &mid, n);
        assert_eq!(
            arms.load(Ordering::Relaxed),
            0,
            "parallelism {p}: keys armed again (their state was not restored)"
        );
        assert_eq!(firings.load(Ordering::Relaxed), 2 * KEYS, "parallelism {p}");
        assert_two_each(&fired, n);
    }
}
