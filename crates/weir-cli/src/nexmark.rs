//! `weir nexmark generate`: Nexmark events as JSON lines;
//! `weir nexmark reference`: the plain reference evaluation of the Nexmark queries, as CSV.
//!
//! ```text
//! weir nexmark generate --events 1000000 --output events.jsonl [--tps 10000000]
//! weir nexmark reference --query q5,q7 --input events.jsonl --output results/
//! weir nexmark reference --query all --events 1000000 --output results/
//! ```
//!
//! The reference writes `DIR/<query>.csv` per query (see `weir_nexmark::reference` for
//! each query's semantics); the engine's Nexmark runs are checked against these files.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use weir_nexmark::csv::CsvWriter;
use weir_nexmark::generator::{Generator, GeneratorConfig, DEFAULT_BASE_TIME, DEFAULT_TPS};
use weir_nexmark::json::{write_events, EventReader};
use weir_nexmark::reference::{evaluate_many, Query};

use crate::connect::UsageError;

/// `weir nexmark …`
#[derive(Subcommand)]
pub enum NexmarkCommand {
    /// Write generated Nexmark events as JSON lines, one event a line.
    Generate(GenerateArgs),
    /// Evaluate queries with the plain single-threaded reference; writes DIR/<query>.csv.
    Reference(ReferenceArgs),
}

/// The generator's flags, shared by both subcommands.
#[derive(Args)]
pub struct GeneratorFlags {
    /// Events per second of event time (the benchmark's rate is 10 M).
    #[arg(long, default_value_t = DEFAULT_TPS)]
    tps: u64,
    /// The event time of event 0, in epoch milliseconds (default 2024-01-01T00:00:00Z).
    #[arg(long, default_value_t = DEFAULT_BASE_TIME)]
    base_time: i64,
}

impl GeneratorFlags {
    /// The generator these flags configure, or a usage error naming the flag.
    pub(crate) fn generator(&self) -> Result<Generator> {
        let cfg = GeneratorConfig {
            tps: self.tps,
            base_time: self.base_time,
            ..GeneratorConfig::default()
        };
        Generator::new(cfg).map_err(|e| UsageError::new(format!("--tps/--base-time: {e}")).into())
    }
}

/// Arguments of `weir nexmark generate`.
#[derive(Args)]
pub struct GenerateArgs {
    /// How many events to write.
    #[arg(long)]
    events: u64,
    /// The file to write (`-` for standard output).
    #[arg(long)]
    output: PathBuf,
    /// The number of the first event (to write a later part of the same stream).
    #[arg(long, default_value_t = 0)]
    offset: u64,
    #[command(flatten)]
    generator: GeneratorFlags,
}

/// Arguments of `weir nexmark reference`.
#[derive(Args)]
pub struct ReferenceArgs {
    /// The queries, comma-separated (q0,q1,q2,q3,q4,q5,q7,q8,q11), or `all`.
    #[arg(long)]
    query: String,
    /// Events as JSON lines (as `weir nexmark generate` writes them).
    #[arg(long, conflicts_with = "events", required_unless_present = "events")]
    input: Option<PathBuf>,
    /// Generate this many events instead of reading `--input`.
    #[arg(long)]
    events: Option<u64>,
    /// The folder for the CSV files (created if missing).
    #[arg(long)]
    output: PathBuf,
    #[command(flatten)]
    generator: GeneratorFlags,
}

/// Runs a `weir nexmark` subcommand.
pub fn run(command: NexmarkCommand) -> Result<ExitCode> {
    match command {
        NexmarkCommand::Generate(args) => generate(args),
        NexmarkCommand::Reference(args) => reference(args),
    }
}

fn generate(args: GenerateArgs) -> Result<ExitCode> {
    let generator = args.generator.generator()?;
    let started = Instant::now();
    let end = args
        .offset
        .checked_add(args.events)
        .ok_or_else(|| UsageError::new("--offset plus --events overflows; ask for fewer events"))?;
    let events = (args.offset..end).map(|n| generator.event(n));
    let written = if args.output == Path::new("-") {
        let stdout = io::stdout();
        let mut out = stdout.lock();
        let n = write_events(&mut out, events)?;
        out.flush()?;
        n
    } else {
        let file = File::create(&args.output).with_context(|| {
            format!(
                "cannot create {}: check that its folder exists and is writable",
                args.output.display()
            )
        })?;
        let mut out = BufWriter::new(file);
        let n = write_events(&mut out, events)
            .and_then(|n| out.flush().map(|_| n))
            .with_context(|| format!("writing {}", args.output.display()))?;
        n
    };
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "wrote {written} events to {} in {secs:.2} s ({:.0} events/s)",
        args.output.display(),
        written as f64 / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}

/// Parses `--query`: a comma-separated list or `all`; an unknown name is a usage error.
fn parse_queries(spec: &str) -> Result<Vec<Query>> {
    if spec.trim().eq_ignore_ascii_case("all") {
        return Ok(Query::ALL.to_vec());
    }
    let mut queries = Vec::new();
    for name in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let q: Query = name
            .parse()
            .map_err(|e| UsageError::new(format!("--query: {e}, or all")))?;
        if !queries.contains(&q) {
            queries.push(q);
        }
    }
    if queries.is_empty() {
        return Err(UsageError::new("--query is empty: name a query (e.g. q5) or all").into());
    }
    Ok(queries)
}

fn reference(args: ReferenceArgs) -> Result<ExitCode> {
    let queries = parse_queries(&args.query)?;
    fs::create_dir_all(&args.output)
        .with_context(|| format!("cannot create the folder {}", args.output.display()))?;
    let mut writers = Vec::with_capacity(queries.len());
    for q in &queries {
        let path = args.output.join(format!("{}.csv", q.name()));
        let file =
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        writers.push((path, CsvWriter::new(BufWriter::new(file), q.columns())?));
    }
    let started = Instant::now();
    let mut write_error: Option<io::Error> = None;
    let mut emit = |i: usize, row: Vec<weir_nexmark::csv::Value>| {
        if write_error.is_none() {
            if let Err(e) = writers[i].1.write_row(&row) {
                write_error = Some(e);
            }
        }
    };
    let (count, source) = match (&args.input, args.events) {
        (Some(input), _) => {
            let file = File::open(input).with_context(|| {
                format!("cannot open --input {}: check the path", input.display())
            })?;
            let reader = EventReader::new(BufReader::with_capacity(1 << 20, file));
            let n = evaluate_many(&queries, reader, &mut emit)
                .with_context(|| format!("reading {}", input.display()))?;
            (n, input.display().to_string())
        }
        (None, Some(n)) => {
            let generator = args.generator.generator()?;
            let events = (0..n).map(|i| Ok::<_, std::convert::Infallible>(generator.event(i)));
            let count = evaluate_many(&queries, events, &mut emit).unwrap_or_else(|e| match e {});
            (count, format!("{n} generated events"))
        }
        (None, None) => {
            return Err(UsageError::new("give --input FILE or --events N").into());
        }
    };
    if let Some(e) = write_error {
        return Err(e).context(format!("writing into {}", args.output.display()));
    }
    let secs = started.elapsed().as_secs_f64();
    for (path, writer) in writers {
        let rows = writer
            .finish()
            .with_context(|| format!("writing {}", path.display()))?;
        println!("{rows} rows -> {}", path.display());
    }
    eprintln!(
        "evaluated {} over {count} events from {source} in {secs:.2} s",
        queries
            .iter()
            .map(|q| q.name())
            .collect::<Vec<_>>()
            .join(",")
    );
    Ok(ExitCode::SUCCESS)
}
