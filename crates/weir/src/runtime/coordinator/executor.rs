//! Runs a job as its coordinator: plans the physical graph, deploys each attempt on the
//! job's workers, drives the checkpoint coordinator, and restarts from the latest
//! completed checkpoint after a failure (docs/architecture.md §1, §4, §7).
//!
//! Planning: a node is *chained* to its input when the edge is forward with equal
//! parallelism and neither side fans in or out; each chain × subtask is one task on its
//! own thread. Non-chained edges get one bounded channel per (sender, receiver) pair.
//!
//! The executor never starts a task itself: every attempt goes through a [`TaskHosts`]
//! (`hosts.rs`) — in one process the in-memory hosts (`in_memory.rs`, the cluster of
//! one), on a cluster the coordinator's worker pool. With `attempt` (one attempt's event
//! loop), this module is the I/O edge of the checkpoint protocol: the pure coordinator
//! (`checkpoint::coordinator`) decides; they send triggers and notifications, write
//! metadata and delete folders. Writing snapshots and assembling `_metadata` belong to the
//! checkpoint layer (`checkpoint::writer`, `checkpoint::finalize`).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Sender};

use super::attempt::Attempt;
use super::hosts::{PlantedFailure, TaskHosts};
use super::in_memory::InMemoryHosts;
use super::recovery::{reload_checkpoint, rewind_notice, Reload};

use super::restart::{Failure, RestartDecision, RestartTracker};
use crate::checkpoint::coordinator::Coordinator;
use crate::checkpoint::finalize;
use crate::checkpoint::metadata::{
    CheckpointMetadata, SnapshotKind, SourceProgress, TaskCheckpointStats,
};
use crate::checkpoint::restore::{self, RestoredCheckpoint};
use crate::checkpoint::storage::CheckpointStorage;
use crate::checkpoint::writer::{SnapshotWritten, TaskAck};
use crate::error::{Error, Result};
use crate::runtime::codec::{check_network_edges, NetworkEdge};
use crate::runtime::config::{JobConfig, RestoreFrom};
use crate::runtime::control::ControlHub;
use crate::runtime::fault::FailureInjector;
use crate::runtime::footprint::{available_memory, check_fits, Footprint};
use crate::runtime::graph::{JobGraph, NodeKind};
use crate::runtime::operator_metrics::{self, ChainMetrics};
use crate::runtime::plan::{plan, Plan};
use crate::runtime::schema_check;
use crate::runtime::state_backend::JobStateBackend;
use crate::runtime::task::{TaskEvent, TaskMetrics};
use crate::runtime::worker::WorkerTasks;

pub use crate::runtime::result::{
    AttemptSummary, CompletedCheckpointStats, JobMetrics, JobResult, RestoreInfo,
};

/// Longest the executor sleeps between looks at progress counters.
pub(crate) const PROGRESS_TICK: Duration = Duration::from_millis(100);

pub(crate) use crate::clock::wall_ms;

pub(crate) struct Executor<'a> {
    pub(crate) graph: &'a JobGraph,
    pub(crate) cfg: &'a JobConfig,
    pub(crate) plan: Plan,
    pub(crate) storage: CheckpointStorage,
    pub(crate) metrics: Arc<JobMetrics>,
    pub(crate) injector: Option<Arc<FailureInjector>>,
    /// Where the tasks (through their workers) and the writers report.
    pub(crate) events_tx: Sender<TaskEvent>,
    pub(crate) task_metrics: Vec<Arc<TaskMetrics>>,
    /// The counters of the source tasks (the plan does not change between attempts).
    pub(crate) source_metrics: Vec<Arc<TaskMetrics>>,
    pub(crate) control: Arc<ControlHub>,
    /// The job's keyed state schemas, recorded in every checkpoint's `_metadata`.
    pub(crate) schemas: Vec<crate::state::schema::OperatorSchemas>,
    /// Where keyed operators keep their state (resolved once, before anything runs).
    pub(crate) state_backend: JobStateBackend,
    /// Shared files of incremental checkpoints that retention released, held until no
    /// checkpoint in flight can build on them (`checkpoint/shared.rs`).
    pub(crate) shared: crate::checkpoint::shared::Deferred,
    /// The workers every task runs on: one in-process worker (`in_memory.rs`) or a
    /// cluster's.
    pub(crate) hosts: Arc<dyn TaskHosts>,
}

