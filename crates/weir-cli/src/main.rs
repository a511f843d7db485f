//! `weir`: run the built-in checkpointed jobs, and inspect the state in their checkpoints.
//!
//! ```text
//! weir run keyed-count --events 10000000 --keys 1000 --parallelism 2 --verify
//! weir run wordcount --input /usr/share/common-licenses/GPL-3 --output counts
//! weir checkpoints list weir-checkpoints
//! weir state ls weir-checkpoints/keyed-count/chk-3
//! weir state dump weir-checkpoints/keyed-count/chk-3 --uid count --state count --format json
//! weir status --job 127.0.0.1:PORT            # while a job runs (it prints its address)
//! weir savepoint --job 127.0.0.1:PORT
//! weir stop --job 127.0.0.1:PORT [--drain]    # then: weir run … --restore <savepoint>
//! ```
//!
//! Every error is one line naming the cause and the way out; the exit code is 0 on
//! success, 1 on an error, 2 on bad flags, 3 when `--verify` finds a wrong count.

mod checkpoints;
mod connect;
mod control;
mod inspect;
mod jobs;
mod output;
mod progress;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use weir::prelude::*;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "Stateful stream processing with exactly-once checkpoints"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
// Parsed once per process: the size of `Run`'s flags costs nothing worth boxing for.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Run a built-in job.
    #[command(subcommand)]
    Run(Job),
    /// Inspect the state in a checkpoint.
    #[command(subcommand)]
    State(inspect::StateCommand),
    /// List checkpoints: complete, incomplete or unreadable.
    #[command(subcommand)]
    Checkpoints(checkpoints::CheckpointsCommand),
    /// Take a savepoint of a running job; prints its folder.
    Savepoint(control::client::SavepointArgs),
    /// Stop a running job with a savepoint; prints its folder.
    Stop(control::client::StopArgs),
    /// Take a checkpoint of a running job now; prints its folder.
    Checkpoint(control::client::CheckpointArgs),
    /// Show a running job's state, parallelism and latest checkpoints.
    Status(control::client::StatusArgs),
}

#[derive(Subcommand)]
enum Job {
    /// Count events per key: event i has key i % K; writes `key,count` lines.
    KeyedCount(KeyedCountArgs),
    /// Count words in text files; writes `word,count` lines.
    Wordcount(WordcountArgs),
}

