//! Joins of two streams: the interval join (Flink's
//! `a.keyBy(..).intervalJoin(b.keyBy(..)).between(lower, upper).process(f)`) and the window
//! join (`a.join(b).where(..).equalTo(..).window(..).apply(f)`, here `where_key`, since
//! `where` is a Rust keyword).
//!
//! ```
//! use std::time::Duration;
//! use weir::prelude::*;
//! # fn main() -> weir::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let mut config = JobConfig::new("join-doc");
//! # config.checkpoint_dir = dir.path().to_path_buf();
//! let env = StreamEnvironment::new(config);
//! let out = CollectSink::new();
//! let at = |t: u64| {
//!     WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
//!         .with_timestamp_assigner(move |i: &u64, _| i * t)
//! };
//! // Orders at 0, 10, 20, 30; payments at 0, 15, 30, 45.
//! let orders = env.add_source_with_watermarks("orders", GeneratorSource::new(4), at(10));
//! let payments = env.add_source_with_watermarks("payments", GeneratorSource::new(4), at(15));
//! orders
//!     .set_parallelism(1)
//!     .key_by(|_| 0u8)
//!     .interval_join(payments.set_parallelism(1).key_by(|_| 0u8))
//!     .between(0, 5)?
//!     .process(|o: &u64, p: &u64| (o * 10, p * 15))
//!     .add_sink("out", out.clone());
//! env.execute()?;
//! let mut got = out.take();
//! got.sort();
//! assert_eq!(got, vec![(0, 0), (10, 15), (30, 30)]);
//! # Ok(()) }
//! ```

use crate::api::stream::DataStream;
use crate::error::Result;
use crate::runtime::interval_join::{IntervalJoinFunction, JoinBounds, ProcessJoinFunction};
use crate::runtime::window_join::WindowJoinFunction;
use crate::runtime::windows::WindowAssigner;
use crate::state::{Data, Key, StateValue};

/// Two keyed streams about to be interval-joined ([`KeyedStream::interval_join`]); say
/// the interval with [`IntervalJoin::between`].
///
/// [`KeyedStream::interval_join`]: crate::api::stream::KeyedStream::interval_join
pub struct IntervalJoin<K, T1, T2, F1, F2> {
    first: (DataStream<T1>, F1),
    second: (DataStream<T2>, F2),
    _k: std::marker::PhantomData<fn() -> K>,
}

impl<K, T1, T2, F1, F2> IntervalJoin<K, T1, T2, F1, F2> {
    /// The join of `first` keyed by its key function and `second` keyed by its own.
    pub(crate) fn new(first: (DataStream<T1>, F1), second: (DataStream<T2>, F2)) -> Self {
        IntervalJoin {
            first,
            second,
            _k: std::marker::PhantomData,
        }
    }

    /// Joins `a` of the first stream with `b` of the second when
    /// `a.ts + lower_ms <= b.ts <= a.ts + upper_ms` (both may be negative). An error if
    /// `lower_ms > upper_ms`.
    pub fn between(
        self,
        lower_ms: i64,
        upper_ms: i64,
    ) -> Result<IntervalJoined<K, T1, T2, F1, F2>> {
        Ok(IntervalJoined {
            join: self,
            bounds: JoinBounds::new(lower_ms, upper_ms)?,
        })
    }
}

/// An interval join with its bounds: choose their exclusivity, then build the results
/// with [`IntervalJoined::process`].
pub struct IntervalJoined<K, T1, T2, F1, F2> {
    join: IntervalJoin<K, T1, T2, F1, F2>,
    bounds: JoinBounds,
}

