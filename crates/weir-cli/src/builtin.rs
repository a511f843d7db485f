//! `weir run keyed-count | wordcount | nexmark`: the built-in jobs, run by the same
//! [`weir::runner::Runner`] as any user's job. This module holds their own flags (what they
//! read and write, `--verify`) and builds their graphs ([`crate::jobs`]); the runner brings
//! every operational flag, the control endpoint, progress, summary and exit codes.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::{Args, ValueEnum};
use weir::prelude::*;
use weir::runner::{BoxError, Job, Runner, UsageError, Verdict};

use crate::connect::{self, Prepared};
use crate::{jobs, output};

/// The built-in jobs, as `weir run` names them.
pub const JOBS: [(&str, &str); 4] = [
    (
        "keyed-count",
        "Count events per key: event i has key i % K; writes `key,count` lines.",
    ),
    (
        "wordcount",
        "Count words in text files; writes `word,count` lines.",
    ),
    (
        "window-sum",
        "Sum per key in 1 s tumbling event-time windows (workload W2); writes \
         `window_end,key,sum` lines.",
    ),
    (
        "nexmark",
        "Run a Nexmark query (q0 to q5, q7, q8, q11) on generated events or JSON lines; writes its CSV.",
    ),
];

/// Runs the built-in job `name` with `flags` (what followed `weir run NAME`).
pub fn run(name: &str, flags: Vec<OsString>) -> ExitCode {
    let bin = format!("weir run {name}");
    dispatch(
        name,
        bin.clone(),
        std::iter::once(OsString::from(bin)).chain(flags).collect(),
    )
}

/// `weir savepoint check PATH JOB [job flags]`: holds the savepoint or checkpoint at PATH
/// against the built-in job JOB built with these flags (the runner's `savepoint check`,
/// issue 26); `rest` is what followed `weir savepoint check`.
pub fn check_savepoint(rest: &[OsString]) -> ExitCode {
    let names: Vec<&str> = JOBS.iter().map(|(n, _)| *n).collect();
    let job = rest.get(1).and_then(|j| j.to_str());
    let (Some(path), Some(name)) = (rest.first(), job.filter(|j| names.contains(j))) else {
        eprintln!(
            "error: usage: weir savepoint check PATH JOB [job flags], where JOB is one of {} \
             and the flags are those the job would run with (`weir run JOB --help`)",
            names.join(", ")
        );
        return ExitCode::from(2);
    };
    let bin = format!("weir run {name}");
    let args = [
        OsString::from(bin.clone()),
        "savepoint".into(),
        "check".into(),
        path.clone(),
    ]
    .into_iter()
    .chain(rest[2..].iter().cloned())
    .collect();
    dispatch(name, bin, args)
}

/// Runs built-in job `name` through the runner with the whole command line `args`.
fn dispatch(name: &str, bin: String, args: Vec<OsString>) -> ExitCode {
    let about = JOBS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, a)| *a);
    let runner = Runner::new(name).bin_name(bin).about(about).args(args);
    match name {
        "keyed-count" => runner.run(keyed_count),
        "nexmark" => runner.run(crate::nexmark_job::build),
        "window-sum" => runner.run(crate::window_sum::build),
        _ => runner.run(wordcount),
    }
}

/// Builds the built-in job a cluster's coordinator deployed (`weir worker`, issue 24) from
/// the coordinator's arguments, whose first is `weir run NAME`.
#[cfg(feature = "cluster")]
pub fn build_for_worker(args: &[String]) -> Result<StreamEnvironment, BoxError> {
    let bin = args.first().map_or("", String::as_str);
    let Some(name) = bin
        .strip_prefix("weir run ")
        .filter(|n| JOBS.iter().any(|(j, _)| j == n))
    else {
        return Err(format!(
            "the coordinator runs '{bin}', which is no built-in job of this weir (`weir worker` \
             runs the jobs of `weir run`; a job of your own runs as `YOUR-PROGRAM worker`)"
        )
        .into());
    };
    let runner = Runner::new(name).bin_name(bin).args(args);
    match name {
        "keyed-count" => runner.build_for_worker(keyed_count),
        "nexmark" => runner.build_for_worker(crate::nexmark_job::build),
        "window-sum" => runner.build_for_worker(crate::window_sum::build),
        _ => runner.build_for_worker(wordcount),
    }
}

/// Where the counts go when there is no `--sink`.
#[derive(Args, Debug)]
pub struct OutputArgs {
    /// Folder for the final output (published only when the job succeeds).
    #[arg(long, default_value = "weir-output")]
    pub(crate) output: PathBuf,
    /// Write no output (benchmarks).
    #[arg(long)]
    pub(crate) discard_output: bool,
}

