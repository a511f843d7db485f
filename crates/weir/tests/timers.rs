//! Processing-time timers: fired once per (key, timestamp) in the committed state, across
//! injected failures and restores at another parallelism.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::config;
use weir::prelude::*;

const KEYS: u64 = 40;

/// On a key's first event, registers two timers (and the first one again, which must be
/// deduplicated); counts firings in value state; emits `(key, fired)` at end of input.
#[derive(Clone, Default)]
struct TwoTimers {
    armed: Option<ValueState<bool>>,
    fired: Option<ValueState<u64>>,
    /// Fail the task on the first record after a checkpoint completed (to end a run with a
    /// checkpoint whose timers are still pending).
    fail_after_checkpoint: bool,
    checkpointed: bool,
}

impl CheckpointedFunction for TwoTimers {
    fn notify_checkpoint_complete(&mut self, _: u64) -> Result<()> {
        self.checkpointed = true;
        Ok(())
    }
}

impl KeyedProcessFunction<u64, u64, (u64, u64)> for TwoTimers {
    fn open(&mut self, s: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.armed = Some(s.value_state("armed")?);
        self.fired = Some(s.value_state("fired")?);
        Ok(())
    }

    fn process(
        &mut self,
        _: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        if self.fail_after_checkpoint && self.checkpointed {
            return Err(Error::user("deliberate failure after a checkpoint"));
        }
        if ctx.get(self.armed.unwrap()).is_none() {
            ctx.set(self.armed.unwrap(), true);
            let now = ctx.current_processing_time();
            ctx.register_processing_time_timer(now + 20);
            ctx.register_processing_time_timer(now + 20);
            ctx.register_processing_time_timer(now + 60);
            ctx.register_processing_time_timer(now + 1_000_000);
            ctx.delete_processing_time_timer(now + 1_000_000);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        _ts: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        *ctx.get_mut_or_insert_with(self.fired.unwrap(), || 0) += 1;
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        for (k, _) in ctx.entries(self.armed.unwrap()) {
            out.collect((*k, 0));
        }
        for (k, f) in ctx.entries(self.fired.unwrap()) {
            out.collect((*k, *f));
        }
        Ok(())
    }
}

fn run(cfg: JobConfig, n: u64, rate: Option<f64>) -> (HashMap<u64, u64>, JobResult) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    env.add_source("gen", GeneratorSource::new(n).with_rate(rate))
        .uid("gen")
        .key_by(|i: &u64| i % KEYS)
        .process(TwoTimers::default())
        .uid("timers")
        .add_sink("collect", out.clone())
        .uid("sink");
    let r = env.execute().unwrap();
    let mut fired = HashMap::new();
    for (k, f) in out.take() {
        *fired.entry(k).or_insert(0) += f;
    }
    (fired, r)
}

fn assert_two_each(fired: &HashMap<u64, u64>) {
    assert_eq!(fired.len() as u64, KEYS);
    for (k, f) in fired {
        assert_eq!(*f, 2, "key {k} fired {f} times");
    }
}

/// Each key's two timers fire exactly once in the final state despite 4 failures.
#[test]
fn timers_fire_once_per_key_and_time_under_failures() {
    for seed in [3, 4] {
        let dir = tempfile::tempdir().unwrap();
        let n = 100_000;
        let mut cfg = config("timers", dir.path(), 2, CheckpointingMode::ExactlyOnce);
        cfg.checkpointing.interval = Some(Duration::from_millis(10));
        cfg.failure_injection = Some(FailureInjection {
            failures: 4,
            seed,
            horizon: n / 4,
            after_checkpoint: false,
        });
        let (fired, r) = run(cfg, n, Some(200_000.0));
        assert_eq!(r.injected_failures.unwrap().0, 4);
        assert_two_each(&fired);
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
    // The first run fails (no restart) right after its first checkpoint, taken a few
    // milliseconds in: the timers registered on each key's first event are pending in it.
    cfg.restart = RestartStrategy::None;
    let env_cfg = cfg.clone();
    let env = StreamEnvironment::new(env_cfg);
    env.add_source("gen", GeneratorSource::new(n).with_rate(Some(100_000.0)))
        .uid("gen")
        .key_by(|i: &u64| i % KEYS)
        .process(TwoTimers {
            fail_after_checkpoint: true,
            ..Default::default()
        })
        .uid("timers")
        .add_sink("discard", DiscardSink)
        .uid("sink");
    let first = env.execute();
    assert!(
        first.is_err(),
        "the first run fails by design: {:?}",
        first.map(|r| r.checkpoints.len())
    );
    for p in [3, 1] {
        let mut c = cfg.clone();
        c.parallelism = p;
        c.restart = RestartStrategy::FixedDelay {
            attempts: 3,
            delay: Duration::from_millis(1),
        };
        c.restore = RestoreFrom::Latest;
        let (fired, r) = run(c, n, Some(400_000.0));
        assert!(r.restored_from.is_some());
        assert_two_each(&fired);
    }
}
