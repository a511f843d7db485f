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
//! `--sink files:DIR`, `--sink nats://HOST/STREAM`). Handled:
//! * PostgreSQL prepared transactions (committed or rolled back);
//! * the file sink's hidden parts (a listed pending part is renamed to its visible name, any
//!   other in-progress or pending part of the sink deleted);
//! * JetStream commits: that sink is write-ahead, so nothing of a transaction reaches the
//!   stream before its checkpoint completes, and nothing is ever to abort. What can linger is
//!   a committable the checkpoint lists whose messages the stream does not (all) hold: it is
//!   listed with the count of missing messages, and settling publishes exactly those, under
//!   their own message ids (`weir_connectors::nats::PendingCommits`).

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
    /// The sink the job was run with (`postgres://USER[:PASSWORD]@HOST[:PORT]/DB/TABLE`,
    /// `files:DIR` or `nats://HOST[:PORT]/STREAM[?subject=S]`); repeat for several sinks.
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
    /// What the verdict means here, when more than the verdict (a JetStream commit's
    /// missing messages).
    detail: Option<String>,
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

/// A JetStream sink's committable (`weir_connectors::nats::JetStreamCommittable`, same
/// fields in the same order), behind the checkpoint id it was pre-committed for.
#[derive(Deserialize, Clone)]
struct JsCommittable {
    name: String,
    run: String,
    subject: String,
    payloads: Vec<Vec<u8>>,
}

impl JsCommittable {
    /// Whether these bytes are plausibly a JetStream sink's handle of the sink `prefix`
    /// (other connectors' bytes can decode by chance): its name, a 16-digit hex run id and
    /// a subject.
    fn is_own(&self, prefix: &str) -> bool {
        own_name(prefix, &self.name)
            && self.run.len() == 16
            && self.run.bytes().all(|b| b.is_ascii_hexdigit())
            && !self.subject.is_empty()
            && !self.subject.contains([' ', '*', '>'])
    }
}

/// A job's latest completed checkpoint and its 2PC sinks.
struct JobCheckpoint {
    job: String,
    id: u64,
    /// PostgreSQL sink uid → the transaction names it lists as pending (to commit).
    sinks: BTreeMap<String, BTreeSet<String>>,
    /// File sink uid → the committed names of the parts it lists as pending.
    file_sinks: BTreeMap<String, BTreeSet<String>>,
    /// JetStream sink uid → the commits it lists as pending.
    jetstream: BTreeMap<String, Vec<JsCommittable>>,
}

/// Runs a `weir transactions` command.
pub fn run(cmd: TransactionsCommand) -> Result<ExitCode> {
    match cmd {
        TransactionsCommand::List(args) => {
            let (open, notes, _) = find(&args)?;
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
    // Checkpoints with a `_metadata` that cannot be read (corrupt, foreign, truncated).
    let mut unreadable: Vec<(String, u64, String)> = Vec::new();
    for r in rows {
        if job.is_some_and(|j| j != r.job) {
            continue;
        }
        seen.insert(r.job.clone());
        match r.status {
            Status::Complete(..) => {
                let e = latest
                    .entry(r.job.clone())
                    .or_insert((r.id, r.path.clone()));
                if r.id >= e.0 {
                    *e = (r.id, r.path.clone());
                }
            }
            Status::Unreadable(cause) => unreadable.push((r.job.clone(), r.id, cause)),
            Status::Incomplete => {}
        }
    }
    let missing: Vec<&String> = seen.iter().filter(|j| !latest.contains_key(*j)).collect();
    if let Some(j) = missing.first() {
        let damaged: Vec<String> = unreadable
            .iter()
            .filter(|(job, ..)| job == *j)
            .map(|(_, id, cause)| format!("chk-{id}: {cause}"))
            .collect();
        bail!(
            "job `{j}` has no completed checkpoint in {}{}, so nothing says which of its \
             transactions to commit; restart the job from a savepoint instead, or roll its \
             transactions back by hand",
            dir.display(),
            match damaged.is_empty() {
                true => String::new(),
                false => format!(" (unreadable: {})", damaged.join("; ")),
            }
        );
    }
    // A newer checkpoint that cannot be read is passed over, as `--restore latest` passes
    // over it: say so, since the verdicts then follow an older checkpoint.
    for (j, id, cause) in &unreadable {
        if let Some((used, _)) = latest.get(j).filter(|(used, _)| used < id) {
            notes.push(format!(
                "job `{j}`: chk-{id} is unreadable ({cause}); judged by chk-{used}, the \
                 newest readable checkpoint, which `--restore latest` would restore"
            ));
        }
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
        let mut jetstream = BTreeMap::new();
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
            // Before PostgreSQL's: a JetStream handle decodes as a PostgreSQL one too (its
            // name, then its run id's length read as a row count).
            if let Ok(commits) = raw.list_elements::<(u64, JsCommittable)>() {
                if commits.iter().all(|e| e.value.1.is_own(&prefix)) {
                    let commits = commits.into_iter().map(|e| e.value.1).collect();
                    jetstream.insert(op.uid.clone(), commits);
                    continue;
                }
            }
            // Another connector's committables (file parts) do not decode as PostgreSQL
            // ones, or carry names outside the sink's prefix.
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
                     PostgreSQL ones, file parts nor JetStream commits; its transactions, if \
                     any, show as orphans",
                    op.uid
                )),
            }
        }
        out.push(JobCheckpoint {
            job,
            id,
            sinks,
            file_sinks,
            jetstream,
        });
    }
    Ok(out)
}

