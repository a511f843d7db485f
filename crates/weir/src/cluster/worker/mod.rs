//! The worker's side of the control plane (issue 24, docs/cluster.md): dial the
//! coordinator, register, and take a deploy — build the job's graph from the arguments it
//! carries and refuse it, naming both binaries and the first difference, unless the plan's
//! fingerprint equals the coordinator's.
//!
//! [`attach`] is the registration and the first deploy's handshake; [`serve`] (in
//! `serve.rs`) is the whole worker: it attaches, starts its exchange, and runs every attempt
//! its coordinator deploys (`host.rs`), answering Trigger, Complete, Abort, WriteFrozen,
//! Cancel and Heartbeat on this stream until the job ends.

use std::time::Duration;

use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tonic::transport::Endpoint;
use tonic::{Code, Request, Streaming};

use super::fingerprint::PlanFingerprint;
use super::messages::{error_chain, Messages, MAX_MESSAGE};
use super::proto::coordinator_client::CoordinatorClient;
use super::proto::coordinator_message::Kind as FromCoordinator;
use super::proto::worker_message::Kind as ToCoordinator;
use super::proto::{self, CoordinatorMessage, WorkerMessage};
use super::Assignment;
use crate::api::stream::StreamEnvironment;
use crate::error::{Error, Result};
use crate::runtime::exchange::peer::status_cause;
use crate::runtime::exchange::tls::refusal;
use crate::runtime::exchange::WorkerId;

/// How a worker reaches its coordinator and what it offers.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// `HOST:PORT` of the coordinator (`--coordinator`).
    pub coordinator: String,
    /// The cluster's token.
    pub token: String,
    /// Where this worker's exchange listens, as the other workers reach it.
    pub exchange_address: String,
    /// Subtask slots offered (`--slots`).
    pub slots: u32,
    /// A stable name (pod or host), for messages.
    pub name: String,
    /// This binary (`fingerprint::binary_version`).
    pub binary_version: String,
    /// How long to wait for the coordinator to connect and to answer.
    pub timeout: Duration,
    /// How long a worker that cannot reach its coordinator — at its start, or after losing
    /// it — keeps trying (with exponential backoff) before it gives up (`--connect-timeout`);
    /// zero: one try.
    pub connect_timeout: Duration,
    /// Testing only (a hidden flag): while this file exists, the worker waits before it
    /// dials its peers in an attempt, so that a test can stop it (SIGSTOP) exactly there —
    /// a worker hung before it opened the attempt's exchange streams.
    pub pause_before_dial: Option<std::path::PathBuf>,
    /// How often to tell the coordinator this worker is alive (well under its
    /// `--heartbeat-timeout`); zero: as often as the coordinator asks at registration (a
    /// quarter of its timeout).
    pub heartbeat_interval: Duration,
    /// Mutual TLS to the coordinator and on the exchange when certificates are given.
    pub tls: Option<crate::runtime::exchange::TlsConfig>,
}

/// The `task` of the TaskFailed a worker sends when it could not start a deployed attempt
/// (the attempt fails and restarts), as opposed to `deploy`: it refuses the job itself.
pub(crate) const START: &str = "start";

/// Builds the job's graph from its arguments, as the coordinator did.
pub type JobBuilder<'a> = dyn Fn(&[String]) -> Result<StreamEnvironment> + 'a;

/// A worker attached to its coordinator and deployed: the graph it built, ready to run.
/// Dropping it closes the control stream.
#[cfg_attr(not(test), allow(dead_code))] // The handshake as its tests drive it; `serve` runs it whole.
pub struct DeployedWorker {
    /// The id the coordinator gave this worker.
    pub id: WorkerId,
    /// The attempt deployed.
    pub attempt: u64,
    /// The job, built from the coordinator's arguments, whose plan matched.
    pub env: StreamEnvironment,
    /// Which worker runs which subtask.
    pub assignments: Vec<Assignment>,
    /// Every worker of the attempt and its exchange address.
    pub workers: Vec<(WorkerId, String)>,
    /// The first deploy, as it came (restore point, run id, arguments).
    pub(crate) deploy: proto::Deploy,
    /// How long the coordinator may stay silent before this worker counts it as lost.
    pub(crate) heartbeat_timeout: Duration,
    runtime: tokio::runtime::Runtime,
    pub(crate) to_coordinator: UnboundedSender<WorkerMessage>,
    pub(crate) from_coordinator: Option<Streaming<CoordinatorMessage>>,
}

