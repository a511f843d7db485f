//! The operational flags every runner-built job has (parallelism, checkpoints, restore,
//! restarts, failure injection, control), their checks and the [`JobConfig`] they make.
//!
//! A value that makes no sense on its own (`--parallelism 0`, `--checkpoint-timeout 0s`)
//! is refused by clap while parsing; a combination that makes no sense (`--parallelism 4
//! --max-parallelism 2`) by [`RunFlags::check`]. Both happen before anything starts (no
//! folder created, no endpoint opened) and exit 2 naming the flag.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::control::ControlArgs;
use super::UsageError;
use crate::api::config::{JobConfig, RestoreFrom, StateBackend};
use crate::prelude::{CheckpointConfig, CheckpointingMode, FailureInjection, RestartStrategy};
use crate::state::key_group::{DEFAULT_MAX_PARALLELISM, MAX_MAX_PARALLELISM};

/// The max parallelism when `--state-cache-size` is given without `--max-parallelism` and
/// no restored state fixes it: the bound drops and fetches whole key groups, and a subtask
/// that touched one key of a group since the last checkpoint keeps it, so at 128 a busy
/// subtask touches every group and nothing can be dropped. 4096 makes a group 1/4096 of the
/// state (the key-group index each checkpoint records grows with it: about 25 bytes per
/// group and chain file).
pub const CACHE_MAX_PARALLELISM: u32 = 4096;

/// Where the job's max parallelism came from ([`RunFlags::resolved_max_parallelism`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MaxParallelism {
    /// `--max-parallelism`.
    Given,
    /// The checkpoint `--restore` starts from.
    Restored,
    /// [`CACHE_MAX_PARALLELISM`], for `--state-cache-size`.
    ForCache,
    /// [`DEFAULT_MAX_PARALLELISM`].
    Default,
}

impl MaxParallelism {
    /// For messages.
    pub fn describe(self) -> &'static str {
        match self {
            MaxParallelism::Given => "--max-parallelism",
            MaxParallelism::Restored => "the restored checkpoint's",
            MaxParallelism::ForCache => "the default with --state-cache-size",
            MaxParallelism::Default => "the default",
        }
    }
}

/// Checkpointing mode, as a flag.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Mode {
    /// Aligned barriers: state counts every record exactly once.
    ExactlyOnce,
    /// Unaligned barriers: after recovery, state counts some records more than once.
    AtLeastOnce,
}

/// Restart strategy, as a flag (Flink's names).
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Restart {
    /// The first failure fails the job.
    None,
    /// Up to --restart-attempts restarts, --restart-delay apart.
    FixedDelay,
    /// Up to --restart-attempts restarts, the delay doubling from --restart-delay to 10 s.
    ExponentialDelay,
    /// Restarts --restart-delay apart, unless more than --max-failures-per-interval failures
    /// happened within --failure-rate-interval.
    FailureRate,
}

/// State backend, as a flag.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Backend {
    /// Keyed state in memory.
    Memory,
    /// Keyed state in an embedded LSM on the local disk.
    Disk,
}

