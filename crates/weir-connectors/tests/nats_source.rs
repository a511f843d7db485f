//! The JetStream source against a real `nats-server -js`: exact replay under injected
//! failures, rescaling, bounded/continuous modes and clear errors.

#[path = "../../weir/tests/support/moto.rs"]
mod moto;
#[path = "support/nats.rs"]
mod nats_support;
#[path = "../../weir/tests/support/stop_mid_run.rs"]
mod stop_mid_run;
#[path = "../../weir/tests/support/test_checkpoints.rs"]
mod test_checkpoints;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nats_support::{free_port, NatsServer};
use weir::prelude::*;
use weir::testing::{expected_counts, CountPerKey};
use weir_connectors::nats::{decode_utf8, JetStreamConfig, JetStreamSource};

/// Longest any wait of these tests may take (a job, a publisher, the job reaching a state):
/// generous for a loaded 2-core machine, and a clear failure instead of a hang.
const DEADLINE: Duration = Duration::from_secs(120);

/// Runs `env` to its end, failing the suite if it hangs past [`DEADLINE`].
fn execute_within(env: StreamEnvironment) -> Result<JobResult> {
    weir::testing::execute_within(env, DEADLINE)
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

/// Publishes `0..n` as text to `<stream>.events`.
fn fill(server: &NatsServer, stream: &str, n: u64) {
    let c = server.client();
    c.create_stream(stream, Duration::from_secs(120));
    c.publish(
        &format!("{stream}.events"),
        (0..n).map(|i| i.to_string().into_bytes()),
    );
}

/// source → parse → key_by(i % keys) → count → collect. `fail_at`: a record on which the
/// job fails (once, no restart strategy needed to stop it).
fn run_count(
    cfg: JobConfig,
    source: impl SourceFunction<String>,
    keys: u64,
    fail_at: Option<u64>,
) -> Result<(HashMap<u64, u64>, JobResult)> {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    env.add_source("nats", source)
        .uid("nats")
        .map(move |s: String| {
            let i: u64 = s.parse().expect("published numbers");
            if fail_at == Some(i) {
                panic!("planned stop at record {i}");
            }
            if i.is_multiple_of(8) {
                // Slow enough for several checkpoints to complete.
                std::thread::sleep(Duration::from_micros(300));
            }
            i
        })
        .uid("parse")
        .key_by(move |i: &u64| i % keys)
        .process(CountPerKey::default())
        .uid("count")
        .add_sink("collect", out.clone())
        .uid("collect");
    let result = execute_within(env)?;
    let mut counts = HashMap::new();
    for (k, c) in out.take() {
        assert!(counts.insert(k, c).is_none(), "key {k} emitted twice");
    }
    Ok((counts, result))
}

#[test]
fn source_replays_exactly_under_injected_failures() {
    let server = NatsServer::start();
    let n = 30_000;
    fill(&server, "replay", n);
    let mut fired_total = 0;
    for seed in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config("nats-replay", dir.path(), 2);
        cfg.failure_injection = Some(FailureInjection::after_checkpoints(6, seed, n));
        let src =
            JetStreamSource::bounded(JetStreamConfig::new(server.url(), "replay"), decode_utf8);
        let (counts, result) = run_count(cfg, src, 100, None).unwrap();
        let (fired, _) = result.injected_failures.unwrap();
        // Each failure waits for a checkpoint with progress in its attempt; on a loaded
        // machine the input may end before the last ones could follow one.
        assert!(fired >= 3, "seed {seed}: only {fired} failures fired");
        weir::testing::assert_resumed(&result, n);
        assert_eq!(counts, expected_counts(n, 100), "seed {seed}: exact counts");
        fired_total += fired;
    }
    assert!(fired_total >= 8);
}

#[test]
fn source_rescales_from_two_to_three_subtasks() {
    let server = NatsServer::start();
    let n = 20_000;
    fill(&server, "rescale", n);
    let dir = tempfile::tempdir().unwrap();
    let src = || {
        JetStreamSource::bounded(JetStreamConfig::new(server.url(), "rescale"), decode_utf8)
            .with_splits(6)
    };
    // First run at parallelism 2 stops (fails, no restarts) halfway, once a checkpoint
    // covers what both subtasks read (`StopMidRun`): certain, not raced against the input.
    let mut cfg = config("nats-rescale", dir.path(), 2);
    cfg.restart = RestartStrategy::None;
    let stopping = stop_mid_run::StopMidRun::new(src(), n / 4);
    stop_mid_run::assert_stopped_mid_run(run_count(cfg, stopping, 50, None));
    // Second run at parallelism 3 restores the latest checkpoint and finishes exactly.
    let mut cfg = config("nats-rescale", dir.path(), 3);
    cfg.restore = RestoreFrom::Latest;
    let (counts, result) = run_count(cfg, src(), 50, None).unwrap();
    assert!(result.restored_from.is_some(), "{:?}", result.notices);
    assert!(
        result.source_records < n,
        "the restored run re-read everything ({} records)",
        result.source_records
    );
    assert_eq!(counts, expected_counts(n, 50));
}

