//! Shared helpers of the engine's integration tests: a keyed count job over the generator.

#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use weir::prelude::*;

/// Counts events per key in value state; emits every `(key, count)` at end of input.
#[derive(Clone, Default)]
pub struct CountPerKey {
    count: Option<ValueState<u64>>,
}

impl CheckpointedFunction for CountPerKey {}

impl KeyedProcessFunction<u64, u64, (u64, u64)> for CountPerKey {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.count = Some(states.value_state("count")?);
        Ok(())
    }
    fn process(
        &mut self,
        _event: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        *ctx.get_mut_or_insert_with(self.count.unwrap(), || 0) += 1;
        Ok(())
    }
    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        for (k, v) in ctx.entries(self.count.unwrap()) {
            out.collect((*k, *v));
        }
        Ok(())
    }
}

/// Numbers each key's records 1, 2, 3, … in keyed state and emits `(key, number)`: any
/// lost or duplicated output shows up as a gap or a repeat in a key's numbers.
#[derive(Clone, Default)]
pub struct Sequence {
    seq: Option<ValueState<u64>>,
}

impl CheckpointedFunction for Sequence {}

impl KeyedProcessFunction<u64, u64, (u64, u64)> for Sequence {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.seq = Some(states.value_state("seq")?);
        Ok(())
    }
    fn process(
        &mut self,
        _: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let seq = ctx.get_mut_or_insert_with(self.seq.unwrap(), || 0);
        *seq += 1;
        let seq = *seq;
        out.collect((*ctx.key(), seq));
        Ok(())
    }
}

/// The exact count of key `k` among `0..n` with `key = i % keys`.
pub fn expected(n: u64, keys: u64) -> HashMap<u64, u64> {
    (0..keys.min(n))
        .map(|k| (k, n / keys + u64::from(k < n % keys)))
        .collect()
}

/// Settings for a test job.
pub fn config(
    name: &str,
    dir: &std::path::Path,
    parallelism: u32,
    mode: CheckpointingMode,
) -> JobConfig {
    let mut c = JobConfig::new(name);
    c.parallelism = parallelism;
    c.checkpoint_dir = dir.to_path_buf();
    c.checkpointing.interval = Some(Duration::from_millis(20));
    c.checkpointing.mode = mode;
    c.checkpointing.tolerable_failures = 100;
    c.restart = RestartStrategy::FixedDelay {
        attempts: 1000,
        delay: Duration::from_millis(1),
    };
    c
}

/// Two generator sources (a multi-input keyed stage: each keyed subtask reads 2×p
/// channels), keyed count, collected. Returns the counts and the job result.
pub fn run_keyed_count(
    config: JobConfig,
    n: u64,
    keys: u64,
    rate: Option<f64>,
) -> Result<(HashMap<u64, u64>, JobResult)> {
    let env = StreamEnvironment::new(config);
    let out = CollectSink::new();
    let a = env
        .add_source("events-a", GeneratorSource::new(n / 2).with_rate(rate))
        .uid("events-a");
    let b = env
        .add_source("events-b", GeneratorSource::new(n - n / 2).with_rate(rate))
        .uid("events-b")
        .map(move |i| i + n / 2);
    a.union(b)
        .key_by(move |i: &u64| i % keys)
        .process(CountPerKey::default())
        .uid("count")
        .add_sink("collect", out.clone())
        .uid("sink");
    let result = env.execute()?;
    let mut counts = HashMap::new();
    for (k, c) in out.take() {
        assert!(counts.insert(k, c).is_none(), "key {k} emitted twice");
    }
    Ok((counts, result))
}
