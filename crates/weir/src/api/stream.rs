//! The environment, `DataStream` and `KeyedStream`: a typed builder for the job graph.
//!
//! ```
//! use weir::prelude::*;
//! # fn main() -> weir::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let mut config = JobConfig::new("doc-example");
//! config.checkpoint_dir = dir.path().to_path_buf();
//! let env = StreamEnvironment::new(config);
//! let out = CollectSink::new();
//! env.add_source("numbers", GeneratorSource::new(1000))
//!     .map(|i| i % 10)
//!     .key_by(|k| *k)
//!     .reduce(|a, b| a.max(b))
//!     .add_sink("collect", out.clone());
//! env.execute()?;
//! assert_eq!(out.take().len(), 1000);
//! # Ok(()) }
//! ```
//!
//! Every operator gets a `uid` (explicit via [`DataStream::uid`], or derived from its name
//! and position). State in checkpoints is matched to operators by uid, so set explicit uids
//! on stateful operators of jobs you intend to upgrade.

use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::api::connected::ConnectedStreams;
use crate::api::join::{IntervalJoin, JoinedStreams};
use crate::api::windowed::WindowedStream;
use crate::error::Result;
use crate::runtime::config::JobConfig;
use crate::runtime::control::{ControlHub, JobControl};
use crate::runtime::coordinator::executor::{self, JobMetrics, JobResult};
use crate::runtime::functions::{
    BroadcastProcessFunction, CheckpointedFunction, Collector, KeyedProcessFunction,
    ProcessFunction, SinkFunction, SourceFunction,
};
use crate::runtime::graph::{
    AnyBox, Edge, JobGraph, KeyedWriterBuilder, Node, NodeKind, Partitioning, TypedEdge,
    TypedOutputs,
};
use crate::runtime::network::{KeyGroupRouter, RoutedWriter};
use crate::runtime::operators::{
    BroadcastProcessOp, Connected, FilterOp, FlatMapOp, KeyedProcessOp, MapOp, OperatorContext,
    ProcessOp, SinkOp,
};
use crate::runtime::output::Output;
use crate::runtime::task::{run_source, run_source_paused_by, TaskContext};
use crate::runtime::watermark::alignment::AlignmentGroup;
use crate::runtime::watermark::operator::TimestampsAndWatermarksOp;
use crate::runtime::watermark::WatermarkStrategy;
use crate::runtime::windows::WindowAssigner;
use crate::state::keyed::{KeyedContext, KeyedStateStore, ValueState};
use crate::state::{Data, Key, StateValue};

/// The entry point of a job: holds its configuration and the graph being built.
pub struct StreamEnvironment {
    graph: Rc<RefCell<JobGraph>>,
    config: JobConfig,
    metrics: Arc<JobMetrics>,
    control: Arc<ControlHub>,
    /// The job's watermark alignment groups, by name: sources naming one share it.
    alignment_groups: RefCell<HashMap<String, Arc<AlignmentGroup>>>,
}

impl StreamEnvironment {
    /// A new environment for a job with `config`.
    pub fn new(config: JobConfig) -> Self {
        StreamEnvironment {
            graph: Rc::new(RefCell::new(JobGraph::default())),
            config,
            metrics: Arc::new(JobMetrics::default()),
            control: Arc::new(ControlHub::default()),
            alignment_groups: RefCell::default(),
        }
    }

    /// The job's configuration.
    pub fn config(&self) -> &JobConfig {
        &self.config
    }

