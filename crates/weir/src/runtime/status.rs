//! What [`JobStatus`](crate::runtime::control::JobStatus) shows besides the basics: the
//! operator graph, per-task record counters, every attempt with its cause of failure, and
//! the checkpoint history (failed and in-progress ones included) with a duration
//! histogram — the data behind the control endpoint's JSON API, `/metrics` and dashboard
//! (issue 14).
//!
//! The bookkeeping is a set of pure methods on the status, called by the executor at the
//! few places where the facts arise (a plan, a trigger, a completion, an abort, the end of
//! an attempt), so it is tested here without threads and never touches a task's hot path:
//! record counters are the tasks' existing atomics, read when a status is asked for.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::checkpoint::coordinator::AbortReason;
use crate::checkpoint::metadata::TaskCheckpointStats;
use crate::checkpoint::writer::PhaseTimes;
use crate::runtime::control::{ControlHub, JobStatus};
use crate::runtime::event::{BarrierKind, CheckpointBarrier};
use crate::runtime::graph::{JobGraph, NodeKind, Partitioning};
use crate::runtime::operator_metrics::{ChainMetrics, OperatorFigures, TaskFigures};
use crate::runtime::plan::Plan;
use crate::runtime::result::AttemptSummary;
use crate::runtime::task::TaskMetrics;

mod state_size;
mod timeline;
mod workers;

pub use state_size::{OperatorStateSize, StateSize, StateSizes};
pub use timeline::SubtaskTimeline;
pub(crate) use workers::{Board, WorkerBoard};
pub use workers::{StreamStatus, WorkerStatus, WorkerSubtask};

/// Entries the checkpoint history keeps (oldest dropped first); the totals count all.
pub const HISTORY_LIMIT: usize = 200;

/// Upper bounds, in milliseconds, of the checkpoint-duration histogram's buckets (the
/// last, `+Inf`, is implied). From a fast in-memory checkpoint to a slow savepoint.
pub const DURATION_BUCKETS_MS: [u64; 12] = [
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 60_000,
];

/// One operator of the job graph.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorStatus {
    /// Its uid: what its state is matched by on restore.
    pub uid: String,
    /// Its display name.
    pub name: String,
    /// Its parallelism.
    pub parallelism: u32,
    /// The chain (task name) it runs in.
    pub chain: String,
    /// Its inputs: which operator feeds it, and how.
    pub inputs: Vec<InputStatus>,
}

/// An edge into an operator.
#[derive(Debug, Clone, Serialize)]
pub struct InputStatus {
    /// The uid of the upstream operator.
    pub from: String,
    /// `forward`, `rebalance`, `broadcast` or `key_groups`.
    pub partitioning: String,
    /// Whether it is a plain call inside one task (no channel).
    pub chained: bool,
}

/// One task (a chain × subtask) and its counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TaskStatus {
    /// The chain's name.
    pub chain: String,
    /// The uids of its operators, head first.
    pub operators: Vec<String>,
    /// Its subtask index.
    pub subtask: u32,
    /// The chain's parallelism.
    pub parallelism: u32,
    /// The name of the worker running it now (`local` in one process; empty on a cluster
    /// while it is not deployed), as the `worker` label of `/metrics` says.
    pub worker: String,
    /// Whether the chain's head is a source (its records in are the records it polled).
    pub source: bool,
    /// Records that entered the task (polled from its source, or received on its input
    /// channels), over every attempt.
    pub records_in: u64,
    /// Records it sent on its output channels (a broadcast counts each copy; 0 for a
    /// chain that ends in a sink), over every attempt.
    pub records_out: u64,
    /// Milliseconds blocked on a full output channel: backpressure from downstream. Its
    /// growth per second of wall time is the share of time backpressured.
    pub backpressured_ms: u64,
    /// Milliseconds an input task waited for input (0 for a source task).
    pub idle_ms: u64,
    /// Milliseconds neither idle nor backpressured: working, over every attempt.
    pub busy_ms: u64,
    /// Per operator of the chain (in the order of `operators`): records in and out, busy
    /// time and watermark, so operators chained into one task are told apart. Empty when
    /// metering is off (`WEIR_OPERATOR_METRICS=0`).
    pub operator_figures: Vec<OperatorFigures>,
}

