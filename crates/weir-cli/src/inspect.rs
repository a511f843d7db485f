//! `weir state`: look inside a checkpoint without running a job.
//!
//! ```text
//! weir state ls weir-checkpoints/keyed-count/chk-7
//! weir state dump weir-checkpoints/keyed-count/chk-7 --uid count --state count --format json
//! ```
//!
//! The engine ([`weir::inspect`]) reads and verifies the files without knowing
//! the job's types; this module knows the types of the built-in jobs (see [`Decoder`]) and
//! decodes their states, picking the decoder from the job name the checkpoint records, the
//! operator uid and the state name. Any other state is printed as hex. Every error is one
//! line (printed by `main`) and exits 1.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use weir::inspect::{
    self, CheckpointDescription, InspectError, RawEntries, RawState, SourceProgress, StateScope,
};

/// `weir state …`: the subcommands, dispatched by [`run`].
#[derive(Subcommand)]
pub enum StateCommand {
    /// List a checkpoint's operators and their states: kind, entries and bytes.
    Ls(LsArgs),
    /// Print the entries of one state, decoded for the built-in jobs, else as hex.
    Dump(DumpArgs),
}

/// Arguments of `weir state ls`.
#[derive(Args)]
pub struct LsArgs {
    /// A checkpoint folder (`<checkpoint-dir>/<job>/chk-<n>`).
    checkpoint: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Arguments of `weir state dump`.
#[derive(Args)]
pub struct DumpArgs {
    /// A checkpoint folder (`<checkpoint-dir>/<job>/chk-<n>`).
    checkpoint: PathBuf,
    /// The operator's uid (as `weir state ls` shows it).
    #[arg(long)]
    uid: String,
    /// The state's name (as `weir state ls` shows it).
    #[arg(long)]
    state: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Print the encoded bytes even when the state's types are known.
    #[arg(long)]
    raw: bool,
}

/// How `ls` and `dump` print.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Text,
    /// One JSON document for scripts.
    Json,
}

