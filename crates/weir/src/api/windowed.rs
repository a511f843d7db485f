//! `WindowedStream`: a keyed stream cut into windows (Flink's `keyBy(...).window(...)`),
//! aggregated incrementally with `reduce` or `aggregate` — one accumulator per key and
//! window, in keyed state.
//!
//! Windows are in event time (`TumblingEventTimeWindows`, ...: placed by the record's
//! timestamp, fired by the watermark), in processing time (`TumblingProcessingTimeWindows`,
//! ...: placed and fired by the wall clock) or global (`GlobalWindows`: one window per key,
//! fired only by a trigger). [`WindowedStream::trigger`] replaces the assigner's default
//! trigger, e.g. with a count, continuous or purging one
//! ([`Trigger`]).
//!
//! Session windows ([`EventTimeSessionWindows`](crate::api::time::EventTimeSessionWindows),
//! with a fixed or a per-record gap) merge: a key's session grows while records keep
//! coming within the gap, and a record between two sessions joins them; the aggregate
//! then needs [`merge`](AggregateFunction::merge) (`reduce` has it).
//!
//! Records that arrive after the watermark passed their window are late. With
//! [`WindowedStream::allowed_lateness`] a window is kept that much longer and fires again,
//! updated, for each late record; records later still are dropped, or kept apart with
//! [`WindowedStream::side_output_late_data`], which gives them back as a stream of their
//! own ([`WindowOutputs::late_data`]).
//!
//! ```
//! use std::time::Duration;
//! use weir::prelude::*;
//! # fn main() -> weir::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let mut config = JobConfig::new("window-doc");
//! # config.checkpoint_dir = dir.path().to_path_buf();
//! let env = StreamEnvironment::new(config);
//! let out = CollectSink::new();
//! // Record i happens at time i ms; sum per key (i % 2) and 10 ms window.
//! let strategy = WatermarkStrategy::for_monotonous_timestamps()
//!     .with_timestamp_assigner(|i: &u64, _| *i);
//! env.add_source_with_watermarks("numbers", GeneratorSource::new(20), strategy)
//!     .key_by(|i| i % 2)
//!     .window(TumblingEventTimeWindows::of(Duration::from_millis(10))?)
//!     .reduce_with_window(|a, b| a + b, |key, window, sum| (*key, window.start, sum))
//!     .add_sink("collect", out.clone());
//! env.execute()?;
//! let mut sums = out.take();
//! sums.sort();
//! assert_eq!(sums, [(0, 0, 20), (0, 10, 70), (1, 0, 25), (1, 10, 75)]);
//! # Ok(()) }
//! ```

use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::api::stream::{DataStream, KeyedStream};
use crate::error::Result;
use crate::runtime::windows::count::{
    check_size, check_slide, CountWindowAggregate, SlidingCountWindowAggregate,
};
use crate::runtime::windows::operator::{ReduceAggregate, WindowAggregate};
use crate::runtime::windows::process::{run_process_window, ElementsAggregate};
use crate::runtime::windows::sessions::SessionWindowAggregate;
use crate::runtime::windows::triggered::TriggeredWindowAggregate;
#[allow(unused_imports)] // named by the documentation
use crate::runtime::windows::EventTimeTrigger;
pub use crate::runtime::windows::ProcessWindowFunction;
use crate::runtime::windows::{
    NeverTrigger, ProcessingTimeTrigger, TimeWindow, Trigger, WindowAssigner,
};
use crate::state::keyed::{AccEvolution, AggregateFunction, TimeDomain};
use crate::state::{Data, Key, StateValue};

/// A keyed stream with a window assigner ([`KeyedStream::window`]) and a trigger
/// ([`WindowedStream::trigger`]; by default the assigner's own, [`DefaultTrigger`]).
pub struct WindowedStream<K, T, F, A, TR = DefaultTrigger> {
    keyed: KeyedStream<K, T, F>,
    assigner: A,
    trigger: TR,
    /// Flink's `allowedLateness`, in milliseconds.
    lateness_ms: u64,
    /// The window operator's parallelism: 1 for [`DataStream::window_all`].
    parallelism: Option<u32>,
    /// The accumulators' declared version and migration function.
    evolution: AccEvolution,
}