    /// The graph built so far, for the cluster's plan fingerprint.
    #[cfg(feature = "cluster")]
    pub(crate) fn graph(&self) -> std::cell::Ref<'_, JobGraph> {
        self.graph.borrow()
    }

    /// The configuration, changed after the graph was built: the runner plans failure
    /// injection once the job has said how many records it processes.
    #[cfg(feature = "runner")]
    pub(crate) fn config_mut(&mut self) -> &mut JobConfig {
        &mut self.config
    }

    /// Live counters (records, checkpoints, restarts) for progress displays; can be read
    /// from another thread while [`StreamEnvironment::execute`] runs.
    pub fn metrics(&self) -> Arc<JobMetrics> {
        self.metrics.clone()
    }

    /// A handle to control the job while [`StreamEnvironment::execute`] runs (from another
    /// thread): savepoints, checkpoints on demand, stop-with-savepoint, status.
    pub fn control(&self) -> JobControl {
        JobControl {
            hub: self.control.clone(),
        }
    }

    /// Makes records of type `T` encodable, so that a stream of them may cross a network
    /// channel in a job with unaligned checkpoints (Flink's `registerType`): such a job
    /// saves the records in flight with each checkpoint. Common types (integers, `String`,
    /// `(String, u64)`, …) are registered already; a job with an edge of an unregistered
    /// type is refused when it starts, naming the edge and the type.
    pub fn register_type<T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static>(
        &self,
    ) {
        self.graph.borrow_mut().types.register::<T>();
    }

    /// Adds a source. Each parallel subtask runs a clone of `source`.
    pub fn add_source<T: Data, S: SourceFunction<T>>(
        &self,
        name: &str,
        source: S,
    ) -> DataStream<T> {
        let lists = source.operator_state();
        let builder = Arc::new(
            move |mut ctx: OperatorContext, chain: AnyBox, task: TaskContext| {
                let chain = unbox::<T>(chain);
                let mut s = source.clone();
                ctx.init_function(&mut s)?;
                let uid = ctx.uid;
                Ok(Box::new(move || run_source(s, uid, chain, task)) as _)
            },
        );
        let id = add_node::<T>(&self.graph, name, NodeKind::Source(builder), &[], None);
        declare_lists(&self.graph, id, lists);
        DataStream::single(self.graph.clone(), id, self.settings())
    }

    /// Adds a source whose records get timestamps and watermarks from `strategy` in every
    /// parallel subtask, inside the source's task (Flink's `fromSource(source, strategy,
    /// name)`): each subtask is one split with its own generator, idleness and place in
    /// the strategy's alignment group.
    pub fn add_source_with_watermarks<T: Data, S: SourceFunction<T>>(
        &self,
        name: &str,
        source: S,
        strategy: WatermarkStrategy<T>,
    ) -> DataStream<T> {
        let interval = interval_ms(self.config.auto_watermark_interval);
        let group = strategy.alignment().map(|(name, _)| {
            let mut groups = self.alignment_groups.borrow_mut();
            groups.entry(name.to_string()).or_default().clone()
        });
        let lists = source.operator_state();
        let builder = Arc::new(
            move |mut ctx: OperatorContext, chain: AnyBox, task: TaskContext| {
                let chain = unbox::<T>(chain);
                let (op, pause) = TimestampsAndWatermarksOp::at_source(
                    &strategy,
                    group.as_ref(),
                    interval,
                    chain,
                )?;
                let chain: Box<dyn Output<T>> = Box::new(op);
                let mut s = source.clone();
                ctx.init_function(&mut s)?;
                let uid = ctx.uid;
                Ok(Box::new(move || run_source_paused_by(s, uid, chain, task, pause)) as _)
            },
        );
        let id = add_node::<T>(&self.graph, name, NodeKind::Source(builder), &[], None);
        declare_lists(&self.graph, id, lists);
        DataStream::single(self.graph.clone(), id, self.settings())
    }

    fn settings(&self) -> StreamSettings {
        StreamSettings {
            max_parallelism: self.config.max_parallelism,
            auto_watermark_interval_ms: interval_ms(self.config.auto_watermark_interval),
        }
    }

    /// Holds the checkpoint or savepoint in folder `path` against this job without running
    /// it (issue 26, `savepoint check`): loads and verifies it, then decides every keyed
    /// state as a restore would (as is, migrates, incompatible) and lists operators and
    /// states that do not match. [`SchemaReport::refusals`] is empty exactly when a run
    /// restoring from `path` with this configuration would start.
    ///
    /// [`SchemaReport::refusals`]: crate::api::execution::SchemaReport::refusals
    pub fn check_savepoint(
        &self,
        path: &std::path::Path,
    ) -> Result<crate::runtime::schema_check::SchemaReport> {
        let graph = self.graph.borrow();
        let plan = crate::runtime::plan::plan(&graph, &self.config)?;
        let restored = crate::checkpoint::restore::load(path)?;
        let mut report = crate::runtime::schema_check::check(
            &graph,
            &plan.uids,
            self.config.max_parallelism,
            Some(&restored),
        )?;
        if let Err(e) = restored.check_compatible(&plan.uids, self.config.max_parallelism, true) {
            report.rows.push(crate::runtime::schema_check::SchemaRow {
                uid: "(job)".into(),
                state: String::new(),
                verdict: "incompatible".into(),
                old: None,
                new: None,
                refusal: Some(e.to_string()),
                droppable: false,
            });
        }
        Ok(report)
    }

    /// Runs the job with its subtasks spread over the workers of `hosting`: the channels
    /// between workers cross their exchanges (issue 24). Every worker must be hosted here.
    #[cfg(feature = "cluster")]
    #[cfg_attr(not(test), allow(dead_code))] // The worker role (issue 24, next) calls it.
    pub(crate) fn execute_placed(
        self,
        hosting: crate::runtime::placement::Hosting,
    ) -> Result<JobResult> {
        let graph = Rc::try_unwrap(self.graph)
            .map(RefCell::into_inner)
            .unwrap_or_else(|rc| std::mem::take(&mut *rc.borrow_mut()));
        executor::execute_placed(graph, &self.config, self.metrics, self.control, hosting)
    }

    /// The graph and configuration, for a cluster's worker, which runs its share of the
    /// job's attempts itself (issue 24, `cluster::worker`), and for tests of a worker's
    /// parts.
    #[cfg(feature = "cluster")]
    pub(crate) fn into_parts(self) -> (JobGraph, JobConfig) {
        let graph = Rc::try_unwrap(self.graph)
            .map(RefCell::into_inner)
            .unwrap_or_else(|rc| std::mem::take(&mut *rc.borrow_mut()));
        (graph, self.config)
    }

    /// A cluster's coordinator: the job's status (dashboard, API, metrics) lists the
    /// workers of `board` and the worker of each task.
    #[cfg(feature = "cluster")]
    pub(crate) fn set_worker_board(&self, board: Arc<dyn crate::runtime::status::WorkerBoard>) {
        self.control.set_board(board);
    }

    /// Runs the job as a cluster's coordinator: every task on the workers of `hosts`, the
    /// checkpoint coordinator and `_metadata` here (issue 24, `cluster::coordinator`).
    #[cfg(feature = "cluster")]
    pub(crate) fn execute_hosted(
        self,
        hosts: Arc<dyn crate::runtime::coordinator::hosts::TaskHosts>,
    ) -> Result<JobResult> {
        let graph = Rc::try_unwrap(self.graph)
            .map(RefCell::into_inner)
            .unwrap_or_else(|rc| std::mem::take(&mut *rc.borrow_mut()));
        executor::execute_hosted(graph, &self.config, self.metrics, self.control, hosts)
    }

    /// Runs the job to completion (bounded sources) with recovery from failures.
    pub fn execute(self) -> Result<JobResult> {
        let graph = Rc::try_unwrap(self.graph)
            .map(RefCell::into_inner)
            .unwrap_or_else(|rc| std::mem::take(&mut *rc.borrow_mut()));
        executor::execute(graph, &self.config, self.metrics, self.control)
    }
}

