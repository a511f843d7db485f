//! The job's choice of keyed state backend (`--state-backend memory|disk`, DESIGN.md §13)
//! and the local folder the disk backend works in.
//!
//! Guarantees:
//! * A job that names no backend runs on `WEIR_STATE_BACKEND` if that is set (so a whole
//!   test suite runs over either backend unchanged), else in memory; a value that is neither
//!   `memory` nor `disk`, or `disk` in a build without the `disk-state` feature, is refused
//!   before anything starts, naming the way out.
//! * The disk backend's working folder is `<state_dir>/<job>`: it is removed and made again
//!   at the start of every attempt (an attempt restores from a checkpoint, never from a
//!   working folder, so nothing in it is worth keeping), and a folder Weir did not make (no
//!   marker file) is never removed. Each keyed operator subtask works in
//!   `<state_dir>/<job>/<uid>-<subtask>`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::state::keyed::StateBackendKind;

/// The environment variable a job without an explicit backend takes its backend from.
pub const STATE_BACKEND_ENV: &str = "WEIR_STATE_BACKEND";

/// The environment variable that turns incremental checkpoints on for a job that did not
/// (`true`/`1`, or `false`/`0`): how the suites run with them unchanged, as with
/// [`STATE_BACKEND_ENV`].
pub const INCREMENTAL_ENV: &str = "WEIR_INCREMENTAL_CHECKPOINTS";

/// Whether a job that chose `chosen` (`--incremental-checkpoints`) takes incremental
/// checkpoints: its choice, else [`INCREMENTAL_ENV`]; another value of the variable is
/// refused naming the ones it takes.
pub fn incremental_checkpoints(chosen: bool) -> Result<bool> {
    if chosen {
        return Ok(true);
    }
    match std::env::var(INCREMENTAL_ENV) {
        Ok(v) => parse_incremental(&v),
        Err(_) => Ok(false),
    }
}

/// A value of [`INCREMENTAL_ENV`]: `true`/`1`, `false`/`0` or empty; anything else is
/// refused naming the variable and the values it takes.
fn parse_incremental(v: &str) -> Result<bool> {
    match v.trim() {
        "" | "0" | "false" => Ok(false),
        "1" | "true" => Ok(true),
        other => Err(Error::InvalidJob(format!(
            "{INCREMENTAL_ENV}={other}: set it to `true` or `false`, or unset it"
        ))),
    }
}

/// The file that marks a working folder as Weir's, so a start never removes anything else.
const MARKER: &str = ".weir-state";

/// The name of a run's folder: `run-<pid>-<n>`.
const RUN_PREFIX: &str = "run-";

/// Where a job keeps its keyed state (Flink's `state.backend.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateBackend {
    /// Copy-on-write hash tables in memory: the fastest; state is bounded by memory.
    #[default]
    Memory,
    /// An embedded LSM (fjall) per keyed operator subtask under the job's state folder,
    /// with a bounded cache in memory: state larger than memory (feature `disk-state`).
    Disk,
}

impl StateBackend {
    /// Parses `memory` or `disk`; anything else is an error naming both.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim() {
            "memory" => Ok(StateBackend::Memory),
            "disk" => Ok(StateBackend::Disk),
            other => Err(Error::InvalidJob(format!(
                "state backend '{other}': the backends are `memory` and `disk`"
            ))),
        }
    }

    /// The backend of a job that chose `chosen` (`None`: `WEIR_STATE_BACKEND`, else memory).
    pub fn resolve(chosen: Option<StateBackend>) -> Result<Self> {
        if let Some(b) = chosen {
            return Ok(b);
        }
        match std::env::var(STATE_BACKEND_ENV) {
            Ok(v) if !v.trim().is_empty() => Self::parse(&v).map_err(|e| {
                Error::InvalidJob(format!(
                    "{STATE_BACKEND_ENV}: {e}; set it to one of them or unset it"
                ))
            }),
            _ => Ok(StateBackend::Memory),
        }
    }

    /// The name the flag and the environment variable use.
    pub fn name(self) -> &'static str {
        match self {
            StateBackend::Memory => "memory",
            StateBackend::Disk => "disk",
        }
    }
}

/// The job's resolved backend and, on disk, its working folder.
#[derive(Debug, Clone)]
pub(crate) struct JobStateBackend {
    backend: StateBackend,
    /// `<state_dir>/<job>`, holding one folder per run.
    job_dir: PathBuf,
    /// `<state_dir>/<job>/run-<pid>-<n>`: this run's folder.
    dir: PathBuf,
    /// Incremental checkpoints (disk only).
    incremental: bool,
    /// The disk backend's memory per subtask and state.
    memory: crate::runtime::config::DiskStateMemory,
}

