//! The replay of restored channel state (unaligned checkpoints, issue 13) takes barriers:
//! a job restored from an unaligned checkpoint completes checkpoints while it replays the
//! records that were in flight, the records not replayed yet becoming those checkpoints'
//! channel state. Checked by failures that can only fire during a replay after such a
//! checkpoint completed, each followed by a restore of it, and exact counts at the end.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use weir::prelude::*;

#[path = "support/slow_count.rs"]
mod slow_count;
use slow_count::SlowCount;

/// Records per second the count processes, over its two subtasks.
const SINK_RATE: f64 = 10_000.0;
/// A failure during a replay fires within this many records of the attempt: far fewer
/// than a restored subtask's channel state holds under this backpressure (checked).
const WITHIN: u64 = 5_000;
/// Failures in the first records of a restored attempt.
const REPLAY_FAILURES: u64 = 2;

/// The slow count, failing (one subtask, once per attempt) first mid-run, then
/// [`REPLAY_FAILURES`] times in a restored attempt's first [`WITHIN`] records once a
/// checkpoint of that attempt completed: in the replay of its restored channel state,
/// and only if a checkpoint completes during that replay.
#[derive(Clone)]
struct FailingCount {
    inner: SlowCount,
    /// Failures so far, over all attempts.
    fired: Arc<AtomicU64>,
    /// `fired` when this instance (one attempt's subtask) saw its first record.
    generation: Option<u64>,
    seen: u64,
    completed: u64,
}

impl CheckpointedFunction for FailingCount {
    fn notify_checkpoint_complete(&mut self, _: u64) -> Result<()> {
        self.completed += 1;
        Ok(())
    }
}

impl KeyedProcessFunction<u64, u64, (u64, u64)> for FailingCount {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        KeyedProcessFunction::<u64, u64, (u64, u64)>::open(&mut self.inner, states)
    }

    fn process(
        &mut self,
        r: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let generation = *self
            .generation
            .get_or_insert_with(|| self.fired.load(Ordering::SeqCst));
        self.seen += 1;
        let due = match generation {
            // Mid-run of the first attempt, once its channels are full.
            0 => self.completed >= 2 && self.seen >= 10_000,
            g if g <= REPLAY_FAILURES => self.completed >= 1 && self.seen <= WITHIN,
            _ => false,
        };
        if due
            && self
                .fired
                .compare_exchange(
                    generation,
                    generation + 1,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok()
        {
            return Err(Error::user(format!("injected failure {}", generation + 1)));
        }
        self.inner.process(r, ctx, out)
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        KeyedProcessFunction::<u64, u64, (u64, u64)>::on_end_of_input(&mut self.inner, ctx, out)
    }
}

/// Generator at ten times [`SINK_RATE`] → `key_by` → [`FailingCount`] → collected, at
/// parallelism 2, unaligned (with `timeout`, starting aligned), checkpoints every 100 ms.
fn run(
    dir: &Path,
    timeout: Option<Duration>,
    n: u64,
    keys: u64,
) -> (HashMap<u64, u64>, JobResult, u64) {
    let mut cfg = config("replay", dir, 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(100));
    cfg.checkpointing.unaligned = true;
    cfg.checkpointing.aligned_checkpoint_timeout = timeout;
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let fired = Arc::new(AtomicU64::new(0));
    let count = FailingCount {
        inner: SlowCount::new(SINK_RATE, 2),
        fired: fired.clone(),
        generation: None,
        seen: 0,
        completed: 0,
    };
    env.add_source(
        "events",
        GeneratorSource::new(n).with_rate(Some(10.0 * SINK_RATE)),
    )
    .uid("events")
    .key_by(move |i: &u64| i % keys)
    .process(count)
    .uid("count")
    .add_sink("collect", out.clone())
    .uid("sink");
    let result = env.execute().unwrap();
    (
        final_counts(out.take()),
        result,
        fired.load(Ordering::SeqCst),
    )
}

/// Failures during the replay, after a checkpoint completed in it, unaligned and with
/// the aligned-checkpoint timeout: every failure fired (so checkpoints completed during
/// replays), each restart restored the newest checkpoint with records in flight, and the
/// counts are exact.
#[test]
fn failures_during_the_replay_after_a_checkpoint_in_it_count_exactly() {
    for timeout in [None, Some(Duration::from_millis(20))] {
        let dir = tempfile::tempdir().unwrap();
        let n = 100_000;
        let (counts, r, fired) = run(dir.path(), timeout, n, 101);
        assert_eq!(
            fired,
            1 + REPLAY_FAILURES,
            "timeout {timeout:?}: a failure did not fire — no checkpoint completed during a \
             replay: {r:#?}"
        );
        weir::testing::assert_resumed(&r, n);
        assert_eq!(
            counts,
            expected(n, 101),
            "timeout {timeout:?}: exact counts"
        );
        // The attempts that failed in their replay restored a checkpoint holding far more
        // records in flight than they processed before failing.
        for a in &r.history[1..=REPLAY_FAILURES as usize] {
            let restored = a.restored.as_ref().expect("resumed");
            let saved = r
                .checkpoints
                .iter()
                .find(|c| c.id == restored.checkpoint_id)
                .map(|c| c.in_flight_records);
            assert!(
                saved.is_some_and(|s| s >= 4 * WITHIN),
                "timeout {timeout:?}: attempt {} restored checkpoint {} with {saved:?} \
                 records in flight: {r:#?}",
                a.attempt,
                restored.checkpoint_id
            );
        }
    }
}
