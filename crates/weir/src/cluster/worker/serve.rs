//! A whole worker (issue 24, `weir worker`): attach to the coordinator, start the exchange
//! on the port registered, build the job from the first deploy's arguments, then run every
//! attempt the coordinator deploys ([`Host::run`]) until it ends the job.
//!
//! A later deploy must carry the same arguments (a coordinator deploys one job); a restart
//! reuses the graph built once, as the executor of a single process does.
//!
//! **A lost coordinator.** Its stream broken, or silent for its heartbeat timeout, ends
//! this worker's *membership*, never silently the worker: the attempt's subtasks are
//! cancelled and joined, and the worker registers again — with backoff, for up to
//! `--connect-timeout` — with whatever listens at `--coordinator` (the same coordinator,
//! if it only counted this worker as lost; a restarted one, which restores the latest
//! checkpoint). The new membership starts clean: a new worker id (its exchange, on the same
//! port, fails and forgets every stream of the old one: [`Exchange::rejoin`]), the job
//! built afresh from the new first deploy, and its state files written under the new
//! coordinator's run id. Nothing of the old membership is committed by the new one: the
//! coordinator alone completes checkpoints.

use std::net::TcpListener;
use std::sync::Arc;

use crossbeam_channel::unbounded;

use super::host::{Host, Inbox, Next};
use super::{attach_answering, send, JobBuilder, WorkerConfig};
use crate::cluster::proto::coordinator_message::Kind as FromCoordinator;
use crate::cluster::proto::worker_message::Kind as ToCoordinator;
use crate::cluster::proto::{self, CoordinatorMessage};
use crate::error::{Error, Result};
use crate::runtime::exchange::{Exchange, ExchangeConfig};

/// How the job ended, as the coordinator said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd {
    /// The job succeeded (finished, or stopped with a savepoint).
    pub succeeded: bool,
    /// The coordinator's message (its error, when the job failed).
    pub message: String,
}

/// Runs a worker whose exchange serves on `listener` (bound before, so that its address is
/// what the worker registers) until the job ends; see the module docs.
pub fn serve(
    config: &WorkerConfig,
    listener: TcpListener,
    build: &JobBuilder<'_>,
) -> Result<JobEnd> {
    let at = &config.coordinator;
    let mut listener = Some(listener);
    let mut exchange: Option<Arc<Exchange>> = None;
    loop {
        let mut deployed = attach_answering(config, build, false, exchange.as_deref())?;
        let described = format!(
            "worker {} ({}) at {}",
            deployed.id, config.name, config.exchange_address
        );
        let this = match &exchange {
            Some(e) => e.clone(), // rejoined under the new id at registration
            None => {
                let listener = listener.take().ok_or_else(|| {
                    Error::Cluster("the exchange's listener was given away".into())
                })?;
                let listen = listener.local_addr().map_err(|e| {
                    Error::Cluster(format!("the exchange's listener has no address: {e}"))
                })?;
                let mut xc = ExchangeConfig::new(deployed.id, listen, config.token.clone());
                xc.run = deployed.deploy.run_id.clone();
                xc.tls = config.tls.clone();
                let e = Exchange::start_on(xc, Some(listener)).map_err(|e| {
                    Error::Cluster(format!("{described} cannot start its exchange: {e}"))
                })?;
                exchange.insert(Arc::new(e)).clone()
            }
        };
        match membership(config, &mut deployed, &described, this) {
            Ok(end) => return Ok(end),
            Err(Membership::Failed(e)) => return Err(e),
            Err(Membership::Lost(cause)) => eprintln!(
                "weir: {described} lost the coordinator at {at}: {cause} (it died, hung or \
                 is cut off, or counted this worker as lost); registering again, for up to \
                 --connect-timeout {:?}",
                config.connect_timeout
            ),
        }
    }
}

/// How one membership (a registration with a coordinator) ended, short of the job's end.
enum Membership {
    /// The coordinator is gone (its stream broke or went silent): register again.
    Lost(String),
    /// This worker cannot go on.
    Failed(Error),
}