/// Runs a `weir state` subcommand. A closed stdout (`| head`) ends it quietly.
pub fn run(cmd: StateCommand) -> Result<ExitCode> {
    let text = match cmd {
        StateCommand::Ls(a) => ls(&a)?,
        StateCommand::Dump(a) => dump(&a)?,
    };
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(anyhow::anyhow!("cannot write to standard output: {e}"))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

// ---------------------------------------------------------------------------------------
// ls

fn ls(args: &LsArgs) -> Result<String> {
    let d = inspect::describe(&args.checkpoint)?;
    Ok(match args.format {
        Format::Json => pretty(&describe_json(&d)),
        Format::Text => describe_text(&d),
    })
}

fn describe_json(d: &CheckpointDescription) -> Value {
    let operators: Vec<Value> = d
        .operators
        .iter()
        .map(|o| {
            let states: Vec<Value> = o
                .states
                .iter()
                .map(|s| {
                    json!({
                        "name": s.name,
                        "scope": s.scope.to_string(),
                        "kind": s.kind_name(),
                        "entries": s.entries,
                        "bytes": s.bytes,
                        "key_groups": s.key_groups,
                    })
                })
                .collect();
            json!({
                "uid": o.uid,
                "parallelism": o.parallelism,
                "files": o.files,
                "file_bytes": o.file_bytes,
                "states": states,
            })
        })
        .collect();
    json!({
        "checkpoint": d.path.display().to_string(),
        "checkpoint_id": d.checkpoint_id,
        "kind": d.snapshot.to_string(),
        "weir_version": d.weir_version,
        "job": d.job_name,
        "mode": d.mode.to_string(),
        "max_parallelism": d.max_parallelism,
        "trigger_timestamp_ms": d.trigger_timestamp_ms,
        "triggered": timestamp(d.trigger_timestamp_ms),
        "completed_timestamp_ms": d.completed_timestamp_ms,
        "completed": timestamp(d.completed_timestamp_ms),
        "metadata_bytes": d.metadata_bytes,
        "state_files": d.state_files,
        "state_file_bytes": d.state_file_bytes,
        "total_bytes": d.total_bytes(),
        "shared_bytes": d.shared_bytes,
        "new_bytes": d.new_bytes(),
        "operators": operators,
        "tasks": d.tasks.iter().map(|t| json!({
            "task": t.task,
            "sync_micros": t.stats.sync_micros,
            "async_micros": t.stats.async_micros,
            "alignment_micros": t.stats.alignment_micros,
            "bytes": t.stats.bytes,
        })).collect::<Vec<_>>(),
        "unaligned": d.unaligned_tasks > 0,
        "unaligned_tasks": d.unaligned_tasks,
        "channel_state": d.channel_state.iter().map(|c| json!({
            "uid": c.uid,
            "subtask": c.subtask,
            "channel": c.channel,
            "edge": c.edge,
            "sender": c.sender,
            "records": c.records,
            "in_flight_bytes": c.in_flight_bytes,
            "file": c.file.path,
        })).collect::<Vec<_>>(),
    })
}

/// The records in flight an unaligned checkpoint saved, per receiving subtask and channel
/// (`weir checkpoints inspect`, `weir state ls`): what a restore replays before new input.
fn channel_state_text(d: &CheckpointDescription, s: &mut String) {
    if d.unaligned_tasks == 0 && d.channel_state.is_empty() {
        return;
    }
    let records: u64 = d.channel_state.iter().map(|c| c.records).sum();
    let bytes: u64 = d.channel_state.iter().map(|c| c.in_flight_bytes).sum();
    let _ = writeln!(
        s,
        "\nunaligned: {} tasks snapshotted unaligned; {records} records in flight saved \
         ({}), replayed before new input on restore:",
        d.unaligned_tasks,
        human_bytes(bytes)
    );
    let rows: Vec<Vec<String>> = d
        .channel_state
        .iter()
        .map(|c| {
            vec![
                cell(&c.uid),
                c.subtask.to_string(),
                c.channel.to_string(),
                format!("{}/{}", c.edge, c.sender),
                c.records.to_string(),
                c.in_flight_bytes.to_string(),
            ]
        })
        .collect();
    let headers = [
        "UID",
        "SUBTASK",
        "CHANNEL",
        "EDGE/SENDER",
        "RECORDS",
        "IN_FLIGHT_BYTES",
    ];
    s.push_str(&table(&headers, &rows, &[1, 2, 4, 5]));
}

fn describe_text(d: &CheckpointDescription) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} {} of job {} at {}",
        d.snapshot,
        d.checkpoint_id,
        cell(&d.job_name),
        d.path.display()
    );
    let when = |ms| timestamp(ms).unwrap_or_else(|| format!("{ms} ms after the Unix epoch"));
    let took = d
        .completed_timestamp_ms
        .checked_sub(d.trigger_timestamp_ms)
        .map(|ms| {
            format!(
                " ({} after the trigger)",
                humantime::format_duration(ms_dur(ms))
            )
        })
        .unwrap_or_default();
    let files = match d.state_files {
        1 => "1 state file".to_string(),
        n => format!("{n} state files"),
    };
    let facts = [
        ("written by", format!("weir {}", cell(&d.weir_version))),
        ("mode", d.mode.to_string()),
        ("max parallelism", d.max_parallelism.to_string()),
        ("triggered", when(d.trigger_timestamp_ms)),
        (
            "completed",
            format!("{}{took}", when(d.completed_timestamp_ms)),
        ),
        (
            "total size",
            format!(
                "{} ({files}: {}; _metadata: {})",
                human_bytes(d.total_bytes()),
                human_bytes(d.state_file_bytes),
                human_bytes(d.metadata_bytes)
            ),
        ),
    ];
    let mut facts = facts.to_vec();
    if d.shared_bytes > 0 {
        facts.push((
            "incremental",
            format!(
                "{} new, {} shared with earlier checkpoints",
                human_bytes(d.new_bytes()),
                human_bytes(d.shared_bytes)
            ),
        ));
    }
    for (k, v) in facts {
        let _ = writeln!(s, "  {k:<16} {v}");
    }
    s.push('\n');
    let mut rows = Vec::new();
    let mut unknown = false;
    for o in &d.operators {
        if o.states.is_empty() {
            let row = [cell(&o.uid), o.parallelism.to_string(), "-".into()];
            rows.push(row.into_iter().chain(["(no state)".into()]).collect());
        }
        for st in &o.states {
            unknown |= st.entries.is_none();
            rows.push(vec![
                cell(&o.uid),
                o.parallelism.to_string(),
                cell(&st.name),
                st.kind_name(),
                st.entries.map_or("?".into(), |n| n.to_string()),
                st.bytes.to_string(),
            ]);
        }
    }
    let headers = ["UID", "PARALLELISM", "STATE", "KIND", "ENTRIES", "BYTES"];
    s.push_str(&table(&headers, &rows, &[1, 4, 5]));
    if !d.tasks.is_empty() {
        let ms = |us: u64| format!("{:.3}", us as f64 / 1000.0);
        let rows: Vec<Vec<String>> = d
            .tasks
            .iter()
            .map(|t| {
                vec![
                    t.task.clone(),
                    ms(t.stats.sync_micros),
                    ms(t.stats.async_micros),
                    ms(t.stats.alignment_micros),
                    t.stats.bytes.to_string(),
                ]
            })
            .collect();
        s.push('\n');
        let headers = ["TASK", "SYNC_MS", "ASYNC_MS", "ALIGNMENT_MS", "BYTES"];
        s.push_str(&table(&headers, &rows, &[1, 2, 3, 4]));
    }
    channel_state_text(d, &mut s);
    if unknown {
        s.push_str(
            "? keyed states that share files cannot be counted without their types; \
             `weir state dump` decodes the built-in jobs' states\n",
        );
    }
    s
}