#[derive(Args)]
struct KeyedCountArgs {
    /// Number of events (0..N).
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Number of distinct keys.
    #[arg(long, default_value_t = 1000)]
    keys: u64,
    /// Emit the final counts at end of input (`final`) or `(key, count)` for every event.
    #[arg(long, value_enum, default_value_t = Emit::Final)]
    emit: Emit,
    /// Check what was written (--output, or a files: sink's committed files) against the
    /// exact truth, else the final state (--discard-output, postgres/nats sinks); exit 3 on
    /// a mismatch.
    #[arg(long)]
    verify: bool,
    #[command(flatten)]
    connect: connect::KeyedCountConnectors,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct WordcountArgs {
    /// Text files or folders to read.
    #[arg(long, required_unless_present = "source", num_args = 1..)]
    input: Vec<PathBuf>,
    #[command(flatten)]
    connect: connect::WordcountConnectors,
    #[command(flatten)]
    common: Common,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Emit {
    Final,
    Updates,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    ExactlyOnce,
    AtLeastOnce,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Restart {
    None,
    FixedDelay,
    ExponentialDelay,
}

#[derive(Args)]
struct Common {
    /// Parallel subtasks per operator.
    #[arg(long, default_value_t = 1)]
    parallelism: u32,
    /// Number of key groups (fixed for the life of the job's state).
    #[arg(long, default_value_t = 128)]
    max_parallelism: u32,
    /// Folder for checkpoints (the job's checkpoints go in <dir>/<job>/chk-<n>).
    #[arg(long, default_value = "weir-checkpoints")]
    checkpoint_dir: PathBuf,
    /// Time between checkpoints (e.g. 200ms, 1s, 2m), or `off`.
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    checkpoint_interval: Interval,
    /// Checkpointing mode.
    #[arg(long, value_enum, default_value_t = Mode::ExactlyOnce)]
    mode: Mode,
    /// Abort a checkpoint that takes longer than this.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    checkpoint_timeout: Duration,
    /// Minimum pause between the end of one checkpoint and the start of the next.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    min_pause: Duration,
    /// Checkpoints in flight at once.
    #[arg(long, default_value_t = 1)]
    max_concurrent_checkpoints: usize,
    /// Consecutive failed checkpoints tolerated before the job fails.
    #[arg(long, default_value_t = 0)]
    tolerable_checkpoint_failures: u32,
    /// Completed checkpoints kept on disk.
    #[arg(long, default_value_t = 3)]
    retained_checkpoints: usize,
    /// Start from `latest` (the newest complete checkpoint in --checkpoint-dir) or a
    /// checkpoint folder.
    #[arg(long)]
    restore: Option<String>,
    /// Restore even if the checkpoint has state for operators this job lacks (dropped).
    #[arg(long)]
    allow_non_restored_state: bool,
    /// Limit the sources to about this many events per second in total.
    #[arg(long)]
    rate: Option<f64>,
    /// Folder for the final output (published only when the job succeeds).
    #[arg(long, default_value = "weir-output")]
    output: PathBuf,
    /// Write no output (benchmarks).
    #[arg(long)]
    discard_output: bool,
    /// Restart strategy after a failure.
    #[arg(long, value_enum, default_value_t = Restart::ExponentialDelay)]
    restart_strategy: Restart,
    /// Maximum restarts.
    #[arg(long, default_value_t = u32::MAX)]
    restart_attempts: u32,
    /// Delay before a restart (the first one, for exponential-delay).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    restart_delay: Duration,
    /// Inject this many panics at seeded random moments in random subtasks.
    #[arg(long, default_value_t = 0)]
    inject_failures: usize,
    /// Seed for --inject-failures.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The job's name (default: the built-in job's): its checkpoint folder and the prefix of
    /// its sinks' transactions. Give concurrent runs of one job different names.
    #[arg(long)]
    job_name: Option<String>,
    #[command(flatten)]
    control: control::RunControlArgs,
}

/// A checkpoint interval; `None` when checkpointing is off.
#[derive(Clone, Copy)]
struct Interval(Option<Duration>);

fn parse_interval(s: &str) -> Result<Interval, String> {
    if s == "off" || s == "0" {
        return Ok(Interval(None));
    }
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("'{s}' is not a duration like 200ms, 1s or 2m ({e}), nor `off`"))?;
    Ok(Interval((!d.is_zero()).then_some(d)))
}

impl Common {
    fn config(&self, name: &str, failure_horizon: u64) -> Result<JobConfig> {
        if self.parallelism == 0 {
            bail!("--parallelism must be at least 1");
        }
        if self.rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
            bail!("--rate must be a positive number of events per second");
        }
        let name = self.job_name.as_deref().unwrap_or(name);
        if let Err(e) = weir::checkpoint::storage::validate_name("job name", name) {
            bail!("--job-name: {e}");
        }
        let mut c = JobConfig::new(name);
        c.parallelism = self.parallelism;
        c.max_parallelism = self.max_parallelism;
        c.checkpoint_dir = self.checkpoint_dir.clone();
        c.checkpointing = CheckpointConfig {
            interval: self.checkpoint_interval.0,
            mode: match self.mode {
                Mode::ExactlyOnce => CheckpointingMode::ExactlyOnce,
                Mode::AtLeastOnce => CheckpointingMode::AtLeastOnce,
            },
            timeout: self.checkpoint_timeout,
            min_pause: self.min_pause,
            max_concurrent: self.max_concurrent_checkpoints.max(1),
            tolerable_failures: self.tolerable_checkpoint_failures,
            retained: self.retained_checkpoints.max(1),
        };
        c.restore = match self.restore.as_deref() {
            None => RestoreFrom::Nothing,
            Some("latest") => RestoreFrom::Latest,
            Some(p) => RestoreFrom::Path(PathBuf::from(p)),
        };
        c.allow_non_restored_state = self.allow_non_restored_state;
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
        };
        if self.inject_failures > 0 {
            if self.checkpoint_interval.0.is_none() {
                return Err(connect::UsageError(
                    "--inject-failures needs periodic checkpoints (each failure waits for one, \
                     so that the restart has progress to restore): drop \
                     --checkpoint-interval off"
                        .into(),
                )
                .into());
            }
            // Each failure waits until a checkpoint has completed in the running attempt
            // (one per attempt), so every restart restores progress rather than starting
            // over, which over a bounded input would give the same counts.
            c.failure_injection = Some(FailureInjection::after_checkpoints(
                self.inject_failures,
                self.seed,
                failure_horizon.max(2),
            ));
        }
        Ok(c)
    }
}

