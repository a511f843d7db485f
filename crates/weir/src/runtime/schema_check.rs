//! Every state of a job decided against a checkpoint before any task starts (issue 26):
//! the run refuses an incompatible state up front, and `savepoint check` prints the same
//! decisions as a table for CI.
//!
//! A keyed operator's states are only known once its function declares them in `open`.
//! So each keyed operator carries a *probe* ([`SchemaProbe`], registered when the job is
//! built): a clone of its function opened on a probe backend that holds the checkpoint's
//! recorded states without their entries. Each declaration is then decided exactly as the
//! real restore will decide it (the same code, [`crate::state::keyed`]), and recorded. The
//! probes' schemas are also what every checkpoint of the run records in `_metadata`.
//! `open` is meant to declare state only (as in Flink), which is what makes this safe.
//! A broadcast process function declares its broadcast maps in `open` too: its probe
//! ([`BroadcastProbe`]) opens a clone on the checkpoint's lists and decodes them as the run
//! will, so an incompatible map is refused before anything runs, and the check says so.
//! Operator lists are decided from the function's declaration
//! ([`OperatorListDeclaration`], `CheckpointedFunction::operator_state`), since
//! `initialize_state` is never probed; an undeclared list is decided when it is read.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::checkpoint::layout::ChannelStateFile;
use crate::checkpoint::restore::RestoredCheckpoint;
use crate::error::{Error, Result};
use crate::runtime::codec::channel_state_refusal;
use crate::runtime::functions::{BroadcastProcessFunction, KeyedProcessFunction};
use crate::runtime::graph::JobGraph;
use crate::state::broadcast::{BroadcastStateStore, BroadcastStore};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed::{KeyedStateBackend, KeyedStateStore, RestoredKeyedState};
use crate::state::schema::{
    decide_key, incompatible_message, list_refusal, schema_of, Decision, DeclaredOperator,
    DeclaredState, OperatorListDeclaration, OperatorSchemas, StateSchema,
};
use crate::state::Key;

/// Opens a clone of a keyed operator's function on a probe backend holding the given
/// recorded states (no entries) with the job's max parallelism, and returns what it
/// declared.
pub(crate) type SchemaProbe =
    Arc<dyn Fn(u32, RestoredKeyedState) -> Result<DeclaredOperator> + Send + Sync>;

/// The probe of a keyed operator running `f` with key type `K`.
pub(crate) fn keyed_probe<K, I, O, P>(f: &P) -> SchemaProbe
where
    K: Key,
    P: KeyedProcessFunction<K, I, O>,
{
    let f = Mutex::new(f.clone());
    Arc::new(move |max_parallelism, restored| {
        let mut f = f.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let range = KeyGroupRange::for_subtask(0, 1, max_parallelism);
        let mut backend = KeyedStateBackend::<K>::new(range, max_parallelism, restored).probe();
        backend.init_timers()?;
        // An `open` that relies on more than declaring state (on `initialize_state` having
        // run, say) may panic here: the probe then says so instead of ending the process.
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            f.open(&mut KeyedStateStore::new(&mut backend))
        }));
        match opened {
            Ok(result) => result?,
            Err(_) => {
                return Err(Error::InvalidJob(
                    "the function's open panicked when called only to declare its state".into(),
                ))
            }
        }
        Ok(DeclaredOperator {
            key: Some(schema_of::<K>(0)),
            states: backend.declared().to_vec(),
        })
    })
}

/// Opens a clone of a broadcast process function (uid, the restored operator lists of
/// its subtask) on a store holding those lists, and returns the broadcast maps it
/// declared with their decisions, or the refusal its restore would fail with.
pub(crate) type BroadcastProbe = Arc<
    dyn Fn(&str, crate::state::operator::AssignedLists) -> Result<Vec<DeclaredState>> + Send + Sync,
>;

/// The probe of a broadcast process operator running `f`. Its `open` declares the maps
/// (as a keyed function's declares its states); `initialize_state` is not called, as it
/// may reach external systems (the module docs of `state::schema::elements`).
pub(crate) fn broadcast_probe<I, B, O, F>(f: &F) -> BroadcastProbe
where
    F: BroadcastProcessFunction<I, B, O>,
{
    let f = Mutex::new(f.clone());
    Arc::new(move |uid, lists| {
        let mut f = f.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut store = BroadcastStore::new(uid, lists);
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            f.open(&mut BroadcastStateStore { store: &mut store })
        }));
        match opened {
            Ok(result) => result?,
            Err(_) => {
                return Err(Error::InvalidJob(
                    "the function's open panicked when called only to declare its state".into(),
                ))
            }
        }
        Ok(store.declared().to_vec())
    })
}

