//! The keyed process operator: a [`KeyedProcessFunction`] with its keyed state backend,
//! its processing-time and event-time timers, and the time its context reports.
//!
//! Records keep their timestamps: what `process` emits gets the input record's timestamp,
//! what an event-time timer emits gets the timer's time, and what a processing-time timer
//! emits has none (Flink's `TimestampedCollector`); a record the function emits with its
//! own ([`Collector::collect_at`]: window results) keeps that one. On a watermark the operator first fires
//! every event-time timer at or below it, in time order, then forwards it, so everything
//! the timers emit precedes the watermark downstream.

use crate::checkpoint::barrier::BarrierKind;
use crate::error::Result;
use crate::runtime::event::CheckpointBarrier;
use crate::runtime::functions::{Collector, KeyedProcessFunction};
use crate::runtime::output::{OperatorSnapshotPart, Output, TaskSnapshot};
use crate::runtime::watermark::WatermarkStatus;
use crate::runtime::BATCH_SIZE;
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed::{
    KeyedContext, KeyedEndContext, KeyedStateBackend, KeyedStateStore, TimeDomain,
};
use crate::state::operator::SnapshotContext;
use crate::state::Key;

use super::OperatorContext;

/// A [`KeyedProcessFunction`] with its keyed state backend.
pub struct KeyedProcessOp<K, O, F, KS> {
    uid: String,
    f: F,
    key_fn: KS,
    backend: KeyedStateBackend<K>,
    out: Vec<O>,
    out_timestamps: Vec<u64>,
    /// Records of `out` the function emitted with their own timestamp
    /// ([`Collector::collect_at`]), applied when `out_timestamps` is filled.
    stamps: Vec<(usize, u64)>,
    next: Box<dyn Output<O>>,
}

impl<K: Key, O, F, KS> KeyedProcessOp<K, O, F, KS> {
    /// Builds the operator: restores operator state, then keyed state, then calls `open`.
    pub(crate) fn new<I>(
        mut f: F,
        key_fn: KS,
        mut ctx: OperatorContext,
        next: Box<dyn Output<O>>,
    ) -> Result<Self>
    where
        F: KeyedProcessFunction<K, I, O>,
    {
        ctx.init_function(&mut f)?;
        let range = KeyGroupRange::for_subtask(ctx.subtask, ctx.parallelism, ctx.max_parallelism);
        let mut backend = KeyedStateBackend::with_kind(
            &ctx.state_backend,
            range,
            ctx.max_parallelism,
            std::mem::take(&mut ctx.keyed_state),
        )?;
        backend.set_owner(&ctx.uid);
        backend.init_timers()?;
        f.open(&mut KeyedStateStore::new(&mut backend))?;
        let unclaimed = backend.unclaimed();
        for name in &unclaimed {
            eprintln!(
                "weir: warning: operator '{}' no longer declares keyed state '{name}'; \
                 its restored entries are dropped",
                ctx.uid
            );
        }
        backend.continue_restored_chain(ctx.restored_chain.take(), &unclaimed);
        Ok(KeyedProcessOp {
            uid: ctx.uid,
            f,
            key_fn,
            backend,
            out: Vec::new(),
            out_timestamps: Vec::new(),
            stamps: Vec::new(),
            next,
        })
    }

    /// Sends what the function emitted, with timestamps if `timestamped`.
    fn emit(&mut self, timestamped: bool) -> Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        if timestamped {
            self.next
                .push_timestamped(&mut self.out, &mut self.out_timestamps)
        } else {
            self.next.push(&mut self.out)
        }
    }
}

impl<K, O, F, KS> KeyedProcessOp<K, O, F, KS>
where
    K: Key,
    O: Send,
{
    /// Sends what the function emitted with timestamps, in batches of at most
    /// [`BATCH_SIZE`] (a whole window fired at once may hold every key of the subtask).
    fn emit_batches(&mut self) -> Result<()> {
        if self.out.len() <= BATCH_SIZE {
            return if self.out.len() == BATCH_SIZE {
                self.emit(true)
            } else {
                Ok(())
            };
        }
        let mut records = std::mem::take(&mut self.out).into_iter();
        let mut times = std::mem::take(&mut self.out_timestamps).into_iter();
        loop {
            let mut out: Vec<O> = records.by_ref().take(BATCH_SIZE).collect();
            if out.is_empty() {
                return Ok(());
            }
            let mut ts: Vec<u64> = times.by_ref().take(BATCH_SIZE).collect();
            self.next.push_timestamped(&mut out, &mut ts)?;
        }
    }
}

