//! The JetStream sinks against a real `nats-server -js`: exactly-once output under injected
//! failures, repeated commits after crashes, at-least-once mode and clear errors.

#[path = "../../weir/tests/support/moto.rs"]
mod moto;
#[path = "support/nats.rs"]
mod nats_support;
#[path = "../../weir/tests/support/test_checkpoints.rs"]
mod test_checkpoints;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nats_support::{free_port, NatsServer};
use weir::prelude::*;
use weir_connectors::nats::{encode_utf8, JetStreamConfig, JetStreamSink};

/// Emits `"key,seq"` with `seq` = 1, 2, … per key (the per-key counter is keyed state).
#[derive(Clone, Default)]
struct Sequence {
    seq: Option<ValueState<u64>>,
}

impl CheckpointedFunction for Sequence {}

impl KeyedProcessFunction<u64, u64, String> for Sequence {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.seq = Some(states.value_state("seq")?);
        Ok(())
    }
    fn process(
        &mut self,
        _: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, String>,
    ) -> Result<()> {
        let key = *ctx.key();
        let seq = ctx.get_mut_or_insert_with(self.seq.unwrap(), || 0);
        *seq += 1;
        out.collect(format!("{key},{seq}"));
        Ok(())
    }
}

fn config(name: &str, dir: &std::path::Path, parallelism: u32) -> JobConfig {
    let mut c = JobConfig::new(name);
    c.parallelism = parallelism;
    c.checkpoint_dir = test_checkpoints::checkpoint_dir(dir);
    c.checkpointing.interval = Some(Duration::from_millis(25));
    c.checkpointing.tolerable_failures = 100;
    c.restart = RestartStrategy::FixedDelay {
        attempts: 1000,
        delay: Duration::from_millis(1),
    };
    c
}

/// Reads `stream` back as `key -> [seq, …]` in stream order.
fn read_back(server: &NatsServer, stream: &str) -> BTreeMap<u64, Vec<u64>> {
    let mut per_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (_, payload) in server.client().read_all(stream) {
        let text = String::from_utf8(payload).unwrap();
        let (k, s) = text.split_once(',').unwrap();
        per_key
            .entry(k.parse().unwrap())
            .or_default()
            .push(s.parse().unwrap());
    }
    per_key
}

/// Every key's values are exactly `1..=n/keys` (no gaps, no duplicates).
fn assert_exact(per_key: &BTreeMap<u64, Vec<u64>>, n: u64, keys: u64) {
    assert_eq!(per_key.len() as u64, keys);
    for (k, seqs) in per_key {
        let mut sorted = seqs.clone();
        sorted.sort();
        let want: Vec<u64> = (1..=n / keys).collect();
        assert_eq!(sorted, want, "key {k}: wrong values");
    }
}

/// generator → keyed `"key,seq"` → JetStream sink, under 6 injected failures; returns the
/// stream read back and what the sink's stats counted as published.
fn sequence_job(
    server: &NatsServer,
    stream: &str,
    seed: u64,
    exactly_once: bool,
) -> (BTreeMap<u64, Vec<u64>>, u64) {
    server
        .client()
        .create_stream(stream, Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("nats-eo", dir.path(), 2);
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(6, seed, N));
    let sink = JetStreamSink::<String>::new(
        JetStreamConfig::new(server.url(), stream).with_subject(format!("{stream}.out")),
        encode_utf8,
    );
    let stats = sink.stats();
    let env = StreamEnvironment::new(cfg);
    let records = env
        // Paced so that each of the six failures finds a checkpoint of its attempt even when
        // a loaded machine slows the two-phase commits down.
        .add_source("numbers", GeneratorSource::new(N).with_rate(Some(10_000.0)))
        .uid("numbers")
        .key_by(move |i: &u64| i % KEYS)
        .process(Sequence::default())
        .uid("sequence");
    if exactly_once {
        records.add_sink("nats", sink.exactly_once()).uid("nats");
    } else {
        records.add_sink("nats", sink.at_least_once()).uid("nats");
    }
    let result = env.execute().unwrap();
    let (fired, planned) = result.injected_failures.unwrap();
    assert_eq!(fired, planned, "seed {seed}: every planned failure fired");
    assert_eq!(fired, 6);
    weir::testing::assert_resumed(&result, N);
    (
        read_back(server, stream),
        stats.published.load(Ordering::Relaxed),
    )
}

