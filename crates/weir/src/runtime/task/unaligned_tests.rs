//! The unaligned input loop with real channels and a thread: the barrier overtakes queued
//! records, the acknowledgement does not wait for them to be processed, and exactly the
//! overtaken records become channel state.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::super::test_support::{context, LogChain};
use super::*;
use crate::checkpoint::writer::{SnapshotJob, SnapshotPayload};
use crate::runtime::alignment::CheckpointingMode;
use crate::runtime::codec::TypeRegistry;
use crate::runtime::unaligned::lane::{lane, LaneSender};

struct Harness {
    data: Vec<Sender<Event<u64>>>,
    lanes: Vec<LaneSender>,
    control: Sender<Control>,
    jobs: Receiver<SnapshotJob>,
    log: Arc<Mutex<Vec<String>>>,
    task: std::thread::JoinHandle<Result<()>>,
}

/// Starts an unaligned input task over `channels` channels of capacity 64, whose pushes
/// wait on `gate`, after `prefill` queued what the task finds when it starts.
fn start(
    channels: usize,
    gate: Receiver<()>,
    prefill: impl FnOnce(&[Sender<Event<u64>>], &[LaneSender]),
) -> Harness {
    start_restored(channels, gate, Vec::new(), prefill)
}

/// [`start`] for a task restored with the channel state `restored`.
fn start_restored(
    channels: usize,
    gate: Receiver<()>,
    restored: Vec<ChannelStateFile>,
    prefill: impl FnOnce(&[Sender<Event<u64>>], &[LaneSender]),
) -> Harness {
    let (mut data, mut rxs, mut lanes, mut lane_rxs) = (vec![], vec![], vec![], vec![]);
    for _ in 0..channels {
        let (tx, rx) = crossbeam_channel::bounded(64);
        let (ltx, lrx) = lane();
        data.push(tx);
        rxs.push(rx);
        lanes.push(ltx);
        lane_rxs.push(lrx);
    }
    let (ctx, ctl_tx, jobs) = context(CheckpointingMode::ExactlyOnce);
    let log = Arc::new(Mutex::new(Vec::new()));
    let inputs = UnalignedInputs {
        data: rxs,
        lanes: lane_rxs,
        origins: (0..channels as u32)
            .map(|c| ChannelOrigin { edge: 0, sender: c })
            .collect(),
        codec: TypeRegistry::with_common_types().codec::<u64>().unwrap(),
        aligned_timeout: Duration::ZERO,
        uid: "head".into(),
        read_ahead_limit: 64,
        credits: Vec::new(),
        restored,
        remotes: crate::runtime::remote::Remotes::none(),
    };
    // Logs records and snapshots only, each push held by the gate.
    let chain = Box::new(LogChain {
        event_time: false,
        gate: Some(gate),
        ..LogChain::new(&log)
    });
    prefill(&data, &lanes);
    let task = std::thread::spawn(move || run_input_unaligned(inputs, chain, ctx));
    Harness {
        data,
        lanes,
        control: ctl_tx,
        jobs,
        log,
        task,
    }
}

impl Harness {
    /// Ends both inputs with the final checkpoint `id` and waits for the task to exit.
    /// Waits (at most 10 s) until the chain logged `n` entries.
    fn wait_for_log(&self, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.log.lock().unwrap().len() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "the task logged {:?}, not {n} entries",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits (at most 10 s) until the task took everything sent on `tx`: it handles what
    /// it took before anything sent after this returns.
    fn wait_until_taken<T>(&self, tx: &Sender<T>) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !tx.is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the task never took it"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn finish(self, id: u64) -> Vec<String> {
        let b = CheckpointBarrier::checkpoint(id, 0);
        for tx in &self.data {
            tx.send(Event::EndOfInput).unwrap();
            tx.send(Event::Barrier(b)).unwrap();
        }
        drop(self.data);
        drop(self.lanes);
        let job = self.jobs.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(job.checkpoint_id, id);
        self.control.send(Control::Complete(id)).unwrap();
        self.task.join().unwrap().unwrap();
        let log = self.log.lock().unwrap().clone();
        log
    }
}

/// Queues what the upstreams sent before their snapshots, 10 batches of 100 records on
/// channel 0 and 2 on channel 1, then announces and sends the barrier `b` on both.
fn queue_then_barrier(data: &[Sender<Event<u64>>], lanes: &[LaneSender], b: CheckpointBarrier) {
    for (c, batches) in [(0u64, 10u64), (1, 2)] {
        for i in 0..batches {
            let first = c * 10_000 + i * 100;
            data[c as usize]
                .send(Event::Batch((first..first + 100).collect()))
                .unwrap();
        }
    }
    for (lane, tx) in lanes.iter().zip(data) {
        lane.send(b).unwrap();
        tx.send(Event::Barrier(b)).unwrap();
    }
}

