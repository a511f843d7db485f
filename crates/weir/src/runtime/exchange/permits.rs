//! The permits of one sending channel: how many batches and records it may still send
//! before its receiver returns some.
//!
//! The receiver's first grant *opens* the channel and sets its capacity; until then nothing
//! is sent on it, not even a control event (the receiver has not registered the channel
//! yet and would not know where to put it). After that a batch takes one batch permit and
//! one record permit per record; control events take none. A batch larger than the whole
//! record capacity goes once every record permit is back, alone, so it cannot deadlock the
//! channel (the record count then dips below zero until it returns). The flush ahead of
//! an unaligned checkpoint's marker goes over the bound once the channel is open
//! ([`SendWindow::take_over`]): both counts dip below zero until its permits return.
//!
//! Senders are task threads (blocking); grants come from the peer's reader task. A mutex
//! and a condition variable join them: a send waits only when its channel is out of
//! permits, and a failure of the peer wakes every waiting sender with the error. A task
//! that must not block in a send (a source of an unaligned job waiting for room while it
//! also waits for control messages) selects instead on [`SendWindow::watch`], which a
//! grant or a failure makes ready.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crossbeam_channel::{bounded, Receiver, Sender};

use super::wire::Cost;
use super::ExchangeError;

/// One sending channel's permits.
#[derive(Debug)]
pub struct SendWindow {
    state: Mutex<WindowState>,
    changed: Condvar,
    /// Holds a token once permits returned or the channel failed since the last
    /// [`SendWindow::watch`]: what a task's `Select` waits on.
    room_tx: Sender<()>,
    room_rx: Receiver<()>,
}

impl Default for SendWindow {
    fn default() -> Self {
        let (room_tx, room_rx) = bounded(1);
        SendWindow {
            state: Mutex::default(),
            changed: Condvar::new(),
            room_tx,
            room_rx,
        }
    }
}

#[derive(Debug, Default)]
struct WindowState {
    /// The receiver's first grant arrived.
    open: bool,
    /// May dip below zero after a send over the bound ([`SendWindow::take_over`]).
    batches: i64,
    /// May dip below zero after a batch larger than the capacity.
    records: i64,
    /// The record capacity (the first grant's records).
    capacity_records: i64,
    failed: Option<ExchangeError>,
    /// Sends that had to wait for permits (or for the channel to open), ever.
    waits: u64,
    /// Nanoseconds those sends waited, ever.
    waited_ns: u64,
    /// Senders waiting right now.
    waiting: u32,
}

impl WindowState {
    fn fits(&self, cost: Cost) -> bool {
        if !self.open {
            return false;
        }
        if cost.is_free() {
            return true;
        }
        self.batches >= i64::from(cost.batches)
            && (self.records >= cost.records as i64 || self.records >= self.capacity_records)
    }

    fn take(&mut self, cost: Cost) {
        self.batches -= i64::from(cost.batches);
        self.records -= cost.records as i64;
    }
}

/// A batch of one record: what "room" means.
const ONE_RECORD: Cost = Cost {
    batches: 1,
    records: 1,
};

/// The outcome of taking permits.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// The permits are taken: send now.
    Yes,
    /// Not enough permits (or not open yet) and no more waiting.
    No,
}

impl SendWindow {
    /// A closed window with no permits.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, WindowState> {
        // A panic while holding this lock leaves only counters behind: go on with them.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The receiver granted (or returned) `cost`; the first grant opens the channel.
    pub fn grant(&self, cost: Cost) {
        let mut s = self.lock();
        if !s.open {
            s.open = true;
            s.capacity_records = cost.records as i64;
        }
        s.batches += i64::from(cost.batches);
        s.records += cost.records as i64;
        // Under the lock: a send that takes these permits comes after the wakeup, so a
        // watch after that send drops it rather than waking on permits already spent.
        self.wake_watcher();
        drop(s);
        self.changed.notify_all();
    }

    /// Readies [`SendWindow::watch`]'s receiver (one token is enough: it only wakes).
    /// Called with the state locked, never blocks.
    fn wake_watcher(&self) {
        let _ = self.room_tx.try_send(());
    }