impl<K, T, F, A> WindowedStream<K, T, F, A>
where
    K: Key,
    T: Data,
    F: Fn(&T) -> K + Clone + Send + Sync + 'static,
    A: WindowAssigner<T>,
{
    /// `keyed` cut into windows by `assigner`, with its default trigger and no allowed
    /// lateness.
    pub(crate) fn new(keyed: KeyedStream<K, T, F>, assigner: A) -> Self {
        WindowedStream {
            keyed,
            assigner,
            trigger: DefaultTrigger,
            lateness_ms: 0,
            parallelism: None,
            evolution: AccEvolution::default(),
        }
    }
}

impl<K, T, F, A, TR> WindowedStream<K, T, F, A, TR>
where
    K: Key,
    T: Data,
    F: Fn(&T) -> K + Clone + Send + Sync + 'static,
    A: WindowAssigner<T>,
    TR: TriggerChoice<T>,
{
    /// Replaces the assigner's default trigger (Flink's `trigger`): `trigger` decides when
    /// each window fires and purges, e.g. [`CountTrigger`](crate::api::time::CountTrigger)
    /// for early results every n records, a continuous trigger for periodic ones, or any
    /// trigger on [`GlobalWindows`](crate::api::time::GlobalWindows), which otherwise never
    /// fire. Windows are still cleaned up at their end (plus the allowed lateness in event
    /// time). A trigger on session windows must merge ([`Trigger::can_merge`]); the job
    /// fails at start with an error saying so otherwise.
    pub fn trigger<TR2: Trigger<T>>(
        self,
        trigger: TR2,
    ) -> WindowedStream<K, T, F, A, WithTrigger<TR2>> {
        WindowedStream {
            keyed: self.keyed,
            assigner: self.assigner,
            trigger: WithTrigger(trigger),
            lateness_ms: self.lateness_ms,
            parallelism: self.parallelism,
            evolution: self.evolution,
        }
    }

    /// Declares the version of the window's accumulator state, recorded with its schema in
    /// every checkpoint (as `states.with_version(v)` does for keyed state): the engine
    /// declares that state, so the version is set here.
    pub fn with_version(mut self, version: u32) -> Self {
        self.evolution = self.evolution.with_version(version);
        self
    }

    /// Gives the window's accumulator state a migration function from `Old`, the
    /// accumulator type the restored checkpoint recorded (as `states.with_migration` does
    /// for keyed state): a restore whose recorded accumulator shape is `Old`'s reads each
    /// open window's accumulator as `Old` and keeps `migrate(old)`. For changes serde
    /// cannot read (a field whose type changed, values recomputed); a field added with a
    /// default, removed, or renamed with an alias migrates without one. `ACC` must be the
    /// aggregate's accumulator (the job fails at start saying so otherwise). Every kind of
    /// window takes it: fixed-size windows, sessions (each open session keeps its start and
    /// `migrate(old)`), and windows under a trigger of their own (their contents migrate;
    /// the trigger's own state is the trigger's type, not the accumulator).
    pub fn with_migration<Old: StateValue, ACC: StateValue>(
        mut self,
        migrate: impl Fn(Old) -> ACC + Send + Sync + 'static,
    ) -> Self {
        self.evolution = self.evolution.with_migration(migrate);
        self
    }

    /// Keeps every window `lateness` after the watermark passed its end (Flink's
    /// `allowedLateness`, default 0): a record arriving in that time is added and the window
    /// fires again with the updated result (a late firing, so downstream sees one result per
    /// firing and must treat later ones as updates). The window's state is removed when the
    /// watermark passes its end plus `lateness`; records later than that are late data.
    /// Processing-time and global windows have no late records, and ignore it (as in Flink).
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.lateness_ms = u64::try_from(lateness.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Keeps the late records — those whose windows were all cleaned up already — instead
    /// of dropping them (Flink's `sideOutputLateData`): the aggregation then returns
    /// [`WindowOutputs`], the window results and the late records as two streams.
    pub fn side_output_late_data(self) -> LateDataWindowedStream<K, T, F, A, TR> {
        LateDataWindowedStream { windowed: self }
    }

    /// Folds each window's records with `f` and emits the result when the window closes
    /// (Flink's `reduce`): one value per key and window, timestamped with the window's last
    /// millisecond.
    pub fn reduce<R>(self, f: R) -> DataStream<T>
    where
        T: StateValue,
        R: Fn(T, T) -> T + Clone + Send + Sync + 'static,
    {
        self.reduce_with_window(f, |_, _, v| v)
    }

    /// [`WindowedStream::reduce`], emitting `window_fn(key, window, result)` (Flink's
    /// `reduce(ReduceFunction, ProcessWindowFunction)` for one value).
    pub fn reduce_with_window<R, O, W>(self, f: R, window_fn: W) -> DataStream<O>
    where
        T: StateValue,
        O: Data,
        R: Fn(T, T) -> T + Clone + Send + Sync + 'static,
        W: Fn(&K, TimeWindow, T) -> O + Send + Sync + 'static,
    {
        self.aggregate_with_window(ReduceAggregate(f), window_fn)
    }

    /// Aggregates each window with `aggregate` (one accumulator per key and window, Flink's
    /// `aggregate`) and emits its result when the window closes.
    pub fn aggregate<ACC, OUT, AGG>(self, aggregate: AGG) -> DataStream<OUT>
    where
        ACC: StateValue,
        OUT: Data,
        AGG: AggregateFunction<T, ACC, OUT> + 'static,
    {
        self.aggregate_with_window(aggregate, |_, _, v| v)
    }

    /// [`WindowedStream::aggregate`], emitting `window_fn(key, window, result)`.
    pub fn aggregate_with_window<ACC, OUT, O, AGG, W>(
        self,
        aggregate: AGG,
        window_fn: W,
    ) -> DataStream<O>
    where
        ACC: StateValue,
        OUT: 'static,
        O: Data,
        AGG: AggregateFunction<T, ACC, OUT> + 'static,
        W: Fn(&K, TimeWindow, OUT) -> O + Send + Sync + 'static,
    {
        let window = self.trigger.window_operator(Parts {
            keyed: self.keyed,
            assigner: self.assigner,
            aggregate,
            window_fn,
            lateness_ms: self.lateness_ms,
            late: None,
            evolution: self.evolution,
            _acc: PhantomData,
        });
        with_parallelism(window, self.parallelism)
    }

    /// Keeps every record of each window and, when it fires, hands them all to `f` with the
    /// window's bounds (Flink's `process(ProcessWindowFunction)`); `f` emits any number of
    /// results, timestamped like a window's result.
    pub fn process<O, P>(self, f: P) -> DataStream<O>
    where
        T: StateValue,
        O: Data,
        P: ProcessWindowFunction<K, T, O>,
    {
        let f = Arc::new(f);
        self.aggregate_with_window(ElementsAggregate, move |k, w, elements| {
            run_process_window(&*f, k, w, elements)
        })
        .flat_map(|results| results)
        .name("window-process")
    }
}

/// The trigger a windowed stream runs under until [`WindowedStream::trigger`] sets one: the
/// assigner's own (Flink's `getDefaultTrigger`) — [`EventTimeTrigger`] for event-time
/// assigners, [`ProcessingTimeTrigger`] for processing-time ones, [`NeverTrigger`] for
/// [`GlobalWindows`](crate::api::time::GlobalWindows). A type of its own, not a trigger
/// value, so that the default event-time windows are chosen when the job is built and run
/// their built-in trigger with no per-record trigger call or trigger state.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultTrigger;

/// A trigger set by [`WindowedStream::trigger`], in a windowed stream's type (beside
/// [`DefaultTrigger`], which is no trigger value).
#[derive(Debug, Clone, Copy)]
pub struct WithTrigger<TR>(pub TR);

/// What may stand in a windowed stream's trigger place: [`DefaultTrigger`] or a
/// [`WithTrigger`]. It builds the window operator that runs the trigger; jobs do not call
/// it.
pub trait TriggerChoice<T>: Send + 'static {
    /// The window operator of `parts` under this trigger choice.
    fn window_operator<P: WindowParts<T>>(self, parts: P) -> DataStream<P::Out>;
}