/// One row of the check: an operator's state, or an operator, and what a restore does.
#[derive(Debug, Clone)]
pub struct SchemaRow {
    /// The operator's uid.
    pub uid: String,
    /// The state's name (`(key)` for the key type; empty for a row about the operator).
    pub state: String,
    /// What happens to it ("restorable as is", "migrates (serde)", "incompatible", ...).
    pub verdict: String,
    /// The schema in the checkpoint, if recorded.
    pub old: Option<StateSchema>,
    /// The schema the job declares now, if known.
    pub new: Option<StateSchema>,
    /// Why a run refuses this row (with the ways out); `None` when it does not.
    pub refusal: Option<String>,
    /// Whether `--allow-non-restored-state` turns the refusal into dropping the state.
    pub droppable: bool,
}

/// The decisions for a whole job, and the schemas its checkpoints record.
#[derive(Debug, Clone, Default)]
pub struct SchemaReport {
    /// One row per operator and state.
    pub rows: Vec<SchemaRow>,
    /// The job's keyed state schemas (what `_metadata` records).
    pub schemas: Vec<OperatorSchemas>,
}

impl SchemaReport {
    /// The refusals a run with `allow_non_restored_state` still has (empty: it may start).
    pub fn refusals(&self, allow_non_restored_state: bool) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|r| !(allow_non_restored_state && r.droppable))
            .filter_map(|r| r.refusal.as_deref())
            .collect()
    }

    /// The keyed states a run with `--allow-non-restored-state` drops (uid, state).
    pub fn dropped_states(&self) -> Vec<(String, String)> {
        self.rows
            .iter()
            .filter(|r| r.droppable && r.refusal.is_some() && !r.state.is_empty())
            .map(|r| (r.uid.clone(), r.state.clone()))
            .collect()
    }

    /// The table `savepoint check` prints.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let w_uid = self
            .rows
            .iter()
            .map(|r| r.uid.len())
            .max()
            .unwrap_or(0)
            .max(8);
        let w_state = self
            .rows
            .iter()
            .map(|r| r.state.len())
            .max()
            .unwrap_or(0)
            .max(5);
        let w_verdict = self
            .rows
            .iter()
            .map(|r| r.verdict.len())
            .max()
            .unwrap_or(0)
            .max(7);
        out.push_str(&format!(
            "{:w_uid$}  {:w_state$}  {:w_verdict$}  schema (checkpoint -> job)\n",
            "operator", "state", "verdict"
        ));
        for r in &self.rows {
            let show = |s: &Option<StateSchema>| s.as_ref().map_or("-".into(), |s| s.to_string());
            out.push_str(&format!(
                "{:w_uid$}  {:w_state$}  {:w_verdict$}  {} -> {}\n",
                r.uid,
                if r.state.is_empty() { "-" } else { &r.state },
                r.verdict,
                show(&r.old),
                show(&r.new)
            ));
        }
        out
    }
}

