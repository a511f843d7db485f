//! Upgrading a job whose *operator* state changed type (issue 26): a source keeps its read
//! positions in an operator list of a struct. v1 stops mid-input, leaving a mid-run
//! checkpoint; v2's source reads the list as a changed struct. A field added with a default
//! migrates through serde and the run ends exact (proof that every position was read and
//! kept); a field whose type changed is refused before any record, naming the operator, the
//! list, both types and the ways out. A source that declares its list
//! (`CheckpointedFunction::operator_state`) has it decided ahead by `check_savepoint` and by
//! the run with the same message (`initialize_state` may reach external systems and is
//! never probed); one that declares nothing has it decided when read, and the check says so.
//!
//! Broadcast state likewise: v1 keeps its rules in a broadcast map of a struct; v2's map
//! gains a field with a default, is restored at parallelism 3 and at 1, and every subtask
//! ends with every rule read from v1's checkpoint through the migration and the exact
//! count; a field whose type changed is refused before any record, naming the operator,
//! the broadcast state, both types and the ways out.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use common::upgrade::{
    assert_names, assert_refused_by_check_and_run, assert_resumes_exactly, keyed_count, row,
    Upgrade, KEYS, N, STOP,
};
use common::{config, CountPerKey, StopMidRun};
use weir::prelude::*;
use weir::state::StateValue;
use weir::testing::{Admit, Gated, SourceGate};

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
/// operator list `pos`, which it declares ahead when `declare`.
struct Numbers<P> {
    splits: Vec<P>,
    declare: bool,
}

impl<P> Clone for Numbers<P> {
    fn clone(&self) -> Self {
        Numbers {
            splits: Vec::new(),
            declare: self.declare,
        }
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
    fn operator_state(&self) -> Vec<OperatorListDeclaration> {
        match self.declare {
            true => vec![OperatorListDeclaration::of::<P>("pos")],
            false => Vec::new(),
        }
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

/// A source that declares its list.
fn numbers<P: Pos>() -> Numbers<P> {
    Numbers {
        splits: Vec::new(),
        declare: true,
    }
}

/// A source that declares nothing: its list is decided when `initialize_state` reads it.
fn undeclared<P: Pos>() -> Numbers<P> {
    Numbers {
        splits: Vec::new(),
        declare: false,
    }
}

fn cfg(dir: &Path) -> JobConfig {
    config("upgrade-op", dir, 2, CheckpointingMode::ExactlyOnce)
}

/// v1 (positions `PosV1`, declared) stopped mid-input.
fn upgrade() -> Upgrade {
    Upgrade::after_v1(cfg, |c| {
        job(
            c,
            StopMidRun::new(numbers::<PosV1>(), STOP),
            &CollectSink::new(),
        )
    })
}

/// What a refusal of the list `pos` must name.
const POS_REFUSAL: [&str; 6] = [
    "operator 'events'",
    "operator state 'pos'",
    "PosV1",
    "PosRetyped",
    "--allow-non-restored-state",
    "fresh",
];

#[test]
fn an_operator_list_with_a_field_added_migrates_and_the_run_is_exact() {
    let up = upgrade();
    let out = CollectSink::new();
    let env = job(up.v2(), numbers::<PosAdded>(), &out);
    let report = env.check_savepoint(&up.mid).unwrap();
    let row = row(&report, "events", "pos");
    assert_eq!(
        row.verdict,
        "operator state: migrates (serde)",
        "{}",
        report.table()
    );
    assert!(row.old.as_ref().unwrap().type_name.ends_with("PosV1"));
    assert!(row.new.as_ref().unwrap().type_name.ends_with("PosAdded"));
    assert!(report.refusals(false).is_empty(), "{}", report.table());
    assert_resumes_exactly(env, &up.mid, &out, (N, KEYS), "exact after the upgrade");
}

#[test]
fn an_undeclared_operator_list_is_decided_at_start_and_the_check_says_so() {
    let up = upgrade();
    let out = CollectSink::new();
    let env = job(up.v2(), undeclared::<PosAdded>(), &out);
    let report = env.check_savepoint(&up.mid).unwrap();
    let row = row(&report, "events", "pos");
    assert_eq!(
        row.verdict,
        "operator state: decided at start (not declared)",
        "{}",
        report.table()
    );
    assert!(row.old.as_ref().unwrap().type_name.ends_with("PosV1"));
    assert!(row.new.is_none(), "{}", report.table());
    assert!(report.refusals(false).is_empty(), "{}", report.table());
    assert_resumes_exactly(env, &up.mid, &out, (N, KEYS), "exact after the upgrade");
}

#[test]
fn a_declared_operator_list_whose_field_changed_type_is_refused_by_the_check_as_by_the_run() {
    let up = upgrade();
    let out = CollectSink::new();
    let env = job(up.v2(), numbers::<PosRetyped>(), &out);
    let report = env.check_savepoint(&up.mid).unwrap();
    let row = row(&report, "events", "pos");
    assert_eq!(
        row.verdict,
        "operator state: incompatible",
        "{}",
        report.table()
    );
    // `savepoint check` refuses (exit 1), even with --allow-non-restored-state, and says
    // what the run says.
    let (refusal, e) = assert_refused_by_check_and_run(env, &up.mid, true, &out, &POS_REFUSAL);
    assert_eq!(refusal, e.trim_start_matches("cannot restore: "));
}

#[test]
fn an_undeclared_operator_list_whose_field_changed_type_is_refused_when_read() {
    let up = upgrade();
    let out = CollectSink::new();
    let e = job(up.v2(), undeclared::<PosRetyped>(), &out)
        .execute()
        .unwrap_err()
        .to_string();
    assert_names(&e, &POS_REFUSAL);
    assert!(out.take().is_empty(), "no record may be counted");
}

// ---- Broadcast state ----------------------------------------------------------------

/// The broadcast rules: rule `r` maps to `r²`.
const RULES: u64 = 20;

/// v1's broadcast value.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct RuleV1 {
    square: u64,
}

/// v2: a field added with a default; a value v2 writes itself says so.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct RuleAdded {
    square: u64,
    #[serde(default)]
    written_by_v2: bool,
}

/// v2: a field whose type changed, no migration: incompatible.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct RuleRetyped {
    square: String,
}

