//! Where a job's subtasks run (issue 24, observability): the workers a status lists —
//! address, slots, heartbeat age, their subtasks and their exchange streams — and the
//! worker each task names.
//!
//! A cluster's coordinator runs no task itself; what it knows of its workers (who
//! registered, when each was last heard from, which subtask it was deployed, what its
//! exchange streams carried) lives with the coordinator role, above this layer, and is
//! read through a [`WorkerBoard`] at every status read, like the tasks' counters. A job in
//! one process has no board: it shows itself as one `local` worker running every subtask,
//! so the dashboard, `/api/workers` and the `worker` label of `/metrics` read the same
//! either way.

use std::sync::Arc;

use serde::Serialize;

use crate::runtime::control::JobStatus;

/// The name a job in one process gives its only worker: itself.
const LOCAL_WORKER: &str = "local";

/// One worker of the job.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerStatus {
    /// Its id (the coordinator's; 0 for the process itself). A worker that registers again
    /// after a loss gets a new one.
    pub id: u32,
    /// Its name (`--name`: the pod or host), what the `worker` label of `/metrics` and the
    /// subtasks carry; `local` for the process itself.
    pub name: String,
    /// Where its exchange listens (`this process` for a job in one process).
    pub address: String,
    /// The subtask slots it offered (in one process: the tasks it runs).
    pub slots: u32,
    /// Milliseconds since the coordinator last heard from it (a report or a heartbeat);
    /// `None` for the process itself.
    pub heartbeat_age_ms: Option<u64>,
    /// `local` (the process itself), `up`, or `lost` (see `lost`).
    pub state: String,
    /// Why it was lost, once it was.
    pub lost: Option<String>,
    /// The subtasks the current attempt runs on it.
    pub subtasks: Vec<WorkerSubtask>,
    /// Its exchange streams, one per peer worker, as it last reported them.
    pub streams: Vec<StreamStatus>,
}

/// A subtask as a worker runs it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerSubtask {
    /// The task's chain (as [`TaskStatus::chain`](super::TaskStatus::chain)).
    pub chain: String,
    /// The uid of the chain's head operator.
    pub task_uid: String,
    /// The subtask index.
    pub subtask: u32,
}

/// One exchange stream between two workers, seen from the worker that reported it, since
/// the stream was last opened (a restart opens it anew, so the counts start again).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StreamStatus {
    /// The worker id at the other end.
    pub peer: u32,
    /// Encoded bytes sent to it (records, watermarks, barriers, permits granted).
    pub bytes_sent: u64,
    /// Encoded bytes received from it.
    pub bytes_received: u64,
    /// Frames sent.
    pub frames_sent: u64,
    /// Frames received.
    pub frames_received: u64,
    /// Sends to the peer that had to wait for permits (the receiver's credits ran out):
    /// backpressure across workers.
    pub permit_waits: u64,
    /// How long those sends waited, in all, in milliseconds.
    pub permit_wait_ms: f64,
}

/// What the coordinator knows of its workers, read at every status read; see the module
/// docs.
pub(crate) trait WorkerBoard: Send + Sync {
    /// The workers now, with the subtasks of the current attempt (only `task_uid` and
    /// `subtask` filled: the status adds the chain).
    fn workers(&self) -> Vec<WorkerStatus>;
}

/// The board a cluster's coordinator installed, if any.
#[derive(Default, Clone)]
pub(crate) struct Board(pub(crate) Option<Arc<dyn WorkerBoard>>);

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Board(cluster)"
        } else {
            "Board(local)"
        })
    }
}

impl Board {
    /// Fills `status.workers`, `status.cluster` and every task's worker: from the board
    /// when there is one, else as one local worker running every task.
    pub(crate) fn fill(&self, status: &mut JobStatus) {
        let Some(board) = &self.0 else {
            status.cluster = false;
            status.workers = vec![local_worker(status)];
            for t in &mut status.tasks {
                t.worker = LOCAL_WORKER.into();
            }
            return;
        };
        status.cluster = true;
        status.workers = board.workers();
        for w in &mut status.workers {
            for s in &mut w.subtasks {
                let task = (status.tasks.iter_mut())
                    .find(|t| t.subtask == s.subtask && t.operators.first() == Some(&s.task_uid));
                if let Some(t) = task {
                    s.chain = t.chain.clone();
                    t.worker = w.name.clone();
                }
            }
        }
    }
}

/// The process itself as a worker: every task of the status.
fn local_worker(status: &JobStatus) -> WorkerStatus {
    WorkerStatus {
        id: 0,
        name: LOCAL_WORKER.into(),
        address: "this process".into(),
        slots: status.tasks.len() as u32,
        heartbeat_age_ms: None,
        state: LOCAL_WORKER.into(),
        lost: None,
        subtasks: (status.tasks.iter())
            .map(|t| WorkerSubtask {
                chain: t.chain.clone(),
                task_uid: t.operators.first().cloned().unwrap_or_default(),
                subtask: t.subtask,
            })
            .collect(),
        streams: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::status::TaskStatus;

    fn task(chain: &str, head: &str, subtask: u32) -> TaskStatus {
        TaskStatus {
            chain: chain.into(),
            operators: vec![head.into()],
            subtask,
            parallelism: 2,
            ..TaskStatus::default()
        }
    }

    fn status() -> JobStatus {
        JobStatus {
            tasks: vec![
                task("gen", "generator", 0),
                task("gen", "generator", 1),
                task("count", "count", 0),
                task("count", "count", 1),
            ],
            ..JobStatus::default()
        }
    }

    #[test]
    fn one_process_is_one_local_worker_running_every_task() {
        let mut s = status();
        Board::default().fill(&mut s);
        assert!(!s.cluster);
        assert_eq!(s.workers.len(), 1);
        let w = &s.workers[0];
        assert_eq!(
            (w.name.as_str(), w.slots, w.subtasks.len()),
            ("local", 4, 4)
        );
        assert_eq!(w.subtasks[2].chain, "count");
        assert!(s.tasks.iter().all(|t| t.worker == "local"));
    }

    struct Two;
    impl WorkerBoard for Two {
        fn workers(&self) -> Vec<WorkerStatus> {
            let worker = |id: u32, name: &str, subtask: u32| WorkerStatus {
                id,
                name: name.into(),
                state: "up".into(),
                subtasks: ["generator", "count", "not-in-the-plan"]
                    .map(|uid| WorkerSubtask {
                        task_uid: uid.into(),
                        subtask,
                        ..WorkerSubtask::default()
                    })
                    .into(),
                ..WorkerStatus::default()
            };
            vec![worker(1, "w1", 0), worker(2, "w2", 1)]
        }
    }

    #[test]
    fn on_a_cluster_each_task_names_the_worker_the_board_deployed_it_on() {
        let mut s = status();
        Board(Some(Arc::new(Two))).fill(&mut s);
        assert!(s.cluster);
        let names: Vec<(&str, u32, &str)> = (s.tasks.iter())
            .map(|t| (t.chain.as_str(), t.subtask, t.worker.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("gen", 0, "w1"),
                ("gen", 1, "w2"),
                ("count", 0, "w1"),
                ("count", 1, "w2")
            ]
        );
        assert_eq!(s.workers[1].subtasks[1].chain, "count");
        assert_eq!(s.workers[1].subtasks[2].chain, "", "unknown to the plan");
    }
}