/// Outcome of one attempt.
pub(crate) enum AttemptEnd {
    Finished,
    Failed(Error),
}

/// Runs `graph` under `cfg`; see the module docs.
pub(crate) fn execute(
    graph: JobGraph,
    cfg: &JobConfig,
    metrics: Arc<JobMetrics>,
    control: Arc<ControlHub>,
) -> Result<JobResult> {
    let result = run_job(graph, cfg, metrics, &control, Where::Here);
    control.close();
    if result.is_err() {
        control.update(|s| s.state = "failed".into());
    }
    result
}

/// Refuses an unaligned job that cannot work, before anything runs: one that is not
/// exactly-once, or whose network edges carry a record type without a codec.
fn check_unaligned(graph: &JobGraph, plan: &Plan, cfg: &JobConfig) -> Result<()> {
    let c = &cfg.checkpointing;
    if !c.unaligned {
        return Ok(());
    }
    if c.mode != crate::checkpoint::barrier::CheckpointingMode::ExactlyOnce {
        return Err(Error::InvalidJob(
            "unaligned checkpoints need exactly-once mode: at-least-once barriers never \
             wait, so there is nothing to overtake; turn `unaligned` off or use exactly-once"
                .into(),
        ));
    }
    let edges: Vec<NetworkEdge> = graph
        .edges
        .iter()
        .enumerate()
        .filter(|(i, _)| !plan.chained[*i])
        .map(|(_, e)| {
            let (type_id, type_name) = e.factory.record_type();
            NetworkEdge {
                from: plan.uids[e.from].clone(),
                to: plan.uids[e.to].clone(),
                type_id,
                type_name,
            }
        })
        .collect();
    check_network_edges(&edges, &graph.types)
}

/// Runs `graph` under `cfg` with its tasks on the workers of `placement`, every one of them
/// hosted in this process: channels between two workers cross their exchanges (real gRPC
/// streams), and this executor's checkpoint coordinator hears every task. A process that
/// hosts only some of the workers needs the coordinator and worker roles (next).
#[cfg(feature = "cluster")]
#[cfg_attr(not(test), allow(dead_code))] // The worker role (issue 24, next) calls it.
pub(crate) fn execute_placed(
    graph: JobGraph,
    cfg: &JobConfig,
    metrics: Arc<JobMetrics>,
    control: Arc<ControlHub>,
    hosting: crate::runtime::placement::Hosting,
) -> Result<JobResult> {
    let result = run_job(graph, cfg, metrics, &control, Where::Placed(hosting));
    control.close();
    result
}

/// Runs `graph` under `cfg` as a cluster's coordinator: every task runs on the workers of
/// `hosts`, this executor drives their checkpoints through their control streams and
/// writes `_metadata`, and a failed attempt (a lost worker included) restarts the whole
/// job from its latest checkpoint under the restart strategy (issue 24).
#[cfg(feature = "cluster")]
pub(crate) fn execute_hosted(
    graph: JobGraph,
    cfg: &JobConfig,
    metrics: Arc<JobMetrics>,
    control: Arc<ControlHub>,
    hosts: Arc<dyn TaskHosts>,
) -> Result<JobResult> {
    let result = run_job(graph, cfg, metrics, &control, Where::Workers(hosts));
    control.close();
    if result.is_err() {
        control.update(|s| s.state = "failed".into());
    }
    result
}

/// Where a job's tasks run.
enum Where {
    /// On one in-process worker (the cluster of one), every channel in memory.
    Here,
    /// On in-process workers placed by `Hosting`, channels between two of them crossing
    /// their exchanges.
    #[cfg(feature = "cluster")]
    Placed(crate::runtime::placement::Hosting),
    /// On other processes, the workers of a cluster.
    #[cfg(feature = "cluster")]
    Workers(Arc<dyn TaskHosts>),
}