    /// What a task selects on while this channel is out of permits and it must not block
    /// in a send: ready once permits return or the channel fails after this call, or at
    /// once when it has room (or failed) already. Wakeups from before the call are dropped,
    /// so a select on it never spins while the channel stays full. The task takes nothing
    /// from it: the next `watch` clears it. A channel has one sender, so one watcher.
    pub fn watch(&self) -> &Receiver<()> {
        while self.room_rx.try_recv().is_ok() {}
        // A grant between the caller's look and the line above left no token behind:
        // look again, under the lock the grant sends its token under.
        let s = self.lock();
        let ready = s.failed.is_some() || s.fits(ONE_RECORD);
        drop(s);
        if ready {
            self.wake_watcher();
        }
        &self.room_rx
    }

    /// The peer is lost: every send from now on, and every waiting one, fails with `e`.
    pub fn fail(&self, e: ExchangeError) {
        let mut s = self.lock();
        if s.failed.is_none() {
            s.failed = Some(e);
        }
        self.wake_watcher();
        drop(s);
        self.changed.notify_all();
    }

    /// Takes `cost` if it fits now, without waiting.
    pub fn try_take(&self, cost: Cost) -> Result<Taken, ExchangeError> {
        self.take(cost, Some(Instant::now()))
    }

    /// Takes `cost`, waiting until it fits or until `deadline` (for ever without one).
    pub fn take(&self, cost: Cost, deadline: Option<Instant>) -> Result<Taken, ExchangeError> {
        self.take_as(cost, deadline, false)
    }

    /// Takes `cost` once the channel is open, whether or not it fits: the flush ahead of an
    /// unaligned checkpoint's marker, which must not wait for the receiver to process what
    /// it read ahead (as a local writer's barrier flush ignores the read-ahead credit). The
    /// permits dip below zero by at most that flush, and the next sends wait until the
    /// receiver has returned them.
    pub fn take_over(&self, cost: Cost) -> Result<Taken, ExchangeError> {
        self.take_as(cost, None, true)
    }

