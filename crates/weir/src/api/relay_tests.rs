//! The relay's rules, on a worker whose subtasks are stand-ins: channels the test reads
//! in place of task threads, events the test sends in place of tasks. Only the writers
//! are real (a frozen snapshot is written by them).

use crossbeam_channel::{unbounded, Receiver};

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::checkpoint::barrier::CheckpointBarrier;
use crate::checkpoint::storage::CheckpointStorage;
use crate::checkpoint::writer::{EncodedSnapshot, Frozen, TaskAck};
use crate::prelude::*;
use crate::runtime::graph::NodeKind;
use crate::runtime::state_backend::JobStateBackend;
use crate::runtime::task::{Control, TaskEvent, TaskMetrics};
use crate::runtime::worker::{Order, Relay, Report, Subtasks, WorkerTasks};

/// A worker of a job with two tasks (a source chain, a keyed chain), its events, and
/// stand-ins for attempt 3's subtasks: what their controls receive, per task.
struct Fixture {
    worker: WorkerTasks,
    events: Receiver<TaskEvent>,
    controls: Vec<Receiver<Control>>,
    source: usize,
    other: usize,
    _dir: tempfile::TempDir,
}

fn fixture() -> (Fixture, Relay) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = JobConfig::new("relay");
    cfg.checkpoint_dir = dir.path().join("chk");
    cfg.savepoint_dir = dir.path().join("sp");
    cfg.state_dir = dir.path().join("state");
    let env = StreamEnvironment::new(cfg);
    env.add_source("numbers", GeneratorSource::new(10))
        .uid("numbers")
        .key_by(|n: &u64| *n)
        .reduce(|a, b| a + b)
        .uid("sum")
        .add_sink("discard", DiscardSink)
        .uid("sink");
    let (graph, cfg) = env.into_parts();
    let plan = crate::runtime::plan::plan(&graph, &cfg).unwrap();
    assert_eq!(plan.tasks.len(), 2, "a source chain and a keyed chain");
    let is_source = |t: &crate::runtime::plan::TaskPlan| {
        matches!(graph.nodes[t.chain[0]].kind, NodeKind::Source(_))
    };
    let source = plan.tasks.iter().position(is_source).unwrap();
    let other = 1 - source;
    let storage = CheckpointStorage::open(&cfg.checkpoint_dir, &cfg.name).unwrap();
    let backend = JobStateBackend::new(cfg.state_backend, &cfg.state_dir, &cfg.name).unwrap();
    let (events_tx, events) = unbounded();
    let metrics = (0..2).map(|_| Arc::new(TaskMetrics::default())).collect();
    let worker = WorkerTasks::new(
        std::rc::Rc::new(graph),
        cfg,
        plan,
        storage,
        backend,
        events_tx,
        metrics,
        None,
    );
    let (controls, receivers): (Vec<_>, Vec<_>) = (0..2).map(|_| unbounded()).unzip();
    let subtasks = Subtasks {
        controls,
        sources: vec![source],
        handles: Vec::new(),
        finished: vec![false; 2],
    };
    let relay = worker.relay(3, subtasks, None, "worker 7".into());
    let f = Fixture {
        worker,
        events,
        controls: receivers,
        source,
        other,
        _dir: dir,
    };
    (f, relay)
}

fn drained(rx: &Receiver<Control>) -> Vec<Control> {
    rx.try_iter().collect()
}

fn trigger(id: u64) -> Order {
    Order::Trigger {
        barrier: CheckpointBarrier::checkpoint(id, 0),
        folder: None,
        only_announce: false,
    }
}

#[test]
fn a_trigger_reaches_the_running_sources_and_notifications_every_running_task() {
    let (f, mut relay) = fixture();
    assert!(relay.order(trigger(1)).is_none());
    let at_source = drained(&f.controls[f.source]);
    assert!(
        matches!(at_source[..], [Control::Trigger(b)] if b.id == 1),
        "{at_source:?}"
    );
    assert!(drained(&f.controls[f.other]).is_empty(), "not a source");
    assert!(
        f.worker.task_metrics[f.source]
            .barrier_requested
            .load(Ordering::Relaxed),
        "a source waiting for room stops waiting"
    );
    // Only announced: nothing reaches a task.
    let announce = Order::Trigger {
        barrier: CheckpointBarrier::checkpoint(2, 0),
        folder: None,
        only_announce: true,
    };
    assert!(relay.order(announce).is_none());
    assert!(drained(&f.controls[f.source]).is_empty());
    relay.order(Order::Complete {
        checkpoint: 1,
        arm_failure: false,
    });
    relay.order(Order::Abort(2));
    for c in &f.controls {
        let got = drained(c);
        assert!(
            matches!(got[..], [Control::Complete(1), Control::Aborted(2)]),
            "{got:?}"
        );
    }
    // An ended task hears nothing more, nor does an ended source get a barrier.
    let finished = relay.event(TaskEvent::Finished {
        attempt: 3,
        task: f.source,
    });
    assert!(matches!(finished, Some(Report::Finished { task }) if task == f.source));
    relay.order(trigger(4));
    relay.order(Order::Abort(4));
    assert!(drained(&f.controls[f.source]).is_empty());
    assert!(matches!(
        drained(&f.controls[f.other])[..],
        [Control::Aborted(4)]
    ));
}

