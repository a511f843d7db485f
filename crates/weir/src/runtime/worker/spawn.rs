//! Starting a worker's share of a job attempt: the channels of every non-chained edge,
//! each task's operator chain (restored from a checkpoint when there is one), and one
//! thread per task whose end — success, error or panic — becomes a [`TaskEvent`].
//!
//! Invariant: each channel end, lane and control receiver goes to exactly one task; a task
//! another worker runs gets a control sender nobody reads, so the indices of
//! [`Subtasks`]' vectors stay those of the plan's tasks.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Sender};

use crate::checkpoint::layout::ChannelStateFile;
use crate::checkpoint::restore::RestoredCheckpoint;
use crate::error::{Error, Result};
use crate::runtime::debloat::Debloat;
use crate::runtime::fault::FailureInjector;
use crate::runtime::graph::{
    AnyBox, InputSetup, NodeKind, Partitioning, TaskBody, UnalignedWiring,
};
use crate::runtime::operators::OperatorContext;
use crate::runtime::task::{Control, TaskContext, TaskEvent};
use crate::runtime::unaligned::capture::ChannelOrigin;
use crate::runtime::unaligned::lane::{lane, LaneReceiver, LaneSender};
use crate::runtime::worker::WorkerTasks;

/// The subtasks of one attempt as whoever drives them reaches them: per task of the plan a
/// control sender, and the threads to join. A worker's relay holds its running subtasks
/// (the controls go to their task threads); the coordinator's `Attempt` holds the same
/// shape for every task of the plan, its controls going to the workers' relays.
pub(crate) struct Subtasks {
    /// Per task of the plan, the sender of its controls (read by nobody for a task this
    /// worker does not run).
    pub(crate) controls: Vec<Sender<Control>>,
    /// The source tasks, which checkpoints are triggered at (on a worker, those it runs).
    pub(crate) sources: Vec<usize>,
    /// The threads to join once cancelled (task threads, or those carrying controls).
    pub(crate) handles: Vec<JoinHandle<()>>,
    /// Per task of the plan, whether it ended; on a worker, a task of another worker
    /// counts as ended from the start.
    pub(crate) finished: Vec<bool>,
}

/// Reaching every task of the attempt (a worker's relay and the coordinator's attempt
/// loop both do).
impl Subtasks {
    /// Sends `c` to every task still running.
    pub(crate) fn broadcast(&self, c: Control) {
        for (i, tx) in self.controls.iter().enumerate() {
            if !self.finished[i] {
                let _ = tx.send(c); // a task that already exited needs no message
            }
        }
    }

    /// Cancels every task and waits for its thread to end.
    pub(crate) fn cancel_and_join(self) {
        self.broadcast(Control::Cancel);
        drop(self.controls);
        for h in self.handles {
            let _ = h.join(); // task panics were caught inside the thread
        }
    }
}

/// The priority lanes of one edge (unaligned checkpoints), laid out like its channels:
/// per sending subtask its lanes in receiver order, per receiving subtask its lanes in
/// sender order with each one's sending subtask. Empty when the edge has none.
#[derive(Default)]
struct EdgeLanes {
    senders: Vec<Option<(Vec<LaneSender>, Credits)>>,
    receivers: Vec<Option<ReceiverLanes>>,
}

/// A receiving subtask's lanes of one edge, in sender order, with each one's sending
/// subtask and credit.
type ReceiverLanes = (Vec<LaneReceiver>, Vec<u32>, Credits);

/// Per channel, the events its consumer read ahead (shared by both ends).
type Credits = Vec<Arc<AtomicUsize>>;

