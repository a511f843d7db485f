//! Unit tests of the network writers ([`super`]): routing, batching, barriers after
//! the records sent before them, and room under the consumers' credit.

use super::*;
use crate::state::key_group::key_group;

fn drain<T>(r: &crossbeam_channel::Receiver<Event<T>>) -> Vec<Event<T>> {
    r.try_iter().collect()
}

#[test]
fn barrier_follows_every_record_sent_before_it() {
    let (tx0, rx0) = crossbeam_channel::unbounded();
    let (tx1, rx1) = crossbeam_channel::unbounded();
    let mut w = RoutedWriter::new(vec![tx0, tx1], KeyGroupRouter::new(|x: &u64| *x, 128, 2));
    let mut batch: Vec<u64> = (0..10).collect();
    w.push(&mut batch).unwrap();
    assert!(batch.is_empty());
    let b = CheckpointBarrier::checkpoint(1, 0);
    w.snapshot(b, &mut TaskSnapshot::new()).unwrap();
    let mut seen = Vec::new();
    for (i, rx) in [rx0, rx1].iter().enumerate() {
        let events = drain(rx);
        assert!(matches!(events.last(), Some(Event::Barrier(x)) if x.id == 1));
        for e in &events[..events.len() - 1] {
            let Event::Batch(v) = e else { panic!() };
            for x in v {
                let g = key_group(x, 128);
                assert_eq!(operator_index(g, 128, 2) as usize, i);
                seen.push(*x);
            }
        }
    }
    seen.sort();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
}

#[test]
fn batches_are_sent_when_full() {
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut w = RoutedWriter::new(vec![tx], Rebalance::new(0));
    for i in 0..BATCH_SIZE as u64 + 5 {
        w.push(&mut vec![i]).unwrap();
    }
    let events = drain(&rx);
    assert_eq!(events.len(), 1);
    w.end_of_input().unwrap();
    let events = drain(&rx);
    assert!(matches!(&events[..], [Event::Batch(v), Event::EndOfInput] if v.len() == 5));
}

#[test]
fn timestamps_travel_beside_their_records_and_batches_never_mix_kinds() {
    let (tx0, rx0) = crossbeam_channel::unbounded();
    let (tx1, rx1) = crossbeam_channel::unbounded();
    let mut w = RoutedWriter::new(vec![tx0, tx1], KeyGroupRouter::new(|x: &u64| *x, 128, 2));
    w.push(&mut vec![1, 2, 3]).unwrap();
    // Switching to timestamped records sends the open untimestamped batches first.
    w.push_timestamped(&mut (0..10).collect(), &mut (100..110).collect())
        .unwrap();
    w.on_watermark(42).unwrap();
    w.push(&mut vec![4]).unwrap();
    w.end_of_input().unwrap();
    let mut stamped = Vec::new();
    for rx in [rx0, rx1] {
        let events = drain(&rx);
        // Untimestamped, then timestamped, then the watermark (after a flush), then more.
        let kinds: Vec<&str> = events
            .iter()
            .map(|e| match e {
                Event::Batch(_) => "B",
                Event::TimestampedBatch(..) => "T",
                Event::Watermark(42) => "W",
                Event::EndOfInput => "E",
                _ => "?",
            })
            .collect();
        let w_at = kinds.iter().position(|k| *k == "W").unwrap();
        assert!(
            kinds[..w_at].iter().all(|k| *k == "B" || *k == "T"),
            "{kinds:?}"
        );
        let first_t = kinds.iter().position(|k| *k == "T");
        if let Some(t) = first_t {
            assert!(!kinds[t..w_at].contains(&"B"), "{kinds:?}");
        }
        assert_eq!(kinds.last(), Some(&"E"));
        for e in events {
            if let Event::TimestampedBatch(v, ts) = e {
                assert_eq!(v.len(), ts.len());
                stamped.extend(v.into_iter().zip(ts));
            }
        }
    }
    stamped.sort();
    assert_eq!(stamped, (0..10).map(|i| (i, 100 + i)).collect::<Vec<_>>());
}

