//! `--source` and `--sink` of the built-in jobs: connector specs, checked before the job
//! starts, and attached to the job graph.
//!
//! | `--sink` | writes | guarantee |
//! |---|---|---|
//! | `files:DIR` | part files of `key<TAB>count` lines (`--sink-format jsonl`: JSON objects) | exactly-once: a part file appears (renamed from a hidden name) when the checkpoint covering it completes |
//! | `postgres://USER[:PASSWORD]@HOST[:PORT]/DB/TABLE` | rows `(key BIGINT, count BIGINT)` (wordcount: `(word TEXT, count BIGINT)`) | exactly-once by `PREPARE TRANSACTION`; `?mode=upsert&key=key` for at-least-once idempotent upserts |
//! | `nats://HOST[:PORT]/STREAM[?subject=S]` | JetStream messages `key<TAB>count` | exactly-once: published when the checkpoint completes, deduplicated by message id |
//!
//! | `--source` | reads |
//! |---|---|
//! | `nats://HOST[:PORT]/STREAM[?subject=S]` | keyed-count: one decimal event number `i` per message (key `i % --keys`); wordcount: one line of text per message. Reads what the stream holds when the job first starts, then finishes |
//! | `files:GLOB` | wordcount: the lines of the matching files (the same as `--input GLOB`) |
//!
//! **Why the connectors are opened before the job.** Inside a job, a sink that cannot reach
//! its server, or a missing table or stream, fails a task, and the restart strategy retries
//! it (by default without end): the user would see a job stuck restarting. So
//! [`prepare`] opens every connector once (connect, find the table or stream, check the
//! server's settings) and a problem ends the run at once, with the connector's message
//! (exit 1). A spec that does not parse is a usage error (exit 2, from clap).
//!
//! **Operator uids.** Each kind of sink has its own uid (`sink-files`, `sink-postgres`,
//! `sink-nats`) and the NATS source `source-nats`: restoring a checkpoint into a job with
//! another kind of sink is then refused by the engine (state for an operator the job lacks)
//! instead of handing one connector's pending transactions to another. The uid and the job
//! name make the transaction names (`keyed-count~sink-postgres~<subtask>-<checkpoint>`), so
//! two runs of the same job must not share a table, stream or folder at the same time: a
//! fresh start settles every lingering transaction of that name.

use std::fmt::{self, Display, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
#[cfg(any(feature = "postgres", feature = "nats"))]
use weir::api::two_phase_commit::{TransactionContext, TwoPhaseCommitSink};
use weir::connectors::files::LinesWith;
use weir::prelude::*;
use weir::state::Key;

use crate::jobs::{Lines, Output};

#[cfg(feature = "nats")]
use weir_connectors::nats::{JetStreamConfig, JetStreamSink, JetStreamSource};
#[cfg(feature = "postgres")]
use weir_connectors::postgres::{PostgresSink, PostgresSinkConfig, SqlValue, WriteMode};

/// The accepted `--sink` forms, for error messages.
const SINK_FORMS: &str = "files:DIR, postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE/TABLE\
     [?mode=upsert&key=COLUMN] or nats://HOST[:PORT]/STREAM[?subject=SUBJECT]";
/// The accepted `--source` forms of keyed-count.
const KEYED_COUNT_SOURCE_FORMS: &str = "nats://HOST[:PORT]/STREAM[?subject=SUBJECT] \
     (one decimal event number per message)";
/// The accepted `--source` forms of wordcount.
const WORDCOUNT_SOURCE_FORMS: &str = "files:GLOB (like --input) or \
     nats://HOST[:PORT]/STREAM[?subject=SUBJECT] (one line of text per message)";

/// A flag combination refused after parsing (clap refuses the rest): exit code 2.
pub use weir::runner::UsageError;

/// Where `--sink` writes.
#[derive(Clone, Debug)]
pub enum SinkSpec {
    /// Exactly-once part files in this folder.
    Files(PathBuf),
    /// A PostgreSQL table.
    #[cfg(feature = "postgres")]
    Postgres(PostgresSinkConfig),
    /// A NATS JetStream stream.
    #[cfg(feature = "nats")]
    Nats(JetStreamConfig),
}

impl Display for SinkSpec {
    /// The spec as a user reads it back (never with a password).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SinkSpec::Files(dir) => write!(f, "files:{}", dir.display()),
            #[cfg(feature = "postgres")]
            SinkSpec::Postgres(c) => {
                write!(
                    f,
                    "postgres://{}@{}/{}/{}",
                    c.user,
                    c.address(),
                    c.database,
                    c.table
                )?;
                match &c.mode {
                    WriteMode::ExactlyOnce => Ok(()),
                    WriteMode::Upsert { key } => write!(f, "?mode=upsert&key={}", key.join(",")),
                }
            }
            #[cfg(feature = "nats")]
            SinkSpec::Nats(c) => write!(f, "{c}"),
        }
    }
}

