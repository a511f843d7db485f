//! Input-task tests with real channels and threads: alignment modes and the watermark minimum.

use super::*;
use crate::error::Result;
use crate::runtime::alignment::CheckpointingMode;
use crate::runtime::event::{CheckpointBarrier, Event};
use crate::runtime::output::Output;
use crate::runtime::watermark::MAX_WATERMARK;
use crossbeam_channel::Sender;

use super::test_support::{context, LogChain};
use std::sync::Mutex;

/// Channel 0 delivers its barrier and then post-barrier records *before* channel 1
/// delivers anything; returns the order in which the chain saw records and snapshot.
fn run_two_inputs(mode: CheckpointingMode) -> Vec<String> {
    let (tx0, rx0) = crossbeam_channel::unbounded();
    let (tx1, rx1) = crossbeam_channel::unbounded();
    let (ctx, ctl_tx, writer_rx) = context(mode);
    let log = Arc::new(Mutex::new(Vec::new()));
    let b = CheckpointBarrier::checkpoint(1, 0);
    tx0.send(Event::Batch(vec![1])).unwrap();
    tx0.send(Event::Barrier(b)).unwrap();
    tx0.send(Event::Batch(vec![2, 3])).unwrap();
    tx0.send(Event::EndOfInput).unwrap();
    drop(tx0);
    let chain = Box::new(LogChain::new(&log));
    let probe0 = rx0.clone();
    let task = std::thread::spawn(move || run_input(vec![rx0, rx1], chain, ctx));
    // Channel 1 speaks once the task has read channel 0 as far as it is allowed to: up to
    // its barrier when aligned, to its end otherwise. The task handles what it took before
    // it looks at channel 1 again, so the order below does not depend on timing.
    let allowed_left = match mode {
        CheckpointingMode::ExactlyOnce => 2,
        CheckpointingMode::AtLeastOnce => 0,
    };
    wait_until_taken(&probe0, allowed_left);
    tx1.send(Event::Batch(vec![10])).unwrap();
    tx1.send(Event::Barrier(b)).unwrap();
    tx1.send(Event::EndOfInput).unwrap();
    // The final checkpoint: after end-of-input, then its completion lets the task exit.
    tx1.send(Event::Barrier(CheckpointBarrier::checkpoint(2, 0)))
        .unwrap();
    drop(tx1);
    // Both snapshots reach the writer before checkpoint 2 is completed: a completion the
    // task receives before it took the snapshot it confirms would be one it never waits
    // for again (on a loaded machine the task can be that far behind).
    let frozen: Vec<bool> = (0..2)
        .map(|_| {
            writer_rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the task submits checkpoints 1 and 2")
                .frozen
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !task.is_finished(),
        "waits for the final checkpoint to complete"
    );
    ctl_tx.send(Control::Complete(2)).unwrap();
    task.join().unwrap().unwrap();
    assert!(
        writer_rx.try_recv().is_err(),
        "no snapshot after the final one"
    );
    assert_eq!(
        frozen,
        [false, true],
        "checkpoint 1 live, the final one frozen"
    );
    let mut log = log.lock().unwrap().clone();
    assert_eq!(log.pop().as_deref(), Some("S2"));
    log
}

/// Waits (at most 10 s) until the task took all but `left` events of the channel `probe`
/// reads: what it took is handled before anything sent after this returns.
fn wait_until_taken<T>(probe: &crossbeam_channel::Receiver<T>, left: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while probe.len() > left {
        assert!(
            std::time::Instant::now() < deadline,
            "the task never took its input: {} events left",
            probe.len()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Watermarks and idleness on two channels: the chain sees the minimum over the active
/// channels, rising only, after the records sent before it.
#[test]
fn the_task_watermark_is_the_minimum_over_active_inputs() {
    use crate::runtime::watermark::WatermarkStatus::{Active, Idle};
    let (tx0, rx0) = crossbeam_channel::unbounded();
    let (tx1, rx1) = crossbeam_channel::unbounded();
    let (ctx, ctl_tx, writer_rx) = context(CheckpointingMode::ExactlyOnce);
    let log = Arc::new(Mutex::new(Vec::new()));
    let chain = Box::new(LogChain::new(&log));
    let (probe0, probe1) = (rx0.clone(), rx1.clone());
    let task = std::thread::spawn(move || run_input(vec![rx0, rx1], chain, ctx));
    // Each event is sent once the task took the one before (whichever channel): the
    // sequence the task sees is this one however slow it is.
    let step = |tx: &Sender<Event<u32>>, e: Event<u32>| {
        tx.send(e).unwrap();
        wait_until_taken(&probe0, 0);
        wait_until_taken(&probe1, 0);
    };
    step(&tx0, Event::TimestampedBatch(vec![1], vec![10]));
    step(&tx0, Event::Watermark(10));
    step(&tx1, Event::Watermark(5));
    step(&tx1, Event::Watermark(30));
    step(&tx0, Event::Watermark(8));
    step(&tx0, Event::WatermarkStatus(Idle));
    step(&tx1, Event::Watermark(40));
    step(&tx1, Event::WatermarkStatus(Idle));
    step(&tx1, Event::WatermarkStatus(Active));
    step(&tx1, Event::Watermark(MAX_WATERMARK));
    step(&tx0, Event::WatermarkStatus(Active));
    step(&tx0, Event::Watermark(MAX_WATERMARK));
    for tx in [&tx0, &tx1] {
        tx.send(Event::EndOfInput).unwrap();
    }
    tx0.send(Event::Barrier(CheckpointBarrier::checkpoint(1, 0)))
        .unwrap();
    tx1.send(Event::Barrier(CheckpointBarrier::checkpoint(1, 0)))
        .unwrap();
    drop((tx0, tx1));
    // Completed only once the task took its snapshot: a completion that arrives before it
    // is one the task would never wait for again.
    writer_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the task submits checkpoint 1");
    ctl_tx.send(Control::Complete(1)).unwrap();
    task.join().unwrap().unwrap();
    let log = log.lock().unwrap().clone();
    let max = format!("W{MAX_WATERMARK}");
    assert_eq!(
        log,
        [
            "R1@10", "W5", "W10", // channel 0 holds it at 10 until it goes idle
            "W30", "W40", "Idle", "Active", &max, "S1"
        ]
    );
}

#[test]
fn aligned_mode_holds_back_records_behind_a_barrier_until_the_snapshot() {
    let log = run_two_inputs(CheckpointingMode::ExactlyOnce);
    let snap = log.iter().position(|e| e == "S1").unwrap();
    // Records 2 and 3 arrived on channel 0 after its barrier: not in checkpoint 1.
    assert_eq!(&log[..snap], &["R1", "R10"]);
    assert_eq!(&log[snap + 1..], &["R2", "R3"]);
}

#[test]
fn at_least_once_processes_records_behind_a_barrier_before_the_snapshot() {
    let log = run_two_inputs(CheckpointingMode::AtLeastOnce);
    let snap = log.iter().position(|e| e == "S1").unwrap();
    // Records 2 and 3 overtook channel 1's barrier: they are inside checkpoint 1.
    assert_eq!(&log[..snap], &["R1", "R2", "R3", "R10"]);
}

/// A source that counts its polls and emits one record per poll.
#[derive(Clone)]
struct CountingSource(Arc<std::sync::atomic::AtomicU64>);

impl crate::runtime::functions::CheckpointedFunction for CountingSource {}

impl crate::runtime::functions::SourceFunction<u32> for CountingSource {
    fn poll(
        &mut self,
        out: &mut Vec<u32>,
        _max: usize,
    ) -> Result<crate::runtime::functions::SourceStatus> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        out.push(1);
        Ok(crate::runtime::functions::SourceStatus::More)
    }
}

/// A source polls only while its chain has room under the consumers' credit (unaligned
/// jobs): a batch produced without room would be pushed past the credit by the next
/// barrier's flush. Checkpoint triggers are still served while it waits.
#[test]
fn a_source_polls_only_while_its_chain_has_room() {
    source_polls_only_with_room(false);
}

/// A source polls at most what its chain's writer asks for ([`Output::batch_hint`]: one
/// debloated batch per channel), through a chained operator too, so a barrier is not held
/// behind a full-size poll; without debloating, a full batch.
#[test]
fn a_source_polls_what_the_end_of_its_chain_hints() {
    #[derive(Clone)]
    struct MaxSource(Arc<Mutex<Vec<usize>>>);
    impl crate::runtime::functions::CheckpointedFunction for MaxSource {}
    impl crate::runtime::functions::SourceFunction<u32> for MaxSource {
        fn poll(
            &mut self,
            out: &mut Vec<u32>,
            max: usize,
        ) -> Result<crate::runtime::functions::SourceStatus> {
            let mut seen = self.0.lock().unwrap();
            seen.push(max);
            out.push(1);
            Ok(match seen.len() {
                3.. => crate::runtime::functions::SourceStatus::Finished,
                _ => crate::runtime::functions::SourceStatus::More,
            })
        }
    }
    for (hint, want) in [(Some(37), 37), (None, crate::runtime::BATCH_SIZE)] {
        let (ctx, ctl_tx, _writer_rx) = context(CheckpointingMode::ExactlyOnce);
        let log = Arc::new(Mutex::new(Vec::new()));
        let end = Box::new(LogChain {
            hint,
            ..LogChain::new(&log)
        });
        let chain: Box<dyn Output<u32>> = Box::new(crate::runtime::operators::MapOp {
            f: |x: u32| x + 1,
            out: Vec::new(),
            next: end,
        });
        let maxes = Arc::new(Mutex::new(Vec::new()));
        let source = MaxSource(maxes.clone());
        let task = std::thread::spawn(move || run_source(source, "src".into(), chain, ctx));
        let start = std::time::Instant::now();
        while maxes.lock().unwrap().len() < 3 {
            assert!(start.elapsed() < Duration::from_secs(10), "it polls");
            std::thread::sleep(Duration::from_millis(1));
        }
        ctl_tx.send(Control::Cancel).unwrap();
        let _ = task.join().unwrap();
        assert_eq!(*maxes.lock().unwrap(), vec![want; 3]);
    }
}

/// The same through an operator chained after the source: the room is the writer's at
/// the chain's end, which every chained operator forwards.
#[test]
fn a_source_polls_only_while_the_end_of_its_chain_has_room() {
    source_polls_only_with_room(true);
}

fn source_polls_only_with_room(chained: bool) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (ctx, ctl_tx, writer_rx) = context(CheckpointingMode::ExactlyOnce);
    let (polls, room) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let log = Arc::new(Mutex::new(Vec::new()));
    let gate = Box::new(LogChain {
        room: Some(room.clone()),
        ..LogChain::new(&log)
    });
    let chain: Box<dyn Output<u32>> = if chained {
        Box::new(crate::runtime::operators::MapOp {
            f: |x: u32| x + 1,
            out: Vec::new(),
            next: gate,
        })
    } else {
        gate
    };
    let source = CountingSource(polls.clone());
    let task = std::thread::spawn(move || run_source(source, "src".into(), chain, ctx));
    ctl_tx
        .send(Control::Trigger(CheckpointBarrier::checkpoint(1, 0)))
        .unwrap();
    let job = writer_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        job.checkpoint_id, 1,
        "the trigger is served while waiting for room"
    );
    // The task has been running its loop (it served the trigger), without room all along.
    assert_eq!(polls.load(Ordering::Relaxed), 0, "no room: no poll");
    room.store(true, Ordering::Relaxed);
    let start = std::time::Instant::now();
    while polls.load(Ordering::Relaxed) == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "room: it polls");
        std::thread::sleep(Duration::from_millis(1));
    }
    ctl_tx.send(Control::Cancel).unwrap();
    assert!(matches!(task.join().unwrap(), Err(Error::Cancelled)));
    // The records polled once there was room are logged too; the one snapshot is the
    // trigger's, served while there was none.
    let snapshots: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| !l.starts_with('R'))
        .cloned()
        .collect();
    assert_eq!(snapshots, ["S1"]);
}
