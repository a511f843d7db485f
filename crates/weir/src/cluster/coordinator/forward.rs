//! The executor's controls for tasks on workers (issue 24): one thread per attempt reads
//! every task's control channel and sends what it asks for on the task's worker's control
//! stream. The executor addresses tasks; the protocol addresses workers — a Trigger,
//! Complete, Abort or Cancel reaches a worker once however many of its tasks the executor
//! sent it to, and the worker hands it to its own tasks as the executor would have
//! (`hosts::dedupe` is that rule, pure and unit-tested here).
//!
//! A Trigger also tells where the checkpoint's files go (a savepoint's folder, which the
//! executor created before it triggered): every other worker of the attempt gets it too,
//! as an announcement only ([`announce_to`]), since the barrier reaches their subtasks
//! through the exchange and their writers must know the folder before they write.

use std::collections::HashSet;
use std::sync::Arc;

use crossbeam_channel::{unbounded, Receiver, Select};

use super::pool::{send, ToWorkerTx};
use crate::checkpoint::barrier::BarrierKind;
use crate::checkpoint::storage::CheckpointStorage;
use crate::checkpoint::writer::Frozen;
use crate::cluster::proto::coordinator_message::Kind as ToWorker;
use crate::cluster::proto::{self, SnapshotKind};
use crate::error::{Error, Result};
use crate::runtime::coordinator::attempt::Attempt;
use crate::runtime::coordinator::hosts::{dedupe, Sent};
use crate::runtime::exchange::WorkerId;
use crate::runtime::fault::FailureInjector;
use crate::runtime::task::Control;
use crate::runtime::worker::Subtasks;

/// The workers of the attempt (`workers`, per task) that still have to hear of
/// checkpoint `id` only as an announcement, once the Trigger for a task went to one of
/// them (`seen` remembers what went): every worker hears of every checkpoint once, before
/// its writers may write a file of it.
fn announce_to(seen: &mut HashSet<(WorkerId, Sent)>, workers: &[WorkerId], id: u64) -> Vec<usize> {
    let mut to = Vec::new();
    for (i, &w) in workers.iter().enumerate() {
        let heard =
            seen.contains(&(w, Sent::Trigger(id))) || seen.contains(&(w, Sent::Announce(id)));
        if !heard {
            seen.insert((w, Sent::Announce(id)));
            to.push(i);
        }
    }
    to
}

/// The message for `control` in attempt `attempt`; a Trigger names `folder`, the
/// savepoint's folder its files go to (`None`: the job folder).
fn message(attempt: u64, control: Control, folder: Option<&std::path::Path>) -> ToWorker {
    match control {
        Control::Trigger(b) => ToWorker::Trigger(proto::Trigger {
            attempt,
            checkpoint_id: b.id,
            timestamp_ms: b.timestamp_ms,
            kind: match b.kind {
                BarrierKind::Checkpoint => SnapshotKind::Checkpoint,
                BarrierKind::Savepoint => SnapshotKind::Savepoint,
                BarrierKind::Stop { drain: false } => SnapshotKind::Stop,
                BarrierKind::Stop { drain: true } => SnapshotKind::StopAndDrain,
            } as i32,
            savepoint_folder: folder.map_or_else(String::new, |f| f.display().to_string()),
            only_announce: false,
        }),
        Control::Complete(id) => ToWorker::Complete(proto::Complete {
            attempt,
            checkpoint_id: id,
            arm_failure: false,
        }),
        Control::Aborted(id) => ToWorker::Abort(proto::Abort {
            attempt,
            checkpoint_id: id,
            cause: String::new(),
        }),
        Control::Cancel => ToWorker::Cancel(proto::Cancel {
            attempt,
            cause: "the coordinator cancelled the attempt".into(),
        }),
    }
}

/// Starts forwarding attempt `attempt`'s controls: task `i` of the plan runs on
/// `workers[i]`, reached by `to[i]` (its stream, its head's uid, its subtask). `storage`
/// is the executor's: it names the savepoint folders checkpoints are redirected to.
/// `injector`: the coordinator's, when a failure is planted in this attempt; a Complete
/// sent once it is armed arms the worker's too.
pub(crate) fn start(
    attempt: u32,
    to: Vec<(ToWorkerTx, String, u32)>,
    workers: &[WorkerId],
    storage: CheckpointStorage,
    injector: Option<Arc<FailureInjector>>,
) -> Result<Attempt> {
    let mut controls = Vec::with_capacity(to.len());
    let mut receivers: Vec<Receiver<Control>> = Vec::with_capacity(to.len());
    for _ in &to {
        let (tx, rx) = unbounded();
        controls.push(tx);
        receivers.push(rx);
    }
    let streams: Vec<ToWorkerTx> = to.iter().map(|(s, _, _)| s.clone()).collect();
    let workers = workers.to_vec();
    let handle = std::thread::Builder::new()
        .name(format!("weir-coordinator-attempt-{attempt}"))
        .spawn(move || {
            let armed = || injector.as_ref().is_some_and(|i| i.is_armed());
            forward(
                u64::from(attempt),
                &receivers,
                &streams,
                &workers,
                &storage,
                &armed,
            )
        })
        .map_err(|e| Error::Cluster(format!("cannot start the control forwarder: {e}")))?;
    // The worker that ran the task kept its snapshot (the Ack said `Frozen::OnWorker`).
    let write_frozen = Box::new(move |task: usize, id: u64, _kept: Frozen| {
        if let Some((stream, uid, subtask)) = to.get(task) {
            let m = proto::WriteFrozen {
                attempt: u64::from(attempt),
                checkpoint_id: id,
                task_uid: uid.clone(),
                subtask: *subtask,
            };
            send(stream, ToWorker::WriteFrozen(m));
        }
    });
    let tasks = controls.len();
    Ok(Attempt {
        subtasks: Subtasks {
            controls,
            sources: Vec::new(),
            handles: vec![handle],
            finished: vec![false; tasks],
        },
        write_frozen,
    })
}