/// Where `--source` reads.
#[derive(Clone, Debug)]
pub enum SourceSpec {
    /// Files matching a glob pattern (or a file or folder).
    Files(PathBuf),
    /// A NATS JetStream stream.
    #[cfg(feature = "nats")]
    Nats(JetStreamConfig),
}

/// Line format of a `files:` sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SinkFormat {
    /// `key<TAB>count` (committed files end in `.tsv`).
    Tsv,
    /// `{"key":…,"count":…}` (`"word"` for wordcount; files end in `.jsonl`).
    Jsonl,
}

/// `--sink` and `--sink-format`, shared by both jobs. (Specs are boxed to keep the parsed
/// command small: clippy's `large_enum_variant` on the subcommand enum.)
#[derive(Args, Debug)]
pub struct SinkArgs {
    /// Write the counts exactly once to files:DIR, postgres://USER@HOST:PORT/DB/TABLE or
    /// nats://HOST:PORT/STREAM, instead of --output (see the README).
    #[arg(long, value_name = "SPEC", value_parser = parse_sink,
          conflicts_with_all = ["output", "discard_output"])]
    pub sink: Option<Box<SinkSpec>>,
    /// Line format of a files: sink [default: tsv].
    #[arg(long, value_enum, value_name = "FORMAT", requires = "sink")]
    pub sink_format: Option<SinkFormat>,
}

/// The connector flags of `weir run keyed-count`.
#[derive(Args, Debug)]
pub struct KeyedCountConnectors {
    /// Read event numbers from nats://HOST:PORT/STREAM instead of the generator (one
    /// decimal number i per message, key i % --keys); reads the messages present at start.
    #[arg(long, value_name = "SPEC", value_parser = parse_keyed_count_source,
          conflicts_with_all = ["events", "rate"])]
    pub source: Option<Box<SourceSpec>>,
    #[command(flatten)]
    pub sink: SinkArgs,
}

/// The connector flags of `weir run wordcount`.
#[derive(Args, Debug)]
pub struct WordcountConnectors {
    /// Read lines from files:GLOB (like --input) or nats://HOST:PORT/STREAM (one line per
    /// message; reads the messages present at start).
    #[arg(long, value_name = "SPEC", value_parser = parse_wordcount_source,
          conflicts_with = "input")]
    pub source: Option<Box<SourceSpec>>,
    #[command(flatten)]
    pub sink: SinkArgs,
}

/// Parses a `--sink` spec; the error names the spec, the cause and the accepted forms.
pub fn parse_sink(spec: &str) -> Result<Box<SinkSpec>, String> {
    let bad = |cause: &str| format!("{cause}; --sink accepts {SINK_FORMS}");
    if let Some(dir) = spec.strip_prefix("files:") {
        if dir.is_empty() {
            return Err(bad("no folder after `files:` (e.g. files:counts)"));
        }
        return Ok(Box::new(SinkSpec::Files(PathBuf::from(dir))));
    }
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        return PostgresSinkConfig::parse(spec)
            .map(|c| Box::new(SinkSpec::Postgres(c)))
            .map_err(|e| bad(&e));
        #[cfg(not(feature = "postgres"))]
        return Err(bad(
            "this weir was built without PostgreSQL support (cargo feature `postgres`, on \
             by default)",
        ));
    }
    if spec.starts_with("nats://") {
        #[cfg(feature = "nats")]
        return JetStreamConfig::parse(spec)
            .map(|c| Box::new(SinkSpec::Nats(c)))
            .map_err(|e| bad(&e.to_string()));
        #[cfg(not(feature = "nats"))]
        return Err(bad(
            "this weir was built without NATS support (cargo feature `nats`, on by default)",
        ));
    }
    Err(bad(&format!("`{spec}` is not a sink spec")))
}

