//! What the upgrade tests (`schema_evolution*`: keyed, map, window, operator and channel
//! state whose type changed between v1 and v2 of a job) share, written once: the keyed
//! count that ends each job with the uids v1 and v2 must agree on, v1's mid-run checkpoint
//! and v2's settings restoring it ([`Upgrade`]), the row `check_savepoint` gives one
//! state, v2's exact resume, and a refusal that the check and the run must both give,
//! naming what a user needs to act on it.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use weir::api::execution::{SchemaReport, SchemaRow};
use weir::prelude::*;
use weir::state::{Data, Key};

use super::{assert_resumed_mid_run, assert_stopped_mid_run, expected, newest_checkpoint};

/// The records of a keyed or operator state upgrade test's input.
pub const N: u64 = 20_000;
/// The keys of that input (`i % KEYS`).
pub const KEYS: u64 = 20;
/// Each of v1's two source subtasks stops after this many of its records
/// ([`StopMidRun`](super::StopMidRun)): its checkpoint is mid-run, with input left for v2.
pub const STOP: u64 = 3_000;

/// `stream` keyed by `key`, processed by `count` (uid `count`) and collected in `out` (uid
/// `sink`): the same uids in v1 and v2, so that v2's state is matched with v1's by uid.
pub fn keyed_count<T, K, F, P>(
    stream: DataStream<T>,
    key: F,
    count: P,
    out: &CollectSink<(u64, u64)>,
) where
    T: Data,
    K: Key,
    F: Fn(&T) -> K + Clone + Send + Sync + 'static,
    P: KeyedProcessFunction<K, T, (u64, u64)>,
{
    stream
        .key_by(key)
        .process(count)
        .uid("count")
        .add_sink("collect", out.clone())
        .uid("sink");
}

/// Runs v1 (`env`, its source wrapped in [`StopMidRun`](super::StopMidRun), no restarts)
/// until it stops mid-input; returns the newest (mid-run) checkpoint of job `name` under
/// `dir`, the one v2 restores.
pub fn stop_mid_run(env: StreamEnvironment, dir: &Path, name: &str) -> PathBuf {
    assert_stopped_mid_run(env.execute());
    newest_checkpoint(dir, name).0
}

/// The row `report` gives state `state` of operator `uid`; panics with the whole table when
/// there is none.
pub fn row<'r>(report: &'r SchemaReport, uid: &str, state: &str) -> &'r SchemaRow {
    report
        .rows
        .iter()
        .find(|r| r.uid == uid && r.state == state)
        .unwrap_or_else(|| panic!("no row for {uid}'s {state}:\n{}", report.table()))
}

/// Runs v2 (`env`, restoring `from`) and asserts it resumed mid-run and that `out` holds
/// the exact count of every key of `0..n` keyed by `i % keys` (`what` says which run).
pub fn assert_resumes_exactly(
    env: StreamEnvironment,
    from: &Path,
    out: &CollectSink<(u64, u64)>,
    (n, keys): (u64, u64),
    what: &str,
) {
    let r = env.execute().unwrap();
    assert_resumed_mid_run(&r, from, n);
    let got: HashMap<u64, u64> = out.take().into_iter().collect();
    assert_eq!(got, expected(n, keys), "{what}");
}

/// Asserts a refusal names every one of `parts` (the operator, the state, both types and
/// the ways out), so that a user can act on it without reading the code.
pub fn assert_names(refusal: &str, parts: &[&str]) {
    for part in parts {
        assert!(refusal.contains(part), "'{part}' missing from: {refusal}");
    }
}

/// One upgrade test's setup, written once: a temporary folder, the settings every run of
/// the job takes in it, and v1's mid-run checkpoint there — what each v2 restores.
pub struct Upgrade {
    dir: TempDir,
    cfg: fn(&Path) -> JobConfig,
    /// v1's newest checkpoint: mid-run, with input left for v2.
    pub mid: PathBuf,
}

impl Upgrade {
    /// Runs v1 — the job `v1` builds from the settings `cfg` gives in a new temporary
    /// folder, without restarts, its source wrapped in [`StopMidRun`](super::StopMidRun) —
    /// until it stops mid-input, and keeps its newest checkpoint.
    pub fn after_v1(
        cfg: fn(&Path) -> JobConfig,
        v1: impl FnOnce(JobConfig) -> StreamEnvironment,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cfg(dir.path());
        c.restart = RestartStrategy::None;
        let name = c.name.clone();
        let mid = stop_mid_run(v1(c), dir.path(), &name);
        Upgrade { dir, cfg, mid }
    }

    /// v2's settings: the job's, restoring v1's checkpoint, without restarts (a refusal
    /// must end the run, and an exact run needs none).
    pub fn v2(&self) -> JobConfig {
        let mut c = (self.cfg)(self.dir.path());
        c.restore = RestoreFrom::Path(self.mid.clone());
        c.restart = RestartStrategy::None;
        c
    }

    /// The temporary folder the runs work in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Asserts that `check_savepoint` of `env` against v1's checkpoint `mid` refuses exactly
/// once (with `--allow-non-restored-state` when `allow`), that running `env` then fails
/// before anything reaches `out`, and that both messages name every one of `parts`.
/// Returns the check's refusal and the run's error.
pub fn assert_refused_by_check_and_run<T: Data>(
    env: StreamEnvironment,
    mid: &Path,
    allow: bool,
    out: &CollectSink<T>,
    parts: &[&str],
) -> (String, String) {
    let report = env.check_savepoint(mid).unwrap();
    let refusals = report.refusals(allow);
    assert_eq!(refusals.len(), 1, "{}", report.table());
    let refusal = refusals[0].to_string();
    let e = env.execute().unwrap_err().to_string();
    assert_names(&e, parts);
    assert_names(&refusal, parts);
    assert!(out.take().is_empty(), "nothing may reach the sink");
    (refusal, e)
}