impl<T> TriggerChoice<T> for DefaultTrigger {
    fn window_operator<P: WindowParts<T>>(self, parts: P) -> DataStream<P::Out> {
        parts.under_default_trigger()
    }
}

impl<T, TR: Trigger<T>> TriggerChoice<T> for WithTrigger<TR> {
    fn window_operator<P: WindowParts<T>>(self, parts: P) -> DataStream<P::Out> {
        parts.under_trigger(self.0)
    }
}

/// Everything a window operator is built from but its trigger: what a [`TriggerChoice`]
/// completes. A trait so that the operator's many type parameters and their bounds are
/// written once, on the one type that implements it; jobs do not implement or call it.
pub trait WindowParts<T> {
    /// What the window operator emits.
    type Out: Data;
    /// The operator under the assigner's own trigger ([`DefaultTrigger`]).
    fn under_default_trigger(self) -> DataStream<Self::Out>;
    /// The operator under `trigger`.
    fn under_trigger<TR: Trigger<T>>(self, trigger: TR) -> DataStream<Self::Out>;
}

/// The parts of a window operator: the keyed input, the assigner, the aggregate, the
/// function that makes each result, the allowed lateness and where late records go.
struct Parts<K, T, F, A, ACC, OUT, AGG, W, R> {
    keyed: KeyedStream<K, T, F>,
    assigner: A,
    aggregate: AGG,
    window_fn: W,
    lateness_ms: u64,
    late: Option<fn(T) -> R>,
    /// The accumulators' declared version and migration function.
    evolution: AccEvolution,
    /// The aggregate's accumulator and result types.
    _acc: PhantomData<fn() -> (ACC, OUT)>,
}