/// Parses a NATS source spec, or says why not (`forms` lists what the job accepts).
fn parse_nats_source(spec: &str, forms: &str) -> Result<Box<SourceSpec>, String> {
    #[cfg(feature = "nats")]
    return JetStreamConfig::parse(spec)
        .map(|c| Box::new(SourceSpec::Nats(c)))
        .map_err(|e| format!("{e}; --source accepts {forms}"));
    #[cfg(not(feature = "nats"))]
    return Err(format!(
        "`{spec}`: this weir was built without NATS support (cargo feature `nats`, on by default); \
         --source accepts {forms}"
    ));
}

/// Parses keyed-count's `--source`.
pub fn parse_keyed_count_source(spec: &str) -> Result<Box<SourceSpec>, String> {
    if spec.starts_with("nats://") {
        return parse_nats_source(spec, KEYED_COUNT_SOURCE_FORMS);
    }
    let why = if spec.starts_with("files:") {
        "keyed-count reads numbers, not files".to_string()
    } else {
        format!("`{spec}` is not a source spec")
    };
    Err(format!(
        "{why}; keyed-count's --source accepts {KEYED_COUNT_SOURCE_FORMS}"
    ))
}

/// Parses wordcount's `--source`.
pub fn parse_wordcount_source(spec: &str) -> Result<Box<SourceSpec>, String> {
    if let Some(glob) = spec.strip_prefix("files:") {
        if glob.is_empty() {
            return Err(format!(
                "no pattern after `files:`; --source accepts {WORDCOUNT_SOURCE_FORMS}"
            ));
        }
        return Ok(Box::new(SourceSpec::Files(PathBuf::from(glob))));
    }
    if spec.starts_with("nats://") {
        return parse_nats_source(spec, WORDCOUNT_SOURCE_FORMS);
    }
    Err(format!(
        "`{spec}` is not a source spec; --source accepts {WORDCOUNT_SOURCE_FORMS}"
    ))
}

/// A key the built-in jobs count: how it appears in the outputs of the connectors.
pub trait CountKey: Key + Display {
    /// Its column in a table and field in JSON lines (`key`, `word`).
    const COLUMN: &'static str;
    /// Its SQL type, for the `CREATE TABLE` a missing table's error suggests.
    #[cfg(feature = "postgres")]
    const SQL_TYPE: &'static str;
    /// Appends it as a JSON value.
    fn write_json(&self, out: &mut String);
    /// A key for the probe row of the upsert check (never committed).
    #[cfg(feature = "postgres")]
    fn probe() -> Self;
    /// Its SQL value.
    #[cfg(feature = "postgres")]
    fn sql(&self) -> Result<SqlValue, String>;
}

