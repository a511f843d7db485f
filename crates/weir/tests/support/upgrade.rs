//! What the upgrade tests (`schema_evolution*`: keyed, operator and channel state whose type
//! changed between v1 and v2 of a job) share, written once: the keyed count that ends each
//! job with the uids v1 and v2 must agree on, v1's mid-run checkpoint, the row
//! `check_savepoint` gives one state, v2's exact resume, and the parts a refusal must name.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