/// The flags of `weir run keyed-count` besides the runner's.
#[derive(Args, Debug)]
pub struct KeyedCountArgs {
    /// Number of events (0..N).
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Number of distinct keys.
    #[arg(long, default_value_t = 1000, value_parser = positive_u64)]
    keys: u64,
    /// Limit the generator to about this many events per second in total.
    #[arg(long, value_parser = parse_rate)]
    rate: Option<f64>,
    /// Limit the counting stage (and the sink chained to it) to about this many events per
    /// second in total: a slow sink that backs the sources up, for checkpoints under
    /// backpressure (`--unaligned`, benchmark W3).
    #[arg(long, value_parser = parse_sink_rate)]
    sink_rate: Option<f64>,
    /// Emit the final counts at end of input (`final`) or `(key, count)` for every event.
    #[arg(long, value_enum, default_value_t = Emit::Final)]
    emit: Emit,
    /// (Tests) hold each generator subtask after this many events until --release-file
    /// exists, so a kill lands mid-input whatever the machine's speed. Several ascending
    /// counts (`20000,20100`) hold it at each in turn, each released by its own file.
    #[arg(long, hide = true, requires = "release_file", value_delimiter = ',')]
    hold_at: Vec<u64>,
    /// (Tests) the file whose creation releases the generator held by --hold-at (one per
    /// count, in the same order).
    #[arg(long, hide = true, requires = "hold_at", value_delimiter = ',')]
    release_file: Vec<PathBuf>,
    /// (Tests) give each key a second state of this many bytes besides its count, rewritten
    /// with every event from the key and its count (checked by --verify): a state larger
    /// than memory from few events.
    #[arg(long, hide = true, default_value_t = 0)]
    value_bytes: usize,
    /// (Tests) run the generator at this parallelism instead of --parallelism, so that on
    /// a cluster a worker may run counting subtasks and no source.
    #[arg(long, hide = true, value_parser = clap::value_parser!(u32).range(1..))]
    source_parallelism: Option<u32>,
    /// Run in event time: stamp each generated event with the wall clock and follow it with
    /// watermarks 100 ms behind (a `timestamps` operator chained to the generator). The
    /// counts are the same; the dashboard and /metrics show the watermark lag.
    #[arg(long)]
    event_time: bool,
    /// Check what was written (--output, or a files: sink's committed files) against the
    /// exact truth, else the final state (--discard-output, postgres/nats sinks); exit 3 on
    /// a mismatch.
    #[arg(long)]
    verify: bool,
    #[command(flatten)]
    out: OutputArgs,
    #[command(flatten)]
    connect: connect::KeyedCountConnectors,
}

/// The flags of `weir run wordcount` besides the runner's.
#[derive(Args, Debug)]
pub struct WordcountArgs {
    /// Text files or folders to read.
    #[arg(long, required_unless_present = "source", num_args = 1..)]
    input: Vec<PathBuf>,
    /// Longest line accepted, in bytes; a longer one fails the job naming the file and the
    /// line's offset.
    #[arg(long, default_value_t = 64 << 20, value_parser = positive_u64)]
    max_line_length: u64,
    /// Limit the counting stage to about this many words per second in total: a slow
    /// count that backs the reading up (a long run over a small input, to stop, savepoint
    /// or kill mid-input).
    #[arg(long, value_parser = parse_sink_rate)]
    sink_rate: Option<f64>,
    #[command(flatten)]
    out: OutputArgs,
    #[command(flatten)]
    connect: connect::WordcountConnectors,
}

/// What keyed-count emits.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
enum Emit {
    Final,
    Updates,
}

fn positive_u64(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number of 1 or more")),
    }
}

/// `--rate`: a positive number of events per second.
pub(crate) fn parse_rate(s: &str) -> Result<f64, String> {
    positive_rate(s, "--rate")
}

/// `--sink-rate`: the same, its error naming its own flag.
pub(crate) fn parse_sink_rate(s: &str) -> Result<f64, String> {
    positive_rate(s, "--sink-rate")
}

fn positive_rate(s: &str, flag: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(r),
        _ => Err(format!(
            "'{s}' is not a positive number of events per second (leave {flag} out for no \
             limit)"
        )),
    }
}

/// The CLI's error (its causes on one line) for the runner, still a [`UsageError`] (exit 2)
/// when it was one.
fn boxed(e: anyhow::Error) -> BoxError {
    let line = format!("{e:#}");
    if e.downcast_ref::<UsageError>().is_some() {
        Box::new(UsageError::new(line))
    } else {
        line.into()
    }
}

/// What the connectors need to know about a run before it starts.
fn run_info(cfg: &JobConfig) -> connect::RunInfo<'_> {
    connect::RunInfo {
        job: &cfg.name,
        parallelism: cfg.parallelism,
        restoring: cfg.restore != RestoreFrom::Nothing,
    }
}