fn run_job(
    graph: JobGraph,
    cfg: &JobConfig,
    metrics: Arc<JobMetrics>,
    control: &Arc<ControlHub>,
    tasks_at: Where,
) -> Result<JobResult> {
    let started = Instant::now();
    let graph = std::rc::Rc::new(graph);
    let plan = plan(&graph, cfg)?;
    #[cfg(feature = "cluster")]
    let (placement, remote) = match tasks_at {
        Where::Placed(h) => (Some(Arc::new(place(&plan, h)?)), None),
        Where::Here => (None, None),
        Where::Workers(hosts) => (None, Some(hosts)),
    };
    #[cfg(not(feature = "cluster"))]
    let Where::Here = tasks_at;
    check_unaligned(&graph, &plan, cfg)?;
    let state_backend = JobStateBackend::new(cfg.state_backend, &cfg.state_dir, &cfg.name)?
        .incremental(crate::runtime::state_backend::incremental_checkpoints(
            cfg.incremental_checkpoints,
        )?)
        .memory(cfg.disk_state);
    state_backend.check_cache_size(&cfg.checkpoint_dir)?;
    // Before any channel or thread exists: a plan whose channels alone cannot fit.
    let footprint = Footprint::of(&graph, &plan, cfg.checkpointing.unaligned);
    check_fits(footprint, available_memory(), cfg.parallelism)?;
    control.update(|s| {
        s.job = cfg.name.clone();
        s.operators = plan
            .uids
            .iter()
            .cloned()
            .zip(plan.parallelism.iter().copied())
            .collect();
    });
    let storage = CheckpointStorage::open(&cfg.checkpoint_dir, &cfg.name)?;
    let mut result = JobResult::default();

    // Initial restore.
    let mut restore: Option<RestoredCheckpoint> = match &cfg.restore {
        RestoreFrom::Nothing => None,
        RestoreFrom::Path(p) => {
            let r = restore::load(p)?;
            if let Some(n) = rewind_notice(&storage, r.meta.checkpoint_id) {
                metrics.notice(&mut result, n);
            }
            Some(r)
        }
        RestoreFrom::Latest => {
            let (found, skipped) = restore::load_latest(&storage)?;
            let unusable = skipped.len();
            for n in skipped {
                metrics.notice(&mut result, n);
            }
            if found.is_none() {
                if unusable > 0 {
                    // Starting from nothing would silently re-run everything: refuse.
                    return Err(Error::Restore(format!(
                        "none of the {unusable} complete checkpoints in {} can be read (see above); \
                         restore a checkpoint or savepoint from elsewhere with --restore PATH, or \
                         run without --restore to start fresh",
                        storage.root().display()
                    )));
                }
                metrics.notice(
                    &mut result,
                    format!(
                        "no complete checkpoint in {}; starting fresh",
                        storage.root().display()
                    ),
                );
            }
            found
        }
    };
    // This run owns the job folder and has no checkpoint in flight: the shared files of
    // incremental checkpoints no complete checkpoint lists (left by a SIGKILL mid-checkpoint)
    // can go.
    match crate::checkpoint::shared::sweep_orphans(&storage) {
        Ok(0) => {}
        Ok(n) => metrics.notice(
            &mut result,
            format!(
                "removed {n} shared state file(s) of checkpoints that never completed from {}",
                storage.root().join(crate::storage::SHARED_DIR).display()
            ),
        ),
        Err(e) => metrics.notice(
            &mut result,
            format!("could not clean the shared state files of unfinished checkpoints: {e}"),
        ),
    }
    let _ = crate::checkpoint::shared::prune_empty_folders(&storage);
    if let Some(r) = &restore {
        // Fail fast on a mismatch, before any thread starts.
        let allow = cfg.allow_non_restored_state;
        if let Some(notice) = r.check_compatible(&plan.uids, cfg.max_parallelism, allow)? {
            metrics.notice(&mut result, notice);
        }
        result.restored_from = Some(r.path.clone());
        if let Some(n) = r.lazy_notice(&storage.root().join(crate::storage::SHARED_DIR)) {
            metrics.notice(&mut result, n);
        }
    }
    // Every keyed state decided against the checkpoint, also before any thread starts
    // (issue 26); the job's schemas go into every checkpoint it writes.
    let schema_report =
        schema_check::check(&graph, &plan.uids, cfg.max_parallelism, restore.as_ref())?;
    let refusals = schema_report.refusals(cfg.allow_non_restored_state);
    if !refusals.is_empty() {
        return Err(Error::Restore(refusals.join("; and ")));
    }
    let dropped = schema_report.dropped_states();
    if let Some(r) = &mut restore {
        for (uid, state) in &dropped {
            r.drop_state(uid, state);
            metrics.notice(
                &mut result,
                format!(
                    "dropping keyed state '{state}' of operator '{uid}': its old type cannot \
                     be read by the new one (--allow-non-restored-state); it starts empty"
                ),
            );
        }
    }
    let restored_with_drops = restore.as_ref().map(|r| (r.path.clone(), dropped));
    let first_id = storage
        .max_checkpoint_id()?
        .max(restore.as_ref().map_or(0, |r| r.meta.checkpoint_id))
        + 1;
    let mut latest_path: Option<PathBuf> = restore.as_ref().map(|r| r.path.clone());

    let (events_tx, events_rx) = unbounded::<TaskEvent>();
    let injector = cfg
        .failure_injection
        .map(|f| Arc::new(FailureInjector::new(f)));
    let task_metrics: Vec<Arc<TaskMetrics>> = plan
        .tasks
        .iter()
        .map(|_| Arc::new(TaskMetrics::default()))
        .collect();
    let source_metrics = plan
        .tasks
        .iter()
        .zip(&task_metrics)
        .filter(|(t, _)| matches!(graph.nodes[t.chain[0]].kind, NodeKind::Source(_)))
        .map(|(_, m)| m.clone())
        .collect();
    let chain_metrics: Option<Vec<Arc<ChainMetrics>>> = operator_metrics::enabled().then(|| {
        plan.tasks
            .iter()
            .map(|t| Arc::new(ChainMetrics::new(t.chain.len())))
            .collect()
    });
    control.observe_plan(&graph, &plan, &task_metrics, chain_metrics.as_deref());
    // The cluster of one: a single in-process worker, sharing this process's counters and
    // failure injector (`in_memory.rs`).
    let in_memory = || -> Arc<dyn TaskHosts> {
        // The worker's subtasks and writers report to its relay, which reports here.
        let (worker_tx, worker_rx) = unbounded::<TaskEvent>();
        let worker = WorkerTasks::new(
            graph.clone(),
            cfg.clone(),
            plan.clone(),
            storage.clone(),
            state_backend.clone(),
            worker_tx,
            task_metrics.clone(),
            chain_metrics.clone(),
        );
        let hosts = InMemoryHosts::new(worker, worker_rx, injector.clone());
        #[cfg(feature = "cluster")]
        let hosts = hosts.placed(placement.clone());
        // Shared like a cluster's hosts, but never across threads: the in-process worker
        // holds the job graph, which lives on this thread.
        #[allow(clippy::arc_with_non_send_sync)]
        let hosts = Arc::new(hosts);
        hosts
    };
    #[cfg(feature = "cluster")]
    let hosts = match remote {
        Some(hosts) => hosts,
        None => in_memory(),
    };
    #[cfg(not(feature = "cluster"))]
    let hosts = in_memory();
    let exec = Executor {
        graph: &graph,
        cfg,
        plan,
        storage: storage.clone(),
        metrics: metrics.clone(),
        injector: injector.clone(),
        events_tx,
        task_metrics,
        source_metrics,
        control: control.clone(),
        schemas: schema_report.schemas.clone(),
        state_backend,
        shared: Default::default(),
        hosts,
    };
    let mut coordinator = Coordinator::<TaskAck>::new(cfg.checkpointing.clone(), first_id);
    let mut attempt_no = 0u32;
    let mut restarts = RestartTracker::new(cfg.restart.clone(), cfg.identical_failure_limit);
    let outcome = loop {
        attempt_no += 1;
        result.attempts = attempt_no;
        control.update(|s| {
            s.attempt = attempt_no;
            s.state = "running".into();
        });
        let attempt_started = Instant::now();
        let baseline = restore
            .as_ref()
            .map(|r| exec.source_baseline(&r.meta))
            .unwrap_or_default();
        let mut summary = AttemptSummary {
            attempt: attempt_no,
            restored: restore.as_ref().map(|r| RestoreInfo {
                checkpoint_id: r.meta.checkpoint_id,
                path: r.path.clone(),
                source_records: baseline.iter().map(|s| s.records).sum(),
            }),
            source_records: 0,
            failure: None,
        };
        let records_before = exec.source_records();
        let fired_before = injector.as_ref().map_or(0, |i| i.fired());
        if let Some(inj) = &injector {
            inj.on_attempt_started();
        }
        // The eager restores' report is this attempt's: in one process they run on this
        // thread, during the deploy, and a restart's would otherwise add to the failed
        // attempt's.
        crate::state::keyed::start_restore_report();
        let attempt = match exec
            .state_backend
            .prepare_attempt()
            .and_then(|()| exec.deploy(attempt_no, restore.as_ref()))
        {
            Ok(a) => a,
            Err(e) => break Err(e),
        };
        drop(restore.take()); // the tasks hold what they need; free the loaded checkpoint
        let (attempt, end) = exec.run_attempt(
            attempt,
            attempt_no,
            &baseline,
            &mut coordinator,
            &events_rx,
            &mut result,
            &mut latest_path,
        );
        // On a cluster a worker fired the planted failure: count it as this process would.
        let (fired_on_a_worker, membership) = exec.hosted_failure(attempt_no);
        if let (AttemptEnd::Failed(_), Some(inj), true) = (&end, &injector, fired_on_a_worker) {
            inj.fired_elsewhere();
        }
        // Decide about a restart before tearing the attempt down: if there is one, the
        // checkpoint to restart from is read back while the failed tasks are cancelled
        // and during the restart delay (the new attempt still starts no earlier than the
        // delay after the old one stopped).
        // A run that lost its job folder to another run fails with that cause, whatever
        // failed first (a write refused by the fence), and never restarts.
        let end = match (end, exec.storage.ownership_lost()) {
            (AttemptEnd::Failed(_), Some(lost)) => AttemptEnd::Failed(Error::Storage(lost)),
            (end, _) => end,
        };
        let decision = match &end {
            AttemptEnd::Finished => None,
            AttemptEnd::Failed(Error::Storage(e)) if e.is_ownership_lost() => {
                Some(RestartDecision::GiveUp(
                    "another run owns the checkpoint folder now, and a restart would write \
                     beside it"
                        .into(),
                ))
            }
            AttemptEnd::Failed(e) => Some(restarts.on_failure(Failure {
                at: Instant::now(),
                message: &e.to_string(),
                injected: injector.as_ref().is_some_and(|i| i.fired() > fired_before),
                transient: e.is_transient(),
                membership,
                progress: result.checkpoints.last().map(|c| c.source_records),
                ran_for: attempt_started.elapsed(),
            })),
        };
        let restart_delay = match &decision {
            Some(RestartDecision::Restart(delay)) => Some(*delay),
            _ => None,
        };
        let reload = restart_delay
            .and(latest_path.clone())
            .map(restore::Prefetch::start);
        attempt.cancel_and_join();
        summary.source_records = exec.source_records() - records_before;
        if let AttemptEnd::Failed(e) = &end {
            summary.failure = Some(e.to_string());
        }
        control.update(|s| s.on_attempt_ended(&summary, wall_ms()));
        result.history.push(summary);
        match end {
            AttemptEnd::Finished => {
                if let Some(n) = crate::state::keyed::fetch_report() {
                    metrics.notice(&mut result, n);
                }
                if let Some(n) = crate::state::keyed::restore_report() {
                    metrics.notice(&mut result, n);
                }
                if let Some(n) = crate::state::keyed::cache_report() {
                    metrics.notice(&mut result, n);
                }
                break Ok(());
            }
            AttemptEnd::Failed(err) => {
                control.update(|s| s.state = "restarting".into());
                match restart_delay {
                    None => {
                        let why = match decision {
                            Some(RestartDecision::GiveUp(why)) => why,
                            _ => String::new(),
                        };
                        break Err(Error::JobFailed {
                            attempts: attempt_no,
                            last: Box::new(err),
                            why,
                        });
                    }
                    Some(delay) => {
                        metrics.restarts.fetch_add(1, Ordering::Relaxed);
                        metrics.notice(
                            &mut result,
                            format!(
                            "attempt {attempt_no} failed: {err}; restarting from {} in {delay:?}",
                            latest_path
                                .as_ref()
                                .map_or("the beginning".to_string(), |p| p.display().to_string())
                        ),
                        );
                        std::thread::sleep(delay);
                        restore = match reload {
                            None => None,
                            Some(loading) => {
                                let progress = result.checkpoints.last().map(|c| c.source_records);
                                match reload_checkpoint(loading, &mut restarts, progress, |n| {
                                    metrics.notice(&mut result, n)
                                }) {
                                    Ok(mut r) => {
                                        // A reload of the checkpoint the run started from
                                        // drops what the start dropped.
                                        if let Some((path, dropped)) = &restored_with_drops {
                                            if &r.path == path {
                                                for (uid, state) in dropped {
                                                    r.drop_state(uid, state);
                                                }
                                            }
                                        }
                                        Some(r)
                                    }
                                    Err(Reload::GaveUp(last, why)) => {
                                        break Err(Error::JobFailed {
                                            attempts: attempt_no,
                                            last: Box::new(last),
                                            why,
                                        })
                                    }
                                    Err(Reload::Unreadable(e)) => break Err(e),
                                }
                            }
                        };
                    }
                }
            }
        }
    };
    // Every task has stopped: the counters are final.
    metrics
        .source_records
        .store(exec.source_records(), Ordering::Relaxed);
    let state_backend = exec.state_backend.clone();
    // The workers' writers are gone once the workers were told the job ended (on a
    // cluster each closes its stream after its writers) and the hosts are dropped (the
    // in-process worker joins its writers): then the sweeps below see every file.
    exec.hosts.end_job(outcome.as_ref().map(|_| ()));
    drop(exec);
    // No task and no writer reads the LSMs any more.
    state_backend.finish();
    control.update(|s| {
        s.source_records = metrics.source_records.load(Ordering::Relaxed);
        s.state = match (&outcome, &result.stopped_with_savepoint) {
            (Err(_), _) => "failed",
            (Ok(()), Some(_)) => "stopped",
            (Ok(()), None) => "finished",
        }
        .into();
    });
    if result.stopped_with_savepoint.is_some() && !cfg.retain_on_cancel {
        // Stopped, and the user asked not to keep checkpoints: the savepoint is the handle.
        for id in coordinator.retained_ids() {
            let _ = crate::checkpoint::shared::discard(&storage, id);
        }
    }
    // With every writer gone no file can appear any more: remove what checkpoints that
    // never completed left behind (in flight when the job ended, or written by a late
    // writer after their abort), so the folder holds only complete checkpoints.
    for id in first_id..coordinator.next_checkpoint_id() {
        if !storage.is_complete(id) {
            let _ = crate::checkpoint::shared::discard(&storage, id);
        }
    }
    // Likewise the shared files of incremental checkpoints that no complete checkpoint
    // lists (held back by retention, or written late), and their empty folders.
    let _ = crate::checkpoint::shared::sweep_orphans(&storage);
    let _ = crate::checkpoint::shared::prune_empty_folders(&storage);
    result.injected_failures = injector.map(|i| (i.fired(), i.planned()));
    result.duration = started.elapsed();
    result.source_records = metrics.source_records.load(Ordering::Relaxed);
    outcome.map(|()| result)
}