fn unbox<T: 'static>(b: AnyBox) -> Box<dyn Output<T>> {
    *b.downcast::<Box<dyn Output<T>>>()
        .expect("graph invariant: output boxes are made by typed code of the same type")
}

fn rebox<T: 'static>(o: Box<dyn Output<T>>) -> AnyBox {
    Box::new(o)
}

/// Adds a node of output type `O` fed by `inputs` (all of record type `I`).
fn add_node<O: Data>(
    graph: &Rc<RefCell<JobGraph>>,
    name: &str,
    kind: NodeKind,
    inputs: &[(usize, Partitioning)],
    edge: Option<&dyn Fn() -> Box<dyn crate::runtime::graph::EdgeFactory>>,
) -> usize {
    let mut g = graph.borrow_mut();
    let id = g.nodes.len();
    g.nodes.push(Node {
        name: name.to_string(),
        uid: None,
        parallelism: None,
        kind,
        outputs_factory: Box::new(TypedOutputs::<O>(PhantomData)),
        inputs: Vec::new(),
        outputs: Vec::new(),
    });
    if let Some(make_edge) = edge {
        for &(from, partitioning) in inputs {
            let e = g.edges.len();
            g.edges.push(Edge {
                from,
                to: id,
                partitioning,
                factory: make_edge(),
            });
            g.nodes[from].outputs.push(e);
            g.nodes[id].inputs.push(e);
        }
    }
    id
}

