//! `WindowedStream`: a keyed stream cut into event-time windows (Flink's
//! `keyBy(...).window(...)`), aggregated incrementally with `reduce` or `aggregate` — one
//! accumulator per key and window, in keyed state.
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

use crate::api::stream::{DataStream, KeyedStream};
use crate::runtime::windows::operator::{ReduceAggregate, WindowAggregate};
use crate::runtime::windows::{TimeWindow, WindowAssigner};
use crate::state::keyed::AggregateFunction;
use crate::state::{Data, Key, StateValue};

/// A keyed stream with a window assigner ([`KeyedStream::window`]).
pub struct WindowedStream<K, T, F, A> {
    pub(crate) keyed: KeyedStream<K, T, F>,
    pub(crate) assigner: A,
}

impl<K, T, F, A> WindowedStream<K, T, F, A>
where
    K: Key,
    T: Data,
    F: Fn(&T) -> K + Clone + Send + Sync + 'static,
    A: WindowAssigner,
{
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
        let f = WindowAggregate::<A, AGG, W, ACC, OUT>::new(self.assigner, aggregate, window_fn);
        self.keyed.process(f).name("window")
    }
}
