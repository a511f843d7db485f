//! Upgrading a job (issue 26): "v1" and "v2" of one job are two job-building functions with
//! the same uids and different state types. v1 stops mid-input, leaving a mid-run
//! checkpoint; v2 restores it — at the same and at another parallelism — and must end with
//! the exact count of every key (proof that the restored values were read, migrated and
//! kept), for a field added with a default, a field removed, a field renamed with an
//! alias, and a hand-written migration. A change serde cannot bridge, and a changed key
//! type, are refused before anything runs, and `check_savepoint` says so beforehand.

mod common;

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use common::upgrade::{
    assert_names, assert_resumes_exactly, keyed_count, row, stop_mid_run, KEYS, N, STOP,
};
use common::{config, StopMidRun};
use weir::prelude::*;
use weir::state::StateValue;

/// v1's state: a count with a label and a sum.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccV1 {
    count: u64,
    label: String,
    sum: u64,
}

/// v2, a field added with a default.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccAdded {
    count: u64,
    label: String,
    sum: u64,
    #[serde(default)]
    added: u64,
}

/// v2, a field removed (`sum`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccRemoved {
    count: u64,
    label: String,
}

/// v2, a field renamed with an alias (`count` → `total`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccRenamed {
    #[serde(alias = "count")]
    total: u64,
    label: String,
    sum: u64,
}

/// v2 with a new required field: serde cannot read v1's values, a migration function can.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccMigrated {
    count: u64,
    label_len: u64,
}

/// v2 with a field whose type changed and no migration: incompatible.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccRetyped {
    count: String,
}

/// v2 counting in a state of another name (`tally`): v1's `acc` is no longer declared.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Tally {
    count: u64,
}

/// The kind of a key's records, v1: an enum held in a field, an option and a list of the
/// state struct (nested enums, traced in full since issue 26's follow-up).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
enum Kind {
    Small,
    Medium(u8),
    Large { weight: u32 },
}

/// v2 of the kind: a variant added *first*, so every old variant's index shifts (postcard
/// writes indexes; the serde path reads old values by variant name).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
enum KindAdded {
    Tiny,
    Small,
    Medium(u8),
    Large { weight: u32 },
}

/// A mark, added to v2's state as an enum field with a default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
enum Mark {
    #[default]
    Unmarked,
    Marked,
}

/// v1's state with a nested enum.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccKind {
    count: u64,
    kind: Kind,
    first: Option<Kind>,
    seen: Vec<Kind>,
}

/// v2: a variant added to the nested enum, and an enum field added with a default.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct AccKindAdded {
    count: u64,
    kind: KindAdded,
    first: Option<KindAdded>,
    seen: Vec<KindAdded>,
    #[serde(default)]
    mark: Mark,
}

fn kind_of(key: u64) -> Kind {
    match key % 3 {
        0 => Kind::Small,
        1 => Kind::Medium(key as u8),
        _ => Kind::Large { weight: key as u32 },
    }
}

fn kind_added_of(key: u64) -> KindAdded {
    match kind_of(key) {
        Kind::Small => KindAdded::Small,
        Kind::Medium(m) => KindAdded::Medium(m),
        Kind::Large { weight } => KindAdded::Large { weight },
    }
}

/// What the counting function needs of its state type.
trait Acc: StateValue {
    fn fresh(key: u64) -> Self;
    fn bump(&mut self, record: u64);
    fn count(&self) -> u64;
    /// Whether the value is what the job's history says it must be for `key` (the
    /// fields a migration carries over).
    fn consistent(&self, key: u64) -> bool;
    fn declare(states: &mut KeyedStateStore<'_, u64>) -> Result<ValueState<Self>> {
        states.value_state("acc")
    }
}

fn label(key: u64) -> String {
    format!("key-{key}")
}

