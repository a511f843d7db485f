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
//! completed checkpoint, on them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use tokio::sync::mpsc::UnboundedSender;
use tonic::Status;

use super::{
    deploy_message, schedule_plan, CoordinatorEndpoint, DeploySpec, Offer, RegisteredWorker,
};
use crate::checkpoint::storage::CheckpointStorage;
use crate::cluster::fingerprint::PlanFingerprint;
use crate::cluster::handles::{from_proto, SubtaskRef};
use crate::cluster::proto::coordinator_message::Kind as ToWorker;
use crate::cluster::proto::worker_message::Kind as FromWorker;
use crate::cluster::proto::{self, CoordinatorMessage, WorkerMessage};
use crate::error::{Error, Result};
use crate::runtime::exchange::WorkerId;
use crate::runtime::hosts::{HostedAttempt, TaskHosts};
use crate::runtime::plan::Plan;
use crate::runtime::status::{StreamStatus, WorkerBoard, WorkerStatus, WorkerSubtask};
use crate::runtime::task::{TaskEvent, TaskMetrics};

/// The coordinator's half of one worker's control stream.
pub(crate) type ToWorkerTx = UnboundedSender<std::result::Result<CoordinatorMessage, Status>>;

/// Sends `kind` to a worker; a closed stream shows on the reader, which names the worker.
pub(crate) fn send(to: &ToWorkerTx, kind: ToWorker) {
    let _ = to.send(Ok(CoordinatorMessage { kind: Some(kind) }));
}

/// What the deploy waits for from a worker.
enum Reply {
    Deployed(u64),
    /// The worker will not run this job (another plan or binary): the job fails.
    Refused(u64, String),
    /// The worker could not start the attempt (a peer out of reach, its checkpoint
    /// unreadable): the attempt fails, and the restart strategy decides.
    StartFailed(u64, String),
    Lost(String),
}

/// Where a worker's reports go during the current attempt.
#[derive(Default)]
struct Route {
    attempt: u32,
    events: Option<Sender<TaskEvent>>,
    /// The plan's tasks by head uid and subtask: their index and parallelism.
    tasks: HashMap<(String, u32), (usize, u32)>,
    /// The executor's counters, per task of the plan.
    metrics: Vec<Arc<TaskMetrics>>,
}

/// Per worker and task, the records the worker reported for it (over every attempt it ran
/// the task in): a task's count for the job is the sum over the workers that ran it, the
/// lost ones' last reports included.
type Reported = Arc<Mutex<HashMap<(WorkerId, usize), u64>>>;

