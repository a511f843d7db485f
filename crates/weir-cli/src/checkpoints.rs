//! `weir checkpoints list`: the checkpoints in a folder — complete, incomplete or unreadable;
//! `weir checkpoints inspect`: one checkpoint or savepoint in detail.
//!
//! The folder may be a job's folder (`<checkpoint-dir>/<job>`, holding `chk-<n>`) or a
//! checkpoint directory holding several jobs' folders. Every complete checkpoint is read in
//! full (checksums verified), so the listing says which ones `--restore latest` would skip.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use weir::checkpoint::inspect;
use weir::checkpoint::storage::parse_checkpoint_dir_name;

use crate::inspect::{human_bytes, table, timestamp, Format};

/// `weir checkpoints …`
#[derive(Subcommand)]
pub enum CheckpointsCommand {
    /// List the checkpoints in a folder: id, time, size, duration, the records its sources
    /// had read (where a restore resumes), complete or not.
    List(ListArgs),
    /// Show one checkpoint or savepoint: operators, subtasks, state sizes, source positions.
    Inspect(InspectArgs),
}

/// Arguments of `weir checkpoints inspect`.
#[derive(Args)]
pub struct InspectArgs {
    /// A checkpoint or savepoint folder (the one `--restore` takes).
    path: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Arguments of `weir checkpoints list`.
#[derive(Args)]
pub struct ListArgs {
    /// A job's checkpoint folder (`<checkpoint-dir>/<job>`) or a checkpoint directory.
    dir: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// One `chk-<n>` folder and what reading it found.
struct Row {
    job: String,
    id: u64,
    path: PathBuf,
    status: Status,
}

enum Status {
    /// Readable; with the records its sources had read (`None` before metadata layout 3).
    Complete(Box<inspect::CheckpointDescription>, Option<u64>),
    Incomplete,
    Unreadable(String),
}

/// Runs a `weir checkpoints` command.
pub fn run(cmd: CheckpointsCommand) -> Result<ExitCode> {
    let text = match cmd {
        CheckpointsCommand::List(args) => {
            let rows = list(&args.dir)?;
            match args.format {
                Format::Json => {
                    let items: Vec<_> = rows.iter().map(row_json).collect();
                    serde_json::to_string_pretty(&items)? + "\n"
                }
                Format::Text => rows_text(&rows, &args.dir),
            }
        }
        CheckpointsCommand::Inspect(args) => {
            crate::inspect::inspect_checkpoint(&args.path, args.format == Format::Json)?
        }
    };
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(anyhow::anyhow!("cannot write to standard output: {e}"))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

fn chk_dirs(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let e = e.with_context(|| format!("cannot list {}", dir.display()))?;
        if let Some(id) = e.file_name().to_str().and_then(parse_checkpoint_dir_name) {
            if e.path().is_dir() {
                out.push((id, e.path()));
            }
        }
    }
    out.sort_by_key(|(id, _)| *id);
    Ok(out)
}

fn list(dir: &Path) -> Result<Vec<Row>> {
    if !dir.is_dir() {
        bail!(
            "{} is not a folder; pass a checkpoint directory or a job's folder in it",
            dir.display()
        );
    }
    let mut jobs: Vec<(String, PathBuf)> = Vec::new();
    if chk_dirs(dir)?.is_empty() {
        for e in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
            let e = e.with_context(|| format!("cannot list {}", dir.display()))?;
            if e.path().is_dir() && !chk_dirs(&e.path())?.is_empty() {
                jobs.push((e.file_name().to_string_lossy().into_owned(), e.path()));
            }
        }
        jobs.sort();
    } else {
        let name = dir
            .file_name()
            .map_or_else(|| ".".to_string(), |n| n.to_string_lossy().into_owned());
        jobs.push((name, dir.to_path_buf()));
    }
    let mut rows = Vec::new();
    for (job, jdir) in jobs {
        for (id, path) in chk_dirs(&jdir)? {
            let status = if !path.join("_metadata").exists() {
                Status::Incomplete
            } else {
                match inspect::describe(&path) {
                    Ok(d) => {
                        let read = crate::inspect::source_records(&path)
                            .ok()
                            .filter(|s| !s.is_empty())
                            .map(|s| s.iter().map(|p| p.records).sum());
                        Status::Complete(Box::new(d), read)
                    }
                    Err(e) => Status::Unreadable(e.to_string()),
                }
            };
            rows.push(Row {
                job: job.clone(),
                id,
                path,
                status,
            });
        }
    }
    Ok(rows)
}

fn row_json(r: &Row) -> serde_json::Value {
    match &r.status {
        Status::Complete(d, read) => json!({
            "job": r.job, "id": r.id, "path": r.path.display().to_string(), "status": "complete",
            "completed": timestamp(d.completed_timestamp_ms),
            "duration_ms": d.completed_timestamp_ms.saturating_sub(d.trigger_timestamp_ms),
            "bytes": d.total_bytes(),
            "source_records": read,
        }),
        Status::Incomplete => json!({
            "job": r.job, "id": r.id, "path": r.path.display().to_string(), "status": "incomplete",
        }),
        Status::Unreadable(e) => json!({
            "job": r.job, "id": r.id, "path": r.path.display().to_string(), "status": "unreadable",
            "error": e,
        }),
    }
}

fn rows_text(rows: &[Row], dir: &Path) -> String {
    if rows.is_empty() {
        return format!("no checkpoints in {}\n", dir.display());
    }
    let mut notes = Vec::new();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let (status, when, took, size, read) = match &r.status {
                Status::Complete(d, read) => (
                    "complete".to_string(),
                    timestamp(d.completed_timestamp_ms).unwrap_or_else(|| "?".into()),
                    format!(
                        "{} ms",
                        d.completed_timestamp_ms
                            .saturating_sub(d.trigger_timestamp_ms)
                    ),
                    human_bytes(d.total_bytes()),
                    read.map_or("?".into(), |n| n.to_string()),
                ),
                Status::Incomplete => (
                    "incomplete".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ),
                Status::Unreadable(e) => {
                    notes.push(format!("chk-{} of {}: {e}", r.id, r.job));
                    let dash = || "-".to_string();
                    ("unreadable".into(), dash(), dash(), dash(), dash())
                }
            };
            vec![
                r.job.clone(),
                r.id.to_string(),
                status,
                when,
                took,
                size,
                read,
            ]
        })
        .collect();
    let mut s = table(
        &[
            "JOB",
            "ID",
            "STATUS",
            "COMPLETED",
            "DURATION",
            "SIZE",
            "RECORDS_READ",
        ],
        &cells,
        &[1, 4, 5, 6],
    );
    for n in notes {
        s.push_str(&format!("! {n}\n"));
    }
    s
}