fn channel_state(job: &SnapshotJob) -> Vec<(u32, u64)> {
    let SnapshotPayload::Captured(s) = &job.snapshot else {
        panic!("captured")
    };
    assert!(s.unaligned);
    s.channel_state
        .iter()
        .map(|f| (f.channel, f.records()))
        .collect()
}

#[test]
fn the_acknowledgement_does_not_wait_for_the_queued_records_to_be_processed() {
    let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
    let b = CheckpointBarrier::checkpoint(1, 0);
    let h = start(2, gate, |data, lanes| queue_then_barrier(data, lanes, b));
    // The processing is held at its first record; the snapshot must still be submitted,
    // with every queued record as channel state.
    let job = h.jobs.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(job.checkpoint_id, 1);
    assert_eq!(channel_state(&job), [(0, 1000), (1, 200)]);
    assert_eq!(
        *h.log.lock().unwrap(),
        ["S1"],
        "nothing processed before the snapshot"
    );
    drop(gate_tx);
    let log = h.finish(2);
    assert_eq!(log[0], "S1");
    assert_eq!(
        log.len(),
        1 + 1200 + 1,
        "every record processed once, then S2"
    );
    assert_eq!(log.last().map(String::as_str), Some("S2"));
}

#[test]
fn records_read_before_an_unannounced_marker_are_processed_and_recorded() {
    let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
    drop(gate_tx); // never held
    let h = start(2, gate, |_, _| {});
    let b = CheckpointBarrier::checkpoint(1, 0);
    // Channel 1's marker arrives in-band, unannounced: the snapshot is taken at once.
    h.data[1].send(Event::Batch(vec![100])).unwrap();
    h.data[1].send(Event::Barrier(b)).unwrap();
    h.wait_for_log(2);
    assert_eq!(*h.log.lock().unwrap(), ["R100", "S1"]);
    assert!(
        h.jobs.try_recv().is_err(),
        "channel 0 still owes its marker"
    );
    // Channel 0 sent these before its upstream's snapshot: channel state of checkpoint 1.
    h.data[0].send(Event::Batch(vec![1, 2])).unwrap();
    h.data[0].send(Event::Barrier(b)).unwrap();
    let job = h.jobs.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(channel_state(&job), [(0, 2)]);
    // Records after the marker are no channel state.
    h.data[0].send(Event::Batch(vec![3])).unwrap();
    let log = h.finish(2);
    assert_eq!(log, ["R100", "S1", "R1", "R2", "R3", "S2"]);
}

#[test]
fn a_coordinator_abort_drops_the_channel_state_and_the_next_checkpoint_completes() {
    let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
    drop(gate_tx);
    let h = start(2, gate, |_, _| {});
    let b1 = CheckpointBarrier::checkpoint(1, 0);
    // Each step once the task handled the one before, not after a sleep it may outlast.
    h.lanes[0].send(b1).unwrap();
    h.wait_for_log(1);
    h.data[1].send(Event::Batch(vec![7])).unwrap();
    h.wait_for_log(2);
    h.control.send(Control::Aborted(1)).unwrap();
    h.wait_until_taken(&h.control);
    // Late markers of the aborted checkpoint are stale.
    h.data[0].send(Event::Barrier(b1)).unwrap();
    h.data[1].send(Event::Barrier(b1)).unwrap();
    let b2 = CheckpointBarrier::checkpoint(2, 0);
    h.data[0].send(Event::Barrier(b2)).unwrap();
    h.data[1].send(Event::Barrier(b2)).unwrap();
    let job = h.jobs.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        job.checkpoint_id, 2,
        "nothing submitted for the aborted checkpoint"
    );
    let log = h.finish(3);
    assert_eq!(log, ["S1", "R7", "S2", "S3"]);
}

