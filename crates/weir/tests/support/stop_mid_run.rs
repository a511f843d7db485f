//! [`StopMidRun`]: a source wrapper that stops a job mid-input deterministically, shared
//! by the engine's tests (through `common`) and the connectors' (`#[path]`-included).

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use weir::prelude::*;

/// A source that stops a job in the middle of its input, deterministically: each subtask
/// emits what `inner` emits up to `stop_at` records (in this attempt), then holds (emits
/// nothing, never finishes) until every subtask of the source holds (or has finished) and a
/// checkpoint taken after that has completed; then it fails for good. With
/// [`RestartStrategy::None`] the job fails, and its newest checkpoint holds every subtask's
/// progress up to the hold: a mid-run checkpoint with progress > 0 and (if `stop_at` is
/// below each subtask's share) input left to read — what a restore test needs, where the
/// final checkpoint of a finished run would replay nothing. (Waiting for every subtask
/// matters: one subtask slow to start would otherwise have read nothing by the checkpoint.)
#[derive(Clone)]
pub struct StopMidRun<S> {
    inner: S,
    stop_at: u64,
    emitted: u64,
    /// The first checkpoint snapshotted while every subtask held.
    held_at_checkpoint: Option<u64>,
    /// A checkpoint covering the hold completed: fail at the next poll.
    fail: bool,
    /// Subtasks of this source that hold or finished; shared by every clone.
    holding: Arc<AtomicU32>,
    /// This subtask is counted in `holding`.
    counted: bool,
    parallelism: u32,
}

impl<S> StopMidRun<S> {
    pub fn new(inner: S, stop_at: u64) -> Self {
        StopMidRun {
            inner,
            stop_at,
            emitted: 0,
            held_at_checkpoint: None,
            fail: false,
            holding: Arc::default(),
            counted: false,
            parallelism: 1,
        }
    }

    fn hold(&mut self) {
        if !self.counted {
            self.counted = true;
            self.holding.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The message [`StopMidRun`] fails with.
pub const STOPPED_MID_RUN: &str = "test source stopped mid-input";

impl<S: CheckpointedFunction> CheckpointedFunction for StopMidRun<S> {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.parallelism = ctx.parallelism();
        self.inner.initialize_state(ctx)
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        let all_hold = self.holding.load(Ordering::SeqCst) >= self.parallelism;
        if self.counted && all_hold && self.held_at_checkpoint.is_none() {
            self.held_at_checkpoint = Some(ctx.checkpoint_id());
        }
        self.inner.snapshot_state(ctx)
    }
    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<()> {
        if self.held_at_checkpoint.is_some_and(|h| id >= h) {
            self.fail = true;
        }
        self.inner.notify_checkpoint_complete(id)
    }
    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<()> {
        self.inner.notify_checkpoint_aborted(id)
    }
}

impl<T, S: SourceFunction<T>> SourceFunction<T> for StopMidRun<S> {
    fn poll(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus> {
        if self.fail {
            return Err(Error::user(STOPPED_MID_RUN));
        }
        let left = self.stop_at - self.emitted.min(self.stop_at);
        if left == 0 {
            self.hold();
            return Ok(SourceStatus::Idle);
        }
        let before = out.len();
        let status = self.inner.poll(out, max.min(left as usize))?;
        self.emitted += (out.len() - before) as u64;
        if status == SourceStatus::Finished {
            self.hold();
        }
        Ok(status)
    }
}

/// Asserts that a run built with [`StopMidRun`] sources failed because of them.
pub fn assert_stopped_mid_run<T>(result: Result<T>) {
    match result {
        Ok(_) => panic!("the run was to stop mid-input, but it finished"),
        Err(e) => assert!(e.to_string().contains(STOPPED_MID_RUN), "{e}"),
    }
}