// ---------------------------------------------------------------------------------------
// checkpoints inspect

/// How many records each source had emitted up to the checkpoint at `path`, as its
/// `_metadata` records them (layout 3; empty for older checkpoints): the position a restore
/// resumes from, which is what a user about to resume wants to see.
pub(crate) fn source_records(path: &std::path::Path) -> Result<Vec<SourceProgress>> {
    Ok(inspect::source_progress(path)?)
}

/// `weir checkpoints inspect`: the description of `weir state ls` plus where every source
/// stands (the records it had emitted, and its decoded position state), so a user sees
/// what a restore would resume from.
pub fn inspect_checkpoint(path: &std::path::Path, json_out: bool) -> Result<String> {
    let d = inspect::describe(path)?;
    let sources = source_records(path)?;
    let mut positions: Vec<(String, String, Vec<Row>)> = Vec::new();
    for o in &d.operators {
        for st in &o.states {
            let Some(dec) = Decoder::find(&d.job_name, &o.uid, &st.name, st.scope) else {
                continue;
            };
            if !matches!(dec, Decoder::GeneratorSplits | Decoder::FileSplits) {
                continue;
            }
            let raw = inspect::raw_state(path, &o.uid, &st.name)?;
            positions.push((o.uid.clone(), st.name.clone(), dec.rows(&raw)?));
        }
    }
    if json_out {
        let mut v = describe_json(&d);
        v["sources"] = sources
            .iter()
            .map(|p| json!({ "uid": p.uid, "records": p.records }))
            .collect();
        v["source_positions"] = positions
            .iter()
            .map(|(uid, state, rows)| {
                let rows: Vec<Value> = rows
                    .iter()
                    .map(|r| {
                        Value::Object(r.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
                    })
                    .collect();
                json!({ "uid": uid, "state": state, "splits": rows })
            })
            .collect();
        return Ok(pretty(&v));
    }
    let mut s = describe_text(&d);
    if !sources.is_empty() {
        let rows: Vec<Vec<String>> = sources
            .iter()
            .map(|p| vec![cell(&p.uid), p.records.to_string()])
            .collect();
        s.push_str("\nrecords each source had read (a restore resumes after them):\n");
        s.push_str(&table(&["SOURCE", "RECORDS"], &rows, &[1]));
    }
    for (uid, state, rows) in positions {
        let _ = writeln!(s, "\nsource positions of {} ({state}):", cell(&uid));
        if let Some(first) = rows.first() {
            let headers: Vec<String> = first.iter().map(|(k, _)| k.to_uppercase()).collect();
            let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| r.iter().map(|(_, v)| value_cell(v)).collect())
                .collect();
            s.push_str(&table(&headers, &cells, &[]));
        }
    }
    Ok(s)
}

