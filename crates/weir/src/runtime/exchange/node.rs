//! A worker's exchange endpoint: the gRPC server its peers dial, the dialling of peers, the
//! token check, and the registry of peers and channels.
//!
//! **One stream per pair.** Each pair of workers shares one `Connect` call: one of them dials
//! ([`Exchange::connect`]; the scheduler will have the lower worker id dial the higher), the
//! other accepts. A second stream for a pair is refused, so channels cannot split across
//! streams and lose their order.
//!
//! **Identity and token.** The dialler sends the cluster's token (`authorization: Bearer`)
//! and its worker id (`x-weir-worker`); the acceptor refuses a wrong or missing token
//! (UNAUTHENTICATED) before it reads a frame, and answers with its own id, which the
//! dialler checks against the worker it meant to reach. The comparison of tokens takes the
//! same time whatever the token.
//!
//! **Run and attempt.** The dialler also names its coordinator's run id (`x-weir-run`) and
//! the attempt it dials for (`x-weir-attempt`). The acceptor refuses a stream of another run
//! — a worker of another job or coordinator, or a stale one of an earlier run that has not
//! registered again — naming both run ids, and one for an attempt that already ended here
//! (a worker still running an attempt the coordinator cancelled, say after it was stopped
//! and resumed); it answers with its own run id, which the dialler checks too (a stale
//! address now served by a worker of another run). The token says who may connect at all;
//! the run and attempt say the two ends work on the same thing.
//!
//! **Liveness.** HTTP/2 keep-alive pings on both sides turn a peer that hangs or is cut off
//! into a broken stream within `keepalive_interval + keepalive_timeout`, which fails its
//! channels like a peer that died ([`super::peer`]).
//!
//! The endpoint runs on its own small tokio runtime (two threads): task threads stay plain
//! threads and only hand frames over.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Endpoint, Server};
use tonic::{Request, Response, Status, Streaming};
use tonic_health::ServingStatus;

use crate::runtime::codec::RecordCodec;

use super::channel::{RemoteInput, RemoteSender};
use super::health::WithHealth;
use super::outbox::{RequestFrames, ResponseFrames};
use super::peer::{status_cause, Peer};
use super::proto::exchange_client::ExchangeClient;
use super::proto::exchange_server::{self, ExchangeServer};
use super::proto::Frame;
use super::tls::TlsConfig;
use super::{ChannelBound, ChannelId, ExchangeError, WorkerId};

/// The metadata key naming the dialling (and answering) worker.
const WORKER_KEY: &str = "x-weir-worker";

/// The metadata key naming the run (the coordinator's run id) of the dialling and the
/// answering worker.
const RUN_KEY: &str = "x-weir-run";

/// The metadata key naming the attempt the dialler dials for.
const ATTEMPT_KEY: &str = "x-weir-attempt";

/// The largest message either side accepts: a batch of `BATCH_SIZE` records of up to 16 KiB
/// each. (gRPC's default, 4 MiB, would fail a batch of 4096 records of 1 KiB.)
const MAX_MESSAGE: usize = 64 << 20;

/// How a worker's exchange listens and whom it lets in.
#[derive(Debug, Clone)]
pub struct ExchangeConfig {
    /// This worker's id, as the coordinator gave it.
    pub worker: WorkerId,
    /// Where to listen (`127.0.0.1:0` picks a free port; see [`Exchange::local_addr`]).
    pub listen: SocketAddr,
    /// The cluster's token: peers must present it, and this worker presents it.
    pub token: String,
    /// The run this worker works for (its coordinator's run id, from the deploy): a peer
    /// of another run is refused ([`Exchange::rejoin`] changes it). Empty by default.
    pub run: String,
    /// How often an idle stream is pinged (HTTP/2 keep-alive).
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the stream counts as broken.
    pub keepalive_timeout: Duration,
    /// How long dialling a peer may take.
    pub connect_timeout: Duration,
    /// TLS (mutual: the server asks for a client certificate too) when certificates are
    /// given; `None`: plaintext HTTP/2, for a private network.
    pub tls: Option<TlsConfig>,
}