/// Output destination decided before the job runs.
struct Destination {
    staging: Option<PathBuf>,
}

fn destination(common: &Common) -> Result<Destination> {
    if common.discard_output {
        return Ok(Destination { staging: None });
    }
    Ok(Destination {
        staging: Some(output::prepare(&common.output)?),
    })
}

fn run_job(
    env: StreamEnvironment,
    label: &str,
    dest: &Destination,
    common: &Common,
) -> Result<JobResult> {
    let metrics = env.metrics();
    let cfg = env.config().clone();
    let server = match common.control.bind_addr() {
        None => None,
        Some(bind) => {
            let token = common.control.token(bind.ip())?;
            let server = control::server::ControlServer::start(bind, token.clone(), env.control())?;
            eprintln!(
                "weir: control endpoint {} (weir status|savepoint|stop --job {}){}",
                server.addr(),
                server.addr(),
                match (&token, &common.control.control_token_file) {
                    (Some(t), None) => format!(" — token {t}"),
                    (Some(_), Some(f)) => format!(" — token from {}", f.display()),
                    (None, _) => String::new(),
                }
            );
            Some(server)
        }
    };
    let progress = progress::Progress::start(metrics);
    let result = env.execute();
    progress.stop();
    if let Some(server) = server {
        // Let a `weir stop` hear its savepoint's path before the process exits.
        server.shutdown(Duration::from_secs(5));
    }
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            // A failed run leaves no staging folder behind (and never a partial --output).
            if let Some(staging) = &dest.staging {
                let _ = std::fs::remove_dir_all(staging);
            }
            return Err(e.into());
        }
    };
    if let Some(sp) = &result.stopped_with_savepoint {
        // A stopped job's output is not the job's result: resume from the savepoint.
        if let Some(staging) = &dest.staging {
            let _ = std::fs::remove_dir_all(staging);
        }
        progress::summary(label, &cfg, &result, None);
        println!("stopped with savepoint {}", sp.display());
        println!("resume with: --restore {}", sp.display());
        return Ok(result);
    }
    if let Some(staging) = &dest.staging {
        output::publish(staging, &common.output)?;
    }
    progress::summary(
        label,
        &cfg,
        &result,
        dest.staging.as_ref().map(|_| common.output.as_path()),
    );
    Ok(result)
}

