//! Where a task's time goes: records it sent downstream, time blocked on a full output
//! channel (backpressure), time waiting for input (idle), and so time busy — what the
//! dashboard's overview, `/api/job` and `/metrics` show per subtask (issue 14).
//!
//! Measured per batch, never per record: a send first tries the channel and only when it
//! is full reads the clock around the blocking send, and an input task reads the clock
//! around each wait for its next event (a batch, a barrier, a timer). The counters live in
//! the task's [`TaskMetrics`]; the task thread finds them through a thread-local set once
//! when it starts ([`enter`]), so the channel writers need no handle of their own.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{SendError, SendTimeoutError, Sender, TrySendError};

use crate::runtime::task::TaskMetrics;

/// A task's load counters (relaxed atomics: written by its thread, read by status reads).
#[derive(Debug, Default)]
pub struct TaskLoad {
    /// Records sent on output channels (a broadcast counts each copy).
    pub records_out: AtomicU64,
    /// Nanoseconds blocked sending to a full channel: backpressure from downstream.
    pub backpressured_ns: AtomicU64,
    /// Nanoseconds an input task waited for its next event.
    pub idle_ns: AtomicU64,
    /// Nanoseconds the task's threads ran, over the attempts that ended.
    alive_done_ns: AtomicU64,
    /// When the running thread started (µs since the epoch), 0 when none runs.
    running_since_us: AtomicU64,
}

impl TaskLoad {
    /// Nanoseconds the task's threads have run, over every attempt, the running one
    /// included: what busy time is the rest of, after idle and backpressured time.
    pub fn alive_ns(&self) -> u64 {
        let since = self.running_since_us.load(Relaxed);
        let running = if since == 0 {
            0
        } else {
            crate::clock::wall_us().saturating_sub(since) * 1000
        };
        self.alive_done_ns.load(Relaxed) + running
    }