/// Forwards until every control sender is gone (the executor dropped the attempt).
fn forward(
    attempt: u64,
    receivers: &[Receiver<Control>],
    streams: &[ToWorkerTx],
    workers: &[WorkerId],
    storage: &CheckpointStorage,
    armed: &dyn Fn() -> bool,
) {
    let mut seen = HashSet::new();
    let mut sel = Select::new();
    for r in receivers {
        sel.recv(r);
    }
    let mut open = receivers.len();
    while open > 0 {
        let op = sel.select();
        let i = op.index();
        match op.recv(&receivers[i]) {
            Ok(control) => {
                if !dedupe(&mut seen, workers[i], &control) {
                    continue;
                }
                let Control::Trigger(b) = control else {
                    let mut m = message(attempt, control, None);
                    if let ToWorker::Complete(c) = &mut m {
                        c.arm_failure = armed();
                    }
                    send(&streams[i], m);
                    continue;
                };
                // An absolute path: the workers run in folders of their own.
                let folder =
                    (storage.redirected(b.id)).map(|f| std::path::absolute(&f).unwrap_or(f));
                let trigger = message(attempt, control, folder.as_deref());
                for j in announce_to(&mut seen, workers, b.id) {
                    if let ToWorker::Trigger(t) = &trigger {
                        let only = proto::Trigger {
                            only_announce: true,
                            ..t.clone()
                        };
                        send(&streams[j], ToWorker::Trigger(only));
                    }
                }
                send(&streams[i], trigger);
            }
            Err(_) => {
                sel.remove(i);
                open -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::barrier::CheckpointBarrier;

    #[test]
    fn a_worker_hears_each_control_once_however_many_of_its_tasks_it_was_sent_to() {
        let mut seen = HashSet::new();
        let trigger = Control::Trigger(CheckpointBarrier::checkpoint(4, 0));
        // Two source tasks on worker 1, one on worker 2.
        assert!(dedupe(&mut seen, 1, &trigger));
        assert!(!dedupe(&mut seen, 1, &trigger));
        assert!(dedupe(&mut seen, 2, &trigger));
        // Another checkpoint, and other kinds for the same one, are new.
        let next = Control::Trigger(CheckpointBarrier::checkpoint(5, 0));
        assert!(dedupe(&mut seen, 1, &next));
        assert!(dedupe(&mut seen, 1, &Control::Complete(4)));
        assert!(!dedupe(&mut seen, 1, &Control::Complete(4)));
        assert!(dedupe(&mut seen, 1, &Control::Aborted(5)));
        assert!(dedupe(&mut seen, 1, &Control::Cancel));
        assert!(!dedupe(&mut seen, 1, &Control::Cancel));
    }

    #[test]
    fn every_worker_hears_of_a_checkpoint_once_the_others_as_an_announcement() {
        let mut seen = HashSet::new();
        // Tasks 0 and 1 on worker 1, task 2 on worker 2, task 3 on worker 3.
        let workers = [1, 1, 2, 3];
        let trigger = Control::Trigger(CheckpointBarrier::checkpoint(4, 0));
        assert!(dedupe(&mut seen, 1, &trigger));
        // Workers 2 and 3 hear of it once each (through one of their tasks).
        assert_eq!(announce_to(&mut seen, &workers, 4), vec![2, 3]);
        assert!(announce_to(&mut seen, &workers, 4).is_empty());
        // Worker 2's source is triggered after its announcement: it still gets the Trigger.
        assert!(dedupe(&mut seen, 2, &trigger));
        assert!(announce_to(&mut seen, &workers, 4).is_empty());
        // The next checkpoint is announced afresh.
        assert!(dedupe(
            &mut seen,
            3,
            &Control::Trigger(CheckpointBarrier::checkpoint(5, 0))
        ));
        assert_eq!(announce_to(&mut seen, &workers, 5), vec![0, 2]);
    }

    #[test]
    fn controls_become_the_protocols_messages() {
        let stop = CheckpointBarrier {
            id: 9,
            timestamp_ms: 77,
            kind: BarrierKind::Stop { drain: true },
        };
        let folder = std::path::Path::new("/sp/savepoint-j-9");
        let ToWorker::Trigger(t) = message(3, Control::Trigger(stop), Some(folder)) else {
            panic!("a trigger")
        };
        assert_eq!((t.attempt, t.checkpoint_id, t.timestamp_ms), (3, 9, 77));
        assert_eq!(t.kind, SnapshotKind::StopAndDrain as i32);
        assert_eq!(t.savepoint_folder, "/sp/savepoint-j-9");
        assert!(!t.only_announce);
        let ToWorker::Trigger(t) = message(3, Control::Trigger(stop), None) else {
            panic!("a trigger")
        };
        assert_eq!(t.savepoint_folder, "");
        assert!(matches!(
            message(3, Control::Aborted(9), None),
            ToWorker::Abort(proto::Abort {
                checkpoint_id: 9,
                ..
            })
        ));
    }
}
