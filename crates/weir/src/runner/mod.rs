//! The runner: turns a job into a complete Weir command-line program (feature `runner`, on
//! by default).
//!
//! A job is a function that builds its graph on a [`Job`] (which derefs to the
//! [`StreamEnvironment`]) from its own flags, parsed by clap next to the runner's
//! [`RunFlags`]. The runner brings what running a job in production takes, the same for
//! every job (the built-in jobs of the `weir` command run through it too):
//!
//! * every operational flag: parallelism, max parallelism, checkpoint interval, timeout,
//!   pause, concurrency, tolerated failures and retention, mode, `--restore latest|PATH`,
//!   restart strategies (`failure-rate` included) and the identical-failure limit, savepoint
//!   folder, job name, failure injection (`--inject-failures N --seed S`) — each checked
//!   before anything starts;
//! * the control endpoint ([`control`]), so `weir status | savepoint | checkpoint | stop
//!   --job ADDR` work against the job;
//! * the notices and progress line on stderr, and the run summary on stdout (records read
//!   and restored, checkpoints, restarts, and per attempt the checkpoint it resumed from);
//! * outputs published only on success ([`Job::output`]) and an optional check of the
//!   result ([`Job::verify`]);
//! * `PROGRAM savepoint check PATH [flags]`: holds a savepoint or checkpoint against the
//!   job these flags build, without running it — one row per operator and state (as is,
//!   migrates, incompatible, …), exit 1 when a run restoring it would refuse to start;
//! * (feature `cluster`) one job across worker processes: `PROGRAM [flags] --workers N
//!   --cluster-listen ADDR` coordinates, `PROGRAM worker --coordinator ADDR` runs what the
//!   coordinator deploys, built from the same binary with the coordinator's flags
//!   ([`cluster`]);
//! * exit codes: 0 success (or stopped with a savepoint), 1 an error (one line naming the
//!   cause), 2 bad flags (naming the flag), 3 a verification that found a wrong result.
//!
//! ```no_run
//! use weir::prelude::*;
//! use weir::runner::{clap, Job, Runner};
//!
//! #[derive(clap::Args)]
//! struct Args {
//!     /// Numbers to count.
//!     #[arg(long, default_value_t = 1000)]
//!     events: u64,
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     Runner::new("evens").run(|job: &mut Job, args: &Args| {
//!         let out = job.output("evens-output")?;
//!         job.add_source("numbers", GeneratorSource::new(args.events))
//!             .uid("numbers")
//!             .filter(|i: &u64| i % 2 == 0)
//!             .add_sink("out", TextFileSink::new(out, |i: &u64, l: &mut String| {
//!                 l.push_str(&i.to_string())
//!             }))
//!             .uid("out");
//!         Ok(())
//!     })
//! }
//! ```
//!
//! The job's flag names must differ from the runner's (clap refuses two flags of one name).

mod check;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod control;
pub mod flags;
#[cfg(feature = "cluster")]
pub mod health;
mod output;
mod progress;

use std::ffi::OsString;
use std::fmt;
use std::ops::Deref;
use std::path::PathBuf;
use std::process::ExitCode;

/// The clap the runner parses with, re-exported so that a job's `#[derive(clap::Args)]`
/// needs no dependency besides `weir` (`use weir::runner::clap;`).
pub use clap;
pub use flags::{MaxParallelism, RunFlags, CACHE_MAX_PARALLELISM};

use crate::api::config::JobConfig;
use crate::api::stream::StreamEnvironment;
use crate::prelude::JobResult;
use clap::{Args, FromArgMatches};

/// Any error a job's build function or verification returns: `?` works on every error type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Records a clean run's tasks are assumed to process, for planning `--inject-failures`,
/// when the job does not say ([`Job::expect_records`]).
pub const DEFAULT_EXPECTED_RECORDS: u64 = 1_000_000;

/// A flag, or a combination of flags, that makes no sense: the run exits with status 2
/// (bad usage) instead of 1 (a failure). Return it from a job's build function for the
/// job's own flags; the message should name the flag and the way out.
#[derive(Debug)]
pub struct UsageError(String);

impl UsageError {
    /// A usage error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        UsageError(message.into())
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// What a verification ([`Job::verify`]) concluded about the job's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The result is right; the message says what was checked (`verify: OK — …`).
    Correct(String),
    /// The result is wrong; the message says how (`verify: MISMATCH — …`, exit 3).
    Wrong(String),
}

/// For jobs without flags of their own: `Runner::new("x").run(|job, _: &NoArgs| …)`.
#[derive(Args, Debug, Clone, Default)]
pub struct NoArgs {}

type VerifyHook = Box<dyn FnOnce(&JobResult) -> Result<Verdict, BoxError>>;
type PublishHook = Box<dyn FnOnce(&JobResult) -> Result<(), BoxError>>;

/// An output folder the runner publishes on success.
struct OutputDir {
    /// The hidden folder the job's sinks write into.
    staging: PathBuf,
    /// The folder it becomes on success.
    dir: PathBuf,
    /// Held until the run ends, so a second run on the same folder is refused before it
    /// clears this run's staging folder.
    _lock: output::OutputLock,
}

/// The job being built: its [`StreamEnvironment`] (through `Deref`: `job.add_source(…)`),
/// configured from the flags, plus what the runner does around the run — outputs to
/// publish on success, a verification, lines for the summary.
pub struct Job {
    env: StreamEnvironment,
    outputs: Vec<OutputDir>,
    verify: Option<VerifyHook>,
    before_publish: Vec<PublishHook>,
    notes: Vec<String>,
    expected_records: Option<u64>,
    /// What the graph is built for, which decides what [`Job::output`] does.
    built_for: BuiltFor,
}

/// What a [`Job`] is built for: one value, so a job cannot be both checked and run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BuiltFor {
    /// A run in this process: outputs are locked, prepared and published.
    Run,
    /// `savepoint check` only: nothing runs, so outputs are neither locked nor prepared.
    Check,
    /// A cluster's worker: its coordinator locked and prepared the outputs, which it
    /// publishes; the worker's sinks only write into their staging folders.
    Worker,
}

impl Deref for Job {
    type Target = StreamEnvironment;

    fn deref(&self) -> &StreamEnvironment {
        &self.env
    }
}

impl Job {
    /// An empty job on `env`, built for `built_for`.
    fn new(env: StreamEnvironment, built_for: BuiltFor) -> Job {
        Job {
            env,
            outputs: Vec::new(),
            verify: None,
            before_publish: Vec::new(),
            notes: Vec::new(),
            expected_records: None,
            built_for,
        }
    }

    /// The environment the graph is built on (also reachable through `Deref`).
    pub fn env(&self) -> &StreamEnvironment {
        &self.env
    }

    /// Declares an output folder that appears only if the job succeeds, and returns the
    /// hidden staging folder the job's sinks must write into instead. On success the
    /// staging folder is renamed to `dir` (with a `_SUCCESS` marker). An existing `dir` is
    /// replaced only if it is a previous Weir output or empty.
    ///
    /// The staging folder survives every way a run can end short of success (a failure,
    /// a SIGKILL, a stop with a savepoint), and a run that restores (`--restore`) continues
    /// the one it finds: whatever a sink committed there with a checkpoint (the part files
    /// of a [`FileSink`](crate::connectors::files::FileSink), say) is exactly what the
    /// restored run builds on, so nothing committed is ever thrown away. Only a fresh start
    /// (no `--restore`) clears it, since that run computes everything again. There is no
    /// variant that clears on restore: that one would lose committed output.
    pub fn output(&mut self, dir: impl Into<PathBuf>) -> Result<PathBuf, BoxError> {
        let dir = dir.into();
        if self.built_for == BuiltFor::Check {
            // Nothing runs: leave the folder (maybe a running job's) alone.
            return output::staging_dir(&dir).map_err(Into::into);
        }
        if self.built_for == BuiltFor::Worker {
            // The coordinator owns the output; on another host the folder may not exist.
            let staging = output::staging_dir(&dir)?;
            std::fs::create_dir_all(&staging).map_err(|e| {
                format!(
                    "cannot create the output's staging folder {}: {e}",
                    staging.display()
                )
            })?;
            return Ok(staging);
        }
        let restoring = self.env.config().restore != crate::api::config::RestoreFrom::Nothing;
        let lock = output::lock(&dir)?;
        let staging = output::prepare_resumable(&dir, restoring)?;
        self.outputs.push(OutputDir {
            staging: staging.clone(),
            dir,
            _lock: lock,
        });
        Ok(staging)
    }

    /// Runs `hook` after a successful run, before the outputs are published: to turn what
    /// the sinks committed into the final files (merge part files, add a header). An error
    /// fails the run (exit 1) and nothing is published.
    pub fn before_publish(
        &mut self,
        hook: impl FnOnce(&JobResult) -> Result<(), BoxError> + 'static,
    ) {
        self.before_publish.push(Box::new(hook));
    }

    /// Checks the result after a successful run (after outputs are published): a
    /// [`Verdict::Wrong`] makes the program exit 3, an error exit 1. Skipped (and said so)
    /// when the job was stopped with a savepoint before the end of its input.
    pub fn verify(
        &mut self,
        check: impl FnOnce(&JobResult) -> Result<Verdict, BoxError> + 'static,
    ) {
        self.verify = Some(Box::new(check));
    }

    /// Adds a line to the end of the run summary (where a sink's output went, say).
    pub fn summary_line(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    /// About how many records a clean run's tasks process in total (a record counts at
    /// every task it enters), so `--inject-failures` plans its failures over the first half
    /// of the run and leaves the second half for failures that wait for a checkpoint.
    /// Default [`DEFAULT_EXPECTED_RECORDS`].
    pub fn expect_records(&mut self, records: u64) {
        self.expected_records = Some(records);
    }
}

/// Turns a job into a command-line program; see the module docs.
pub struct Runner {
    name: String,
    about: Option<String>,
    bin_name: Option<String>,
    args: Option<Vec<OsString>>,
}

impl Runner {
    /// A runner for the job `name`: the default job name (its checkpoint folder), the
    /// summary's label, and the program's name in `--help`.
    pub fn new(name: impl Into<String>) -> Self {
        Runner {
            name: name.into(),
            about: None,
            bin_name: None,
            args: None,
        }
    }

    /// The one-line description `--help` shows.
    pub fn about(mut self, text: impl Into<String>) -> Self {
        self.about = Some(text.into());
        self
    }

    /// How `--help` and usage errors name the program (default: the runner's name).
    pub fn bin_name(mut self, name: impl Into<String>) -> Self {
        self.bin_name = Some(name.into());
        self
    }

    /// Parses these arguments instead of the process's (the first is the program's name,
    /// as in [`std::env::args_os`]): for tests, and programs that dispatch to several jobs.
    pub fn args<I, T>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        self.args = Some(args.into_iter().map(Into::into).collect());
        self
    }

    /// Parses the flags, builds the job with `build`, runs it with everything listed in the
    /// module docs, and returns the exit code for `main` to return.
    pub fn run<A, F>(self, build: F) -> ExitCode
    where
        A: Args,
        F: FnOnce(&mut Job, &A) -> Result<(), BoxError>,
    {
        quiet_panics();
        #[cfg(feature = "cluster")]
        if let Some(worker) = self.worker_form() {
            return match worker {
                Ok((runner, args)) => {
                    let build = std::cell::RefCell::new(Some(build));
                    cluster::serve_worker(&args, &|job_args: &[String]| {
                        let build = build.borrow_mut().take().ok_or(
                            "a worker builds its job once, from its first deploy's arguments",
                        )?;
                        runner.with_args(job_args).build_for_worker(build)
                    })
                }
                Err(code) => code,
            };
        }
        let (runner, check) = match self.split_savepoint_check() {
            Ok(split) => split,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        let (flags, args) = match runner.parse::<A>() {
            Ok(parsed) => parsed,
            Err(code) => return code,
        };
        let outcome = match &check {
            Some(path) => check::check_savepoint(&runner, &flags, &args, build, path),
            None => runner.execute(&flags, &args, build),
        };
        match outcome {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {}", describe(&*e));
                if is_usage(&*e) {
                    ExitCode::from(2)
                } else {
                    ExitCode::FAILURE
                }
            }
        }
    }

    /// The runner's flags and the job's, or the exit code after clap printed help, a
    /// version or a usage error (status 2, naming the flag).
    fn parse<A: Args>(&self) -> Result<(RunFlags, A), ExitCode> {
        let mut cmd = A::augment_args(clap::Command::new(self.name.clone()));
        // The job's description (its args struct's doc comment), not the runner flags'.
        let (about, long_about) = (cmd.get_about().cloned(), cmd.get_long_about().cloned());
        cmd = RunFlags::augment_args(cmd)
            .about(clap::builder::Resettable::from(about))
            .long_about(clap::builder::Resettable::from(long_about));
        if let Some(b) = &self.bin_name {
            cmd = cmd.bin_name(b.clone());
        }
        if let Some(a) = &self.about {
            cmd = cmd
                .about(a.clone())
                .long_about(clap::builder::Resettable::<clap::builder::StyledStr>::Reset);
        }
        let args = self
            .args
            .clone()
            .unwrap_or_else(|| std::env::args_os().collect());
        let parsed = cmd
            .try_get_matches_from(args)
            .and_then(|m| Ok((RunFlags::from_arg_matches(&m)?, A::from_arg_matches(&m)?)));
        parsed.map_err(|e| {
            let _ = e.print();
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
        })
    }

    /// Runs the built job: here, or as the coordinator of `--workers N`.
    fn execute_env(
        &self,
        env: StreamEnvironment,
        flags: &RunFlags,
    ) -> crate::error::Result<JobResult> {
        #[cfg(feature = "cluster")]
        let cluster = (flags.cluster.run(&self.all_args()))
            .map_err(|e| crate::error::Error::Cluster(e.to_string()))?;
        #[cfg(feature = "cluster")]
        if let Some(run) = cluster {
            let n = run.workers;
            let tls = if run.tls.is_some() {
                " (mutual TLS)"
            } else {
                ""
            };
            return crate::cluster::coordinator::run::execute(env, run, |addr| {
                eprintln!(
                    "weir: coordinator listening on {addr}{tls} — waiting for {n} worker(s) \
                     (start each with `worker --coordinator {addr}`, the cluster token and \
                     the TLS flags if any)"
                );
            });
        }
        let _ = flags;
        env.execute()
    }

    /// The program's whole command line, as parsed.
    fn all_args(&self) -> Vec<OsString> {
        self.args
            .clone()
            .unwrap_or_else(|| std::env::args_os().collect())
    }

    /// `PROGRAM worker [flags]`: the worker's flags and this runner (to build each deploy's
    /// job), or the exit code after clap printed help or a usage error; `None` for any
    /// other command line.
    #[cfg(feature = "cluster")]
    fn worker_form(&self) -> Option<Result<(Runner, cluster::WorkerArgs), ExitCode>> {
        use clap::FromArgMatches;
        let args = self.all_args();
        if args.get(1).and_then(|a| a.to_str()) != Some("worker") {
            return None;
        }
        let name = format!("{} worker", self.bin_name.as_deref().unwrap_or(&self.name));
        let cmd = cluster::WorkerArgs::augment_args(clap::Command::new(name.clone()))
            .bin_name(name)
            .about("Run the subtasks a cluster's coordinator deploys (issue 24)");
        let parsed = cmd
            .try_get_matches_from(&args[1..])
            .and_then(|m| cluster::WorkerArgs::from_arg_matches(&m));
        Some(match parsed {
            Ok(w) => Ok((
                Runner {
                    name: self.name.clone(),
                    about: self.about.clone(),
                    bin_name: self.bin_name.clone(),
                    args: None,
                },
                w,
            )),
            Err(e) => {
                let _ = e.print();
                Err(ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2)))
            }
        })
    }

    /// This runner with the command line `args` (the first is the program's name).
    #[cfg(feature = "cluster")]
    fn with_args(&self, args: &[String]) -> Runner {
        Runner {
            name: self.name.clone(),
            about: self.about.clone(),
            bin_name: self.bin_name.clone(),
            args: Some(args.iter().map(OsString::from).collect()),
        }
    }

    /// Builds the job as a cluster's worker does, from this runner's arguments (those its
    /// coordinator deployed): the flags parsed and checked, the graph built; no output is
    /// locked or prepared (the coordinator did that) and nothing runs.
    pub fn build_for_worker<A, F>(self, build: F) -> Result<StreamEnvironment, BoxError>
    where
        A: Args,
        F: FnOnce(&mut Job, &A) -> Result<(), BoxError>,
    {
        use clap::FromArgMatches;
        let cmd = RunFlags::augment_args(A::augment_args(clap::Command::new(self.name.clone())));
        let m = cmd
            .try_get_matches_from(self.all_args())
            .map_err(|e| UsageError::new(e.to_string()))?;
        let flags = RunFlags::from_arg_matches(&m).map_err(|e| UsageError::new(e.to_string()))?;
        let args = A::from_arg_matches(&m).map_err(|e| UsageError::new(e.to_string()))?;
        let (max_parallelism, _) = flags.check(&self.name)?;
        let mut job = Job::new(
            StreamEnvironment::new(flags.config(&self.name, max_parallelism)),
            BuiltFor::Worker,
        );
        build(&mut job, &args)?;
        Ok(job.env)
    }

    fn execute<A, F>(&self, flags: &RunFlags, args: &A, build: F) -> Result<ExitCode, BoxError>
    where
        F: FnOnce(&mut Job, &A) -> Result<(), BoxError>,
    {
        // Resolved once: with --restore it reads the checkpoint's `_metadata`.
        let (max_parallelism, source) = flags.check(&self.name)?;
        let token = match flags.control.bind_addr() {
            Some(bind) => flags.control.token(bind.ip())?,
            None => None,
        };
        let mut job = Job::new(
            StreamEnvironment::new(flags.config(&self.name, max_parallelism)),
            BuiltFor::Run,
        );
        // Whatever ends the run short of success leaves the outputs' staging folders as
        // they are (`Job::output`): they hold what checkpoints committed.
        build(&mut job, args)?;
        let records = job.expected_records.unwrap_or(DEFAULT_EXPECTED_RECORDS);
        job.env.config_mut().failure_injection = flags.failure_injection(records);
        announce(job.env.config());
        match (max_parallelism, source) {
            (n, MaxParallelism::ForCache) => eprintln!(
                "weir: max parallelism {n} (the default with --state-cache-size: the bound \
                 drops whole key groups; fixed for the life of the job's state, pass \
                 --max-parallelism to choose)"
            ),
            (n, MaxParallelism::Restored) => {
                eprintln!("weir: max parallelism {n}, the restored checkpoint's")
            }
            _ => {}
        }
        let server = match flags.control.bind_addr() {
            None => None,
            Some(bind) => {
                match control::server::ControlServer::start(bind, token.clone(), job.env.control())
                {
                    Ok(server) => {
                        // One write, so that a reader of the log never sees half an
                        // address.
                        let addr = server.addr();
                        let line = format!(
                            "weir: control endpoint {addr} (weir status|savepoint|stop --job \
                             {addr}; dashboard http://{addr}/{}){}\n",
                            match (&token, &flags.control.control_token_file) {
                                (Some(t), None) => format!("?token={t}"),
                                _ => String::new(),
                            },
                            match (&token, &flags.control.control_token_file) {
                                (Some(t), None) => format!(" — token {t}"),
                                (Some(_), Some(f)) => format!(" — token from {}", f.display()),
                                (None, _) => String::new(),
                            }
                        );
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                        Some(server)
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        let cfg = job.env.config().clone();
        let progress = progress::Progress::start(job.env.metrics());
        let Job {
            env,
            outputs,
            verify,
            before_publish,
            notes,
            ..
        } = job;
        // Serves until the run returns, whichever way, and `--control-linger` after.
        let _serving = control::Serving::new(server, flags.control.control_linger);
        let result = self.execute_env(env, flags);
        progress.stop();
        let result = result?;
        if let Some(sp) = &result.stopped_with_savepoint {
            // A stopped job's output is not the job's result: it stays in staging, and
            // the run resumed from the savepoint continues it.
            progress::summary(&self.name, &cfg, &result, &[]);
            println!("stopped with savepoint {}", sp.display());
            println!("resume with: --restore {}", sp.display());
            for line in &notes {
                println!("{line}");
            }
            if verify.is_some() {
                println!("verify: skipped — the job was stopped before the end of its input");
            }
            return Ok(ExitCode::SUCCESS);
        }
        for hook in before_publish {
            hook(&result)?;
        }
        for o in &outputs {
            output::publish(&o.staging, &o.dir)?;
        }
        let published: Vec<PathBuf> = outputs.iter().map(|o| o.dir.clone()).collect();
        progress::summary(&self.name, &cfg, &result, &published);
        for line in &notes {
            println!("{line}");
        }
        let Some(check) = verify else {
            return Ok(ExitCode::SUCCESS);
        };
        Ok(match check(&result)? {
            Verdict::Correct(m) => {
                println!("verify: OK — {m}");
                ExitCode::SUCCESS
            }
            Verdict::Wrong(m) => {
                println!("verify: MISMATCH — {m}");
                ExitCode::from(3)
            }
        })
    }
}

/// The error and its causes on one line, each cause only when the message above it does
/// not already include it.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

/// Whether a [`UsageError`] is the error or one of its causes.
fn is_usage(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.downcast_ref::<UsageError>().is_some() {
            return true;
        }
        cur = c.source();
    }
    false
}

/// The first line on stderr: the job, its parallelism and where its checkpoints go.
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