fn keyed_count(args: KeyedCountArgs) -> Result<ExitCode> {
    if args.keys == 0 {
        bail!("--keys must be at least 1");
    }
    let c = &args.common;
    let src = args.connect.source.as_deref();
    if args.verify && src.is_some() {
        return Err(connect::UsageError(
            "--verify compares the counts with the generator's events 0..N, and a --source \
             has no known truth: drop --verify and check the sink's output instead"
                .into(),
        )
        .into());
    }
    let prepared = connect::prepare::<u64>(src, &args.connect.sink, &run_info("keyed-count", c))?;
    let events = prepared.source_messages.unwrap_or(args.events);
    // The engine counts a record at every task it passes (here the source's and the
    // counter's: about 2 × events in a clean run). Planning the failures within the first
    // `events` of that count spreads them over the first half of the run and leaves the
    // second half for failures held back until their attempt completes a checkpoint.
    let cfg = c.config("keyed-count", events)?;
    announce(&cfg);
    let dest = match prepared.output() {
        Some(_) => Destination { staging: None },
        None => destination(c)?,
    };
    let env = StreamEnvironment::new(cfg);
    let verdicts: jobs::StateVerdicts = Arc::new(Mutex::new(Default::default()));
    let out = prepared.output().unwrap_or(match &dest.staging {
        Some(dir) => jobs::Output::Files(dir.clone()),
        None => jobs::Output::Discard,
    });
    let target = verify_target(&prepared, &dest, c);
    let in_state =
        (args.verify && matches!(target, VerifyTarget::State(_))).then(|| verdicts.clone());
    let input = match src {
        Some(_) => jobs::Events::Connector(&prepared),
        None => jobs::Events::Generator {
            n: args.events,
            rate: c.rate,
        },
    };
    let emit_updates = args.emit == Emit::Updates;
    jobs::keyed_count(&env, input, args.keys, emit_updates, out, in_state)?;
    let result = run_job(env, "keyed-count", &dest, c)?;
    prepared.print_summary();
    if !args.verify {
        return Ok(ExitCode::SUCCESS);
    }
    if result.stopped_with_savepoint.is_some() {
        println!("verify: skipped — the job was stopped before the end of its input");
        return Ok(ExitCode::SUCCESS);
    }
    let emitted = match args.emit {
        Emit::Final => output::Emitted::Final,
        Emit::Updates => output::Emitted::Updates,
    };
    let (events, keys) = (args.events, args.keys);
    let verdict = match &target {
        VerifyTarget::Files(dir, format) => {
            output::verify_keyed_count(dir, *format, events, keys, emitted)?
        }
        VerifyTarget::State(sink) => {
            let v = verdicts.lock().unwrap_or_else(|p| p.into_inner());
            judge_state(&v, c.parallelism, keys.min(events)).map(|m| match sink {
                Some(sink) => format!("{m} (the {sink} sink's rows are not read back: query them)"),
                None => m,
            })
        }
    };
    match verdict {
        Ok(msg) => {
            println!("verify: OK — {msg}");
            Ok(ExitCode::SUCCESS)
        }
        Err(msg) => {
            println!("verify: MISMATCH — {msg}");
            Ok(ExitCode::from(3))
        }
    }
}

/// What `keyed-count --verify` reads: what a user would read when the CLI can read it
/// back (a published `--output`, a `files:` sink's committed part files), else the job's
/// final state (`--discard-output`; a PostgreSQL or NATS sink, named in the verdict).
enum VerifyTarget {
    /// Part files of these lines in this folder.
    Files(PathBuf, output::LineFormat),
    /// The counters' final state; `Some(sink)` when the output went to that sink unread.
    State(Option<&'static str>),
}

fn verify_target(prepared: &connect::Prepared, dest: &Destination, c: &Common) -> VerifyTarget {
    match prepared.output() {
        Some(jobs::Output::Connector(connect::SinkSpec::Files(dir), format)) => {
            let format = match format {
                connect::SinkFormat::Tsv => output::LineFormat::Tsv,
                connect::SinkFormat::Jsonl => output::LineFormat::Jsonl,
            };
            VerifyTarget::Files(dir, format)
        }
        #[cfg(feature = "postgres")]
        Some(jobs::Output::Connector(connect::SinkSpec::Postgres(_), _)) => {
            VerifyTarget::State(Some("postgres"))
        }
        #[cfg(feature = "nats")]
        Some(jobs::Output::Connector(connect::SinkSpec::Nats(_), _)) => {
            VerifyTarget::State(Some("nats"))
        }
        _ if dest.staging.is_some() => {
            VerifyTarget::Files(c.output.clone(), output::LineFormat::Csv)
        }
        _ => VerifyTarget::State(None),
    }
}

/// The verdict on the counters' final states: every one of the `parallelism` subtasks
/// reported, none found a wrong count, and together they hold exactly `want_keys` keys
/// (`min(keys, events)`), so a subtask that never reached the end of its input, or keys
/// lost between subtasks, cannot pass.
fn judge_state(
    verdicts: &std::collections::BTreeMap<u32, Result<u64, String>>,
    parallelism: u32,
    want_keys: u64,
) -> Result<String, String> {
    let silent: Vec<String> = (0..parallelism)
        .filter(|i| !verdicts.contains_key(i))
        .map(|i| i.to_string())
        .collect();
    if !silent.is_empty() {
        return Err(format!(
            "subtask(s) {} of {parallelism} never reported their final state",
            silent.join(", ")
        ));
    }
    let bad: Vec<String> = verdicts.values().filter_map(|r| r.clone().err()).collect();
    if !bad.is_empty() {
        return Err(bad.join("; "));
    }
    let keys: u64 = verdicts.values().filter_map(|r| r.as_ref().ok()).sum();
    if keys != want_keys {
        return Err(format!(
            "{keys} keys in state over all subtasks, {want_keys} expected"
        ));
    }
    Ok(format!(
        "{keys} keys in the final state of all {parallelism} subtasks, every count exact"
    ))
}

fn wordcount(args: WordcountArgs) -> Result<ExitCode> {
    let c = &args.common;
    let prepared = connect::prepare::<String>(
        args.connect.source.as_deref(),
        &args.connect.sink,
        &run_info("wordcount", c),
    )?;
    let (lines, horizon) = prepared.wordcount_lines(&args.input)?;
    let cfg = c.config("wordcount", horizon.max(2))?;
    announce(&cfg);
    let dest = match prepared.output() {
        Some(_) => Destination { staging: None },
        None => destination(c)?,
    };
    let env = StreamEnvironment::new(cfg);
    let out = prepared.output().unwrap_or(match &dest.staging {
        Some(dir) => jobs::Output::Files(dir.clone()),
        None => jobs::Output::Discard,
    });
    jobs::wordcount(&env, lines, out)?;
    run_job(env, "wordcount", &dest, c)?;
    prepared.print_summary();
    Ok(ExitCode::SUCCESS)
}

/// What the connectors need to know about a run before it starts.
fn run_info<'a>(job: &'a str, c: &Common) -> connect::RunInfo<'a> {
    connect::RunInfo {
        job,
        parallelism: c.parallelism,
        restoring: c.restore.is_some(),
    }
}