/// What the broadcast function needs of its value type.
trait Rule: StateValue {
    fn new(r: u64) -> Self;
    fn square(&self) -> u64;
    /// Whether the value came from v1's checkpoint (through a migration).
    fn migrated(&self) -> bool;
}

impl Rule for RuleV1 {
    fn new(r: u64) -> Self {
        RuleV1 { square: r * r }
    }
    fn square(&self) -> u64 {
        self.square
    }
    fn migrated(&self) -> bool {
        false
    }
}

impl Rule for RuleAdded {
    fn new(r: u64) -> Self {
        RuleAdded {
            square: r * r,
            written_by_v2: true,
        }
    }
    fn square(&self) -> u64 {
        self.square
    }
    fn migrated(&self) -> bool {
        !self.written_by_v2
    }
}

impl Rule for RuleRetyped {
    fn new(r: u64) -> Self {
        RuleRetyped {
            square: (r * r).to_string(),
        }
    }
    fn square(&self) -> u64 {
        self.square.parse().unwrap_or(0)
    }
    fn migrated(&self) -> bool {
        false
    }
}

/// Per subtask at end of input: its rules `(r, r², migrated)` and its share of the count.
type Summary = (Vec<(u64, u64, bool)>, u64);

/// Keeps the rules in the broadcast map `rules` (counting in `applied` how many every
/// subtask took in) and counts main records in the union list `seen` (subtask 0 takes the
/// union's total on restore, so the sum is kept at any parallelism).
struct Rules<R: Rule> {
    rules: Option<BroadcastState<u64, R>>,
    seen: u64,
    applied: Arc<AtomicU64>,
}

impl<R: Rule> Clone for Rules<R> {
    fn clone(&self) -> Self {
        Rules {
            rules: self.rules,
            seen: self.seen,
            applied: self.applied.clone(),
        }
    }
}

impl<R: Rule> CheckpointedFunction for Rules<R> {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        let all: Vec<u64> = ctx.list("seen")?;
        self.seen = if ctx.subtask_index() == 0 {
            all.iter().sum()
        } else {
            0
        };
        Ok(())
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        ctx.set_union_list("seen", &[self.seen])
    }
}