/// Decides every state of `graph` (operators `uids`) against `restored` (or records the
/// job's schemas only, when it starts fresh).
pub(crate) fn check(
    graph: &JobGraph,
    uids: &[String],
    max_parallelism: u32,
    restored: Option<&RestoredCheckpoint>,
) -> Result<SchemaReport> {
    let mut report = SchemaReport::default();
    let mut probed = BTreeSet::new();
    for (node, probe) in &graph.schema_probes {
        let uid = &uids[*node];
        probed.insert(uid.as_str());
        let recorded = restored.map_or_else(Default::default, |r| r.recorded_keyed_states(uid));
        let had_state = !recorded.is_empty();
        let recorded_names: Vec<String> = recorded.keys().cloned().collect();
        let declared = match probe(max_parallelism, recorded) {
            Ok(declared) => declared,
            Err(e) => {
                // Decided at declaration instead, in the task (still before its records);
                // its checkpoints record no schemas (they restore unversioned).
                report
                    .rows
                    .push(operator_row(uid, &format!("not checked: {e}")));
                continue;
            }
        };
        report.schemas.push(declared.recorded(uid));
        let Some(r) = restored else { continue };
        if !had_state {
            report
                .rows
                .push(operator_row(uid, "operator without state (starts empty)"));
            continue;
        }
        let old_key = r.meta.schemas_of(uid).and_then(|s| s.key.clone());
        if let (Some(old), Some(new)) = (&old_key, &declared.key) {
            let decision = decide_key(old, new);
            report.rows.push(row(
                uid,
                "(key)",
                &decision,
                old_key.clone(),
                declared.key.clone(),
                false,
            ));
        }
        for s in &declared.states {
            let old = r.meta.state_schema(uid, &s.name).cloned();
            let mut row = row(uid, &s.name, &s.decision, old, Some(s.schema.clone()), true);
            if s.decision == Decision::New && row.old.is_some() {
                // Recorded, but no subtask had entries: nothing to read, whatever the type.
                row.verdict = "restorable (no entries)".into();
            }
            report.rows.push(row);
        }
        for name in recorded_names {
            if !declared.states.iter().any(|s| s.name == name) {
                report.rows.push(SchemaRow {
                    uid: uid.clone(),
                    state: name.clone(),
                    verdict: "no longer declared (dropped)".into(),
                    old: r.meta.state_schema(uid, &name).cloned(),
                    new: None,
                    refusal: None,
                    droppable: false,
                });
            }
        }
    }
    let Some(r) = restored else {
        return Ok(report);
    };
    // Broadcast maps: decided by a probe of `open`, as the run decides them.
    let mut broadcast: BTreeSet<(String, String)> = BTreeSet::new();
    for (node, probe) in &graph.broadcast_probes {
        let uid = &uids[*node];
        if r.operator_lists(uid).is_empty() {
            continue; // no state: the operator row below says so
        }
        // Another max parallelism is refused on its own (`check_compatible`).
        let Ok((lists, _)) = r.state_for(uid, 0, 1, max_parallelism) else {
            continue;
        };
        let old_of = |name: &str| lists.get(name).and_then(|l| l.schema.clone());
        let declared = match probe(uid, lists.clone()) {
            Ok(declared) => declared,
            Err(e) => {
                // The refusal a run would give (`map_state` names the operator, the state,
                // both schemas and the ways out); which map is in the message.
                let mut row = operator_row(uid, "incompatible (broadcast state)");
                row.refusal = Some(match e {
                    Error::Restore(why) => why,
                    other => other.to_string(),
                });
                report.rows.push(row);
                for name in lists.keys() {
                    broadcast.insert((uid.clone(), name.clone()));
                }
                continue;
            }
        };
        for s in declared {
            broadcast.insert((uid.clone(), s.name.clone()));
            let old = old_of(&s.name);
            let mut row = row(uid, &s.name, &s.decision, old, Some(s.schema), false);
            row.verdict = format!("broadcast state: {}", row.verdict);
            report.rows.push(row);
        }
    }
    for (node, uid) in uids.iter().enumerate() {
        let mut lists = r.operator_lists(uid);
        let stateless = lists.is_empty();
        lists.retain(|name, _| !broadcast.contains(&(uid.clone(), name.clone())));
        let channel = r.channel_state_of(uid);
        if stateless && !probed.contains(uid.as_str()) {
            // Channel state alone gets its own row below.
            let has = r.meta.operators.iter().any(|o| &o.uid == uid);
            if has {
                report.rows.push(operator_row(
                    uid,
                    "restorable (state without schemas, unversioned)",
                ));
            } else if channel.is_none() {
                report
                    .rows
                    .push(operator_row(uid, "operator without state"));
            }
        }
        if let Some((_, files)) = channel {
            report.rows.push(channel_row(graph, node, uid, files));
        }
        // Decided from the function's declaration where it names the list; otherwise when
        // `initialize_state` reads it, which may reach external systems and so is never
        // called here (module docs of `state::schema::elements`).
        let declared = graph
            .operator_lists
            .iter()
            .filter(|(n, _)| *n == node)
            .flat_map(|(_, lists)| lists);
        let declared: Vec<&OperatorListDeclaration> = declared.collect();
        for (name, schema) in lists {
            let decl = declared.iter().find(|d| d.name() == name);
            report
                .rows
                .push(operator_list_row(r, uid, name, schema, decl.copied()));
        }
    }
    for uid in r.uids().filter(|u| !uids.iter().any(|p| p == u)) {
        let mut row = operator_row(uid, "state without an operator");
        row.refusal = Some(format!(
            "operator '{uid}' has state in the checkpoint but is not in the job; give the \
             operator its old uid, or pass --allow-non-restored-state to drop that state"
        ));
        row.droppable = true;
        report.rows.push(row);
    }
    Ok(report)
}