#[test]
fn room_counts_what_is_queued_and_read_ahead_against_the_capacity() {
    let (tx0, rx0) = crossbeam_channel::bounded(2);
    let (tx1, _rx1) = crossbeam_channel::bounded(2);
    let mut w = RoutedWriter::new(vec![tx0, tx1], Rebalance::new(0));
    assert!(w.has_room(), "without credits (not unaligned): always");
    let credits = vec![Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
    w.set_read_ahead_credits(credits.clone());
    assert!(w.has_room());
    w.push(&mut vec![1u32]).unwrap();
    w.flush().unwrap(); // one event queued on one channel: 1 + 0 < 2
    assert!(w.has_room());
    credits[0].store(1, std::sync::atomic::Ordering::Relaxed);
    credits[1].store(1, std::sync::atomic::Ordering::Relaxed);
    assert!(
        !w.has_room(),
        "a channel with 1 queued + 1 read ahead is full"
    );
    let _ = drain(&rx0);
    credits[0].store(0, std::sync::atomic::Ordering::Relaxed);
    credits[1].store(0, std::sync::atomic::Ordering::Relaxed);
    assert!(w.has_room());
}

#[test]
fn a_full_channel_is_watched_and_wakes_a_select_when_its_consumer_takes_an_event() {
    use crossbeam_channel::Select;
    use std::sync::atomic::Ordering::Relaxed;
    let (tx, rx) = crossbeam_channel::bounded(1);
    let mut w = RoutedWriter::new(vec![tx], Rebalance::new(0));
    let credit = Arc::new(AtomicUsize::new(0));
    w.set_read_ahead_credits(vec![credit.clone()]);
    w.push(&mut vec![1u32]).unwrap();
    w.flush().unwrap();
    assert!(!w.has_room());
    let taken = {
        let mut sel = Select::new();
        assert!(w.watch_room(&mut sel), "a full channel can wake a select");
        assert!(sel.try_ready().is_err(), "no room yet");
        // The consumer takes the event while the select waits: it wakes (the bound
        // is for a broken wake-up only; the take comes at once).
        let consumer = std::thread::spawn(move || {
            let taken = rx.recv().unwrap();
            (rx, taken)
        });
        assert_eq!(sel.ready_timeout(std::time::Duration::from_secs(60)), Ok(0));
        consumer.join().unwrap()
    };
    assert!(w.has_room());
    let mut sel = Select::new();
    assert!(w.watch_room(&mut sel), "room: nothing to watch");
    assert!(sel.try_ready().is_err(), "and nothing registered");
    // Short of room only by credit (the event was read ahead, not processed): no send
    // can wake a select for it, so it is not watched and the caller polls.
    w.push(&mut vec![2u32]).unwrap();
    w.flush().unwrap();
    let _ = taken.0.try_recv().unwrap();
    credit.store(1, Relaxed);
    assert!(!w.has_room());
    let mut sel = Select::new();
    assert!(
        !w.watch_room(&mut sel),
        "short only of credit: not watchable"
    );
}

#[test]
fn broadcast_reaches_everyone() {
    let (tx0, rx0) = crossbeam_channel::unbounded();
    let (tx1, rx1) = crossbeam_channel::unbounded();
    let mut w = BroadcastWriter::new(vec![tx0, tx1]);
    w.push(&mut vec![1u8, 2]).unwrap();
    w.flush().unwrap();
    for rx in [rx0, rx1] {
        assert!(matches!(&drain(&rx)[..], [Event::Batch(v)] if v == &vec![1, 2]));
    }
}

/// Buffer debloating: batches to a consumer that is behind are cut smaller (here a forward
/// channel of capacity 1 whose consumer takes a batch every 20 ms, so full batches would
/// hold ~60 ms against a 5 ms target), and every record still arrives, in order. Bounded
/// by records, not time: the consumer's pace only decides how small the batches get.
#[test]
fn batches_to_a_consumer_that_is_behind_are_cut_smaller_and_keep_their_order() {
    use crate::runtime::debloat::{Debloat, MIN_BATCH};
    let (tx, rx) = crossbeam_channel::bounded::<Event<u64>>(1);
    let consumer = std::thread::spawn(move || {
        let (mut sizes, mut next) = (Vec::new(), 0u64);
        while let Ok(e) = rx.recv() {
            let Event::Batch(v) = e else { break };
            for x in &v {
                assert_eq!(*x, next, "records arrive in order");
                next += 1;
            }
            sizes.push(v.len());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        (sizes, next)
    });
    let mut w = RoutedWriter::new(vec![tx], Rebalance::new(0));
    w.set_debloat(Debloat {
        target: std::time::Duration::from_millis(5),
        capacity: 1,
    });
    // At least three windows' worth of sends whatever the machine's speed: ~60 ms per
    // full batch, and the cut batches that follow take the consumer 20 ms each.
    let mut sent = 0u64;
    while sent < 40 * BATCH_SIZE as u64 {
        let mut batch: Vec<u64> = (sent..sent + BATCH_SIZE as u64).collect();
        sent += batch.len() as u64;
        w.push(&mut batch).unwrap();
        if w.channels.limits[0] == MIN_BATCH {
            break;
        }
    }
    w.end_of_input().unwrap();
    drop(w);
    let (sizes, received) = consumer.join().unwrap();
    assert_eq!(received, sent, "every record arrived");
    assert_eq!(sizes[0], BATCH_SIZE, "full batches before the first window");
    let smallest = *sizes.iter().min().unwrap();
    assert!(
        smallest < BATCH_SIZE / 4,
        "batches to a consumer that is behind get smaller: {sizes:?}"
    );
}

/// Without backpressure nothing changes: a writer with debloating on sends full batches to
/// a consumer with room.
#[test]
fn batches_stay_full_while_the_consumer_keeps_up() {
    use crate::runtime::debloat::{Debloat, WINDOW};
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut w = RoutedWriter::new(vec![tx], Rebalance::new(0));
    w.set_debloat(Debloat {
        target: std::time::Duration::from_millis(5),
        capacity: 1,
    });
    let start = std::time::Instant::now();
    let mut sent = 0u64;
    // Past a window, so the limits were recomputed at least once.
    while start.elapsed() < 2 * WINDOW || sent < 4 * BATCH_SIZE as u64 {
        for _ in 0..BATCH_SIZE {
            w.push(&mut vec![sent]).unwrap();
            sent += 1;
        }
    }
    assert!(drain(&rx)
        .iter()
        .all(|e| matches!(e, Event::Batch(v) if v.len() == BATCH_SIZE)));
}

/// A source polls about one batch per channel while debloating cuts them: the limits'
/// sum for a writer that spreads its records, the smallest limit for a broadcast (each
/// record goes to every channel), and a full batch without debloating.
#[test]
fn the_batch_hint_is_one_debloated_batch_per_channel() {
    use crate::runtime::debloat::Debloat;
    let d = Debloat {
        target: std::time::Duration::from_millis(10),
        capacity: 4,
    };
    let senders = || {
        let (a, _) = crossbeam_channel::unbounded::<Event<u64>>();
        let (b, _) = crossbeam_channel::unbounded::<Event<u64>>();
        vec![a, b]
    };
    let mut routed = RoutedWriter::new(senders(), Rebalance::new(0));
    assert_eq!(routed.batch_hint(), BATCH_SIZE, "no debloating");
    routed.set_debloat(d);
    routed.channels.limits = vec![100, 300];
    assert_eq!(routed.batch_hint(), 400);
    let mut broadcast = BroadcastWriter::new(senders());
    broadcast.set_debloat(d);
    broadcast.channels.limits = vec![100, 300];
    assert_eq!(broadcast.batch_hint(), 100);
    broadcast.channels.limits = vec![BATCH_SIZE; 2];
    assert_eq!(broadcast.batch_hint(), BATCH_SIZE);
}
