//! A whole worker (issue 24, `weir worker`): attach to the coordinator, start the exchange
//! on the port registered, build the job once from the first deploy's arguments, then run
//! every attempt the coordinator deploys ([`Host::run`]) until it ends the job.
//!
//! A later deploy must carry the same arguments (a coordinator deploys one job); a restart
//! reuses the graph built once, as the executor of a single process does. The coordinator
//! silent for its heartbeat timeout, or its stream broken, ends the worker with an error
//! naming it: a worker never runs on without its coordinator.

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
    let mut deployed = attach_answering(config, build, false)?;
    let at = config.coordinator.clone();
    let described = format!(
        "worker {} ({}) at {}",
        deployed.id, config.name, config.exchange_address
    );
    let listen = listener
        .local_addr()
        .map_err(|e| Error::Cluster(format!("the exchange's listener has no address: {e}")))?;
    let exchange = Exchange::start_on(
        ExchangeConfig::new(deployed.id, listen, config.token.clone()),
        Some(listener),
    )
    .map_err(|e| Error::Cluster(format!("{described} cannot start its exchange: {e}")))?;
    let inbox = inbox(&mut deployed, &at);
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
        described.clone(),
        graph,
        cfg,
        &first.run_id,
        Arc::new(exchange),
        deployed.to_coordinator.clone(),
    )?
    .pausing_before_dial(config.pause_before_dial.clone());
    let mut next = host.run(&first, &inbox).map_err(|e| lost(&at, e))?;
    loop {
        next = match next {
            Next::Cancelled => wait_for_next(&inbox).map_err(|e| lost(&at, e))?,
            Next::Deploy(d) if d.job_args == first.job_args => {
                host.run(&d, &inbox).map_err(|e| lost(&at, e))?
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
                return Err(Error::Cluster(cause));
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

/// The error for a worker whose coordinator at `at` is gone.
fn lost(at: &str, e: Error) -> Error {
    match e {
        Error::Cluster(cause) => Error::Cluster(format!(
            "lost the coordinator at {at}: {cause} (it died, hung or is cut off; this \
                 worker stops with it)"
        )),
        e => e,
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
fn inbox(deployed: &mut super::DeployedWorker, at: &str) -> Inbox {
    let (tx, rx) = unbounded();
    let Some(mut stream) = deployed.from_coordinator.take() else {
        let _ = tx.send(Err(format!("no control stream from {at}")));
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