/// The row of operator `uid`'s (node `node`'s) restored channel state: its records, the
/// schema they were saved with, and what the restore does with them, decided from the
/// schemas as [`RecordCodec::adopt`](crate::runtime::codec::RecordCodec::adopt) will
/// (which refuses an incompatible type too, should this check be bypassed).
fn channel_row(graph: &JobGraph, node: usize, uid: &str, files: &[ChannelStateFile]) -> SchemaRow {
    let records: u64 = files.iter().map(ChannelStateFile::records).sum();
    // Every file of one operator holds records of its one input type.
    let saved = files.iter().find(|f| f.schema.is_some());
    let old = saved.and_then(|f| f.schema.clone());
    let mut row = operator_row(uid, "");
    row.state = CHANNEL_STATE_ROW.into();
    let decided = old.as_ref().and_then(|old| {
        let edge = graph.nodes.get(node)?.inputs.first()?;
        graph.edges[*edge]
            .factory
            .decide_channel_state(&graph.types, old)
    });
    row.verdict = match (&old, &decided) {
        (None, _) => format!("{records} records in flight (unversioned)"),
        (Some(_), None) => format!("{records} records in flight: decided on restore"),
        (Some(_), Some((_, d))) => format!("{records} records in flight: {}", d.label()),
    };
    if let (Some(old), Some(f), Some((new, Decision::Incompatible(why)))) = (&old, saved, &decided)
    {
        let channel = format!("subtask {} channel {}", f.subtask, f.channel);
        row.refusal = Some(channel_state_refusal(uid, &channel, old, new, why));
    }
    row.old = old;
    row.new = decided.map(|(new, _)| new);
    row
}

/// The row of operator `uid`'s list `name` (recorded with `old`): decided from the
/// function's declaration `decl` as `decode_elements` will decide it, with its refusal.
fn operator_list_row(
    r: &RestoredCheckpoint,
    uid: &str,
    name: String,
    old: Option<StateSchema>,
    decl: Option<&OperatorListDeclaration>,
) -> SchemaRow {
    let mut row = operator_row(uid, "");
    let (verdict, refusal) = match (&old, decl) {
        (None, _) => ("operator state (unversioned)".to_string(), None),
        (Some(_), None) => (
            "operator state: decided at start (not declared)".into(),
            None,
        ),
        (Some(_), Some(_)) if !r.operator_list_has_elements(uid, &name) => {
            ("operator state: restorable (no elements)".into(), None)
        }
        (Some(old), Some(d)) => {
            let decision = d.decide(old);
            let refusal = match &decision {
                Decision::Incompatible(why) => Some(list_refusal(
                    "operator state",
                    uid,
                    &name,
                    old,
                    d.schema(),
                    why,
                )),
                _ => None,
            };
            (format!("operator state: {}", decision.label()), refusal)
        }
    };
    row.state = name;
    row.verdict = verdict;
    row.new = decl.map(|d| d.schema().clone());
    row.old = old;
    row.refusal = refusal;
    row
}

/// The state column of a channel-state row.
pub const CHANNEL_STATE_ROW: &str = "(channel state)";

fn operator_row(uid: &str, verdict: &str) -> SchemaRow {
    SchemaRow {
        uid: uid.to_string(),
        state: String::new(),
        verdict: verdict.into(),
        old: None,
        new: None,
        refusal: None,
        droppable: false,
    }
}

fn row(
    uid: &str,
    state: &str,
    decision: &Decision,
    old: Option<StateSchema>,
    new: Option<StateSchema>,
    droppable: bool,
) -> SchemaRow {
    let refusal = match decision {
        Decision::Incompatible(why) if state == "(key)" => Some(format!(
            "operator '{uid}': cannot restore its keyed state: {why} (key type {} in the \
             checkpoint, {} in the job). Ways out: keep the old key type, or give the operator \
             a new uid and pass --allow-non-restored-state, or start fresh without --restore",
            old.as_ref().map_or("?".into(), |s| s.to_string()),
            new.as_ref().map_or("?".into(), |s| s.to_string()),
        )),
        Decision::Incompatible(why) => Some(incompatible_message(
            uid,
            state,
            old.as_ref(),
            new.as_ref(),
            why,
        )),
        _ => None,
    };
    SchemaRow {
        uid: uid.to_string(),
        state: state.to_string(),
        verdict: decision.label().to_string(),
        old,
        new,
        refusal,
        droppable,
    }
}