    /// Nanoseconds busy: alive, neither waiting for input nor blocked on output.
    pub fn busy_ns(&self) -> u64 {
        let waiting = self.idle_ns.load(Relaxed) + self.backpressured_ns.load(Relaxed);
        self.alive_ns().saturating_sub(waiting)
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<TaskMetrics>>> = const { RefCell::new(None) };
    static BARRIER_PROBE: RefCell<Option<Rc<dyn Fn() -> bool>>> = const { RefCell::new(None) };
}

/// While alive, a blocked [`send_or_defer`] on this thread gives its event back as soon as
/// `probe` says a barrier waits for the task (see [`watch_for_barriers`]).
pub(crate) struct Watching(());

/// Makes a send on the calling (input task) thread that is blocked on a full channel
/// return once `probe()` is true, keeping its event to send before anything else on that
/// channel — what a source does on [`TaskMetrics::barrier_requested`], for a task whose
/// barriers arrive on its input's priority lanes (unaligned checkpoints, issue 13). Without
/// it, a mid-graph task sending into the full channel of a slow consumer would see the
/// announcement only once the consumer made room: an unaligned checkpoint would wait for
/// the slow consumer after all. The probe is called every [`DEFER_POLL`] while blocked.
pub(crate) fn watch_for_barriers(probe: Rc<dyn Fn() -> bool>) -> Watching {
    BARRIER_PROBE.with(|p| *p.borrow_mut() = Some(probe));
    Watching(())
}

impl Drop for Watching {
    fn drop(&mut self) {
        BARRIER_PROBE.with(|p| p.borrow_mut().take());
    }
}

/// While alive, the calling thread is the task that owns `metrics`: its sends and waits
/// count there, and its running time adds up.
pub(crate) struct Entered {
    started: Instant,
}

/// Makes the calling (task) thread count into `metrics` until the guard drops.
pub(crate) fn enter(metrics: Arc<TaskMetrics>) -> Entered {
    metrics
        .load
        .running_since_us
        .store(crate::clock::wall_us(), Relaxed);
    CURRENT.with(|c| *c.borrow_mut() = Some(metrics));
    Entered {
        started: Instant::now(),
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let ns = self.started.elapsed().as_nanos() as u64;
        if let Some(m) = CURRENT.with(|c| c.borrow_mut().take()) {
            m.load.alive_done_ns.fetch_add(ns, Relaxed);
            m.load.running_since_us.store(0, Relaxed);
        }
    }
}

fn with_load(f: impl FnOnce(&TaskLoad)) {
    CURRENT.with(|c| {
        if let Some(m) = c.borrow().as_ref() {
            f(&m.load);
        }
    });
}

/// Sends `event`, a batch of `records` records (0 for a control event), counting them as
/// sent and any time blocked on the full channel as backpressure.
#[inline]
pub(crate) fn send<E>(s: &Sender<E>, event: E, records: usize) -> Result<(), SendError<E>> {
    let blocked = match s.try_send(event) {
        Ok(()) => None,
        Err(TrySendError::Disconnected(e)) => return Err(SendError(e)),
        Err(TrySendError::Full(e)) => {
            let start = Instant::now();
            s.send(e)?;
            Some(start.elapsed())
        }
    };
    with_load(|l| count_sent(l, records, blocked));
    Ok(())
}

/// Whether channel `s` has room for one more event when the `credit` events its consumer
/// read ahead count against its capacity: the one flow-control rule of unaligned jobs,
/// for the senders here and the room questions of the network writers.
#[inline]
pub(crate) fn has_credit_room<E>(s: &Sender<E>, credit: &AtomicUsize) -> bool {
    s.len() + credit.load(Relaxed) < s.capacity().unwrap_or(usize::MAX)
}

/// How often a deferrable send into a full channel looks whether a barrier is waiting.
const DEFER_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// [`send`] for the network writers, with two twists of unaligned checkpoints:
///
/// * `credit`: events the consumer read ahead and holds, which count against the
///   channel's capacity (the channel is "full" at `len + credit >= capacity`), so that a
///   consumer reading ahead for a checkpoint does not let this sender run further ahead.
/// * In a source task of an unaligned job ([`TaskMetrics::deferrable`]), a send into a
///   full channel gives `event` back instead of waiting once a barrier is waiting
///   ([`TaskMetrics::barrier_requested`]): `Ok(Some(e))`, for the caller to keep and send
///   before anything else on that channel. In an input task of an unaligned job the same
///   happens once its barrier probe fires ([`watch_for_barriers`]).
///
/// Otherwise it waits until sent and returns `Ok(None)`. Waiting polls every
/// [`DEFER_POLL`] only when one of the twists applies; else it blocks like [`send`].
#[inline]
pub(crate) fn send_or_defer<E>(
    s: &Sender<E>,
    event: E,
    records: usize,
    credit: Option<&AtomicUsize>,
) -> Result<Option<E>, SendError<E>> {
    let deferrable = CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .filter(|m| m.deferrable.load(Relaxed))
            .cloned()
    });
    let probe = BARRIER_PROBE.with(|p| p.borrow().clone());
    if deferrable.is_none() && probe.is_none() && credit.is_none() {
        return send(s, event, records).map(|()| None);
    }
    let over = || credit.is_some_and(|h| !has_credit_room(s, h));
    let mut event = event;
    if !over() {
        match s.try_send(event) {
            Ok(()) => {
                with_load(|l| count_sent(l, records, None));
                return Ok(None);
            }
            Err(TrySendError::Disconnected(e)) => return Err(SendError(e)),
            Err(TrySendError::Full(e)) => event = e,
        }
    }
    let start = Instant::now();
    loop {
        let requested = deferrable
            .as_ref()
            .is_some_and(|m| m.barrier_requested.load(Relaxed));
        if requested || probe.as_ref().is_some_and(|p| p()) {
            let ns = start.elapsed().as_nanos() as u64;
            with_load(|l| {
                l.backpressured_ns.fetch_add(ns, Relaxed);
            });
            return Ok(Some(event));
        }
        if over() {
            if s.is_full() {
                // A consumer that ended (a failure elsewhere, a cancellation) zeroes its
                // credit but leaves its channel as full as it was, and only a send finds
                // it gone: without this look a sender would wait here for ever, and the
                // executor's cancel-and-join with it. (A slot freed since `over()` takes
                // the event at most one batch past the credit.)
                match s.try_send(event) {
                    Ok(()) => {
                        with_load(|l| count_sent(l, records, Some(start.elapsed())));
                        return Ok(None);
                    }
                    Err(TrySendError::Disconnected(e)) => return Err(SendError(e)),
                    Err(TrySendError::Full(e)) => event = e,
                }
            }
            std::thread::sleep(DEFER_POLL);
            continue;
        }
        match s.send_timeout(event, DEFER_POLL) {
            Ok(()) => {
                with_load(|l| count_sent(l, records, Some(start.elapsed())));
                return Ok(None);
            }
            Err(SendTimeoutError::Timeout(e)) => event = e,
            Err(SendTimeoutError::Disconnected(e)) => return Err(SendError(e)),
        }
    }
}

/// Whether a send of the calling task may be deferred, as [`send_or_defer`] decides it for
/// a local channel: `None` when it may not (it waits until sent), else what says "a
/// barrier waits" — the source's requested barrier or the input task's barrier probe. For
/// the sends on remote channels (`runtime::remote`), which wait for permits instead of
/// room.
#[cfg(feature = "cluster")]
pub(crate) fn deferral() -> Option<Box<dyn Fn() -> bool>> {
    let deferrable = CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .filter(|m| m.deferrable.load(Relaxed))
            .cloned()
    });
    let probe = BARRIER_PROBE.with(|p| p.borrow().clone());
    if deferrable.is_none() && probe.is_none() {
        return None;
    }
    Some(Box::new(move || {
        deferrable
            .as_ref()
            .is_some_and(|m| m.barrier_requested.load(Relaxed))
            || probe.as_ref().is_some_and(|p| p())
    }))
}

/// Counts a send on a remote channel (`runtime::remote`): `records` sent, and the time it
/// waited for permits as backpressure, like a local channel's.
#[cfg(feature = "cluster")]
pub(crate) fn count_remote_sent(records: usize, blocked: Option<std::time::Duration>) {
    with_load(|l| count_sent(l, records, blocked));
}