impl Acc for AccV1 {
    fn fresh(key: u64) -> Self {
        AccV1 {
            count: 0,
            label: label(key),
            sum: 0,
        }
    }
    fn bump(&mut self, record: u64) {
        self.count += 1;
        self.sum += record;
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn consistent(&self, key: u64) -> bool {
        self.label == label(key)
    }
}

impl Acc for AccAdded {
    fn fresh(key: u64) -> Self {
        AccAdded {
            count: 0,
            label: label(key),
            sum: 0,
            added: 0,
        }
    }
    fn bump(&mut self, record: u64) {
        self.count += 1;
        self.sum += record;
        self.added += 1;
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn consistent(&self, key: u64) -> bool {
        // The default (0) for restored values, then one per record since: fewer than all.
        self.label == label(key) && self.added < self.count
    }
}

impl Acc for AccRemoved {
    fn fresh(key: u64) -> Self {
        AccRemoved {
            count: 0,
            label: label(key),
        }
    }
    fn bump(&mut self, _: u64) {
        self.count += 1;
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn consistent(&self, key: u64) -> bool {
        self.label == label(key)
    }
}

impl Acc for AccRenamed {
    fn fresh(key: u64) -> Self {
        AccRenamed {
            total: 0,
            label: label(key),
            sum: 0,
        }
    }
    fn bump(&mut self, record: u64) {
        self.total += 1;
        self.sum += record;
    }
    fn count(&self) -> u64 {
        self.total
    }
    fn consistent(&self, key: u64) -> bool {
        self.label == label(key) && self.sum > 0
    }
}

impl Acc for AccMigrated {
    fn fresh(key: u64) -> Self {
        AccMigrated {
            count: 0,
            label_len: label(key).len() as u64,
        }
    }
    fn bump(&mut self, _: u64) {
        self.count += 1;
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn consistent(&self, key: u64) -> bool {
        self.label_len == label(key).len() as u64
    }
    fn declare(states: &mut KeyedStateStore<'_, u64>) -> Result<ValueState<Self>> {
        states
            .with_version(2)
            .with_migration(|old: AccV1| AccMigrated {
                count: old.count,
                label_len: old.label.len() as u64,
            })
            .value_state("acc")
    }
}

impl Acc for AccRetyped {
    fn fresh(_: u64) -> Self {
        AccRetyped { count: "0".into() }
    }
    fn bump(&mut self, _: u64) {
        self.count = (self.count() + 1).to_string();
    }
    fn count(&self) -> u64 {
        self.count.parse().unwrap_or(u64::MAX)
    }
    fn consistent(&self, _: u64) -> bool {
        true
    }
}

impl Acc for AccKind {
    fn fresh(key: u64) -> Self {
        AccKind {
            count: 0,
            kind: kind_of(key),
            first: Some(kind_of(key)),
            seen: vec![kind_of(key)],
        }
    }
    fn bump(&mut self, _: u64) {
        self.count += 1;
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn consistent(&self, key: u64) -> bool {
        let k = kind_of(key);
        self.kind == k && self.first == Some(k) && self.seen == [k]
    }
}

impl Acc for AccKindAdded {
    fn fresh(key: u64) -> Self {
        AccKindAdded {
            count: 0,
            kind: kind_added_of(key),
            first: Some(kind_added_of(key)),
            seen: vec![kind_added_of(key)],
            mark: Mark::Marked,
        }
    }
    fn bump(&mut self, _: u64) {
        self.count += 1;
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn consistent(&self, key: u64) -> bool {
        // Every old variant read by its name (an index would have shifted it), and the
        // restored values carry the added field's default: v1 kept every key, so none is
        // fresh.
        let k = kind_added_of(key);
        self.kind == k && self.first == Some(k) && self.seen == [k] && self.mark == Mark::Unmarked
    }
}

impl Acc for Tally {
    fn fresh(_: u64) -> Self {
        Tally { count: 0 }
    }
    fn bump(&mut self, _: u64) {
        self.count += 1;
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn consistent(&self, _: u64) -> bool {
        true
    }
    fn declare(states: &mut KeyedStateStore<'_, u64>) -> Result<ValueState<Self>> {
        states.value_state("tally")
    }
}

/// Counts records per key in state of type `A`; at the end emits `(key, count)`, or
/// `(key, u64::MAX)` for a value that is not consistent.
#[derive(Clone)]
struct Counter<A> {
    state: Option<ValueState<A>>,
    _a: PhantomData<fn() -> A>,
}

impl<A> Default for Counter<A> {
    fn default() -> Self {
        Counter {
            state: None,
            _a: PhantomData,
        }
    }
}

impl<A> CheckpointedFunction for Counter<A> {}

impl<A: Acc> KeyedProcessFunction<u64, u64, (u64, u64)> for Counter<A> {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.state = Some(A::declare(states)?);
        Ok(())
    }

