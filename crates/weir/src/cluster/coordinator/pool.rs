//! The coordinator's workers during a job (issue 24): the [`TaskHosts`] the executor's
//! attempt loop deploys each attempt through.
//!
//! Per registered worker a reader thread turns what the worker reports into the executor's
//! [`TaskEvent`]s (Ack with its state handles, Decline, InputEnded, Finished, TaskFailed),
//! and a lost worker — its stream broken, or silent for the heartbeat timeout — into
//! [`TaskEvent::AttemptFailed`] naming it and its address: the attempt ends, every worker
//! is told to cancel (the executor's `cancel_and_join` sends Cancel through the forwarder,
//! [`super::forward`]), and the restart strategy decides. The next [`TaskHosts::deploy`]
//! drops the lost workers, waits (bounded) until enough are registered again — a restarted
//! worker re-registers under a new id — and deploys the attempt, restored from the latest
//! completed checkpoint, on them. A worker a peer reported lost gets no deploy until it
//! answers or is counted lost ([`super::suspects`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use tokio::sync::mpsc::UnboundedSender;
use tonic::Status;

use super::member::{Injected, Member, Reply, Reported, Route};
use super::suspects::{Standing, Suspects};
use super::{deploy_message, schedule_plan, CoordinatorEndpoint, DeploySpec, Offer};
use crate::checkpoint::restore::RestoredCheckpoint;
use crate::checkpoint::storage::CheckpointStorage;
use crate::cluster::fingerprint::PlanFingerprint;
use crate::cluster::proto::coordinator_message::Kind as ToWorker;
use crate::cluster::proto::{self, CoordinatorMessage};
use crate::error::{Error, Result};
use crate::runtime::coordinator::attempt::Attempt;
use crate::runtime::coordinator::hosts::{PlantedFailure, TaskHosts};
use crate::runtime::exchange::WorkerId;
use crate::runtime::plan::Plan;
use crate::runtime::status::{WorkerBoard, WorkerStatus};
use crate::runtime::task::{TaskEvent, TaskMetrics};

/// The coordinator's half of one worker's control stream.
pub(crate) type ToWorkerTx = UnboundedSender<std::result::Result<CoordinatorMessage, Status>>;

/// Sends `kind` to a worker; a closed stream shows on the reader, which names the worker.
pub(crate) fn send(to: &ToWorkerTx, kind: ToWorker) {
    let _ = to.send(Ok(CoordinatorMessage { kind: Some(kind) }));
}

/// What the coordinator runs a job on: its endpoint, how many workers, and what each
/// deploy carries besides the schedule.
pub(crate) struct PoolConfig {
    /// How many workers the job runs on (`--workers`).
    pub(crate) workers: usize,
    /// The job's arguments, from which every worker builds the graph.
    pub(crate) job_args: Vec<String>,
    /// The coordinator's plan fingerprint.
    pub(crate) fingerprint: PlanFingerprint,
    /// How long a deploy waits for enough workers to register.
    pub(crate) registration_timeout: Duration,
    /// How long a registered worker may take to build its tasks and answer a deploy.
    pub(crate) deploy_timeout: Duration,
    /// How long the job's end waits for each worker to close its stream (its writers
    /// done): the heartbeat timeout, after which a silent worker counts as lost anyway.
    pub(crate) end_timeout: Duration,
    /// The job's checkpoint folder when it is local: then every worker must be on this
    /// host (the others could not write to it).
    pub(crate) local_checkpoint_dir: Option<std::path::PathBuf>,
}

/// The coordinator's workers; see the module docs.
pub(crate) struct WorkerPool {
    endpoint: CoordinatorEndpoint,
    config: PoolConfig,
    members: Mutex<Vec<Member>>,
    reported: Reported,
    suspects: Suspects,
    injected: Injected,
    /// The workers as the status last listed them: what a status read shows while a
    /// deploy holds the members (it may wait for workers to register).
    listed: Mutex<Vec<WorkerStatus>>,
    /// The workers were told the job ended ([`WorkerPool::end`] runs once).
    ended: std::sync::atomic::AtomicBool,
}