    fn take_as(
        &self,
        cost: Cost,
        deadline: Option<Instant>,
        over: bool,
    ) -> Result<Taken, ExchangeError> {
        let mut s = self.lock();
        let mut counted = false;
        loop {
            if let Some(e) = &s.failed {
                return Err(e.clone());
            }
            if s.fits(cost) || (over && s.open) {
                s.take(cost);
                return Ok(Taken::Yes);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(Taken::No);
            }
            if !counted {
                counted = true;
                s.waits += 1;
            }
            s.waiting += 1;
            let began = Instant::now();
            s = match deadline {
                None => self.changed.wait(s).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    self.changed
                        .wait_timeout(s, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
            s.waiting -= 1;
            s.waited_ns += began.elapsed().as_nanos() as u64;
        }
    }

    /// Whether a batch of one record could not be sent now (closed, or out of permits):
    /// the remote counterpart of a full channel.
    pub fn is_full(&self) -> bool {
        !self.lock().fits(ONE_RECORD)
    }

    /// The permits held now: batches and records (records may be negative, see the module
    /// docs).
    pub fn available(&self) -> (i64, i64) {
        let s = self.lock();
        (s.batches, s.records)
    }

    /// Sends that had to wait for permits, ever (a metric: permit waits).
    pub fn waits(&self) -> u64 {
        self.lock().waits
    }

    /// Time sends waited for permits, ever, in nanoseconds (a metric: how long senders
    /// were held back by the receiver's credits — backpressure across workers).
    pub fn waited_ns(&self) -> u64 {
        self.lock().waited_ns
    }

    /// Senders waiting for permits right now.
    pub fn waiting(&self) -> u32 {
        self.lock().waiting
    }

    /// Whether the receiver's first grant arrived.
    pub fn is_open(&self) -> bool {
        self.lock().open
    }

    /// The failure, once the peer is lost.
    pub fn failure(&self) -> Option<ExchangeError> {
        self.lock().failed.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn batch(records: u64) -> Cost {
        Cost {
            batches: 1,
            records,
        }
    }

    #[test]
    fn nothing_goes_before_the_first_grant_then_batches_take_permits_and_control_none() {
        let w = SendWindow::new();
        assert!(w.is_full());
        assert_eq!(w.try_take(Cost::default()), Ok(Taken::No), "not open");
        w.grant(Cost {
            batches: 2,
            records: 10,
        });
        assert_eq!(w.try_take(batch(6)), Ok(Taken::Yes));
        assert_eq!(w.try_take(batch(6)), Ok(Taken::No), "4 records left");
        assert_eq!(w.try_take(batch(4)), Ok(Taken::Yes));
        assert!(w.is_full());
        assert_eq!(
            w.try_take(Cost::default()),
            Ok(Taken::Yes),
            "control is free"
        );
        w.grant(batch(6));
        assert_eq!(w.available(), (1, 6));
    }

    #[test]
    fn a_batch_larger_than_the_capacity_goes_alone_once_every_permit_is_back() {
        let w = SendWindow::new();
        w.grant(Cost {
            batches: 4,
            records: 10,
        });
        assert_eq!(w.try_take(batch(1)), Ok(Taken::Yes));
        assert_eq!(w.try_take(batch(50)), Ok(Taken::No), "permits are out");
        w.grant(batch(1));
        assert_eq!(w.try_take(batch(50)), Ok(Taken::Yes), "all back: it goes");
        assert_eq!(w.available(), (3, -40));
        assert_eq!(w.try_take(batch(1)), Ok(Taken::No));
        w.grant(batch(50));
        assert_eq!(w.available(), (4, 10));
    }

    #[test]
    fn a_send_over_the_bound_waits_only_for_the_open_and_the_next_sends_wait_for_its_return() {
        let w = Arc::new(SendWindow::new());
        let w2 = w.clone();
        let over = std::thread::spawn(move || w2.take_over(batch(5)));
        while w.waiting() == 0 {
            std::thread::yield_now();
        }
        w.grant(Cost {
            batches: 2,
            records: 10,
        });
        assert_eq!(
            over.join().unwrap(),
            Ok(Taken::Yes),
            "waited for the open only"
        );
        assert_eq!(w.try_take(batch(1)), Ok(Taken::Yes));
        assert_eq!(w.available(), (0, 4));
        assert_eq!(w.take_over(batch(4)), Ok(Taken::Yes), "over the bound");
        assert_eq!(w.available(), (-1, 0));
        w.grant(batch(4));
        assert_eq!(
            w.try_take(batch(1)),
            Ok(Taken::No),
            "the overdraft comes back first"
        );
        w.grant(batch(1));
        w.grant(batch(5));
        assert_eq!(w.available(), (2, 10));
        assert_eq!(w.try_take(batch(1)), Ok(Taken::Yes));
    }

    #[test]
    fn a_watch_is_ready_once_permits_return_or_the_channel_fails_and_not_before() {
        let w = SendWindow::new();
        assert!(w.watch().is_empty(), "not open: nothing to wait for yet");
        w.grant(batch(2));
        assert!(!w.watch().is_empty(), "room already: ready at once");
        assert_eq!(w.try_take(batch(2)), Ok(Taken::Yes));
        // The grant's wakeup is old news once the channel is full again.
        assert!(w.watch().is_empty());
        assert!(w.watch().is_empty(), "watching again does not wake either");
        w.grant(batch(1));
        let watched = w.watch();
        assert!(!watched.is_empty(), "permits returned");
        // A task's select wakes on it without taking it.
        let mut sel = crossbeam_channel::Select::new();
        sel.recv(watched);
        assert_eq!(sel.try_ready(), Ok(0));
        assert_eq!(w.try_take(batch(1)), Ok(Taken::Yes));
        let watched = w.watch();
        assert!(watched.is_empty());
        w.fail(ExchangeError::Shutdown);
        assert!(
            !watched.is_empty(),
            "a failure wakes it: the send reports it"
        );
        assert!(!w.watch().is_empty());
    }

    #[test]
    fn a_waiting_sender_wakes_on_a_grant_and_on_a_failure() {
        let w = Arc::new(SendWindow::new());
        w.grant(batch(1));
        assert_eq!(w.try_take(batch(1)), Ok(Taken::Yes));
        let w2 = w.clone();
        let sender = std::thread::spawn(move || w2.take(batch(1), None));
        while w.waiting() == 0 {
            std::thread::yield_now();
        }
        assert_eq!(w.waits(), 1);
        w.grant(batch(1));
        assert_eq!(sender.join().unwrap(), Ok(Taken::Yes));

        let w2 = w.clone();
        let sender = std::thread::spawn(move || w2.take(batch(1), None));
        while w.waiting() == 0 {
            std::thread::yield_now();
        }
        w.fail(ExchangeError::Shutdown);
        assert_eq!(sender.join().unwrap(), Err(ExchangeError::Shutdown));
        assert_eq!(w.try_take(Cost::default()), Err(ExchangeError::Shutdown));
    }
}