#[test]
fn records_read_ahead_for_one_checkpoint_and_not_yet_processed_are_channel_state_of_the_next() {
    let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
    let b1 = CheckpointBarrier::checkpoint(1, 0);
    let h = start(2, gate, |data, lanes| queue_then_barrier(data, lanes, b1));
    let job = h.jobs.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(channel_state(&job), [(0, 1000), (1, 200)]);
    // Checkpoint 2 comes (no new records) while at most one batch may be processed: the
    // barrier is queued before the gate lets one push through. Whether that push ran
    // before the task saw the barrier depends on the threads' timing (the task may not
    // have reached the push yet), never on a deadline: either way, the read-ahead records
    // not yet processed are checkpoint 2's channel state, and nothing is lost or doubled.
    let b2 = CheckpointBarrier::checkpoint(2, 0);
    for (lane, tx) in h.lanes.iter().zip(&h.data) {
        lane.send(b2).unwrap();
        tx.send(Event::Barrier(b2)).unwrap();
    }
    gate_tx.send(()).unwrap();
    let job = h.jobs.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(job.checkpoint_id, 2);
    let state = channel_state(&job);
    drop(gate_tx);
    let log = h.finish(3);
    assert_eq!(
        log.len(),
        1200 + 3,
        "every record processed once, and S1–S3"
    );
    let s2 = log.iter().position(|l| l == "S2").expect("S2 logged");
    let processed = s2 - 1; // S1 comes first
    assert!(
        processed == 0 || processed == 100,
        "at most the one batch the gate let through: {processed}"
    );
    assert_eq!(state, [(0, 1000 - processed as u64), (1, 200)]);
}

/// Restored channel state of channel `c` (sender `c`): `records` in one batch.
fn restored_file(c: u32, records: std::ops::Range<u64>) -> ChannelStateFile {
    let records: Vec<u64> = records.collect();
    let mut data = Vec::new();
    let codec = TypeRegistry::with_common_types().codec::<u64>().unwrap();
    codec.encode(&records, &mut data).unwrap();
    let batch = crate::checkpoint::layout::ChannelBatch {
        records: records.len() as u32,
        timestamped: false,
        timestamps: Vec::new(),
        data,
    };
    ChannelStateFile {
        subtask: 0,
        channel: c,
        edge: 0,
        sender: c,
        batches: vec![batch],
        schema: None,
    }
}

#[test]
fn a_checkpoint_during_the_replay_completes_with_the_rest_of_the_replay_as_channel_state() {
    let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
    let restored = vec![restored_file(0, 0..1000), restored_file(1, 10_000..10_200)];
    let h = start_restored(2, gate, restored, |data, _| {
        // New input on channel 0, sent after the restored records.
        data[0].send(Event::Batch(vec![5000])).unwrap();
    });
    // Two chunks of the replay are processed (256 records each, from channel 0's batch);
    // the barrier is announced while the third is not handed out yet or waits at the
    // gate (which of the two is the threads' race), and the loop looks at its lanes
    // before each chunk: the snapshot comes after two or three chunks, never after all.
    for _ in 0..2 {
        gate_tx.send(()).unwrap();
    }
    let b = CheckpointBarrier::checkpoint(1, 0);
    for (lane, tx) in h.lanes.iter().zip(&h.data) {
        lane.send(b).unwrap();
        tx.send(Event::Barrier(b)).unwrap();
    }
    gate_tx.send(()).unwrap();
    // Completed while the replay goes on: what was not replayed is channel state, with
    // the record read ahead behind it on channel 0.
    let job = h.jobs.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(job.checkpoint_id, 1);
    let state = channel_state(&job);
    let replayed = 1000 + 1 - state[0].1;
    assert!(
        replayed == 2 * 256 || replayed == 3 * 256,
        "{state:?}: the snapshot came after two or three chunks"
    );
    assert_eq!(state[1], (1, 200));
    let SnapshotPayload::Captured(s) = &job.snapshot else {
        panic!("captured")
    };
    let mut recorded = Vec::new();
    let codec = TypeRegistry::with_common_types().codec::<u64>().unwrap();
    for b in &s.channel_state[0].batches {
        codec
            .decode(&b.data, b.records as usize, "test", &mut recorded)
            .unwrap();
    }
    let want: Vec<u64> = (replayed..1000).chain([5000]).collect();
    assert_eq!(
        recorded, want,
        "the rest of the replay, then what was read ahead"
    );
    drop(gate_tx);
    let log = h.finish(2);
    // Processed once each, in each channel's order: the replay, then the new input.
    let s1 = log.iter().position(|l| l == "S1").unwrap();
    assert_eq!(
        s1 as u64, replayed,
        "the snapshot came after the chunks it did not record"
    );
    let records = |from: &[String], pick: &dyn Fn(u64) -> bool| -> Vec<u64> {
        from.iter()
            .filter_map(|l| l.strip_prefix('R')?.parse().ok())
            .filter(|x| pick(*x))
            .collect()
    };
    let all: Vec<u64> = (0..1000).chain([5000]).collect();
    assert_eq!(records(&log, &|x| x < 10_000 || x == 5000), all);
    assert_eq!(
        records(&log, &|x| x >= 10_000),
        (10_000..10_200).collect::<Vec<_>>()
    );
    assert_eq!(log.len(), 1 + 1200 + 1 + 1);
    assert_eq!(log.last().map(String::as_str), Some("S2"));
}
