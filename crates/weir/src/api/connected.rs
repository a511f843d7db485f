//! Two streams of different types processed together: [`ConnectedStreams`] (Flink's
//! `connect`), keyed alike with [`ConnectedStreams::key_by`].
//!
//! ```
//! use weir::prelude::*;
//! # fn main() -> weir::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let mut config = JobConfig::new("connect-doc");
//! # config.checkpoint_dir = dir.path().to_path_buf();
//! /// Emits every number of the first input and the negation of every one of the second.
//! #[derive(Clone)]
//! struct Signs;
//! impl CheckpointedFunction for Signs {}
//! impl CoProcessFunction<u64, String, i64> for Signs {
//!     fn process_element1(&mut self, r: u64, out: &mut Collector<'_, i64>) -> Result<()> {
//!         out.collect(r as i64);
//!         Ok(())
//!     }
//!     fn process_element2(&mut self, r: String, out: &mut Collector<'_, i64>) -> Result<()> {
//!         out.collect(-(r.len() as i64));
//!         Ok(())
//!     }
//! }
//! let env = StreamEnvironment::new(config);
//! let out = CollectSink::new();
//! let words = env.add_source("n", GeneratorSource::new(3)).map(|i| "x".repeat(i as usize + 1));
//! env.add_source("m", GeneratorSource::new(3))
//!     .connect(words)
//!     .process(Signs)
//!     .add_sink("out", out.clone());
//! env.execute()?;
//! let mut got = out.take();
//! got.sort();
//! assert_eq!(got, vec![-3, -2, -1, 0, 1, 2]);
//! # Ok(()) }
//! ```

use std::marker::PhantomData;

use crate::api::stream::DataStream;
use crate::runtime::co_process::{CoAdapter, CoInput, CoProcessFunction, KeyedCoProcessFunction};
use crate::state::{Data, Key};

/// Two streams connected for a two-input function ([`DataStream::connect`]). Each keeps
/// its own partitioning until [`ConnectedStreams::key_by`] partitions both by key.
pub struct ConnectedStreams<T1, T2> {
    first: DataStream<T1>,
    second: DataStream<T2>,
}

impl<T1: Data, T2: Data> ConnectedStreams<T1, T2> {
    /// The streams `first` and `second`, connected.
    pub(crate) fn new(first: DataStream<T1>, second: DataStream<T2>) -> Self {
        ConnectedStreams { first, second }
    }

    /// Tags each input's records with their input and unions them: one multi-input stream
    /// whose channels are aligned and whose watermark is the minimum of both inputs.
    fn tagged(self) -> DataStream<CoInput<T1, T2>> {
        let first = self.first.map(CoInput::<T1, T2>::First).name("connect-1");
        let second = self.second.map(CoInput::<T1, T2>::Second).name("connect-2");
        first.union(second)
    }

    /// Applies `f` to both inputs (see [`CoProcessFunction`]).
    pub fn process<O: Data, F: CoProcessFunction<T1, T2, O>>(self, f: F) -> DataStream<O> {
        self.tagged()
            .process(CoAdapter::<F, T1, T2>::new(f))
            .name("co_process")
    }

    /// Partitions both inputs by key, `key1` for the first and `key2` for the second:
    /// records with equal keys, of either input, meet in the same subtask and keyed state.
    pub fn key_by<K, F1, F2>(self, key1: F1, key2: F2) -> KeyedConnectedStreams<K, T1, T2>
    where
        K: Key,
        F1: Fn(&T1) -> K + Clone + Send + Sync + 'static,
        F2: Fn(&T2) -> K + Clone + Send + Sync + 'static,
    {
        let key: KeyOf<K, T1, T2> = std::sync::Arc::new(move |r| match r {
            CoInput::First(a) => key1(a),
            CoInput::Second(b) => key2(b),
        });
        KeyedConnectedStreams {
            tagged: self.tagged(),
            key,
            _k: PhantomData,
        }
    }
}

/// The key of a tagged record, whichever input it came from.
type KeyOf<K, T1, T2> = std::sync::Arc<dyn Fn(&CoInput<T1, T2>) -> K + Send + Sync>;

/// Two connected streams partitioned by key ([`ConnectedStreams::key_by`]).
pub struct KeyedConnectedStreams<K, T1, T2> {
    tagged: DataStream<CoInput<T1, T2>>,
    key: KeyOf<K, T1, T2>,
    _k: PhantomData<fn() -> K>,
}

impl<K: Key, T1: Data, T2: Data> KeyedConnectedStreams<K, T1, T2> {
    /// Applies `f` to both inputs, with keyed state and timers shared by both per key
    /// (see [`KeyedCoProcessFunction`]).
    pub fn process<O: Data, F: KeyedCoProcessFunction<K, T1, T2, O>>(self, f: F) -> DataStream<O> {
        let key = self.key;
        self.tagged
            .key_by(move |r: &CoInput<T1, T2>| key(r))
            .process(CoAdapter::<F, T1, T2>::new(f))
            .name("keyed_co_process")
    }
}