/// A registered worker, with its reader.
struct Member {
    id: WorkerId,
    /// Its `--name`.
    name: String,
    slots: u32,
    exchange_address: String,
    /// When the coordinator last heard from it (wall milliseconds).
    last_heard: Arc<AtomicU64>,
    /// The subtasks (head uid, index) the current attempt runs on it.
    assigned: Vec<(String, u32)>,
    /// Its exchange streams, as it last reported them.
    streams: Arc<Mutex<Vec<StreamStatus>>>,
    /// `worker N (name) at ADDRESS`.
    described: String,
    to_worker: ToWorkerTx,
    replies: Receiver<Reply>,
    route: Arc<Mutex<Route>>,
    /// Why it was lost, once it was.
    lost: Arc<Mutex<Option<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Member {
    fn start(w: RegisteredWorker, run_id: Arc<str>, reported: Reported) -> Member {
        let described = w.describe();
        let RegisteredWorker {
            id,
            name,
            slots,
            exchange_address,
            last_heard,
            to_worker,
            from_worker,
        } = w;
        let streams: Arc<Mutex<Vec<StreamStatus>>> = Arc::default();
        let (replies_tx, replies) = crossbeam_channel::unbounded();
        let route: Arc<Mutex<Route>> = Arc::default();
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let reader = {
            let (route, lost, who) = (route.clone(), lost.clone(), described.clone());
            let streams = streams.clone();
            std::thread::Builder::new()
                .name(format!("weir-coordinator-worker-{id}"))
                .spawn(move || {
                    let reports = Reports {
                        who: &who,
                        id,
                        route: &route,
                        replies: &replies_tx,
                        run_id: &run_id,
                        reported: &reported,
                        streams: &streams,
                    };
                    read(from_worker, &reports, &lost);
                })
                .ok()
        };
        Member {
            id,
            name,
            slots,
            exchange_address,
            last_heard,
            assigned: Vec::new(),
            streams,
            described,
            to_worker,
            replies,
            route,
            lost,
            reader,
        }
    }

    fn lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The member as the status lists it, at wall time `now_ms`.
    fn status(&self, now_ms: u64) -> WorkerStatus {
        let lost = self.lost();
        WorkerStatus {
            id: self.id,
            name: self.name.clone(),
            address: self.exchange_address.clone(),
            slots: self.slots,
            heartbeat_age_ms: Some(now_ms.saturating_sub(self.last_heard.load(Relaxed))),
            state: if lost.is_some() { "lost" } else { "up" }.into(),
            lost,
            subtasks: (self.assigned.iter())
                .map(|(uid, subtask)| WorkerSubtask {
                    chain: String::new(),
                    task_uid: uid.clone(),
                    subtask: *subtask,
                })
                .collect(),
            streams: self
                .streams
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
}

/// Where one worker's reports go.
struct Reports<'a> {
    /// `worker N (name) at ADDRESS`.
    who: &'a str,
    id: WorkerId,
    route: &'a Mutex<Route>,
    replies: &'a Sender<Reply>,
    /// The coordinator's run id, under which the worker wrote its files.
    run_id: &'a str,
    reported: &'a Reported,
    /// The worker's exchange streams, as it last reported them.
    streams: &'a Mutex<Vec<StreamStatus>>,
}

impl Reports<'_> {
    /// Counts what the worker reported of its subtasks' records into the executor's
    /// counters.
    fn progress(&self, route: &Route, p: &proto::Progress) {
        *self.streams.lock().unwrap_or_else(|p| p.into_inner()) = (p.streams.iter())
            .map(|s| StreamStatus {
                peer: s.peer,
                bytes_sent: s.bytes_sent,
                bytes_received: s.bytes_received,
                frames_sent: s.frames_sent,
                frames_received: s.frames_received,
                permit_waits: s.permit_waits,
                permit_wait_ms: s.permit_wait_micros as f64 / 1000.0,
            })
            .collect();
        let mut reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        for s in &p.subtasks {
            let Some(&(t, _)) = route.tasks.get(&(s.task_uid.clone(), s.subtask)) else {
                continue;
            };
            reported.insert((self.id, t), s.records_in);
            let total: u64 = (reported.iter())
                .filter(|((_, task), _)| *task == t)
                .map(|(_, r)| *r)
                .sum();
            if let Some(m) = route.metrics.get(t) {
                m.records_in
                    .store(total, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

/// Reads a worker's reports until its stream ends; see the module docs.
fn read(
    from: Receiver<std::result::Result<WorkerMessage, String>>,
    reports: &Reports<'_>,
    lost: &Mutex<Option<String>>,
) {
    let (who, route, replies, run_id) =
        (reports.who, reports.route, reports.replies, reports.run_id);
    let cause = loop {
        let kind = match from.recv() {
            Ok(Ok(WorkerMessage { kind: Some(k) })) => k,
            Ok(Ok(WorkerMessage { kind: None })) => continue,
            Ok(Err(cause)) => break cause,
            Err(_) => break "it closed its control stream".to_string(),
        };
        let route = route.lock().unwrap_or_else(|p| p.into_inner());
        let task = |uid: &str, subtask: u32| route.tasks.get(&(uid.to_string(), subtask));
        let event = match kind {
            FromWorker::Deployed(d) => {
                let _ = replies.send(Reply::Deployed(d.attempt));
                None
            }
            FromWorker::TaskFailed(f) if f.task_uid.is_empty() => {
                if f.task != crate::cluster::worker::START {
                    let _ = replies.send(Reply::Refused(f.attempt, f.cause));
                    None
                } else {
                    // Also an event: the deploy may have been answered already.
                    let _ = replies.send(Reply::StartFailed(f.attempt, f.cause.clone()));
                    Some(TaskEvent::AttemptFailed {
                        attempt: f.attempt as u32,
                        error: Error::Cluster(f.cause),
                    })
                }
            }
            FromWorker::TaskFailed(f) => task(&f.task_uid, f.subtask).map(|&(t, _)| {
                let error = if f.cancelled {
                    Error::Cancelled
                } else {
                    Error::TaskFailed {
                        task: f.task,
                        cause: format!("{} (on {who})", f.cause),
                    }
                };
                TaskEvent::Failed {
                    attempt: f.attempt as u32,
                    task: t,
                    error,
                }
            }),
            FromWorker::Ack(a) => task(&a.task_uid, a.subtask).map(|&(t, parallelism)| {
                let of = SubtaskRef {
                    task_uid: a.task_uid.clone(),
                    subtask: a.subtask,
                    parallelism,
                };
                match from_proto(&a, &of, run_id) {
                    Ok(ack) => TaskEvent::Ack {
                        attempt: a.attempt as u32,
                        task: t,
                        checkpoint: a.checkpoint_id,
                        ack,
                    },
                    Err(reason) => TaskEvent::Decline {
                        attempt: a.attempt as u32,
                        checkpoint: a.checkpoint_id,
                        reason: format!("{reason} (from {who})"),
                    },
                }
            }),
            FromWorker::Decline(d) => Some(TaskEvent::Decline {
                attempt: d.attempt as u32,
                checkpoint: d.checkpoint_id,
                reason: format!("{} (on {who})", d.cause),
            }),
            FromWorker::InputEnded(e) => {
                task(&e.task_uid, e.subtask).map(|&(t, _)| TaskEvent::InputEnded {
                    attempt: e.attempt as u32,
                    task: t,
                })
            }
            FromWorker::Finished(f) => {
                task(&f.task_uid, f.subtask).map(|&(t, _)| TaskEvent::Finished {
                    attempt: f.attempt as u32,
                    task: t,
                })
            }
            FromWorker::Progress(p) => {
                reports.progress(&route, &p);
                None
            }
            FromWorker::Register(_) | FromWorker::Heartbeat(_) => None,
        };
        if let (Some(event), Some(events)) = (event, &route.events) {
            let _ = events.send(event);
        }
    };
    let message = format!(
        "lost {who}: {cause} (the worker died, hung or is cut off; the job restarts from its \
         latest checkpoint once enough workers are registered)"
    );
    *lost.lock().unwrap_or_else(|p| p.into_inner()) = Some(message.clone());
    let _ = replies.send(Reply::Lost(message.clone()));
    let route = route.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(events) = &route.events {
        let _ = events.send(TaskEvent::AttemptFailed {
            attempt: route.attempt,
            error: Error::Cluster(message),
        });
    }
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
    /// The workers as the status last listed them: what a status read shows while a
    /// deploy holds the members (it may wait for workers to register).
    listed: Mutex<Vec<WorkerStatus>>,
}

impl WorkerPool {
    /// A pool serving workers on `endpoint`.
    pub(crate) fn new(endpoint: CoordinatorEndpoint, config: PoolConfig) -> WorkerPool {
        WorkerPool {
            endpoint,
            config,
            members: Default::default(),
            reported: Reported::default(),
            listed: Mutex::default(),
        }
    }

    /// Tells every worker the job ended (`message`), and waits (at most `timeout`) until
    /// each closed its stream, so none outlives the job unknowingly.
    pub(crate) fn end(&self, succeeded: bool, message: &str, timeout: Duration) {
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

    /// Drops lost workers and waits until `config.workers` are registered, each named as
    /// it registers.
    fn fill(&self, run_id: &Arc<str>) -> Result<()> {
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members.retain(|m| match m.lost() {
            Some(why) => {
                eprintln!("weir: {why}");
                false
            }
            None => true,
        });
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
            members.push(Member::start(w, run_id.clone(), self.reported.clone()));
        }
        members.sort_by_key(|m| m.id);
        Ok(())
    }

    /// Deploys on the current members; `Ok(Err(why))` when one was lost meanwhile.
    fn try_deploy(
        &self,
        plan: &Plan,
        attempt: u32,
        restore: Option<&Path>,
        events: &Sender<TaskEvent>,
        storage: &CheckpointStorage,
        metrics: &[Arc<TaskMetrics>],
    ) -> Result<std::result::Result<HostedAttempt, String>> {
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
        for m in members.iter() {
            send(&m.to_worker, ToWorker::Deploy(deploy_message(&spec)));
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
        restore: Option<&Path>,
        events: &Sender<TaskEvent>,
        storage: &CheckpointStorage,
        metrics: &[Arc<TaskMetrics>],
    ) -> Result<HostedAttempt> {
        self.fill(&storage.run_id().into())?;
        match self.try_deploy(plan, attempt, restore, events, storage, metrics)? {
            Ok(hosted) => Ok(hosted),
            Err(why) => {
                // A worker was lost during the deploy: the attempt fails at once, and the
                // restart strategy starts the next one (a fresh attempt number, so nothing
                // of this one is mistaken for the next one's) once enough workers are back.
                let _ = events.send(TaskEvent::AttemptFailed {
                    attempt,
                    error: Error::Cluster(why),
                });
                Ok(HostedAttempt {
                    controls: plan
                        .tasks
                        .iter()
                        .map(|_| crossbeam_channel::unbounded().0)
                        .collect(),
                    handles: Vec::new(),
                    write_frozen: Box::new(|_, _| {}),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    fn records(uid: &str, subtask: u32, records_in: u64) -> proto::SubtaskRecords {
        proto::SubtaskRecords {
            task_uid: uid.into(),
            subtask,
            records_in,
        }
    }

    /// A task's count is the sum over the workers that ran it: a lost worker's last report
    /// stays, its replacement's adds to it, and a worker's newer report replaces its own.
    #[test]
    fn the_workers_reports_add_up_per_task() {
        let metrics: Vec<Arc<TaskMetrics>> = (0..2).map(|_| Arc::default()).collect();
        let route = Route {
            tasks: [(("gen".into(), 0), (0, 2)), (("gen".into(), 1), (1, 2))].into(),
            metrics: metrics.clone(),
            ..Route::default()
        };
        let reported = Reported::default();
        let (replies, _) = crossbeam_channel::unbounded();
        let route_lock = Mutex::new(Route::default());
        let streams = Mutex::default();
        let worker = |id| Reports {
            who: "w",
            id,
            route: &route_lock,
            replies: &replies,
            run_id: "r",
            reported: &reported,
            streams: &streams,
        };
        let report = |subtasks| proto::Progress {
            subtasks,
            streams: Vec::new(),
        };
        worker(1).progress(
            &route,
            &report(vec![records("gen", 0, 10), records("gen", 1, 7)]),
        );
        worker(1).progress(&route, &report(vec![records("gen", 0, 25)]));
        assert_eq!(metrics[0].records_in.load(Relaxed), 25);
        assert_eq!(metrics[1].records_in.load(Relaxed), 7);
        // Its exchange streams, as it reported them last.
        let figures = proto::StreamFigures {
            peer: 2,
            bytes_sent: 4096,
            bytes_received: 128,
            frames_sent: 8,
            frames_received: 3,
            permit_waits: 5,
            permit_wait_micros: 2500,
        };
        worker(1).progress(
            &route,
            &proto::Progress {
                subtasks: Vec::new(),
                streams: vec![figures],
            },
        );
        let s = streams.lock().unwrap()[0];
        assert_eq!((s.peer, s.bytes_sent, s.bytes_received), (2, 4096, 128));
        assert_eq!((s.permit_waits, s.permit_wait_ms), (5, 2.5));
        // Worker 2 took subtask 1 over after worker 1 was lost.
        worker(2).progress(&route, &report(vec![records("gen", 1, 5)]));
        assert_eq!(metrics[1].records_in.load(Relaxed), 12);
        // A subtask the plan does not have changes nothing.
        worker(2).progress(&route, &report(vec![records("other", 0, 99)]));
        assert_eq!(metrics[0].records_in.load(Relaxed), 25);
    }
}
