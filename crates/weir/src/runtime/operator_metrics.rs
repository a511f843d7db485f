//! Per-operator figures inside a chain: records in and out, busy time and the current
//! watermark of every operator, not only of the task it is chained into — what the
//! dashboard's overview, `/api/job` and `/metrics` show per operator and subtask (issue 14).
//!
//! A chain is a stack of [`Output`]s called directly, so the engine cannot tell one
//! chained operator's work from the next one's by looking at the task. Instead each *link*
//! of a chain — the input of every operator, and the output of the last — is wrapped in a
//! [`Metered`] output when the task is built (`spawn`), which counts what passes through it
//! and the time spent below it:
//!
//! ```text
//!  input task:  [link 0] op 0 [link 1] op 1 … op k-1 [link k] → channels / sink
//!  source task:    (—)  src  [link 1] op 1 … op k-1 [link k] → channels / sink
//! ```
//!
//! Counting is per batch (one call through a link), never per record, and each counter has
//! one writer (the task thread): a link keeps running totals in plain fields and publishes
//! them with relaxed stores, so no locked read-modify-write happens on the hot path. Two
//! clock reads per batch per link measure the time below it; an operator's busy time is
//! the time below its input link minus the time below its output link
//! ([`ChainMetrics::figures`]). Backpressure stays per task: it is time blocked in the
//! channel writer behind the last link, so no chained operator is charged with it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::error::Result;
use crate::runtime::event::CheckpointBarrier;
use crate::runtime::output::{Output, TaskSnapshot};
use crate::runtime::watermark::{WatermarkStatus, MAX_WATERMARK};

/// What passed through one link of a chain, over every attempt (relaxed atomics written by
/// the task thread, read by status reads).
#[derive(Debug, Default)]
pub struct LinkMetrics {
    /// Records pushed through the link.
    records: AtomicU64,
    /// Nanoseconds spent in calls through the link (the operators below it, and the
    /// channel writer at the end of the chain).
    nanos: AtomicU64,
    /// The last watermark that passed (0: none yet in this attempt).
    watermark: AtomicU64,
}

/// The links of one task's chain: `operators + 1` of them (see the module docs).
#[derive(Debug)]
pub struct ChainMetrics {
    links: Vec<LinkMetrics>,
}

impl ChainMetrics {
    /// Links for a chain of `operators` operators.
    pub fn new(operators: usize) -> Self {
        ChainMetrics {
            links: (0..=operators).map(|_| LinkMetrics::default()).collect(),
        }
    }

    /// The link into operator `i` of the chain (`i == operators`: out of the last).
    pub(crate) fn link(self: &Arc<Self>, i: usize) -> LinkHandle {
        LinkHandle {
            chain: self.clone(),
            i,
        }
    }

    /// Each operator's figures, head first, from the task's own counters: `records_in` the
    /// records that entered the task, `busy_ns` and `backpressured_ns` its [`TaskLoad`] times, `now_ms`
    /// the wall clock the watermark lag is measured against.
    ///
    /// The head is charged with the task's busy time minus what the links below it
    /// measured (so a source's polling, the task loop and synchronous snapshots are the
    /// head's); every other operator with the time below its input link minus the time
    /// below its output link; the last also with the channel writer's time, except the
    /// time blocked on a full channel, which is backpressure and stays the task's.
    ///
    /// [`TaskLoad`]: crate::runtime::load::TaskLoad
    pub(crate) fn figures(&self, task: TaskFigures) -> Vec<OperatorFigures> {
        let k = self.links.len() - 1;
        let nanos = |i: usize| self.links[i].nanos.load(Relaxed);
        let records = |i: usize| self.links[i].records.load(Relaxed);
        // Time in and below operator i (what its input link saw); the head's is all the
        // task's non-idle time, the end's only what it spent blocked.
        let below = |i: usize| match i {
            0 => task.busy_ns + task.backpressured_ns,
            i if i == k => task.backpressured_ns,
            i => nanos(i),
        };
        let watermark = |i: usize| {
            let w = self.links[i].watermark.load(Relaxed);
            (w > 0 && w < MAX_WATERMARK).then_some(w)
        };
        (0..k)
            .map(|i| {
                // An operator that makes watermarks (a source, a timestamp assigner) has
                // none coming in: its watermark is the one it emits.
                let w = watermark(i).or_else(|| watermark(i + 1));
                OperatorFigures {
                    records_in: if i == 0 { task.records_in } else { records(i) },
                    records_out: records(i + 1),
                    busy_ms: below(i).saturating_sub(below(i + 1)) / 1_000_000,
                    watermark_ms: w,
                    watermark_lag_ms: w.map(|w| task.now_ms.saturating_sub(w)),
                }
            })
            .collect()
    }
}

/// A task's own counters, as [`ChainMetrics::figures`] needs them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskFigures {
    pub records_in: u64,
    pub busy_ns: u64,
    pub backpressured_ns: u64,
    pub now_ms: u64,
}

