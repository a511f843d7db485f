//! The registration and deploy handshake over real loopback sockets: a coordinator
//! endpoint on 127.0.0.1 port 0, workers attaching from threads.

use std::net::SocketAddr;
use std::time::Duration;

use super::*;
use crate::cluster::fingerprint::binary_version;
use crate::cluster::worker::{attach, DeployedWorker, WorkerConfig};
use crate::prelude::*;

/// A safety net for a hang, never a pace: every wait below ends on an answer.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The job every process builds from its arguments: `--parallelism P`.
fn build(args: &[String]) -> Result<StreamEnvironment> {
    let p = match args {
        [flag, p] if flag == "--parallelism" => p
            .parse()
            .map_err(|_| Error::InvalidJob(format!("not a parallelism: {p}")))?,
        _ => return Err(Error::InvalidJob(format!("unexpected arguments {args:?}"))),
    };
    let mut cfg = JobConfig::new("handshake");
    cfg.parallelism = p;
    let env = StreamEnvironment::new(cfg);
    env.add_source("numbers", GeneratorSource::new(10))
        .uid("numbers")
        .key_by(|i: &u64| *i)
        .reduce(|a, b| a + b)
        .uid("sum")
        .add_sink("out", DiscardSink)
        .uid("sink");
    Ok(env)
}

fn args(p: u32) -> Vec<String> {
    vec!["--parallelism".into(), p.to_string()]
}

fn coordinator(token: &str) -> CoordinatorEndpoint {
    CoordinatorEndpoint::start(CoordinatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        token: token.into(),
        binary_version: binary_version().into(),
        heartbeat_timeout: TIMEOUT,
        tls: None,
    })
    .unwrap()
}

fn worker_config(at: SocketAddr, token: &str, name: &str) -> WorkerConfig {
    WorkerConfig {
        coordinator: at.to_string(),
        token: token.into(),
        exchange_address: format!("127.0.0.1:70{}", name.len()),
        slots: 2,
        name: name.into(),
        binary_version: binary_version().into(),
        timeout: TIMEOUT,
        connect_timeout: Duration::ZERO,
        pause_before_dial: None,
        heartbeat_interval: Duration::from_millis(20),
        tls: None,
    }
}

/// Attaches a worker that builds its job from `build_args` instead of what it is sent
/// (`None`: what it is sent), on a thread; its outcome comes back as `(id, attempt)`. A
/// deployed worker keeps its stream open until `hold` disconnects (a worker that exits
/// closes its stream, which the coordinator reports as lost).
fn spawn_worker_holding(
    config: WorkerConfig,
    build_args: Option<Vec<String>>,
    hold: crossbeam_channel::Receiver<()>,
) -> std::thread::JoinHandle<Result<(WorkerId, u64, usize, usize)>> {
    std::thread::spawn(move || {
        let builder = |sent: &[String]| build(build_args.as_deref().unwrap_or(sent));
        let deployed: DeployedWorker = attach(&config, &builder)?;
        let _ = hold.recv();
        // What the deploy carried: every subtask's worker and every worker's address.
        let mine = deployed
            .assignments
            .iter()
            .filter(|a| a.worker == deployed.id)
            .count();
        Ok((deployed.id, deployed.attempt, mine, deployed.workers.len()))
    })
}

#[allow(clippy::type_complexity)]
fn spawn_worker(
    config: WorkerConfig,
    build_args: Option<Vec<String>>,
) -> std::thread::JoinHandle<Result<(WorkerId, u64, usize, usize)>> {
    spawn_worker_holding(config, build_args, crossbeam_channel::never())
}

fn spec(p: u32) -> DeploySpec {
    DeploySpec {
        assignments: Vec::new(),
        workers: Vec::new(),
        attempt: 1,
        job_args: args(p),
        fingerprint: PlanFingerprint::of(&build(&args(p)).unwrap(), binary_version()).unwrap(),
        restore_from: String::new(),
        run_id: "run".into(),
    }
}

