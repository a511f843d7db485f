//! Counts events per key, exactly once through failures, kills, stops and rescales.
use weir::connectors::files::LinesWith;
use weir::prelude::*;
use weir::runner::{clap, BoxError, Job, Runner};

/// Counts events per key (event i has key i % --keys); writes `key,count` per event.
#[derive(clap::Args)]
pub struct Args {
    /// Events to generate.
    #[arg(long, default_value_t = 1_000_000)]
    pub events: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Events per second over all subtasks (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Folder for the counts: part files appear as checkpoints complete.
    #[arg(long, default_value = "hello-output")]
    pub output: std::path::PathBuf,
}
/// Builds the job's graph from its flags (the runner parsed them with its own).
pub fn build(job: &mut Job, args: &Args) -> Result<(), BoxError> {
    let (keys, events) = (args.keys, GeneratorSource::new(args.events));
    let line = |r: &(u64, u64), l: &mut String| l.push_str(&format!("{},{}", r.0, r.1));
    job.expect_records(args.events.saturating_mul(2)); // an event enters 2 tasks
    let counts = job
        .add_source("events", events.with_rate(args.rate))
        .uid("events");
    let counts = counts
        .map(move |i: u64| (i % keys, 1u64))
        .key_by(|r: &(u64, u64)| r.0);
    let counts = counts.reduce(|a, b| (a.0, a.1 + b.1)).uid("count");
    let sink = TwoPhaseCommit::new(FileSink::new(&args.output, LinesWith::new(line)));
    counts.add_sink("out", sink).uid("out");
    Ok(())
}
fn main() -> std::process::ExitCode {
    Runner::new("hello").run(build)
}