    fn process(
        &mut self,
        record: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let state = self.state.expect("declared in open");
        let key = *ctx.key();
        ctx.get_mut_or_insert_with(state, || A::fresh(key))
            .bump(record);
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let state = self.state.expect("declared in open");
        for (k, v) in ctx.entries(state) {
            out.collect((k, if v.consistent(k) { v.count() } else { u64::MAX }));
        }
        Ok(())
    }
}

/// A v1-shaped state under a `String` key: the key type changed.
#[derive(Clone, Default)]
struct StringKeyed {
    state: Option<ValueState<AccV1>>,
}

impl CheckpointedFunction for StringKeyed {}

impl KeyedProcessFunction<String, u64, (u64, u64)> for StringKeyed {
    fn open(&mut self, states: &mut KeyedStateStore<'_, String>) -> Result<()> {
        self.state = Some(states.value_state("acc")?);
        Ok(())
    }

    fn process(
        &mut self,
        _: u64,
        _: &mut KeyedContext<'_, String>,
        _: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        Ok(())
    }
}

fn cfg(dir: &Path, parallelism: u32) -> JobConfig {
    config("upgrade", dir, parallelism, CheckpointingMode::ExactlyOnce)
}

/// The job with state type `A`, reading `source`.
fn job<A: Acc, S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    out: &CollectSink<(u64, u64)>,
) -> StreamEnvironment {
    let env = StreamEnvironment::new(cfg);
    let events = env.add_source("events", source).uid("events");
    keyed_count(events, |i: &u64| i % KEYS, Counter::<A>::default(), out);
    env
}

/// Runs v1 until it stops mid-input; returns its newest (mid-run) checkpoint.
fn v1_checkpoint(dir: &Path) -> PathBuf {
    v1_checkpoint_of::<AccV1>(dir)
}

/// Runs v1 with state type `A` until it stops mid-input; returns its newest (mid-run)
/// checkpoint.
fn v1_checkpoint_of<A: Acc>(dir: &Path) -> PathBuf {
    let mut c = cfg(dir, 2);
    c.restart = RestartStrategy::None;
    let out = CollectSink::new();
    let env = job::<A, _>(c, StopMidRun::new(GeneratorSource::new(N), STOP), &out);
    stop_mid_run(env, dir, "upgrade")
}

/// Restores v2 (state type `A`) from `from` at `parallelism` and checks the exact counts.
fn v2_restores_exactly<A: Acc>(dir: &Path, from: &Path, parallelism: u32, verdict: &str) {
    let mut c = cfg(dir, parallelism);
    c.restore = RestoreFrom::Path(from.to_path_buf());
    let out = CollectSink::new();
    let env = job::<A, _>(c, GeneratorSource::new(N), &out);
    let report = env.check_savepoint(from).unwrap();
    assert!(report.refusals(false).is_empty(), "{}", report.table());
    let acc = row(&report, "count", "acc");
    assert_eq!(acc.verdict, verdict, "{}", report.table());
    let at = format!("at parallelism {parallelism}");
    assert_resumes_exactly(env, from, &out, (N, KEYS), &at);
}

fn evolves<A: Acc>(verdict: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    for p in [2, 3] {
        v2_restores_exactly::<A>(dir.path(), &mid, p, verdict);
    }
}

#[test]
fn the_same_type_restores_as_is() {
    evolves::<AccV1>("restorable as is");
}

#[test]
fn a_field_added_with_a_default_migrates() {
    evolves::<AccAdded>("migrates (serde)");
}

#[test]
fn a_removed_field_migrates() {
    evolves::<AccRemoved>("migrates (serde)");
}

#[test]
fn a_field_renamed_with_an_alias_migrates() {
    evolves::<AccRenamed>("migrates (serde)");
}

#[test]
fn a_migration_function_reads_what_serde_cannot() {
    evolves::<AccMigrated>("migrates (migration function)");
}

#[test]
fn a_nested_enum_that_gained_a_variant_and_an_enum_field_added_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint_of::<AccKind>(dir.path());
    for p in [2, 3] {
        v2_restores_exactly::<AccKindAdded>(dir.path(), &mid, p, "migrates (serde)");
    }
}

#[test]
fn an_unmigratable_change_is_refused_before_anything_runs_and_check_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    let mut c = cfg(dir.path(), 2);
    c.restore = RestoreFrom::Path(mid.clone());
    let out = CollectSink::new();
    let env = job::<AccRetyped, _>(c.clone(), GeneratorSource::new(N), &out);
    let report = env.check_savepoint(&mid).unwrap();
    let refusals = report.refusals(false);
    assert_eq!(refusals.len(), 1, "{}", report.table());
    let e = env.execute().unwrap_err().to_string();
    let parts = [
        "operator 'count'",
        "state 'acc'",
        "AccV1",
        "AccRetyped",
        "with_migration",
        "--allow-non-restored-state",
        "fresh",
    ];
    assert_names(&e, &parts);
    assert_names(refusals[0], &parts);
    assert!(out.take().is_empty(), "nothing may run");
    // The way out: drop the state. The run restores the rest and counts afresh.
    c.allow_non_restored_state = true;
    let env = job::<AccRetyped, _>(c, GeneratorSource::new(N), &out);
    let r = env.execute().unwrap();
    assert!(
        r.notices
            .iter()
            .any(|n| n.contains("dropping keyed state 'acc'")),
        "{:?}",
        r.notices
    );
    let counted: u64 = out.take().into_iter().map(|(_, c)| c).sum();
    assert!(
        counted < N,
        "the dropped counts started from zero: {counted}"
    );
}

#[test]
fn a_changed_key_type_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    for allow in [false, true] {
        let mut c = cfg(dir.path(), 2);
        c.restore = RestoreFrom::Path(mid.clone());
        c.allow_non_restored_state = allow;
        let out = CollectSink::new();
        let env = StreamEnvironment::new(c);
        let events = env
            .add_source("events", GeneratorSource::new(N))
            .uid("events");
        let key = |i: &u64| (i % KEYS).to_string();
        keyed_count(events, key, StringKeyed::default(), &out);
        let report = env.check_savepoint(&mid).unwrap();
        assert!(
            report
                .rows
                .iter()
                .any(|r| r.state == "(key)" && r.verdict == "incompatible"),
            "{}",
            report.table()
        );
        let e = env.execute().unwrap_err().to_string();
        assert!(e.contains("key type changed"), "{e}");
        assert!(e.contains("operator 'count'"), "{e}");
    }
}

#[test]
fn checkpoints_record_key_and_state_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    let out = CollectSink::new();
    let env = job::<AccV1, _>(cfg(dir.path(), 2), GeneratorSource::new(N), &out);
    let report = env.check_savepoint(&mid).unwrap();
    let key = row(&report, "count", "(key)");
    assert_eq!(key.old.as_ref().unwrap().type_name, "u64");
    let acc = row(&report, "count", "acc");
    assert!(acc.old.as_ref().unwrap().type_name.ends_with("AccV1"));
    assert!(acc.old.as_ref().unwrap().traced());
}

#[test]
fn a_folder_that_is_no_checkpoint_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = CollectSink::new();
    let env = job::<AccV1, _>(cfg(dir.path(), 2), GeneratorSource::new(N), &out);
    let e = env.check_savepoint(dir.path()).unwrap_err().to_string();
    assert!(e.contains("_metadata"), "{e}");
}