impl CountKey for u64 {
    const COLUMN: &'static str = "key";
    #[cfg(feature = "postgres")]
    const SQL_TYPE: &'static str = "BIGINT";
    fn write_json(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
    #[cfg(feature = "postgres")]
    fn probe() -> Self {
        0
    }
    #[cfg(feature = "postgres")]
    fn sql(&self) -> Result<SqlValue, String> {
        big_int(*self, "key")
    }
}

impl CountKey for String {
    const COLUMN: &'static str = "word";
    #[cfg(feature = "postgres")]
    const SQL_TYPE: &'static str = "TEXT";
    fn write_json(&self, out: &mut String) {
        // Serializing a string into JSON cannot fail.
        out.push_str(&serde_json::to_string(self).unwrap_or_default());
    }
    #[cfg(feature = "postgres")]
    fn probe() -> Self {
        String::new()
    }
    #[cfg(feature = "postgres")]
    fn sql(&self) -> Result<SqlValue, String> {
        Ok(SqlValue::Text(self.clone()))
    }
}

/// A `u64` as `BIGINT`, or why it does not fit.
#[cfg(feature = "postgres")]
fn big_int(v: u64, what: &str) -> Result<SqlValue, String> {
    i64::try_from(v)
        .map(SqlValue::BigInt)
        .map_err(|_| format!("{what} {v} does not fit a BIGINT"))
}

fn tsv_line<K: Display>(r: &(K, u64), line: &mut String) {
    let _ = write!(line, "{}\t{}", r.0, r.1);
}

fn json_line<K: CountKey>(r: &(K, u64), line: &mut String) {
    let _ = write!(line, "{{\"{}\":", K::COLUMN);
    r.0.write_json(line);
    let _ = write!(line, ",\"count\":{}}}", r.1);
}

/// The connectors of one run, checked and ready to attach.
pub struct Prepared {
    sink: Option<(SinkSpec, SinkFormat)>,
    source: Option<SourceSpec>,
    /// Messages in the connector source's stream at start, if it is one.
    pub source_messages: Option<u64>,
}

/// What `prepare` needs to know about the run.
pub struct RunInfo<'a> {
    /// The job's name (transaction names start with it).
    pub job: &'a str,
    /// Parallelism of every operator, the sink's included.
    pub parallelism: u32,
    /// Whether the run restores a checkpoint (`--restore`).
    pub restoring: bool,
}

/// Checks the flag combination (exit 2 on a conflict) and opens every connector once
/// (exit 1 with the connector's message if it cannot work); see the module docs.
pub fn prepare<K: CountKey>(
    source: Option<&SourceSpec>,
    sink: &SinkArgs,
    run: &RunInfo<'_>,
) -> Result<Prepared> {
    if run.parallelism == 0 {
        bail!("--parallelism must be at least 1");
    }
    let format = sink.sink_format.unwrap_or(SinkFormat::Tsv);
    if let Some(spec) = sink.sink.as_deref() {
        if !matches!(spec, SinkSpec::Files(_)) && sink.sink_format.is_some() {
            return Err(UsageError::new(format!(
                "--sink-format applies to files: sinks only; {spec} writes {}",
                match spec {
                    SinkSpec::Files(_) => "lines",
                    #[cfg(feature = "postgres")]
                    SinkSpec::Postgres(_) => "table rows",
                    #[cfg(feature = "nats")]
                    SinkSpec::Nats(_) => "`key<TAB>count` messages",
                }
            ))
            .into());
        }
        check_sink::<K>(spec, run)?;
    }
    let source_messages = match source {
        None => None,
        Some(SourceSpec::Files(glob)) => {
            if FileSource::expand(std::slice::from_ref(glob))?.is_empty() {
                bail!("--source files:{} matches no files", glob.display());
            }
            None
        }
        #[cfg(feature = "nats")]
        Some(SourceSpec::Nats(c)) => Some(c.probe()?.messages),
    };
    Ok(Prepared {
        sink: sink.sink.as_deref().cloned().map(|s| (s, format)),
        source: source.cloned(),
        source_messages,
    })
}

/// The transaction context of subtask 0, for opening a sink before the job.
#[cfg(any(feature = "postgres", feature = "nats"))]
fn probe_context(run: &RunInfo<'_>, uid: &str) -> TransactionContext {
    TransactionContext {
        job_name: run.job.to_string(),
        uid: uid.to_string(),
        subtask: 0,
        parallelism: run.parallelism,
    }
}