/// The operational flags of a run; see the module docs.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Run options")]
pub struct RunFlags {
    /// Parallel subtasks per operator.
    #[arg(long, default_value_t = 1, value_parser = parse_parallelism)]
    pub parallelism: u32,
    /// Number of key groups: the most subtasks a keyed operator can have, fixed for the
    /// life of the job's state. Default: the restored checkpoint's (with --restore); else
    /// 4096 with --state-cache-size (it drops and fetches whole key groups, so they must be
    /// small), else 128.
    #[arg(long, value_parser = parse_parallelism)]
    pub max_parallelism: Option<u32>,
    /// Folder for checkpoints (the job's checkpoints go in DIR/JOB/chk-N).
    #[arg(long, default_value = "weir-checkpoints", value_parser = parse_location)]
    pub checkpoint_dir: PathBuf,
    /// Time between checkpoints (e.g. 200ms, 1s, 2m), or `off`.
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub checkpoint_interval: Interval,
    /// Checkpointing mode.
    #[arg(long, value_enum, default_value_t = Mode::ExactlyOnce)]
    pub mode: Mode,
    /// Unaligned checkpoints (needs --mode exactly-once): barriers overtake the records
    /// queued under backpressure, which are saved with the checkpoint and replayed on
    /// restore, so checkpoints do not wait for slow queues to drain.
    #[arg(long)]
    pub unaligned: bool,
    /// With --unaligned: start each checkpoint aligned and switch a subtask to unaligned
    /// once its alignment has lasted this long (e.g. 100ms).
    #[arg(long, value_parser = parse_duration)]
    pub aligned_checkpoint_timeout: Option<Duration>,
    /// Abort a checkpoint that takes longer than this.
    #[arg(long, default_value = "10m", value_parser = parse_positive_duration)]
    pub checkpoint_timeout: Duration,
    /// Buffer debloating: under backpressure, batches are cut so that the records in flight
    /// on a channel take its consumer about this long (e.g. 10ms, 50ms), which is what an
    /// aligned checkpoint's barrier waits behind (10ms halved the aligned checkpoints of
    /// the disk backend at 10 M keys); `off`, the default, sends full batches always.
    /// Ignored with --unaligned (the barrier overtakes the queues).
    #[arg(long, default_value = "off", value_parser = parse_debloat)]
    pub buffer_debloat_target: Interval,
    /// Minimum pause between the end of one checkpoint and the start of the next.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub min_pause: Duration,
    /// Checkpoints in flight at once.
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    pub max_concurrent_checkpoints: u32,
    /// Consecutive failed checkpoints tolerated before the job fails.
    #[arg(long, default_value_t = 0)]
    pub tolerable_checkpoint_failures: u32,
    /// Completed checkpoints of this run kept on disk: older ones are deleted as newer ones
    /// complete. An earlier run's checkpoints, the restored one included, are never deleted
    /// (Flink's no-claim restore): they may be somebody's restore point.
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    pub retained_checkpoints: u32,
    /// Start from `latest` (the newest complete checkpoint in --checkpoint-dir) or a
    /// checkpoint or savepoint folder.
    #[arg(long)]
    pub restore: Option<String>,
    /// Restore even if the checkpoint has state for operators this job lacks (dropped).
    #[arg(long)]
    pub allow_non_restored_state: bool,
    /// Restart strategy after a failure.
    #[arg(long, value_enum, default_value_t = Restart::ExponentialDelay)]
    pub restart_strategy: Restart,
    /// Maximum restarts (fixed-delay, exponential-delay).
    #[arg(long, default_value_t = u32::MAX)]
    pub restart_attempts: u32,
    /// Delay before a restart (the first one, for exponential-delay).
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    pub restart_delay: Duration,
    /// failure-rate: failures tolerated within --failure-rate-interval [default: 1].
    #[arg(long, value_parser = at_least_one)]
    pub max_failures_per_interval: Option<u32>,
    /// failure-rate: the window over which failures are counted [default: 1m].
    #[arg(long, value_parser = parse_positive_duration)]
    pub failure_rate_interval: Option<Duration>,
    /// Give up once the same failure (numbers aside) ended this many attempts in a row
    /// with no checkpoint progress in between, whatever the strategy allows; `off` never
    /// gives up for that reason.
    #[arg(long, default_value = "5", value_parser = parse_limit)]
    pub identical_failure_limit: Limit,
    /// Inject this many panics at seeded random moments in random subtasks, each once a
    /// checkpoint completed in its attempt (needs periodic checkpoints).
    #[arg(long, default_value_t = 0)]
    pub inject_failures: usize,
    /// Seed for --inject-failures.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// How often watermark generators emit their periodic watermark (event time); `0s`
    /// turns periodic watermarks off.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    pub auto_watermark_interval: Duration,
    /// Where keyed state lives: `memory` (the fastest; bounded by memory) or `disk` (an
    /// embedded LSM per keyed subtask under --state-dir, with a bounded cache in memory:
    /// state larger than memory). Default: $WEIR_STATE_BACKEND if set, else memory.
    #[arg(long, value_enum)]
    pub state_backend: Option<Backend>,
    /// Local folder of the disk backend's working files (DIR/JOB/run-PID-N, emptied at
    /// every restart and removed at the end: the durable copy is the checkpoint); put it
    /// on a fast local disk with room for the state [default: $TMPDIR/weir-state].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// On the disk backend, write only the keyed state changed since the last checkpoint
    /// (a delta in the checkpoint folder's `../shared/`, chained on a full base that is
    /// rewritten now and then); savepoints stay full. Off: every checkpoint is full.
    #[arg(long)]
    pub incremental_checkpoints: bool,
    /// On the disk backend, the most keys each keyed state keeps decoded in memory (its
    /// write-back cache in front of the LSM; up to twice as many while a checkpoint writes
    /// them back). Lower it, with --state-block-cache and --state-write-buffer, to run a
    /// state larger than the memory the process may use.
    #[arg(long, default_value_t = 1 << 20, value_parser = parse_cache_entries)]
    pub state_cache_entries: usize,
    /// On the disk backend, the bytes of each keyed subtask's LSM block cache (e.g. 64MiB,
    /// 512KiB; k, M, G are 1024-based too).
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes)]
    pub state_block_cache: u64,
    /// On the disk backend with --incremental-checkpoints into object storage
    /// (--checkpoint-dir s3://…), the most bytes each keyed subtask's LSM keeps on local
    /// disk (e.g. 2GiB): past it, key groups unchanged since the last completed checkpoint
    /// are dropped locally and fetched again from the checkpoint storage when next
    /// accessed. Default: unbounded.
    #[arg(long, value_parser = parse_bytes)]
    pub state_cache_size: Option<u64>,
    /// On the disk backend, the bytes of each keyed state's LSM write buffer (memtable),
    /// flushed to a file when full (e.g. 64MiB, 4MiB).
    #[arg(long, default_value = "64MiB", value_parser = parse_write_buffer)]
    pub state_write_buffer: u64,
    /// The job's name (default: the program's): its checkpoint folder and the prefix of its
    /// sinks' transactions. Give concurrent runs of one job different names.
    #[arg(long)]
    pub job_name: Option<String>,
    /// The control endpoint and savepoints.
    #[command(flatten)]
    pub control: ControlArgs,
    /// One job across worker processes (issue 24).
    #[cfg(feature = "cluster")]
    #[command(flatten)]
    pub cluster: super::cluster::ClusterArgs,
}