#[test]
fn a_savepoint_folder_outside_the_savepoint_directory_declines_the_checkpoint() {
    let (f, mut relay) = fixture();
    let outside = f._dir.path().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let order = Order::Trigger {
        barrier: CheckpointBarrier::checkpoint(5, 0),
        folder: Some(outside.clone()),
        only_announce: true,
    };
    let Some(Report::Decline {
        checkpoint, cause, ..
    }) = relay.order(order)
    else {
        panic!("declined")
    };
    assert_eq!(checkpoint, 5);
    assert!(cause.starts_with("worker 7 cannot write into "), "{cause}");
    assert!(cause.contains(&outside.display().to_string()), "{cause}");
}

#[test]
fn a_frozen_snapshot_stays_on_the_worker_and_is_written_where_the_coordinator_says() {
    let (f, mut relay) = fixture();
    // Nothing kept yet: the checkpoint is declined, naming the worker and the task.
    let declined = relay.order(Order::WriteFrozen {
        task: f.source,
        checkpoint: 6,
    });
    let Some(Report::Decline {
        checkpoint: 6,
        task: Some(task),
        cause,
    }) = declined
    else {
        panic!("declined: {declined:?}")
    };
    assert_eq!(task, f.source);
    assert!(
        cause.starts_with("worker 7 holds no frozen snapshot of "),
        "{cause}"
    );
    // The task's ack carries its frozen snapshot: the report says only that it is kept.
    let ack = TaskAck {
        frozen: Some(Frozen::Here(Arc::new(EncodedSnapshot::empty()))),
        ..TaskAck::default()
    };
    let report = relay.event(TaskEvent::Ack {
        attempt: 3,
        task: f.source,
        checkpoint: 5,
        ack,
    });
    let Some(Report::Ack {
        checkpoint: 5, ack, ..
    }) = report
    else {
        panic!("an ack: {report:?}")
    };
    assert!(matches!(ack.frozen, Some(Frozen::OnWorker)));
    // The coordinator asks for it in checkpoint 6: the writers write it and acknowledge
    // for the task, in this attempt.
    (f.worker.storage)
        .announce(6, &f.worker.cfg.savepoint_dir, None)
        .unwrap();
    let ordered = relay.order(Order::WriteFrozen {
        task: f.source,
        checkpoint: 6,
    });
    assert!(ordered.is_none(), "{ordered:?}");
    let written = f.events.recv().unwrap();
    assert!(
        matches!(written, TaskEvent::Ack { attempt: 3, task, checkpoint: 6, .. } if task == f.source),
        "{written:?}"
    );
}

#[test]
fn only_this_attempts_events_are_reported_and_a_failure_ends_its_task() {
    let (f, mut relay) = fixture();
    let old = relay.event(TaskEvent::Finished {
        attempt: 2,
        task: f.other,
    });
    assert!(old.is_none(), "an earlier attempt's");
    let declined = relay.event(TaskEvent::Decline {
        attempt: 3,
        checkpoint: 8,
        reason: "disk full".into(),
    });
    assert!(matches!(
        declined,
        Some(Report::Decline { checkpoint: 8, task: None, ref cause }) if cause == "disk full"
    ));
    let ended = relay.event(TaskEvent::InputEnded {
        attempt: 3,
        task: f.source,
    });
    assert!(matches!(ended, Some(Report::InputEnded { task }) if task == f.source));
    let failed = relay.event(TaskEvent::Failed {
        attempt: 3,
        task: f.other,
        error: Error::Cancelled,
    });
    assert!(matches!(
        failed,
        Some(Report::Failed {
            error: Error::Cancelled,
            injected: false,
            ..
        })
    ));
    assert!(!relay.running()[f.other]);
    relay.order(Order::Abort(9));
    assert!(drained(&f.controls[f.other]).is_empty(), "ended");
    relay.cancel_and_join();
    assert!(matches!(
        drained(&f.controls[f.source])[..],
        [Control::Aborted(9), Control::Cancel]
    ));
}
