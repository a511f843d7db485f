//! Unaligned checkpoints over a remote channel (issue 24): real exchanges on loopback, the
//! unaligned input loop on the receiving side. The announcement overtakes the records
//! queued on the exchange stream, the overtaken records become channel state, what the
//! task read ahead keeps its permits until processed (the remote channel's credit), and a
//! send out of permits gives its batch back once a barrier waits. Every wait is for a state,
//! never for a time.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::super::test_support::{context, LogChain};
use super::*;
use crate::checkpoint::writer::SnapshotPayload;
use crate::runtime::alignment::CheckpointingMode;
use crate::runtime::codec::TypeRegistry;
use crate::runtime::exchange::tests::{pair, wait_until};
use crate::runtime::exchange::ChannelBound;
use crate::runtime::remote::{Inlet, Outlet};

fn codec() -> Arc<dyn RecordCodec<u64>> {
    TypeRegistry::with_common_types().codec::<u64>().unwrap()
}

/// Batches of 100 records the sender queues before its snapshot.
const QUEUED: u64 = 5;
/// The channel's bound in batches (records: 100 per batch).
const BOUND: u32 = 8;

#[test]
fn an_announcement_overtakes_the_remote_queue_whose_records_become_channel_state_and_keep_their_permits(
) {
    let (a, b) = pair();
    let bound = ChannelBound {
        batches: BOUND,
        records: u64::from(BOUND) * 100,
    };
    let tx = a.output::<u64>(2, 7, codec());
    let input = b.input::<u64>(1, 7, bound, codec()).unwrap();
    let full = (i64::from(BOUND), i64::from(BOUND) * 100);
    wait_until("the channel opened", || tx.available() == full);
    // The upstream sent these before its snapshot, then announced and sent the marker.
    let barrier = CheckpointBarrier::checkpoint(1, 0);
    for i in 0..QUEUED {
        tx.send(Event::Batch((i * 100..i * 100 + 100).collect()))
            .unwrap();
    }
    tx.announcer().announce(barrier).unwrap();
    tx.send(Event::Barrier(barrier)).unwrap();
    wait_until("everything arrived", || {
        input.len() == QUEUED as usize + 1 && !input.lane().is_empty()
    });
    let taken = (full.0 - QUEUED as i64, full.1 - QUEUED as i64 * 100);
    assert_eq!(tx.available(), taken);

    // The task: its pushes held until the gate opens.
    let inlet = Inlet::from(input);
    let (data, remotes) = Remotes::split(vec![inlet]);
    let lane = remotes.lane(0).expect("a remote channel's own lane");
    let (ctx, control, jobs) = context(CheckpointingMode::ExactlyOnce);
    let log = Arc::new(Mutex::new(Vec::new()));
    let (gate_tx, gate) = crossbeam_channel::bounded::<()>(0);
    let chain = Box::new(LogChain {
        event_time: false,
        gate: Some(gate),
        ..LogChain::new(&log)
    });
    let inputs = UnalignedInputs {
        data,
        lanes: vec![lane],
        origins: vec![ChannelOrigin { edge: 0, sender: 0 }],
        codec: codec(),
        aligned_timeout: Duration::ZERO,
        uid: "head".into(),
        read_ahead_limit: 64,
        credits: Vec::new(),
        restored: Vec::new(),
        remotes,
    };
    let task = std::thread::spawn(move || run_input_unaligned(inputs, chain, ctx));

    // The snapshot is taken on the announcement and acknowledged with every queued record
    // as channel state, before any of them is processed.
    let job = jobs.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(job.checkpoint_id, 1);
    let SnapshotPayload::Captured(s) = &job.snapshot else {
        panic!("captured")
    };
    assert!(s.unaligned);
    let state: Vec<_> = (s.channel_state.iter())
        .map(|f| (f.channel, f.records()))
        .collect();
    assert_eq!(state, [(0, QUEUED * 100)]);
    assert_eq!(*log.lock().unwrap(), ["S1"], "the marker was overtaken");
    // Read ahead, the records keep their permits: only the batch the task took to process
    // (held at the gate) gave its permits back, so the sender cannot run further ahead.
    let one_back = (taken.0 + 1, taken.1 + 100);
    wait_until("the permits of the batch taken to process", || {
        tx.available() == one_back
    });
    // Every permit frame sent so far has arrived once a later priority frame from the same
    // worker did (an announcement on a channel from 2 to 1).
    let back = b.output::<u64>(1, 8, codec());
    let back_input = a.input::<u64>(2, 8, bound, codec()).unwrap();
    wait_until("the channel back opened", || back.available() == full);
    back.announcer()
        .announce(CheckpointBarrier::checkpoint(9, 0))
        .unwrap();
    wait_until("the announcement back", || !back_input.lane().is_empty());
    assert_eq!(tx.available(), one_back, "read-ahead holds its permits");

    // Processed, every permit is back.
    drop(gate_tx);
    wait_until("every record processed", || {
        log.lock().unwrap().len() == 1 + QUEUED as usize * 100
    });
    wait_until("every permit back", || tx.available() == full);
    let end = CheckpointBarrier::checkpoint(2, 0);
    tx.send(Event::EndOfInput).unwrap();
    tx.send(Event::Barrier(end)).unwrap();
    drop(tx);
    let job = jobs.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(job.checkpoint_id, 2);
    control.send(Control::Complete(2)).unwrap();
    task.join().unwrap().unwrap();
    let log = log.lock().unwrap().clone();
    let records: Vec<String> = (0..QUEUED * 100).map(|x| format!("R{x}")).collect();
    assert_eq!(log[1..=records.len()], records[..], "in order, once each");
    assert_eq!(log.last().map(String::as_str), Some("S2"));
}