/// Opens the sink once, as a subtask would, and closes it again.
fn check_sink<K: CountKey>(spec: &SinkSpec, run: &RunInfo<'_>) -> Result<()> {
    match spec {
        SinkSpec::Files(dir) => check_files_dir(dir, run),
        #[cfg(feature = "postgres")]
        SinkSpec::Postgres(c) => {
            let mut sink = postgres_sink::<K>(c);
            let ctx = probe_context(run, "sink-postgres");
            let hint =
                |e: weir::Error| anyhow::anyhow!("{}", with_table_hint::<K>(&e.to_string(), c));
            TwoPhaseCommitSink::<(K, u64)>::open(&mut sink, &ctx).map_err(hint)?;
            if let WriteMode::Upsert { .. } = c.mode {
                // The server checks `ON CONFLICT (key)` against the table's constraints only
                // when the statement runs, not when it is prepared: upsert one probe row in
                // a transaction that is rolled back, so a missing primary key fails now.
                let mut txn =
                    TwoPhaseCommitSink::<(K, u64)>::begin(&mut sink, &ctx).map_err(hint)?;
                let written = sink.write(&mut txn, &mut vec![(K::probe(), 0)]);
                TwoPhaseCommitSink::<(K, u64)>::abort(&mut sink, txn).map_err(hint)?;
                written.map_err(hint)?;
            }
            Ok(())
        }
        #[cfg(feature = "nats")]
        SinkSpec::Nats(c) => {
            let mut sink = nats_sink::<K>(c);
            let ctx = probe_context(run, "sink-nats");
            TwoPhaseCommitSink::<(K, u64)>::open(&mut sink, &ctx)?;
            Ok(())
        }
    }
}

/// A fresh run refuses a folder that already holds committed output of this job: the two
/// runs' part files would mix (and a file name taken by the earlier run fails the commit).
/// A restored run continues its own output, so it is not checked.
fn check_files_dir(dir: &Path, run: &RunInfo<'_>) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!("--sink files:{} is not a folder", dir.display());
    }
    if run.restoring || !dir.exists() {
        return Ok(());
    }
    let ours = format!("part-{}~sink-files~", run.job);
    let earlier = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list the --sink folder {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with(&ours));
    if let Some(name) = earlier {
        bail!(
            "--sink files:{} already holds output of an earlier {} run ({name}, …); a fresh \
             run would mix its part files with those: empty the folder, choose another, or \
             continue that run with --restore latest",
            dir.display(),
            run.job
        );
    }
    Ok(())
}

/// The missing-table and missing-column errors of the PostgreSQL sink, with the SQL that
/// makes a table this job can write.
#[cfg(feature = "postgres")]
fn with_table_hint<K: CountKey>(msg: &str, c: &PostgresSinkConfig) -> String {
    let key_col = format!("{} {}", K::COLUMN, K::SQL_TYPE);
    let (key_col, extra) = match &c.mode {
        WriteMode::ExactlyOnce => (key_col, String::new()),
        WriteMode::Upsert { key } if key.len() == 1 && key[0] == K::COLUMN => {
            (format!("{key_col} PRIMARY KEY"), String::new())
        }
        WriteMode::Upsert { key } => (key_col, format!(", PRIMARY KEY ({})", key.join(", "))),
    };
    let create = format!("CREATE TABLE {} ({key_col}, count BIGINT{extra});", c.table);
    if msg.contains("does not exist") && msg.contains("table") {
        format!("{msg}. This job writes ({}, count): {create}", K::COLUMN)
    } else if msg.contains("column") && msg.contains("missing") {
        format!(
            "{msg}. This job writes the columns {} {} and count BIGINT, e.g. {create}",
            K::COLUMN,
            K::SQL_TYPE
        )
    } else if msg.contains("ON CONFLICT") {
        format!(
            "{msg}. mode=upsert needs a primary key or unique constraint on its key columns: \
             ALTER TABLE {} ADD PRIMARY KEY ({});",
            c.table,
            match &c.mode {
                WriteMode::Upsert { key } => key.join(", "),
                WriteMode::ExactlyOnce => K::COLUMN.to_string(),
            }
        )
    } else {
        msg.to_string()
    }
}

#[cfg(feature = "postgres")]
fn postgres_sink<K: CountKey>(c: &PostgresSinkConfig) -> PostgresSink<(K, u64)> {
    PostgresSink::new(c.clone(), &[K::COLUMN, "count"], |r: &(K, u64)| {
        Ok(vec![r.0.sql()?, big_int(r.1, "count")?])
    })
}

