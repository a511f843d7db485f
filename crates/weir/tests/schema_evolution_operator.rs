//! Upgrading a job whose *operator* state changed type (issue 26): a source keeps its read
//! positions in an operator list of a struct. v1 stops mid-input, leaving a mid-run
//! checkpoint; v2's source reads the list as a changed struct. A field added with a default
//! migrates through serde and the run ends exact (proof that every position was read and
//! kept); a field whose type changed is refused before any record, naming the operator, the
//! list, both types and the ways out. `check_savepoint` lists the list with its recorded
//! schema (operator state is decided when the function reads it, since `initialize_state`
//! may reach external systems and is not probed).

mod common;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use common::upgrade::{
    assert_names, assert_resumes_exactly, keyed_count, row, stop_mid_run, KEYS, N, STOP,
};
use common::{config, CountPerKey, StopMidRun};
use weir::prelude::*;
use weir::state::StateValue;

/// The source's splits: split `s` emits `s, s + SPLITS, …` below `N`.
const SPLITS: u64 = 2;

/// v1's position of one split.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct PosV1 {
    split: u64,
    next: u64,
}

/// v2: a field added with a default.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct PosAdded {
    split: u64,
    next: u64,
    #[serde(default)]
    note: String,
}

/// v2: a field whose type changed, no migration: incompatible.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct PosRetyped {
    split: String,
    next: u64,
}

/// What the source needs of its position type.
trait Pos: StateValue {
    fn new(split: u64) -> Self;
    fn next(&mut self) -> &mut u64;
}

impl Pos for PosV1 {
    fn new(split: u64) -> Self {
        PosV1 { split, next: split }
    }
    fn next(&mut self) -> &mut u64 {
        &mut self.next
    }
}

impl Pos for PosAdded {
    fn new(split: u64) -> Self {
        PosAdded {
            split,
            next: split,
            note: "v2".into(),
        }
    }
    fn next(&mut self) -> &mut u64 {
        &mut self.next
    }
}

impl Pos for PosRetyped {
    fn new(split: u64) -> Self {
        PosRetyped {
            split: split.to_string(),
            next: split,
        }
    }
    fn next(&mut self) -> &mut u64 {
        &mut self.next
    }
}

/// Emits every number below `N` once, split by `n % SPLITS`, its positions in the
/// operator list `pos`.
struct Numbers<P> {
    splits: Vec<P>,
}

impl<P> Clone for Numbers<P> {
    fn clone(&self) -> Self {
        Numbers { splits: Vec::new() }
    }
}

impl<P: Pos> CheckpointedFunction for Numbers<P> {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.splits = if ctx.is_restored() && ctx.has_state() {
            ctx.list("pos")?
        } else {
            let (i, p) = (u64::from(ctx.subtask_index()), u64::from(ctx.parallelism()));
            (0..SPLITS).filter(|s| s % p == i).map(P::new).collect()
        };
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        ctx.set_operator_list("pos", &self.splits)
    }
}

impl<P: Pos> SourceFunction<u64> for Numbers<P> {
    fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourceStatus> {
        let mut left = false;
        for s in &mut self.splits {
            let next = s.next();
            let mut taken = 0;
            while *next < N && taken < max {
                out.push(*next);
                *next += SPLITS;
                taken += 1;
            }
            left |= *next < N;
        }
        Ok(if left {
            SourceStatus::More
        } else {
            SourceStatus::Finished
        })
    }
}

/// The job: `source` (uid `events`), counted per key of `i % KEYS`, collected in `out`.
fn job<S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    out: &CollectSink<(u64, u64)>,
) -> StreamEnvironment {
    let env = StreamEnvironment::new(cfg);
    let events = env.add_source("events", source).uid("events");
    keyed_count(events, |i: &u64| i % KEYS, CountPerKey::default(), out);
    env
}

fn numbers<P: Pos>() -> Numbers<P> {
    Numbers { splits: Vec::new() }
}

fn cfg(dir: &Path) -> JobConfig {
    config("upgrade-op", dir, 2, CheckpointingMode::ExactlyOnce)
}

fn v1_checkpoint(dir: &Path) -> PathBuf {
    let mut c = cfg(dir);
    c.restart = RestartStrategy::None;
    let out = CollectSink::new();
    let env = job(c, StopMidRun::new(numbers::<PosV1>(), STOP), &out);
    stop_mid_run(env, dir, "upgrade-op")
}

#[test]
fn an_operator_list_with_a_field_added_migrates_and_the_run_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    let mut c = cfg(dir.path());
    c.restore = RestoreFrom::Path(mid.clone());
    let out = CollectSink::new();
    let env = job(c, numbers::<PosAdded>(), &out);
    let report = env.check_savepoint(&mid).unwrap();
    let row = row(&report, "events", "pos");
    assert_eq!(
        row.verdict,
        "operator state: decided when read",
        "{}",
        report.table()
    );
    assert!(row.old.as_ref().unwrap().type_name.ends_with("PosV1"));
    assert!(report.refusals(false).is_empty(), "{}", report.table());
    assert_resumes_exactly(env, &mid, &out, (N, KEYS), "exact after the upgrade");
}

#[test]
fn an_operator_list_whose_field_changed_type_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    let mut c = cfg(dir.path());
    c.restore = RestoreFrom::Path(mid);
    c.restart = RestartStrategy::None;
    let out = CollectSink::new();
    let e = job(c, numbers::<PosRetyped>(), &out)
        .execute()
        .unwrap_err()
        .to_string();
    let parts = [
        "operator 'events'",
        "operator state 'pos'",
        "PosV1",
        "PosRetyped",
        "--allow-non-restored-state",
        "fresh",
    ];
    assert_names(&e, &parts);
    assert!(out.take().is_empty(), "no record may be counted");
}
