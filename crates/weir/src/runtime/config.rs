//! Job-wide settings: parallelism, checkpointing, storage, restore and restart.

use std::path::PathBuf;
use std::time::Duration;

use crate::checkpoint::coordinator::CheckpointConfig;
use crate::runtime::coordinator::restart::RestartStrategy;
use crate::runtime::fault::FailureInjection;
use crate::runtime::state_backend::StateBackend;
use crate::state::key_group::DEFAULT_MAX_PARALLELISM;

/// Where a job's state starts from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RestoreFrom {
    /// Start with empty state.
    #[default]
    Nothing,
    /// The newest complete checkpoint of this job in the checkpoint directory that loads
    /// cleanly; start fresh (and say so) if there is none.
    Latest,
    /// A specific checkpoint or savepoint folder.
    Path(PathBuf),
}

/// Settings of one job.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// The job's name; also its folder under `checkpoint_dir`.
    pub name: String,
    /// Default parallelism of operators that do not set their own.
    pub parallelism: u32,
    /// Number of key groups: the upper bound of any keyed operator's parallelism, fixed for
    /// the life of the job's state.
    pub max_parallelism: u32,
    /// Checkpointing settings.
    pub checkpointing: CheckpointConfig,
    /// Where checkpoints go (`<dir>/<name>/chk-<n>`).
    pub checkpoint_dir: PathBuf,
    /// Where state starts from.
    pub restore: RestoreFrom,
    /// What happens after a failure.
    pub restart: RestartStrategy,
    /// Give up (whatever `restart` allows) once the same failure — same message, numbers
    /// aside — has ended this many attempts in a row without the completed checkpoints
    /// getting further into the input in between: such a failure (a record that cannot be decoded, a full disk) fails every
    /// attempt, and restarting it forever hides the cause. Injected failures never count.
    /// `None` restarts as `restart` says. Default 5.
    pub identical_failure_limit: Option<u32>,
    /// Longest time a partly filled batch waits before it is sent.
    pub buffer_timeout: Duration,
    /// Batches in flight per channel (the backpressure bound).
    pub channel_capacity: usize,
    /// Buffer debloating (Flink's FLIP-183, `runtime/debloat.rs`): how long the records in
    /// flight on a backpressured channel should take its consumer. Batches to a consumer
    /// that is behind are cut smaller so that an aligned barrier waits about this long per
    /// channel instead of `channel_capacity` full batches (~0.4 s in front of the disk
    /// backend at 10 M keys); a consumer that keeps up gets full batches. `None`: off,
    /// every batch full-size — the default, as in Flink (`buffer-debloat.enabled: false`):
    /// with it on, the interval join's rescale test found its join buffers less cleaned
    /// up at a mid-run checkpoint (docs/design-notes.md), not understood yet; 10 ms is what
    /// BENCHMARKS.md measured. Unaligned jobs (`checkpointing.unaligned`,
    /// with or without an aligned-checkpoint timeout) never debloat: their barriers
    /// overtake the queues, and under backpressure the smaller batches made their
    /// checkpoints slower (BENCHMARKS.md, stop 41).
    pub buffer_debloat_target: Option<Duration>,
    /// How often watermark generators emit their periodic watermark (Flink's
    /// `pipeline.auto-watermark-interval`); zero turns periodic emission off. Default 200 ms.
    pub auto_watermark_interval: Duration,
    /// Seeded failures for tests and demos.
    pub failure_injection: Option<FailureInjection>,
    /// Restore even if the checkpoint holds state for operators (uids) the job no longer
    /// has; that state is dropped. Off by default, so state is never lost silently.
    pub allow_non_restored_state: bool,
    /// Where savepoints go (Flink's `state.savepoints.dir`). A savepoint asked for with a
    /// folder must name one inside it: a control request can never write elsewhere.
    pub savepoint_dir: PathBuf,
    /// Keep this run's retained checkpoints when the job is stopped or cancelled, so
    /// `--restore latest` can resume it (Flink's `RETAIN_ON_CANCELLATION`). When off, a
    /// job that stops with a savepoint deletes the checkpoints it took.
    pub retain_on_cancel: bool,
    /// Where keyed state lives (`--state-backend`); `None` takes
    /// the environment variable `WEIR_STATE_BACKEND` if set, else
    /// memory. The disk backend holds state larger than memory (feature `disk-state`).
    pub state_backend: Option<StateBackend>,
    /// The local folder under which the disk backend works (`<dir>/<name>/run-<pid>-<n>`,
    /// emptied at every attempt and removed at the end: the durable copy is the
    /// checkpoint). Default `weir-state` in the system's temporary folder (Flink's
    /// `io.tmp.dirs`); put it on a fast local disk with room for the state.
    pub state_dir: PathBuf,
    /// Incremental checkpoints (`--incremental-checkpoints`, Flink's
    /// `execution.checkpointing.incremental`): on the disk backend each checkpoint writes
    /// only the keyed state changed since the last confirmed one, into the job folder's
    /// `shared/`, chained on an earlier full base. Off by default, as in Flink: every
    /// checkpoint is then self-contained (its folder alone restores). The memory backend
    /// always writes full checkpoints; savepoints are always full. `false` takes the
    /// environment variable `WEIR_INCREMENTAL_CHECKPOINTS` if set (`true`/`false`).
    pub incremental_checkpoints: bool,
    /// How much memory the disk backend keeps per keyed subtask and state (its cache, the
    /// LSM's block cache and write buffers): what bounds a job whose state is larger than
    /// memory. Ignored by the memory backend.
    pub disk_state: DiskStateMemory,
}