#[test]
fn subject_filter_and_bound_at_start() {
    let server = NatsServer::start();
    let c = server.client();
    c.create_stream("mixed", Duration::from_secs(120));
    c.publish("mixed.a", (0..100u32).map(|i| i.to_string()));
    c.publish("mixed.b", (0..50u32).map(|i| i.to_string()));
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new(config("nats-filter", dir.path(), 2));
    let out = CollectSink::new();
    let cfg = JetStreamConfig::parse(&format!("{}/mixed?subject=mixed.b", server.url())).unwrap();
    env.add_source("nats", JetStreamSource::bounded(cfg, decode_utf8))
        .add_sink("collect", out.clone());
    execute_within(env).unwrap();
    let mut got: Vec<u32> = out.take().iter().map(|s| s.parse().unwrap()).collect();
    got.sort();
    assert_eq!(got, (0..50).collect::<Vec<_>>());
}

#[test]
fn continuous_mode_idles_then_reads_new_messages() {
    let server = NatsServer::start();
    let c = server.client();
    c.create_stream("live", Duration::from_secs(120));
    let cfg = JetStreamConfig::new(server.url(), "live");
    let mut src = JetStreamSource::continuous(cfg, decode_utf8);
    // Driven by hand: initialize_state is only reachable through a job, so run a job whose
    // source is continuous and stop it through a failing map once everything arrived.
    let dir = tempfile::tempdir().unwrap();
    let mut jc = config("nats-live", dir.path(), 1);
    jc.restart = RestartStrategy::None;
    let env = StreamEnvironment::new(jc);
    // Publishes once the job has idled through two checkpoints on the empty stream (or
    // after the deadline, so that the job can end either way); says whether it saw them.
    let (published_tx, published) = mpsc::channel();
    {
        let url = server.url();
        let metrics = env.metrics();
        std::thread::spawn(move || {
            let deadline = Instant::now() + DEADLINE;
            let idled = loop {
                if metrics.checkpoints_completed.load(Ordering::Relaxed) >= 2 {
                    break true;
                }
                if Instant::now() >= deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            let c = nats_support::TestClient::connect(&url);
            c.publish("live.x", (0..20u32).map(|i| i.to_string()));
            let _ = published_tx.send(idled);
        });
    }
    src = src.with_splits(1);
    env.add_source("nats", src).map(|s: String| {
        if s == "19" {
            panic!("all 20 arrived");
        }
        s
    });
    let err = execute_within(env).unwrap_err().to_string();
    let idled = published
        .recv_timeout(DEADLINE)
        .unwrap_or_else(|e| panic!("the publisher did not finish within {DEADLINE:?}: {e}"));
    assert!(
        idled,
        "the job completed no 2 checkpoints on the empty stream within {DEADLINE:?}"
    );
    assert!(err.contains("all 20 arrived"), "{err}");
}

#[test]
fn clear_errors_for_server_down_missing_stream_and_bad_payload() {
    let run = |cfg: JetStreamConfig| {
        let dir = tempfile::tempdir().unwrap();
        let mut jc = config("nats-err", dir.path(), 1);
        jc.restart = RestartStrategy::None;
        let env = StreamEnvironment::new(jc);
        env.add_source("nats", JetStreamSource::bounded(cfg, decode_utf8))
            .add_sink("discard", DiscardSink);
        execute_within(env).unwrap_err().to_string()
    };
    let port = free_port();
    let e = run(JetStreamConfig::new(format!("127.0.0.1:{port}"), "s"));
    assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
    assert!(e.contains("nats-server -js"), "{e}");

    let server = NatsServer::start();
    let e = run(JetStreamConfig::new(server.url(), "nosuch"));
    assert!(e.contains("'nosuch' does not exist"), "{e}");
    assert!(e.contains("nats stream add nosuch"), "{e}");

    let c = server.client();
    c.create_stream("bad", Duration::from_secs(120));
    c.publish("bad.x", [b"ok".to_vec(), vec![0xff, 0xfe]]);
    let e = run(JetStreamConfig::new(server.url(), "bad"));
    assert!(e.contains("cannot decode message 2"), "{e}");
    assert!(e.contains("'bad'"), "{e}");

    let plain = NatsServer::start_with(false);
    let e = run(JetStreamConfig::new(plain.url(), "s"));
    assert!(e.contains("JetStream is not enabled"), "{e}");
    assert!(e.contains("nats-server -js"), "{e}");
}