impl<K, O, F, KS> KeyedProcessOp<K, O, F, KS>
where
    K: Key,
    O: Send,
{
    /// The one loop that calls the function's `process`, for batches with and without
    /// timestamps alike. A single call site lets the compiler inline `process` into it, as
    /// it did before event time: with a second loop for timestamped batches it stopped doing
    /// so, and W1 ran ~18 % more instructions per record (cachegrind). Both callers pass
    /// the same iterator type, so there is one instance of this loop per operator.
    fn process_records<I>(&mut self, records: std::vec::Drain<'_, I>) -> Result<()>
    where
        F: KeyedProcessFunction<K, I, O>,
        KS: Fn(&I) -> K + Send,
    {
        // One collector for the batch, not one per record.
        let mut out = Collector::timestamped(&mut self.out, &mut self.stamps);
        for r in records {
            let key = (self.key_fn)(&r);
            let mut ctx = KeyedContext {
                key: &key,
                backend: &mut self.backend,
            };
            self.f.process(r, &mut ctx, &mut out)?;
        }
        Ok(())
    }

    /// Processes a timestamped batch run by run of equal timestamps (event time at a
    /// realistic rate has many records per millisecond), each through [`Self::process_records`]
    /// with the run's timestamp in the context. The batch is reversed once so that every run
    /// can be drained from the end without shifting the rest: O(records) in all.
    fn process_timestamped<I>(
        &mut self,
        batch: &mut Vec<I>,
        timestamps: &mut Vec<u64>,
    ) -> Result<()>
    where
        F: KeyedProcessFunction<K, I, O>,
        KS: Fn(&I) -> K + Send,
    {
        batch.reverse();
        timestamps.reverse();
        while let Some(&t) = timestamps.last() {
            let run = timestamps.iter().rev().take_while(|&&x| x == t).count();
            let from = batch.len() - run;
            batch[from..].reverse();
            timestamps.truncate(from);
            self.backend.time.timestamp = Some(t);
            self.process_records(batch.drain(from..))?;
            stamp(
                &mut self.out_timestamps,
                self.out.len(),
                t,
                &mut self.stamps,
            );
        }
        self.backend.time.timestamp = None;
        Ok(())
    }
}

/// Fills `out_timestamps` up to `len` records: `default` (the input record's timestamp or
/// the timer's) for each, except the records the function emitted with their own
/// ([`Collector::collect_at`]), whose indices `own` holds.
fn stamp(out_timestamps: &mut Vec<u64>, len: usize, default: u64, own: &mut Vec<(usize, u64)>) {
    out_timestamps.resize(len, default);
    for (i, t) in own.drain(..) {
        if let Some(slot) = out_timestamps.get_mut(i) {
            *slot = t;
        }
    }
}

impl<K, I, O, F, KS> Output<I> for KeyedProcessOp<K, O, F, KS>
where
    K: Key,
    O: Send,
    F: KeyedProcessFunction<K, I, O>,
    KS: Fn(&I) -> K + Send,
{
    fn push(&mut self, batch: &mut Vec<I>) -> Result<()> {
        self.process_records(batch.drain(..))?;
        self.stamps.clear(); // no timestamps downstream
        self.emit(false)
    }
    fn push_timestamped(&mut self, batch: &mut Vec<I>, timestamps: &mut Vec<u64>) -> Result<()> {
        let processed = self.process_timestamped(batch, timestamps);
        self.backend.time.timestamp = None;
        processed?;
        self.emit(true)
    }
    fn snapshot(&mut self, b: CheckpointBarrier, s: &mut TaskSnapshot) -> Result<()> {
        let mut ctx = SnapshotContext::new(b.id);
        self.f.snapshot_state(&mut ctx)?;
        s.parts.push(OperatorSnapshotPart {
            uid: self.uid.clone(),
            operator_state: ctx.lists,
            keyed: Some(match b.kind {
                // A frozen task's snapshot stands in for it in later checkpoints: full.
                BarrierKind::Checkpoint if !s.frozen => self.backend.snapshot_checkpoint(b.id)?,
                // A savepoint is always full and canonical, in its own folder.
                _ => self.backend.snapshot()?,
            }),
        });
        self.next.snapshot(b, s)
    }
    fn end_of_input(&mut self) -> Result<()> {
        let mut ctx = KeyedEndContext {
            backend: &mut self.backend,
        };
        // The function may emit its whole state (a disk backend's may be larger than
        // memory): batches go downstream as they fill, never one buffer of it all.
        let next = &mut self.next;
        let mut downstream = |batch: &mut Vec<O>| next.push(batch);
        let mut out = Collector::spilling(&mut self.out, &mut downstream);
        self.f.on_end_of_input(&mut ctx, &mut out)?;
        out.spilled()?;
        if !self.out.is_empty() {
            self.next.push(&mut self.out)?;
        }
        self.next.end_of_input()
    }
    fn flush(&mut self) -> Result<()> {
        self.next.flush()
    }
    fn notify_complete(&mut self, id: u64) -> Result<()> {
        self.backend.notify_complete(id)?;
        self.f.notify_checkpoint_complete(id)?;
        self.next.notify_complete(id)
    }
    fn notify_aborted(&mut self, id: u64) -> Result<()> {
        self.backend.notify_aborted(id);
        self.f.notify_checkpoint_aborted(id)?;
        self.next.notify_aborted(id)
    }
    fn on_processing_time(&mut self, now_ms: u64) -> Result<()> {
        self.backend.time.domain = Some(TimeDomain::ProcessingTime);
        self.backend.time.timestamp = None;
        let fired = (|| {
            while let Some((time, key)) = self.backend.pop_due_timer(now_ms) {
                let mut ctx = KeyedContext {
                    key: &key,
                    backend: &mut self.backend,
                };
                self.f
                    .on_timer(time, &mut ctx, &mut Collector::new(&mut self.out))?;
                if self.out.len() >= BATCH_SIZE {
                    self.next.push(&mut self.out)?;
                }
            }
            self.emit(false)
        })();
        self.backend.time.domain = None;
        fired?;
        self.next.on_processing_time(now_ms)
    }
    fn on_watermark(&mut self, watermark: u64) -> Result<()> {
        self.backend.time.watermark = watermark;
        self.backend.time.domain = Some(TimeDomain::EventTime);
        let fired = (|| {
            loop {
                let mut ctx = KeyedEndContext {
                    backend: &mut self.backend,
                };
                // A window fired for all its keys may hold every key of the subtask: its
                // results go downstream a batch at a time as they are emitted, never
                // buffered whole (`self.out_timestamps`: those of the records left in
                // `self.out` by the window before, all stamped).
                let next = &mut self.next;
                let mut downstream =
                    |batch: &mut Vec<O>, times: &mut Vec<u64>| next.push_timestamped(batch, times);
                let mut out = Collector::timestamped_spilling(
                    &mut self.out,
                    &mut self.stamps,
                    &mut self.out_timestamps,
                    &mut downstream,
                );
                let fired = self.f.on_watermark(watermark, &mut ctx, &mut out)?;
                out.spilled()?;
                let Some(time) = fired else {
                    break;
                };
                stamp(
                    &mut self.out_timestamps,
                    self.out.len(),
                    time,
                    &mut self.stamps,
                );
                self.emit_batches()?;
            }
            while let Some((time, key)) = self.backend.pop_due_event_timer(watermark) {
                self.backend.time.timestamp = Some(time);
                let mut ctx = KeyedContext {
                    key: &key,
                    backend: &mut self.backend,
                };
                self.f.on_timer(
                    time,
                    &mut ctx,
                    &mut Collector::timestamped(&mut self.out, &mut self.stamps),
                )?;
                stamp(
                    &mut self.out_timestamps,
                    self.out.len(),
                    time,
                    &mut self.stamps,
                );
                if self.out.len() >= BATCH_SIZE {
                    self.emit(true)?;
                }
            }
            self.emit(true)
        })();
        self.backend.time.domain = None;
        self.backend.time.timestamp = None;
        fired?;
        self.next.on_watermark(watermark)
    }
    fn on_watermark_status(&mut self, status: WatermarkStatus) -> Result<()> {
        self.next.on_watermark_status(status)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::runtime::functions::CheckpointedFunction;
    use crate::state::keyed::StateBackendKind;

    /// The context of a fresh (not restored) subtask 0 of 1 of operator `uid`, over 16 key
    /// groups on the memory backend.
    fn ctx(uid: &str) -> OperatorContext {
        OperatorContext {
            uid: uid.into(),
            subtask: 0,
            parallelism: 1,
            max_parallelism: 16,
            restored: false,
            operator_state: Default::default(),
            keyed_state: Default::default(),
            restored_chain: None,
            job_name: "test".into(),
            state_backend: StateBackendKind::Memory,
        }
    }

    /// A batch that reached the end of the chain: records and their timestamps.
    type Batch = (Vec<u64>, Vec<u64>);

    /// The batches that reached the end of the chain.
    type Sent = Arc<Mutex<Vec<Batch>>>;

    /// The end of the chain: keeps each timestamped batch as it arrives.
    struct Batches(Sent);

    impl Output<u64> for Batches {
        fn push(&mut self, _: &mut Vec<u64>) -> Result<()> {
            panic!("a window's results carry timestamps");
        }
        fn push_timestamped(&mut self, batch: &mut Vec<u64>, ts: &mut Vec<u64>) -> Result<()> {
            let b = (std::mem::take(batch), std::mem::take(ts));
            self.0.lock().unwrap().push(b);
            Ok(())
        }
        fn on_watermark(&mut self, _: u64) -> Result<()> {
            Ok(())
        }
        fn on_watermark_status(&mut self, _: WatermarkStatus) -> Result<()> {
            Ok(())
        }
        fn snapshot(&mut self, _: CheckpointBarrier, _: &mut TaskSnapshot) -> Result<()> {
            Ok(())
        }
        fn flush(&mut self) -> Result<()> {
            Ok(())
        }
        fn end_of_input(&mut self) -> Result<()> {
            Ok(())
        }
        fn notify_complete(&mut self, _: u64) -> Result<()> {
            Ok(())
        }
        fn notify_aborted(&mut self, _: u64) -> Result<()> {
            Ok(())
        }
        fn on_processing_time(&mut self, _: u64) -> Result<()> {
            Ok(())
        }
    }

    /// Fires one group of results per `on_watermark` call, as the window operator fires a
    /// window: `groups[i]` is (records, their timestamp, emitted with `collect_at`); the
    /// records are numbered on from the previous group's. Notes how many batches had gone
    /// downstream when each call returned.
    #[derive(Clone)]
    struct Groups {
        groups: Vec<(u64, u64, bool)>,
        next: usize,
        emitted: u64,
        sent: Sent,
        sent_at_return: Arc<Mutex<Vec<usize>>>,
    }

    impl CheckpointedFunction for Groups {}

    impl KeyedProcessFunction<u64, u64, u64> for Groups {
        fn open(&mut self, _: &mut KeyedStateStore<'_, u64>) -> Result<()> {
            Ok(())
        }
        fn process(
            &mut self,
            _: u64,
            _: &mut KeyedContext<'_, u64>,
            _: &mut Collector<'_, u64>,
        ) -> Result<()> {
            Ok(())
        }
        fn on_watermark(
            &mut self,
            _: u64,
            _: &mut KeyedEndContext<'_, u64>,
            out: &mut Collector<'_, u64>,
        ) -> Result<Option<u64>> {
            let Some(&(n, time, own)) = self.groups.get(self.next) else {
                return Ok(None);
            };
            self.next += 1;
            for _ in 0..n {
                match own {
                    true => out.collect_at(self.emitted, time),
                    false => out.collect(self.emitted),
                }
                self.emitted += 1;
            }
            let sent = self.sent.lock().unwrap().len();
            self.sent_at_return.lock().unwrap().push(sent);
            Ok(Some(time))
        }
    }

    /// Fires `groups` at one watermark; returns the batches sent and, per group, how many
    /// had been sent when its firing returned.
    fn fire(groups: Vec<(u64, u64, bool)>) -> (Vec<Batch>, Vec<usize>) {
        let sent = Sent::default();
        let sent_at_return = Arc::new(Mutex::new(Vec::new()));
        let f = Groups {
            groups,
            next: 0,
            emitted: 0,
            sent: sent.clone(),
            sent_at_return: sent_at_return.clone(),
        };
        let ctx = ctx("groups");
        let key = |r: &u64| *r;
        let mut op =
            KeyedProcessOp::new::<u64>(f, key, ctx, Box::new(Batches(sent.clone()))).unwrap();
        Output::<u64>::on_watermark(&mut op, 1000).unwrap();
        let sent = std::mem::take(&mut *sent.lock().unwrap());
        let at_return = std::mem::take(&mut *sent_at_return.lock().unwrap());
        (sent, at_return)
    }

    #[test]
    fn a_fired_windows_results_go_downstream_in_batches_before_its_firing_returns() {
        let n = 3 * BATCH_SIZE as u64 + 5;
        let (sent, at_return) = fire(vec![(n, 999, true)]);
        assert_eq!(
            at_return,
            [3],
            "the window's results were buffered whole before going downstream"
        );
        assert!(sent
            .iter()
            .all(|(b, t)| b.len() <= BATCH_SIZE && t.len() == b.len()));
        let records: Vec<u64> = sent.iter().flat_map(|(b, _)| b.clone()).collect();
        assert_eq!(records, (0..n).collect::<Vec<_>>());
        assert!(sent.iter().all(|(_, t)| t.iter().all(|&t| t == 999)));
    }

    #[test]
    fn the_window_operator_fires_a_pane_a_batch_at_a_time() {
        use crate::runtime::windows::operator::{ReduceAggregate, WindowAggregate};
        use crate::runtime::windows::{TimeWindow, TumblingEventTimeWindows};
        let add: fn(u64, u64) -> u64 = |a, b| a + b;
        let sent = Sent::default();
        // Called for each key as the pane fires: notes the batches gone downstream by then.
        let sent_during = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let key_of = {
            let (sent, during) = (sent.clone(), sent_during.clone());
            move |k: &u64, _: TimeWindow, _: u64| {
                let n = sent.lock().unwrap().len();
                during.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
                *k
            }
        };
        let window = TumblingEventTimeWindows::of(std::time::Duration::from_secs(1)).unwrap();
        let f = WindowAggregate::new(window, ReduceAggregate(add), key_of);
        let ctx = ctx("window");
        let key = |r: &u64| *r;
        let next = Box::new(Batches(sent.clone()));
        let mut op = KeyedProcessOp::new::<u64>(f, key, ctx, next).unwrap();
        // One pane of the window [0, 1000) holding 3 batches and a bit of keys.
        let n = 3 * BATCH_SIZE as u64 + 5;
        let (mut records, mut ts): (Vec<u64>, Vec<u64>) = (0..n).map(|k| (k, 500)).unzip();
        Output::<u64>::push_timestamped(&mut op, &mut records, &mut ts).unwrap();
        Output::<u64>::on_watermark(&mut op, 999).unwrap();
        // Handed on as they filled batches, while the pane was still firing.
        assert_eq!(
            sent_during.load(std::sync::atomic::Ordering::Relaxed),
            3,
            "the pane's results were buffered whole before going downstream"
        );
        let sent = std::mem::take(&mut *sent.lock().unwrap());
        assert!(sent
            .iter()
            .all(|(b, t)| b.len() <= BATCH_SIZE && t.len() == b.len()));
        let mut keys: Vec<u64> = sent.iter().flat_map(|(b, _)| b.clone()).collect();
        keys.sort_unstable();
        assert_eq!(keys, (0..n).collect::<Vec<_>>());
        assert!(sent.iter().all(|(_, t)| t.iter().all(|&t| t == 999)));
    }

    #[test]
    fn results_left_by_an_earlier_window_and_unstamped_ones_keep_their_timestamps() {
        let b = BATCH_SIZE as u64;
        // 100 results left over from the first window (less than a batch), a window of
        // 2 batches and a half stamped by the function, then one of 2 batches emitted
        // without a timestamp of their own (buffered until its firing returns).
        let groups = vec![
            (100, 10, true),
            (2 * b + b / 2, 20, true),
            (2 * b, 30, false),
        ];
        let (sent, at_return) = fire(groups);
        assert_eq!(at_return, [0, 2, 2]);
        assert!(sent
            .iter()
            .all(|(b, t)| b.len() <= BATCH_SIZE && t.len() == b.len()));
        let (mut records, mut times) = (Vec::new(), Vec::new());
        for (b, t) in sent {
            records.extend(b);
            times.extend(t);
        }
        let total = 100 + 2 * b + b / 2 + 2 * b;
        assert_eq!(records, (0..total).collect::<Vec<_>>());
        let want: Vec<u64> = (0..total)
            .map(|i| match i {
                i if i < 100 => 10,
                i if i < 100 + 2 * b + b / 2 => 20,
                _ => 30,
            })
            .collect();
        assert_eq!(times, want);
    }
}
