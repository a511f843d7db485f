//! Operator state: named lists owned by one parallel subtask (docs/architecture.md §5).
//!
//! A function writes its lists in `snapshot_state` (the equivalent of Flink's
//! `ListState.update`) and reads the lists assigned to it in `initialize_state`. On restore
//! the elements of a list are redistributed according to its [`StateKind`]:
//! * `OperatorList` — with unchanged parallelism every subtask gets back exactly its own
//!   elements; otherwise all elements are concatenated in subtask order and split into
//!   `p` contiguous, even chunks (Flink's round-robin split).
//! * `UnionList` — every subtask gets every element, in subtask order.
//! * `Broadcast` — every subtask gets one (any) subtask's copy; they are all identical.
//!
//! Every list records the schema of its element type when snapshotted (issue 26), so a
//! restore into a changed type is decided like keyed state's: read as is, migrated
//! through serde (a field added with a default, removed, renamed with an alias), or
//! refused naming the operator, the list, both schemas and the ways out
//! ([`crate::state::schema::decode_elements`]). Lists written before schemas existed
//! restore unversioned.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::schema::{decode_elements, schema_of, StateSchema};
use super::{StateKind, StateValue};
use crate::error::{Error, Result};

/// One named list as snapshotted by one subtask: elements stay encoded so the engine can
/// move them between subtasks without knowing their type.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ListSnapshot {
    /// How the list is redistributed on restore.
    pub kind: Option<StateKind>,
    /// The encoded elements.
    pub elements: Vec<Vec<u8>>,
    /// The element type's schema. Not part of this struct's encoding, which is the
    /// operator-state file's and older than schemas: the file carries the schemas after
    /// the lists ([`crate::checkpoint::layout::encode_operator_state_file`]).
    #[serde(skip)]
    pub schema: Option<StateSchema>,
}

/// All operator state of one subtask of one operator: list name → list.
pub type OperatorStateSnapshot = BTreeMap<String, ListSnapshot>;

/// One list as assigned to one subtask on restore.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssignedList {
    /// The encoded elements this subtask gets.
    pub elements: Vec<Vec<u8>>,
    /// The schema they were written with (`None`: written before schemas existed).
    pub schema: Option<StateSchema>,
}

/// Operator state assigned to one subtask on restore: list name → its elements.
pub type AssignedLists = BTreeMap<String, AssignedList>;

/// Handed to `snapshot_state`: the function records its lists here.
pub struct SnapshotContext {
    checkpoint_id: u64,
    pub(crate) lists: OperatorStateSnapshot,
}

impl SnapshotContext {
    /// A context for checkpoint `checkpoint_id`. The engine makes one per barrier; tests of
    /// a function's state hooks make their own and restore it with
    /// [`InitContext::restored_from`].
    pub fn new(checkpoint_id: u64) -> Self {
        SnapshotContext {
            checkpoint_id,
            lists: BTreeMap::new(),
        }
    }

    /// The checkpoint being taken.
    pub fn checkpoint_id(&self) -> u64 {
        self.checkpoint_id
    }

    /// Stores list `name`, split evenly among subtasks if the job is restored at another
    /// parallelism. Replaces anything stored under `name` in this snapshot.
    pub fn set_operator_list<T: StateValue>(&mut self, name: &str, items: &[T]) -> Result<()> {
        self.set(name, StateKind::OperatorList, items)
    }

    /// Stores list `name`; on restore every subtask receives the union of all subtasks' lists.
    pub fn set_union_list<T: StateValue>(&mut self, name: &str, items: &[T]) -> Result<()> {
        self.set(name, StateKind::UnionList, items)
    }