fn announce(cfg: &JobConfig) {
    let interval = match cfg.checkpointing.interval {
        Some(d) => format!("every {}", humantime::format_duration(d)),
        None => "off".to_string(),
    };
    eprintln!(
        "weir: {} — parallelism {}, {} checkpoints {interval} into {}",
        cfg.name,
        cfg.parallelism,
        cfg.checkpointing.mode,
        cfg.checkpoint_dir.join(&cfg.name).display()
    );
}

/// Task panics are caught and recovered from by the engine; print them as one line each
/// instead of a backtrace (injected failures would otherwise flood the terminal).
fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("?");
        let at = info
            .location()
            .map(|l| format!(" at {l}"))
            .unwrap_or_default();
        eprintln!("weir: {name} panicked: {msg}{at}");
    }));
}

fn main() -> ExitCode {
    quiet_panics();
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Run(Job::KeyedCount(a)) => keyed_count(a),
        Command::Run(Job::Wordcount(a)) => wordcount(a),
        Command::State(c) => inspect::run(c),
        Command::Checkpoints(c) => checkpoints::run(c),
        Command::Savepoint(a) => control::client::savepoint(a),
        Command::Stop(a) => control::client::stop(a),
        Command::Checkpoint(a) => control::client::checkpoint(a),
        Command::Status(a) => control::client::status(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            match e.downcast_ref::<connect::UsageError>() {
                Some(_) => ExitCode::from(2),
                None => ExitCode::FAILURE,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn state_verdicts_need_every_subtask_and_every_key() {
        let all: BTreeMap<u32, Result<u64, String>> = [(0, Ok(6)), (1, Ok(4))].into();
        assert!(judge_state(&all, 2, 10).is_ok());
        // A subtask that never reported (its keys never checked) is a mismatch.
        let one: BTreeMap<u32, Result<u64, String>> = [(0, Ok(6))].into();
        let e = judge_state(&one, 2, 6).unwrap_err();
        assert!(e.contains("subtask(s) 1 of 2 never reported"), "{e}");
        // So is a key total other than min(keys, events).
        let e = judge_state(&all, 2, 11).unwrap_err();
        assert!(
            e.contains("10 keys in state over all subtasks, 11 expected"),
            "{e}"
        );
        let bad: BTreeMap<u32, Result<u64, String>> =
            [(0, Ok(6)), (1, Err("1 wrong: key 3".into()))].into();
        assert_eq!(judge_state(&bad, 2, 10).unwrap_err(), "1 wrong: key 3");
    }
}