fn interval_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The job settings operators are built with, taken from the environment's configuration.
#[derive(Clone, Copy)]
struct StreamSettings {
    max_parallelism: u32,
    auto_watermark_interval_ms: u64,
}

/// A stream of records of type `T`: the output of one operator, or a union of several,
/// each with the partitioning its records take to the next operator.
pub struct DataStream<T> {
    graph: Rc<RefCell<JobGraph>>,
    nodes: Vec<(usize, Partitioning)>,
    settings: StreamSettings,
    _t: PhantomData<fn() -> T>,
}

/// A second handle on the same operator's output (Flink lets a `DataStream` be consumed
/// any number of times): each consumer gets every record, with the barriers and
/// watermarks, so one input can feed both sides of a join.
impl<T: Data> Clone for DataStream<T> {
    fn clone(&self) -> Self {
        self.fork()
    }
}

impl<T: Data> DataStream<T> {
    fn single(graph: Rc<RefCell<JobGraph>>, id: usize, settings: StreamSettings) -> Self {
        DataStream {
            graph,
            nodes: vec![(id, Partitioning::Default)],
            settings,
            _t: PhantomData,
        }
    }

    /// A second handle on the same operators' output, for a second consumer (the window
    /// operator's late-data side output is split off its results this way).
    pub(crate) fn fork(&self) -> Self {
        DataStream {
            graph: self.graph.clone(),
            nodes: self.nodes.clone(),
            settings: self.settings,
            _t: PhantomData,
        }
    }

    fn configure(self, f: impl Fn(&mut Node)) -> Self {
        {
            let mut g = self.graph.borrow_mut();
            // On a union, settings apply to every operator in it.
            for &(n, _) in &self.nodes {
                f(&mut g.nodes[n]);
            }
        }
        self
    }

    /// Sets the operator's stable id: the key of its state in checkpoints and savepoints.
    pub fn uid(self, uid: &str) -> Self {
        let uid = uid.to_string();
        self.configure(move |n| n.uid = Some(uid.clone()))
    }

    /// Sets the operator's display name.
    pub fn name(self, name: &str) -> Self {
        let name = name.to_string();
        self.configure(move |n| n.name = name.clone())
    }

    /// Sets the operator's parallelism (default: the job's).
    pub fn set_parallelism(self, parallelism: u32) -> Self {
        self.configure(move |n| n.parallelism = Some(parallelism))
    }

    fn partition(mut self, p: Partitioning) -> Self {
        self.nodes.iter_mut().for_each(|n| n.1 = p);
        self
    }

    /// Sends records round-robin to the next operator's subtasks.
    pub fn rebalance(self) -> Self {
        self.partition(Partitioning::Rebalance)
    }

    /// Sends every record to every subtask of the next operator.
    pub fn broadcast(self) -> Self {
        self.partition(Partitioning::Broadcast)
    }

    /// Sends subtask `i`'s records to subtask `i` of the next operator (equal parallelism).
    pub fn forward(self) -> Self {
        self.partition(Partitioning::Forward)
    }

    /// Merges streams of the same type; the next operator reads all of them.
    pub fn union(mut self, other: DataStream<T>) -> Self {
        self.nodes.extend(other.nodes);
        self
    }

