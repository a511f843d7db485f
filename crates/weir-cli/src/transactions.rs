//! `weir transactions list|settle`: the transactions a job's two-phase-commit sinks left
//! open in their external systems, and what the job's latest completed checkpoint says of
//! each — settled without restarting the job.
//!
//! A job abandoned between pre-commit and commit (or whose checkpoints are lost) leaves
//! prepared transactions behind; only a restart of the same job would settle them. This
//! tool applies the rule the sink's own recovery applies on restore
//! (`TwoPhaseCommitSink::recover`): a transaction the latest completed checkpoint lists in
//! its `pending-transactions` state is **committed**; any other transaction of a sink that
//! checkpoint knows (`<job>~<uid>~<subtask>-<n>`) is **rolled back**, as its records are
//! replayed from that checkpoint. A transaction carrying the job's prefix (`<job>~`) but of
//! no sink in the checkpoint is an **orphan**: listed, and touched only with
//! `--abort-orphans`.
//!
//! The checkpoint does not hold the sinks' connection details (passwords have no place in
//! it): the tool takes the sink URL the job was run with (`--sink postgres://…`,
//! `--sink files:DIR`). PostgreSQL prepared transactions and the file sink's hidden parts
//! (a listed pending part is renamed to its visible name, any other in-progress or pending
//! part of the sink deleted) are handled; JetStream messages are not yet.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde::Deserialize;
use weir::api::two_phase_commit::PENDING_TRANSACTIONS;
use weir::connectors::files::FileCommittable;
use weir::inspect;

use crate::checkpoints::{self, Status};
use crate::inspect::table;

/// `weir transactions …`
#[derive(Subcommand)]
pub enum TransactionsCommand {
    /// List the transactions the job's 2PC sinks left open, with what the latest completed
    /// checkpoint says of each (commit, abort) and the orphans no checkpoint knows.
    List(ListArgs),
    /// Commit or roll back those transactions as the latest completed checkpoint says,
    /// after a confirmation (or `--yes`); orphans only with `--abort-orphans`.
    Settle(SettleArgs),
}

/// Where the job's checkpoints and sinks are.
#[derive(Args)]
pub struct ListArgs {
    /// The job's checkpoint directory (as given to `--checkpoint-dir`), or its job folder.
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: PathBuf,
    /// Only this job (a folder in the checkpoint directory); default: every job in it.
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
    /// The sink the job was run with (`postgres://USER[:PASSWORD]@HOST[:PORT]/DB/TABLE` or
    /// `files:DIR`); repeat for several sinks.
    #[arg(long = "sink", value_name = "URL", required = true)]
    sinks: Vec<String>,
}

/// `weir transactions settle`.
#[derive(Args)]
pub struct SettleArgs {
    #[command(flatten)]
    list: ListArgs,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
    /// Also roll back orphans: transactions with the job's prefix that no checkpoint knows.
    #[arg(long)]
    abort_orphans: bool,
}

/// What the latest completed checkpoint says of an open transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    /// Listed as pending: its records precede a completed checkpoint.
    Commit,
    /// Of a sink the checkpoint knows, not listed: its records are replayed from it.
    Abort,
    /// With the job's prefix, of no sink in the checkpoint.
    Orphan,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Commit => "commit",
            Verdict::Abort => "abort",
            Verdict::Orphan => "orphan",
        }
    }
}

/// One open transaction found in a sink's system.
#[derive(Debug, Clone)]
struct Open {
    job: String,
    checkpoint: u64,
    /// The sink URL (password hidden) it was found through.
    system: String,
    /// Index into the sink URLs.
    sink: usize,
    name: String,
    verdict: Verdict,
}

/// A PostgreSQL sink's committable (`weir_connectors::postgres::PreparedTransaction`,
/// same fields in the same order: postcard encodes structs by position), behind the
/// checkpoint id it was pre-committed for.
#[derive(Deserialize)]
struct PgCommittable {
    gid: String,
    #[allow(dead_code)]
    rows: u64,
}