/// The records v1's checkpoint covered, as the restored run reports them.
fn covered(r: &JobResult) -> u64 {
    r.history[0].restored.as_ref().unwrap().source_records
}

/// The sum of the per-key counts a counting job emitted at its end.
fn counted(out: &CollectSink<(u64, u64)>) -> u64 {
    out.take().into_iter().map(|(_, c)| c).sum()
}

#[test]
fn check_lists_state_without_an_operator_and_an_operator_without_state() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    for allow in [false, true] {
        let mut c = cfg(dir.path(), 2);
        c.restore = RestoreFrom::Path(mid.clone());
        c.restart = RestartStrategy::None;
        c.allow_non_restored_state = allow;
        // v2 counts under a new uid: v1's `count` has no operator to go to.
        let out = CollectSink::new();
        let env = StreamEnvironment::new(c);
        env.add_source("events", GeneratorSource::new(N))
            .uid("events")
            .key_by(|i: &u64| i % KEYS)
            .process(Counter::<AccV1>::default())
            .uid("count-v2")
            .add_sink("collect", out.clone())
            .uid("sink");
        let report = env.check_savepoint(&mid).unwrap();
        let gone = row(&report, "count", "");
        assert_eq!(
            gone.verdict,
            "state without an operator",
            "{}",
            report.table()
        );
        let new = row(&report, "count-v2", "");
        assert_eq!(
            new.verdict,
            "operator without state (starts empty)",
            "{}",
            report.table()
        );
        if !allow {
            let refusals = report.refusals(false);
            assert_eq!(refusals.len(), 1, "{}", report.table());
            let parts = ["'count'", "--allow-non-restored-state"];
            assert_names(refusals[0], &parts);
            let e = env.execute().unwrap_err().to_string();
            assert_names(&e, &["count", "--allow-non-restored-state"]);
            assert!(out.take().is_empty(), "nothing may run");
            continue;
        }
        assert!(report.refusals(true).is_empty(), "{}", report.table());
        // v1's counts are dropped; the sources resume, so v2 counts what follows them.
        let r = env.execute().unwrap();
        assert_eq!(counted(&out), N - covered(&r));
    }
}

