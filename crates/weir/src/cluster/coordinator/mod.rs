//! The coordinator's side of the control plane (issue 24, docs/cluster.md): the endpoint
//! workers attach to, their registration, and the deploy handshake with the plan
//! fingerprint check.
//!
//! **Built so far:** a worker dials, presents the cluster token and registers (exchange
//! address, slots, binary version, name); a worker of another binary is refused at once,
//! naming both versions; an accepted worker gets its id. [`CoordinatorEndpoint::deploy`]
//! sends it the job's arguments and the coordinator's plan fingerprint and waits for the
//! worker to build the same plan (Deployed) or refuse it (its cause is returned).
//! **Next:** the attempt itself over this stream (Trigger, Ack, Complete/Abort, Cancel,
//! Heartbeat) driving the existing checkpoint coordinator.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic::{Request, Response, Status, Streaming};

use super::fingerprint::PlanFingerprint;
use super::messages::{constant_time_eq, Messages, MAX_MESSAGE};
use super::proto::coordinator_message::Kind as ToWorker;
use super::proto::coordinator_server::{self, CoordinatorServer};
use super::proto::worker_message::Kind as FromWorker;
use super::proto::{self, CoordinatorMessage, WorkerMessage};
use super::Assignment;
use crate::api::stream::StreamEnvironment;
use crate::error::{Error, Result};
use crate::runtime::exchange::{TlsConfig, WorkerId};

/// How the coordinator listens and whom it lets in.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Where workers dial (`--cluster-listen`; port 0 picks a free one).
    pub listen: SocketAddr,
    /// The cluster's token: workers must present it.
    pub token: String,
    /// This binary (`fingerprint::binary_version`): a worker of another is refused.
    pub binary_version: String,
    /// A worker silent this long (no message, no heartbeat) counts as lost
    /// (`--heartbeat-timeout`).
    pub heartbeat_timeout: Duration,
    /// Mutual TLS when certificates are given (`--tls-cert`, `--tls-key`, `--tls-ca`): a
    /// worker without a certificate of the cluster's CA is refused before its token is read.
    pub tls: Option<TlsConfig>,
}

/// A worker that registered, with its half of the control stream.
pub struct RegisteredWorker {
    /// The id the coordinator gave it.
    pub id: WorkerId,
    /// Its name (pod or host), for messages.
    pub name: String,
    /// Where its exchange listens, as the other workers reach it.
    pub exchange_address: String,
    /// Its subtask slots.
    pub slots: u32,
    /// When the coordinator last heard from it (any message, heartbeats included), in
    /// milliseconds since the Unix epoch: the dashboard's heartbeat age.
    pub(crate) last_heard: Arc<AtomicU64>,
    to_worker: UnboundedSender<std::result::Result<CoordinatorMessage, Status>>,
    from_worker: crossbeam_channel::Receiver<std::result::Result<WorkerMessage, String>>,
}

impl RegisteredWorker {
    /// `worker N (name) at ADDRESS`, the form every message uses.
    pub fn describe(&self) -> String {
        format!(
            "worker {} ({}) at {}",
            self.id, self.name, self.exchange_address
        )
    }

    fn send(&self, kind: ToWorker) -> Result<()> {
        self.to_worker
            .send(Ok(CoordinatorMessage { kind: Some(kind) }))
            .map_err(|_| {
                Error::Cluster(format!(
                    "lost the control stream of {} (the worker died or is cut off)",
                    self.describe()
                ))
            })
    }

    /// Whether the worker is lost (its stream broke or ended, or it went silent for the
    /// heartbeat timeout), and why; the loss is reported once, to the first caller.
    #[cfg_attr(not(test), allow(dead_code))] // The handshake as its tests drive it; a job runs it through `pool`.
    pub fn lost(&self) -> Option<Error> {
        match self.from_worker.try_recv() {
            Ok(Err(cause)) => Some(Error::Cluster(format!("lost {}: {cause}", self.describe()))),
            Err(crossbeam_channel::TryRecvError::Disconnected) => Some(Error::Cluster(format!(
                "lost {}: it closed its control stream",
                self.describe()
            ))),
            _ => None,
        }
    }