impl<K, T, F, A, ACC, OUT, AGG, W, R> WindowParts<T> for Parts<K, T, F, A, ACC, OUT, AGG, W, R>
where
    K: Key,
    T: Data,
    F: Fn(&T) -> K + Clone + Send + Sync + 'static,
    A: WindowAssigner<T>,
    ACC: StateValue,
    OUT: 'static,
    R: Data,
    AGG: AggregateFunction<T, ACC, OUT> + 'static,
    W: Fn(&K, TimeWindow, OUT) -> R + Send + Sync + 'static,
{
    type Out = R;

    /// [`NeverTrigger`] for global windows, [`ProcessingTimeTrigger`] for processing-time
    /// ones; event-time windows run their built-in trigger: one accumulator per window for
    /// windows of a fixed size, merged sessions otherwise.
    fn under_default_trigger(self) -> DataStream<R> {
        if self.assigner.is_global() {
            return self.under_trigger(NeverTrigger);
        }
        if self.assigner.time_domain() == TimeDomain::ProcessingTime {
            return self.under_trigger(ProcessingTimeTrigger);
        }
        let Parts {
            keyed,
            assigner,
            aggregate,
            window_fn,
            lateness_ms,
            late,
            evolution,
            _acc,
        } = self;
        let stream = if assigner.size_ms().is_some() {
            let mut f = WindowAggregate::new(assigner, aggregate, window_fn)
                .with_lateness(lateness_ms)
                .with_evolution(evolution);
            if let Some(late) = late {
                f = f.with_late_output(late);
            }
            keyed.process(f)
        } else {
            let (aggregate, window_fn) = (Arc::new(aggregate), Arc::new(window_fn));
            let f = SessionWindowAggregate::new(assigner, aggregate, window_fn, lateness_ms, late)
                .with_evolution(evolution);
            keyed.process(f)
        };
        stream.name("window")
    }

    fn under_trigger<TR: Trigger<T>>(self, trigger: TR) -> DataStream<R> {
        let (aggregate, window_fn) = (Arc::new(self.aggregate), Arc::new(self.window_fn));
        let f = TriggeredWindowAggregate::new(
            self.assigner,
            trigger,
            aggregate,
            window_fn,
            self.lateness_ms,
            self.late,
        )
        .with_evolution(self.evolution);
        self.keyed.process(f).name("window")
    }
}

fn with_parallelism<R: Data>(window: DataStream<R>, parallelism: Option<u32>) -> DataStream<R> {
    match parallelism {
        Some(p) => window.set_parallelism(p),
        None => window,
    }
}

