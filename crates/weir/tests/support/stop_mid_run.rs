//! [`StopMidRun`]: a source wrapper that stops a job mid-input deterministically, shared
//! by the engine's tests (through `common`) and the connectors' (`#[path]`-included).

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use weir::prelude::*;
use weir::testing::{Admit, Gated, SourceGate};

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
pub struct StopMidRun {
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

impl StopMidRun {
    pub fn new<S>(inner: S, stop_at: u64) -> Gated<S, Self> {
        let gate = StopMidRun {
            stop_at,
            emitted: 0,
            held_at_checkpoint: None,
            fail: false,
            holding: Arc::default(),
            counted: false,
            parallelism: 1,
        };
        Gated::new(inner, gate)
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

impl SourceGate for StopMidRun {
    fn initialize(&mut self, ctx: &InitContext) {
        self.parallelism = ctx.parallelism();
    }
    fn snapshotted(&mut self, id: u64) {
        let all_hold = self.holding.load(Ordering::SeqCst) >= self.parallelism;
        if self.counted && all_hold && self.held_at_checkpoint.is_none() {
            self.held_at_checkpoint = Some(id);
        }
    }
    fn completed(&mut self, id: u64) {
        if self.held_at_checkpoint.is_some_and(|h| id >= h) {
            self.fail = true;
        }
    }
    fn admit(&mut self) -> Result<Admit> {
        if self.fail {
            return Err(Error::user(STOPPED_MID_RUN));
        }
        let left = self.stop_at - self.emitted.min(self.stop_at);
        if left == 0 {
            self.hold();
            return Ok(Admit::HOLD);
        }
        Ok(Admit::Up(left as usize))
    }
    fn polled(&mut self, emitted: u64, status: SourceStatus) -> Result<SourceStatus> {
        self.emitted += emitted;
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