impl<K, T1, T2, F1, F2> IntervalJoined<K, T1, T2, F1, F2>
where
    K: Key,
    T1: StateValue,
    T2: StateValue,
    F1: Fn(&T1) -> K + Clone + Send + Sync + 'static,
    F2: Fn(&T2) -> K + Clone + Send + Sync + 'static,
{
    /// Excludes the lower bound: `a.ts + lower < b.ts`.
    pub fn lower_bound_exclusive(mut self) -> Self {
        self.bounds = self.bounds.lower_exclusive();
        self
    }

    /// Excludes the upper bound: `b.ts < a.ts + upper`.
    pub fn upper_bound_exclusive(mut self) -> Self {
        self.bounds = self.bounds.upper_exclusive();
        self
    }

    /// Builds the result of every joined pair with `f` (a
    /// [`ProcessJoinFunction`], or any
    /// `Fn(&T1, &T2) -> O`). Both inputs need event timestamps and watermarks.
    pub fn process<O: Data, P: ProcessJoinFunction<T1, T2, O>>(self, f: P) -> DataStream<O> {
        let IntervalJoin { first, second, .. } = self.join;
        first
            .0
            .connect(second.0)
            .key_by(first.1, second.1)
            .process(IntervalJoinFunction::new(self.bounds, f))
            .name("interval_join")
    }
}

/// Two streams about to be window-joined ([`DataStream::join`]): name the first one's key
/// with [`JoinedStreams::where_key`].
pub struct JoinedStreams<T1, T2> {
    first: DataStream<T1>,
    second: DataStream<T2>,
}

impl<T1: Data, T2: Data> JoinedStreams<T1, T2> {
    /// The streams `first` and `second`, to be joined.
    pub(crate) fn new(first: DataStream<T1>, second: DataStream<T2>) -> Self {
        JoinedStreams { first, second }
    }

    /// The first stream's key (Flink's `where`).
    pub fn where_key<K: Key, F1>(self, key1: F1) -> JoinWhere<K, T1, T2, F1>
    where
        F1: Fn(&T1) -> K + Clone + Send + Sync + 'static,
    {
        JoinWhere {
            streams: self,
            key1,
            _k: std::marker::PhantomData,
        }
    }
}

/// A window join with the first stream's key: name the second one's with
/// [`JoinWhere::equal_to`].
pub struct JoinWhere<K, T1, T2, F1> {
    streams: JoinedStreams<T1, T2>,
    key1: F1,
    _k: std::marker::PhantomData<fn() -> K>,
}

impl<K: Key, T1: Data, T2: Data, F1> JoinWhere<K, T1, T2, F1> {
    /// The second stream's key (Flink's `equalTo`): records with equal keys are joined.
    pub fn equal_to<F2>(self, key2: F2) -> JoinEqual<K, T1, T2, F1, F2>
    where
        F2: Fn(&T2) -> K + Clone + Send + Sync + 'static,
    {
        JoinEqual { join: self, key2 }
    }
}

/// A window join with both keys: choose the windows with [`JoinEqual::window`].
pub struct JoinEqual<K, T1, T2, F1, F2> {
    join: JoinWhere<K, T1, T2, F1>,
    key2: F2,
}

impl<K, T1, T2, F1, F2> JoinEqual<K, T1, T2, F1, F2> {
    /// Joins the records of each window of `assigner` (tumbling or sliding, in event time).
    pub fn window<A: WindowAssigner<()>>(self, assigner: A) -> WindowedJoin<K, T1, T2, F1, F2, A> {
        WindowedJoin {
            join: self,
            assigner,
        }
    }
}

/// A window join ready to build its results with [`WindowedJoin::apply`].
pub struct WindowedJoin<K, T1, T2, F1, F2, A> {
    join: JoinEqual<K, T1, T2, F1, F2>,
    assigner: A,
}

impl<K, T1, T2, F1, F2, A> WindowedJoin<K, T1, T2, F1, F2, A>
where
    K: Key,
    T1: StateValue,
    T2: StateValue,
    F1: Fn(&T1) -> K + Clone + Send + Sync + 'static,
    F2: Fn(&T2) -> K + Clone + Send + Sync + 'static,
    A: WindowAssigner<()>,
{
    /// Builds one result per pair of records with equal keys in the same window, when the
    /// window fires (Flink's `JoinFunction`); the result is timestamped with the window's
    /// last millisecond. Both inputs need event timestamps and watermarks.
    pub fn apply<O: Data, J>(self, f: J) -> DataStream<O>
    where
        J: Fn(&T1, &T2) -> O + Clone + Send + 'static,
    {
        let JoinEqual { join, key2 } = self.join;
        let JoinWhere { streams, key1, .. } = join;
        streams
            .first
            .connect(streams.second)
            .key_by(key1, key2)
            .process(WindowJoinFunction::new(self.assigner, f))
            .name("window_join")
    }
}