    fn then<O: Data>(
        &self,
        name: &str,
        build: crate::runtime::graph::OperatorBuilder,
    ) -> DataStream<O> {
        self.then_with(name, build, None, None)
    }

    fn then_with<O: Data>(
        &self,
        name: &str,
        build: crate::runtime::graph::OperatorBuilder,
        partitioning: Option<Partitioning>,
        keyed: Option<KeyedWriterBuilder<T>>,
    ) -> DataStream<O> {
        // An explicit partitioning (key_by) overrides each input's own.
        let inputs: Vec<(usize, Partitioning)> = self
            .nodes
            .iter()
            .map(|&(n, p)| (n, partitioning.unwrap_or(p)))
            .collect();
        let maxp = self.settings.max_parallelism;
        let make_edge = move || {
            Box::new(TypedEdge::<T> {
                keyed: keyed.clone(),
                max_parallelism: maxp,
            }) as Box<dyn crate::runtime::graph::EdgeFactory>
        };
        let id = add_node::<O>(
            &self.graph,
            name,
            NodeKind::Operator(build),
            &inputs,
            Some(&make_edge),
        );
        DataStream::single(self.graph.clone(), id, self.settings)
    }

    /// Transforms each record.
    pub fn map<O: Data, F: FnMut(T) -> O + Clone + Send + 'static>(self, f: F) -> DataStream<O> {
        self.then(
            "map",
            Arc::new(move |_ctx, next| {
                Ok(rebox::<T>(Box::new(MapOp {
                    f: f.clone(),
                    out: Vec::new(),
                    next: unbox::<O>(next),
                })))
            }),
        )
    }

    /// Keeps the records for which `f` is true.
    pub fn filter<F: FnMut(&T) -> bool + Clone + Send + 'static>(self, f: F) -> DataStream<T> {
        self.then(
            "filter",
            Arc::new(move |_ctx, next| {
                Ok(rebox::<T>(Box::new(FilterOp {
                    f: f.clone(),
                    next: unbox::<T>(next),
                })))
            }),
        )
    }

    /// Turns each record into any number of records.
    pub fn flat_map<O, I, F>(self, f: F) -> DataStream<O>
    where
        O: Data,
        I: IntoIterator<Item = O>,
        F: FnMut(T) -> I + Clone + Send + 'static,
    {
        self.then(
            "flat_map",
            Arc::new(move |_ctx, next| {
                Ok(rebox::<T>(Box::new(FlatMapOp {
                    f: f.clone(),
                    out: Vec::new(),
                    out_timestamps: Vec::new(),
                    next: unbox::<O>(next),
                })))
            }),
        )
    }

    /// Applies a [`ProcessFunction`], which may keep operator state.
    pub fn process<O: Data, F: ProcessFunction<T, O>>(self, f: F) -> DataStream<O> {
        let lists = f.operator_state();
        let out = self.then(
            "process",
            Arc::new(move |mut ctx: OperatorContext, next| {
                let mut f = f.clone();
                ctx.init_function(&mut f)?;
                Ok(rebox::<T>(Box::new(ProcessOp {
                    uid: ctx.uid,
                    f,
                    out: Vec::new(),
                    out_timestamps: Vec::new(),
                    next: unbox::<O>(next),
                })))
            }),
        );
        out.declare_lists(lists)
    }

    /// Gives the records timestamps and the stream watermarks from `strategy` (Flink's
    /// `assignTimestampsAndWatermarks`); the watermarks arriving from upstream are replaced
    /// (except the final one of a bounded input). Chained to the operator before it when
    /// the parallelism matches, so each parallel instance generates its own watermarks.
    pub fn assign_timestamps_and_watermarks(self, strategy: WatermarkStrategy<T>) -> Self {
        let interval = self.settings.auto_watermark_interval_ms;
        self.then(
            "timestamps_watermarks",
            Arc::new(move |_ctx, next| {
                let op = TimestampsAndWatermarksOp::new(&strategy, interval, unbox::<T>(next))?;
                Ok(rebox::<T>(Box::new(op)))
            }),
        )
    }

    /// Connects a broadcast input: every element of `broadcast` reaches every subtask of
    /// the next operator, a [`BroadcastProcessFunction`] that keeps broadcast state.
    pub fn connect_broadcast<B: Data>(
        self,
        broadcast: DataStream<B>,
    ) -> BroadcastConnectedStream<T, B> {
        BroadcastConnectedStream {
            main: self,
            broadcast,
        }
    }

    /// Connects `other`, a stream of another type, for a two-input function
    /// ([`CoProcessFunction`](crate::api::functions::CoProcessFunction), or after
    /// [`ConnectedStreams::key_by`] a
    /// [`KeyedCoProcessFunction`](crate::api::functions::KeyedCoProcessFunction)).
    pub fn connect<T2: Data>(self, other: DataStream<T2>) -> ConnectedStreams<T, T2> {
        ConnectedStreams::new(self, other)
    }

    /// Joins this stream with `other` by key and window (Flink's `join`): name the keys with
    /// [`JoinedStreams::where_key`] and `equal_to`, then the windows.
    pub fn join<T2: Data>(self, other: DataStream<T2>) -> JoinedStreams<T, T2> {
        JoinedStreams::new(self, other)
    }

    /// Partitions the stream by key: records with equal keys go to the same subtask, and the
    /// next operator can keep state per key.
    pub fn key_by<K: Key, F>(self, key_fn: F) -> KeyedStream<K, T, F>
    where
        F: Fn(&T) -> K + Clone + Send + Sync + 'static,
    {
        KeyedStream {
            stream: self,
            key_fn,
            _k: PhantomData,
        }
    }

    /// Ends the stream in a sink. Returns the sink's stream handle so `uid`/`set_parallelism`
    /// can be set on it.
    pub fn add_sink<S: SinkFunction<T>>(self, name: &str, sink: S) -> DataStream<()> {
        let lists = sink.operator_state();
        self.then(
            name,
            Arc::new(move |mut ctx: OperatorContext, _next| {
                let mut f = sink.clone();
                ctx.init_function(&mut f)?;
                Ok(rebox::<T>(Box::new(SinkOp { uid: ctx.uid, f })))
            }),
        )
        .declare_lists(lists)
    }

    /// Records the operator lists this stream's function declares
    /// ([`CheckpointedFunction::operator_state`](crate::api::functions::CheckpointedFunction::operator_state)),
    /// decided ahead by `savepoint check` and a run.
    fn declare_lists(self, lists: Vec<crate::state::schema::OperatorListDeclaration>) -> Self {
        if let Some(&(node, _)) = self.nodes.first() {
            declare_lists(&self.graph, node, lists);
        }
        self
    }
}

