//! The exchange over real loopback sockets: in-process tonic servers on 127.0.0.1, port 0.
//! Every wait here is for a state (a sender waiting, events arrived), never for a time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::runtime::codec::{RecordCodec, TypeRegistry};
use crate::runtime::event::{CheckpointBarrier, Event, WatermarkStatus};

use super::*;

fn codec() -> Arc<dyn RecordCodec<u64>> {
    TypeRegistry::with_common_types().codec::<u64>().unwrap()
}

/// Keep-alive pings go on, but a machine starved of CPU for seconds (a loaded CI host) must
/// not count as a lost peer here: these tests break their streams on purpose.
fn start(worker: WorkerId, token: &str) -> Exchange {
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut config = ExchangeConfig::new(worker, listen, token);
    config.keepalive_timeout = Duration::from_secs(600);
    Exchange::start(config).unwrap()
}

/// [`start`] in run `run` (a coordinator's run id).
fn start_in(worker: WorkerId, run: &str) -> Exchange {
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut config = ExchangeConfig::new(worker, listen, "secret");
    config.keepalive_timeout = Duration::from_secs(600);
    config.run = run.into();
    Exchange::start(config).unwrap()
}

/// Worker 1 dials worker 2.
pub(crate) fn pair() -> (Exchange, Exchange) {
    let a = start(1, "secret");
    let b = start(2, "secret");
    a.connect(2, &b.local_addr().to_string()).unwrap();
    (a, b)
}

/// Waits until `cond` holds; fails naming `what` after a minute (a hang, not a slow machine).
pub(crate) fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn records(e: Event<u64>) -> Vec<u64> {
    match e {
        Event::Batch(b) => b,
        other => panic!("expected a batch, got {other:?}"),
    }
}

