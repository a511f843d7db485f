//! Shared helpers of the engine's integration tests: a keyed count job over the generator.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use weir::prelude::*;
#[allow(unused_imports)]
use weir::storage::backend::StorageBackend;

use weir::testing::{Admit, Gated, SourceGate};
#[allow(unused_imports)] // each test crate uses a different subset
pub use weir::testing::{CountPerKey, Sequence};

#[path = "support/moto.rs"]
pub mod moto;
#[path = "support/test_checkpoints.rs"]
mod test_checkpoints;
#[allow(unused_imports)]
pub use test_checkpoints::*;

#[path = "support/recovery.rs"]
pub mod recovery;

#[path = "support/joins.rs"]
pub mod joins;

#[path = "support/marked.rs"]
pub mod marked;

#[path = "support/upgrade.rs"]
pub mod upgrade;

#[path = "support/stop_mid_run.rs"]
mod stop_mid_run;
pub use stop_mid_run::*;

/// The names directly under `<checkpoint_dir(dir)>/<job>` (checkpoint folders, the lock
/// or lease), on whichever storage the checkpoints are.
pub fn job_folder_entries(dir: &Path, job: &str) -> Vec<String> {
    let backend = weir::storage::open_backend(&checkpoint_dir(dir).join(job)).unwrap();
    let mut names = backend.list("").unwrap();
    names.sort();
    names
}

/// An environment for a hand-computed job `name` with its checkpoints under `dir` and
/// otherwise default settings.
pub fn env_in(name: &str, dir: &Path) -> StreamEnvironment {
    let mut cfg = JobConfig::new(name);
    cfg.checkpoint_dir = checkpoint_dir(dir);
    StreamEnvironment::new(cfg)
}

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
    c.checkpoint_dir = checkpoint_dir(dir);
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
    keyed_count_with(config, n, keys, |len| {
        GeneratorSource::new(len).with_rate(rate)
    })
}

/// [`run_keyed_count`] whose sources pause for a checkpoint after every `every` records
/// per subtask ([`PauseForCheckpoints`]): mid-run checkpoints certain on any machine.
pub fn run_keyed_count_pausing(
    config: JobConfig,
    n: u64,
    keys: u64,
    rate: Option<f64>,
    every: u64,
) -> Result<(HashMap<u64, u64>, JobResult)> {
    keyed_count_with(config, n, keys, |len| {
        PauseForCheckpoints::new(GeneratorSource::new(len).with_rate(rate), every)
    })
}

/// [`run_keyed_count`] whose sources each stop mid-input ([`StopMidRun`]) after `stop_at`
/// records per subtask: the job fails (with [`RestartStrategy::None`]) leaving a mid-run
/// checkpoint behind.
pub fn run_keyed_count_stopping(
    config: JobConfig,
    n: u64,
    keys: u64,
    stop_at: u64,
) -> Result<(HashMap<u64, u64>, JobResult)> {
    keyed_count_with(config, n, keys, |len| {
        StopMidRun::new(GeneratorSource::new(len), stop_at)
    })
}

/// The job of [`run_keyed_count`] over the sources `source(len)` makes (the first of
/// `n / 2` records, the second of the rest).
fn keyed_count_with<S: SourceFunction<u64>>(
    config: JobConfig,
    n: u64,
    keys: u64,
    source: impl Fn(u64) -> S,
) -> Result<(HashMap<u64, u64>, JobResult)> {
    let env = StreamEnvironment::new(config);
    let out = CollectSink::new();
    let a = env.add_source("events-a", source(n / 2)).uid("events-a");
    let b = env
        .add_source("events-b", source(n - n / 2))
        .uid("events-b")
        .map(move |i| i + n / 2);
    a.union(b)
        .key_by(move |i: &u64| i % keys)
        .process(CountPerKey::default())
        .uid("count")
        .add_sink("collect", out.clone())
        .uid("sink");
    let result = env.execute()?;
    Ok((final_counts(out.take()), result))
}

/// The final `(key, count)` pairs a keyed count emitted at the end of its input, as a map;
/// a key emitted twice fails the test (its count would be doubled or stale).
pub fn final_counts(pairs: Vec<(u64, u64)>) -> HashMap<u64, u64> {
    let mut counts = HashMap::new();
    for (k, c) in pairs {
        assert!(counts.insert(k, c).is_none(), "key {k} emitted twice");
    }
    counts
}