/// Where the counts go: the `--sink`, else the published `--output`, else nowhere.
fn output(job: &mut Job, prepared: &Prepared, out: &OutputArgs) -> Result<jobs::Output, BoxError> {
    Ok(match prepared.output() {
        Some(o) => o,
        None if out.discard_output => jobs::Output::Discard,
        None => jobs::Output::Files(job.output(&out.output)?),
    })
}

fn keyed_count(job: &mut Job, args: &KeyedCountArgs) -> Result<(), BoxError> {
    let src = args.connect.source.as_deref();
    if args.event_time && src.is_some() {
        return Err(UsageError::new(
            "--event-time stamps the generator's events, and a --source has its own: drop \
             --event-time (or --source to use the generator)",
        )
        .into());
    }
    if args.verify && src.is_some() {
        return Err(UsageError::new(
            "--verify compares the counts with the generator's events 0..N, and a --source \
             has no known truth: drop --verify and check the sink's output instead",
        )
        .into());
    }
    if args.hold_at.len() != args.release_file.len()
        || args.hold_at.windows(2).any(|w| w[0] >= w[1])
    {
        return Err(UsageError::new(
            "--hold-at takes ascending counts and --release-file one file per count, in the \
             same order (e.g. --hold-at 100,200 --release-file go1,go2)",
        )
        .into());
    }
    let prepared =
        connect::prepare::<u64>(src, &args.connect.sink, &run_info(job.config())).map_err(boxed)?;
    let events = prepared.source_messages.unwrap_or(args.events);
    // The engine counts a record at every task it passes (here the source's and the
    // counter's): about 2 × events in a clean run.
    job.expect_records(events.saturating_mul(2));
    let out = output(job, &prepared, &args.out)?;
    let target = verify_target(&prepared, &args.out);
    let verdicts: jobs::StateVerdicts = Arc::new(Mutex::new(Default::default()));
    let in_state =
        (args.verify && matches!(target, VerifyTarget::State(_))).then(|| verdicts.clone());
    let input = match src {
        Some(_) => jobs::Events::Connector(&prepared),
        None => jobs::Events::Generator {
            n: args.events,
            rate: args.rate,
            hold: (args.hold_at.iter().copied())
                .zip(args.release_file.iter().cloned())
                .collect(),
            parallelism: args.source_parallelism,
            event_time: args.event_time,
        },
    };
    jobs::keyed_count(
        job,
        input,
        args.keys,
        jobs::CountOptions {
            emit_updates: args.emit == Emit::Updates,
            sink_rate: args.sink_rate,
            value_bytes: args.value_bytes,
        },
        out,
        in_state,
    )
    .map_err(boxed)?;
    if let Some(line) = prepared.summary_line() {
        job.summary_line(line);
    }
    if args.verify {
        let emitted = match args.emit {
            Emit::Final => output::Emitted::Final,
            Emit::Updates => output::Emitted::Updates,
        };
        let (events, keys, parallelism) = (args.events, args.keys, job.config().parallelism);
        job.verify(move |_| {
            let verdict = match &target {
                VerifyTarget::Files(dir, format) => {
                    output::verify_keyed_count(dir, *format, events, keys, emitted)
                        .map_err(boxed)?
                }
                VerifyTarget::State(sink) => {
                    let v = verdicts.lock().unwrap_or_else(|p| p.into_inner());
                    judge_state(&v, parallelism, keys.min(events)).map(|m| match sink {
                        Some(sink) => {
                            format!("{m} (the {sink} sink's rows are not read back: query them)")
                        }
                        None => m,
                    })
                }
            };
            Ok(match verdict {
                Ok(m) => Verdict::Correct(m),
                Err(m) => Verdict::Wrong(m),
            })
        });
    }
    Ok(())
}

fn wordcount(job: &mut Job, args: &WordcountArgs) -> Result<(), BoxError> {
    let prepared = connect::prepare::<String>(
        args.connect.source.as_deref(),
        &args.connect.sink,
        &run_info(job.config()),
    )
    .map_err(boxed)?;
    let max_line = usize::try_from(args.max_line_length).unwrap_or(usize::MAX);
    let (lines, records) = prepared
        .wordcount_lines(&args.input, max_line)
        .map_err(boxed)?;
    job.expect_records(records);
    let out = output(job, &prepared, &args.out)?;
    jobs::wordcount(job, lines, out, args.sink_rate).map_err(boxed)?;
    if let Some(line) = prepared.summary_line() {
        job.summary_line(line);
    }
    Ok(())
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

fn verify_target(prepared: &Prepared, out: &OutputArgs) -> VerifyTarget {
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
        _ if !out.discard_output => {
            VerifyTarget::Files(out.output.clone(), output::LineFormat::Csv)
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

    #[test]
    fn rates_must_be_positive() {
        assert_eq!(parse_rate("2.5"), Ok(2.5));
        for bad in ["0", "-1", "inf", "NaN", "x"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
}
