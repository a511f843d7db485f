//! One registered worker as the coordinator's pool holds it during a job ([`Member`]),
//! and the reader thread that turns what the worker reports into the executor's
//! [`TaskEvent`]s (Ack with its state handles, Decline, InputEnded, Finished, TaskFailed,
//! progress and stream figures) and its loss into [`TaskEvent::AttemptFailed`]; see
//! [`super::pool`] for how the pool deploys attempts onto its members.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};

use super::pool::ToWorkerTx;
use super::suspects::Suspects;
use super::RegisteredWorker;
use crate::cluster::handles::{from_proto, SubtaskRef};
use crate::cluster::proto::worker_message::Kind as FromWorker;
use crate::cluster::proto::{self, WorkerMessage};
use crate::error::Error;
use crate::runtime::exchange::WorkerId;
use crate::runtime::status::{StreamStatus, WorkerStatus, WorkerSubtask};
use crate::runtime::task::{TaskEvent, TaskMetrics};

/// What the deploy waits for from a worker.
pub(super) enum Reply {
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
pub(super) struct Route {
    pub(super) attempt: u32,
    pub(super) events: Option<Sender<TaskEvent>>,
    /// The plan's tasks by head uid and subtask: their index and parallelism.
    pub(super) tasks: HashMap<(String, u32), (usize, u32)>,
    /// The executor's counters, per task of the plan.
    pub(super) metrics: Vec<Arc<TaskMetrics>>,
}

/// Per worker and task, the records the worker reported for it (over every attempt it ran
/// the task in): a task's count for the job is the sum over the workers that ran it, the
/// lost ones' last reports included.
pub(super) type Reported = Arc<Mutex<HashMap<(WorkerId, usize), u64>>>;

/// The attempts that failed by an injected failure (a worker's TaskFailed said so).
pub(super) type Injected = Arc<Mutex<HashSet<u32>>>;

/// A registered worker, with its reader.
pub(super) struct Member {
    pub(super) id: WorkerId,
    /// Its `--name`.
    pub(super) name: String,
    pub(super) slots: u32,
    pub(super) exchange_address: String,
    /// When the coordinator last heard from it (wall milliseconds).
    pub(super) last_heard: Arc<AtomicU64>,
    /// The subtasks (head uid, index) the current attempt runs on it.
    pub(super) assigned: Vec<(String, u32)>,
    /// Its exchange streams, as it last reported them.
    pub(super) streams: Arc<Mutex<Vec<StreamStatus>>>,
    /// `worker N (name) at ADDRESS`.
    pub(super) described: String,
    pub(super) to_worker: ToWorkerTx,
    pub(super) replies: Receiver<Reply>,
    pub(super) route: Arc<Mutex<Route>>,
    /// Why it was lost, once it was.
    pub(super) lost: Arc<Mutex<Option<String>>>,
    pub(super) reader: Option<std::thread::JoinHandle<()>>,
}

impl Member {
    pub(super) fn start(
        w: RegisteredWorker,
        run_id: Arc<str>,
        reported: Reported,
        suspects: Suspects,
        injected: Injected,
    ) -> Member {
        let described = w.describe();
        let RegisteredWorker {
            id,
            name,
            slots,
            exchange_address,
            last_heard,
            to_worker,
            from_worker,
            heard,
            ..
        } = w;
        suspects.member(id, heard);
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
                        suspects: &suspects,
                        injected: &injected,
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

    pub(super) fn lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The member as the status lists it, at wall time `now_ms`.
    pub(super) fn status(&self, now_ms: u64) -> WorkerStatus {
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
    /// Where a peer this worker reports lost becomes suspect.
    suspects: &'a Suspects,
    /// The attempts a worker reported an injected failure of.
    injected: &'a Injected,
    /// The worker's exchange streams, as it last reported them.
    streams: &'a Mutex<Vec<StreamStatus>>,
}

impl Reports<'_> {
    /// The worker reported a failure of `attempt` for `cause`: the peers it names as lost
    /// get no deploy until they answer.
    fn failed(&self, attempt: u64, cause: &str) {
        for id in self.suspects.report(self.id, attempt as u32, cause) {
            eprintln!(
                "weir: {} reported worker {id} lost: no deploy onto it until it answers (a \
                 heartbeat) or --heartbeat-timeout counts it lost",
                self.who
            );
        }
    }

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
                    reports.failed(f.attempt, &f.cause);
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
                    reports.failed(f.attempt, &f.cause);
                    if f.injected {
                        (reports.injected.lock().unwrap_or_else(|p| p.into_inner()))
                            .insert(f.attempt as u32);
                    }
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
        let suspects = Suspects::default();
        let injected = Injected::default();
        let streams = Mutex::default();
        let worker = |id| Reports {
            who: "w",
            id,
            route: &route_lock,
            replies: &replies,
            run_id: "r",
            reported: &reported,
            suspects: &suspects,
            injected: &injected,
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