impl WorkerPool {
    /// A pool serving workers on `endpoint`.
    pub(crate) fn new(endpoint: CoordinatorEndpoint, config: PoolConfig) -> WorkerPool {
        WorkerPool {
            endpoint,
            config,
            members: Default::default(),
            reported: Reported::default(),
            suspects: Suspects::default(),
            injected: Injected::default(),
            listed: Mutex::default(),
            ended: Default::default(),
        }
    }

    /// Tells every worker the job ended (`message`), and waits (at most
    /// `config.end_timeout`) until each closed its stream, so none outlives the job
    /// unknowingly. A worker closes it only once its snapshot writers are done, so after
    /// this no state file of the job appears any more (the end sweeps of `shared/` rely
    /// on it). Only the first call tells them.
    pub(crate) fn end(&self, succeeded: bool, message: &str) {
        if self.ended.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let timeout = self.config.end_timeout;
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        for m in members.iter() {
            let ended = proto::JobEnded {
                succeeded,
                message: message.to_string(),
            };
            send(&m.to_worker, ToWorker::JobEnded(ended));
        }
        let deadline = Instant::now() + timeout;
        for m in members.iter_mut() {
            while m.lost().is_none() && Instant::now() < deadline {
                // The reader reports the stream's end on the replies channel.
                if let Ok(Reply::Lost(_)) = m.replies.recv_deadline(deadline) {
                    break;
                }
            }
            if m.lost().is_some() {
                if let Some(r) = m.reader.take() {
                    let _ = r.join();
                }
            }
        }
    }

    /// Drops lost workers, waits until every worker a peer reported lost answered or is
    /// counted lost too, and then until `config.workers` are registered, each named as it
    /// registers.
    fn fill(&self, run_id: &Arc<str>) -> Result<()> {
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        self.drop_lost(&mut members);
        self.settle_suspects(&members)?;
        self.drop_lost(&mut members);
        let want = self.config.workers;
        let timeout = self.config.registration_timeout;
        let deadline = Instant::now() + timeout;
        while members.len() < want {
            let left = deadline.saturating_duration_since(Instant::now());
            let w = match self.endpoint.wait_for_workers(1, left) {
                Ok(mut new) => new.remove(0),
                Err(_) => {
                    return Err(Error::Cluster(format!(
                        "{} of {want} workers registered within {timeout:?} (start them with \
                         `weir worker --coordinator {}` and the cluster token)",
                        members.len(),
                        self.endpoint.local_addr()
                    )))
                }
            };
            if let Some(dir) = &self.config.local_checkpoint_dir {
                if !super::run::on_this_host(&w.exchange_address) {
                    return Err(super::run::refuse_local_dir(&w.describe(), dir));
                }
            }
            eprintln!("weir: {} registered ({} slots)", w.describe(), w.slots);
            members.push(Member::start(
                w,
                run_id.clone(),
                self.reported.clone(),
                self.suspects.clone(),
                self.injected.clone(),
            ));
        }
        members.sort_by_key(|m| m.id);
        Ok(())
    }

    /// Drops the members counted lost, naming each.
    fn drop_lost(&self, members: &mut Vec<Member>) {
        members.retain(|m| match m.lost() {
            Some(why) => {
                eprintln!("weir: {why}");
                self.suspects.dropped(m.id);
                false
            }
            None => true,
        });
    }