#[test]
fn workers_register_and_take_a_deploy_whose_plan_they_build_alike() {
    let c = coordinator("secret");
    let (release, hold) = crossbeam_channel::bounded::<()>(0);
    let handles: Vec<_> = ["w-a", "w-bb"]
        .into_iter()
        .map(|n| {
            let config = worker_config(c.local_addr(), "secret", n);
            spawn_worker_holding(config, None, hold.clone())
        })
        .collect();
    let workers = c.wait_for_workers(2, TIMEOUT).unwrap();
    let mut ids: Vec<WorkerId> = workers.iter().map(|w| w.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2]);
    let mut spec = spec(2);
    let env = build(&args(2)).unwrap();
    spec.assignments = schedule(&env, &workers).unwrap();
    spec.workers = workers
        .iter()
        .map(|w| (w.id, w.exchange_address.clone()))
        .collect();
    for w in &workers {
        assert_eq!(w.slots, 2);
        c.deploy(w, &spec, TIMEOUT).unwrap();
    }
    drop(release);
    let mut deployed: Vec<(WorkerId, u64, usize, usize)> = handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    deployed.sort_unstable();
    // Two tasks (source; sum → sink) at parallelism 2: one subtask of each per worker.
    assert_eq!(deployed, [(1, 1, 2, 2), (2, 1, 2, 2)]);
    // Parallelism 5 over two workers of 2 slots needs 3 on the first: refused.
    let e = schedule(&build(&args(5)).unwrap(), &workers)
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs 3 slots on worker 1"), "{e}");
    assert!(e.contains("--slots"), "{e}");
}

/// The whole start of a worker: bind its exchange's port, register that address, learn its
/// id, start the exchange on the bound port with that id, take the deploy, dial the
/// workers above it. Every pair then shares exactly one stream.
#[test]
fn deployed_workers_open_one_exchange_stream_per_pair() {
    use crate::runtime::exchange::{Exchange, ExchangeConfig};
    let c = coordinator("secret");
    let (release, hold) = crossbeam_channel::bounded::<()>(0);
    let (streams_tx, streams) = crossbeam_channel::unbounded();
    let handles: Vec<_> = ["a", "bb", "ccc"]
        .into_iter()
        .map(|name| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut config = worker_config(c.local_addr(), "secret", name);
            config.exchange_address = listener.local_addr().unwrap().to_string();
            let (hold, streams_tx) = (hold.clone(), streams_tx.clone());
            std::thread::spawn(move || {
                let builder = |sent: &[String]| build(sent);
                let deployed = attach(&config, &builder).unwrap();
                let mut xc = ExchangeConfig::new(
                    deployed.id,
                    config.exchange_address.parse().unwrap(),
                    "secret",
                );
                xc.keepalive_timeout = Duration::from_secs(600);
                let exchange = Exchange::start_on(xc, Some(listener)).unwrap();
                deployed.connect_peers(&exchange).unwrap();
                // Wait until the peers below dialled in too, then report.
                let start = std::time::Instant::now();
                while exchange.streams() < 2 {
                    assert!(start.elapsed() < TIMEOUT, "never connected");
                    std::thread::sleep(Duration::from_millis(1));
                }
                streams_tx.send((deployed.id, exchange.streams())).unwrap();
                let _ = hold.recv();
            })
        })
        .collect();
    let workers = c.wait_for_workers(3, TIMEOUT).unwrap();
    let mut spec = spec(3);
    spec.assignments = schedule(&build(&args(3)).unwrap(), &workers).unwrap();
    spec.workers = workers
        .iter()
        .map(|w| (w.id, w.exchange_address.clone()))
        .collect();
    for w in &workers {
        c.deploy(w, &spec, TIMEOUT).unwrap();
    }
    let mut got: Vec<(WorkerId, u64)> = (0..3).map(|_| streams.recv().unwrap()).collect();
    got.sort_unstable();
    assert_eq!(got, [(1, 2), (2, 2), (3, 2)]);
    drop(release);
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn a_worker_that_builds_another_plan_refuses_the_deploy_naming_the_difference() {
    let c = coordinator("secret");
    // The worker reads its arguments differently: it builds parallelism 3, not 2.
    let h = spawn_worker(
        worker_config(c.local_addr(), "secret", "odd"),
        Some(args(3)),
    );
    let workers = c.wait_for_workers(1, TIMEOUT).unwrap();
    let at_coordinator = c
        .deploy(&workers[0], &spec(2), TIMEOUT)
        .unwrap_err()
        .to_string();
    let at_worker = h.join().unwrap().unwrap_err().to_string();
    for e in [&at_coordinator, &at_worker] {
        assert!(e.contains("built another plan than the coordinator"), "{e}");
        assert!(e.contains("parallelism"), "{e}");
        assert!(e.contains(binary_version()), "{e}");
    }
    assert!(
        at_coordinator.contains("worker 1 (odd)"),
        "{at_coordinator}"
    );
}