const N: u64 = 20_000;
const KEYS: u64 = 50;

#[test]
fn sink_is_exactly_once_under_injected_failures() {
    let server = NatsServer::start();
    for seed in 0..2u64 {
        let (per_key, published) = sequence_job(&server, &format!("eo{seed}"), seed, true);
        assert_exact(&per_key, N, KEYS);
        assert_eq!(published, N);
    }
}

/// The same job with the at-least-once sink republishes what was replayed: the check above
/// does catch duplicates.
#[test]
fn at_least_once_sink_duplicates_under_the_same_failures() {
    let server = NatsServer::start();
    let (per_key, published) = sequence_job(&server, "dup", 0, false);
    assert!(published > N, "no record was published twice");
    let total: usize = per_key.values().map(Vec::len).sum();
    assert_eq!(total as u64, published);
    for (k, seqs) in &per_key {
        let mut distinct = seqs.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(
            distinct,
            (1..=N / KEYS).collect::<Vec<_>>(),
            "key {k}: a value is missing"
        );
    }
}

fn ctx(subtask: u32) -> TransactionContext {
    TransactionContext {
        job_name: "crash".into(),
        uid: "nats".into(),
        subtask,
        parallelism: 1,
    }
}

#[test]
fn repeated_commits_after_crashes_publish_nothing_twice() {
    let server = NatsServer::start();
    let c = server.client();
    c.create_stream("crash", Duration::from_secs(120));
    let cfg = JetStreamConfig::new(server.url(), "crash").with_subject("crash.out");
    let records = |r: std::ops::Range<u32>| r.map(|i| format!("0,{i}")).collect::<Vec<_>>();

    // Crash after pre-commit, before commit: nothing is visible yet.
    let mut sink = JetStreamSink::<String>::new(cfg.clone(), encode_utf8);
    sink.open(&ctx(0)).unwrap();
    let mut txn = sink.begin(&ctx(0)).unwrap();
    sink.write(&mut txn, &mut records(1..301)).unwrap();
    sink.write(&mut txn, &mut records(301..501)).unwrap();
    let committable = sink.pre_commit(&ctx(0), txn, 7).unwrap().unwrap();
    drop(sink);
    assert_eq!(c.count("crash"), 0, "pre-committed output is invisible");

    // A crash in the middle of the commit: the first 200 messages made it.
    let mut partial = committable.clone();
    partial.payloads.truncate(200);
    let mut sink = JetStreamSink::<String>::new(cfg.clone(), encode_utf8);
    sink.open(&ctx(0)).unwrap();
    sink.commit(partial).unwrap();
    assert_eq!(c.count("crash"), 200);
    drop(sink);

    // Recovery (a fresh instance, as after a process crash) commits the handle.
    let mut fresh = JetStreamSink::<String>::new(cfg.clone(), encode_utf8);
    let stats = fresh.stats();
    fresh.open(&ctx(0)).unwrap();
    fresh.recover(&ctx(0), vec![committable.clone()]).unwrap();
    assert_eq!(c.count("crash"), 500);
    assert_eq!(stats.published.load(Ordering::Relaxed), 300);
    assert_eq!(stats.duplicates.load(Ordering::Relaxed), 200);

    // Crash after the commit, before the engine learned of it: committed again, twice.
    fresh.commit(committable.clone()).unwrap();
    let mut again = JetStreamSink::<String>::new(cfg, encode_utf8);
    again.open(&ctx(0)).unwrap();
    again.recover(&ctx(0), vec![committable]).unwrap();
    assert_eq!(c.count("crash"), 500);
    let per_key = read_back(&server, "crash");
    assert_eq!(per_key[&0], (1..=500).collect::<Vec<_>>(), "in order, once");
}

#[test]
fn separate_runs_with_the_same_job_name_do_not_collide() {
    let server = NatsServer::start();
    server
        .client()
        .create_stream("runs", Duration::from_secs(120));
    let cfg = JetStreamConfig::new(server.url(), "runs").with_subject("runs.out");
    for run in 0..2 {
        let mut sink = JetStreamSink::<String>::new(cfg.clone(), encode_utf8);
        sink.open(&ctx(0)).unwrap();
        let mut txn = sink.begin(&ctx(0)).unwrap();
        sink.write(&mut txn, &mut vec![format!("{run},1")]).unwrap();
        let c = sink.pre_commit(&ctx(0), txn, 1).unwrap().unwrap();
        sink.commit(c).unwrap();
    }
    assert_eq!(server.client().count("runs"), 2);
}