#[cfg(feature = "nats")]
fn nats_sink<K: CountKey>(c: &JetStreamConfig) -> JetStreamSink<(K, u64)> {
    JetStreamSink::new(c.clone(), |r: &(K, u64)| {
        Ok(format!("{}\t{}", r.0, r.1).into_bytes())
    })
}

/// Decodes keyed-count's NATS payload: a decimal event number (surrounding spaces allowed).
#[cfg(feature = "nats")]
fn decode_event(payload: &[u8]) -> Result<u64, weir_connectors::nats::CodecError> {
    let text = std::str::from_utf8(payload)?.trim();
    text.parse::<u64>().map_err(|_| {
        format!(
            "payload {text:?} is not a decimal event number (keyed-count reads one per message)"
        )
        .into()
    })
}

impl Prepared {
    /// Where the counts go: the `--sink`, if there is one (else `--output` decides).
    pub fn output(&self) -> Option<Output> {
        self.sink
            .clone()
            .map(|(spec, format)| Output::Connector(spec, format))
    }

    /// The pattern of a `files:GLOB` source (wordcount reads it like `--input`).
    pub fn source_files(&self) -> Option<&Path> {
        match self.source.as_ref()? {
            SourceSpec::Files(glob) => Some(glob),
            #[cfg(feature = "nats")]
            SourceSpec::Nats(_) => None,
        }
    }

    /// The run summary's line saying where the output went, with a `--sink`.
    pub fn summary_line(&self) -> Option<String> {
        self.sink
            .as_ref()
            .map(|(spec, _)| format!("sink: {spec} (committed)"))
    }

    /// wordcount's input — the `--source`, else the `--input` files, whose lines may be
    /// `max_line` bytes long — and about how many records its tasks will process (for
    /// `--inject-failures`).
    pub fn wordcount_lines(&self, input: &[PathBuf], max_line: usize) -> Result<(Lines<'_>, u64)> {
        let files = match (&self.source, self.source_files()) {
            // About 10 records per message (a line at the source, its words at the
            // counter).
            (Some(_), None) => {
                let records = self.source_messages.unwrap_or(0).saturating_mul(10);
                return Ok((Lines::Connector(self), records));
            }
            (_, Some(glob)) => vec![glob.to_path_buf()],
            (None, None) => input.to_vec(),
        };
        let expanded = FileSource::expand(&files)?;
        if expanded.is_empty() {
            bail!("no input files found in {files:?}");
        }
        let bytes: u64 = expanded
            .iter()
            .filter_map(|f| f.metadata().ok())
            .map(|m| m.len())
            .sum();
        let source = FileSource::new(expanded)?
            .lossy_utf8()
            .max_line_length(max_line);
        // About one record per 6 bytes of text (a word at the counter; lines at the source
        // add a few).
        Ok((Lines::Files(Box::new(source)), bytes / 6))
    }

    /// keyed-count's event numbers, from the `--source` connector.
    pub fn numbers(&self, env: &StreamEnvironment) -> Result<DataStream<u64>> {
        match &self.source {
            #[cfg(feature = "nats")]
            Some(SourceSpec::Nats(c)) => Ok(env
                .add_source("nats", JetStreamSource::bounded(c.clone(), decode_event))
                .uid("source-nats")),
            _ => {
                let _ = env;
                bail!("keyed-count reads numbers only from a nats:// --source")
            }
        }
    }

    /// wordcount's lines, from the `--source` connector.
    pub fn lines(&self, env: &StreamEnvironment) -> Result<DataStream<String>> {
        match &self.source {
            #[cfg(feature = "nats")]
            Some(SourceSpec::Nats(c)) => Ok(env
                .add_source(
                    "nats",
                    JetStreamSource::bounded(c.clone(), weir_connectors::nats::decode_utf8),
                )
                .uid("source-nats")),
            _ => {
                let _ = env;
                bail!("wordcount reads lines from a connector only with a nats:// --source")
            }
        }
    }
}