/// Schedules `plan` onto `hosting`'s workers; every task must run in this process (see
/// [`execute_placed`]).
#[cfg(feature = "cluster")]
fn place(
    plan: &Plan,
    hosting: crate::runtime::placement::Hosting,
) -> Result<crate::runtime::placement::Placement> {
    let placement = crate::runtime::placement::Placement::schedule(plan, hosting);
    if let Some(t) = (0..plan.tasks.len()).find(|&t| !placement.is_local(t)) {
        return Err(Error::InvalidJob(format!(
            "task {} is placed on worker {}, which this process does not host; a job \
             spread over several processes runs under the cluster's coordinator",
            plan.tasks[t].name, placement.task_workers[t]
        )));
    }
    Ok(placement)
}

/// A writer thread's outcome, as the event the attempt's loop receives.
impl From<SnapshotWritten> for TaskEvent {
    fn from(w: SnapshotWritten) -> Self {
        match w.result {
            Ok(ack) => TaskEvent::Ack {
                attempt: w.attempt,
                task: w.task,
                checkpoint: w.checkpoint,
                ack,
            },
            Err(e) => TaskEvent::Decline {
                attempt: w.attempt,
                checkpoint: w.checkpoint,
                reason: e.to_string(),
            },
        }
    }
}

impl Executor<'_> {
    /// Deploys attempt `attempt` (restored from `restore`) on the job's workers: the
    /// executor runs no task itself, in one process as on a cluster.
    pub(crate) fn deploy(
        &self,
        attempt: u32,
        restore: Option<&RestoredCheckpoint>,
    ) -> Result<Attempt> {
        let metrics = &self.task_metrics;
        let planted = self.injector.as_ref().and_then(|injector| {
            let (number, point) = injector.next_due()?;
            let done: u64 = (metrics.iter())
                .map(|m| m.records_in.load(Ordering::Relaxed))
                .sum();
            Some(PlantedFailure {
                number,
                planned: injector.planned(),
                records_to_go: point.saturating_sub(done),
                seed: self.cfg.failure_injection.map_or(0, |f| f.seed),
                injector: injector.clone(),
            })
        });
        let mut attempt = self.hosts.deploy(
            &self.plan,
            attempt,
            restore,
            &self.events_tx,
            &self.storage,
            metrics,
            planted,
        )?;
        // The coordinator triggers checkpoints at every source of the plan, wherever it
        // runs, and hears every task end.
        let s = &mut attempt.subtasks;
        s.sources = (self.plan.tasks.iter().enumerate())
            .filter(|(_, t)| matches!(self.graph.nodes[t.chain[0]].kind, NodeKind::Source(_)))
            .map(|(i, _)| i)
            .collect();
        s.finished = vec![false; self.plan.tasks.len()];
        Ok(attempt)
    }

    /// How attempt `attempt` failed on the workers: by an injected failure a worker fired
    /// ([`TaskHosts::injected_failure`]), and by a peer's first report of a lost worker
    /// ([`TaskHosts::uncounted_failure`]); `(false, false)` in one process, where the
    /// executor sees its own injector fire.
    pub(crate) fn hosted_failure(&self, attempt: u32) -> (bool, bool) {
        let h = &self.hosts;
        (h.injected_failure(attempt), h.uncounted_failure(attempt))
    }

    /// Records the source tasks emitted so far, replays included. Task counters live as
    /// long as the job (plans do not change between attempts), so their sum is the total.
    pub(crate) fn source_records(&self) -> u64 {
        self.source_metrics
            .iter()
            .map(|m| m.records_in.load(Ordering::Relaxed))
            .sum()
    }

    /// Where the job's sources stand in `meta`: per source uid of this job, the records it
    /// had emitted (the positions the sources resume from, counted in records).
    fn source_baseline(&self, meta: &CheckpointMetadata) -> Vec<SourceProgress> {
        let mut uids: Vec<&String> = self
            .plan
            .tasks
            .iter()
            .map(|t| t.chain[0])
            .filter(|&n| matches!(self.graph.nodes[n].kind, NodeKind::Source(_)))
            .map(|n| &self.plan.uids[n])
            .collect();
        uids.dedup();
        uids.into_iter()
            .map(|uid| SourceProgress {
                uid: uid.clone(),
                records: meta.source_records(uid),
            })
            .collect()
    }
}

impl Executor<'_> {
    /// Writes checkpoint `id`'s `_metadata` from its acknowledgements (which completes it);
    /// returns its statistics and the records its sources had emitted.
    pub(crate) fn write_metadata(
        &self,
        id: u64,
        trigger_ms: u64,
        acks: &[TaskAck],
        snapshot: SnapshotKind,
        baseline: &[SourceProgress],
    ) -> Result<(TaskCheckpointStats, u64)> {
        let task_names: Vec<&str> = self.plan.tasks.iter().map(|t| t.name.as_str()).collect();
        let info = finalize::CheckpointInfo {
            id,
            job_name: &self.cfg.name,
            trigger_ms,
            completed_ms: wall_ms(),
            mode: self.cfg.checkpointing.mode,
            max_parallelism: self.cfg.max_parallelism,
            snapshot,
            run_id: self.storage.run_id(),
            task_names: &task_names,
            baseline,
        };
        let mut done = finalize::assemble(&info, acks);
        done.meta.schemas = self.schemas.clone();
        crate::checkpoint::shared::check_chain(&self.storage, id, &done.meta.incremental)
            .map_err(Error::CheckpointFailures)?;
        finalize::write(&self.storage, &done.meta)?;
        Ok((done.stats, done.source_records))
    }
}