impl DeployedWorker {
    /// Opens this worker's exchange streams: it dials every worker of the attempt with a
    /// higher id (the others dial it), so each pair shares exactly one stream.
    #[cfg_attr(not(test), allow(dead_code))] // The handshake as its tests drive it; `serve` runs it whole.
    pub fn connect_peers(&self, exchange: &crate::runtime::exchange::Exchange) -> Result<()> {
        for (id, addr) in self.workers.iter().filter(|(id, _)| *id > self.id) {
            exchange
                .connect(*id, addr)
                .map_err(|e| Error::PeerLost(e.to_string()))?;
        }
        Ok(())
    }

    /// The runtime holding the control stream (dropping the worker closes the stream).
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }
}

pub(crate) fn send(tx: &UnboundedSender<WorkerMessage>, kind: ToCoordinator) {
    // A closed stream shows on the receiving side, which names the coordinator.
    let _ = tx.send(WorkerMessage { kind: Some(kind) });
}

/// Dials the coordinator, registers and takes the first deploy, answering Deployed once
/// the plan matched; see the module docs.
#[cfg_attr(not(test), allow(dead_code))] // The handshake as its tests drive it; `serve` runs it whole.
pub fn attach(config: &WorkerConfig, build: &JobBuilder<'_>) -> Result<DeployedWorker> {
    attach_answering(config, build, true, None)
}