/// A job's latest completed checkpoint and its 2PC sinks.
struct JobCheckpoint {
    job: String,
    id: u64,
    /// PostgreSQL sink uid → the transaction names it lists as pending (to commit).
    sinks: BTreeMap<String, BTreeSet<String>>,
    /// File sink uid → the committed names of the parts it lists as pending.
    file_sinks: BTreeMap<String, BTreeSet<String>>,
}

/// Runs a `weir transactions` command.
pub fn run(cmd: TransactionsCommand) -> Result<ExitCode> {
    match cmd {
        TransactionsCommand::List(args) => {
            let (open, notes) = find(&args)?;
            print(&render(&open, &notes));
            Ok(ExitCode::SUCCESS)
        }
        TransactionsCommand::Settle(args) => settle(&args),
    }
}

fn print(text: &str) {
    let mut out = io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
}

/// The latest completed checkpoint of every job under `dir` (or of `job`).
fn latest_checkpoints(
    dir: &Path,
    job: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<Vec<JobCheckpoint>> {
    let rows = checkpoints::list(dir)?;
    let mut latest: BTreeMap<String, (u64, PathBuf)> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for r in rows {
        if job.is_some_and(|j| j != r.job) {
            continue;
        }
        seen.insert(r.job.clone());
        if let Status::Complete(..) = r.status {
            let e = latest
                .entry(r.job.clone())
                .or_insert((r.id, r.path.clone()));
            if r.id >= e.0 {
                *e = (r.id, r.path.clone());
            }
        }
    }
    let missing: Vec<&String> = seen.iter().filter(|j| !latest.contains_key(*j)).collect();
    if let Some(j) = missing.first() {
        bail!(
            "job `{j}` has no completed checkpoint in {}, so nothing says which of its \
             transactions to commit; restart the job from a savepoint instead, or roll its \
             transactions back by hand",
            dir.display()
        );
    }
    if latest.is_empty() {
        bail!(
            "no completed checkpoint{} in {}; pass the directory the job was run with \
             (`--checkpoint-dir`)",
            job.map(|j| format!(" of job `{j}`")).unwrap_or_default(),
            dir.display()
        );
    }
    let mut out = Vec::new();
    for (job, (id, path)) in latest {
        let d = inspect::describe(&path)
            .with_context(|| format!("cannot read checkpoint {}", path.display()))?;
        let mut sinks = BTreeMap::new();
        let mut file_sinks = BTreeMap::new();
        for op in &d.operators {
            if !op.states.iter().any(|s| s.name == PENDING_TRANSACTIONS) {
                continue;
            }
            let raw = inspect::raw_state(&path, &op.uid, PENDING_TRANSACTIONS)?;
            let prefix = format!("{job}~{}~", op.uid);
            match raw.list_elements::<(u64, FileCommittable)>() {
                // Nothing pending decodes as any connector's list: the sink's own names,
                // database or folder alike, are all to abort.
                Ok(parts) if parts.is_empty() => {
                    sinks.insert(op.uid.clone(), BTreeSet::new());
                    file_sinks.insert(op.uid.clone(), BTreeSet::new());
                    continue;
                }
                // Another connector's bytes could decode by chance: require the sink's
                // own transaction names and part names.
                Ok(parts)
                    if parts.iter().all(|e| {
                        let c = &e.value.1;
                        c.transaction.starts_with(&prefix)
                            && c.parts.iter().all(|p| p.starts_with("part-"))
                    }) =>
                {
                    let parts = parts.into_iter().flat_map(|e| e.value.1.parts);
                    file_sinks.insert(op.uid.clone(), parts.collect());
                    continue;
                }
                _ => {}
            }
            // Another connector's committables (file parts, JetStream) do not decode as
            // PostgreSQL ones, or carry names outside the sink's prefix.
            let names = raw
                .list_elements::<(u64, PgCommittable)>()
                .ok()
                .map(|v| {
                    v.into_iter()
                        .map(|e| e.value.1.gid)
                        .collect::<BTreeSet<_>>()
                })
                .filter(|names| names.iter().all(|g| g.starts_with(&prefix)));
            match names {
                Some(names) => {
                    sinks.insert(op.uid.clone(), names);
                }
                // Unknown handles must not turn into "abort": a transaction the checkpoint
                // may list would be rolled back and its records lost. Its transactions
                // show as orphans instead, touched only on request.
                None => notes.push(format!(
                    "job `{job}`: the pending transactions of sink `{}` in chk-{id} are neither \
                     PostgreSQL ones nor file parts; its transactions, if any, show as orphans",
                    op.uid
                )),
            }
        }
        out.push(JobCheckpoint {
            job,
            id,
            sinks,
            file_sinks,
        });
    }
    Ok(out)
}

/// Every open transaction of the jobs' sinks, with its verdict; and notes for the user.
fn find(args: &ListArgs) -> Result<(Vec<Open>, Vec<String>)> {
    let mut notes = Vec::new();
    let jobs = latest_checkpoints(&args.checkpoint_dir, args.job.as_deref(), &mut notes)?;
    let mut open = Vec::new();
    for (i, url) in args.sinks.iter().enumerate() {
        let (system, names) = list_system(url)?;
        let files = url.starts_with("files:");
        for name in names {
            let Some(job) = jobs.iter().find(|j| {
                let prefix = format!("{}~", j.job);
                match files {
                    true => name.starts_with(&format!(".part-{}", sanitize(&prefix))),
                    false => name.starts_with(&prefix),
                }
            }) else {
                continue;
            };
            let verdict = match files {
                true => file_verdict(job, &name),
                false => verdict(job, &name),
            };
            open.push(Open {
                job: job.job.clone(),
                checkpoint: job.id,
                system: system.clone(),
                sink: i,
                name,
                verdict,
            });
        }
    }
    for j in &jobs {
        if j.sinks.is_empty() && j.file_sinks.is_empty() {
            notes.push(format!(
                "job `{}`: chk-{} has no two-phase-commit sink state",
                j.job, j.id
            ));
        }
        let listed: usize = j.sinks.values().map(BTreeSet::len).sum();
        let still_open = open
            .iter()
            .filter(|o| o.job == j.job && o.verdict == Verdict::Commit)
            .count();
        if listed > still_open {
            notes.push(format!(
                "job `{}`: {} of the {listed} transactions chk-{} lists are committed already",
                j.job,
                listed - still_open,
                j.id
            ));
        }
    }
    open.sort_by(|a, b| (&a.job, a.verdict, &a.name).cmp(&(&b.job, b.verdict, &b.name)));
    Ok((open, notes))
}

/// What `job`'s latest checkpoint says of the transaction `name`.
fn verdict(job: &JobCheckpoint, name: &str) -> Verdict {
    for (uid, listed) in &job.sinks {
        let prefix = format!("{}~{uid}~", job.job);
        if own_name(&prefix, name) {
            return if listed.contains(name) {
                Verdict::Commit
            } else {
                Verdict::Abort
            };
        }
    }
    Verdict::Orphan
}

/// What `job`'s latest checkpoint says of the hidden part file `name`: a pending part it
/// lists is committed (renamed to its visible name); any other in-progress or pending part
/// of a file sink it knows is deleted, as the file sink's own recovery does.
fn file_verdict(job: &JobCheckpoint, name: &str) -> Verdict {
    for (uid, listed) in &job.file_sinks {
        let prefix = format!(".part-{}", sanitize(&format!("{}~{uid}~", job.job)));
        if !name.starts_with(&prefix) {
            continue;
        }
        let pending = name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".pending"));
        return match pending {
            Some(committed) if listed.contains(committed) => Verdict::Commit,
            _ => Verdict::Abort,
        };
    }
    Verdict::Orphan
}

