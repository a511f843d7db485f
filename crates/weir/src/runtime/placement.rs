//! Which worker runs which subtask, and the exchange that reaches the others (issue 24,
//! docs/cluster.md): what `spawn` needs to build only this worker's tasks and to wire a
//! channel whose two subtasks are on different workers through the exchange.

use std::collections::HashMap;
use std::sync::Arc;

use crate::runtime::exchange::{ChannelId, Exchange, WorkerId};
use crate::runtime::plan::Plan;

/// Which workers a process hosts and which worker runs each task of a job attempt.
///
/// A worker process hosts one worker; a test (or, later, `run` as a cluster of one) may
/// host several in one process, each with its own exchange, so that channels between them
/// cross real gRPC streams while one executor drives every task.
pub(crate) struct Placement {
    /// Per task of the plan (`Plan::tasks`, same order), the worker that runs it.
    pub(crate) task_workers: Vec<WorkerId>,
    /// The workers this process hosts, each with its exchange, connected (or about to
    /// be) to every other worker.
    pub(crate) hosted: HashMap<WorkerId, Arc<Exchange>>,
}

/// The workers of a job and the ones this process hosts, before the plan is known.
pub(crate) struct Hosting {
    /// Every worker of the job, in the order subtasks are spread over them.
    pub(crate) workers: Vec<WorkerId>,
    /// The workers this process hosts, each with its exchange.
    pub(crate) hosted: HashMap<WorkerId, Arc<Exchange>>,
}

impl Placement {
    /// Schedules `plan` onto `hosting.workers`: subtask `i` of every operator goes to worker
    /// `i mod N`, so a worker runs whole pipeline slices (Flink's slot sharing), and a
    /// forward edge never leaves a worker.
    pub(crate) fn schedule(plan: &Plan, hosting: Hosting) -> Placement {
        let n = hosting.workers.len().max(1);
        let task_workers = plan
            .tasks
            .iter()
            .map(|t| {
                hosting
                    .workers
                    .get(t.subtask as usize % n)
                    .copied()
                    .unwrap_or_default()
            })
            .collect();
        Placement {
            task_workers,
            hosted: hosting.hosted,
        }
    }

    /// Whether task `task` of the plan runs in this process.
    pub(crate) fn is_local(&self, task: usize) -> bool {
        self.task_workers
            .get(task)
            .is_some_and(|w| self.hosted.contains_key(w))
    }

    /// Any worker of the ones hosted here (what a node's subtasks default to before
    /// [`node_workers`](Self::node_workers) fills them in).
    fn any_hosted(&self) -> WorkerId {
        self.hosted.keys().copied().min().unwrap_or_default()
    }

    /// Per node, per subtask, the worker that runs it (a node's subtask lives in the task
    /// whose chain holds the node).
    pub(crate) fn node_workers(&self, plan: &Plan) -> HashMap<usize, Vec<WorkerId>> {
        let mut out: HashMap<usize, Vec<WorkerId>> = HashMap::new();
        for (ti, t) in plan.tasks.iter().enumerate() {
            for &n in &t.chain {
                let v = out
                    .entry(n)
                    .or_insert_with(|| vec![self.any_hosted(); t.parallelism as usize]);
                if let Some(w) = v.get_mut(t.subtask as usize) {
                    *w = self.task_workers[ti];
                }
            }
        }
        out
    }
}

/// What an edge's typed code needs to make its channels when some of its subtasks are on
/// other workers ([`crate::runtime::graph::EdgeFactory::placed_channels`]).
pub(crate) struct ChannelWiring<'a> {
    /// The workers hosted here, with their exchanges.
    pub(crate) hosted: &'a HashMap<WorkerId, Arc<Exchange>>,
    /// Per sending subtask, its worker.
    pub(crate) senders: &'a [WorkerId],
    /// Per receiving subtask, its worker.
    pub(crate) receivers: &'a [WorkerId],
    /// The number of the edge's first channel; channel `s → r` is
    /// `first_channel + s × receivers + r`, the same on every worker (the plan is). Each
    /// attempt numbers its channels afresh, so a frame or permit of an attempt that was
    /// cancelled never reaches the next one's channels.
    pub(crate) first_channel: ChannelId,
}

impl ChannelWiring<'_> {
    /// The exchange of worker `w`, if this process hosts it.
    pub(crate) fn exchange(&self, w: WorkerId) -> Option<&Exchange> {
        self.hosted.get(&w).map(|e| e.as_ref())
    }

    /// The number of channel `s → r`.
    pub(crate) fn channel(&self, s: usize, r: usize) -> ChannelId {
        self.first_channel
            .wrapping_add((s * self.receivers.len() + r) as ChannelId)
    }
}

// Its tests build jobs with the API, so they live in the API's layer:
// `api/placement_tests.rs`.