/// One operator's figures in one subtask.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OperatorFigures {
    /// Records that reached it (a source: records it polled), over every attempt.
    pub records_in: u64,
    /// Records it emitted (0 for a sink), over every attempt.
    pub records_out: u64,
    /// Milliseconds it worked, over every attempt: the time below its input link minus
    /// the time below its output link; a chain's head gets the rest of its task's busy
    /// time, and the last operator the channel writer's, backpressure excepted.
    pub busy_ms: u64,
    /// Its current input watermark (for an operator that makes watermarks, a source or a
    /// timestamp assigner: the one it emits), in event-time milliseconds; `None` before the first watermark of the attempt, after the final
    /// one, and in jobs without event time.
    pub watermark_ms: Option<u64>,
    /// Processing time minus [`OperatorFigures::watermark_ms`] when the status was read:
    /// how far event time lags behind the wall clock here.
    pub watermark_lag_ms: Option<u64>,
}

/// Which link of which chain a [`Metered`] output counts into.
pub(crate) struct LinkHandle {
    chain: Arc<ChainMetrics>,
    i: usize,
}

/// An [`Output`] that counts what passes through it into one link (see the module docs).
pub(crate) struct Metered<T> {
    next: Box<dyn Output<T>>,
    link: LinkHandle,
    /// Running totals, published to the link after every call (one writer: no locked add).
    records: u64,
    nanos: u64,
}

impl<T> Metered<T> {
    /// Wraps `next`, counting into `link`; totals continue from earlier attempts', the
    /// watermark starts again from none (a restored job's does).
    pub(crate) fn new(next: Box<dyn Output<T>>, link: LinkHandle) -> Self {
        let m = &link.chain.links[link.i];
        m.watermark.store(0, Relaxed);
        Metered {
            records: m.records.load(Relaxed),
            nanos: m.nanos.load(Relaxed),
            next,
            link,
        }
    }

    fn metrics(&self) -> &LinkMetrics {
        &self.link.chain.links[self.link.i]
    }

    /// Runs `call` on the next output, adding its time (and `records`) to the link.
    #[inline]
    fn timed<R>(
        &mut self,
        records: usize,
        call: impl FnOnce(&mut dyn Output<T>) -> Result<R>,
    ) -> Result<R> {
        let start = Instant::now();
        let r = call(self.next.as_mut());
        self.nanos += start.elapsed().as_nanos() as u64;
        self.records += records as u64;
        let (records, nanos) = (self.records, self.nanos);
        let m = self.metrics();
        m.records.store(records, Relaxed);
        m.nanos.store(nanos, Relaxed);
        r
    }
}

impl<T: Send> Output<T> for Metered<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        self.timed(batch.len(), |n| n.push(batch))
    }
    fn push_timestamped(&mut self, batch: &mut Vec<T>, timestamps: &mut Vec<u64>) -> Result<()> {
        self.timed(batch.len(), |n| n.push_timestamped(batch, timestamps))
    }
    fn on_watermark(&mut self, watermark: u64) -> Result<()> {
        self.metrics().watermark.store(watermark, Relaxed);
        // Event-time timers fire here: their work is the operator's.
        self.timed(0, |n| n.on_watermark(watermark))
    }
    fn on_watermark_status(&mut self, status: WatermarkStatus) -> Result<()> {
        self.next.on_watermark_status(status)
    }
    fn on_processing_time(&mut self, now_ms: u64) -> Result<()> {
        self.timed(0, |n| n.on_processing_time(now_ms))
    }
    fn snapshot(&mut self, barrier: CheckpointBarrier, snapshot: &mut TaskSnapshot) -> Result<()> {
        // The synchronous part of a checkpoint is the task's, shown on the checkpoints page.
        self.next.snapshot(barrier, snapshot)
    }
    fn flush(&mut self) -> Result<()> {
        self.timed(0, |n| n.flush())
    }
    fn end_of_input(&mut self) -> Result<()> {
        self.timed(0, |n| n.end_of_input())
    }
    fn notify_complete(&mut self, id: u64) -> Result<()> {
        self.next.notify_complete(id)
    }
    fn notify_aborted(&mut self, id: u64) -> Result<()> {
        self.next.notify_aborted(id)
    }
    crate::runtime::output::forward_room!();
}