impl<R: Rule> BroadcastProcessFunction<u64, u64, Summary> for Rules<R> {
    fn open(&mut self, states: &mut BroadcastStateStore<'_>) -> Result<()> {
        self.rules = Some(states.map_state("rules")?);
        Ok(())
    }
    fn process_element(
        &mut self,
        _: u64,
        _: &ReadOnlyBroadcastContext<'_>,
        _: &mut Collector<'_, Summary>,
    ) -> Result<()> {
        self.seen += 1;
        Ok(())
    }
    fn process_broadcast_element(
        &mut self,
        r: u64,
        ctx: &mut BroadcastContext<'_>,
        _: &mut Collector<'_, Summary>,
    ) -> Result<()> {
        ctx.get_mut(self.rules.unwrap()).insert(r, R::new(r));
        self.applied.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn on_end_of_input(
        &mut self,
        ctx: &ReadOnlyBroadcastContext<'_>,
        out: &mut Collector<'_, Summary>,
    ) -> Result<()> {
        let mut rules: Vec<(u64, u64, bool)> = ctx
            .get(self.rules.unwrap())
            .iter()
            .map(|(r, v)| (*r, v.square(), v.migrated()))
            .collect();
        rules.sort_unstable();
        out.collect((rules, self.seen));
        Ok(())
    }
}

/// A source's gate that admits nothing until every broadcast subtask took in every rule,
/// then everything: v1's checkpoint (taken once its events stopped mid-input, so after
/// this) holds all the rules, on any machine.
#[derive(Clone)]
struct AfterRules {
    applied: Arc<AtomicU64>,
    want: u64,
}

impl SourceGate for AfterRules {
    fn admit(&mut self) -> Result<Admit> {
        Ok(if self.applied.load(Ordering::SeqCst) < self.want {
            Admit::HOLD
        } else {
            Admit::ALL
        })
    }
}

/// The broadcast job (value type `R`) at `cfg.parallelism`: rules (uid `rules`,
/// parallelism 1) broadcast to `events` (uid `events`), the function's uid `rules-fn`.
fn broadcast_job<R: Rule, S: SourceFunction<u64>>(
    cfg: JobConfig,
    events: S,
    applied: &Arc<AtomicU64>,
    out: &CollectSink<Summary>,
) -> StreamEnvironment {
    let p = cfg.parallelism;
    let env = StreamEnvironment::new(cfg);
    let rules = env
        .add_source("rules", GeneratorSource::new(RULES))
        .uid("rules")
        .set_parallelism(1);
    let f = Rules::<R> {
        rules: None,
        seen: 0,
        applied: applied.clone(),
    };
    env.add_source("events", events)
        .uid("events")
        .connect_broadcast(rules)
        .process(f)
        .uid("rules-fn")
        .set_parallelism(p)
        .add_sink("collect", out.clone())
        .uid("sink");
    env
}

fn broadcast_cfg(dir: &Path) -> JobConfig {
    config("upgrade-bcast", dir, 2, CheckpointingMode::ExactlyOnce)
}

/// v1 (`RuleV1`) stopped mid-input after every subtask took in every rule.
fn broadcast_upgrade() -> Upgrade {
    Upgrade::after_v1(broadcast_cfg, |c| {
        let applied = Arc::new(AtomicU64::new(0));
        let gate = AfterRules {
            applied: applied.clone(),
            want: RULES * u64::from(c.parallelism),
        };
        let events = Gated::new(GeneratorSource::new(N), gate);
        let out = CollectSink::new();
        broadcast_job::<RuleV1, _>(c, StopMidRun::new(events, STOP), &applied, &out)
    })
}

#[test]
fn broadcast_state_with_a_field_added_migrates_at_3_and_1_and_the_run_is_exact() {
    let up = broadcast_upgrade();
    let mid = &up.mid;
    for p in [3, 1] {
        let mut c = up.v2();
        c.parallelism = p;
        let out = CollectSink::new();
        let applied = Arc::default();
        let env = broadcast_job::<RuleAdded, _>(c, GeneratorSource::new(N), &applied, &out);
        let report = env.check_savepoint(mid).unwrap();
        let rules = row(&report, "rules-fn", "rules");
        assert_eq!(
            rules.verdict,
            "broadcast state: migrates (serde)",
            "{}",
            report.table()
        );
        assert!(rules.old.as_ref().unwrap().type_name.contains("RuleV1"));
        assert!(rules.new.as_ref().unwrap().type_name.contains("RuleAdded"));
        assert!(report.refusals(false).is_empty(), "{}", report.table());
        let r = env.execute().unwrap();
        common::assert_resumed_mid_run(&r, mid, N + RULES);
        let got = out.take();
        assert_eq!(got.len(), p as usize, "one summary per subtask");
        // Every rule came from v1's checkpoint, read through the migration: v2 wrote none
        // itself (the rules source was restored at its end).
        let want: Vec<(u64, u64, bool)> = (0..RULES).map(|r| (r, r * r, true)).collect();
        for (rules, _) in &got {
            assert_eq!(rules, &want, "parallelism {p}");
        }
        assert_eq!(got.iter().map(|g| g.1).sum::<u64>(), N, "parallelism {p}");
    }
}

#[test]
fn broadcast_state_whose_field_changed_type_is_refused_naming_it() {
    let up = broadcast_upgrade();
    let out = CollectSink::new();
    let env =
        broadcast_job::<RuleRetyped, _>(up.v2(), GeneratorSource::new(N), &Arc::default(), &out);
    let parts = [
        "operator 'rules-fn'",
        "broadcast state 'rules'",
        "RuleV1",
        "RuleRetyped",
        "--allow-non-restored-state",
        "fresh",
    ];
    // `savepoint check` says so beforehand, with the same message.
    let (refusal, e) = assert_refused_by_check_and_run(env, &up.mid, true, &out, &parts);
    assert_eq!(refusal, e.trim_start_matches("cannot restore: "));
}
