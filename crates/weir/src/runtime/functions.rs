//! The traits user code implements: sources, sinks, process functions and their state hooks.
//!
//! # The state-hook contract ([`CheckpointedFunction`])
//!
//! Every hook of one function instance runs on that instance's task thread, never
//! concurrently with `process`/`poll`/`invoke`, so functions need no locks:
//! 1. `initialize_state` — once per attempt, before the first record; tells whether the job
//!    restores (and hands over the operator state assigned to this subtask) or starts fresh.
//! 2. `snapshot_state` — when a checkpoint barrier passes the operator: everything processed
//!    before it is in, nothing after. It must be quick: it runs on the processing thread.
//! 3. `notify_checkpoint_complete(n)` — after checkpoint `n` (and so every earlier one) is
//!    durable. It may arrive late or, after a failure, not at all: never rely on it for
//!    correctness of state, only for side effects that may be repeated (committing output).
//! 4. `notify_checkpoint_aborted(n)` — checkpoint `n` will never complete.
//!
//! An `Err` from any hook (or a panic) fails the task and with it the job attempt; the
//! restart strategy then restores the latest completed checkpoint.

use crate::error::Result;
use crate::state::broadcast::{BroadcastContext, BroadcastStateStore, ReadOnlyBroadcastContext};
use crate::state::keyed::{KeyedContext, KeyedEndContext, KeyedStateStore};
use crate::state::operator::{InitContext, SnapshotContext};
use crate::state::schema::OperatorListDeclaration;
use crate::state::Key;

/// State hooks every user function can implement (Flink's `CheckpointedFunction` and
/// `CheckpointListener`); all methods default to doing nothing. See the module docs.
pub trait CheckpointedFunction {
    /// Restores (or initialises) the function's own operator state.
    fn initialize_state(&mut self, _ctx: &InitContext) -> Result<()> {
        Ok(())
    }
    /// Names the operator lists `initialize_state` reads, with their element types
    /// (`OperatorListDeclaration::of::<T>("name")`), so that `savepoint check` and a run
    /// decide them against a checkpoint before anything runs, without calling
    /// `initialize_state` (which may reach external systems). Default: none; an undeclared
    /// list is decided only when `initialize_state` reads it, and `savepoint check` says
    /// "decided at start (not declared)".
    fn operator_state(&self) -> Vec<OperatorListDeclaration> {
        Vec::new()
    }
    /// Records the function's operator state for a checkpoint.
    fn snapshot_state(&mut self, _ctx: &mut SnapshotContext) -> Result<()> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` is complete and durable.
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` was aborted.
    fn notify_checkpoint_aborted(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }
}

/// Where a function emits its output records (Flink's `Collector`).
pub struct Collector<'a, O> {
    pub(crate) buf: &'a mut Vec<O>,
    /// Records emitted with a timestamp of their own ([`Collector::collect_at`]): their
    /// index in `buf` and the timestamp. `None` where the output carries no timestamps.
    pub(crate) stamps: Option<&'a mut Vec<(usize, u64)>>,
    /// Where full batches go while the function is still emitting
    /// ([`Collector::spilling`], [`Collector::timestamped_spilling`]); `None`: `buf` grows
    /// until the operator takes it.
    spill: Option<Spill<'a, O>>,
}

/// A spilling collector's way downstream, and the first error it met there.
struct Spill<'a, O> {
    to: SpillTo<'a, O>,
    failed: Option<crate::error::Error>,
}

/// Where a timestamped spilling collector hands a full batch: its records and their
/// timestamps, which it drains (as [`Output::push_timestamped`] does, its usual body).
///
/// [`Output::push_timestamped`]: crate::runtime::output::Output::push_timestamped
pub(crate) type SendTimestamped<'a, O> = dyn FnMut(&mut Vec<O>, &mut Vec<u64>) -> Result<()> + 'a;

/// Where a spilling collector hands its full batches, with or without timestamps.
enum SpillTo<'a, O> {
    /// Records that take the operator's timestamp ([`Collector::spilling`]).
    Plain(&'a mut dyn FnMut(&mut Vec<O>) -> Result<()>),
    /// Records with timestamps ([`Collector::timestamped_spilling`]): `times` holds those of
    /// the records `buf` held before the call (the operator's, already stamped), the
    /// collector's `stamps` those emitted since by [`Collector::collect_at`].
    Timestamped {
        times: &'a mut Vec<u64>,
        to: &'a mut SendTimestamped<'a, O>,
    },
}

