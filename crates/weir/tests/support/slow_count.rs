//! The slow keyed count that backs the unaligned tests' jobs up (shared by
//! `unaligned.rs` and `unaligned_mid_graph.rs`).

use std::time::{Duration, Instant};

use weir::prelude::*;
use weir::testing::CountPerKey;

/// [`CountPerKey`] limited to `per_subtask` records per second: the slow stage that backs
/// the job up (each subtask counts from its own start, so a restarted attempt is as slow).
#[derive(Clone)]
pub struct SlowCount {
    inner: CountPerKey,
    per_subtask: f64,
    started: Option<Instant>,
    seen: u64,
}

impl SlowCount {
    /// Counts at `rate` records per second over `parallelism` subtasks.
    pub fn new(rate: f64, parallelism: u32) -> Self {
        SlowCount {
            inner: CountPerKey::default(),
            per_subtask: rate / parallelism as f64,
            started: None,
            seen: 0,
        }
    }
}

impl CheckpointedFunction for SlowCount {}

impl KeyedProcessFunction<u64, u64, (u64, u64)> for SlowCount {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        KeyedProcessFunction::<u64, u64, (u64, u64)>::open(&mut self.inner, states)
    }

    fn process(
        &mut self,
        r: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let started = *self.started.get_or_insert_with(Instant::now);
        self.seen += 1;
        if self.seen.is_multiple_of(64) {
            let due = Duration::from_secs_f64(self.seen as f64 / self.per_subtask);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
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
