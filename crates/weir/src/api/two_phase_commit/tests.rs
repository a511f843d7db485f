//! The protocol driven through the hooks with a recording connector.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::*;
use crate::state::operator::{AssignedList, AssignedLists, OperatorIdentity};

/// Records every call as a line, so the tests compare the exact protocol.
#[derive(Clone, Default)]
struct Recorder {
    log: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn push(&self, s: String) {
        self.log.lock().unwrap().push(s);
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl TwoPhaseCommitSink<u32> for Recorder {
    type Transaction = Vec<u32>;
    type Committable = (String, Vec<u32>);

    fn recover(&mut self, ctx: &TransactionContext, c: Vec<Self::Committable>) -> Result<()> {
        self.push(format!("recover {} {c:?}", ctx.prefix()));
        Ok(())
    }
    fn begin(&mut self, _ctx: &TransactionContext) -> Result<Vec<u32>> {
        self.push("begin".into());
        Ok(Vec::new())
    }
    fn write(&mut self, txn: &mut Vec<u32>, batch: &mut Vec<u32>) -> Result<()> {
        txn.append(batch);
        Ok(())
    }
    fn pre_commit(
        &mut self,
        ctx: &TransactionContext,
        txn: Vec<u32>,
        id: u64,
    ) -> Result<Option<Self::Committable>> {
        let name = ctx.transaction_name(id);
        self.push(format!("pre_commit {name} {txn:?}"));
        Ok((!txn.is_empty()).then_some((name, txn)))
    }
    fn commit(&mut self, c: Self::Committable) -> Result<()> {
        self.push(format!("commit {}", c.0));
        Ok(())
    }
    fn abort(&mut self, txn: Vec<u32>) -> Result<()> {
        self.push(format!("abort {txn:?}"));
        Ok(())
    }
}

fn init(
    sink: &mut TwoPhaseCommit<u32, Recorder>,
    subtask: u32,
    lists: BTreeMap<String, Vec<Vec<u8>>>,
) {
    let lists: AssignedLists = lists
        .into_iter()
        .map(|(name, elements)| {
            (
                name,
                AssignedList {
                    elements,
                    schema: None,
                },
            )
        })
        .collect();
    let ctx =
        InitContext::new(!lists.is_empty(), subtask, 2, lists).with_identity(OperatorIdentity {
            job_name: "job".into(),
            uid: "out".into(),
        });
    sink.initialize_state(&ctx).unwrap();
}

fn snapshot(sink: &mut TwoPhaseCommit<u32, Recorder>, id: u64) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut ctx = SnapshotContext::new(id);
    sink.snapshot_state(&mut ctx).unwrap();
    ctx.lists
        .into_iter()
        .map(|(k, v)| (k, v.elements))
        .collect()
}

#[test]
fn pre_commits_on_snapshot_and_commits_on_completion() {
    let rec = Recorder::default();
    let mut s = TwoPhaseCommit::new(rec.clone());
    init(&mut s, 1, BTreeMap::new());
    assert!(rec.take().is_empty(), "only subtask 0 recovers");
    s.invoke(&mut vec![1, 2]).unwrap();
    s.invoke(&mut vec![3]).unwrap();
    snapshot(&mut s, 7);
    assert_eq!(rec.take(), ["begin", "pre_commit job~out~1-7 [1, 2, 3]"]);
    s.notify_checkpoint_complete(7).unwrap();
    assert_eq!(rec.take(), ["commit job~out~1-7"]);
    // Nothing written: no transaction, nothing to commit.
    snapshot(&mut s, 8);
    s.notify_checkpoint_complete(8).unwrap();
    assert!(rec.take().is_empty());
}

#[test]
fn an_aborted_checkpoint_commits_with_the_next_completed_one() {
    let rec = Recorder::default();
    let mut s = TwoPhaseCommit::new(rec.clone());
    init(&mut s, 0, BTreeMap::new());
    rec.take();
    s.invoke(&mut vec![1]).unwrap();
    snapshot(&mut s, 1);
    s.notify_checkpoint_aborted(1).unwrap();
    s.invoke(&mut vec![2]).unwrap();
    snapshot(&mut s, 2);
    s.invoke(&mut vec![3]).unwrap();
    snapshot(&mut s, 3);
    rec.take();
    s.notify_checkpoint_complete(2).unwrap();
    assert_eq!(rec.take(), ["commit job~out~0-1", "commit job~out~0-2"]);
    s.notify_checkpoint_complete(3).unwrap();
    assert_eq!(rec.take(), ["commit job~out~0-3"]);
}

#[test]
fn restore_hands_every_pending_handle_to_subtask_zero() {
    // Two old subtasks pre-committed for checkpoint 5; neither heard it complete.
    let mut lists: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for sub in 0..2 {
        let rec = Recorder::default();
        let mut s = TwoPhaseCommit::new(rec.clone());
        init(&mut s, sub, BTreeMap::new());
        s.invoke(&mut vec![sub]).unwrap();
        for (k, v) in snapshot(&mut s, 5) {
            lists.entry(k).or_default().extend(v);
        }
    }
    let rec = Recorder::default();
    let mut s1 = TwoPhaseCommit::new(rec.clone());
    init(&mut s1, 1, lists.clone());
    assert!(rec.take().is_empty());
    let mut s0 = TwoPhaseCommit::new(rec.clone());
    init(&mut s0, 0, lists);
    assert_eq!(
        rec.take(),
        [r#"recover job~out~ [("job~out~0-5", [0]), ("job~out~1-5", [1])]"#]
    );
}

#[test]
fn the_end_of_input_waits_for_the_final_checkpoint() {
    let rec = Recorder::default();
    let mut s = TwoPhaseCommit::new(rec.clone());
    init(&mut s, 0, BTreeMap::new());
    s.invoke(&mut vec![4]).unwrap();
    s.finish().unwrap();
    assert_eq!(rec.take(), ["recover job~out~ []", "begin"]);
    snapshot(&mut s, 9);
    s.notify_checkpoint_complete(9).unwrap();
    assert_eq!(
        rec.take(),
        ["pre_commit job~out~0-9 [4]", "commit job~out~0-9"]
    );
}

#[test]
fn a_torn_down_sink_aborts_its_open_transaction() {
    let rec = Recorder::default();
    let mut s = TwoPhaseCommit::new(rec.clone());
    init(&mut s, 0, BTreeMap::new());
    s.invoke(&mut vec![1, 2]).unwrap();
    rec.take();
    drop(s);
    assert_eq!(rec.take(), ["abort [1, 2]"]);
}