/// A checkpoint interval; `None` when checkpointing is off.
#[derive(Clone, Copy, Debug)]
pub struct Interval(pub Option<Duration>);

/// A limit that can be `off` (`None`).
#[derive(Clone, Copy, Debug)]
pub struct Limit(pub Option<u32>);

/// A count of 1 or more.
fn at_least_one(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a count (1, 2, …)")),
    }
}

/// A checkpoint or savepoint location: a local folder or a URL with its bucket
/// ([`crate::storage::check_location`]: no bare `s3://`, no `s3:bucket` typo).
pub(super) fn parse_location(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    crate::storage::check_location(&path).map_err(|e| e.to_string())?;
    Ok(path)
}

fn parse_parallelism(s: &str) -> Result<u32, String> {
    match at_least_one(s)? {
        n if n > MAX_MAX_PARALLELISM => Err(format!("at most {MAX_MAX_PARALLELISM}")),
        n => Ok(n),
    }
}

fn parse_cache_entries(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1 (keys cached per state)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "'{s}' is not a count of keys (1, 1000, 1048576, …)"
        )),
    }
}

/// A size in bytes: a count with an optional unit, all 1024-based (`B`, `k`/`KB`/`KiB`,
/// `M`/`MB`/`MiB`, `G`/`GB`/`GiB`).
pub(super) fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let at = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(at);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => {
            return Err(format!(
                "'{s}': unknown unit '{unit}' (use B, KiB, MiB or GiB)"
            ))
        }
    };
    n.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("'{s}' is not a size like 64MiB, 512KiB or 1048576"))
}

/// A write buffer of at least 1 MiB: a smaller one would flush a file every few writes.
fn parse_write_buffer(s: &str) -> Result<u64, String> {
    match parse_bytes(s)? {
        n if n < 1 << 20 => Err(format!("'{s}': at least 1MiB")),
        n => Ok(n),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("'{s}' is not a duration like 200ms, 1s or 2m ({e})"))
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("must be longer than 0 (e.g. 200ms, 10s, 10m)".into());
    }
    Ok(d)
}

/// A positive duration or `off` (`None`): `like` names examples for the error, `zero`
/// what a zero is not and the way out (e.g. "interval: use `off` to disable checkpoints").
fn parse_off_or_positive(s: &str, like: &str, zero: &str) -> Result<Interval, String> {
    if s == "off" {
        return Ok(Interval(None));
    }
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("'{s}' is not a duration like {like} ({e}), nor `off`"))?;
    if d.is_zero() {
        return Err(format!("'{s}' is no {zero}"));
    }
    Ok(Interval(Some(d)))
}