impl JobStateBackend {
    /// Resolves the job's backend; refuses `disk` in a build without the feature.
    pub(crate) fn new(chosen: Option<StateBackend>, state_dir: &Path, job: &str) -> Result<Self> {
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let backend = StateBackend::resolve(chosen)?;
        if backend == StateBackend::Disk && !cfg!(feature = "disk-state") {
            return Err(Error::InvalidJob(
                "the disk state backend is not in this build: build weir with the cargo \
                 feature `disk-state` (the weir CLI has it by default), or use the memory \
                 backend"
                    .into(),
            ));
        }
        let job_dir = state_dir.join(job);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = job_dir.join(format!("{RUN_PREFIX}{}-{run}", std::process::id()));
        Ok(JobStateBackend {
            backend,
            job_dir,
            dir,
            incremental: false,
            memory: Default::default(),
        })
    }

    /// The disk backend's cache, block cache and write buffers
    /// (`JobConfig::disk_state`). No effect in memory.
    pub(crate) fn memory(mut self, memory: crate::runtime::config::DiskStateMemory) -> Self {
        self.memory = memory;
        self
    }

    /// With incremental checkpoints (`JobConfig::incremental_checkpoints`): each disk
    /// subtask records what changes between checkpoints. No effect in memory.
    pub(crate) fn incremental(mut self, on: bool) -> Self {
        self.incremental = on;
        self
    }

    /// Refuses a bound on the local disk (`--state-cache-size`) where it cannot hold: the
    /// memory backend has no local disk; without incremental checkpoints no checkpoint
    /// holds a key group unchanged to fetch it back from; with a local `checkpoint_dir`
    /// the dropped bytes would only move to the same disk. Each names the way out.
    pub(crate) fn check_cache_size(&self, checkpoint_dir: &Path) -> Result<()> {
        let Some(bound) = self.memory.local_disk_bytes else {
            return Ok(());
        };
        let why = if self.backend != StateBackend::Disk {
            "it bounds the disk backend's local files: pass --state-backend disk as well, \
             or drop --state-cache-size"
        } else if !self.incremental {
            "a key group dropped locally is fetched back from the last checkpoint's \
             incremental chain: pass --incremental-checkpoints as well, or drop \
             --state-cache-size"
        } else if !crate::storage::is_remote(checkpoint_dir) {
            "with a local --checkpoint-dir the dropped bytes would only move to the same \
             disk: checkpoint into object storage (--checkpoint-dir s3://…), or drop \
             --state-cache-size"
        } else {
            return Ok(());
        };
        Err(Error::InvalidJob(format!(
            "--state-cache-size {bound}: {why}"
        )))
    }

    /// At the start of an attempt: on disk, an empty working folder for this run (what the
    /// previous attempt left removed, and so are the folders of runs of this job whose
    /// process is gone — a SIGKILL leaves them). Nothing in memory.
    pub(crate) fn prepare_attempt(&self) -> Result<()> {
        if self.backend == StateBackend::Memory {
            return Ok(());
        }
        let marker = self.job_dir.join(MARKER);
        // An empty folder without the marker is another run of this job (a concurrent
        // test) between creating the folder and writing the marker into it: not foreign.
        let empty = || std::fs::read_dir(&self.job_dir).is_ok_and(|mut d| d.next().is_none());
        if self.job_dir.exists() && !marker.exists() && !empty() {
            return Err(Error::InvalidJob(format!(
                "the keyed-state folder {} exists and was not made by Weir (no {MARKER} in \
                 it); Weir removes what it finds there, so choose another --state-dir or \
                 move that folder away",
                self.job_dir.display()
            )));
        }
        std::fs::create_dir_all(&self.job_dir)
            .map_err(|e| Error::io("cannot create the keyed-state folder", &self.job_dir, e))?;
        std::fs::write(
            &marker,
            b"keyed state of Weir runs of this job, removed as they end\n",
        )
        .map_err(|e| Error::io("cannot create the keyed-state folder", &marker, e))?;
        self.remove_dead_runs();
        if self.dir.exists() {
            std::fs::remove_dir_all(&self.dir).map_err(|e| {
                Error::io(
                    "cannot remove the previous attempt's keyed state",
                    &self.dir,
                    e,
                )
            })?;
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io("cannot create the keyed-state folder", &self.dir, e))
    }