impl ExchangeConfig {
    /// Worker `worker` listening on `listen` with the cluster's `token`; keep-alive every
    /// second, a peer lost after 2 s without an answer (issue 24's target: a lost worker
    /// detected and the job restarted in under 3 s).
    pub fn new(worker: WorkerId, listen: SocketAddr, token: impl Into<String>) -> Self {
        ExchangeConfig {
            worker,
            listen,
            token: token.into(),
            run: String::new(),
            keepalive_interval: Duration::from_secs(1),
            keepalive_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(5),
            tls: None,
        }
    }
}

/// Bytes and frames on the stream with one peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Frames sent.
    pub frames_out: u64,
    /// Their encoded bytes.
    pub bytes_out: u64,
    /// Frames received.
    pub frames_in: u64,
    /// Their encoded bytes.
    pub bytes_in: u64,
    /// Sends to the peer that had to wait for permits (its credits ran out).
    pub permit_waits: u64,
    /// How long those sends waited, in all, in nanoseconds.
    pub permit_wait_ns: u64,
}

/// What the server and the handle share.
struct Node {
    config: ExchangeConfig,
    /// This worker's id: `config.worker`, until [`Exchange::rejoin`] gives it another.
    me: AtomicU32,
    /// Its run and where its attempts stand; a dial accepted while the run is not known
    /// yet (registered again, not deployed yet) waits for it here.
    membership: tokio::sync::watch::Sender<Membership>,
    peers: Mutex<HashMap<WorkerId, Arc<Peer>>>,
    /// Streams this worker accepted and dialled, ever: one per peer.
    streams: AtomicU64,
    /// Streams refused (a wrong token, a second stream for a pair), ever.
    refused: AtomicU64,
}

/// The run a worker works for and where its attempts stand, as its handshakes say.
#[derive(Debug, Clone, Default)]
struct Membership {
    /// The coordinator's run id; `None` from a new registration ([`Exchange::rejoin`])
    /// until its deploy names the run ([`Exchange::join_run`]).
    run: Option<String>,
    /// The attempt this worker dials for ([`Exchange::begin_attempt`]).
    dialling: Option<u32>,
    /// The latest attempt that ended here ([`Exchange::end_attempt`]): a dialler of this
    /// attempt or an older one is stale.
    ended: Option<u32>,
}

impl Node {
    fn membership(&self) -> Membership {
        self.membership.borrow().clone()
    }

    /// The membership once its run is known, waiting at most the connect timeout for the
    /// deploy that names it (a peer deployed first may dial before this worker's deploy
    /// arrived); `None` when it did not come.
    async fn settled(&self) -> Option<Membership> {
        let mut rx = self.membership.subscribe();
        let wait = async { rx.wait_for(|m| m.run.is_some()).await.map(|m| m.clone()) };
        tokio::time::timeout(self.config.connect_timeout, wait)
            .await
            .ok()?
            .ok()
    }

