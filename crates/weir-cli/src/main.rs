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
//! weir savepoint check SAVEPOINT keyed-count --keys 1000   # before a deploy: exit 1 if a run would refuse
//! weir stop --job 127.0.0.1:PORT [--drain]    # then: weir run … --restore <savepoint>
//! weir transactions list --checkpoint-dir weir-checkpoints --sink postgres://weir@HOST/DB/TABLE
//! weir transactions settle --checkpoint-dir weir-checkpoints --sink postgres://… [--yes] [--abort-orphans]
//! weir nexmark generate --events 1000000 --output events.jsonl
//! weir nexmark reference --query q5 --input events.jsonl --output results
//! weir run nexmark --query q1 --events 1000000 --output q1-out --verify
//! weir run keyed-count --parallelism 2 --workers 2 --cluster-listen 127.0.0.1:6123 …
//! weir worker --coordinator 127.0.0.1:6123        # twice: the job runs on both
//! ```
//!
//! Every error is one line naming the cause and the way out; the exit code is 0 on
//! success, 1 on an error, 2 on bad flags, 3 when `--verify` finds a wrong count.

mod builtin;
mod checkpoints;
mod connect;
mod control;
mod count_check;
mod inspect;
mod jobs;
mod nexmark;
mod nexmark_job;
mod output;
#[cfg(test)]
mod test_alloc;
mod transactions;
mod window_sum;

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

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
enum Command {
    /// Run a built-in job (`weir run JOB --help` lists its flags).
    #[command(subcommand)]
    Run(Job),
    /// Inspect the state in a checkpoint.
    #[command(subcommand)]
    State(inspect::StateCommand),
    /// List checkpoints: complete, incomplete or unreadable.
    #[command(subcommand)]
    Checkpoints(checkpoints::CheckpointsCommand),
    /// Take a savepoint of a running job; prints its folder. (`weir savepoint check PATH JOB
    /// [job flags]` holds a savepoint against a job instead, without running it.)
    Savepoint(control::client::SavepointArgs),
    /// Stop a running job with a savepoint; prints its folder.
    Stop(control::client::StopArgs),
    /// Take a checkpoint of a running job now; prints its folder.
    Checkpoint(control::client::CheckpointArgs),
    /// Show a running job's state, parallelism and latest checkpoints.
    Status(control::client::StatusArgs),
    /// Nexmark: generate events, evaluate the reference queries.
    #[command(subcommand)]
    Nexmark(nexmark::NexmarkCommand),
    /// List or settle the transactions a job's 2PC sinks left open, as its latest
    /// completed checkpoint says.
    #[command(subcommand)]
    Transactions(transactions::TransactionsCommand),
    /// Run the subtasks of whatever job a coordinator (`weir run JOB … --workers N
    /// --cluster-listen ADDR`) deploys, until the job ends.
    #[cfg(feature = "cluster")]
    Worker(weir::runner::cluster::WorkerArgs),
    /// Ask a coordinator's cluster port or a worker's exchange for its gRPC health status;
    /// exit 0 only if it is SERVING (a health check for compose files and Kubernetes exec
    /// probes, TLS included).
    #[cfg(feature = "cluster")]
    Health(weir::runner::health::HealthArgs),
}

/// The built-in jobs. Their flags are parsed by the runner (`weir::runner`), as any job's:
/// here they are only passed on.
#[derive(Subcommand)]
enum Job {
    /// Count events per key: event i has key i % K; writes `key,count` lines.
    #[command(disable_help_flag = true)]
    KeyedCount(JobFlags),
    /// Count words in text files; writes `word,count` lines.
    #[command(disable_help_flag = true)]
    Wordcount(JobFlags),
    /// Run a Nexmark query (q0 to q5, q7, q8, q11) on generated events or JSON lines; writes its CSV.
    #[command(disable_help_flag = true)]
    Nexmark(JobFlags),
    /// Sum per key in 1 s tumbling event-time windows (workload W2); writes
    /// `window_end,key,sum` lines.
    #[command(disable_help_flag = true)]
    WindowSum(JobFlags),
}

/// Everything after `weir run JOB`, for the runner to parse.
#[derive(Args)]
struct JobFlags {
    /// The job's flags (`--help` lists them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    flags: Vec<OsString>,
}

fn main() -> ExitCode {
    cap_malloc_arenas();
    // `weir savepoint check PATH JOB [job flags]`: the job's flags are the runner's to
    // parse, like `weir run JOB`'s (beside `weir savepoint --job ADDR`, which clap parses).
    let argv: Vec<OsString> = std::env::args_os().collect();
    if argv.len() > 2 && argv[1] == "savepoint" && argv[2] == "check" {
        return builtin::check_savepoint(&argv[3..]);
    }
    let cli = Cli::parse();
    let r: Result<ExitCode> = match cli.command {
        Command::Run(Job::KeyedCount(a)) => return builtin::run("keyed-count", a.flags),
        Command::Run(Job::Wordcount(a)) => return builtin::run("wordcount", a.flags),
        Command::Run(Job::Nexmark(a)) => return builtin::run("nexmark", a.flags),
        Command::Run(Job::WindowSum(a)) => return builtin::run("window-sum", a.flags),
        Command::State(c) => inspect::run(c),
        Command::Checkpoints(c) => checkpoints::run(c),
        Command::Savepoint(a) => control::client::savepoint(a),
        Command::Stop(a) => control::client::stop(a),
        Command::Checkpoint(a) => control::client::checkpoint(a),
        Command::Status(a) => control::client::status(a),
        Command::Nexmark(c) => nexmark::run(c),
        Command::Transactions(c) => transactions::run(c),
        #[cfg(feature = "cluster")]
        Command::Worker(a) => {
            return weir::runner::cluster::serve_worker(&a, &builtin::build_for_worker)
        }
        #[cfg(feature = "cluster")]
        Command::Health(a) => return weir::runner::health::check_health(&a),
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

/// Caps glibc's malloc at 2 arenas (unless `MALLOC_ARENA_MAX` says otherwise), before any
/// thread starts. glibc gives threads that allocate at once arenas of their own, up to 8 per
/// core, and memory freed in one stays there: a disk-backend job's threads (tasks, snapshot
/// writers, the LSM's workers) pass write batches, key lists and checkpoint buffers between
/// them, and its resident memory kept growing past what the heap held — W1 on the disk
/// backend at 20 M keys peaked at 1.59 GB with glibc's default against 1.20 GB with 2 arenas,
/// for the same CPU time (BENCHMARKS.md, 2026-12-07). Flink's images switched to jemalloc
/// for the same growth under RocksDB; the arena cap gets most of it without a second
/// allocator in every build.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn cap_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    // SAFETY: mallopt only sets one of malloc's tunables; nothing else runs yet.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Elsewhere the allocator is not glibc's: nothing to cap.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn cap_malloc_arenas() {}