    fn set<T: StateValue>(&mut self, name: &str, kind: StateKind, items: &[T]) -> Result<()> {
        let elements = items
            .iter()
            .map(|i| {
                postcard::to_stdvec(i).map_err(|e| Error::StateDecode {
                    what: format!("operator state '{name}' (encoding)"),
                    cause: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.lists.insert(
            name.to_string(),
            ListSnapshot {
                kind: Some(kind),
                elements,
                schema: Some(schema_of::<T>(0)),
            },
        );
        Ok(())
    }
}

/// Handed to `initialize_state`: says whether the job restores, and yields the lists this
/// subtask was assigned.
pub struct InitContext {
    restored: bool,
    subtask: u32,
    parallelism: u32,
    lists: AssignedLists,
    identity: OperatorIdentity,
}

/// Who an operator instance is, beyond its subtask: what two-phase-commit sinks need to
/// give their transactions deterministic names (docs/architecture.md §8).
#[derive(Debug, Clone, Default)]
pub struct OperatorIdentity {
    /// The job's name (the folder its checkpoints live in).
    pub job_name: String,
    /// The operator's stable uid.
    pub uid: String,
}

impl InitContext {
    pub(crate) fn new(
        restored: bool,
        subtask: u32,
        parallelism: u32,
        lists: AssignedLists,
    ) -> Self {
        InitContext {
            restored,
            subtask,
            parallelism,
            lists,
            identity: OperatorIdentity::default(),
        }
    }

    /// What a restore hands subtask `subtask` of `parallelism` after the old subtasks
    /// (index = old subtask) stored `snapshots` — with the engine's own redistribution
    /// rules, so a function's rescaling can be tested without running a job.
    pub fn restored_from(
        snapshots: &[SnapshotContext],
        subtask: u32,
        parallelism: u32,
        identity: OperatorIdentity,
    ) -> Self {
        let old: Vec<Option<&OperatorStateSnapshot>> =
            snapshots.iter().map(|s| Some(&s.lists)).collect();
        InitContext::new(
            true,
            subtask,
            parallelism,
            redistribute(&old, subtask, parallelism),
        )
        .with_identity(identity)
    }

    /// A fresh start of subtask `subtask` of `parallelism` (nothing restored).
    pub fn fresh(subtask: u32, parallelism: u32, identity: OperatorIdentity) -> Self {
        InitContext::new(false, subtask, parallelism, BTreeMap::new()).with_identity(identity)
    }

    pub(crate) fn with_identity(mut self, identity: OperatorIdentity) -> Self {
        self.identity = identity;
        self
    }

    /// The job's name and the operator's uid.
    pub fn identity(&self) -> &OperatorIdentity {
        &self.identity
    }

    /// True when the job starts from a checkpoint or savepoint, false on a fresh start.
    /// (A restored job may still have no state for this operator, e.g. a new operator.)
    pub fn is_restored(&self) -> bool {
        self.restored
    }

    /// This subtask's index, `0..parallelism`.
    pub fn subtask_index(&self) -> u32 {
        self.subtask
    }

    /// The operator's parallelism in this run.
    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }

    /// Whether the restored checkpoint holds any operator state for this operator (a
    /// restored job may contain operators that are new since the checkpoint).
    pub fn has_state(&self) -> bool {
        !self.lists.is_empty()
    }

    /// The elements of list `name` assigned to this subtask (empty if none were stored).
    ///
    /// When `T`'s shape differs from the one the list was written with, the elements are
    /// migrated through serde where it can read them; otherwise this fails naming the
    /// operator, the list, both schemas and the ways out. To convert by hand, read the list
    /// as its old type here and convert.
    pub fn list<T: StateValue>(&self, name: &str) -> Result<Vec<T>> {
        let Some(list) = self.lists.get(name) else {
            return Ok(Vec::new());
        };
        let what = ("operator state", self.identity.uid.as_str(), name);
        decode_elements(what, list.schema.as_ref(), &list.elements)
    }

    /// The schema list `name` was written with, if it was recorded: what a function that
    /// converts old elements by hand can look at.
    pub fn list_schema(&self, name: &str) -> Option<&StateSchema> {
        self.lists.get(name).and_then(|l| l.schema.as_ref())
    }
}

/// Redistributes the operator state that `old` subtasks stored (index = old subtask) to
/// subtask `subtask` of `parallelism`; see the module docs for the rules.
pub fn redistribute(
    old: &[Option<&OperatorStateSnapshot>],
    subtask: u32,
    parallelism: u32,
) -> AssignedLists {
    let mut names: BTreeMap<&str, (StateKind, Option<&StateSchema>)> = BTreeMap::new();
    for snap in old.iter().flatten() {
        for (name, list) in snap.iter() {
            let e = names
                .entry(name)
                .or_insert((list.kind.unwrap_or(StateKind::OperatorList), None));
            // Every subtask of one run writes a list with the same type.
            e.1 = e.1.or(list.schema.as_ref());
        }
    }
    let mut out = BTreeMap::new();
    for (name, (kind, schema)) in names {
        let all = || {
            old.iter()
                .flatten()
                .filter_map(|s| s.get(name))
                .flat_map(|l| l.elements.iter().cloned())
        };
        let mine: Vec<Vec<u8>> = match kind {
            StateKind::UnionList => all().collect(),
            // Every copy is identical: hand each subtask the first one.
            StateKind::Broadcast => old
                .iter()
                .flatten()
                .find_map(|s| s.get(name))
                .map(|l| l.elements.clone())
                .unwrap_or_default(),
            _ if old.len() == parallelism as usize => old[subtask as usize]
                .and_then(|s| s.get(name))
                .map(|l| l.elements.clone())
                .unwrap_or_default(),
            _ => {
                let total: Vec<Vec<u8>> = all().collect();
                let n = total.len();
                let (p, i) = (parallelism as usize, subtask as usize);
                let (start, end) = (i * n / p, (i + 1) * n / p);
                total[start..end].to_vec()
            }
        };
        let list = AssignedList {
            elements: mine,
            schema: schema.cloned(),
        };
        out.insert(name.to_string(), list);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(lists: &[(&str, StateKind, &[u32])]) -> OperatorStateSnapshot {
        let mut ctx = SnapshotContext::new(1);
        for (name, kind, items) in lists {
            match kind {
                StateKind::UnionList => ctx.set_union_list(name, items).unwrap(),
                _ => ctx.set_operator_list(name, items).unwrap(),
            }
        }
        ctx.lists
    }

    fn decode(m: &AssignedLists, name: &str) -> Vec<u32> {
        InitContext::new(true, 0, 1, m.clone()).list(name).unwrap()
    }

    #[test]
    fn same_parallelism_keeps_assignment() {
        let a = snap(&[("s", StateKind::OperatorList, &[1, 2, 3])]);
        let b = snap(&[("s", StateKind::OperatorList, &[4])]);
        let old = [Some(&a), Some(&b)];
        assert_eq!(decode(&redistribute(&old, 0, 2), "s"), vec![1, 2, 3]);
        assert_eq!(decode(&redistribute(&old, 1, 2), "s"), vec![4]);
    }

    #[test]
    fn rescale_splits_evenly_and_loses_nothing() {
        let a = snap(&[("s", StateKind::OperatorList, &[1, 2, 3])]);
        let b = snap(&[("s", StateKind::OperatorList, &[4, 5])]);
        let old = [Some(&a), Some(&b)];
        for p in 1..=6u32 {
            let mut all = Vec::new();
            for i in 0..p {
                let mine = decode(&redistribute(&old, i, p), "s");
                assert!(mine.len() <= 5usize.div_ceil(p as usize));
                all.extend(mine);
            }
            assert_eq!(all, vec![1, 2, 3, 4, 5], "p={p}");
        }
    }

    #[test]
    fn union_gives_everything_to_everyone() {
        let a = snap(&[("u", StateKind::UnionList, &[1])]);
        let b = snap(&[("u", StateKind::UnionList, &[2])]);
        let old = [Some(&a), None, Some(&b)];
        for i in 0..3 {
            assert_eq!(decode(&redistribute(&old, i, 3), "u"), vec![1, 2]);
        }
    }

    #[test]
    fn undecodable_state_is_an_error_not_a_panic() {
        let mut m = BTreeMap::new();
        let list = AssignedList {
            elements: vec![vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff]],
            schema: None,
        };
        m.insert("s".to_string(), list);
        let ctx = InitContext::new(true, 0, 1, m);
        let err = ctx.list::<u32>("s").unwrap_err().to_string();
        assert!(err.contains("operator state 's'"), "{err}");
    }

    #[test]
    fn the_public_test_contexts_restore_with_the_engines_rules() {
        let id = OperatorIdentity {
            job_name: "j".into(),
            uid: "op".into(),
        };
        let old: Vec<SnapshotContext> = (0..2u32)
            .map(|sub| {
                let mut c = SnapshotContext::new(4);
                c.set_operator_list("even", &[sub * 10, sub * 10 + 1])
                    .unwrap();
                c.set_union_list("all", &[sub]).unwrap();
                c
            })
            .collect();
        let mut even = Vec::new();
        for sub in 0..3 {
            let ctx = InitContext::restored_from(&old, sub, 3, id.clone());
            assert!(ctx.is_restored());
            assert_eq!(ctx.identity().uid, "op");
            assert_eq!(ctx.list::<u32>("all").unwrap(), vec![0, 1]);
            even.extend(ctx.list::<u32>("even").unwrap());
        }
        even.sort_unstable();
        assert_eq!(even, vec![0, 1, 10, 11], "split, none lost or doubled");
        let fresh = InitContext::fresh(0, 1, id);
        assert!(!fresh.is_restored() && !fresh.has_state());
    }

    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
    struct Offset {
        split: u32,
        next: u64,
    }

    /// `Offset` with a field added with a default.
    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
    struct OffsetAdded {
        split: u32,
        next: u64,
        #[serde(default)]
        end: Option<u64>,
    }

    /// `Offset` with a field whose type changed.
    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
    struct OffsetRetyped {
        split: String,
        next: u64,
    }

    fn restored_offsets() -> InitContext {
        let mut c = SnapshotContext::new(3);
        let offsets = [Offset { split: 0, next: 7 }, Offset { split: 1, next: 9 }];
        c.set_operator_list("offsets", &offsets).unwrap();
        let id = OperatorIdentity {
            job_name: "j".into(),
            uid: "source".into(),
        };
        InitContext::restored_from(&[c], 0, 1, id)
    }

    #[test]
    fn a_list_of_a_changed_type_migrates_through_serde_or_is_refused_by_name() {
        let ctx = restored_offsets();
        assert!(ctx
            .list_schema("offsets")
            .unwrap()
            .type_name
            .ends_with("Offset"));
        assert_eq!(ctx.list::<Offset>("offsets").unwrap()[1].next, 9, "as is");
        let added = ctx.list::<OffsetAdded>("offsets").unwrap();
        assert_eq!(
            added,
            vec![
                OffsetAdded {
                    split: 0,
                    next: 7,
                    end: None
                },
                OffsetAdded {
                    split: 1,
                    next: 9,
                    end: None
                }
            ]
        );
        let e = ctx
            .list::<OffsetRetyped>("offsets")
            .unwrap_err()
            .to_string();
        for part in [
            "operator 'source'",
            "operator state 'offsets'",
            "Offset v0",
            "OffsetRetyped",
            "--allow-non-restored-state",
        ] {
            assert!(e.contains(part), "'{part}' missing from: {e}");
        }
    }

    #[test]
    fn a_list_without_a_recorded_schema_restores_unversioned() {
        let mut m = BTreeMap::new();
        let list = AssignedList {
            elements: vec![postcard::to_stdvec(&5u32).unwrap()],
            schema: None,
        };
        m.insert("s".to_string(), list);
        assert_eq!(
            InitContext::new(true, 0, 1, m).list::<u32>("s").unwrap(),
            vec![5]
        );
    }
}