// ---------------------------------------------------------------------------------------
// dump

/// The state types of the built-in jobs (crates/weir-cli/src/jobs.rs and the sources in
/// weir::connectors), so their checkpoints can be shown as values rather than bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decoder {
    /// keyed-count's `count` operator: `u64` key → `u64` count.
    U64Count,
    /// wordcount's `count` operator: word → `u64` count.
    WordCount,
    /// `GeneratorSource`'s `splits` list.
    GeneratorSplits,
    /// `FileLineSource`'s `files` list.
    FileSplits,
}

impl Decoder {
    /// The decoder for state `state` of operator `uid` of job `job`, if it is a built-in.
    fn find(job: &str, uid: &str, state: &str, scope: StateScope) -> Option<Decoder> {
        let d = match (job, uid, state) {
            ("keyed-count", "count", "count") => Decoder::U64Count,
            ("wordcount", "count", "count") => Decoder::WordCount,
            ("keyed-count", "generator", "splits") => Decoder::GeneratorSplits,
            ("wordcount", "files", "files") => Decoder::FileSplits,
            _ => return None,
        };
        let keyed = matches!(d, Decoder::U64Count | Decoder::WordCount);
        (keyed == (scope == StateScope::Keyed)).then_some(d)
    }

    /// What the entries are decoded as, for the summary line.
    fn describe(self) -> &'static str {
        match self {
            Decoder::U64Count => "key u64 -> count u64",
            Decoder::WordCount => "word string -> count u64",
            Decoder::GeneratorSplits => "generator split {index, count, next}",
            Decoder::FileSplits => "file split {path, offset}",
        }
    }

    /// Decodes every entry into a row of named columns.
    fn rows(self, raw: &RawState) -> Result<Vec<Row>, InspectError> {
        match self {
            Decoder::U64Count => counts::<u64>(raw),
            Decoder::WordCount => counts::<String>(raw),
            Decoder::GeneratorSplits => Ok(raw
                .list_elements::<GeneratorSplit>()?
                .into_iter()
                .map(|e| {
                    vec![
                        ("subtask", json!(e.subtask)),
                        ("element", json!(e.index)),
                        ("index", json!(e.value.index)),
                        ("count", json!(e.value.count)),
                        ("next", json!(e.value.next)),
                    ]
                })
                .collect()),
            Decoder::FileSplits => Ok(raw
                .list_elements::<FileSplit>()?
                .into_iter()
                .map(|e| {
                    let done = e.value.offset == u64::MAX;
                    vec![
                        ("subtask", json!(e.subtask)),
                        ("element", json!(e.index)),
                        ("path", json!(e.value.path)),
                        (
                            "offset",
                            if done {
                                Value::Null
                            } else {
                                json!(e.value.offset)
                            },
                        ),
                        ("finished", json!(done)),
                    ]
                })
                .collect()),
        }
    }
}

/// A split of `weir::connectors::generator::GeneratorSource` (same fields, same order:
/// postcard encodes structs by position).
#[derive(Deserialize)]
struct GeneratorSplit {
    index: u64,
    count: u64,
    next: u64,
}

/// A split of `weir::connectors::files::FileLineSource`; `offset` `u64::MAX` means the
/// file has been read to its end.
#[derive(Deserialize)]
struct FileSplit {
    path: String,
    offset: u64,
}