    /// The worker's next message, waiting at most `timeout`.
    #[cfg_attr(not(test), allow(dead_code))] // The handshake as its tests drive it; a job runs it through `pool`.
    fn next(&self, timeout: Duration) -> Result<FromWorker> {
        match self.from_worker.recv_timeout(timeout) {
            Ok(Ok(WorkerMessage { kind: Some(k) })) => Ok(k),
            Ok(Ok(WorkerMessage { kind: None })) => Err(Error::Cluster(format!(
                "{} sent an empty message (is it running the same binary?)",
                self.describe()
            ))),
            Ok(Err(cause)) => Err(Error::Cluster(format!(
                "lost the control stream of {}: {cause} (the worker died or is cut off)",
                self.describe()
            ))),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(Error::Cluster(format!(
                "{} did not answer within {timeout:?} (is it overloaded or hung?)",
                self.describe()
            ))),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(Error::Cluster(format!(
                "{} closed its control stream",
                self.describe()
            ))),
        }
    }
}

/// How often both sides send heartbeats for a heartbeat timeout of `timeout`: four per
/// timeout, so one delayed heartbeat never counts as a loss.
pub(crate) fn heartbeat_interval(timeout: Duration) -> Duration {
    (timeout / 4).max(Duration::from_millis(5))
}

/// What a deploy carries.
#[derive(Debug, Clone)]
pub struct DeploySpec {
    /// Which worker runs which subtask ([`schedule`]).
    pub assignments: Vec<Assignment>,
    /// Every worker of the attempt and its exchange address.
    pub workers: Vec<(WorkerId, String)>,
    /// The attempt being deployed.
    pub attempt: u64,
    /// The job's arguments, from which the worker builds the same graph.
    pub job_args: Vec<String>,
    /// The coordinator's plan fingerprint, which the worker's must equal.
    pub fingerprint: PlanFingerprint,
    /// The checkpoint the attempt restores (its folder), empty for a fresh start.
    pub restore_from: String,
    /// The coordinator's run id, which the worker records with every state file.
    pub run_id: String,
}

struct Service {
    config: CoordinatorConfig,
    next_id: AtomicU32,
    registered: crossbeam_channel::Sender<RegisteredWorker>,
}

impl Service {
    fn token_ok<T>(&self, req: &Request<T>) -> bool {
        let expected = format!("Bearer {}", self.config.token);
        let given = req
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        constant_time_eq(given, expected.as_bytes())
    }
}

#[tonic::async_trait]
impl coordinator_server::Coordinator for Service {
    type AttachStream = Messages<std::result::Result<CoordinatorMessage, Status>>;

