//! A job run by the coordinator of a cluster (issue 24, `--workers N`): start the control
//! endpoint, then run the job through the executor with every task on the workers
//! ([`WorkerPool`]), and tell the workers how it ended.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::pool::{PoolConfig, WorkerPool};
use super::{CoordinatorConfig, CoordinatorEndpoint};
use crate::api::stream::StreamEnvironment;
use crate::cluster::fingerprint::{binary_version, PlanFingerprint};
use crate::error::{Error, Result};
use crate::runtime::coordinator::executor::JobResult;

/// How a coordinator runs its job: the cluster's flags.
#[derive(Debug, Clone)]
pub struct ClusterRun {
    /// How many workers the job runs on (`--workers`).
    pub workers: usize,
    /// Where workers dial (`--cluster-listen`; port 0 picks a free one).
    pub listen: SocketAddr,
    /// The cluster's token (`--cluster-token`).
    pub token: String,
    /// A worker silent this long counts as lost (`--heartbeat-timeout`).
    pub heartbeat_timeout: Duration,
    /// How long to wait for enough workers to register, at the start and after a loss.
    pub registration_timeout: Duration,
    /// The job's arguments, from which every worker builds the same graph.
    pub job_args: Vec<String>,
    /// Mutual TLS on the control endpoint when certificates are given.
    pub tls: Option<crate::runtime::exchange::TlsConfig>,
}

/// Runs the job of `env` as the coordinator of `run`; `on_listening` hears the endpoint's
/// address once workers can dial it (the runner prints it).
pub(crate) fn execute(
    env: StreamEnvironment,
    run: ClusterRun,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<JobResult> {
    if run.workers == 0 {
        return Err(Error::Cluster(
            "--workers must be at least 1 (leave it out to run in this process)".into(),
        ));
    }
    let fingerprint = PlanFingerprint::of(&env, binary_version())?;
    let local_dir = (!crate::storage::is_remote(&env.config().checkpoint_dir))
        .then(|| env.config().checkpoint_dir.clone());
    let endpoint = CoordinatorEndpoint::start(CoordinatorConfig {
        listen: run.listen,
        token: run.token.clone(),
        binary_version: binary_version().into(),
        heartbeat_timeout: run.heartbeat_timeout,
        tls: run.tls.clone(),
    })?;
    on_listening(endpoint.local_addr());
    let pool = Arc::new(WorkerPool::new(
        endpoint,
        PoolConfig {
            workers: run.workers,
            job_args: run.job_args,
            fingerprint,
            registration_timeout: run.registration_timeout,
            deploy_timeout: run.registration_timeout,
            end_timeout: run.heartbeat_timeout,
            local_checkpoint_dir: local_dir,
        },
    ));
    env.set_worker_board(pool.clone());
    let result = env.execute_hosted(pool.clone());
    // Told already when the job ran (before its end sweeps); not when it failed to start.
    let (succeeded, message) = ended(result.as_ref().map(|_| ()));
    pool.end(succeeded, &message);
    result
}

/// What the workers are told of a job that ended with `outcome`.
pub(crate) fn ended(outcome: std::result::Result<(), &Error>) -> (bool, String) {
    match outcome {
        Ok(()) => (true, "the job finished".to_string()),
        Err(e) => (false, format!("the job failed: {e}")),
    }
}

/// Whether a worker whose exchange listens at `address` runs on this host: a loopback
/// address, or `localhost`.
pub(crate) fn on_this_host(address: &str) -> bool {
    match address.parse::<SocketAddr>() {
        Ok(a) => a.ip().is_loopback(),
        Err(_) => address
            .rsplit_once(':')
            .is_some_and(|(host, _)| host.eq_ignore_ascii_case("localhost")),
    }
}

/// The refusal of a worker on another host while the checkpoints go to `dir` on this one.
pub(crate) fn refuse_local_dir(worker: &str, dir: &Path) -> Error {
    Error::Cluster(format!(
        "{worker} is not on this host, and --checkpoint-dir {} is a local folder the \
         workers on other hosts cannot write to: give every process a checkpoint storage \
         all hosts reach (--checkpoint-dir s3://bucket/prefix)",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_workers_are_on_this_host() {
        assert!(on_this_host("127.0.0.1:7000"));
        assert!(on_this_host("[::1]:7000"));
        assert!(on_this_host("localhost:7000"));
        assert!(!on_this_host("10.0.0.7:7000"));
        assert!(!on_this_host("worker-2.weir:7000"));
        let e = refuse_local_dir("worker 2 (w) at 10.0.0.7:7000", Path::new("ckpt"));
        let e = e.to_string();
        assert!(e.contains("worker 2 (w) at 10.0.0.7:7000"), "{e}");
        assert!(e.contains("--checkpoint-dir ckpt"), "{e}");
        assert!(e.contains("s3://"), "{e}");
    }
}