/// A source that pauses mid-input for checkpoints, so a test that needs checkpoints to
/// complete while the job runs (commits along the way, state with progress) gets them by
/// construction, not because the input happened to outlast them: after every `every`
/// records (per subtask, in this attempt), it holds (emits nothing, still answering
/// barriers) until a checkpoint snapshotted during the hold has completed — and until
/// `also()` holds, for a test that needs something more to happen meanwhile.
#[derive(Clone)]
pub struct PauseForCheckpoints {
    every: u64,
    emitted: u64,
    /// Holding at the boundary `emitted`; `Some(id)` once checkpoint `id` snapshotted it.
    holding: Option<Option<u64>>,
    released: bool,
    also: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl PauseForCheckpoints {
    pub fn new<S>(inner: S, every: u64) -> Gated<S, Self> {
        Self::until(inner, every, || true)
    }

    /// [`PauseForCheckpoints::new`] whose holds also last until `also()` holds.
    pub fn until<S>(
        inner: S,
        every: u64,
        also: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Gated<S, Self> {
        assert!(every > 0);
        let gate = PauseForCheckpoints {
            every,
            emitted: 0,
            holding: None,
            released: false,
            also: Arc::new(also),
        };
        Gated::new(inner, gate)
    }
}

impl SourceGate for PauseForCheckpoints {
    fn initialize(&mut self, _: &InitContext) {
        (self.emitted, self.holding, self.released) = (0, None, false);
    }
    fn snapshotted(&mut self, id: u64) {
        if let Some(None) = self.holding {
            self.holding = Some(Some(id));
        }
    }
    fn completed(&mut self, id: u64) {
        if self.holding.flatten().is_some_and(|h| id >= h) {
            self.released = true;
        }
    }
    fn admit(&mut self) -> Result<Admit> {
        if self.holding.is_some() {
            if !(self.released && (self.also)()) {
                return Ok(Admit::HOLD);
            }
            (self.holding, self.released) = (None, false);
        }
        Ok(Admit::Up((self.every - self.emitted % self.every) as usize))
    }
    fn polled(&mut self, emitted: u64, status: SourceStatus) -> Result<SourceStatus> {
        self.emitted += emitted;
        if status != SourceStatus::Finished
            && emitted > 0
            && self.emitted.is_multiple_of(self.every)
        {
            self.holding = Some(None);
        }
        Ok(status)
    }
}

/// The newest complete checkpoint of job `name` under `dir` (the one `RestoreFrom::Latest`
/// would pick, if none is damaged) and the records its sources had emitted.
pub fn newest_checkpoint(dir: &Path, name: &str) -> (PathBuf, u64) {
    let job = checkpoint_dir(dir).join(name);
    let backend = weir::storage::open_backend(&job).unwrap();
    let id = job_folder_entries(dir, name)
        .iter()
        .filter_map(|n| n.strip_prefix("chk-")?.parse::<u64>().ok())
        .filter(|id| backend.size(&format!("chk-{id}/_metadata")).is_ok())
        .max()
        .expect("a complete checkpoint");
    let newest = job.join(format!("chk-{id}"));
    let sources = weir::inspect::source_progress(&newest).unwrap();
    let records = sources.iter().map(|s| s.records).sum();
    (newest, records)
}

/// Asserts a run restored `from` (taken mid-run) as its only attempt, and read exactly the
/// records the checkpoint had not covered of `total`: it resumed, neither starting over
/// nor restoring the end of the input.
pub fn assert_resumed_mid_run(result: &JobResult, from: &Path, total: u64) {
    weir::testing::assert_resumed(result, total);
    assert_eq!(result.history.len(), 1, "{:#?}", result.history);
    let r = result.history[0].restored.as_ref().unwrap();
    assert_eq!(r.path, from, "restored another checkpoint");
    assert!(
        r.source_records > 0 && r.source_records < total,
        "checkpoint {} is not mid-run: it covers {} of {total} records",
        r.checkpoint_id,
        r.source_records
    );
}

/// A punctuated watermark generator for hand-written event lists: a record whose key (the
/// first field) is 99 is a marker carrying the watermark at its timestamp, so a test
/// decides exactly when each window fires.
pub struct Markers;

impl WatermarkGenerator<(u64, u64)> for Markers {
    fn on_event(&mut self, e: &(u64, u64), ts: u64, out: &mut WatermarkOutput) {
        if e.0 == 99 {
            out.emit_watermark(ts);
        }
    }
    fn on_periodic_emit(&mut self, _: &mut WatermarkOutput) {}
}

impl WatermarkGenerator<(u64, u64, u64)> for Markers {
    fn on_event(&mut self, e: &(u64, u64, u64), ts: u64, out: &mut WatermarkOutput) {
        if e.0 == 99 {
            out.emit_watermark(ts);
        }
    }
    fn on_periodic_emit(&mut self, _: &mut WatermarkOutput) {}
}