impl<K, T, F> KeyedStream<K, T, F>
where
    K: Key,
    T: Data,
    F: Fn(&T) -> K + Clone + Send + Sync + 'static,
{
    /// Cuts each key's records into windows of `size` records in arrival order (Flink's
    /// `countWindow(size)`: global windows with a purging count trigger); a size of 0 is an
    /// error. A window fires when its last record arrives; one still short at the end of
    /// input never fires.
    pub fn count_window(self, size: u64) -> Result<CountWindowedStream<K, T, F>> {
        Ok(CountWindowedStream {
            keyed: self,
            size: check_size(size)?,
            evolution: AccEvolution::default(),
        })
    }

    /// Cuts each key's records into sliding count windows (Flink's `countWindow(size,
    /// slide)`: global windows with a count evictor and a count trigger): every `slide`
    /// records of a key, the window of its last `size` records fires (fewer records while
    /// the key has had fewer). A size or a slide of 0, or a slide larger than the size, is
    /// an error. The window keeps its records, not an accumulator, so its functions need
    /// records that can be checkpointed.
    pub fn count_window_sliding(
        self,
        size: u64,
        slide: u64,
    ) -> Result<SlidingCountWindowedStream<K, T, F>> {
        let size = check_size(size)?;
        Ok(SlidingCountWindowedStream {
            keyed: self,
            size,
            slide: check_slide(size, slide)?,
            evolution: AccEvolution::default(),
        })
    }
}

/// A keyed stream cut into count windows ([`KeyedStream::count_window`]).
pub struct CountWindowedStream<K, T, F> {
    keyed: KeyedStream<K, T, F>,
    size: u64,
    /// The accumulators' declared version and migration function.
    evolution: AccEvolution,
}

impl<K, T, F> CountWindowedStream<K, T, F>
where
    K: Key,
    T: Data,
    F: Fn(&T) -> K + Clone + Send + Sync + 'static,
{
    /// Declares the version of the count windows' state (each key's open window: its
    /// records so far and its accumulator), recorded with its schema in every checkpoint,
    /// as [`WindowedStream::with_version`] does for time windows.
    pub fn with_version(mut self, version: u32) -> Self {
        self.evolution = self.evolution.with_version(version);
        self
    }

    /// Gives the open count windows' accumulators a migration function from `Old`, the
    /// accumulator type the restored checkpoint recorded, as
    /// [`WindowedStream::with_migration`] does for time windows: each open window keeps its
    /// count of records and `migrate(old)`. `ACC` must be the aggregate's accumulator (the
    /// job fails at start saying so otherwise).
    pub fn with_migration<Old: StateValue, ACC: StateValue>(
        mut self,
        migrate: impl Fn(Old) -> ACC + Send + Sync + 'static,
    ) -> Self {
        self.evolution = self.evolution.with_migration(migrate);
        self
    }

    /// Folds each window's records with `f` and emits the result when the window is full.
    pub fn reduce<R>(self, f: R) -> DataStream<T>
    where
        T: StateValue,
        R: Fn(T, T) -> T + Clone + Send + Sync + 'static,
    {
        self.aggregate(ReduceAggregate(f))
    }

    /// Aggregates each window with `aggregate` and emits its result when the window is
    /// full; the accumulator lives in keyed state until then.
    pub fn aggregate<ACC, OUT, AGG>(self, aggregate: AGG) -> DataStream<OUT>
    where
        ACC: StateValue,
        OUT: Data,
        AGG: AggregateFunction<T, ACC, OUT> + 'static,
    {
        let f = CountWindowAggregate::new(self.size, aggregate).with_evolution(self.evolution);
        self.keyed.process(f).name("count-window")
    }
}

/// A keyed stream cut into sliding count windows ([`KeyedStream::count_window_sliding`]).
pub struct SlidingCountWindowedStream<K, T, F> {
    keyed: KeyedStream<K, T, F>,
    size: u64,
    slide: u64,
    /// The kept records' declared version and migration function.
    evolution: AccEvolution,
}