impl<'a, O> Collector<'a, O> {
    /// A collector into `buf` whose records take the operator's timestamp.
    #[inline]
    pub(crate) fn new(buf: &'a mut Vec<O>) -> Self {
        Collector {
            buf,
            stamps: None,
            spill: None,
        }
    }

    /// A collector into `buf` that also records the index and timestamp of each record
    /// emitted by [`Collector::collect_at`] in `stamps`.
    #[inline]
    pub(crate) fn timestamped(buf: &'a mut Vec<O>, stamps: &'a mut Vec<(usize, u64)>) -> Self {
        Collector {
            buf,
            stamps: Some(stamps),
            spill: None,
        }
    }

    /// A collector that hands every [`BATCH_SIZE`](crate::runtime::BATCH_SIZE) records to
    /// `to` as they are emitted, so `buf` never holds more. For what a function emits in one
    /// call without bound — a keyed function's whole state at end of input: W1 at 100 M
    /// keys emits 50 M counts per subtask, which buffered whole took 0.8–1.6 GB beside a
    /// disk backend kept under 2 GiB (heaptrack: the largest heap consumer at the end of the
    /// run). An error from `to` is kept for [`Collector::spilled`]; records after it are
    /// dropped (the task fails anyway). Records carry the operator's timestamp.
    pub(crate) fn spilling(
        buf: &'a mut Vec<O>,
        to: &'a mut dyn FnMut(&mut Vec<O>) -> Result<()>,
    ) -> Self {
        Collector {
            buf,
            stamps: None,
            spill: Some(Spill {
                to: SpillTo::Plain(to),
                failed: None,
            }),
        }
    }

    /// [`Collector::spilling`] for records with timestamps: a collector like
    /// [`Collector::timestamped`] that hands every [`BATCH_SIZE`](crate::runtime::BATCH_SIZE)
    /// records to `to` with their timestamps as they are emitted. For a window fired for
    /// all its keys at once ([`KeyedProcessFunction::on_watermark`]): a pane may hold every
    /// key of the subtask, and its results buffered whole before the first went downstream
    /// took as much memory again as the pane. `times` holds the timestamps of the records
    /// already in `buf` (the operator's earlier output, not sent yet), every one of them.
    ///
    /// A batch goes downstream only once each of its records has a timestamp: those the
    /// function emits with [`Collector::collect_at`]. A record emitted by
    /// [`Collector::collect`] takes the timestamp `on_watermark` returns, known only when
    /// it returns; from that record on `buf` grows until the operator stamps and sends it
    /// (as every collector did before). Errors and dropped records as with
    /// [`Collector::spilling`].
    pub(crate) fn timestamped_spilling(
        buf: &'a mut Vec<O>,
        stamps: &'a mut Vec<(usize, u64)>,
        times: &'a mut Vec<u64>,
        to: &'a mut SendTimestamped<'a, O>,
    ) -> Self {
        // A buffer grown past a batch by earlier output would hand on batches as large.
        let batch = crate::runtime::BATCH_SIZE;
        if buf.capacity() > batch && buf.len() <= batch {
            buf.shrink_to(batch);
        }
        Collector {
            buf,
            stamps: Some(stamps),
            spill: Some(Spill {
                to: SpillTo::Timestamped { times, to },
                failed: None,
            }),
        }
    }