fn count_sent(l: &TaskLoad, records: usize, blocked: Option<std::time::Duration>) {
    if records > 0 {
        l.records_out.fetch_add(records as u64, Relaxed);
    }
    if let Some(d) = blocked {
        l.backpressured_ns.fetch_add(d.as_nanos() as u64, Relaxed);
    }
}

/// Runs `wait` (an input task's wait for its next event), counting its time as idle.
#[inline]
pub(crate) fn idle<R>(wait: impl FnOnce() -> R) -> R {
    let start = Instant::now();
    let r = wait();
    let ns = start.elapsed().as_nanos() as u64;
    with_load(|l| {
        l.idle_ns.fetch_add(ns, Relaxed);
    });
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn sends_count_records_and_time_blocked_on_a_full_channel() {
        let metrics = Arc::new(TaskMetrics::default());
        let (tx, rx) = crossbeam_channel::bounded::<u32>(1);
        let m = metrics.clone();
        let (about_to_block, wait_for_it) = crossbeam_channel::bounded::<()>(1);
        let task = std::thread::spawn(move || {
            let _in = enter(m);
            send(&tx, 1, 10).unwrap(); // room: not blocked
            about_to_block.send(()).unwrap();
            send(&tx, 2, 5).unwrap(); // full until the reader takes the first
            idle(|| std::thread::sleep(Duration::from_millis(20)));
        });
        // Wait for the task to reach the blocking send, then keep it blocked well over the
        // 30 ms asserted below, so a thread started late under load cannot shorten it.
        wait_for_it.recv().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(rx.recv().unwrap(), 1);
        task.join().unwrap();
        assert_eq!(rx.recv().unwrap(), 2);
        let l = &metrics.load;
        assert_eq!(l.records_out.load(Relaxed), 15);
        let blocked = l.backpressured_ns.load(Relaxed);
        assert!(blocked >= 30_000_000, "blocked {blocked} ns");
        assert!(l.idle_ns.load(Relaxed) >= 20_000_000);
        let alive = l.alive_ns();
        assert!(alive >= blocked + 20_000_000, "alive {alive} ns");
        assert_eq!(l.running_since_us.load(Relaxed), 0, "ended");
        assert!(l.busy_ns() < alive);
    }

    #[test]
    fn a_blocked_send_gives_its_event_back_once_the_barrier_probe_fires() {
        let (tx, rx) = crossbeam_channel::bounded::<u32>(1);
        let (ring, rung) = crossbeam_channel::unbounded::<()>();
        let task = std::thread::spawn(move || {
            let _in = enter(Arc::new(TaskMetrics::default()));
            let _watching = watch_for_barriers(Rc::new(move || !rung.is_empty()));
            assert_eq!(send_or_defer(&tx, 1, 1, None).unwrap(), None, "room: sent");
            // Full: waits until the probe fires, then hands the event back unsent.
            let kept = send_or_defer(&tx, 2, 1, None).unwrap();
            drop(_watching);
            kept
        });
        ring.send(()).unwrap();
        assert_eq!(task.join().unwrap(), Some(2));
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [1]);
        // Without a probe (another thread), a send into a full channel waits as before.
        let (tx, rx) = crossbeam_channel::bounded::<u32>(1);
        send_or_defer(&tx, 1, 1, None).unwrap();
        let reader = std::thread::spawn(move || (rx.recv().unwrap(), rx.recv().unwrap()));
        assert_eq!(send_or_defer(&tx, 2, 1, None).unwrap(), None);
        assert_eq!(reader.join().unwrap(), (1, 2));
    }

    /// A consumer that ends (a failure elsewhere in the job) zeroes its credit and may leave
    /// its channel full: a sender waiting for credit must see the channel's end, or the
    /// executor's cancel-and-join waits for it for ever (seen as a hung test on S3).
    #[test]
    fn a_send_waiting_for_credit_ends_when_its_full_channel_loses_its_consumer() {
        let (tx, rx) = crossbeam_channel::bounded::<u32>(1);
        let credit = Arc::new(AtomicUsize::new(1));
        tx.send(1).unwrap(); // full, and one more read ahead
        let (done_tx, done) = crossbeam_channel::bounded(1);
        let c = credit.clone();
        std::thread::spawn(move || {
            let _in = enter(Arc::new(TaskMetrics::default()));
            let _ = done_tx.send(send_or_defer(&tx, 2, 1, Some(&c)).map_err(|e| e.0));
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        credit.store(0, Relaxed); // as the consumer's `Credits` do when it ends
        drop(rx);
        let sent = done.recv_timeout(std::time::Duration::from_secs(60));
        assert_eq!(
            sent,
            Ok(Err(2)),
            "the send ends with its event, not waits for ever"
        );
    }

    #[test]
    fn a_thread_that_did_not_enter_counts_nothing() {
        let (tx, _rx) = crossbeam_channel::bounded::<u32>(4);
        send(&tx, 1, 3).unwrap();
        assert_eq!(idle(|| 7), 7);
    }
}
