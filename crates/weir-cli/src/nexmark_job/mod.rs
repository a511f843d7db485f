//! `weir run nexmark --query qN`: the Nexmark queries in the engine, run by the same
//! [`weir::runner::Runner`] as every built-in job (all of keyed-count's operational flags:
//! checkpoints, restore, restarts, failure injection, control).
//!
//! ```text
//! weir run nexmark --query q1 --events 10000000 --parallelism 2 --output q1-out --verify
//! weir run nexmark --query q2 --input events.jsonl --output q2-out
//! weir run nexmark --query q7 --events 10000000 --discard-output
//! ```
//!
//! * Input: `--events N` from the generator, or `--input FILE` of JSON lines as
//!   `weir nexmark generate` writes them; both replay exactly from a checkpoint
//!   ([`source`]). The windowed queries (q7, q8, q11) give the events timestamps and the
//!   DDL's watermark, `dateTime` minus 4 s ([`event_time`]).
//! * Output: `--output DIR` gets `DIR/<query>.csv`, the same CSV (header, row format) as
//!   `weir nexmark reference` writes. Rows go through an exactly-once [`FileSink`] into the
//!   hidden staging folder, which a run that restores (`--restore`) continues; when the job
//!   succeeds the committed parts are merged under the header and the folder is published.
//!   `--discard-output` writes nothing.
//! * `--verify` evaluates the query with the plain reference evaluator over the same events
//!   and compares the published CSV with it as multisets of rows; exit 3 on a difference.

mod event_time;
mod q11;
mod q3;
mod q4;
mod q5;
mod q7;
mod q8;
mod queries;
mod source;

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter};
use std::path::{Path, PathBuf};

use clap::Args;
use weir::connectors::files::Encoder;
use weir::prelude::*;
use weir::runner::{BoxError, Job, UsageError, Verdict};
use weir_nexmark::csv::CsvWriter;
use weir_nexmark::json::EventReader;
use weir_nexmark::reference::{compare_csv, evaluate_many};
use weir_nexmark::{Event, Query};

use crate::nexmark::GeneratorFlags;
use event_time::with_event_time;
use queries::{ResultRow, RUNNABLE};

/// The flags of `weir run nexmark` besides the runner's.
#[derive(Args)]
pub struct NexmarkArgs {
    /// The query to run: q0, q1, q2, q3, q4, q5, q7, q8 or q11.
    #[arg(long)]
    query: String,
    /// Generate this many events (0..N), split over the subtasks.
    #[arg(long, conflicts_with = "input", required_unless_present = "input")]
    events: Option<u64>,
    /// Read the events from this file of JSON lines (`weir nexmark generate` writes them).
    #[arg(long)]
    input: Option<PathBuf>,
    /// Limit the generator to about this many events per second in total (wall clock).
    #[arg(long, value_parser = parse_rate, requires = "events")]
    rate: Option<f64>,
    #[command(flatten)]
    generator: GeneratorFlags,
    /// Folder for the result, `DIR/<query>.csv` (published only when the job succeeds).
    #[arg(long, default_value = "weir-output")]
    output: PathBuf,
    /// Write no output (benchmarks).
    #[arg(long)]
    discard_output: bool,
    /// Compare the result with the reference evaluation of the query over the same events
    /// (as multisets of rows); exit 3 on a difference.
    #[arg(long)]
    verify: bool,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(r),
        _ => Err(format!(
            "'{s}' is not a positive number of events per second (leave --rate out for no \
             limit)"
        )),
    }
}

/// The query `--query` names, if the engine runs it; otherwise a usage error listing the
/// queries it runs.
fn runnable_query(spec: &str) -> Result<Query, UsageError> {
    let names = RUNNABLE
        .iter()
        .map(|q| q.name())
        .collect::<Vec<_>>()
        .join(", ");
    let q: Query = spec.trim().parse().map_err(|_| {
        UsageError::new(format!(
            "--query: unknown query {spec:?}; `weir run nexmark` runs {names}"
        ))
    })?;
    if !RUNNABLE.contains(&q) {
        return Err(UsageError::new(format!(
            "--query {q}: the engine does not run {q} yet (it is not written as a DataStream \
             program yet); `weir run nexmark` runs {names}, and `weir nexmark reference \
             --query {q}` evaluates it without the engine"
        )));
    }
    Ok(q)
}