    /// Waits until no member is suspect: each answered (a message after the report) or
    /// was counted lost — which its heartbeat timeout guarantees, so the wait is bounded
    /// by it; `registration_timeout` is only the safety net.
    fn settle_suspects(&self, members: &[Member]) -> Result<()> {
        let deadline = Instant::now() + self.config.registration_timeout;
        let mut waiting_for: Vec<WorkerId> = Vec::new();
        loop {
            let suspect: Vec<&Member> = members
                .iter()
                .filter(|m| m.lost().is_none() && self.suspects.standing(m.id) == Standing::Suspect)
                .collect();
            for m in members.iter().filter(|m| waiting_for.contains(&m.id)) {
                if m.lost().is_none() && !suspect.iter().any(|s| s.id == m.id) {
                    eprintln!(
                        "weir: {} answered after it was reported lost: it takes part in the \
                         next attempt",
                        m.described
                    );
                }
            }
            waiting_for.retain(|id| suspect.iter().any(|s| s.id == *id));
            for m in &suspect {
                if !waiting_for.contains(&m.id) {
                    eprintln!(
                        "weir: waiting for {} to answer before the next deploy (a peer \
                         reported it lost)",
                        m.described
                    );
                    waiting_for.push(m.id);
                }
            }
            if suspect.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Cluster(format!(
                    "{} neither answered nor was counted lost within {:?} after a peer \
                     reported it lost (is its --heartbeat-timeout longer than that?)",
                    suspect[0].described, self.config.registration_timeout
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Deploys on the current members; `Ok(Err(why))` when one was lost meanwhile.
    #[allow(clippy::too_many_arguments)]
    fn try_deploy(
        &self,
        plan: &Plan,
        attempt: u32,
        restore: Option<&Path>,
        events: &Sender<TaskEvent>,
        storage: &CheckpointStorage,
        metrics: &[Arc<TaskMetrics>],
        planted: Option<&PlantedFailure>,
    ) -> Result<std::result::Result<Attempt, String>> {
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        let offers: Vec<Offer> = members
            .iter()
            .map(|m| Offer {
                id: m.id,
                slots: m.slots,
                name: m.described.clone(),
            })
            .collect();
        let assignments = schedule_plan(plan, &offers)?;
        let tasks: HashMap<(String, u32), (usize, u32)> = plan
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let uid = plan.uids[t.chain[0]].clone();
                ((uid, t.subtask), (i, t.parallelism))
            })
            .collect();
        for m in members.iter_mut() {
            m.assigned = (assignments.iter())
                .filter(|a| a.worker == m.id)
                .map(|a| (a.task_uid.clone(), a.subtask))
                .collect();
            let mut route = m.route.lock().unwrap_or_else(|p| p.into_inner());
            *route = Route {
                attempt,
                events: Some(events.clone()),
                tasks: tasks.clone(),
                metrics: metrics.to_vec(),
            };
        }
        let spec = DeploySpec {
            assignments: assignments.clone(),
            workers: members
                .iter()
                .map(|m| (m.id, m.exchange_address.clone()))
                .collect(),
            attempt: u64::from(attempt),
            job_args: self.config.job_args.clone(),
            fingerprint: self.config.fingerprint.clone(),
            restore_from: restore.map_or_else(String::new, |p| p.display().to_string()),
            run_id: storage.run_id().to_string(),
        };
        // The planted failure fires on one worker, picked by the seed and its number; every
        // worker holds its sources once its share of the records still to go passed, until
        // a checkpoint with progress completed, as every source does in one process.
        let planter = planted.map(|p| {
            let at = (p.seed as usize).wrapping_add(p.number) % members.len().max(1);
            let share = p.records_to_go / members.len().max(1) as u64;
            (members[at].id, p, share)
        });
        for m in members.iter() {
            let mut deploy = deploy_message(&spec);
            if let Some((_, p, share)) = planter {
                deploy.injected_failures_planned = p.planned as u32;
                deploy.inject_after_records = share;
            }
            if let Some((_, p, share)) = planter.filter(|(id, _, _)| *id == m.id) {
                deploy.inject_failure = p.number as u32;
                eprintln!(
                    "weir: attempt {attempt} plants injected failure {} of {} on {} (after {share} \
                     of its records, once a checkpoint with progress completed)",
                    p.number, p.planned, m.described
                );
            }
            send(&m.to_worker, ToWorker::Deploy(deploy));
        }
        let cancel_all = |cause: &str| {
            for m in members.iter() {
                let cancel = proto::Cancel {
                    attempt: u64::from(attempt),
                    cause: cause.to_string(),
                };
                send(&m.to_worker, ToWorker::Cancel(cancel));
            }
        };
        let deadline = Instant::now() + self.config.deploy_timeout;
        for m in members.iter() {
            loop {
                match m.replies.recv_deadline(deadline) {
                    Ok(Reply::Deployed(a)) if a == u64::from(attempt) => break,
                    Ok(Reply::Refused(a, cause)) if a == u64::from(attempt) => {
                        cancel_all("another worker refused the deploy");
                        return Err(Error::Cluster(format!(
                            "{} refused the deploy: {cause}",
                            m.described
                        )));
                    }
                    Ok(Reply::Lost(why)) => {
                        cancel_all("a worker was lost during the deploy");
                        return Ok(Err(why));
                    }
                    Ok(Reply::StartFailed(a, why)) if a == u64::from(attempt) => {
                        cancel_all("a worker could not start the attempt");
                        return Ok(Err(why));
                    }
                    Ok(_) => continue, // an older attempt's
                    Err(_) => {
                        cancel_all("a worker did not answer the deploy");
                        return Err(Error::Cluster(format!(
                            "{} did not answer the deploy of attempt {attempt} within {:?} \
                             (is it overloaded or hung?)",
                            m.described, self.config.deploy_timeout
                        )));
                    }
                }
            }
        }
        for m in members.iter() {
            let mine: Vec<String> = assignments
                .iter()
                .filter(|a| a.worker == m.id)
                .map(|a| format!("{}[{}]", a.task_uid, a.subtask))
                .collect();
            eprintln!(
                "weir: attempt {attempt} runs on {}: {}",
                m.described,
                mine.join(", ")
            );
        }
        let to: Vec<(ToWorkerTx, String, u32)> = plan
            .tasks
            .iter()
            .zip(&assignments)
            .map(|(t, a)| {
                let m = members
                    .iter()
                    .find(|m| m.id == a.worker)
                    .expect("every task is assigned to a member");
                (m.to_worker.clone(), a.task_uid.clone(), t.subtask)
            })
            .collect();
        let workers: Vec<WorkerId> = assignments.iter().map(|a| a.worker).collect();
        Ok(Ok(super::forward::start(
            attempt,
            to,
            &workers,
            storage.clone(),
            planted.map(|p| p.injector.clone()),
        )?))
    }
}

/// The dashboard's and `/metrics`' view of the workers: the members now, or, while a
/// deploy holds them (waiting for registrations, at most its timeouts), as last listed —
/// a status read never waits for a deploy.
impl WorkerBoard for WorkerPool {
    fn workers(&self) -> Vec<WorkerStatus> {
        let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        if let Ok(members) = self.members.try_lock() {
            let now = crate::clock::wall_ms();
            *listed = members.iter().map(|m| m.status(now)).collect();
        }
        listed.clone()
    }
}

impl TaskHosts for WorkerPool {
    fn deploy(
        &self,
        plan: &Plan,
        attempt: u32,
        restore: Option<&RestoredCheckpoint>,
        events: &Sender<TaskEvent>,
        storage: &CheckpointStorage,
        metrics: &[Arc<TaskMetrics>],
        planted: Option<PlantedFailure>,
    ) -> Result<Attempt> {
        self.fill(&storage.run_id().into())?;
        let tried = self.try_deploy(
            plan,
            attempt,
            restore.map(|r| r.path.as_path()),
            events,
            storage,
            metrics,
            planted.as_ref(),
        )?;
        match tried {
            Ok(hosted) => Ok(hosted),
            Err(why) => {
                // A worker was lost during the deploy: the attempt fails at once, and the
                // restart strategy starts the next one (a fresh attempt number, so nothing
                // of this one is mistaken for the next one's) once enough workers are back.
                let _ = events.send(TaskEvent::AttemptFailed {
                    attempt,
                    error: Error::Cluster(why),
                });
                Ok(Attempt {
                    subtasks: crate::runtime::worker::Subtasks {
                        controls: (plan.tasks.iter())
                            .map(|_| crossbeam_channel::unbounded().0)
                            .collect(),
                        sources: Vec::new(),
                        handles: Vec::new(),
                        finished: vec![false; plan.tasks.len()],
                    },
                    write_frozen: Box::new(|_, _, _| {}),
                })
            }
        }
    }

    fn uncounted_failure(&self, attempt: u32) -> bool {
        self.suspects.uncounted(attempt)
    }

    fn end_job(&self, outcome: std::result::Result<(), &Error>) {
        let (succeeded, message) = super::run::ended(outcome);
        self.end(succeeded, &message);
    }

    fn injected_failure(&self, attempt: u32) -> bool {
        (self.injected.lock().unwrap_or_else(|p| p.into_inner())).contains(&attempt)
    }
}