/// `--buffer-debloat-target`: a positive duration, or `off`.
fn parse_debloat(s: &str) -> Result<Interval, String> {
    parse_off_or_positive(
        s,
        "10ms or 50ms",
        "target: use `off` to turn debloating off",
    )
}

fn parse_interval(s: &str) -> Result<Interval, String> {
    parse_off_or_positive(
        s,
        "200ms, 1s or 2m",
        "interval: use `off` to disable checkpoints",
    )
}

fn parse_limit(s: &str) -> Result<Limit, String> {
    if s == "off" {
        return Ok(Limit(None));
    }
    match s.parse::<u32>() {
        Ok(0) => Err(
            "0 would give up before the first failure: use a count of 1 or more, or `off`".into(),
        ),
        Ok(n) => Ok(Limit(Some(n))),
        Err(_) => Err(format!("'{s}' is not a count (1, 2, …) nor `off`")),
    }
}

/// The max parallelism of a run that did not give `--max-parallelism`: the restored
/// state's (`restored`), else [`CACHE_MAX_PARALLELISM`] with `--state-cache-size`, else
/// [`DEFAULT_MAX_PARALLELISM`].
fn resolve_max_parallelism(restored: Option<u32>, bounded: bool) -> (u32, MaxParallelism) {
    match restored {
        Some(n) => (n, MaxParallelism::Restored),
        None if bounded => (CACHE_MAX_PARALLELISM, MaxParallelism::ForCache),
        None => (DEFAULT_MAX_PARALLELISM, MaxParallelism::Default),
    }
}

impl RunFlags {
    /// Refuses combinations of flags that make no sense together, naming the flags.
    ///
    /// Returns the job's max parallelism and where it came from
    /// ([`RunFlags::resolved_max_parallelism`]), which the check needs anyway: with
    /// `--restore` resolving it reads the checkpoint's `_metadata` (for `latest`, after
    /// listing the job's folder; in object storage, maybe), so start-up resolves it once,
    /// here, and hands the value to [`RunFlags::config`] and the start-up notice instead of
    /// reading it again.
    pub fn check(&self, default_name: &str) -> Result<(u32, MaxParallelism), UsageError> {
        let (max_parallelism, source) = self.resolved_max_parallelism(default_name);
        if self.parallelism > max_parallelism {
            let (what, way_out) = match source {
                MaxParallelism::Given => (
                    format!("--max-parallelism {max_parallelism}"),
                    "lower --parallelism or raise --max-parallelism (fixed for the life of \
                     the job's state)",
                ),
                MaxParallelism::Restored => (
                    format!("the restored checkpoint's max parallelism {max_parallelism}"),
                    "lower --parallelism (the restored state fixes its key groups)",
                ),
                _ => (
                    format!(
                        "the max parallelism {max_parallelism} ({})",
                        source.describe()
                    ),
                    "lower --parallelism or pass a larger --max-parallelism (fixed for the \
                     life of the job's state)",
                ),
            };
            return Err(UsageError::new(format!(
                "--parallelism {} is above {what}: a keyed operator cannot have more subtasks \
                 than key groups; {way_out}",
                self.parallelism
            )));
        }
        if self.inject_failures > 0 && self.checkpoint_interval.0.is_none() {
            return Err(UsageError::new(
                "--inject-failures needs periodic checkpoints (each failure waits for one, so \
                 that the restart has progress to restore): drop --checkpoint-interval off",
            ));
        }
        if self.unaligned && self.mode != Mode::ExactlyOnce {
            return Err(UsageError::new(
                "--unaligned needs --mode exactly-once: at-least-once barriers never wait, so \
                 there is nothing to overtake; drop --unaligned or use --mode exactly-once",
            ));
        }
        if self.aligned_checkpoint_timeout.is_some() && !self.unaligned {
            return Err(UsageError::new(
                "--aligned-checkpoint-timeout is when an aligned checkpoint switches to \
                 unaligned: add --unaligned (with --mode exactly-once), or drop the timeout",
            ));
        }
        if self.restart_strategy != Restart::FailureRate {
            for (given, flag) in [
                (
                    self.max_failures_per_interval.is_some(),
                    "--max-failures-per-interval",
                ),
                (
                    self.failure_rate_interval.is_some(),
                    "--failure-rate-interval",
                ),
            ] {
                if given {
                    return Err(UsageError::new(format!(
                        "{flag} applies to --restart-strategy failure-rate only"
                    )));
                }
            }
        }
        if self.state_backend == Some(Backend::Disk) && !cfg!(feature = "disk-state") {
            return Err(UsageError::new(
                "--state-backend disk: this binary was built without the disk backend (cargo \
                 feature `disk-state` of weir, on by default in the weir CLI); rebuild with it \
                 or use --state-backend memory",
            ));
        }
        #[cfg(feature = "cluster")]
        self.cluster.check()?;
        let name = self.job_name.as_deref().unwrap_or(default_name);
        if let Err(e) = crate::storage::validate_name("job name", name) {
            let flag = if self.job_name.is_some() {
                "--job-name"
            } else {
                "the program's name (give --job-name)"
            };
            return Err(UsageError::new(format!("{flag}: {e}")));
        }
        Ok((max_parallelism, source))
    }