/// Where the events come from.
#[derive(Clone)]
enum Input {
    Generated(u64),
    File(PathBuf),
}

/// Builds `weir run nexmark` into `job` from its flags.
pub fn build(job: &mut Job, args: &NexmarkArgs) -> Result<(), BoxError> {
    let query = runnable_query(&args.query)?;
    if args.verify && args.discard_output {
        return Err(UsageError::new(
            "--verify compares the CSV written to --output with the reference: drop \
             --discard-output",
        )
        .into());
    }
    let generator = args
        .generator
        .generator()
        .map_err(|e| UsageError::new(format!("{e:#}")))?;
    let input = match (&args.input, args.events) {
        (Some(path), _) => {
            if !path.is_file() {
                return Err(UsageError::new(format!(
                    "--input {}: no such file (give a file of JSON lines, as `weir nexmark \
                     generate` writes)",
                    path.display()
                ))
                .into());
            }
            Input::File(path.clone())
        }
        (None, Some(n)) => Input::Generated(n),
        (None, None) => return Err(UsageError::new("give --events N or --input FILE").into()),
    };
    let events = match &input {
        Input::Generated(n) => {
            // A clean run reads every event number once, in one chained task per subtask.
            job.expect_records(*n);
            source::generated(job, generator.clone(), *n, args.rate, queries::kinds(query))
        }
        Input::File(path) => source::from_file(job, path.clone()),
    };
    let out = if args.discard_output {
        None
    } else {
        Some(job.output(&args.output)?)
    };
    match query {
        Query::Q0 => add_output(queries::q0(events), out.as_deref()),
        Query::Q1 => add_output(queries::q1(events), out.as_deref()),
        Query::Q2 => add_output(queries::q2(events), out.as_deref()),
        Query::Q3 => add_output(q3::q3(events), out.as_deref()),
        Query::Q4 => add_output(q4::q4(events), out.as_deref()),
        Query::Q5 => {
            // Stage 1's counts are shuffled to stage 2, across workers on a cluster.
            job.env().register_type::<q5::AuctionCount>();
            add_output(q5::q5(events)?, out.as_deref())
        }
        Query::Q7 => add_output(q7::q7(with_event_time(events)), out.as_deref()),
        Query::Q8 => add_output(q8::q8(with_event_time(events)), out.as_deref()),
        Query::Q11 => add_output(q11::q11(with_event_time(events)), out.as_deref()),
    }
    if let Some(staging) = out {
        let file = format!("{}.csv", query.name());
        job.summary_line(format!("result: {}", args.output.join(&file).display()));
        // What earlier runs committed: a restore from an older checkpoint rewinds past
        // some of it (see `drop_rewound_parts`).
        let earlier = committed_parts(&staging).map_err(|e| {
            format!(
                "cannot list the output's staging folder {}: {e}",
                staging.display()
            )
        })?;
        job.before_publish(move |result| {
            let restored = result
                .history
                .first()
                .and_then(|a| a.restored.as_ref())
                .map(|r| r.checkpoint_id);
            drop_rewound_parts(&earlier, restored)?;
            merge_parts(&staging, &file, query.columns())
        });
    }
    if args.verify {
        let published = args.output.join(format!("{}.csv", query.name()));
        job.verify(move |_| verify(query, &input, &generator, &published));
    }
    Ok(())
}

/// Writes rows as the reference's CSV lines (the header is added when parts are merged).
#[derive(Clone, Default)]
struct CsvLines;