/// One entry as named columns (in display order).
type Row = Vec<(&'static str, Value)>;

/// Keyed `(K, u64)` counts, sorted by key.
fn counts<K>(raw: &RawState) -> Result<Vec<Row>, InspectError>
where
    K: DeserializeOwned + Ord + serde::Serialize,
{
    let mut entries = raw.keyed_entries::<K, u64>()?;
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(entries
        .into_iter()
        .map(|e| {
            vec![
                ("key", json!(e.key)),
                ("count", json!(e.value)),
                ("key_group", json!(e.key_group)),
                ("subtask", json!(e.subtask)),
            ]
        })
        .collect())
}

/// The encoded entries as rows: one per key group (keyed) or per element (lists).
fn raw_rows(raw: &RawState) -> Vec<Row> {
    match &raw.entries {
        RawEntries::Keyed(groups) => {
            // An incremental chain: each group's deltas too, oldest first, as they are
            // applied on top of the base's pairs.
            let chained = groups.iter().any(|g| !g.changes.is_empty());
            groups
                .iter()
                .map(|g| {
                    let mut row = vec![
                        ("key_group", json!(g.key_group)),
                        ("subtask", json!(g.subtask)),
                        ("bytes", json!(g.bytes.len())),
                        ("hex", json!(hex(&g.bytes))),
                    ];
                    if chained {
                        let changes: Vec<String> = g.changes.iter().map(|c| hex(c)).collect();
                        row.push(("deltas", json!(g.changes.len())));
                        row.push(("changes_hex", json!(changes.join(" | "))));
                    }
                    row
                })
                .collect()
        }
        RawEntries::Operator(lists) => lists
            .iter()
            .flat_map(|l| {
                l.elements.iter().enumerate().map(|(i, e)| {
                    vec![
                        ("subtask", json!(l.subtask)),
                        ("element", json!(i)),
                        ("bytes", json!(e.len())),
                        ("hex", json!(hex(e))),
                    ]
                })
            })
            .collect(),
    }
}

fn dump(args: &DumpArgs) -> Result<String> {
    let raw = inspect::raw_state(&args.checkpoint, &args.uid, &args.state)?;
    let kind = inspect::kind_name(raw.scope, raw.kind);
    let decoder = Decoder::find(&raw.job_name, &raw.uid, &raw.name, raw.scope);
    let decoded = match decoder {
        Some(d) if !args.raw => match d.rows(&raw) {
            Ok(rows) => Some((d, rows)),
            Err(e) => {
                eprintln!("weir: {e}; showing the encoded bytes instead");
                None
            }
        },
        _ => None,
    };
    let (decoded_as, rows) = match decoded {
        Some((d, rows)) => (Some(d.describe()), rows),
        None => (None, raw_rows(&raw)),
    };
    if args.format == Format::Json {
        let entries: Vec<Value> = rows
            .into_iter()
            .map(|r| Value::Object(r.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
            .collect();
        return Ok(pretty(&json!({
            "checkpoint": raw.checkpoint.display().to_string(),
            "checkpoint_id": raw.checkpoint_id,
            "job": raw.job_name,
            "uid": raw.uid,
            "state": raw.name,
            "scope": raw.scope.to_string(),
            "kind": kind,
            "decoded_as": decoded_as,
            "entries": entries,
        })));
    }
    let why = if args.raw { "--raw" } else { "types unknown" };
    let what = match (decoded_as, &raw.entries) {
        (Some(d), _) => format!("{}, decoded as {d}", plural(rows.len(), "entry", "entries")),
        (None, RawEntries::Keyed(groups)) => {
            let chain = if groups.iter().any(|g| !g.changes.is_empty()) {
                ", then its incremental deltas' (key, Option<value>) changes, oldest first"
            } else {
                ""
            };
            format!(
                "{}, encoded ({why}; each line is one key group's concatenated \
                 (key, value) pairs{chain})",
                plural(rows.len(), "non-empty key group", "non-empty key groups")
            )
        }
        (None, RawEntries::Operator(_)) => {
            let n = plural(rows.len(), "element", "elements");
            format!("{n}, encoded ({why})")
        }
    };
    let mut s = format!(
        "# checkpoint {} of job {}, operator {}, state {} ({kind}): {what}\n",
        raw.checkpoint_id,
        cell(&raw.job_name),
        cell(&raw.uid),
        cell(&raw.name)
    );
    let Some(first) = rows.first() else {
        return Ok(s);
    };
    let headers: Vec<String> = first.iter().map(|(k, _)| k.to_uppercase()).collect();
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let numeric: Vec<usize> = first
        .iter()
        .enumerate()
        .filter(|(_, (_, v))| v.is_number())
        .map(|(i, _)| i)
        .collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|(_, v)| value_cell(v)).collect())
        .collect();
    s.push_str(&table(&headers, &cells, &numeric));
    Ok(s)
}

// ---------------------------------------------------------------------------------------
// formatting

/// "1 entry", "2 entries".
fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn pretty(v: &Value) -> String {
    // Serializing a `Value` cannot fail: its keys are strings.
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

/// A string as a table cell: bare when it is one printable word, else quoted and escaped,
/// so spaces and control characters cannot break the columns.
fn cell(s: &str) -> String {
    let bare = !s.is_empty()
        && !s.starts_with('"')
        && s.chars().all(|c| !c.is_whitespace() && !c.is_control());
    if bare {
        s.to_string()
    } else {
        format!("{s:?}")
    }
}

fn value_cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => cell(s),
        other => other.to_string(),
    }
}