/// Runs every attempt deployed to `deployed` (the job built once from its first deploy's
/// arguments, its state files under that coordinator's run id) until the job ends or the
/// coordinator is lost.
fn membership(
    config: &WorkerConfig,
    deployed: &mut super::DeployedWorker,
    described: &str,
    exchange: Arc<Exchange>,
) -> std::result::Result<JobEnd, Membership> {
    let inbox = inbox(deployed);
    let first = deployed.deploy.clone();
    let env = std::mem::replace(
        &mut deployed.env,
        crate::api::stream::StreamEnvironment::new(crate::runtime::config::JobConfig::new(
            "worker",
        )),
    );
    let (graph, cfg) = env.into_parts();
    let host = Host::new(
        deployed.id,
        described.to_string(),
        graph,
        cfg,
        &first.run_id,
        exchange,
        deployed.to_coordinator.clone(),
    )
    .map_err(Membership::Failed)?
    .pausing_before_dial(config.pause_before_dial.clone());
    let lost = |e: Error| match e {
        Error::Cluster(cause) => Membership::Lost(cause),
        e => Membership::Failed(e),
    };
    let mut next = host.run(&first, &inbox).map_err(lost)?;
    loop {
        next = match next {
            Next::Cancelled => wait_for_next(&inbox).map_err(lost)?,
            Next::Deploy(d) if d.job_args == first.job_args => {
                host.run(&d, &inbox).map_err(lost)?
            }
            Next::Deploy(d) => {
                let cause = format!(
                    "{described} runs the job of arguments {:?}, and was deployed another: {:?} \
                     (start a fresh worker for another job)",
                    first.job_args, d.job_args
                );
                send(
                    &deployed.to_coordinator,
                    ToCoordinator::TaskFailed(proto::TaskFailed {
                        attempt: d.attempt,
                        task: "deploy".into(),
                        cause: cause.clone(),
                        ..Default::default()
                    }),
                );
                return Err(Membership::Failed(Error::Cluster(cause)));
            }
            Next::Ended(e) => {
                return Ok(JobEnd {
                    succeeded: e.succeeded,
                    message: e.message,
                })
            }
        };
    }
}

/// After a cancel: the next deploy, or the job's end.
fn wait_for_next(inbox: &Inbox) -> Result<Next> {
    loop {
        match inbox.recv() {
            Ok(Ok(FromCoordinator::Deploy(d))) => return Ok(Next::Deploy(d)),
            Ok(Ok(FromCoordinator::JobEnded(e))) => return Ok(Next::Ended(e)),
            Ok(Ok(_)) => {} // heartbeats, late messages of the cancelled attempt
            Ok(Err(cause)) => return Err(Error::Cluster(cause)),
            Err(_) => {
                return Err(Error::Cluster(
                    "the coordinator's control stream closed".into(),
                ))
            }
        }
    }
}

/// The coordinator's messages on a channel the relay can select on; the stream ending,
/// breaking, or silent for the heartbeat timeout arrives as its last item.
fn inbox(deployed: &mut super::DeployedWorker) -> Inbox {
    let (tx, rx) = unbounded();
    let Some(mut stream) = deployed.from_coordinator.take() else {
        let _ = tx.send(Err("no control stream".into()));
        return rx;
    };
    let silence = deployed.heartbeat_timeout;
    deployed.runtime().spawn(async move {
        loop {
            let got = tokio::time::timeout(silence, stream.message()).await;
            let item = match got {
                Err(_) => Err(format!(
                    "no heartbeat for {silence:?} (the coordinator's --heartbeat-timeout)"
                )),
                Ok(Ok(Some(CoordinatorMessage { kind: Some(k) }))) => Ok(k),
                Ok(Ok(Some(CoordinatorMessage { kind: None }))) => continue,
                Ok(Ok(None)) => Err("the coordinator closed the control stream".into()),
                Ok(Err(s)) => Err(s.message().to_string()),
            };
            let last = item.is_err();
            if tx.send(item).is_err() || last {
                return;
            }
        }
    });
    rx
}