#[test]
fn check_lists_a_state_no_longer_declared_and_the_run_drops_it() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    let mut c = cfg(dir.path(), 2);
    c.restore = RestoreFrom::Path(mid.clone());
    c.restart = RestartStrategy::None;
    let out = CollectSink::new();
    let env = job::<Tally, _>(c, GeneratorSource::new(N), &out);
    let report = env.check_savepoint(&mid).unwrap();
    assert!(report.refusals(false).is_empty(), "{}", report.table());
    let acc = row(&report, "count", "acc");
    assert_eq!(
        acc.verdict,
        "no longer declared (dropped)",
        "{}",
        report.table()
    );
    assert!(acc.old.as_ref().unwrap().type_name.ends_with("AccV1"));
    let tally = row(&report, "count", "tally");
    assert_eq!(
        tally.verdict,
        "new state (starts empty)",
        "{}",
        report.table()
    );
    let r = env.execute().unwrap();
    common::assert_resumed_mid_run(&r, &mid, N);
    assert_eq!(
        counted(&out),
        N - covered(&r),
        "tally counts what follows the checkpoint"
    );
}

#[test]
fn a_corrupt_checkpoint_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mid = v1_checkpoint(dir.path());
    let out = CollectSink::new();
    let env = job::<AccV1, _>(cfg(dir.path(), 2), GeneratorSource::new(N), &out);
    common::write_object(&mid.join("_metadata"), b"{\"json\": true}");
    let e = env.check_savepoint(&mid).unwrap_err().to_string();
    assert!(
        e.contains("_metadata") && e.contains("not a Weir checkpoint file"),
        "{e}"
    );
}