/// [`attach`], answering Deployed only when `answer` (a worker that runs the attempt
/// answers once its subtasks started instead: [`serve`]). A worker registering again
/// gives its `exchange`, which takes the new id as soon as the coordinator gives it
/// ([`Exchange::rejoin`](crate::runtime::exchange::Exchange::rejoin)): before any worker
/// can be deployed and dial it under that id.
pub(crate) fn attach_answering(
    config: &WorkerConfig,
    build: &JobBuilder<'_>,
    answer: bool,
    exchange: Option<&crate::runtime::exchange::Exchange>,
) -> Result<DeployedWorker> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("weir-worker-control")
        .enable_all()
        .build()
        .map_err(|e| Error::Cluster(format!("cannot start the worker's runtime: {e}")))?;
    let at = &config.coordinator;
    let timeout = config.timeout;
    let (tx, mut inbound) = dial_with_backoff(config, &runtime)?;
    // The next message that is not a heartbeat (the coordinator beats from the
    // registration on, while this worker may wait long for the others to register),
    // waiting at most `silence` for any message.
    let mut next = |what: &str, silence: Duration| -> Result<FromCoordinator> {
        loop {
            let got =
                runtime.block_on(async { tokio::time::timeout(silence, inbound.message()).await });
            return match got {
                Ok(Ok(Some(CoordinatorMessage {
                    kind: Some(FromCoordinator::Heartbeat(_)),
                }))) => continue,
                Ok(Ok(Some(CoordinatorMessage { kind: Some(k) }))) => Ok(k),
                Ok(Ok(_)) => Err(Error::Cluster(format!(
                    "the coordinator at {at} closed the control stream while this worker \
                     waited for {what}"
                ))),
                Ok(Err(s)) => Err(Error::Cluster(format!(
                    "the coordinator at {at} refused this worker: {}",
                    s.message()
                ))),
                Err(_) => Err(Error::Cluster(format!(
                    "the coordinator at {at} sent no {what} within {silence:?}"
                ))),
            };
        }
    };
    let registered = match next("registration", timeout)? {
        FromCoordinator::Registered(r) => r,
        other => {
            return Err(Error::Cluster(format!(
                "the coordinator at {at} answered the registration with {other:?} (are both \
                 running the same binary?)"
            )))
        }
    };
    let id = registered.worker_id;
    if let Some(exchange) = exchange {
        exchange.rejoin(id);
    }
    // The deploy comes once every worker registered, which may take long: the coordinator
    // only has to stay alive meanwhile.
    let heartbeat_timeout = match registered.heartbeat_timeout_ms {
        0 => config.timeout,
        ms => Duration::from_millis(ms),
    };
    // Alive from the registration on (the deploy may come much later, once every worker
    // registered): a heartbeat at every interval while the stream is open.
    let beat = tx.clone();
    let interval = match (config.heartbeat_interval, registered.heartbeat_interval_ms) {
        (Duration::ZERO, 0) => Duration::from_secs(1),
        (Duration::ZERO, ms) => Duration::from_millis(ms),
        (own, _) => own,
    }
    .max(Duration::from_millis(1));
    runtime.spawn(async move {
        let mut sequence = 0;
        loop {
            tokio::time::sleep(interval).await;
            sequence += 1;
            let m = WorkerMessage {
                kind: Some(ToCoordinator::Heartbeat(proto::Heartbeat { sequence })),
            };
            if beat.send(m).is_err() {
                return;
            }
        }
    });
    let deploy = match next("a deploy", heartbeat_timeout)? {
        FromCoordinator::Deploy(d) => d,
        other => {
            return Err(Error::Cluster(format!(
                "the coordinator at {at} sent {other:?} before deploying a job"
            )))
        }
    };
    if let Some(exchange) = exchange {
        // Peers deployed before this worker may have dialled it already: they waited for
        // this, and are checked against this run now.
        exchange.join_run(&deploy.run_id);
    }
    let theirs = PlanFingerprint::from_proto(deploy.fingerprint.clone().unwrap_or_default());
    let who = format!(
        "worker {id} ({}) at {}",
        config.name, config.exchange_address
    );
    let checked = build(&deploy.job_args).and_then(|env| {
        let mine = PlanFingerprint::of(&env, &config.binary_version)?;
        theirs.check(&mine, &who)?;
        Ok(env)
    });
    let env = match checked {
        Ok(env) => env,
        Err(e) => {
            send(
                &tx,
                ToCoordinator::TaskFailed(proto::TaskFailed {
                    attempt: deploy.attempt,
                    task: "deploy".into(),
                    cause: e.to_string(),
                    ..Default::default()
                }),
            );
            // The coordinator answers a refusal with Cancel: the refusal has arrived, and the
            // stream may close (the timeout is a safety net for a coordinator gone).
            let _ = next("the coordinator's answer to the refusal", timeout);
            return Err(e);
        }
    };
    if answer {
        send(
            &tx,
            ToCoordinator::Deployed(proto::Deployed {
                attempt: deploy.attempt,
                fingerprint: deploy.fingerprint.clone(),
            }),
        );
    }
    Ok(DeployedWorker {
        id,
        attempt: deploy.attempt,
        env,
        assignments: deploy
            .assignments
            .iter()
            .cloned()
            .map(|a| Assignment {
                task_uid: a.task_uid,
                subtask: a.subtask,
                worker: a.worker_id,
            })
            .collect(),
        workers: deploy
            .workers
            .iter()
            .map(|w| (w.worker_id, w.exchange_address.clone()))
            .collect(),
        deploy,
        heartbeat_timeout,
        runtime,
        to_coordinator: tx,
        from_coordinator: Some(inbound),
    })
}

/// Why one try to reach the coordinator failed.
enum DialError {
    /// It may be up later (not listening yet, restarting, out of reach): try again.
    Unreachable(String),
    /// It answered and refused, or the configuration cannot work: trying again would not
    /// help.
    Refused(Error),
}

/// The first wait between tries to reach the coordinator; it doubles up to [`BACKOFF_CAP`].
const BACKOFF_START: Duration = Duration::from_millis(100);
/// The longest wait between tries (plus up to a quarter of it at random, so that workers
/// that lost their coordinator together do not all dial it at the same instant).
const BACKOFF_CAP: Duration = Duration::from_secs(5);