/// A main stream connected to a broadcast stream ([`DataStream::connect_broadcast`]).
pub struct BroadcastConnectedStream<T, B> {
    main: DataStream<T>,
    broadcast: DataStream<B>,
}

impl<T: Data, B: Data> BroadcastConnectedStream<T, B> {
    /// Applies `f` to both inputs (see [`BroadcastProcessFunction`]).
    pub fn process<O: Data, F: BroadcastProcessFunction<T, B, O>>(self, f: F) -> DataStream<O> {
        let main = self.main.map(Connected::<T, B>::Main).name("connect-main");
        let side = self
            .broadcast
            .map(Connected::<T, B>::Broadcast)
            .name("connect-broadcast")
            .broadcast();
        let probe = crate::runtime::schema_check::broadcast_probe::<T, B, O, F>(&f);
        let out = main.union(side).then(
            "broadcast_process",
            Arc::new(move |ctx: OperatorContext, next: AnyBox| {
                let op = BroadcastProcessOp::new::<T, B>(f.clone(), ctx, unbox::<O>(next))?;
                Ok(rebox::<Connected<T, B>>(Box::new(op)))
            }),
        );
        if let Some(&(node, _)) = out.nodes.first() {
            out.graph.borrow_mut().broadcast_probes.push((node, probe));
        }
        out
    }
}