/// Every open transaction of the jobs' sinks, with its verdict; notes for the user; and the
/// jobs' checkpoints they were judged by.
fn find(args: &ListArgs) -> Result<(Vec<Open>, Vec<String>, Vec<JobCheckpoint>)> {
    let mut notes = Vec::new();
    let jobs = latest_checkpoints(&args.checkpoint_dir, args.job.as_deref(), &mut notes)?;
    let mut open = Vec::new();
    let mut captured = BTreeSet::new();
    for (i, url) in args.sinks.iter().enumerate() {
        if url.starts_with("nats://") {
            jetstream_open(url, i, &jobs, &mut open, &mut captured)?;
            continue;
        }
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
                detail: None,
            });
        }
    }
    for j in &jobs {
        for (uid, commits) in &j.jetstream {
            let pending = commits
                .iter()
                .filter(|c| !captured.contains(&c.name))
                .count();
            if pending > 0 {
                notes.push(format!(
                    "job `{}`: JetStream sink `{uid}` has {pending} commit(s) pending in chk-{} \
                     on subjects no --sink names; pass its --sink nats://HOST/STREAM to check \
                     them",
                    j.job, j.id
                ));
            }
        }
        if j.sinks.is_empty() && j.file_sinks.is_empty() && j.jetstream.is_empty() {
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
    Ok((open, notes, jobs))
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
        "--sink `{url}`: this tool settles PostgreSQL sinks (postgres://…), file sinks \
         (files:DIR) and JetStream sinks (nats://HOST/STREAM); other sinks hold no \
         transactions outside the job"
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

/// The JetStream commits of `jobs` that publish into the stream of `url` and whose
/// messages the stream does not all hold: each is to commit (publish what is missing).
/// Their names go into `captured`.
#[cfg(feature = "nats")]
fn jetstream_open(
    url: &str,
    sink: usize,
    jobs: &[JobCheckpoint],
    open: &mut Vec<Open>,
    captured: &mut BTreeSet<String>,
) -> Result<()> {
    use weir_connectors::nats::{JetStreamConfig, PendingCommits};
    let config = JetStreamConfig::parse(url).map_err(|e| anyhow::anyhow!("--sink: {e}"))?;
    let mut stream = PendingCommits::connect(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut stored: BTreeMap<String, std::collections::HashSet<String>> = BTreeMap::new();
    for job in jobs {
        for c in job.jetstream.values().flatten() {
            if !stream.captures(&c.subject) {
                continue;
            }
            captured.insert(c.name.clone());
            if !stored.contains_key(&c.subject) {
                let ids = stream
                    .stored_ids(&c.subject)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                stored.insert(c.subject.clone(), ids);
            }
            let missing = PendingCommits::missing(&committable(c), &stored[&c.subject]);
            if missing.is_empty() {
                continue; // committed already: by the job's own commit or an earlier settle
            }
            open.push(Open {
                job: job.job.clone(),
                checkpoint: job.id,
                system: config.to_string(),
                sink,
                name: c.name.clone(),
                verdict: Verdict::Commit,
                detail: Some(format!(
                    "publish {} of {} message(s)",
                    missing.len(),
                    c.payloads.len()
                )),
            });
        }
    }
    Ok(())
}

#[cfg(not(feature = "nats"))]
fn jetstream_open(
    _url: &str,
    _sink: usize,
    _jobs: &[JobCheckpoint],
    _open: &mut Vec<Open>,
    _captured: &mut BTreeSet<String>,
) -> Result<()> {
    bail!("this weir was built without NATS support (cargo feature `nats`)")
}

/// The connector's committable for a decoded one.
#[cfg(feature = "nats")]
fn committable(c: &JsCommittable) -> weir_connectors::nats::JetStreamCommittable {
    weir_connectors::nats::JetStreamCommittable {
        name: c.name.clone(),
        run: c.run.clone(),
        subject: c.subject.clone(),
        payloads: c.payloads.clone(),
    }
}

/// Publishes the missing messages of the JetStream commits `todo` (the stream is read
/// again: a restart may have published them since they were listed).
#[cfg(feature = "nats")]
fn settle_jetstream(url: &str, jobs: &[JobCheckpoint], todo: &[&&Open]) -> Result<()> {
    use weir_connectors::nats::{JetStreamConfig, PendingCommits};
    let config = JetStreamConfig::parse(url).map_err(|e| anyhow::anyhow!("--sink: {e}"))?;
    let mut stream = PendingCommits::connect(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
    // One read of each subject: a commit publishes only its own ids, so what one settles
    // does not change what another lacks.
    let mut stored: BTreeMap<String, std::collections::HashSet<String>> = BTreeMap::new();
    for o in todo {
        let c = jobs
            .iter()
            .filter(|j| j.job == o.job)
            .flat_map(|j| j.jetstream.values().flatten())
            .find(|c| c.name == o.name)
            .with_context(|| format!("transaction {} vanished from the checkpoint", o.name))?;
        let c = committable(c);
        if !stored.contains_key(&c.subject) {
            let ids = stream
                .stored_ids(&c.subject)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            stored.insert(c.subject.clone(), ids);
        }
        let missing = PendingCommits::missing(&c, &stored[&c.subject]);
        if missing.is_empty() {
            print(&format!("already settled {}\n", o.name));
            continue;
        }
        stream
            .publish(&c, &missing)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        print(&format!(
            "committed {} ({} message(s) published)\n",
            o.name,
            missing.len()
        ));
    }
    Ok(())
}

#[cfg(not(feature = "nats"))]
fn settle_jetstream(_url: &str, _jobs: &[JobCheckpoint], _todo: &[&&Open]) -> Result<()> {
    bail!("this weir was built without NATS support (cargo feature `nats`)")
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
                    match &o.detail {
                        Some(d) => format!("{} ({d})", o.verdict.as_str()),
                        None => o.verdict.as_str().to_string(),
                    },
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
    let (open, notes, jobs) = find(&args.list)?;
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
            if url.starts_with("nats://") {
                settle_jetstream(url, &jobs, &mine)?;
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
            jetstream: BTreeMap::new(),
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

    #[test]
    fn only_a_jetstream_sinks_own_handles_are_taken_for_jetstream_commits() {
        let c = |name: &str, run: &str, subject: &str| JsCommittable {
            name: name.into(),
            run: run.into(),
            subject: subject.into(),
            payloads: vec![b"1\t1".to_vec()],
        };
        let prefix = "j~out~";
        assert!(c("j~out~0-3", "00ff00ff00ff00ff", "counts.out").is_own(prefix));
        assert!(!c("j~other~0-3", "00ff00ff00ff00ff", "counts.out").is_own(prefix));
        assert!(!c("j~out~0-3", "not-a-run-id-xyz", "counts.out").is_own(prefix));
        assert!(!c("j~out~0-3", "00ff", "counts.out").is_own(prefix));
        assert!(!c("j~out~0-3", "00ff00ff00ff00ff", "").is_own(prefix));
        assert!(!c("j~out~0-3", "00ff00ff00ff00ff", "counts.*").is_own(prefix));
    }
}