    /// The job's number of key groups and where it comes from: `--max-parallelism`; else
    /// the restored checkpoint's (`--restore`; the state fixes it, and another value would be
    /// refused); else [`CACHE_MAX_PARALLELISM`] with `--state-cache-size`; else
    /// [`DEFAULT_MAX_PARALLELISM`]. Reads the restored checkpoint's `_metadata` each call:
    /// a run resolves it once, in [`RunFlags::check`].
    pub fn resolved_max_parallelism(&self, default_name: &str) -> (u32, MaxParallelism) {
        if let Some(n) = self.max_parallelism {
            return (n, MaxParallelism::Given);
        }
        let name = self.job_name.as_deref().unwrap_or(default_name);
        let restored = match self.restore_from() {
            RestoreFrom::Nothing => None,
            RestoreFrom::Path(p) => crate::checkpoint::restore::max_parallelism_at(&p),
            RestoreFrom::Latest => {
                crate::checkpoint::restore::latest_max_parallelism(&self.checkpoint_dir, name)
            }
        };
        resolve_max_parallelism(restored, self.state_cache_size.is_some())
    }

    fn restore_from(&self) -> RestoreFrom {
        match self.restore.as_deref() {
            None => RestoreFrom::Nothing,
            Some("latest") => RestoreFrom::Latest,
            Some(p) => RestoreFrom::Path(PathBuf::from(p)),
        }
    }

    /// The job's configuration, without failure injection (which needs the job's size:
    /// [`RunFlags::failure_injection`]). `max_parallelism` is what [`RunFlags::check`]
    /// returned (call it first): taken, not resolved again, so that start-up reads the
    /// restored checkpoint's `_metadata` once.
    pub fn config(&self, default_name: &str, max_parallelism: u32) -> JobConfig {
        let mut c = JobConfig::new(self.job_name.as_deref().unwrap_or(default_name));
        c.parallelism = self.parallelism;
        c.max_parallelism = max_parallelism;
        c.checkpoint_dir = self.checkpoint_dir.clone();
        c.checkpointing = CheckpointConfig {
            interval: self.checkpoint_interval.0,
            mode: match self.mode {
                Mode::ExactlyOnce => CheckpointingMode::ExactlyOnce,
                Mode::AtLeastOnce => CheckpointingMode::AtLeastOnce,
            },
            timeout: self.checkpoint_timeout,
            min_pause: self.min_pause,
            max_concurrent: self.max_concurrent_checkpoints as usize,
            tolerable_failures: self.tolerable_checkpoint_failures,
            retained: self.retained_checkpoints as usize,
            unaligned: self.unaligned,
            aligned_checkpoint_timeout: self.aligned_checkpoint_timeout,
        };
        c.restore = self.restore_from();
        c.allow_non_restored_state = self.allow_non_restored_state;
        c.auto_watermark_interval = self.auto_watermark_interval;
        c.buffer_debloat_target = self.buffer_debloat_target.0;
        self.control.apply(&mut c);
        c.restart = match self.restart_strategy {
            Restart::None => RestartStrategy::None,
            Restart::FixedDelay => RestartStrategy::FixedDelay {
                attempts: self.restart_attempts,
                delay: self.restart_delay,
            },
            Restart::ExponentialDelay => RestartStrategy::ExponentialDelay {
                attempts: self.restart_attempts,
                initial: self.restart_delay,
                max: Duration::from_secs(10),
            },
            Restart::FailureRate => RestartStrategy::FailureRate {
                max_failures: self.max_failures_per_interval.unwrap_or(1),
                interval: self
                    .failure_rate_interval
                    .unwrap_or(Duration::from_secs(60)),
                delay: self.restart_delay,
            },
        };
        c.identical_failure_limit = self.identical_failure_limit.0;
        c.state_backend = self.state_backend.map(|b| match b {
            Backend::Memory => StateBackend::Memory,
            Backend::Disk => StateBackend::Disk,
        });
        if let Some(dir) = &self.state_dir {
            c.state_dir = dir.clone();
        }
        c.incremental_checkpoints = self.incremental_checkpoints;
        c.disk_state = crate::runtime::config::DiskStateMemory {
            cache_entries: self.state_cache_entries,
            block_cache_bytes: self.state_block_cache,
            write_buffer_bytes: self.state_write_buffer,
            local_disk_bytes: self.state_cache_size,
        };
        c
    }