/// A stream partitioned by key (the result of [`DataStream::key_by`]).
pub struct KeyedStream<K, T, F> {
    stream: DataStream<T>,
    key_fn: F,
    _k: PhantomData<fn() -> K>,
}

impl<K: Key, T: Data, F: Fn(&T) -> K + Clone + Send + Sync + 'static> KeyedStream<K, T, F> {
    /// Applies a [`KeyedProcessFunction`], which keeps keyed state.
    pub fn process<O: Data, P: KeyedProcessFunction<K, T, O>>(self, f: P) -> DataStream<O> {
        let kf = self.key_fn.clone();
        let writer: KeyedWriterBuilder<T> = Arc::new(move |senders, max_parallelism| {
            let router = KeyGroupRouter::new(kf.clone(), max_parallelism, senders.len());
            Box::new(RoutedWriter::new(senders, router)) as Box<dyn Output<T>>
        });
        let key_fn = self.key_fn;
        let probe = crate::runtime::schema_check::keyed_probe::<K, T, O, P>(&f);
        let build = Arc::new(move |ctx: OperatorContext, next: AnyBox| {
            let op = KeyedProcessOp::new::<T>(f.clone(), key_fn.clone(), ctx, unbox::<O>(next))?;
            Ok(rebox::<T>(Box::new(op)))
        });
        let out = self.stream.then_with(
            "keyed_process",
            build,
            Some(Partitioning::KeyGroups),
            Some(writer),
        );
        if let Some(&(node, _)) = out.nodes.first() {
            out.graph.borrow_mut().schema_probes.push((node, probe));
        }
        out
    }

    /// Joins this stream with `other`, keyed alike, by time (Flink's `intervalJoin`): set
    /// the interval with [`IntervalJoin::between`].
    pub fn interval_join<T2: Data, F2>(
        self,
        other: KeyedStream<K, T2, F2>,
    ) -> IntervalJoin<K, T, T2, F, F2> {
        IntervalJoin::new((self.stream, self.key_fn), (other.stream, other.key_fn))
    }

    /// Cuts each key's records into windows by `assigner` (Flink's `window`); aggregate them
    /// with the returned [`WindowedStream`].
    pub fn window<A: WindowAssigner<T>>(self, assigner: A) -> WindowedStream<K, T, F, A> {
        WindowedStream::new(self, assigner)
    }

    /// Folds the records of each key with `f` and emits the running result for every record
    /// (Flink's `reduce`). The running value is keyed value state named `"reduce"`.
    pub fn reduce<R>(self, f: R) -> DataStream<T>
    where
        T: StateValue,
        R: Fn(T, T) -> T + Clone + Send + Sync + 'static,
    {
        self.process(Reduce { f, state: None }).name("reduce")
    }
}

/// The keyed process function behind [`KeyedStream::reduce`].
#[derive(Clone)]
struct Reduce<T, R> {
    f: R,
    state: Option<ValueState<T>>,
}

impl<T, R> CheckpointedFunction for Reduce<T, R> {}

impl<K: Key, T: StateValue, R: Fn(T, T) -> T + Clone + Send + Sync + 'static>
    KeyedProcessFunction<K, T, T> for Reduce<T, R>
{
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> Result<()> {
        self.state = Some(states.value_state("reduce")?);
        Ok(())
    }

    fn process(
        &mut self,
        record: T,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, T>,
    ) -> Result<()> {
        let state = self.state.expect("open() runs before process()");
        let next = match ctx.get(state) {
            Some(acc) => (self.f)(acc.clone(), record),
            None => record,
        };
        ctx.set(state, next.clone());
        out.collect(next);
        Ok(())
    }
}

/// Records the operator lists node `node`'s function declares (none: nothing to record).
fn declare_lists(
    graph: &Rc<RefCell<JobGraph>>,
    node: usize,
    lists: Vec<crate::state::schema::OperatorListDeclaration>,
) {
    if !lists.is_empty() {
        graph.borrow_mut().operator_lists.push((node, lists));
    }
}