impl<R: ResultRow> Encoder<R> for CsvLines {
    fn encode(&mut self, record: &R, out: &mut Vec<u8>) -> weir::Result<()> {
        record.write_csv(out);
        Ok(())
    }
}

/// Adds the sink: CSV lines into `staging` exactly once, or nowhere.
fn add_output<R: ResultRow>(rows: DataStream<R>, staging: Option<&Path>) {
    match staging {
        Some(dir) => {
            rows.add_sink(
                "output",
                TwoPhaseCommit::new(FileSink::new(dir, CsvLines).with_suffix(".csv")),
            )
            .uid("output");
        }
        None => {
            rows.add_sink("discard", DiscardSink).uid("discard");
        }
    }
}

/// The committed part files in `dir` (hidden in-progress and pending ones skipped), sorted.
fn committed_parts(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut parts: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        })
        .collect();
    parts.sort();
    Ok(parts)
}

/// The checkpoint a committed part file belongs to: its name is
/// `part-<job>~<uid>~<subtask>-<checkpoint>-<k>.csv` (`~` possibly sanitized).
fn part_checkpoint(part: &Path) -> Option<u64> {
    let name = part.file_name()?.to_str()?.strip_suffix(".csv")?;
    let (rest, _k) = name.rsplit_once('-')?;
    rest.rsplit_once('-')?.1.parse().ok()
}

/// Removes the parts that earlier runs committed for checkpoints after `restored`, the
/// checkpoint this run resumed from: the restored sources replay their rows, so keeping
/// them would count those rows twice. They exist only when a run restores a checkpoint
/// older than the newest one its predecessors completed (`--restore PATH`, or `latest`
/// falling back past a damaged checkpoint).
fn drop_rewound_parts(earlier: &[PathBuf], restored: Option<u64>) -> Result<(), BoxError> {
    let Some(restored) = restored else {
        return Ok(());
    };
    let mut dropped = 0;
    for part in earlier {
        if part_checkpoint(part).is_some_and(|c| c > restored) && part.exists() {
            fs::remove_file(part).map_err(|e| {
                format!(
                    "cannot remove {}, output of a checkpoint after the restored one: {e}",
                    part.display()
                )
            })?;
            dropped += 1;
        }
    }
    if dropped > 0 {
        eprintln!(
            "weir: dropped {dropped} output part(s) of checkpoints after checkpoint \
             {restored}: the restore replayed their rows"
        );
    }
    Ok(())
}

/// Merges the committed parts in `staging` into `staging/<file>` under the header
/// `columns`, and removes them: the published folder then holds the reference's CSV.
fn merge_parts(staging: &Path, file: &str, columns: &[&str]) -> Result<(), BoxError> {
    let target = staging.join(file);
    let context = |e: io::Error| -> BoxError {
        format!(
            "cannot merge the output into {}: {e} (is the disk full?)",
            target.display()
        )
        .into()
    };
    let parts = committed_parts(staging).map_err(context)?;
    let mut out = BufWriter::new(File::create(&target).map_err(context)?);
    // A header of the query's columns, exactly as the reference writes it.
    CsvWriter::new(&mut out, columns)
        .and_then(|w| w.finish())
        .map_err(context)?;
    for part in &parts {
        let mut f = File::open(part).map_err(context)?;
        io::copy(&mut f, &mut out).map_err(context)?;
    }
    out.into_inner()
        .map_err(|e| context(e.into_error()))?
        .sync_all()
        .map_err(context)?;
    for part in &parts {
        fs::remove_file(part).map_err(context)?;
    }
    Ok(())
}