    /// The first error a spilling collector met handing a batch downstream.
    pub(crate) fn spilled(&mut self) -> Result<()> {
        match self.spill.as_mut().and_then(|s| s.failed.take()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Emits one record downstream.
    #[inline]
    pub fn collect(&mut self, record: O) {
        // `Vec::push` makes this test anyway; made here, the compiler drops push's own (so
        // the per-record path is unchanged), and a full buffer is where a spilling
        // collector hands its batch on.
        if self.buf.len() == self.buf.capacity() {
            self.full();
        }
        self.buf.push(record);
    }

    /// `buf` is full: grow it as `push` would, or hand a spilling collector's batch on.
    #[cold]
    #[inline(never)]
    fn full(&mut self) {
        let Some(spill) = self.spill.as_mut() else {
            self.buf.reserve(1);
            return;
        };
        let batch = crate::runtime::BATCH_SIZE;
        if self.buf.len() >= batch {
            let sent = match &mut spill.to {
                SpillTo::Plain(to) => spill.failed.is_none().then(|| to(self.buf)),
                SpillTo::Timestamped { times, to } => {
                    let stamped = self.stamps.as_deref().map_or(0, Vec::len);
                    if times.len() + stamped != self.buf.len() {
                        // A record without a timestamp yet (see `timestamped_spilling`).
                        self.buf.reserve(1);
                        return;
                    }
                    if let Some(stamps) = self.stamps.as_deref_mut() {
                        times.extend(stamps.drain(..).map(|(_, t)| t));
                    }
                    let sent = spill.failed.is_none().then(|| to(self.buf, times));
                    times.clear();
                    sent
                }
            };
            if let Some(Err(e)) = sent {
                spill.failed = Some(e);
            }
            self.buf.clear();
        }
        self.buf.reserve_exact(batch - self.buf.len());
    }

    /// Emits `record` with `timestamp` instead of the one the operator would give it (the
    /// input record's or the timer's): a window's results carry the window's last
    /// millisecond, whatever fired it (Flink's `TimestampedCollector.setAbsoluteTimestamp`
    /// in the window operator), so early and late firings land downstream in the same
    /// event-time place as the on-time one.
    #[inline]
    pub(crate) fn collect_at(&mut self, record: O, timestamp: u64) {
        // As in `collect`: where a spilling collector hands its full batch on.
        if self.buf.len() == self.buf.capacity() {
            self.full();
        }
        if let Some(stamps) = self.stamps.as_deref_mut() {
            stamps.push((self.buf.len(), timestamp));
        }
        self.buf.push(record);
    }
}

/// What a source's `poll` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceStatus {
    /// Records were (or may soon be) produced; poll again.
    More,
    /// Nothing available right now; the task waits a moment before polling again.
    Idle,
    /// The source is exhausted: no more records, ever.
    Finished,
}

/// A replayable source. Its position must live in operator state (`snapshot_state`), so
/// that a restore rewinds it to exactly the checkpointed record: that is what makes the
/// job's state exactly-once (docs/architecture.md §8).
///
/// Each parallel subtask gets its own clone; `initialize_state` tells it which subtask it is.
/// A checkpoint barrier is emitted only between two `poll` calls.
pub trait SourceFunction<T>: CheckpointedFunction + Clone + Send + 'static {
    /// Appends at most `max` records to `out`.
    fn poll(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus>;
}

/// A sink: the end of a stream. Exactly-once output needs two-phase commit (a later
/// milestone); a sink that writes only at `finish` is exactly-once for bounded jobs.
pub trait SinkFunction<T>: CheckpointedFunction + Clone + Send + 'static {
    /// Consumes a batch of records (the vector is drained by the sink).
    fn invoke(&mut self, batch: &mut Vec<T>) -> Result<()>;
    /// Every input has ended: flush and close.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

/// A non-keyed function from records to any number of records, with state hooks.
pub trait ProcessFunction<I, O>: CheckpointedFunction + Clone + Send + 'static {
    /// Handles one record.
    fn process(&mut self, record: I, out: &mut Collector<'_, O>) -> Result<()>;
    /// Every input has ended; emit anything still held.
    fn on_end_of_input(&mut self, _out: &mut Collector<'_, O>) -> Result<()> {
        Ok(())
    }
}

/// A function on a keyed stream: sees the current key and reads/writes keyed state.
pub trait KeyedProcessFunction<K: Key, I, O>:
    CheckpointedFunction + Clone + Send + 'static
{
    /// Declares the keyed states (once per attempt, after `initialize_state`).
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> Result<()>;
    /// Handles one record; `ctx` is scoped to its key.
    fn process(
        &mut self,
        record: I,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, O>,
    ) -> Result<()>;
    /// A timer is due: a processing-time timer
    /// ([`KeyedContext::register_processing_time_timer`]) once the wall clock reaches it,
    /// an event-time timer ([`KeyedContext::register_event_time_timer`]) once the watermark
    /// does. [`KeyedContext::time_domain`] tells which; `ctx` is scoped to the key it was
    /// registered for. Runs on the task thread between batches, in timestamp order per
    /// domain. What it emits for an event-time timer carries the timer's time as timestamp.
    fn on_timer(
        &mut self,
        _timestamp_ms: u64,
        _ctx: &mut KeyedContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<()> {
        Ok(())
    }
    /// The watermark advanced to `watermark`: called before the event-time timers due at
    /// it fire, again and again until it returns `Ok(None)`. For functions that keep their
    /// own firing order across keys — the window operator fires a whole window at once
    /// instead of one timer per (key, window), the timer queue's costliest use — each call
    /// emits one group of results into `out` and returns their timestamp. The default
    /// fires nothing.
    fn on_watermark(
        &mut self,
        _watermark: u64,
        _ctx: &mut KeyedEndContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<Option<u64>> {
        Ok(None)
    }
    /// Every input has ended; `ctx` reaches every key of this subtask. Event-time timers
    /// have all fired by now (the end of input advances the watermark to its maximum);
    /// processing-time timers still pending do not fire.
    fn on_end_of_input(
        &mut self,
        _ctx: &mut KeyedEndContext<'_, K>,
        _out: &mut Collector<'_, O>,
    ) -> Result<()> {
        Ok(())
    }
}

/// A function over a main input `I` and a broadcast input `B` (Flink's
/// `BroadcastProcessFunction`): every broadcast element reaches every subtask and may update
/// the broadcast state; main elements see that state read-only. Keep the state a function
/// of the broadcast elements alone, so that it stays identical on every subtask.
pub trait BroadcastProcessFunction<I, B, O>: CheckpointedFunction + Clone + Send + 'static {
    /// Declares the broadcast maps (once per attempt, after `initialize_state`).
    fn open(&mut self, states: &mut BroadcastStateStore<'_>) -> Result<()>;
    /// Handles one element of the main input.
    fn process_element(
        &mut self,
        record: I,
        ctx: &ReadOnlyBroadcastContext<'_>,
        out: &mut Collector<'_, O>,
    ) -> Result<()>;
    /// Handles one element of the broadcast input.
    fn process_broadcast_element(
        &mut self,
        value: B,
        ctx: &mut BroadcastContext<'_>,
        out: &mut Collector<'_, O>,
    ) -> Result<()>;
    /// Every input has ended.
    fn on_end_of_input(
        &mut self,
        _ctx: &ReadOnlyBroadcastContext<'_>,
        _out: &mut Collector<'_, O>,
    ) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Collector;
    use crate::error::Error;
    use crate::runtime::BATCH_SIZE;

    #[test]
    fn a_spilling_collector_hands_on_full_batches_in_order_while_the_function_emits() {
        let mut buf = Vec::new();
        let mut got: Vec<Vec<u64>> = Vec::new();
        let mut to = |b: &mut Vec<u64>| {
            got.push(std::mem::take(b));
            Ok(())
        };
        let n = 2 * BATCH_SIZE as u64 + 7;
        let mut out = Collector::spilling(&mut buf, &mut to);
        for i in 0..n {
            out.collect(i);
            assert!(
                out.buf.capacity() <= BATCH_SIZE,
                "the buffer outgrew a batch"
            );
        }
        out.spilled().unwrap();
        drop(out);
        assert_eq!(
            got.len(),
            2,
            "two full batches went downstream during the calls"
        );
        assert!(got.iter().all(|b| b.len() == BATCH_SIZE));
        assert_eq!(buf.len(), 7, "the rest waits for the operator");
        let all: Vec<u64> = got.into_iter().flatten().chain(buf).collect();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn a_spilling_collector_keeps_the_first_downstream_error_and_drops_what_follows() {
        let mut buf = Vec::new();
        let mut calls = 0;
        let mut to = |_: &mut Vec<u64>| {
            calls += 1;
            Err(Error::InvalidJob("downstream gone".into()))
        };
        let mut out = Collector::spilling(&mut buf, &mut to);
        for i in 0..3 * BATCH_SIZE as u64 {
            out.collect(i);
        }
        let e = out.spilled().unwrap_err();
        assert!(e.to_string().contains("downstream gone"), "{e}");
        out.spilled().unwrap();
        drop(out);
        assert_eq!(calls, 1, "nothing more is handed on after an error");
        assert!(buf.len() <= BATCH_SIZE);
    }

    #[test]
    fn a_plain_collector_grows_as_a_vec_does() {
        let mut buf = Vec::new();
        let mut out = Collector::new(&mut buf);
        for i in 0..3 * BATCH_SIZE as u64 {
            out.collect(i);
        }
        assert_eq!(buf, (0..3 * BATCH_SIZE as u64).collect::<Vec<_>>());
    }
}