/// The memory of the disk backend (Flink's RocksDB `block.cache-size` and
/// `writebuffer.size`, and the cache of decoded keys the LSM stands behind): the defaults
/// suit states of millions of keys; lower them to hold a state larger than the memory the
/// process may use (`--state-cache-entries`, `--state-block-cache`, `--state-write-buffer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskStateMemory {
    /// Most keys each keyed state keeps decoded in memory (its write-back cache); up to
    /// twice as many while a checkpoint's asynchronous write-back shares the cache.
    pub cache_entries: usize,
    /// Bytes of the LSM's block cache, shared by a keyed subtask's states.
    pub block_cache_bytes: u64,
    /// Bytes of each state's LSM write buffer (memtable) before it is flushed to a file.
    pub write_buffer_bytes: u64,
    /// The most bytes each keyed subtask's LSM keeps on local disk (`--state-cache-size`):
    /// past it, key groups unchanged since the last confirmed checkpoint are dropped from
    /// the LSM and fetched again from the checkpoint storage when next accessed (issue 25
    /// item 4). Needs incremental checkpoints into object storage; `None`: unbounded.
    pub local_disk_bytes: Option<u64>,
}

impl Default for DiskStateMemory {
    /// 1 M cached keys per state, a 64 MiB block cache, 64 MiB write buffers.
    fn default() -> Self {
        DiskStateMemory {
            cache_entries: 1 << 20,
            block_cache_bytes: 64 << 20,
            write_buffer_bytes: 64 << 20,
            local_disk_bytes: None,
        }
    }
}

impl JobConfig {
    /// Defaults for a job named `name`: parallelism 1, max parallelism 128, exactly-once
    /// checkpoints every second into `./weir-checkpoints`, exponential-delay restarts.
    pub fn new(name: impl Into<String>) -> Self {
        JobConfig {
            name: name.into(),
            parallelism: 1,
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            checkpointing: CheckpointConfig::default(),
            checkpoint_dir: PathBuf::from("weir-checkpoints"),
            restore: RestoreFrom::Nothing,
            restart: RestartStrategy::default(),
            identical_failure_limit: Some(5),
            buffer_timeout: Duration::from_millis(10),
            channel_capacity: 4,
            buffer_debloat_target: None,
            auto_watermark_interval: Duration::from_millis(200),
            failure_injection: None,
            allow_non_restored_state: false,
            savepoint_dir: PathBuf::from("weir-savepoints"),
            retain_on_cancel: true,
            state_backend: None,
            state_dir: std::env::temp_dir().join("weir-state"),
            incremental_checkpoints: false,
            disk_state: DiskStateMemory::default(),
        }
    }
}
