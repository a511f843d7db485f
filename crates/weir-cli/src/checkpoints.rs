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
use weir::inspect;
use weir::storage::backend::StorageBackend;
use weir::storage::{is_remote, open_backend, parse_checkpoint_dir_name, METADATA_FILE_NAME};

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

/// One `chk-<n>` folder and what reading it found (`weir transactions` reuses it).
pub(crate) struct Row {
    pub(crate) job: String,
    pub(crate) id: u64,
    pub(crate) path: PathBuf,
    pub(crate) status: Status,
}

/// Whether a `chk-<n>` folder is a complete, readable checkpoint.
pub(crate) enum Status {
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

/// The `chk-<n>` folders under `prefix` of `store`, by id.
fn chk_dirs(store: &dyn StorageBackend, prefix: &str) -> Result<Vec<(u64, String)>> {
    let mut out = Vec::new();
    for name in store
        .list(prefix)
        .with_context(|| format!("cannot list {}", store.describe(prefix).display()))?
    {
        if let Some(id) = parse_checkpoint_dir_name(&name) {
            out.push((id, join_key(prefix, &name)));
        }
    }
    out.sort_by_key(|(id, _)| *id);
    Ok(out)
}

fn join_key(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

/// Lists through the storage backend, so a local folder, `s3://bucket/prefix` and the
/// other locations `--checkpoint-dir` takes all work the same.
pub(crate) fn list(dir: &Path) -> Result<Vec<Row>> {
    if !is_remote(dir) && !dir.is_dir() {
        bail!(
            "{} is not a folder; pass a checkpoint directory or a job's folder in it",
            dir.display()
        );
    }
    let store = open_backend(dir)?;
    let mut jobs: Vec<(String, String)> = Vec::new();
    if chk_dirs(store.as_ref(), "")?.is_empty() {
        for name in store
            .list("")
            .with_context(|| format!("cannot list {}", dir.display()))?
        {
            if !chk_dirs(store.as_ref(), &name)?.is_empty() {
                jobs.push((name.clone(), name));
            }
        }
        jobs.sort();
    } else {
        let name = dir
            .file_name()
            .map_or_else(|| ".".to_string(), |n| n.to_string_lossy().into_owned());
        jobs.push((name, String::new()));
    }
    let mut rows = Vec::new();
    for (job, prefix) in jobs {
        for (id, key) in chk_dirs(store.as_ref(), &prefix)? {
            let path = store.describe(&key);
            let status = match store.size(&join_key(&key, METADATA_FILE_NAME)) {
                Err(e) if e.is_not_found() => Status::Incomplete,
                Err(e) => Status::Unreadable(e.to_string()),
                Ok(_) => match inspect::describe(&path) {
                    Ok(d) => {
                        let read = crate::inspect::source_records(&path)
                            .ok()
                            .filter(|s| !s.is_empty())
                            .map(|s| s.iter().map(|p| p.records).sum());
                        Status::Complete(Box::new(d), read)
                    }
                    Err(e) => Status::Unreadable(e.to_string()),
                },
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
            "new_bytes": d.new_bytes(),
            "shared_bytes": d.shared_bytes,
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
                    if d.shared_bytes > 0 {
                        // Incremental: what it references, and what it wrote itself.
                        format!(
                            "{} ({} new)",
                            human_bytes(d.total_bytes()),
                            human_bytes(d.new_bytes())
                        )
                    } else {
                        human_bytes(d.total_bytes())
                    },
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