    /// Removes the folders of earlier runs whose process no longer exists (where the
    /// system says: `/proc`; elsewhere they stay until removed by hand).
    fn remove_dead_runs(&self) {
        let Ok(entries) = std::fs::read_dir(&self.job_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix(RUN_PREFIX))
                .and_then(|n| n.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let gone =
                Path::new("/proc/self").exists() && !Path::new(&format!("/proc/{pid}")).exists();
            if gone {
                // Best effort: a folder that cannot be removed costs only disk space.
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    /// At the end of the run: removes this run's working folder (best effort).
    pub(crate) fn finish(&self) {
        if self.backend == StateBackend::Disk {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// The backend of subtask `subtask` of the keyed operator `uid`.
    pub(crate) fn for_subtask(&self, uid: &str, subtask: u32) -> StateBackendKind {
        match self.backend {
            StateBackend::Memory => StateBackendKind::Memory,
            StateBackend::Disk => {
                // A uid is free text: keep the folder name one plain path component (the
                // LSM makes a unique folder inside it, so two uids that read alike share
                // a parent, never a database).
                let safe: String = uid
                    .chars()
                    .map(|c| match c {
                        'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' => c,
                        _ => '_',
                    })
                    .collect();
                disk_kind(
                    self.dir.join(format!("{safe}-{subtask}")),
                    self.incremental,
                    self.memory,
                )
            }
        }
    }
}

#[cfg(feature = "disk-state")]
fn disk_kind(
    dir: PathBuf,
    incremental: bool,
    memory: crate::runtime::config::DiskStateMemory,
) -> StateBackendKind {
    let mut options = crate::state::keyed::DiskOptions::new(dir);
    options.incremental = incremental;
    options.cache_entries = memory.cache_entries;
    options.block_cache_bytes = memory.block_cache_bytes;
    options.write_buffer_bytes = memory.write_buffer_bytes;
    options.local_disk_bytes = memory.local_disk_bytes;
    StateBackendKind::Disk(options)
}

#[cfg(not(feature = "disk-state"))]
fn disk_kind(
    _dir: PathBuf,
    _incremental: bool,
    _memory: crate::runtime::config::DiskStateMemory,
) -> StateBackendKind {
    unreachable!("JobStateBackend::new refuses the disk backend in a build without it")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_names_and_refuses_others() {
        assert_eq!(StateBackend::parse("memory").unwrap(), StateBackend::Memory);
        assert_eq!(StateBackend::parse("disk").unwrap(), StateBackend::Disk);
        let e = StateBackend::parse("rocksdb").unwrap_err().to_string();
        assert!(e.contains("'rocksdb'") && e.contains("`memory`"), "{e}");
        assert_eq!(
            StateBackend::resolve(Some(StateBackend::Disk)).unwrap(),
            StateBackend::Disk,
            "an explicit choice wins over the environment"
        );
    }

    #[test]
    fn incremental_checkpoints_come_from_the_flag_else_the_variable() {
        assert!(incremental_checkpoints(true).unwrap(), "the flag wins");
        assert!(parse_incremental(" true").unwrap() && parse_incremental("1").unwrap());
        assert!(!parse_incremental("").unwrap() && !parse_incremental("false").unwrap());
        let e = parse_incremental("yes").unwrap_err().to_string();
        assert!(
            e.contains("WEIR_INCREMENTAL_CHECKPOINTS=yes") && e.contains("`true`"),
            "{e}"
        );
    }

    #[test]
    #[cfg(feature = "disk-state")] // the disk backend is refused without it
    fn a_folder_weir_did_not_make_is_never_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let job = tmp.path().join("job");
        std::fs::create_dir_all(&job).unwrap();
        std::fs::write(job.join("precious"), b"x").unwrap();
        let b = JobStateBackend::new(Some(StateBackend::Disk), tmp.path(), "job").unwrap();
        let e = b.prepare_attempt().unwrap_err().to_string();
        assert!(e.contains("not made by Weir"), "{e}");
        assert!(job.join("precious").exists());
        std::fs::remove_file(job.join("precious")).unwrap();
        // Empty and without the marker: what a concurrent run of the job leaves between
        // creating the folder and writing the marker (CI saw that race refused).
        b.prepare_attempt().unwrap();
        assert!(job.join(MARKER).exists());
        std::fs::remove_dir_all(&job).unwrap();
        // A dead run's folder (pid 0 never has a /proc entry) and this run's leftovers
        // go at the next attempt; a live run's folder stays.
        let dead = job.join("run-0-7");
        let live = job.join(format!("run-{}-999999", std::process::id()));
        b.prepare_attempt().unwrap();
        for d in [&dead, &live] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(b.dir.join("left-over"), b"x").unwrap();
        b.prepare_attempt().unwrap();
        assert!(
            !b.dir.join("left-over").exists(),
            "cleaned at every attempt"
        );
        assert!(!dead.exists(), "a dead run's folder is removed");
        assert!(live.exists(), "a live run's folder is kept");
        b.finish();
        assert!(!b.dir.exists(), "removed at the end of the run");
    }
}