/// One attempt of the job and how it ended.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptStatus {
    /// Its number (1 for the first).
    pub attempt: u32,
    /// The checkpoint it restored, if any.
    pub restored_checkpoint: Option<u64>,
    /// That checkpoint's folder.
    pub restored_from: Option<PathBuf>,
    /// Records its sources emitted.
    pub source_records: u64,
    /// Why it failed (the cause of the restart that followed); `None` if it finished.
    pub failure: Option<String>,
}

/// One checkpoint or savepoint, whatever became of it.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointRecord {
    /// Its id (checkpoints and savepoints share one sequence).
    pub id: u64,
    /// `checkpoint` or `savepoint`.
    pub kind: String,
    /// Whether it is the savepoint a stop asked for.
    pub stop: bool,
    /// `in_progress`, `completed`, `failed` (counts against the tolerated failures) or
    /// `aborted` (a newer one completed first, or a task finished before it).
    pub status: String,
    /// When it was triggered, in milliseconds since the Unix epoch.
    pub trigger_ms: u64,
    /// When it completed or was given up, in milliseconds since the Unix epoch.
    pub end_ms: Option<u64>,
    /// Trigger to end, in milliseconds.
    pub duration_ms: Option<u64>,
    /// Bytes of state written (completed ones).
    pub bytes: Option<u64>,
    /// Its folder (completed ones): what `--restore` takes.
    pub path: Option<PathBuf>,
    /// Why it failed or was aborted.
    pub failure: Option<String>,
    /// How it was taken (completed ones): `aligned`, or `unaligned` when any task's
    /// barrier overtook queued records (issue 13) — what the dashboard's alignment column
    /// shows, as `weir status` does.
    pub alignment: Option<String>,
    /// Encoded bytes of the records in flight it saved (completed ones; 0 when aligned).
    pub in_flight_bytes: Option<u64>,
    /// Per subtask (completed ones): how long each phase took there and when, so the slow
    /// subtask shows.
    pub subtasks: Vec<SubtaskPhases>,
}

/// One task's part of a completed checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct SubtaskPhases {
    /// The chain's name.
    pub chain: String,
    /// The subtask index.
    pub subtask: u32,
    /// From the first barrier to the last at this task (milliseconds; 0 with one input).
    pub alignment_ms: f64,
    /// The synchronous capture: the task's pause (milliseconds).
    pub sync_ms: f64,
    /// Encoding and writing in the background (milliseconds).
    pub async_ms: f64,
    /// Bytes it wrote.
    pub bytes: u64,
    /// When each phase happened, relative to the trigger (`None` if the task recorded no
    /// times): what the dashboard's timeline draws.
    pub timeline: Option<SubtaskTimeline>,
}

/// A histogram of completed checkpoints' end-to-end durations (all of them, not only those
/// the history still holds), for `/metrics`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DurationHistogram {
    /// Per bucket bound in milliseconds (5 ms to 60 s), the completed checkpoints at most that long
    /// (cumulative, as Prometheus wants).
    pub buckets: Vec<(u64, u64)>,
    /// All of them.
    pub count: u64,
    /// Their durations summed, in milliseconds.
    pub sum_ms: u64,
}

impl DurationHistogram {
    fn observe(&mut self, ms: u64) {
        if self.buckets.is_empty() {
            self.buckets = DURATION_BUCKETS_MS.iter().map(|&b| (b, 0)).collect();
        }
        for (bound, n) in &mut self.buckets {
            if ms <= *bound {
                *n += 1;
            }
        }
        self.count += 1;
        self.sum_ms += ms;
    }
}

/// The tasks' live counters, kept beside the status so a status read can fill in
/// [`TaskStatus::records_in`] without the tasks ever taking a lock: per task its own
/// counters and, when metering is on, its chain's per-operator ones.
#[derive(Debug, Default)]
pub(crate) struct TaskCounters(pub Vec<(Arc<TaskMetrics>, Option<Arc<ChainMetrics>>)>);