impl<K, T, F> SlidingCountWindowedStream<K, T, F>
where
    K: Key,
    T: StateValue,
    F: Fn(&T) -> K + Clone + Send + Sync + 'static,
{
    /// Declares the version of the sliding count windows' state (each key's last records),
    /// recorded with its schema in every checkpoint.
    pub fn with_version(mut self, version: u32) -> Self {
        self.evolution = self.evolution.with_version(version);
        self
    }

    /// Gives the records the windows keep a migration function from `Old`, the record type
    /// the restored checkpoint recorded (a sliding count window keeps records, not an
    /// accumulator): each kept record is read as `Old` and kept as `migrate(old)`. For
    /// changes serde cannot read; a field added with a default, removed, or renamed with an
    /// alias migrates without one.
    pub fn with_migration<Old: StateValue>(
        mut self,
        migrate: impl Fn(Old) -> T + Send + Sync + 'static,
    ) -> Self {
        self.evolution = self.evolution.with_migration(migrate);
        self
    }

    /// Folds each window's records with `f` and emits the result when the window fires.
    pub fn reduce<R>(self, f: R) -> DataStream<T>
    where
        R: Fn(T, T) -> T + Clone + Send + Sync + 'static,
    {
        self.aggregate(ReduceAggregate(f))
    }

    /// Aggregates each window's records with `aggregate` when the window fires.
    pub fn aggregate<ACC, OUT, AGG>(self, aggregate: AGG) -> DataStream<OUT>
    where
        ACC: 'static,
        OUT: Data,
        AGG: AggregateFunction<T, ACC, OUT> + 'static,
    {
        let f = SlidingCountWindowAggregate::new(self.size, self.slide, aggregate)
            .with_evolution(self.evolution);
        self.keyed.process(f).name("sliding-count-window")
    }
}

impl<T: Data> DataStream<T> {
    /// Cuts the whole stream, not keyed, into windows by `assigner` (Flink's `windowAll`):
    /// one window operator at parallelism 1 sees every record. The returned stream has the
    /// functions of a keyed one, with the key `()`; an assigner of merging windows makes
    /// sessions of the whole stream.
    pub fn window_all<A: WindowAssigner<T>>(
        self,
        assigner: A,
    ) -> WindowedStream<(), T, fn(&T) -> (), A> {
        let no_key: fn(&T) -> () = |_| ();
        let mut windowed = WindowedStream::new(self.key_by(no_key), assigner);
        windowed.parallelism = Some(1);
        windowed
    }
}

/// What a window operator with a late-data side output emits: a window's result or a late
/// record. Both travel on the operator's one output; two following operators split them.
#[derive(Clone)]
enum WindowRecord<O, T> {
    Result(O),
    Late(T),
}

/// A [`WindowedStream`] whose late records are kept
/// ([`WindowedStream::side_output_late_data`]): its aggregations return [`WindowOutputs`].
pub struct LateDataWindowedStream<K, T, F, A, TR = DefaultTrigger> {
    windowed: WindowedStream<K, T, F, A, TR>,
}

