//! A job spread over workers hosted in one process: every channel between two workers
//! crosses their exchanges (real tonic streams on 127.0.0.1), while one executor drives
//! every task and its checkpoints. The results must equal the single-process ones exactly.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::prelude::*;
use crate::runtime::exchange::{Exchange, ExchangeConfig, WorkerId};
use crate::runtime::placement::Hosting;

/// Emits what `inner` emits up to `hold_at` records, then holds until a checkpoint it took
/// while holding completed, then emits the rest: a checkpoint lands mid-input whatever the
/// machine's speed.
#[derive(Clone)]
struct HoldUntilCheckpoint {
    inner: GeneratorSource,
    hold_at: u64,
    emitted: u64,
    held_in: Option<u64>,
    released: bool,
}

impl CheckpointedFunction for HoldUntilCheckpoint {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.inner.initialize_state(ctx)
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        if self.emitted >= self.hold_at && self.held_in.is_none() {
            self.held_in = Some(ctx.checkpoint_id());
        }
        self.inner.snapshot_state(ctx)
    }
    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<()> {
        if self.held_in.is_some_and(|h| id >= h) {
            self.released = true;
        }
        self.inner.notify_checkpoint_complete(id)
    }
}

impl SourceFunction<u64> for HoldUntilCheckpoint {
    fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourceStatus> {
        let max = if self.released {
            max
        } else {
            let left = self.hold_at.saturating_sub(self.emitted) as usize;
            if left == 0 {
                return Ok(SourceStatus::Idle);
            }
            max.min(left)
        };
        let before = out.len();
        let status = self.inner.poll(out, max)?;
        self.emitted += (out.len() - before) as u64;
        Ok(status)
    }
}

const N: u64 = 200_000;
const KEYS: u64 = 97;

/// Keyed count at parallelism 2: per key the running count (its last value is the count).
fn keyed_count(env: &StreamEnvironment, out: CollectSink<(u64, u64)>) {
    env.register_type::<(u64, u64)>();
    let source = HoldUntilCheckpoint {
        inner: GeneratorSource::new(N),
        hold_at: N / 4,
        emitted: 0,
        held_in: None,
        released: false,
    };
    env.add_source("numbers", source)
        .uid("numbers")
        .map(|i| (i % KEYS, 1u64))
        .key_by(|p: &(u64, u64)| p.0)
        .reduce(|a, b| (a.0, a.1 + b.1))
        .uid("count")
        .add_sink("collect", out)
        .uid("sink");
}

fn config(name: &str, dir: &std::path::Path) -> JobConfig {
    let mut c = JobConfig::new(name);
    c.parallelism = 2;
    c.checkpoint_dir = dir.to_path_buf();
    c.checkpointing.interval = Some(Duration::from_millis(20));
    c.restart = RestartStrategy::None;
    // A safety net: a checkpoint that hangs fails the test within minutes, not ten.
    c.checkpointing.timeout = Duration::from_secs(90);
    c
}

fn final_counts(pairs: Vec<(u64, u64)>) -> HashMap<u64, u64> {
    let mut counts = HashMap::new();
    for (k, c) in pairs {
        let e = counts.entry(k).or_insert(0);
        *e = c.max(*e);
    }
    counts
}

/// The truth: the keyed count run in one process (job `name`, checkpoints under `dir`).
fn single_process_counts(name: &str, dir: &std::path::Path) -> HashMap<u64, u64> {
    let env = StreamEnvironment::new(config(name, dir));
    let out = CollectSink::new();
    keyed_count(&env, out.clone());
    env.execute().unwrap();
    final_counts(out.take())
}

fn exchange(worker: WorkerId, token: &str) -> Arc<Exchange> {
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut config = ExchangeConfig::new(worker, listen, token);
    // A loaded machine must not count as a lost peer here.
    config.keepalive_timeout = Duration::from_secs(600);
    Arc::new(Exchange::start(config).unwrap())
}

/// Workers 1..=n, every lower id dialling every higher one.
fn workers(n: WorkerId) -> Vec<Arc<Exchange>> {
    let xs: Vec<Arc<Exchange>> = (1..=n).map(|w| exchange(w, "secret")).collect();
    for a in &xs {
        for b in xs.iter().filter(|b| b.worker() > a.worker()) {
            a.connect(b.worker(), &b.local_addr().to_string()).unwrap();
        }
    }
    xs
}

#[test]
fn a_keyed_count_across_two_workers_equals_the_single_process_result() {
    let dir = tempfile::tempdir().unwrap();
    let want = single_process_counts("single", dir.path());
    assert_eq!(want.values().sum::<u64>(), N);

    let xs = workers(2);
    let env = StreamEnvironment::new(config("two-workers", dir.path()));
    let out = CollectSink::new();
    keyed_count(&env, out.clone());
    let hosting = Hosting {
        workers: xs.iter().map(|x| x.worker()).collect(),
        hosted: xs.iter().map(|x| (x.worker(), x.clone())).collect(),
    };
    let result = env.execute_placed(hosting).unwrap();
    assert_eq!(final_counts(out.take()), want);
    // A checkpoint completed while the sources held, mid-input.
    assert!(
        result
            .checkpoints
            .iter()
            .any(|c| c.source_records > 0 && c.source_records < N),
        "no checkpoint mid-input: {:?}",
        result.checkpoints
    );
    // The keyed edge crossed the exchange: one stream for the pair, frames both ways.
    assert_eq!(xs[0].streams(), 1);
    let stats = xs[0].stats(2);
    assert!(
        stats.frames_out > 0 && stats.frames_in > 0,
        "nothing crossed: {stats:?}"
    );
}