/// Whether chains are metered: on unless `WEIR_OPERATOR_METRICS` is `0`, `off` or
/// `false`. The switch exists to measure what the metering costs (BENCHMARKS.md); the
/// dashboard then shows only per-task figures.
pub(crate) fn enabled() -> bool {
    !matches!(
        std::env::var("WEIR_OPERATOR_METRICS").as_deref(),
        Ok("0" | "off" | "false")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::output::NoOutput;
    use std::time::Duration;

    /// An operator that keeps the multiples of `m` and sleeps `ms` per batch.
    struct Halve {
        next: Box<dyn Output<u32>>,
        m: u32,
        ms: u64,
    }

    impl Output<u32> for Halve {
        fn push(&mut self, batch: &mut Vec<u32>) -> Result<()> {
            std::thread::sleep(Duration::from_millis(self.ms));
            batch.retain(|x| x % self.m == 0);
            self.next.push(batch)
        }
        fn push_timestamped(&mut self, b: &mut Vec<u32>, _: &mut Vec<u64>) -> Result<()> {
            self.push(b)
        }
        fn on_watermark(&mut self, w: u64) -> Result<()> {
            self.next.on_watermark(w)
        }
        fn on_watermark_status(&mut self, s: WatermarkStatus) -> Result<()> {
            self.next.on_watermark_status(s)
        }
        fn on_processing_time(&mut self, t: u64) -> Result<()> {
            self.next.on_processing_time(t)
        }
        fn snapshot(&mut self, b: CheckpointBarrier, s: &mut TaskSnapshot) -> Result<()> {
            self.next.snapshot(b, s)
        }
        fn flush(&mut self) -> Result<()> {
            self.next.flush()
        }
        fn end_of_input(&mut self) -> Result<()> {
            self.next.end_of_input()
        }
        fn notify_complete(&mut self, id: u64) -> Result<()> {
            self.next.notify_complete(id)
        }
        fn notify_aborted(&mut self, id: u64) -> Result<()> {
            self.next.notify_aborted(id)
        }
    }

    /// An input task's chain `evens (20 ms) → multiples of 4 (5 ms)`, metered as `spawn` meters it.
    fn chain(metrics: &Arc<ChainMetrics>) -> Box<dyn Output<u32>> {
        let end: Box<dyn Output<u32>> = Box::new(Metered::new(Box::new(NoOutput), metrics.link(2)));
        let second: Box<dyn Output<u32>> = Box::new(Halve {
            next: end,
            m: 4,
            ms: 5,
        });
        let second = Box::new(Metered::new(second, metrics.link(1)));
        let first: Box<dyn Output<u32>> = Box::new(Halve {
            next: second,
            m: 2,
            ms: 20,
        });
        Box::new(Metered::new(first, metrics.link(0)))
    }

    #[test]
    fn each_chained_operator_gets_its_own_records_busy_time_and_watermark() {
        let metrics = Arc::new(ChainMetrics::new(2));
        let mut head = chain(&metrics);
        let start = Instant::now();
        for _ in 0..2 {
            head.push(&mut (0..8).collect()).unwrap();
        }
        head.on_watermark(1_000).unwrap();
        let busy_ns = start.elapsed().as_nanos() as u64;
        let figures = metrics.figures(TaskFigures {
            records_in: 16,
            busy_ns,
            backpressured_ns: 0,
            now_ms: 1_250,
        });
        let counts: Vec<(u64, u64)> = figures
            .iter()
            .map(|f| (f.records_in, f.records_out))
            .collect();
        assert_eq!(counts, [(16, 8), (8, 4)]);
        // 2 × 20 ms in the first, 2 × 5 ms in the second (sleeps are at least that long).
        assert!(figures[0].busy_ms >= 40, "{figures:?}");
        assert!((10..40).contains(&figures[1].busy_ms), "{figures:?}");
        for f in &figures {
            assert_eq!(f.watermark_ms, Some(1_000));
            assert_eq!(f.watermark_lag_ms, Some(250));
        }
    }

    #[test]
    fn a_source_shows_what_it_emits_and_the_writer_is_not_charged_with_backpressure() {
        let metrics = Arc::new(ChainMetrics::new(1));
        // A lone source: only the link after it.
        let mut out = Metered::new(Box::new(NoOutput), metrics.link(1));
        out.push(&mut vec![1, 2, 3]).unwrap();
        out.on_watermark(500).unwrap();
        let figures = metrics.figures(TaskFigures {
            records_in: 3,
            busy_ns: 7_000_000,
            backpressured_ns: 2_000_000,
            now_ms: 600,
        });
        assert_eq!(
            figures,
            [OperatorFigures {
                records_in: 3,
                records_out: 3,
                busy_ms: 7,
                watermark_ms: Some(500),
                watermark_lag_ms: Some(100),
            }]
        );
    }

    #[test]
    fn totals_survive_a_restart_and_the_watermark_starts_again() {
        let metrics = Arc::new(ChainMetrics::new(1));
        let mut out = Metered::new(Box::new(NoOutput), metrics.link(1));
        out.push(&mut vec![1, 2]).unwrap();
        out.on_watermark(MAX_WATERMARK).unwrap();
        drop(out);
        let mut again = Metered::new(Box::new(NoOutput), metrics.link(1));
        again.push(&mut vec![3]).unwrap();
        let f = metrics.figures(TaskFigures {
            records_in: 3,
            busy_ns: 0,
            backpressured_ns: 0,
            now_ms: 0,
        });
        assert_eq!(f[0].records_out, 3);
        assert_eq!(f[0].watermark_ms, None, "none yet in the new attempt");
    }
}