impl TaskCounters {
    /// Copies the counters into `status.tasks` (same order: the plan's tasks); watermark
    /// lags are measured against the wall clock now.
    pub(crate) fn fill(&self, status: &mut JobStatus) {
        use std::sync::atomic::Ordering::Relaxed;
        let ms = |ns: u64| ns / 1_000_000;
        let now_ms = crate::clock::wall_ms();
        for (t, (m, chain)) in status.tasks.iter_mut().zip(&self.0) {
            t.records_in = m.records_in.load(Relaxed);
            t.records_out = m.load.records_out.load(Relaxed);
            let backpressured_ns = m.load.backpressured_ns.load(Relaxed);
            let busy_ns = m.load.busy_ns();
            t.backpressured_ms = ms(backpressured_ns);
            t.idle_ms = ms(m.load.idle_ns.load(Relaxed));
            t.busy_ms = ms(busy_ns);
            if let Some(chain) = chain {
                t.operator_figures = chain.figures(TaskFigures {
                    records_in: t.records_in,
                    busy_ns,
                    backpressured_ns,
                    now_ms,
                });
            }
        }
    }
}

impl ControlHub {
    /// The job was planned: its graph goes into the status, its tasks' counters are kept.
    pub(crate) fn observe_plan(
        &self,
        graph: &JobGraph,
        plan: &Plan,
        counters: &[Arc<TaskMetrics>],
        chains: Option<&[Arc<ChainMetrics>]>,
    ) {
        self.update(|s| s.on_planned(graph, plan));
        let counters = counters
            .iter()
            .enumerate()
            .map(|(i, m)| (m.clone(), chains.map(|c| c[i].clone())))
            .collect();
        *self.counters.lock().unwrap_or_else(|p| p.into_inner()) = TaskCounters(counters);
    }
}

fn partitioning_name(p: Partitioning) -> &'static str {
    match p {
        Partitioning::Default | Partitioning::Forward => "forward",
        Partitioning::Rebalance => "rebalance",
        Partitioning::Broadcast => "broadcast",
        Partitioning::KeyGroups => "key_groups",
    }
}