#[test]
fn order_holds_per_channel_and_every_channel_both_ways_shares_one_stream() {
    let (a, b) = pair();
    const CHANNELS: u32 = 8;
    const BATCHES: u64 = 50;
    let bound = ChannelBound::local(2);
    let mut threads = Vec::new();
    // Channels 0..8 from worker 1 to worker 2, 100..108 from 2 to 1.
    for (from, to, base) in [(&a, &b, 0), (&b, &a, 100)] {
        for c in base..base + CHANNELS {
            let tx = from.output(to.worker(), c, codec());
            let rx = to.input(from.worker(), c, bound, codec()).unwrap();
            threads.push(std::thread::spawn(move || {
                for i in 0..BATCHES {
                    tx.send(Event::Batch(vec![u64::from(c), i * 2, i * 2 + 1]))
                        .unwrap();
                    tx.send(Event::Watermark(i)).unwrap();
                }
                tx.send(Event::EndOfInput).unwrap();
            }));
            threads.push(std::thread::spawn(move || {
                for i in 0..BATCHES {
                    assert_eq!(
                        records(rx.recv().unwrap()),
                        [u64::from(c), i * 2, i * 2 + 1]
                    );
                    assert!(matches!(rx.recv().unwrap(), Event::Watermark(w) if w == i));
                }
                assert!(matches!(rx.recv().unwrap(), Event::EndOfInput));
            }));
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(a.streams(), 1, "worker 1 dialled one stream");
    assert_eq!(b.streams(), 1, "worker 2 accepted one stream");
    let stats = a.stats(2);
    assert!(
        stats.frames_out >= u64::from(CHANNELS) * BATCHES * 2,
        "{stats:?}"
    );
    assert!(
        stats.frames_in >= u64::from(CHANNELS) * BATCHES * 2,
        "{stats:?}"
    );
    // A second stream for the pair is refused: channels never split across streams.
    let e = b.connect(1, &a.local_addr().to_string()).unwrap_err();
    assert!(e.to_string().contains("one per pair"), "{e}");
    assert!(
        a.is_connected(2) && b.is_connected(1),
        "the first stream is still up"
    );
}

#[test]
fn a_sender_out_of_permits_waits_until_its_receiver_consumes() {
    let (a, b) = pair();
    let bound = ChannelBound {
        batches: 2,
        records: 1000,
    };
    let tx = Arc::new(a.output(2, 7, codec()));
    let rx = b.input(1, 7, bound, codec()).unwrap();
    wait_until("the channel opens", || !tx.is_full());
    tx.try_send(Event::Batch(vec![1])).unwrap();
    tx.try_send(Event::Batch(vec![2])).unwrap();
    assert!(tx.is_full());
    let kept = tx.try_send(Event::Batch(vec![3]));
    assert!(matches!(kept, Err(TrySend::Full(Event::Batch(ref b))) if b == &[3]));
    let kept = tx.send_timeout(Event::Batch(vec![3]), Duration::from_millis(1));
    assert!(matches!(kept, Err(TrySend::Full(_))));
    // A blocking send waits for a permit...
    let t = tx.clone();
    let sender = std::thread::spawn(move || t.send(Event::Batch(vec![3])));
    wait_until("the sender waits", || tx.waiting() == 1);
    wait_until("both batches arrived", || rx.len() == 2);
    assert_eq!(tx.permit_waits(), 2, "the timed send and the blocking one");
    assert_eq!(rx.len(), 2, "no third batch while no permit is back");
    // ...and goes on once the receiver consumed one: the permit came back on the stream.
    assert_eq!(records(rx.recv().unwrap()), [1]);
    sender.join().unwrap().unwrap();
    assert_eq!(records(rx.recv().unwrap()), [2]);
    assert_eq!(records(rx.recv().unwrap()), [3]);
    wait_until("every permit is back", || tx.available() == (2, 1000));
    // The stream's figures, as a worker reports them: both waits, the timed one's
    // millisecond at least, and bytes both ways (batches out, permits back).
    let streams = a.streams_stats();
    assert_eq!(streams.len(), 1, "{streams:?}");
    let (peer, s) = streams[0];
    assert_eq!(peer, 2);
    assert_eq!(s.permit_waits, 2, "{s:?}");
    assert!(s.permit_wait_ns >= 1_000_000, "{s:?}");
    assert!(s.bytes_out > 0 && s.bytes_in > 0, "{s:?}");

    // Records count too: 5 record permits hold 1 + 3 records, not one more.
    let tx = a.output(2, 8, codec());
    let rx = b
        .input(
            1,
            8,
            ChannelBound {
                batches: 10,
                records: 5,
            },
            codec(),
        )
        .unwrap();
    wait_until("the channel opens", || !tx.is_full());
    tx.try_send(Event::Batch(vec![1])).unwrap();
    tx.try_send(Event::Batch(vec![2, 3, 4])).unwrap();
    assert!(matches!(
        tx.try_send(Event::Batch(vec![5, 6])),
        Err(TrySend::Full(_))
    ));
    assert_eq!(records(rx.recv().unwrap()), [1]);
    wait_until("a record permit is back", || tx.available() == (9, 2));
    tx.try_send(Event::Batch(vec![5, 6])).unwrap();
}

#[test]
fn watermarks_barriers_and_end_of_input_need_no_permits() {
    let (a, b) = pair();
    let tx = a.output(2, 1, codec());
    let rx = b
        .input(
            1,
            1,
            ChannelBound {
                batches: 1,
                records: 10,
            },
            codec(),
        )
        .unwrap();
    wait_until("the channel opens", || !tx.is_full());
    tx.try_send(Event::Batch(vec![1, 2])).unwrap();
    assert!(tx.is_full(), "the one batch permit is spent");
    let barrier = CheckpointBarrier::checkpoint(4, 99);
    for e in [
        Event::Watermark(10),
        Event::WatermarkStatus(WatermarkStatus::Idle),
        Event::Barrier(barrier),
        Event::EndOfInput,
    ] {
        assert!(
            tx.try_send(e).is_ok(),
            "a control event goes without permits"
        );
    }
    assert_eq!(records(rx.recv().unwrap()), [1, 2]);
    assert!(matches!(rx.recv().unwrap(), Event::Watermark(10)));
    assert!(matches!(
        rx.recv().unwrap(),
        Event::WatermarkStatus(WatermarkStatus::Idle)
    ));
    assert!(matches!(rx.recv().unwrap(), Event::Barrier(x) if x == barrier));
    assert!(matches!(rx.recv().unwrap(), Event::EndOfInput));
    assert_eq!(tx.permit_waits(), 0);
}

#[test]
fn an_announcement_overtakes_the_data_queued_before_it() {
    let (a, b) = pair();
    let tx = a.output(2, 3, codec());
    let rx = b.input(1, 3, ChannelBound::local(2), codec()).unwrap();
    wait_until("the channel opens", || !tx.is_full());
    tx.send(Event::Batch(vec![1])).unwrap();
    tx.send(Event::Batch(vec![2])).unwrap();
    let barrier = CheckpointBarrier::checkpoint(7, 0);
    tx.send(Event::Barrier(barrier)).unwrap();
    wait_until("the batches and the marker arrived", || rx.len() == 3);
    tx.announce(barrier).unwrap();
    // The task finds the announcement on its lane while the records before the in-band
    // marker still wait, unread: what an unaligned checkpoint stores as channel state.
    assert_eq!(
        rx.lane().recv_timeout(Duration::from_secs(60)).unwrap(),
        barrier
    );
    assert_eq!(rx.len(), 3);
    assert_eq!(records(rx.recv().unwrap()), [1]);
}

/// A TCP proxy on loopback that can cut every connection through it: both ends see their
/// connection close, as when a network link goes down.
pub(crate) struct Proxy {
    pub(crate) addr: SocketAddr,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub(crate) fn to(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let streams = Arc::new(Mutex::new(Vec::<TcpStream>::new()));
        let kept = streams.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(target) else {
                    return;
                };
                let mut kept = kept.lock().unwrap();
                kept.push(client.try_clone().unwrap());
                kept.push(server.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server.try_clone().unwrap(), client.try_clone().unwrap()),
                ] {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { addr, streams }
    }

    pub(crate) fn cut(&self) {
        for s in self.streams.lock().unwrap().iter() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

#[test]
fn a_cut_link_fails_both_sides_naming_the_other_worker() {
    let a = start(1, "secret");
    let b = start(2, "secret");
    let proxy = Proxy::to(b.local_addr());
    a.connect(2, &proxy.addr.to_string()).unwrap();
    let a_tx = a.output(2, 1, codec());
    let b_rx = b.input(1, 1, ChannelBound::local(1), codec()).unwrap();
    let b_tx = b.output(1, 2, codec());
    let a_rx = a.input(2, 2, ChannelBound::local(1), codec()).unwrap();
    a_tx.send(Event::Batch(vec![1])).unwrap();
    b_tx.send(Event::Batch(vec![2])).unwrap();
    assert_eq!(records(b_rx.recv().unwrap()), [1]);
    assert_eq!(records(a_rx.recv().unwrap()), [2]);

    proxy.cut();
    wait_until("worker 1 sees the stream break", || {
        a.peer_failure(2).is_some()
    });
    wait_until("worker 2 sees the stream break", || {
        b.peer_failure(1).is_some()
    });
    let at_a = a_rx.recv().unwrap_err().to_string();
    assert!(
        at_a.contains("lost the exchange stream with worker 2 at"),
        "{at_a}"
    );
    assert!(at_a.contains(&proxy.addr.to_string()), "{at_a}");
    let at_b = b_rx.recv().unwrap_err().to_string();
    assert!(
        at_b.contains("lost the exchange stream with worker 1 at 127.0.0.1:"),
        "{at_b}"
    );
    // Senders fail too, with the same error, whether out of permits or not.
    let e = a_tx.send(Event::Batch(vec![3])).unwrap_err().to_string();
    assert!(e.contains("worker 2"), "{e}");
    let e = b_tx.send(Event::Watermark(1)).unwrap_err().to_string();
    assert!(e.contains("worker 1"), "{e}");
}

#[test]
fn a_peer_that_vanishes_wakes_a_waiting_sender_with_an_error_naming_it() {
    let (a, b) = pair();
    let tx = Arc::new(a.output(2, 1, codec()));
    let _rx = b
        .input(
            1,
            1,
            ChannelBound {
                batches: 1,
                records: 10,
            },
            codec(),
        )
        .unwrap();
    tx.send(Event::Batch(vec![1])).unwrap();
    let t = tx.clone();
    let sender = std::thread::spawn(move || t.send(Event::Batch(vec![2])));
    wait_until("the sender waits for a permit", || tx.waiting() == 1);
    drop(b); // worker 2's process is gone
    let e = sender.join().unwrap().unwrap_err().to_string();
    assert!(
        e.contains("lost the exchange stream with worker 2 at 127.0.0.1:"),
        "{e}"
    );
}

#[test]
fn a_peer_without_the_cluster_token_is_refused() {
    let a = start(1, "wrong");
    let b = start(2, "secret");
    let tx = a.output(2, 1, codec());
    let e = a.connect(2, &b.local_addr().to_string()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ExchangeError::Refused { .. }), "{msg}");
    assert!(msg.contains("worker 2 at 127.0.0.1:"), "{msg}");
    assert!(msg.contains("cluster token"), "{msg}");
    assert_eq!(b.refused(), 1);
    assert_eq!(b.streams(), 0);
    assert!(!b.is_connected(1));
    // The channels waiting for that stream fail with the reason.
    let e = tx.send(Event::EndOfInput).unwrap_err();
    assert!(e.to_string().contains("cluster token"), "{e}");
    // An empty token is refused before anything listens.
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let e = Exchange::start(ExchangeConfig::new(4, listen, ""))
        .err()
        .expect("refused");
    assert!(e.to_string().contains("token is empty"), "{e}");
    // And a peer that is not there at all is named, with the way out.
    let e = a.connect(3, "127.0.0.1:1").unwrap_err().to_string();
    assert!(e.contains("cannot reach worker 3 at 127.0.0.1:1"), "{e}");
}

#[test]
fn a_task_selects_on_a_remote_input_as_on_a_local_channel_and_returns_permits_by_consuming() {
    let (a, b) = pair();
    let tx = a.output(2, 5, codec());
    let rx = b.input(1, 5, ChannelBound::local(1), codec()).unwrap();
    assert!(rx.is_empty());
    assert!(rx.try_recv().unwrap().is_none());
    tx.send(Event::Batch(vec![1])).unwrap();
    assert!(tx.is_full());
    // A task's loop: select over the data and the lane, take the event, report it consumed.
    let mut sel = crossbeam_channel::Select::new();
    let data = sel.recv(rx.receiver());
    let lane = sel.recv(rx.lane());
    let op = sel.select_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(op.index(), data);
    assert_ne!(op.index(), lane);
    let e = op.recv(rx.receiver()).unwrap();
    // Taken but not reported: no permit goes back. (A frame from worker 2 arriving at
    // worker 1 after the take proves it: permits would have overtaken it.)
    let back = b.output(1, 6, codec());
    let back_rx = a.input(2, 6, ChannelBound::local(1), codec()).unwrap();
    back.send(Event::EndOfInput).unwrap();
    assert!(matches!(back_rx.recv().unwrap(), Event::EndOfInput));
    assert!(tx.is_full(), "a permit came back before the task reported");
    rx.consumed(&e);
    wait_until("the permit is back", || !tx.is_full());
    tx.send(Event::Batch(vec![2])).unwrap();
    let e = rx.recv_timeout(Duration::from_secs(60)).unwrap().unwrap();
    assert_eq!(records(e), [2]);
}

#[test]
fn a_task_waiting_for_room_on_a_remote_channel_wakes_when_its_permits_return() {
    let (a, b) = pair();
    let tx = a.output(2, 11, codec());
    let rx = b.input(1, 11, ChannelBound::local(1), codec()).unwrap();
    tx.send(Event::Batch(vec![1])).unwrap();
    assert!(tx.is_full());
    // A source's wait for room: its select holds the channel's permit watch.
    let mut sel = crossbeam_channel::Select::new();
    sel.recv(tx.watch_room());
    assert!(sel.try_ready().is_err(), "full: nothing wakes it yet");
    // The receiver takes the batch: its permits come back on the stream and wake the
    // select (no timer: the wait below ends only by the wakeup, or fails after a minute).
    assert_eq!(records(rx.recv().unwrap()), [1]);
    assert_eq!(sel.ready_timeout(Duration::from_secs(60)), Ok(0));
    assert!(!tx.is_full());
    // Watched again while full, it is not ready until the next return.
    tx.send(Event::Batch(vec![2])).unwrap();
    let mut sel = crossbeam_channel::Select::new();
    sel.recv(tx.watch_room());
    assert!(
        sel.try_ready().is_err(),
        "the earlier wakeup is not replayed"
    );
    assert_eq!(records(rx.recv().unwrap()), [2]);
    assert_eq!(sel.ready_timeout(Duration::from_secs(60)), Ok(0));
}

#[test]
fn the_channels_of_an_attempt_are_forgotten_on_both_workers_once_both_ends_closed() {
    let (a, b) = pair();
    // Channels both ways, as an attempt's: each sends, ends, and both ends go.
    let mut ends = Vec::new();
    for (from, to, c) in [(&a, &b, 20), (&a, &b, 21), (&b, &a, 22)] {
        let tx = from.output(to.worker(), c, codec());
        let rx = to
            .input(from.worker(), c, ChannelBound::local(2), codec())
            .unwrap();
        tx.send(Event::Batch(vec![u64::from(c)])).unwrap();
        tx.send(Event::EndOfInput).unwrap();
        ends.push((tx, rx));
    }
    assert_eq!(a.channels(2), (1, 2));
    assert_eq!(b.channels(1), (2, 1));
    for (i, (tx, rx)) in ends.into_iter().enumerate() {
        // The sender goes first on some channels, the input on others.
        if i % 2 == 0 {
            drop(tx);
            assert_eq!(records(rx.recv().unwrap()), [20 + i as u64]);
            drop(rx);
        } else {
            assert_eq!(records(rx.recv().unwrap()), [20 + i as u64]);
            drop(rx);
            drop(tx);
        }
    }
    wait_until("worker 1 forgot them", || a.channels(2) == (0, 0));
    wait_until("worker 2 forgot them", || b.channels(1) == (0, 0));
    // The stream is still up and carries the next attempt's channels.
    let tx = a.output(2, 30, codec());
    let rx = b.input(1, 30, ChannelBound::local(2), codec()).unwrap();
    tx.send(Event::Batch(vec![30])).unwrap();
    assert_eq!(records(rx.recv().unwrap()), [30]);
}

#[test]
fn a_dropped_sender_closes_its_input_after_what_it_sent_and_the_peer_stays_up() {
    let (a, b) = pair();
    let tx = a.output(2, 7, codec());
    let rx = b.input(1, 7, ChannelBound::local(2), codec()).unwrap();
    tx.send(Event::Batch(vec![1, 2])).unwrap();
    tx.send(Event::EndOfInput).unwrap();
    drop(tx);
    assert_eq!(records(rx.recv().unwrap()), [1, 2]);
    assert!(matches!(rx.recv().unwrap(), Event::EndOfInput));
    // Closed, in order after its events; the peer is not lost, so other channels go on.
    assert!(rx.recv().is_err());
    assert!(rx.lost().is_none());
    assert!(b.peer_failure(1).is_none());
    let tx2 = a.output(2, 8, codec());
    let rx2 = b.input(1, 8, ChannelBound::local(2), codec()).unwrap();
    tx2.send(Event::Batch(vec![3])).unwrap();
    assert_eq!(records(rx2.recv().unwrap()), [3]);
}

#[test]
fn a_dropped_input_releases_a_sender_waiting_for_permits() {
    let (a, b) = pair();
    let tx = a.output(2, 9, codec());
    let rx = b.input(1, 9, ChannelBound::local(1), codec()).unwrap();
    tx.send(Event::Batch(vec![1])).unwrap();
    let sender = std::thread::spawn(move || {
        // Out of permits: waits until the input is dropped, then goes through.
        tx.send(Event::Batch(vec![2])).unwrap();
        tx
    });
    let waiting = {
        wait_until("the sender waits for permits", || rx.len() == 1);
        rx
    };
    drop(waiting);
    let tx = sender.join().unwrap();
    assert!(a.peer_failure(2).is_none());
    drop(tx);
}

#[test]
fn an_ended_attempt_fails_the_channels_of_a_peer_that_never_connected_and_it_attaches_afresh() {
    let a = start(1, "secret");
    let b = start(2, "secret");
    // Worker 2 hangs before it dials: worker 1's sender waits for the channel to open.
    let tx = Arc::new(a.output(2, 1, codec()));
    let _rx = a.input(2, 2, ChannelBound::local(1), codec()).unwrap();
    let t = tx.clone();
    let sender = std::thread::spawn(move || t.send(Event::Batch(vec![1])));
    wait_until("the sender waits for the channel to open", || {
        tx.waiting() == 1
    });
    a.end_attempt(3);
    let e = sender.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("worker 2"), "{e}");
    assert!(
        e.contains("never opened its exchange stream during attempt 3"),
        "{e}"
    );
    // The peer comes back for the next attempt: a fresh stream, fresh channels.
    b.connect(1, &a.local_addr().to_string()).unwrap();
    let tx = b.output(1, 10, codec());
    let rx = a.input(2, 10, ChannelBound::local(1), codec()).unwrap();
    tx.send(Event::Batch(vec![7])).unwrap();
    assert_eq!(records(rx.recv().unwrap()), [7]);

    // On a stream that is up, a channel whose receiver never registered its end fails at
    // the attempt's end too, while the stream stays up for the next attempt.
    let unopened = Arc::new(a.output(2, 11, codec()));
    let t = unopened.clone();
    let sender = std::thread::spawn(move || t.send(Event::Batch(vec![1])));
    wait_until("the sender waits for channel 11 to open", || {
        unopened.waiting() == 1
    });
    a.end_attempt(4);
    let e = sender.join().unwrap().unwrap_err().to_string();
    assert!(
        e.contains("attempt 4 ended before this channel opened"),
        "{e}"
    );
    assert!(a.is_connected(2));
    tx.send(Event::Batch(vec![8])).unwrap();
    assert_eq!(records(rx.recv().unwrap()), [8]);
}

#[test]
fn a_peer_whose_stream_broke_is_dialled_afresh_for_the_next_attempt() {
    let a = start(1, "secret");
    let b = start(2, "secret");
    let proxy = Proxy::to(b.local_addr());
    a.connect(2, &proxy.addr.to_string()).unwrap();
    proxy.cut();
    wait_until("worker 1 sees the stream break", || {
        a.peer_failure(2).is_some()
    });
    wait_until("worker 2 sees the stream break", || {
        b.peer_failure(1).is_some()
    });
    a.end_attempt(1);
    b.end_attempt(1);
    // The link is back (here: the direct address): the next attempt's stream and channels.
    assert!(!a.is_connected(2));
    a.connect(2, &b.local_addr().to_string()).unwrap();
    let tx = a.output(2, 5, codec());
    let rx = b.input(1, 5, ChannelBound::local(1), codec()).unwrap();
    tx.send(Event::Batch(vec![9])).unwrap();
    assert_eq!(records(rx.recv().unwrap()), [9]);
}

#[test]
fn a_worker_that_rejoins_under_a_new_id_drops_its_old_streams_and_serves_as_the_new_one() {
    let (a, b) = pair();
    let tx = a.output(2, 1, codec());
    let rx = b.input(1, 1, ChannelBound::local(1), codec()).unwrap();
    tx.send(Event::Batch(vec![1])).unwrap();
    assert_eq!(records(rx.recv().unwrap()), [1]);
    // Worker 2 registered again with a (restarted) coordinator and is worker 5 now.
    b.rejoin(5);
    assert_eq!(b.worker(), 5);
    let e = rx.recv().unwrap_err().to_string();
    assert!(
        e.contains("registered again with its coordinator, as worker 5"),
        "{e}"
    );
    wait_until("worker 1 sees the old stream end", || {
        a.peer_failure(2).is_some()
    });
    // Its peers reach it under its new id, on the same port, once its deploy named its
    // run (a peer that dials first waits for it).
    b.join_run("");
    a.connect(5, &b.local_addr().to_string()).unwrap();
    let tx = a.output(5, 2, codec());
    let rx = b.input(1, 2, ChannelBound::local(1), codec()).unwrap();
    tx.send(Event::Batch(vec![2])).unwrap();
    assert_eq!(records(rx.recv().unwrap()), [2]);
}

#[test]
fn a_peer_of_another_run_is_refused_naming_both_run_ids() {
    // Worker 1 of another coordinator's job (or a stale one of an earlier run) dials a
    // worker 2 of this run: same token, same ids, another run.
    let stale = start_in(1, "run-of-yesterday");
    let b = start_in(2, "run-of-today");
    let tx = stale.output(2, 1, codec());
    let e = stale.connect(2, &b.local_addr().to_string()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ExchangeError::Refused { .. }), "{msg}");
    assert!(
        msg.contains("\"run-of-yesterday\"") && msg.contains("\"run-of-today\""),
        "{msg}"
    );
    assert!(msg.contains("worker 2 refused"), "{msg}");
    assert_eq!((b.refused(), b.streams()), (1, 0));
    assert!(!b.is_connected(1));
    // The channels waiting for that stream fail with the reason.
    let e = tx.send(Event::EndOfInput).unwrap_err().to_string();
    assert!(e.contains("run-of-today"), "{e}");
    // A worker of this run gets in.
    let a = start_in(1, "run-of-today");
    a.connect(2, &b.local_addr().to_string()).unwrap();
    assert!(b.is_connected(1));
}

#[test]
fn a_peer_dialling_for_an_attempt_that_ended_here_is_refused() {
    let a = start_in(1, "run");
    let b = start_in(2, "run");
    // Attempt 3 ended on worker 2 (cancelled); worker 1, stopped meanwhile, resumes and
    // dials for it.
    b.end_attempt(3);
    a.begin_attempt(3);
    let e = a.connect(2, &b.local_addr().to_string()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ExchangeError::Refused { .. }), "{msg}");
    assert!(
        msg.contains("for attempt 3") && msg.contains("attempt 3 already ended here"),
        "{msg}"
    );
    assert_eq!((b.refused(), b.streams()), (1, 0));
    // Dialling for the next attempt is let in.
    a.begin_attempt(4);
    a.connect(2, &b.local_addr().to_string()).unwrap();
    assert!(b.is_connected(1));
}

#[test]
fn a_worker_registered_again_checks_a_dialler_against_the_run_its_deploy_names() {
    let b = start_in(2, "old-run");
    // Registered again as worker 5: the run is unknown until the deploy names it. A peer
    // deployed first dials meanwhile; it is answered once the run is known (whichever
    // comes first, the answer is the same).
    b.rejoin(5);
    assert_eq!(b.run(), None);
    let addr = b.local_addr().to_string();
    let early = std::thread::spawn(move || {
        let a = start_in(1, "new-run");
        a.connect(5, &addr).map(|()| a)
    });
    b.join_run("new-run");
    let a = early.join().unwrap().unwrap();
    assert!(b.is_connected(1) && a.is_connected(5));
    // A dialler of the run before is refused, naming both.
    let stale = start_in(3, "old-run");
    let e = stale
        .connect(5, &b.local_addr().to_string())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"old-run\"") && e.contains("\"new-run\""),
        "{e}"
    );
}