/// Dials the coordinator and opens the control stream (registering), trying again with
/// exponential backoff while it is out of reach, until `config.connect_timeout` has
/// passed; a refusal ends at once. Returns the stream's two ends.
fn dial_with_backoff(
    config: &WorkerConfig,
    runtime: &tokio::runtime::Runtime,
) -> Result<(
    UnboundedSender<WorkerMessage>,
    Streaming<CoordinatorMessage>,
)> {
    let at = &config.coordinator;
    let started = std::time::Instant::now();
    let mut wait = BACKOFF_START;
    loop {
        let cause = match runtime.block_on(dial(config)) {
            Ok(ends) => return Ok(ends),
            Err(DialError::Refused(e)) => return Err(e),
            Err(DialError::Unreachable(cause)) => cause,
        };
        let waited = started.elapsed();
        let limit = config.connect_timeout;
        let left = limit.saturating_sub(waited);
        if left.is_zero() {
            return Err(Error::Cluster(format!(
                "cannot reach the coordinator at {at}: {cause} (tried for {} of \
                 --connect-timeout {}; is it running, and is --coordinator its \
                 --cluster-listen address as this host reaches it?)",
                shown(waited),
                shown(limit),
            )));
        }
        // The last pause ends at the deadline, for one last try there.
        let pause = (wait + wait.mul_f64(fastrand::f64() / 4.0)).min(left);
        eprintln!(
            "weir: {} cannot reach the coordinator at {at} ({cause}); trying again in {} \
             (for up to --connect-timeout {})",
            config.name,
            shown(pause),
            shown(limit),
        );
        std::thread::sleep(pause);
        wait = (wait * 2).min(BACKOFF_CAP);
    }
}

/// `d` as a flag would take it: whole seconds as `60s`, else milliseconds (`150ms`).
fn shown(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// One try: dials the coordinator, opens the control stream and sends the registration.
async fn dial(
    config: &WorkerConfig,
) -> std::result::Result<
    (
        UnboundedSender<WorkerMessage>,
        Streaming<CoordinatorMessage>,
    ),
    DialError,
> {
    let at = &config.coordinator;
    let timeout = config.timeout;
    let tls = config.tls.as_ref();
    // A TLS mismatch (one side without TLS, a certificate the other does not accept) will
    // not heal by trying again: refused at once, naming the cause and the way out.
    let refused_tls = |cause: String| async move {
        let why = refusal(tls, at, &cause, timeout).await?;
        Some(DialError::Refused(Error::Cluster(format!(
            "cannot attach to the coordinator at {at}: {why}"
        ))))
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{at}"))
        .map_err(|e| {
            DialError::Refused(Error::Cluster(format!(
                "--coordinator {at} is not an address ({e}): give HOST:PORT"
            )))
        })?
        .connect_timeout(timeout)
        .tcp_nodelay(true);
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls.client(at)).map_err(|e| {
            DialError::Refused(Error::Cluster(format!(
                "cannot dial the coordinator at {at} with TLS for the name {:?}: {}",
                tls.name_for(at),
                error_chain(&e)
            )))
        })?;
    }
    let channel = match endpoint.connect().await {
        Ok(c) => c,
        Err(e) => {
            let cause = error_chain(&e);
            return Err(refused_tls(cause.clone())
                .await
                .unwrap_or(DialError::Unreachable(cause)));
        }
    };
    let mut client = CoordinatorClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let (tx, rx) = unbounded_channel::<WorkerMessage>();
    send(
        &tx,
        ToCoordinator::Register(proto::Register {
            exchange_address: config.exchange_address.clone(),
            slots: config.slots,
            binary_version: config.binary_version.clone(),
            name: config.name.clone(),
        }),
    );
    let mut req = Request::new(Messages(rx));
    let bearer = format!("Bearer {}", config.token).parse().map_err(|_| {
        DialError::Refused(Error::Cluster(
            "the cluster token has characters a header cannot carry (use letters, digits and \
             punctuation)"
                .into(),
        ))
    })?;
    req.metadata_mut().insert("authorization", bearer);
    let answer = tokio::time::timeout(timeout, client.attach(req))
        .await
        .map_err(|_| DialError::Unreachable(format!("no answer within {timeout:?}")))?;
    let resp = match answer {
        Ok(resp) => resp,
        Err(s) => {
            let transport = matches!(
                s.code(),
                Code::Unavailable | Code::Unknown | Code::Internal | Code::Cancelled
            );
            if transport {
                if let Some(refused) = refused_tls(status_cause(&s)).await {
                    return Err(refused);
                }
            }
            return Err(match s.code() {
                Code::Unauthenticated | Code::FailedPrecondition => {
                    DialError::Refused(Error::Cluster(format!(
                        "the coordinator at {at} refused this worker: {}",
                        s.message()
                    )))
                }
                _ => DialError::Unreachable(s.message().to_string()),
            });
        }
    };
    Ok((tx, resp.into_inner()))
}

mod host;
mod serve;

pub use serve::serve;