#[test]
fn a_worker_of_another_binary_is_refused_naming_both_versions() {
    let c = coordinator("secret");
    let mut config = worker_config(c.local_addr(), "secret", "old");
    config.binary_version = "weir 0.0.9 (weir, crc32c 00000000)".into();
    let e = spawn_worker(config, None)
        .join()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(e.contains("refused this worker"), "{e}");
    assert!(e.contains("weir 0.0.9 (weir, crc32c 00000000)"), "{e}");
    assert!(e.contains(binary_version()), "{e}");
    // Refused before registering: no worker for the coordinator.
    assert!(c.wait_for_workers(1, Duration::from_millis(1)).is_err());
}

#[test]
fn a_worker_with_a_wrong_token_is_refused_naming_the_token() {
    let c = coordinator("secret");
    let e = spawn_worker(worker_config(c.local_addr(), "guess", "w"), None)
        .join()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(e.contains("refused this worker"), "{e}");
    assert!(e.contains("cluster token"), "{e}");
}

#[test]
fn an_unreachable_coordinator_is_named_with_the_way_out() {
    // A port nobody listens on: bind one, note it, close it.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = spawn_worker(worker_config(addr, "secret", "w"), None)
        .join()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("cannot reach the coordinator at {addr}")),
        "{e}"
    );
    assert!(e.contains("--coordinator"), "{e}");
}

#[test]
fn an_empty_token_is_refused_at_start() {
    let e = CoordinatorEndpoint::start(CoordinatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        token: String::new(),
        binary_version: binary_version().into(),
        heartbeat_timeout: TIMEOUT,
        tls: None,
    })
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("--cluster-token"), "{e}");
}

/// A worker whose heartbeats stop (here: its interval far beyond the coordinator's timeout)
/// counts as lost, with the timeout named; one that beats stays registered. The first
/// half cannot pass by luck: the loss must be reported.
#[test]
fn a_worker_silent_for_the_heartbeat_timeout_is_lost() {
    let c = CoordinatorEndpoint::start(CoordinatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        token: "secret".into(),
        binary_version: binary_version().into(),
        heartbeat_timeout: Duration::from_millis(300),
        tls: None,
    })
    .unwrap();
    let (release, hold) = crossbeam_channel::bounded::<()>(0);
    let mut silent = worker_config(c.local_addr(), "secret", "silent");
    silent.heartbeat_interval = Duration::from_secs(3600);
    let h = spawn_worker_holding(silent, None, hold);
    let workers = c.wait_for_workers(1, TIMEOUT).unwrap();
    // On a loaded machine the silence may already count while the deploy is answered:
    // then the deploy itself reports the loss.
    let lost = match c.deploy(&workers[0], &spec(2), TIMEOUT) {
        Err(e) => e.to_string(),
        Ok(()) => {
            let start = std::time::Instant::now();
            loop {
                if let Some(e) = workers[0].lost() {
                    break e.to_string();
                }
                assert!(
                    start.elapsed() < TIMEOUT,
                    "the silent worker was never lost"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    assert!(lost.contains("worker 1 (silent)"), "{lost}");
    assert!(lost.contains("--heartbeat-timeout"), "{lost}");
    drop(release);
    h.join().unwrap().unwrap();
}