impl EdgeLanes {
    /// A lane per channel of an edge from `senders` to `receivers` subtasks (`forward`:
    /// only `i → i`), matching the channels `EdgeFactory::channels` makes.
    fn new(senders: usize, receivers: usize, forward: bool) -> Self {
        let mut tx: Vec<(Vec<LaneSender>, Credits)> =
            (0..senders).map(|_| Default::default()).collect();
        let mut rx: Vec<ReceiverLanes> = (0..receivers).map(|_| Default::default()).collect();
        for (s, tx_s) in tx.iter_mut().enumerate() {
            for (r, rx_r) in rx.iter_mut().enumerate() {
                if forward && s != r {
                    continue;
                }
                let (t, v) = lane();
                let credit = Arc::new(AtomicUsize::new(0));
                tx_s.0.push(t);
                tx_s.1.push(credit.clone());
                rx_r.0.push(v);
                rx_r.1.push(s as u32);
                rx_r.2.push(credit);
            }
        }
        EdgeLanes {
            senders: tx.into_iter().map(Some).collect(),
            receivers: rx.into_iter().map(Some).collect(),
        }
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

impl WorkerTasks {
    fn operator_context(
        &self,
        node: usize,
        subtask: u32,
        restore: Option<&RestoredCheckpoint>,
    ) -> Result<OperatorContext> {
        let uid = self.plan.uids[node].clone();
        let p = self.plan.parallelism[node];
        let (operator_state, keyed_state) = match restore {
            Some(r) => r.state_for(&uid, subtask, p, self.cfg.max_parallelism)?,
            None => Default::default(),
        };
        let restored_chain = restore.and_then(|r| {
            r.own_chain(
                &uid,
                subtask,
                p,
                self.cfg.max_parallelism,
                self.storage.root(),
            )
        });
        Ok(OperatorContext {
            uid,
            subtask,
            parallelism: p,
            max_parallelism: self.cfg.max_parallelism,
            restored: restore.is_some(),
            operator_state,
            keyed_state,
            restored_chain,
            job_name: self.cfg.name.clone(),
            state_backend: self
                .state_backend
                .for_subtask(&self.plan.uids[node], subtask),
        })
    }

    /// The channel state subtask `subtask` of `parallelism` of the task headed by node
    /// `head` replays from `r`: for a keyed operator restored at another parallelism, the
    /// records whose key groups it now owns (re-partitioned once per operator, kept in
    /// `rerouted`); otherwise [`RestoredCheckpoint::channel_state_for`].
    fn replay_for(
        &self,
        r: &RestoredCheckpoint,
        head: usize,
        subtask: u32,
        parallelism: u32,
        rerouted: &mut HashMap<usize, Vec<Vec<ChannelStateFile>>>,
    ) -> Result<Vec<ChannelStateFile>> {
        let g = &*self.graph;
        let uid = &self.plan.uids[head];
        let Some((old, files)) = r.channel_state_of(uid) else {
            return Ok(Vec::new());
        };
        let keyed = g.nodes[head]
            .inputs
            .iter()
            .find(|&&e| self.plan.partitioning[e] == Partitioning::KeyGroups);
        let Some(&edge) = keyed.filter(|_| old != parallelism) else {
            return Ok(r.channel_state_for(uid, subtask, parallelism));
        };
        let parts = match rerouted.entry(head) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(
                g.edges[edge]
                    .factory
                    .reroute_keyed(files, &g.types, parallelism, uid)?,
            ),
        };
        Ok(std::mem::take(&mut parts[subtask as usize]))
    }

    /// Builds this worker's tasks of attempt `attempt` (restored from `restore`; with
    /// `placement`, only those placed on the workers this process hosts) and starts one
    /// thread per task. `injector`: the failure injection its tasks fire.
    pub(crate) fn spawn(
        &self,
        attempt: u32,
        restore: Option<&RestoredCheckpoint>,
        injector: Option<&Arc<FailureInjector>>,
        #[cfg(feature = "cluster")] placement: Option<&crate::runtime::placement::Placement>,
    ) -> Result<Subtasks> {
        let g = &*self.graph;
        let unaligned = self.cfg.checkpointing.unaligned;
        // Channels for every non-chained edge (and, unaligned, a priority lane beside each).
        let mut senders: Vec<Vec<Option<AnyBox>>> = Vec::new();
        let mut receivers: Vec<Vec<Option<AnyBox>>> = Vec::new();
        let mut lanes: Vec<EdgeLanes> = Vec::new();
        #[cfg(feature = "cluster")]
        let placed = placement.map(|p| (p, p.node_workers(&self.plan)));
        // Each attempt numbers its remote channels afresh (`ChannelWiring::first_channel`):
        // attempts take consecutive ranges of the plan's channel count.
        #[cfg(feature = "cluster")]
        let mut first_channel = {
            let per_attempt = g
                .edges
                .iter()
                .enumerate()
                .filter(|(i, _)| !self.plan.chained[*i])
                .map(|(_, e)| self.plan.parallelism[e.from] * self.plan.parallelism[e.to])
                .fold(0u32, u32::wrapping_add);
            attempt.wrapping_mul(per_attempt)
        };
        for (i, e) in g.edges.iter().enumerate() {
            if self.plan.chained[i] {
                senders.push(Vec::new());
                receivers.push(Vec::new());
                lanes.push(EdgeLanes::default());
                continue;
            }
            let (from_p, to_p) = (
                self.plan.parallelism[e.from] as usize,
                self.plan.parallelism[e.to] as usize,
            );
            let forward = self.plan.partitioning[i] == Partitioning::Forward;
            let capacity = self.cfg.channel_capacity.max(1);
            #[cfg(feature = "cluster")]
            let (tx, rx) = match &placed {
                Some((p, workers)) => {
                    let wiring = crate::runtime::placement::ChannelWiring {
                        hosted: &p.hosted,
                        senders: &workers[&e.from],
                        receivers: &workers[&e.to],
                        first_channel,
                    };
                    first_channel = first_channel.wrapping_add((from_p * to_p) as u32);
                    e.factory
                        .placed_channels(&wiring, &g.types, forward, capacity)?
                }
                None => e.factory.channels(from_p, to_p, forward, capacity),
            };
            #[cfg(not(feature = "cluster"))]
            let (tx, rx) = e.factory.channels(from_p, to_p, forward, capacity);
            senders.push(tx.into_iter().map(Some).collect());
            receivers.push(rx.into_iter().map(Some).collect());
            lanes.push(if unaligned {
                EdgeLanes::new(from_p, to_p, forward)
            } else {
                EdgeLanes::default()
            });
        }
        let mut controls = Vec::new();
        let mut bodies: Vec<(usize, String, TaskBody)> = Vec::new();
        // Keyed channel state re-partitioned for another parallelism, per head operator.
        let mut rerouted: HashMap<usize, Vec<Vec<ChannelStateFile>>> = HashMap::new();
        let mut sources = Vec::new();
        let mut local = vec![true; self.plan.tasks.len()];
        for (ti, t) in self.plan.tasks.iter().enumerate() {
            #[cfg(feature = "cluster")]
            let here = placement.is_none_or(|p| p.is_local(ti));
            #[cfg(not(feature = "cluster"))]
            let here = true;
            if !here {
                // Another worker runs it: a control channel nobody reads keeps the
                // indices of the attempt's vectors those of the plan's tasks.
                local[ti] = false;
                controls.push(unbounded().0);
                continue;
            }
            let s = t.subtask as usize;
            let tail = *t.chain.last().expect("chains are never empty");
            let outs: Vec<AnyBox> = g.nodes[tail]
                .outputs
                .iter()
                .map(|&e| {
                    let tx = senders[e][s]
                        .take()
                        .expect("each sender is used by one task");
                    let f = &g.edges[e].factory;
                    // A channel to another worker announces on its remote priority lane.
                    let announced = (lanes[e].senders.get_mut(s).and_then(Option::take))
                        .map(|(l, credits)| (f.announcers(&tx, l), credits));
                    // Unaligned barriers overtake the queues: debloating buys their
                    // checkpoints nothing, and cost W3's unaligned checkpoints ×20
                    // (BENCHMARKS.md, stop 41).
                    let target = self.cfg.buffer_debloat_target.filter(|_| !unaligned);
                    let debloat = target.map(|target| Debloat {
                        target,
                        capacity: self.cfg.channel_capacity.max(1),
                    });
                    let w = f.writer(tx, self.plan.partitioning[e], t.subtask, debloat);
                    match announced {
                        Some((l, credits)) => f.announcing(w, l, credits),
                        None => w,
                    }
                })
                .collect();
            let factory = &g.nodes[tail].outputs_factory;
            let mut output = match outs.len() {
                0 => factory.terminal(),
                1 => outs.into_iter().next().expect("one output"),
                _ => factory.fan_out(outs),
            };
            // Per-operator figures: every link of the chain is metered (operator_metrics).
            let links = self.chain_metrics.as_ref().map(|m| &m[ti]);
            let meter = |output: AnyBox, node: usize, link: usize| match links {
                Some(m) => g.nodes[node].outputs_factory.metered(output, m.link(link)),
                None => output,
            };
            output = meter(output, tail, t.chain.len());
            for (i, &n) in t.chain.iter().enumerate().skip(1).rev() {
                let NodeKind::Operator(build) = &g.nodes[n].kind else {
                    return Err(Error::InvalidJob("a source cannot have inputs".into()));
                };
                output = build(self.operator_context(n, t.subtask, restore)?, output)?;
                output = meter(output, t.chain[i - 1], i);
            }
            let (ctl_tx, ctl_rx) = unbounded();
            controls.push(ctl_tx);
            // A source of an unaligned job defers a blocked send once a barrier waits
            // (`load::send_or_defer`); no trigger of an earlier attempt is pending.
            let m = &self.task_metrics[ti];
            let is_source = matches!(g.nodes[t.chain[0]].kind, NodeKind::Source(_));
            m.deferrable
                .store(unaligned && is_source, Ordering::Relaxed);
            m.barrier_requested.store(false, Ordering::Relaxed);
            let ctx = TaskContext {
                index: ti,
                subtask: t.subtask,
                parallelism: t.parallelism,
                attempt,
                mode: self.cfg.checkpointing.mode,
                buffer_timeout: self.cfg.buffer_timeout,
                control: ctl_rx,
                writer: self.writers().clone(),
                injector: injector.cloned(),
                metrics: self.task_metrics[ti].clone(),
                events: self.events_tx.clone(),
            };
            let head = t.chain[0];
            let body = match &g.nodes[head].kind {
                NodeKind::Source(build) => {
                    sources.push(ti);
                    build(
                        self.operator_context(head, t.subtask, restore)?,
                        output,
                        ctx,
                    )?
                }
                NodeKind::Operator(build) => {
                    let input = build(self.operator_context(head, t.subtask, restore)?, output)?;
                    let first = g.nodes[head].inputs[0];
                    let input = meter(input, g.edges[first].from, 0);
                    let rx: Vec<AnyBox> = g.nodes[head]
                        .inputs
                        .iter()
                        .map(|&e| {
                            receivers[e][s]
                                .take()
                                .expect("each receiver is used by one task")
                        })
                        .collect();
                    let uid = &self.plan.uids[head];
                    let wiring = unaligned.then(|| {
                        let mut w = UnalignedWiring {
                            uid: uid.clone(),
                            lanes: Vec::new(),
                            origins: Vec::new(),
                            aligned_timeout: self
                                .cfg
                                .checkpointing
                                .aligned_checkpoint_timeout
                                .unwrap_or_default(),
                            // Twice the channel's capacity and an open batch: what a
                            // checkpoint usually finds between the queue and its marker.
                            read_ahead_limit: 2 * self.cfg.channel_capacity.max(1) + 1,
                            credits: Vec::new(),
                        };
                        for (edge, &e) in g.nodes[head].inputs.iter().enumerate() {
                            let (l, senders, credits) = lanes[e].receivers[s]
                                .take()
                                .expect("each lane is read by one task");
                            w.lanes.extend(l);
                            w.credits.extend(credits);
                            w.origins
                                .extend(senders.into_iter().map(|sender| ChannelOrigin {
                                    edge: edge as u32,
                                    sender,
                                }));
                        }
                        w
                    });
                    let replay = match restore {
                        Some(r) => {
                            self.replay_for(r, head, t.subtask, t.parallelism, &mut rerouted)?
                        }
                        None => Vec::new(),
                    };
                    let setup = InputSetup {
                        types: &g.types,
                        replay,
                        uid: self.plan.uids[head].clone(),
                        unaligned: wiring,
                    };
                    g.edges[first].factory.input_task(rx, input, ctx, setup)?
                }
            };
            bodies.push((ti, t.name.clone(), body));
        }
        let mut handles = Vec::new();
        for (ti, name, body) in bodies {
            let events = self.events_tx.clone();
            let metrics = self.task_metrics[ti].clone();
            let h = std::thread::Builder::new()
                .name(format!("weir-task-{ti}"))
                .spawn(move || {
                    let entered = crate::runtime::load::enter(metrics);
                    let ev = match catch_unwind(AssertUnwindSafe(body)) {
                        Ok(Ok(())) => TaskEvent::Finished { attempt, task: ti },
                        Ok(Err(error)) => TaskEvent::Failed {
                            attempt,
                            task: ti,
                            error: match error {
                                Error::Cancelled => Error::Cancelled,
                                e => Error::TaskFailed {
                                    task: name,
                                    cause: e.to_string(),
                                },
                            },
                        },
                        Err(p) => TaskEvent::Failed {
                            attempt,
                            task: ti,
                            error: Error::TaskFailed {
                                task: name,
                                cause: format!("panicked: {}", panic_message(p)),
                            },
                        },
                    };
                    drop(entered);
                    let _ = events.send(ev);
                })
                .map_err(|e| Error::InvalidJob(format!("cannot start a task thread: {e}")))?;
            handles.push(h);
        }
        Ok(Subtasks {
            controls,
            sources,
            handles,
            // A task of another worker never reports here: it counts as finished.
            finished: local.iter().map(|&l| !l).collect(),
        })
    }
}