impl<K, T, F, A, TR> LateDataWindowedStream<K, T, F, A, TR>
where
    K: Key,
    T: Data,
    F: Fn(&T) -> K + Clone + Send + Sync + 'static,
    A: WindowAssigner<T>,
    TR: TriggerChoice<T>,
{
    /// [`WindowedStream::allowed_lateness`]: only records later than the window's end plus
    /// `lateness` are late data.
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.windowed = self.windowed.allowed_lateness(lateness);
        self
    }

    /// [`WindowedStream::reduce`], with the late records beside the results.
    pub fn reduce<R>(self, f: R) -> WindowOutputs<T, T>
    where
        T: StateValue,
        R: Fn(T, T) -> T + Clone + Send + Sync + 'static,
    {
        self.reduce_with_window(f, |_, _, v| v)
    }

    /// [`WindowedStream::reduce_with_window`], with the late records beside the results.
    pub fn reduce_with_window<R, O, W>(self, f: R, window_fn: W) -> WindowOutputs<O, T>
    where
        T: StateValue,
        O: Data,
        R: Fn(T, T) -> T + Clone + Send + Sync + 'static,
        W: Fn(&K, TimeWindow, T) -> O + Send + Sync + 'static,
    {
        self.aggregate_with_window(ReduceAggregate(f), window_fn)
    }

    /// [`WindowedStream::aggregate`], with the late records beside the results.
    pub fn aggregate<ACC, OUT, AGG>(self, aggregate: AGG) -> WindowOutputs<OUT, T>
    where
        ACC: StateValue,
        OUT: Data,
        AGG: AggregateFunction<T, ACC, OUT> + 'static,
    {
        self.aggregate_with_window(aggregate, |_, _, v| v)
    }

    /// [`WindowedStream::aggregate_with_window`], with the late records beside the results.
    pub fn aggregate_with_window<ACC, OUT, O, AGG, W>(
        self,
        aggregate: AGG,
        window_fn: W,
    ) -> WindowOutputs<O, T>
    where
        ACC: StateValue,
        OUT: 'static,
        O: Data,
        AGG: AggregateFunction<T, ACC, OUT> + 'static,
        W: Fn(&K, TimeWindow, OUT) -> O + Send + Sync + 'static,
    {
        self.build(aggregate, window_fn, |r| r)
    }

    /// [`WindowedStream::process`], with the late records beside the results.
    pub fn process<O, P>(self, f: P) -> WindowOutputs<O, T>
    where
        T: StateValue,
        O: Data,
        P: ProcessWindowFunction<K, T, O>,
    {
        let f = Arc::new(f);
        let window_fn = move |k: &K, w, elements| run_process_window(&*f, k, w, elements);
        self.build(ElementsAggregate, window_fn, |r| {
            r.flat_map(|results| results).name("window-process")
        })
    }

    /// The window operator, its results passed through `then`, and its late data.
    fn build<ACC, OUT, X, O, AGG, W>(
        self,
        aggregate: AGG,
        window_fn: W,
        then: impl FnOnce(DataStream<X>) -> DataStream<O>,
    ) -> WindowOutputs<O, T>
    where
        ACC: StateValue,
        OUT: 'static,
        X: Data,
        O: Data,
        AGG: AggregateFunction<T, ACC, OUT> + 'static,
        W: Fn(&K, TimeWindow, OUT) -> X + Send + Sync + 'static,
    {
        let WindowedStream {
            keyed,
            assigner,
            trigger,
            lateness_ms,
            parallelism,
            evolution,
        } = self.windowed;
        let tagged = move |k: &K, w: TimeWindow, r: OUT| WindowRecord::Result(window_fn(k, w, r));
        let late: fn(T) -> WindowRecord<X, T> = WindowRecord::Late;
        let window = trigger.window_operator(Parts {
            keyed,
            assigner,
            aggregate,
            window_fn: tagged,
            lateness_ms,
            late: Some(late),
            evolution,
            _acc: PhantomData,
        });
        let window = with_parallelism(window, parallelism);
        let results = then(
            window
                .fork()
                .flat_map(|r| match r {
                    WindowRecord::Result(o) => Some(o),
                    WindowRecord::Late(_) => None,
                })
                .name("window-results"),
        );
        let late_data = window
            .fork()
            .flat_map(|r| match r {
                WindowRecord::Result(_) => None,
                WindowRecord::Late(t) => Some(t),
            })
            .name("window-late-data");
        WindowOutputs {
            set_uid: Rc::new(move |uid| {
                window.fork().uid(uid);
            }),
            results,
            late_data,
        }
    }
}

/// The two outputs of a window operator with a late-data side output (Flink's main output
/// and `getSideOutput(lateTag)`).
pub struct WindowOutputs<O, T> {
    /// Sets the uid of the window operator itself, for [`WindowOutputs::uid`].
    set_uid: Rc<dyn Fn(&str)>,
    /// The windows' results, as [`WindowedStream::aggregate_with_window`] would give them.
    pub results: DataStream<O>,
    /// The records too late for every window they belong to, with their timestamps.
    pub late_data: DataStream<T>,
}

impl<O: Data, T: Data> WindowOutputs<O, T> {
    /// Sets the window operator's stable id, the key of its state in checkpoints (the
    /// `uid` of [`WindowOutputs::results`] names only the operator that splits off the
    /// results, which has no state).
    pub fn uid(self, uid: &str) -> Self {
        (self.set_uid)(uid);
        self
    }
}
