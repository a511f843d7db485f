//! Shared helpers of the engine's integration tests: a keyed count job over the generator.

#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use weir::prelude::*;

#[allow(unused_imports)] // each test crate uses a different subset
pub use weir::testing::{CountPerKey, Sequence};

/// The exact count of key `k` among `0..n` with `key = i % keys`.
pub fn expected(n: u64, keys: u64) -> HashMap<u64, u64> {
    weir::testing::expected_counts(n, keys)
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