    /// `--inject-failures`, planned over the first half of a clean run's `records` (the
    /// records its tasks process in total): the second half is left for failures held back
    /// until their attempt completes a checkpoint.
    pub fn failure_injection(&self, records: u64) -> Option<FailureInjection> {
        (self.inject_failures > 0).then(|| {
            FailureInjection::after_checkpoints(
                self.inject_failures,
                self.seed,
                (records / 2).max(2),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The run flags parsed from `args`.
    fn parse(args: &[&str]) -> RunFlags {
        use clap::FromArgMatches;
        let cmd = RunFlags::augment_args(clap::Command::new("job"));
        let m = cmd
            .try_get_matches_from(std::iter::once("job").chain(args.iter().copied()))
            .unwrap();
        RunFlags::from_arg_matches(&m).unwrap()
    }

    #[test]
    fn buffer_debloating_is_off_by_default_and_a_positive_target_or_off_by_flag() {
        let cfg = |args: &[&str]| parse(args).config("job", 128).buffer_debloat_target;
        assert_eq!(cfg(&[]), None);
        assert_eq!(JobConfig::new("job").buffer_debloat_target, None);
        assert_eq!(
            cfg(&["--buffer-debloat-target", "50ms"]),
            Some(Duration::from_millis(50))
        );
        assert_eq!(cfg(&["--buffer-debloat-target", "off"]), None);
        for bad in ["0ms", "soon"] {
            let err = parse_debloat(bad).unwrap_err();
            assert!(err.contains(bad) && err.contains("off"), "{err}");
        }
    }

    #[test]
    fn restored_state_fixes_the_max_parallelism_over_the_bounds_default() {
        assert_eq!(
            resolve_max_parallelism(Some(32), true),
            (32, MaxParallelism::Restored)
        );
        assert_eq!(
            resolve_max_parallelism(Some(32), false),
            (32, MaxParallelism::Restored)
        );
        assert_eq!(
            resolve_max_parallelism(None, true),
            (CACHE_MAX_PARALLELISM, MaxParallelism::ForCache)
        );
        assert_eq!(
            resolve_max_parallelism(None, false),
            (DEFAULT_MAX_PARALLELISM, MaxParallelism::Default)
        );
    }

    #[test]
    fn the_bound_without_max_parallelism_gets_fine_key_groups_and_a_given_value_wins() {
        let resolved = |args: &[&str]| parse(args).resolved_max_parallelism("job");
        assert_eq!(
            resolved(&[]),
            (DEFAULT_MAX_PARALLELISM, MaxParallelism::Default)
        );
        assert_eq!(
            resolved(&["--state-cache-size", "1GiB"]),
            (CACHE_MAX_PARALLELISM, MaxParallelism::ForCache)
        );
        assert_eq!(
            resolved(&["--state-cache-size", "1GiB", "--max-parallelism", "256"]),
            (256, MaxParallelism::Given)
        );
        // Nothing to restore in the folder: the default for the bound.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_str().unwrap();
        let args = ["--state-cache-size", "1GiB", "--restore", "latest"];
        let mut with_dir = args.to_vec();
        with_dir.extend(["--checkpoint-dir", dir]);
        assert_eq!(
            resolved(&with_dir),
            (CACHE_MAX_PARALLELISM, MaxParallelism::ForCache)
        );
        let mut flags = parse(&with_dir);
        assert_eq!(
            flags.check("job").unwrap(),
            (CACHE_MAX_PARALLELISM, MaxParallelism::ForCache),
            "check returns what it resolved, for config and the notice"
        );
        flags.parallelism = 5000;
        let e = flags.check("job").unwrap_err().to_string();
        assert!(
            e.contains("max parallelism 4096") && e.contains("--state-cache-size"),
            "{e}"
        );
    }
}