/// The file sink's rule for names in file names (`connectors/files/part.rs`): every
/// character but ASCII letters, digits, `-`, `_`, `~` and `.` becomes `_`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '~' | '.') => c,
            _ => '_',
        })
        .collect()
}

/// Whether `name` is `<prefix><subtask>-<checkpoint>`.
fn own_name(prefix: &str, name: &str) -> bool {
    let Some(tail) = name.strip_prefix(prefix) else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    matches!(tail.split_once('-'), Some((s, c)) if digits(s) && digits(c))
}

/// The system behind a sink URL (shown without its password) and its open transactions.
fn list_system(url: &str) -> Result<(String, Vec<String>)> {
    if let Some(dir) = url.strip_prefix("files:") {
        return Ok((url.to_string(), hidden_parts(Path::new(dir))?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            let (shown, mut conn) = pg_connect(url)?;
            let names = conn.list().map_err(|e| anyhow::anyhow!("{e}"))?;
            return Ok((shown, names));
        }
        #[cfg(not(feature = "postgres"))]
        bail!("this weir was built without PostgreSQL support (cargo feature `postgres`)");
    }
    bail!(
        "--sink `{url}`: only PostgreSQL sinks (postgres://…) and file sinks (files:DIR) \
         are settled by this tool so far; settle JetStream messages by restarting the job \
         from its latest checkpoint (`weir run … --restore latest`)"
    )
}

/// The in-progress and pending part files in a file sink's folder (any job's).
fn hidden_parts(dir: &Path) -> Result<Vec<String>> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "cannot list the file sink's folder {}; pass the folder the job wrote into \
             (its --sink files:DIR)",
            dir.display()
        )
    })?;
    let mut out = Vec::new();
    for e in entries {
        let e = e.with_context(|| format!("cannot list {}", dir.display()))?;
        let Ok(name) = e.file_name().into_string() else {
            continue; // not a part: their names are ASCII
        };
        if name.starts_with(".part-")
            && (name.ends_with(".pending") || name.ends_with(".inprogress"))
        {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Commits (renames to the visible name) or deletes the hidden part `name` in `dir`;
/// a part already gone was settled before.
fn settle_part(dir: &Path, name: &str, commit: bool) -> Result<&'static str> {
    let from = dir.join(name);
    if !from.exists() {
        return Ok("already settled");
    }
    if !commit {
        std::fs::remove_file(&from).with_context(|| format!("cannot delete {}", from.display()))?;
        return Ok("deleted");
    }
    let committed = name
        .strip_prefix('.')
        .and_then(|n| n.strip_suffix(".pending"))
        .context("only a pending part can be committed")?;
    let to = dir.join(committed);
    if to.exists() {
        bail!(
            "refusing to commit {}: {} exists already (another run of this job and sink \
             wrote into the same folder); move one of them away first",
            from.display(),
            to.display()
        );
    }
    std::fs::rename(&from, &to).with_context(|| format!("cannot commit {}", from.display()))?;
    Ok("committed")
}

#[cfg(feature = "postgres")]
fn pg_connect(url: &str) -> Result<(String, weir_connectors::postgres::PreparedTransactions)> {
    use weir_connectors::postgres::{PostgresSinkConfig, PreparedTransactions};
    let config = PostgresSinkConfig::parse(url).map_err(|e| anyhow::anyhow!("--sink: {e}"))?;
    let shown = format!(
        "postgres://{}@{}/{}",
        config.user,
        config.address(),
        config.database
    );
    let conn = PreparedTransactions::connect(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((shown, conn))
}

fn render(open: &[Open], notes: &[String]) -> String {
    let mut s = if open.is_empty() {
        "no open transactions of these jobs\n".to_string()
    } else {
        let cells: Vec<Vec<String>> = open
            .iter()
            .map(|o| {
                vec![
                    o.job.clone(),
                    format!("chk-{}", o.checkpoint),
                    o.system.clone(),
                    o.name.clone(),
                    o.verdict.as_str().to_string(),
                ]
            })
            .collect();
        table(
            &[
                "JOB",
                "CHECKPOINT",
                "SYSTEM",
                "TRANSACTION",
                "CHECKPOINT_SAYS",
            ],
            &cells,
            &[],
        )
    };
    for n in notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

fn settle(args: &SettleArgs) -> Result<ExitCode> {
    let (open, notes) = find(&args.list)?;
    print(&render(&open, &notes));
    let todo: Vec<&Open> = open
        .iter()
        .filter(|o| o.verdict != Verdict::Orphan || args.abort_orphans)
        .collect();
    let orphans_left = open.len() - todo.len();
    if todo.is_empty() {
        print("nothing to settle\n");
    } else {
        if !args.yes && !confirm(&todo)? {
            print("nothing settled\n");
            return Ok(ExitCode::FAILURE);
        }
        for (i, url) in args.list.sinks.iter().enumerate() {
            let mine: Vec<&&Open> = todo.iter().filter(|o| o.sink == i).collect();
            if mine.is_empty() {
                continue;
            }
            match url.strip_prefix("files:") {
                Some(dir) => {
                    for o in mine {
                        let what =
                            settle_part(Path::new(dir), &o.name, o.verdict == Verdict::Commit)?;
                        print(&format!("{what} {}\n", o.name));
                    }
                }
                None => settle_in(url, &mine)?,
            }
        }
    }
    if orphans_left > 0 {
        print(&format!(
            "{orphans_left} orphan(s) left alone; pass --abort-orphans to roll them back\n"
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn confirm(todo: &[&Open]) -> Result<bool> {
    let commits = todo.iter().filter(|o| o.verdict == Verdict::Commit).count();
    eprint!(
        "commit {commits} and roll back {} transaction(s)? [y/N] ",
        todo.len() - commits
    );
    let mut line = String::new();
    io::stdin()
        .lock()
        .read_line(&mut line)
        .context("cannot read the confirmation; pass --yes to settle without asking")?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

#[cfg(feature = "postgres")]
fn settle_in(url: &str, todo: &[&&Open]) -> Result<()> {
    use weir_connectors::postgres::Settled;
    let (_, mut conn) = pg_connect(url)?;
    for o in todo {
        let commit = o.verdict == Verdict::Commit;
        let done = conn
            .settle(&o.name, commit)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let what = match (done, commit) {
            (Settled::AlreadyGone, _) => "already settled",
            (Settled::Done, true) => "committed",
            (Settled::Done, false) => "rolled back",
        };
        print(&format!("{what} {}\n", o.name));
    }
    Ok(())
}

#[cfg(not(feature = "postgres"))]
fn settle_in(_url: &str, _todo: &[&&Open]) -> Result<()> {
    bail!("this weir was built without PostgreSQL support (cargo feature `postgres`)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobCheckpoint {
        let mut sinks = BTreeMap::new();
        sinks.insert(
            "pg".to_string(),
            BTreeSet::from(["j~pg~0-3".to_string(), "j~pg~1-3".to_string()]),
        );
        let mut file_sinks = BTreeMap::new();
        file_sinks.insert(
            "out".to_string(),
            BTreeSet::from(["part-j~out~0-3-0.tsv".to_string()]),
        );
        JobCheckpoint {
            job: "j".into(),
            id: 3,
            sinks,
            file_sinks,
        }
    }

    #[test]
    fn the_checkpoint_decides_commit_abort_or_orphan() {
        let j = job();
        assert_eq!(verdict(&j, "j~pg~0-3"), Verdict::Commit);
        assert_eq!(
            verdict(&j, "j~pg~0-4"),
            Verdict::Abort,
            "after the checkpoint"
        );
        assert_eq!(verdict(&j, "j~other~0-4"), Verdict::Orphan, "unknown sink");
        assert_eq!(verdict(&j, "j~pg~x"), Verdict::Orphan, "not a sink's name");
        let f = |n: &str| file_verdict(&j, n);
        assert_eq!(f(".part-j~out~0-3-0.tsv.pending"), Verdict::Commit);
        assert_eq!(f(".part-j~out~0-4-0.tsv.pending"), Verdict::Abort);
        assert_eq!(f(".part-j~out~0-5.inprogress"), Verdict::Abort);
        assert_eq!(f(".part-j~old~0-3-0.tsv.pending"), Verdict::Orphan);
    }
}