/// Adds the `--sink` connector to `counts`.
pub fn add_sink<K: CountKey>(counts: DataStream<(K, u64)>, spec: &SinkSpec, format: SinkFormat) {
    match spec {
        SinkSpec::Files(dir) => {
            let _ = match format {
                SinkFormat::Tsv => counts.add_sink(
                    "files",
                    TwoPhaseCommit::new(
                        FileSink::new(dir, LinesWith::new(tsv_line::<K>)).with_suffix(".tsv"),
                    ),
                ),
                SinkFormat::Jsonl => counts.add_sink(
                    "files",
                    TwoPhaseCommit::new(
                        FileSink::new(dir, LinesWith::new(json_line::<K>)).with_suffix(".jsonl"),
                    ),
                ),
            }
            .uid("sink-files");
        }
        #[cfg(feature = "postgres")]
        SinkSpec::Postgres(c) => {
            counts
                .add_sink("postgres", TwoPhaseCommit::new(postgres_sink::<K>(c)))
                .uid("sink-postgres");
        }
        #[cfg(feature = "nats")]
        SinkSpec::Nats(c) => {
            counts
                .add_sink("nats", nats_sink::<K>(c).exactly_once())
                .uid("sink-nats");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_specs_parse_or_say_why() {
        assert!(
            matches!(parse_sink("files:out").as_deref(), Ok(SinkSpec::Files(d)) if d == Path::new("out"))
        );
        for (spec, says) in [
            ("files:", "no folder"),
            ("s3://b/k", "`s3://b/k` is not a sink spec"),
            ("out", "`out` is not a sink spec"),
        ] {
            let e = parse_sink(spec).unwrap_err();
            assert!(e.contains(says) && e.contains(SINK_FORMS), "{spec}: {e}");
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_specs_show_without_password() {
        let s = parse_sink("postgres://u:secret@h:5433/db/t?mode=upsert&key=key").unwrap();
        assert_eq!(
            s.to_string(),
            "postgres://u@h:5433/db/t?mode=upsert&key=key"
        );
        let e = parse_sink("postgres://u@h/db").unwrap_err();
        assert!(
            e.contains("table is missing") && e.contains("--sink accepts"),
            "{e}"
        );
    }

    #[cfg(feature = "nats")]
    #[test]
    fn source_specs_per_job() {
        assert!(parse_keyed_count_source("nats://h:4222/events").is_ok());
        let e = parse_keyed_count_source("files:x").unwrap_err();
        assert!(
            e.contains("reads numbers") && e.contains("nats://HOST"),
            "{e}"
        );
        assert!(matches!(
            parse_wordcount_source("files:a/*.txt").as_deref(),
            Ok(SourceSpec::Files(_))
        ));
        let e = parse_wordcount_source("nats://h").unwrap_err();
        assert!(
            e.contains("no stream name") && e.contains("files:GLOB"),
            "{e}"
        );
        assert_eq!(decode_event(b" 42\n").unwrap(), 42);
        assert!(decode_event(b"x")
            .unwrap_err()
            .to_string()
            .contains("\"x\""));
    }

    #[test]
    fn lines_in_both_formats() {
        let mut l = String::new();
        tsv_line(&(7u64, 3), &mut l);
        assert_eq!(l, "7\t3");
        l.clear();
        json_line(&("a\"b".to_string(), 2), &mut l);
        assert_eq!(l, r#"{"word":"a\"b","count":2}"#);
        l.clear();
        json_line(&(7u64, 3), &mut l);
        assert_eq!(l, r#"{"key":7,"count":3}"#);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn missing_table_suggests_create_table() {
        let c = PostgresSinkConfig::parse("postgres://u@h/db/counts").unwrap();
        let m = with_table_hint::<u64>("table `counts` does not exist in database", &c);
        assert!(
            m.contains("CREATE TABLE counts (key BIGINT, count BIGINT);"),
            "{m}"
        );
        let c = PostgresSinkConfig::parse("postgres://u@h/db/w?mode=upsert&key=word").unwrap();
        let m = with_table_hint::<String>("table `w` does not exist", &c);
        assert!(
            m.contains("CREATE TABLE w (word TEXT PRIMARY KEY, count BIGINT);"),
            "{m}"
        );
    }
}