#[test]
fn at_least_once_sink_publishes_everything() {
    let server = NatsServer::start();
    server
        .client()
        .create_stream("alo", Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let (n, keys) = (5_000u64, 10u64);
    let env = StreamEnvironment::new(config("nats-alo", dir.path(), 2));
    let sink = JetStreamSink::<String>::new(
        JetStreamConfig::parse(&format!("{}/alo?subject=alo.out", server.url())).unwrap(),
        encode_utf8,
    );
    env.add_source("numbers", GeneratorSource::new(n))
        .key_by(move |i: &u64| i % keys)
        .process(Sequence::default())
        .add_sink("nats", sink.at_least_once());
    env.execute().unwrap();
    assert_exact(&read_back(&server, "alo"), n, keys);
}

#[test]
fn clear_errors_for_server_down_missing_stream_and_large_messages() {
    let open = |cfg: JetStreamConfig| {
        let mut sink = JetStreamSink::<String>::new(cfg, encode_utf8);
        sink.open(&ctx(0)).map(|_| sink)
    };
    let port = free_port();
    let e = open(JetStreamConfig::new(format!("127.0.0.1:{port}"), "s"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
    assert!(e.contains("nats-server -js"), "{e}");

    let server = NatsServer::start();
    let e = open(JetStreamConfig::new(server.url(), "nosuch"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("'nosuch' does not exist"), "{e}");
    assert!(e.contains("nats stream add nosuch"), "{e}");

    let c = server.client();
    c.create_stream("big", Duration::from_secs(120));
    // Two subjects are captured (`big.>`): which one to publish to must be said.
    let e = open(JetStreamConfig::new(server.url(), "big"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("?subject="), "{e}");
    let e = open(JetStreamConfig::new(server.url(), "big").with_subject("other.x"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not captured by JetStream stream 'big'"), "{e}");

    let mut sink = open(JetStreamConfig::new(server.url(), "big").with_subject("big.x")).unwrap();
    let mut txn = sink.begin(&ctx(0)).unwrap();
    let e = sink
        .write(&mut txn, &mut vec!["x".repeat(2 << 20)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("message too large"), "{e}");
    assert!(e.contains("2097152 bytes"), "{e}");

    c.create_stream("nodupes", Duration::ZERO);
    let e = open(JetStreamConfig::new(server.url(), "nodupes").with_subject("nodupes.x"));
    // The server may apply its default window to a stream created without one.
    if let Err(e) = e {
        assert!(e.to_string().contains("no duplicate window"), "{e}");
    }
}

/// Exactly-once vs at-least-once publishing rate (printed for BENCHMARKS.md; run with
/// `--nocapture`, ideally `--release`; `WEIR_NATS_BENCH_RECORDS` sets the record count).
#[test]
fn sink_throughput() {
    let server = NatsServer::start();
    let n: u64 = std::env::var("WEIR_NATS_BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    for mode in ["at-least-once", "exactly-once"] {
        let stream = mode.replace('-', "");
        server
            .client()
            .create_stream(&stream, Duration::from_secs(120));
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(&format!("nats-bench-{stream}"), dir.path(), 1);
        cfg.checkpointing.interval = Some(Duration::from_millis(100));
        let env = StreamEnvironment::new(cfg);
        let sink = JetStreamSink::<String>::new(
            JetStreamConfig::new(server.url(), &stream).with_subject(format!("{stream}.out")),
            encode_utf8,
        );
        let records = env
            .add_source("numbers", GeneratorSource::new(n))
            .map(|i: u64| format!("{i:08},{}", "x".repeat(90)));
        let started = Instant::now();
        if mode == "exactly-once" {
            records.add_sink("nats", sink.exactly_once());
        } else {
            records.add_sink("nats", sink.at_least_once());
        }
        env.execute().unwrap();
        let secs = started.elapsed().as_secs_f64();
        println!(
            "JetStream sink {mode}: {n} records of 100 bytes in {secs:.2} s = {:.0} records/s",
            n as f64 / secs
        );
        assert_eq!(server.client().count(&stream), n, "{mode}");
    }
}