#[test]
fn records_that_cross_workers_without_a_codec_are_refused_naming_the_type() {
    let dir = tempfile::tempdir().unwrap();
    let xs = workers(2);
    let env = StreamEnvironment::new(config("no-codec", dir.path()));
    env.add_source("numbers", GeneratorSource::new(10))
        .map(Opaque)
        .key_by(|p: &Opaque| p.0)
        .process(ForwardOpaque)
        .add_sink("collect", CollectSink::new());
    let hosting = Hosting {
        workers: xs.iter().map(|x| x.worker()).collect(),
        hosted: xs.iter().map(|x| (x.worker(), x.clone())).collect(),
    };
    let err = env.execute_placed(hosting).unwrap_err().to_string();
    assert!(err.contains("register_type"), "{err}");
    assert!(err.contains("Opaque"), "{err}");
}

/// A record type no codec knows.
#[derive(Clone, Debug)]
struct Opaque(u64);

#[derive(Clone)]
struct ForwardOpaque;

impl CheckpointedFunction for ForwardOpaque {}

impl KeyedProcessFunction<u64, Opaque, u64> for ForwardOpaque {
    fn open(&mut self, _: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        Ok(())
    }
    fn process(
        &mut self,
        record: Opaque,
        _: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, u64>,
    ) -> Result<()> {
        out.collect(record.0);
        Ok(())
    }
}

/// Failures injected mid-run (after a checkpoint completed in each attempt) cancel tasks on
/// both workers — senders waiting for permits of a cancelled receiver included — and every
/// restart resumes from a checkpoint on fresh channels: the result is still exact.
#[test]
fn failures_across_two_workers_restart_from_a_checkpoint_and_stay_exact() {
    let dir = tempfile::tempdir().unwrap();
    let want = single_process_counts("single-f", dir.path());

    let xs = workers(2);
    let mut cfg = config("two-workers-f", dir.path());
    cfg.restart = RestartStrategy::FixedDelay {
        attempts: 5,
        delay: Duration::from_millis(10),
    };
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(2, 7, N / 2));
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    keyed_count(&env, out.clone());
    let hosting = Hosting {
        workers: xs.iter().map(|x| x.worker()).collect(),
        hosted: xs.iter().map(|x| (x.worker(), x.clone())).collect(),
    };
    let result = env.execute_placed(hosting).unwrap();
    assert_eq!(result.injected_failures, Some((2, 2)));
    assert_eq!(result.attempts, 3);
    // Every restart resumed from a checkpoint, not from the beginning.
    for a in &result.history[1..] {
        let r = a
            .restored
            .as_ref()
            .expect("a restart restores a checkpoint");
        assert!(r.source_records > 0, "{a:?}");
    }
    // The sink emits a running count per record, replayed after a restore: the last value
    // per key must be the exact count.
    assert_eq!(final_counts(out.take()), want);
    assert_eq!(
        xs[0].streams(),
        1,
        "one stream for the pair, across attempts"
    );
}

/// The link between the two workers goes down mid-run (a TCP proxy cut once records
/// crossed both ways, while the sources hold): the job fails with the lost peer named, not
/// as a cancellation, and nothing hangs.
#[test]
fn a_link_cut_mid_run_fails_the_job_naming_the_lost_worker() {
    use crate::runtime::exchange::tests::Proxy;
    let dir = tempfile::tempdir().unwrap();
    let (x1, x2) = (exchange(1, "secret"), exchange(2, "secret"));
    let proxy = Proxy::to(x2.local_addr());
    x1.connect(2, &proxy.addr.to_string()).unwrap();
    let mut cfg = config("cut", dir.path());
    // No checkpoint: the sources hold at a quarter of their input for good.
    cfg.checkpointing.interval = None;
    let env = StreamEnvironment::new(cfg);
    keyed_count(&env, CollectSink::new());
    let hosting = Hosting {
        workers: vec![1, 2],
        hosted: [(1, x1.clone()), (2, x2.clone())].into_iter().collect(),
    };
    let cutter = {
        let x1 = x1.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while x1.stats(2).frames_in == 0 || x1.stats(2).frames_out == 0 {
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "nothing crossed"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            proxy.cut();
            proxy
        })
    };
    let err = env.execute_placed(hosting).unwrap_err().to_string();
    let _proxy = cutter.join().unwrap();
    assert!(
        err.contains("lost the exchange stream with worker"),
        "{err}"
    );
    assert!(!err.contains("last failure: cancelled"), "{err}");
}

#[test]
fn unaligned_checkpoints_across_two_workers_equal_the_single_process_result() {
    let dir = tempfile::tempdir().unwrap();
    let want = single_process_counts("single-u", dir.path());
    let xs = workers(2);
    let mut cfg = config("unaligned", dir.path());
    cfg.checkpointing.unaligned = true;
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    keyed_count(&env, out.clone());
    let hosting = Hosting {
        workers: xs.iter().map(|x| x.worker()).collect(),
        hosted: xs.iter().map(|x| (x.worker(), x.clone())).collect(),
    };
    let result = env.execute_placed(hosting).unwrap();
    assert_eq!(final_counts(out.take()), want);
    // The checkpoint taken while the sources held, mid-input, was announced on the
    // priority lanes (remote ones included) and taken unaligned.
    assert!(
        result
            .checkpoints
            .iter()
            .any(|c| c.source_records > 0 && c.source_records < N && c.unaligned_tasks > 0),
        "no unaligned checkpoint mid-input: {:?}",
        result.checkpoints
    );
    assert!(xs[0].stats(2).frames_out > 0, "nothing crossed");
}