    async fn attach(
        &self,
        req: Request<Streaming<WorkerMessage>>,
    ) -> std::result::Result<Response<Self::AttachStream>, Status> {
        let from = req
            .remote_addr()
            .map_or_else(|| "an unknown address".into(), |a| a.to_string());
        if !self.token_ok(&req) {
            return Err(Status::unauthenticated(format!(
                "the coordinator refused the worker at {from}: wrong or missing cluster token \
                 (give every worker the coordinator's --cluster-token)"
            )));
        }
        let mut inbound = req.into_inner();
        let register = match inbound.message().await {
            Ok(Some(WorkerMessage {
                kind: Some(FromWorker::Register(r)),
            })) => r,
            Ok(_) => {
                return Err(Status::invalid_argument(format!(
                    "the worker at {from} did not register first"
                )))
            }
            Err(e) => return Err(e),
        };
        if register.binary_version != self.config.binary_version {
            return Err(Status::failed_precondition(format!(
                "the coordinator refused worker '{}' at {from}: it runs {}, the coordinator \
                 runs {} (start every worker from the coordinator's binary)",
                register.name, register.binary_version, self.config.binary_version
            )));
        }
        let id = self.next_id.fetch_add(1, Relaxed);
        let (to_worker, outbound) = unbounded_channel();
        let (tx, from_worker) = crossbeam_channel::unbounded();
        let silence = self.config.heartbeat_timeout;
        let last_heard = Arc::new(AtomicU64::new(crate::clock::wall_ms()));
        let heard = last_heard.clone();
        tokio::spawn(async move {
            loop {
                let got = tokio::time::timeout(silence, inbound.message()).await;
                if let Ok(Ok(Some(_))) = &got {
                    heard.store(crate::clock::wall_ms(), Relaxed);
                }
                let Ok(got) = got else {
                    let _ = tx.send(Err(format!(
                        "no heartbeat for {silence:?} (--heartbeat-timeout): the worker hung, \
                         is starved or cut off"
                    )));
                    return;
                };
                match got {
                    // Heartbeats only prove the worker alive: the timeout above restarts.
                    Ok(Some(WorkerMessage {
                        kind: Some(FromWorker::Heartbeat(_)),
                    })) => {}
                    Ok(Some(m)) => {
                        if tx.send(Ok(m)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => return, // the worker closed its stream: `next` says so
                    Err(s) => {
                        let _ = tx.send(Err(s.message().to_string()));
                        return;
                    }
                }
            }
        });
        let worker = RegisteredWorker {
            id,
            name: register.name,
            exchange_address: register.exchange_address,
            slots: register.slots,
            last_heard,
            to_worker,
            from_worker,
        };
        let interval = heartbeat_interval(silence);
        worker
            .send(ToWorker::Registered(proto::Registered {
                worker_id: id,
                heartbeat_interval_ms: interval.as_millis() as u64,
                heartbeat_timeout_ms: silence.as_millis() as u64,
            }))
            .map_err(|e| Status::internal(e.to_string()))?;
        // Heartbeats both ways: the worker counts a coordinator silent for the timeout as
        // lost, as the coordinator does a worker.
        let beat = worker.to_worker.clone();
        tokio::spawn(async move {
            let mut sequence = 0;
            loop {
                tokio::time::sleep(interval).await;
                sequence += 1;
                let m = CoordinatorMessage {
                    kind: Some(ToWorker::Heartbeat(proto::Heartbeat { sequence })),
                };
                if beat.send(Ok(m)).is_err() {
                    return;
                }
            }
        });
        self.registered
            .send(worker)
            .map_err(|_| Status::unavailable("the coordinator is shutting down"))?;
        Ok(Response::new(Messages(outbound)))
    }
}

/// The coordinator's control endpoint: serves workers' streams on its own small runtime.
pub struct CoordinatorEndpoint {
    local_addr: SocketAddr,
    registered: crossbeam_channel::Receiver<RegisteredWorker>,
    runtime: Option<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl CoordinatorEndpoint {
    /// Starts listening on `config.listen`.
    pub fn start(config: CoordinatorConfig) -> Result<CoordinatorEndpoint> {
        if config.token.is_empty() {
            return Err(Error::Cluster(
                "the cluster token is empty, which would let anyone who reaches the port in: \
                 give the coordinator and every worker the same non-empty --cluster-token"
                    .into(),
            ));
        }
        let listen = config.listen;
        let cannot = |cause: String| {
            Error::Cluster(format!(
                "the coordinator cannot listen on {listen}: {cause} (is the port taken, or \
                 the address not this host's?)"
            ))
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-coordinator")
            .enable_all()
            .build()
            .map_err(|e| cannot(e.to_string()))?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(listen))
            .map_err(|e| cannot(e.to_string()))?;
        let local_addr = listener.local_addr().map_err(|e| cannot(e.to_string()))?;
        let (tx, registered) = crossbeam_channel::unbounded();
        let service = Service {
            config,
            next_id: AtomicU32::new(1),
            registered: tx,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut builder = Server::builder();
        if let Some(tls) = &service.config.tls {
            builder = builder
                .tls_config(tls.server())
                .map_err(|e| Error::Cluster(tls.unusable(&super::messages::error_chain(&e))))?;
        }
        let server = builder.serve_with_incoming_shutdown(
            CoordinatorServer::new(service)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            async {
                let _ = stopped.await;
            },
        );
        runtime.spawn(server);
        Ok(CoordinatorEndpoint {
            local_addr,
            registered,
            runtime: Some(runtime),
            stop: Some(stop),
        })
    }

    /// Where workers dial.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Waits for `n` workers to register, at most `timeout` in all.
    pub fn wait_for_workers(&self, n: usize, timeout: Duration) -> Result<Vec<RegisteredWorker>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut workers = Vec::with_capacity(n);
        while workers.len() < n {
            match self.registered.recv_deadline(deadline) {
                Ok(w) => workers.push(w),
                Err(_) => {
                    return Err(Error::Cluster(format!(
                        "{} of {n} workers registered within {timeout:?} (start them with \
                         `weir worker --coordinator {}` and the cluster token)",
                        workers.len(),
                        self.local_addr
                    )))
                }
            }
        }
        Ok(workers)
    }

    /// Deploys `spec` to `worker` and waits (at most `timeout`) until it built the same
    /// plan; the worker's refusal, naming the difference and both binaries, is the error.
    #[cfg_attr(not(test), allow(dead_code))] // The handshake as its tests drive it; a job runs it through `pool`.
    pub fn deploy(
        &self,
        worker: &RegisteredWorker,
        spec: &DeploySpec,
        timeout: Duration,
    ) -> Result<()> {
        worker.send(ToWorker::Deploy(deploy_message(spec)))?;
        match worker.next(timeout)? {
            FromWorker::Deployed(d) if d.attempt == spec.attempt => Ok(()),
            FromWorker::TaskFailed(f) => {
                // The worker waits for this answer before it closes its stream.
                let _ = worker.send(ToWorker::Cancel(proto::Cancel {
                    attempt: spec.attempt,
                    cause: "the worker refused the deploy".into(),
                }));
                Err(Error::Cluster(format!(
                    "{} refused the deploy: {}",
                    worker.describe(),
                    f.cause
                )))
            }
            other => Err(Error::Cluster(format!(
                "{} answered the deploy of attempt {} with {other:?}",
                worker.describe(),
                spec.attempt
            ))),
        }
    }
}

/// The Deploy message for `spec`.
pub(crate) fn deploy_message(spec: &DeploySpec) -> proto::Deploy {
    proto::Deploy {
        attempt: spec.attempt,
        job_args: spec.job_args.clone(),
        fingerprint: Some(spec.fingerprint.to_proto()),
        assignments: spec
            .assignments
            .iter()
            .map(|a| proto::SubtaskAssignment {
                task_uid: a.task_uid.clone(),
                subtask: a.subtask,
                worker_id: a.worker,
            })
            .collect(),
        workers: spec
            .workers
            .iter()
            .map(|(id, addr)| proto::WorkerAddress {
                worker_id: *id,
                exchange_address: addr.clone(),
            })
            .collect(),
        restore_from: spec.restore_from.clone(),
        run_id: spec.run_id.clone(),
    }
}

/// Schedules the job of `env` onto `workers` (in id order): subtask `i` of every operator
/// on the `i mod N`-th worker, so each worker runs whole pipeline slices and a forward edge
/// stays on its worker (`runtime::placement`). A worker holds one slice per slot: a job
/// whose largest parallelism needs more slices on a worker than it offers is refused,
/// naming the numbers and the way out.
#[cfg_attr(not(test), allow(dead_code))] // The handshake as its tests drive it; a job runs it through `pool`.
pub fn schedule(env: &StreamEnvironment, workers: &[RegisteredWorker]) -> Result<Vec<Assignment>> {
    let plan = crate::runtime::plan::plan(&env.graph(), env.config())?;
    let offers: Vec<Offer> = workers
        .iter()
        .map(|w| Offer {
            id: w.id,
            slots: w.slots,
            name: w.describe(),
        })
        .collect();
    schedule_plan(&plan, &offers)
}

/// A worker as the scheduler sees it: its id, its slots and how messages name it.
pub(crate) struct Offer {
    pub(crate) id: WorkerId,
    pub(crate) slots: u32,
    pub(crate) name: String,
}

/// [`schedule`] for a planned job.
pub(crate) fn schedule_plan(
    plan: &crate::runtime::plan::Plan,
    workers: &[Offer],
) -> Result<Vec<Assignment>> {
    if workers.is_empty() {
        return Err(Error::Cluster("no worker to schedule the job onto".into()));
    }
    let mut ordered: Vec<&Offer> = workers.iter().collect();
    ordered.sort_by_key(|w| w.id);
    let n = ordered.len();
    for (k, w) in ordered.iter().enumerate() {
        let slices = plan
            .parallelism
            .iter()
            .map(|&p| (p as usize + n - 1 - k) / n)
            .max()
            .unwrap_or(0);
        if slices > w.slots as usize {
            return Err(Error::Cluster(format!(
                "the job needs {slices} slots on {} (parallelism up to {} over {n} workers), \
                 which offers {} (start more workers, or give them more --slots)",
                w.name,
                plan.parallelism.iter().max().copied().unwrap_or(0),
                w.slots
            )));
        }
    }
    Ok(plan
        .tasks
        .iter()
        .map(|t| Assignment {
            task_uid: plan.uids[t.chain[0]].clone(),
            subtask: t.subtask,
            worker: ordered[t.subtask as usize % n].id,
        })
        .collect())
}

impl Drop for CoordinatorEndpoint {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

mod forward;
mod pool;
pub(crate) mod run;

#[cfg(test)]
mod tests;