/// The reference's CSV for `query` over the events of `input`.
fn reference_csv(
    query: Query,
    input: &Input,
    generator: &weir_nexmark::Generator,
) -> Result<(String, u64), BoxError> {
    let mut text = Vec::new();
    let mut w = CsvWriter::new(&mut text, query.columns())?;
    let mut write_error = None;
    let mut emit = |_: usize, row: weir_nexmark::csv::Row| {
        if let Err(e) = w.write_row(&row) {
            write_error.get_or_insert(e);
        }
    };
    let count = match input {
        Input::Generated(n) => {
            let events = (0..*n).map(|i| Ok::<Event, std::convert::Infallible>(generator.event(i)));
            evaluate_many(&[query], events, &mut emit).unwrap_or_else(|e| match e {})
        }
        Input::File(path) => {
            let f = File::open(path)
                .map_err(|e| format!("verify: cannot open {}: {e}", path.display()))?;
            let reader = EventReader::new(BufReader::with_capacity(1 << 20, f));
            evaluate_many(&[query], reader, &mut emit)
                .map_err(|e| format!("verify: {}: {e}", path.display()))?
        }
    };
    if let Some(e) = write_error {
        return Err(e.into());
    }
    w.finish()?;
    Ok((String::from_utf8(text)?, count))
}

fn verify(
    query: Query,
    input: &Input,
    generator: &weir_nexmark::Generator,
    published: &Path,
) -> Result<Verdict, BoxError> {
    let (expected, events) = reference_csv(query, input, generator)?;
    let actual = fs::read_to_string(published)
        .map_err(|e| format!("verify: cannot read {}: {e}", published.display()))?;
    let rows = actual.lines().count().saturating_sub(1);
    Ok(match compare_csv(&expected, &actual) {
        Ok(()) => Verdict::Correct(format!(
            "{query}: {rows} rows, the same multiset as the reference evaluation over {events} \
             events"
        )),
        Err(m) => Verdict::Wrong(format!(
            "{query}: {} differs from the reference evaluation over {events} events: {m}",
            published.display()
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_runnable_queries_are_accepted() {
        assert_eq!(runnable_query("q1").unwrap(), Query::Q1);
        assert_eq!(runnable_query(" Q2 ").unwrap(), Query::Q2);
        assert_eq!(runnable_query("q5").unwrap(), Query::Q5);
        assert_eq!(runnable_query("q11").unwrap(), Query::Q11);
        // A query the reference knows but the engine does not run yet, if any is left.
        if let Some(q) = Query::ALL.iter().find(|q| !RUNNABLE.contains(q)) {
            let e = runnable_query(q.name()).unwrap_err().to_string();
            assert!(
                e.contains(&format!("does not run {q} yet")) && e.contains("q0, q1, q2, q3"),
                "{e}"
            );
        }
        let e = runnable_query("q99").unwrap_err().to_string();
        assert!(
            e.contains("unknown query \"q99\"") && e.contains("q0, q1, q2, q3, q4, q5"),
            "{e}"
        );
    }

    #[test]
    fn parts_after_the_restored_checkpoint_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let part = |c: u64| dir.path().join(format!("part-nexmark~output~1-{c}-0.csv"));
        assert_eq!(part_checkpoint(&part(12)), Some(12));
        let earlier: Vec<PathBuf> = (3..7).map(part).collect();
        for p in &earlier {
            fs::write(p, "x\n").unwrap();
        }
        drop_rewound_parts(&earlier, Some(4)).unwrap();
        let left: Vec<bool> = earlier.iter().map(|p| p.exists()).collect();
        assert_eq!(left, [true, true, false, false]);
        // A fresh start (nothing restored) keeps everything.
        drop_rewound_parts(&earlier, None).unwrap();
        assert!(earlier[0].exists());
    }

    #[test]
    fn parts_merge_under_the_header() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("part-b-0.csv"), "3,4\n").unwrap();
        fs::write(dir.path().join("part-a-0.csv"), "1,2\n").unwrap();
        fs::write(dir.path().join(".part-c.inprogress"), "9,9\n").unwrap();
        merge_parts(dir.path(), "q2.csv", &["auction", "price"]).unwrap();
        let text = fs::read_to_string(dir.path().join("q2.csv")).unwrap();
        assert_eq!(text, "auction,price\n1,2\n3,4\n");
        assert!(!dir.path().join("part-a-0.csv").exists());
    }
}