#[test]
fn a_send_out_of_permits_gives_its_batch_back_once_a_barrier_waits_and_goes_out_before_it() {
    let (a, b) = pair();
    let bound = ChannelBound {
        batches: 1,
        records: 100,
    };
    let tx = a.output::<u64>(2, 3, codec());
    let input = b.input::<u64>(1, 3, bound, codec()).unwrap();
    wait_until("the channel opened", || tx.available() == (1, 100));
    let outlet = Arc::new(Outlet::Remote(tx));
    // The one batch permit goes to the first batch; the second waits for it.
    let first = outlet
        .send(Event::Batch(vec![1]), 1, false, None, false)
        .unwrap();
    assert!(first.is_none());
    let waits = Arc::new(AtomicBool::new(false));
    let (deferred_tx, deferred) = crossbeam_channel::bounded(1);
    let sender = {
        let (outlet, waits) = (outlet.clone(), waits.clone());
        std::thread::spawn(move || {
            // An input task's probe: a barrier waits once the test says so.
            let _w = crate::runtime::load::watch_for_barriers(Rc::new(move || {
                waits.load(Ordering::Relaxed)
            }));
            let kept = outlet
                .send(Event::Batch(vec![2]), 1, false, None, false)
                .unwrap();
            deferred_tx.send(kept.is_some()).unwrap();
            // The barrier's flush is never deferred: it waits for the permits.
            let flushed = kept.map(|e| outlet.send(e, 1, true, None, false).unwrap());
            let marker = outlet.send(
                Event::Barrier(CheckpointBarrier::checkpoint(1, 0)),
                0,
                true,
                None,
                false,
            );
            (flushed, marker.unwrap())
        })
    };
    let Outlet::Remote(r) = outlet.as_ref() else {
        unreachable!()
    };
    wait_until("the second send waits for permits", || r.waiting() == 1);
    waits.store(true, Ordering::Relaxed);
    assert!(
        deferred.recv_timeout(Duration::from_secs(60)).unwrap(),
        "given back while out of permits"
    );
    // Given back, it is sent ahead of the marker once the receiver consumes the first.
    wait_until("the first batch arrived", || input.len() == 1);
    assert!(matches!(input.try_recv().unwrap(), Some(Event::Batch(b)) if b == [1]));
    let (flushed, marker) = sender.join().unwrap();
    assert!(
        matches!(flushed, Some(None)),
        "deferred, then sent by the flush"
    );
    assert!(marker.is_none());
    assert!(matches!(input.recv().unwrap(), Event::Batch(b) if b == [2]));
    assert!(matches!(input.recv().unwrap(), Event::Barrier(m) if m.id == 1));
}