impl JobStatus {
    /// The job was planned: record its operators, edges and tasks.
    pub(crate) fn on_planned(&mut self, graph: &JobGraph, plan: &Plan) {
        let chain_of = |node: usize| {
            plan.tasks
                .iter()
                .find(|t| t.chain.contains(&node))
                .map(|t| chain_name(&t.name))
                .unwrap_or_default()
        };
        self.graph = graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| OperatorStatus {
                uid: plan.uids[i].clone(),
                name: n.name.clone(),
                parallelism: plan.parallelism[i],
                chain: chain_of(i),
                inputs: n
                    .inputs
                    .iter()
                    .map(|&e| InputStatus {
                        from: plan.uids[graph.edges[e].from].clone(),
                        partitioning: partitioning_name(plan.partitioning[e]).into(),
                        chained: plan.chained[e],
                    })
                    .collect(),
            })
            .collect();
        self.tasks = plan
            .tasks
            .iter()
            .map(|t| TaskStatus {
                chain: chain_name(&t.name),
                operators: t.chain.iter().map(|&n| plan.uids[n].clone()).collect(),
                subtask: t.subtask,
                parallelism: t.parallelism,
                source: matches!(graph.nodes[t.chain[0]].kind, NodeKind::Source(_)),
                ..TaskStatus::default()
            })
            .collect();
    }

    /// A checkpoint or savepoint was triggered (periodically or on request).
    pub(crate) fn on_checkpoint_triggered(&mut self, barrier: &CheckpointBarrier) {
        let (kind, stop) = match barrier.kind {
            BarrierKind::Checkpoint => ("checkpoint", false),
            BarrierKind::Savepoint => ("savepoint", false),
            BarrierKind::Stop { .. } => ("savepoint", true),
        };
        self.history.push(CheckpointRecord {
            id: barrier.id,
            kind: kind.into(),
            stop,
            status: "in_progress".into(),
            trigger_ms: barrier.timestamp_ms,
            end_ms: None,
            duration_ms: None,
            bytes: None,
            path: None,
            failure: None,
            alignment: None,
            in_flight_bytes: None,
            subtasks: Vec::new(),
        });
        let n = self.history.len();
        self.history.drain(..n.saturating_sub(HISTORY_LIMIT));
    }

    /// Checkpoint `id` completed into `path` with `bytes` of state, at `now_ms`; `tasks`
    /// are the tasks' acknowledged statistics and `times` when their phases happened, both
    /// in the plan's task order.
    pub(crate) fn on_checkpoint_completed(
        &mut self,
        id: u64,
        path: &Path,
        bytes: u64,
        tasks: &[TaskCheckpointStats],
        times: &[PhaseTimes],
        now_ms: u64,
    ) {
        self.checkpoints_completed += 1;
        self.last_checkpoint_bytes = bytes;
        let Some(r) = self.history.iter_mut().rev().find(|r| r.id == id) else {
            return;
        };
        let ms = |micros: u64| micros as f64 / 1000.0;
        let subtasks = self
            .tasks
            .iter()
            .zip(tasks)
            .enumerate()
            .map(|(i, (t, s))| SubtaskPhases {
                chain: t.chain.clone(),
                subtask: t.subtask,
                alignment_ms: ms(s.alignment_micros),
                sync_ms: ms(s.sync_micros),
                async_ms: ms(s.async_micros),
                bytes: s.bytes,
                timeline: times
                    .get(i)
                    .and_then(|p| SubtaskTimeline::relative(p, r.trigger_ms)),
            })
            .collect();
        let duration = now_ms.saturating_sub(r.trigger_ms);
        r.status = "completed".into();
        r.end_ms = Some(now_ms);
        r.duration_ms = Some(duration);
        r.bytes = Some(bytes);
        // Absolute, as a control request's answer: whoever reads it may sit elsewhere.
        r.path = Some(crate::storage::absolute_location(path));
        r.subtasks = subtasks;
        r.alignment = Some("aligned".into());
        r.in_flight_bytes = Some(0);
        self.checkpoint_durations.observe(duration);
    }

    /// Completed checkpoint `id` was taken unaligned by at least one task, saving
    /// `in_flight_bytes` of records in flight (called after
    /// [`on_checkpoint_completed`](Self::on_checkpoint_completed)).
    pub(crate) fn on_checkpoint_unaligned(&mut self, id: u64, in_flight_bytes: u64) {
        if let Some(r) = self.history.iter_mut().rev().find(|r| r.id == id) {
            r.alignment = Some("unaligned".into());
            r.in_flight_bytes = Some(in_flight_bytes);
        }
    }

    /// Checkpoint `id` was given up for `reason`, at `now_ms`.
    pub(crate) fn on_checkpoint_aborted(&mut self, id: u64, reason: &AbortReason, now_ms: u64) {
        if reason.is_failure() {
            self.checkpoints_failed += 1;
        }
        let status = if reason.is_failure() {
            "failed"
        } else {
            "aborted"
        };
        self.end_record(id, status, reason.to_string(), now_ms);
    }

    /// Checkpoint `id` was given up at `now_ms`; unless its failure was recorded already
    /// ([`JobStatus::on_checkpoint_aborted`]), it is `aborted`: a newer one completed
    /// first, a task finished before it, or a request that asked for it was told why.
    pub(crate) fn on_checkpoint_given_up(&mut self, id: u64, now_ms: u64) {
        let why = "given up before it completed (see the job's log or the request's answer)";
        self.end_record(id, "aborted", why.into(), now_ms);
    }

    /// An attempt ended (finished, stopped or failed); a checkpoint it left in progress
    /// will never complete.
    pub(crate) fn on_attempt_ended(&mut self, summary: &AttemptSummary, now_ms: u64) {
        self.attempts.push(AttemptStatus {
            attempt: summary.attempt,
            restored_checkpoint: summary.restored.as_ref().map(|r| r.checkpoint_id),
            restored_from: summary.restored.as_ref().map(|r| r.path.clone()),
            source_records: summary.source_records,
            failure: summary.failure.clone(),
        });
        let open: Vec<u64> = self
            .history
            .iter()
            .filter(|r| r.status == "in_progress")
            .map(|r| r.id)
            .collect();
        for id in open {
            let why = format!("attempt {} ended before it completed", summary.attempt);
            self.checkpoints_failed += 1;
            self.end_record(id, "failed", why, now_ms);
        }
    }

    fn end_record(&mut self, id: u64, status: &str, why: String, now_ms: u64) {
        if let Some(r) = self
            .history
            .iter_mut()
            .rev()
            .find(|r| r.id == id && r.status == "in_progress")
        {
            r.status = status.into();
            r.end_ms = Some(now_ms);
            r.duration_ms = Some(now_ms.saturating_sub(r.trigger_ms));
            r.failure = Some(why);
        }
    }
}

/// A task's name without its `(subtask/parallelism)` suffix: the chain's name.
fn chain_name(task: &str) -> String {
    match task.rfind(" (") {
        Some(i) if task.ends_with(')') => task[..i].to_string(),
        _ => task.to_string(),
    }
}

#[cfg(test)]
mod tests;