    fn peer(&self, id: WorkerId) -> Arc<Peer> {
        self.peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id)
            .or_insert_with(|| Peer::new(id))
            .clone()
    }

    /// Attaches a stream with worker `id`, named `name`: to its peer if that has no stream
    /// yet, or to a fresh one in place of a peer that failed (a worker that comes back —
    /// reconnected, or its stream dialled anew for the next attempt — starts afresh; the
    /// failed peer's channels belong to an attempt that is over). `None` while a stream is
    /// up: one per pair.
    fn attach(&self, id: WorkerId, name: String) -> Option<Arc<Peer>> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let peer = peers.entry(id).or_insert_with(|| Peer::new(id));
        if peer.failure().is_some() {
            *peer = Peer::new(id);
        }
        peer.attach(name).then(|| peer.clone())
    }

    /// Refuses a dialler (`id` at `from`) of another run than this worker's, or of an
    /// attempt that ended here, naming both runs or attempts.
    #[allow(clippy::result_large_err)] // a refusal is the stream's answer, once
    fn same_run<T>(
        m: &Membership,
        req: &Request<T>,
        me: WorkerId,
        id: WorkerId,
        from: &str,
    ) -> Result<(), Status> {
        let text = |key| {
            req.metadata()
                .get(key)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let theirs = text(RUN_KEY);
        let attempt = text(ATTEMPT_KEY).parse::<u32>().ok();
        let mine = m.run.as_deref().unwrap_or_default();
        if theirs != mine {
            return Err(Status::failed_precondition(format!(
                "worker {me} refused the exchange stream from worker {id} at {from}: that \
                 worker belongs to run {theirs:?}, this one to run {:?} (a worker of another \
                 job or coordinator, or a stale one of an earlier run: stop it, or point it at \
                 this job's coordinator so that it registers again)",
                mine
            )));
        }
        if let (Some(a), Some(ended)) = (attempt, m.ended) {
            if a <= ended {
                return Err(Status::failed_precondition(format!(
                    "worker {me} refused the exchange stream from worker {id} at {from} for \
                     attempt {a} of run {theirs:?}: attempt {ended} already ended here (a \
                     stale worker still running a cancelled attempt; it gives up and waits \
                     for its coordinator's next deploy)"
                )));
            }
        }
        Ok(())
    }

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

/// Compares without an early exit, so the time taken does not tell how much of a guessed
/// token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (i, y) in b.iter().enumerate() {
        diff |= a.get(i).copied().unwrap_or(0) ^ y;
    }
    diff == 0
}

struct Service(Arc<Node>);

#[tonic::async_trait]
impl exchange_server::Exchange for Service {
    type ConnectStream = ResponseFrames;

    async fn connect(
        &self,
        req: Request<Streaming<Frame>>,
    ) -> Result<Response<ResponseFrames>, Status> {
        let node = &self.0;
        let me = node.me.load(Relaxed);
        let from = req
            .remote_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|| "an unknown address".into());
        if !node.token_ok(&req) {
            node.refused.fetch_add(1, Relaxed);
            return Err(Status::unauthenticated(format!(
                "worker {me} refused the exchange stream from {from}: wrong or missing cluster \
                 token (give every worker the coordinator's token)"
            )));
        }
        let id = req
            .metadata()
            .get(WORKER_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<WorkerId>().ok());
        let Some(id) = id else {
            node.refused.fetch_add(1, Relaxed);
            return Err(Status::invalid_argument(format!(
                "the exchange stream from {from} does not name its worker ({WORKER_KEY})"
            )));
        };
        if id == me {
            node.refused.fetch_add(1, Relaxed);
            return Err(Status::invalid_argument(format!(
                "worker {me} at {from} dialled itself"
            )));
        }
        let Some(membership) = node.settled().await else {
            node.refused.fetch_add(1, Relaxed);
            return Err(Status::unavailable(format!(
                "worker {me} refused the exchange stream from worker {id} at {from}: this \
                 worker registered again and its coordinator has not deployed the job to it \
                 within {:?} (the job restarts once every worker is deployed)",
                node.config.connect_timeout
            )));
        };
        if let Err(refusal) = Node::same_run(&membership, &req, me, id, &from) {
            node.refused.fetch_add(1, Relaxed);
            return Err(refusal);
        }
        let Some(peer) = node.attach(id, format!("worker {id} at {from}")) else {
            node.refused.fetch_add(1, Relaxed);
            return Err(Status::already_exists(format!(
                "worker {id} already has an exchange stream with worker {me} (one per pair)"
            )));
        };
        node.streams.fetch_add(1, Relaxed);
        tokio::spawn(peer.clone().read(req.into_inner()));
        let mut resp = Response::new(ResponseFrames(peer.outbox.clone()));
        resp.metadata_mut()
            .insert(WORKER_KEY, MetadataValue::from(me));
        if let Ok(run) = membership.run.unwrap_or_default().parse() {
            resp.metadata_mut().insert(RUN_KEY, run);
        }
        Ok(resp)
    }
}