/// Columns padded to their widest cell; columns in `right` (indices) are right-aligned.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            if let Some(w) = width.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let mut s = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let mut line = String::new();
        for (i, c) in row.iter().enumerate() {
            let w = width.get(i).copied().unwrap_or(0);
            if i > 0 {
                line.push_str("  ");
            }
            if right.contains(&i) {
                let _ = write!(line, "{c:>w$}");
            } else {
                let _ = write!(line, "{c:<w$}");
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

fn ms_dur(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// `ms` since the Unix epoch as RFC 3339 UTC, or `None` past year 9999 (which only a
/// damaged file could hold, and which the formatter cannot print).
pub(crate) fn timestamp(ms: u64) -> Option<String> {
    if ms / 1000 >= 253_402_300_800 {
        return None;
    }
    let t = SystemTime::UNIX_EPOCH.checked_add(ms_dur(ms))?;
    Some(humantime::format_rfc3339_millis(t).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoders_are_picked_by_job_uid_state_and_scope() {
        use StateScope::*;
        let find = Decoder::find;
        assert_eq!(
            find("keyed-count", "count", "count", Keyed),
            Some(Decoder::U64Count)
        );
        assert_eq!(
            find("wordcount", "count", "count", Keyed),
            Some(Decoder::WordCount)
        );
        assert_eq!(
            find("keyed-count", "generator", "splits", Operator),
            Some(Decoder::GeneratorSplits)
        );
        assert_eq!(
            find("wordcount", "files", "files", Operator),
            Some(Decoder::FileSplits)
        );
        assert_eq!(find("my-job", "count", "count", Keyed), None);
        assert_eq!(find("keyed-count", "count", "count", Operator), None);
        assert_eq!(find("wordcount", "generator", "splits", Operator), None);
    }

    #[test]
    fn cells_and_tables_stay_aligned() {
        assert_eq!(cell("word"), "word");
        assert_eq!(cell("two words"), "\"two words\"");
        assert_eq!(cell("a\nb"), "\"a\\nb\"");
        assert_eq!(cell(""), "\"\"");
        let t = table(
            &["A", "NUM"],
            &[
                vec!["xyz".into(), "5".into()],
                vec!["b".into(), "1234".into()],
            ],
            &[1],
        );
        assert_eq!(t, "A     NUM\nxyz     5\nb    1234\n");
    }

    #[test]
    fn sizes_times_and_hex() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 * 1024 * 1024), "5.0 MiB");
        assert_eq!(human_bytes(u64::MAX), "16384.0 PiB");
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(
            timestamp(1_700_000_000_123).as_deref(),
            Some("2023-11-14T22:13:20.123Z")
        );
        assert_eq!(timestamp(u64::MAX), None);
    }
}