/// A worker's exchange: serves its peers' streams and dials its own.
pub struct Exchange {
    node: Arc<Node>,
    local_addr: SocketAddr,
    /// The standard health service's statuses ([`Exchange::set_ready`]).
    health: tonic_health::server::HealthReporter,
    runtime: Option<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Exchange {
    /// Starts listening on `config.listen`.
    pub fn start(config: ExchangeConfig) -> Result<Exchange, ExchangeError> {
        Self::start_on(config, None)
    }

    /// Starts serving on `listener`, bound before (`None`: binds `config.listen`). A worker
    /// binds first, so that it can register its exchange's address with the coordinator
    /// and start the exchange once it knows the id the coordinator gave it.
    pub fn start_on(
        config: ExchangeConfig,
        listener: Option<std::net::TcpListener>,
    ) -> Result<Exchange, ExchangeError> {
        if config.token.is_empty() {
            return Err(ExchangeError::Config(
                "the cluster token is empty, which would let anyone who reaches the port in: \
                 give every process of the cluster the same non-empty token"
                    .into(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(format!("weir-exchange-{}", config.worker))
            .enable_all()
            .build()
            .map_err(|e| ExchangeError::Listen {
                addr: config.listen.to_string(),
                cause: format!("cannot start the exchange's runtime: {e}"),
            })?;
        let listen_error = |e: std::io::Error| ExchangeError::Listen {
            addr: config.listen.to_string(),
            cause: e.to_string(),
        };
        let listener = match listener {
            None => runtime
                .block_on(tokio::net::TcpListener::bind(config.listen))
                .map_err(listen_error)?,
            Some(l) => {
                l.set_nonblocking(true).map_err(listen_error)?;
                let _entered = runtime.enter();
                tokio::net::TcpListener::from_std(l).map_err(listen_error)?
            }
        };
        let local_addr = listener.local_addr().map_err(|e| ExchangeError::Listen {
            addr: config.listen.to_string(),
            cause: e.to_string(),
        })?;
        let node = Arc::new(Node {
            me: AtomicU32::new(config.worker),
            membership: tokio::sync::watch::Sender::new(Membership {
                run: Some(config.run.clone()),
                ..Membership::default()
            }),
            config,
            peers: Mutex::new(HashMap::new()),
            streams: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The standard health service (grpc.health.v1), which needs no token (it reveals
        // nothing): the exchange service SERVING once it serves, the worker overall ("")
        // NOT_SERVING until its role says it is ready (`set_ready`).
        let (health, health_service) = tonic_health::server::health_reporter();
        runtime.block_on(async {
            health.set_serving::<ExchangeServer<Service>>().await;
            (health.set_service_status("", ServingStatus::NotServing)).await;
        });
        let mut builder = Server::builder();
        if let Some(tls) = &node.config.tls {
            builder = builder
                .tls_config(tls.server())
                .map_err(|e| ExchangeError::Config(tls.unusable(&error_chain(&e))))?;
        }
        let server = builder
            .http2_keepalive_interval(Some(node.config.keepalive_interval))
            .http2_keepalive_timeout(Some(node.config.keepalive_timeout))
            .serve_with_incoming_shutdown(
                WithHealth {
                    service: ExchangeServer::new(Service(node.clone()))
                        .max_decoding_message_size(MAX_MESSAGE)
                        .max_encoding_message_size(MAX_MESSAGE),
                    health: health_service,
                },
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                async {
                    let _ = stopped.await;
                },
            );
        runtime.spawn(server);
        Ok(Exchange {
            node,
            local_addr,
            health,
            runtime: Some(runtime),
            stop: Some(stop),
        })
    }

    /// Sets what the standard health service answers for the worker overall (service
    /// ""): SERVING while it is registered with its coordinator and runs its job,
    /// NOT_SERVING while it registers again — what a Kubernetes `grpc:` readiness probe
    /// reads, without the cluster token.
    pub fn set_ready(&self, ready: bool) {
        let status = if ready {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        (self.runtime()).block_on(self.health.set_service_status("", status));
    }

    /// Where this exchange listens (the port chosen, when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This worker's id.
    pub fn worker(&self) -> WorkerId {
        self.node.me.load(Relaxed)
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("the runtime lives until drop")
    }

    /// Dials worker `peer` at `addr` (`host:port`) and opens the one stream between them.
    /// Channels may be registered before or after.
    pub fn connect(&self, peer: WorkerId, addr: &str) -> Result<(), ExchangeError> {
        let node = self.node.clone();
        let addr = addr.to_string();
        self.runtime().block_on(dial(node, peer, addr))
    }

    /// The sending end of `channel` to worker `peer`, encoding records with `codec`.
    pub fn output<T: 'static>(
        &self,
        peer: WorkerId,
        channel: ChannelId,
        codec: Arc<dyn RecordCodec<T>>,
    ) -> RemoteSender<T> {
        RemoteSender::new(channel, self.node.peer(peer), codec)
    }

    /// The receiving end of `channel` from worker `peer`, holding at most `bound`, decoding
    /// records with `codec`. Its sender gets `bound` in permits when the stream is up.
    pub fn input<T: Send + 'static>(
        &self,
        peer: WorkerId,
        channel: ChannelId,
        bound: ChannelBound,
        codec: Arc<dyn RecordCodec<T>>,
    ) -> Result<RemoteInput<T>, ExchangeError> {
        let p = self.node.peer(peer);
        let (input, delivery) = RemoteInput::new(channel, p.clone(), codec);
        p.add_input(channel, delivery, bound)?;
        Ok(input)
    }

    /// This worker registered again — with a restarted coordinator, or with its own after
    /// it counted this worker as lost — and got id `worker`: every stream and channel of
    /// its former membership fails (its peers see the stream end) and is forgotten, and
    /// this exchange serves and dials as `worker` from now on, on the same port, its
    /// attempts counted afresh. Its run is unknown until [`join_run`](Exchange::join_run):
    /// a peer that dials meanwhile waits for it (at most the connect timeout).
    pub fn rejoin(&self, worker: WorkerId) {
        let mut peers = self.node.peers.lock().unwrap_or_else(|p| p.into_inner());
        self.node.me.store(worker, Relaxed);
        self.node.membership.send_replace(Membership::default());
        for (_, p) in peers.drain() {
            p.fail(ExchangeError::PeerLost {
                peer: p.name(),
                cause: format!(
                    "this worker registered again with its coordinator, as worker {worker}"
                ),
            });
        }
    }

    /// Ends the channels of an attempt that is over (cancelled, failed, or followed by the
    /// next deploy), before its tasks are joined:
    ///
    /// * a peer that never opened its stream with this worker (it hung, died or was cut off
    ///   before it dialled, or before this worker dialled it) fails, waking this worker's
    ///   senders that wait for its channels to open, with an error naming it;
    /// * on a peer whose stream is up, the sending channels that never opened fail the same
    ///   way (their receivers never registered them, and will not: the attempt is over);
    /// * peers that failed or never connected are forgotten, so the next attempt dials (or
    ///   accepts) them afresh instead of inheriting the failure. Streams that are up stay up
    ///   for the next attempt, whose channels are numbered afresh.
    ///
    /// A peer that dials this worker afterwards for `attempt` or an older one is refused
    /// (it is still running an attempt that is over).
    pub fn end_attempt(&self, attempt: u32) {
        self.node.membership.send_modify(|m| {
            m.ended = Some(m.ended.map_or(attempt, |e| e.max(attempt)));
        });
        let cause = format!(
            "attempt {attempt} ended before this channel opened (the worker never registered \
             its end: it hung, died or is cut off; the job restarts from its latest checkpoint)"
        );
        let mut peers = self.node.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.retain(|_, p| {
            if p.failure().is_some() {
                return false;
            }
            if !p.is_attached() {
                p.fail(ExchangeError::PeerLost {
                    peer: p.name(),
                    cause: format!(
                        "it never opened its exchange stream during attempt {attempt} (it hung, \
                         died or is cut off; the job restarts from its latest checkpoint)"
                    ),
                });
                return false;
            }
            p.fail_unopened(&cause);
            true
        });
    }

    /// The attempt this worker dials its peers for from now on, which the peers check
    /// against the attempts that ended on their side: called before the attempt's
    /// [`connect`](Exchange::connect)s.
    pub fn begin_attempt(&self, attempt: u32) {
        self.node
            .membership
            .send_modify(|m| m.dialling = Some(attempt));
    }

    /// The deploy of this worker's membership named its run (the coordinator's run id):
    /// peers of another run are refused from now on, and those that dialled meanwhile are
    /// answered.
    pub fn join_run(&self, run: &str) {
        self.node
            .membership
            .send_modify(|m| m.run = Some(run.to_string()));
    }

    /// The run this worker works for (its coordinator's run id), once known.
    pub fn run(&self) -> Option<String> {
        self.node.membership().run
    }

    /// Streams this worker accepted or dialled, ever (one per peer).
    pub fn streams(&self) -> u64 {
        self.node.streams.load(Relaxed)
    }

    /// Streams this worker refused, ever.
    pub fn refused(&self) -> u64 {
        self.node.refused.load(Relaxed)
    }

    /// Why the stream with `peer` failed, if it did.
    pub fn peer_failure(&self, peer: WorkerId) -> Option<ExchangeError> {
        self.node.peer(peer).failure()
    }

    /// Whether a stream with `peer` is up (attached and not failed).
    pub fn is_connected(&self, peer: WorkerId) -> bool {
        let p = self.node.peer(peer);
        p.is_attached() && p.failure().is_none()
    }

    /// The channels with `peer` still known here: (inputs, sending channels). Those of
    /// an ended attempt are forgotten once both ends closed them ([`Peer`]).
    pub fn channels(&self, peer: WorkerId) -> (usize, usize) {
        self.node.peer(peer).channels()
    }

    /// Frames and bytes on the stream with `peer`.
    pub fn stats(&self, peer: WorkerId) -> PeerStats {
        peer_stats(&self.node.peer(peer))
    }

    /// The figures of every stream this worker has now (one per peer, since that peer's
    /// stream was last opened), by peer id: what a worker reports to its coordinator for
    /// the dashboard and `/metrics`.
    pub fn streams_stats(&self) -> Vec<(WorkerId, PeerStats)> {
        let peers: Vec<(WorkerId, Arc<Peer>)> = (self.node.peers.lock())
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, p)| p.is_attached())
            .map(|(id, p)| (*id, p.clone()))
            .collect();
        let mut stats: Vec<_> = peers.iter().map(|(id, p)| (*id, peer_stats(p))).collect();
        stats.sort_by_key(|(id, _)| *id);
        stats
    }
}

fn peer_stats(p: &Peer) -> PeerStats {
    let (permit_waits, permit_wait_ns) = p.permit_waits();
    PeerStats {
        frames_out: p.outbox.frames_out.load(Relaxed),
        bytes_out: p.outbox.bytes_out.load(Relaxed),
        frames_in: p.frames_in.load(Relaxed),
        bytes_in: p.bytes_in.load(Relaxed),
        permit_waits,
        permit_wait_ns,
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        let peers: Vec<_> = self
            .node
            .peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for p in peers {
            p.fail(ExchangeError::Shutdown);
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

async fn dial(node: Arc<Node>, id: WorkerId, addr: String) -> Result<(), ExchangeError> {
    let me = node.me.load(Relaxed);
    let name = format!("worker {id} at {addr}");
    let unreachable = |cause: String| ExchangeError::Unreachable {
        peer: name.clone(),
        cause,
    };
    let refused = |cause: String| ExchangeError::Refused {
        peer: name.clone(),
        cause,
    };
    // The handshake's metadata first: a token or run id a header cannot carry is refused
    // before anything is attached.
    let bearer = format!("Bearer {}", node.config.token)
        .parse()
        .map_err(|_| refused("the cluster token has characters a header cannot carry".into()))?;
    let Membership { run, dialling, .. } = node.membership();
    let run = run.unwrap_or_default();
    let run_value = run.parse().map_err(|_| {
        refused(format!(
            "the run id {run:?} has characters a header cannot carry"
        ))
    })?;
    let tls = node.config.tls.as_ref();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|e| unreachable(format!("not an address ({e})")))?
        .connect_timeout(node.config.connect_timeout)
        .http2_keep_alive_interval(node.config.keepalive_interval)
        .keep_alive_timeout(node.config.keepalive_timeout)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true);
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls.client(&addr)).map_err(|e| {
            refused(format!(
                "cannot dial with TLS for the name {:?}: {}",
                tls.name_for(&addr),
                error_chain(&e)
            ))
        })?;
    }
    // A TLS mismatch (one side without TLS, a certificate of another CA) will not heal by
    // trying again: refused, naming the cause and the way out.
    let (at, timeout) = (addr.as_str(), node.config.connect_timeout);
    let tls_refusal =
        |cause: String| async move { super::tls::refusal(tls, at, &cause, timeout).await };
    let channel = match endpoint.connect().await {
        Ok(c) => c,
        Err(e) => {
            let cause = error_chain(&e);
            return Err(match tls_refusal(cause.clone()).await {
                Some(why) => refused(why),
                None => unreachable(cause),
            });
        }
    };
    let Some(peer) = node.attach(id, name.clone()) else {
        return Err(refused(format!(
            "worker {me} has a stream with it already (one per pair)"
        )));
    };
    let mut client = ExchangeClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let mut req = Request::new(RequestFrames(peer.outbox.clone()));
    req.metadata_mut().insert("authorization", bearer);
    req.metadata_mut()
        .insert(WORKER_KEY, MetadataValue::from(me));
    req.metadata_mut().insert(RUN_KEY, run_value);
    if let Some(a) = dialling {
        req.metadata_mut()
            .insert(ATTEMPT_KEY, MetadataValue::from(a));
    }
    let failed = |e: ExchangeError| {
        peer.fail(e.clone());
        e
    };
    let resp = match client.connect(req).await {
        Ok(resp) => resp,
        Err(status) => {
            let cause = status_cause(&status);
            let transport = matches!(
                status.code(),
                tonic::Code::Unavailable
                    | tonic::Code::Unknown
                    | tonic::Code::Internal
                    | tonic::Code::Cancelled
            );
            if transport {
                if let Some(why) = tls_refusal(cause.clone()).await {
                    return Err(failed(refused(why)));
                }
            }
            let e = match status.code() {
                tonic::Code::Unauthenticated
                | tonic::Code::InvalidArgument
                | tonic::Code::AlreadyExists
                | tonic::Code::FailedPrecondition => ExchangeError::Refused { peer: name, cause },
                _ => ExchangeError::Unreachable { peer: name, cause },
            };
            return Err(failed(e));
        }
    };
    let answered = resp
        .metadata()
        .get(WORKER_KEY)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<WorkerId>().ok());
    if answered != Some(id) {
        let who = answered.map_or("a peer without a worker id".into(), |w| {
            format!("worker {w}")
        });
        return Err(failed(ExchangeError::Refused {
            peer: name,
            cause: format!("{who} answered there (a stale address?)"),
        }));
    }
    let theirs = resp
        .metadata()
        .get(RUN_KEY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if theirs != run {
        return Err(failed(ExchangeError::Refused {
            peer: name,
            cause: format!(
                "it belongs to run {theirs:?}, this worker to run {run:?} (a stale address now \
                 served by a worker of another job or coordinator; the job restarts once the \
                 coordinator has this run's workers)"
            ),
        }));
    }
    node.streams.fetch_add(1, Relaxed);
    // The client must live as long as the stream.
    peer.attach_keep(Box::new(client));
    tokio::spawn(peer.clone().read(resp.into_inner()));
    Ok(())
}

/// An error and its sources, `: `-joined (tonic's transport errors say little on top).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s = format!("{s}: {c}");
        source = c.source();
    }
    s
}
