//! A source that asks a gate before each poll — how a test holds a running job at a known
//! point whatever the machine's speed (hold after `n` records until a checkpoint has
//! snapshotted the hold, stay open after the input until timers fired, fail mid-input once
//! a checkpoint covers the hold), instead of hoping a checkpoint or a kill lands "in time".
//!
//! [`Gated`] forwards every hook of [`CheckpointedFunction`] to the source it wraps —
//! `operator_state` included, which a hand-written wrapper easily forgets (the source's
//! lists then go undeclared) — and lets the [`SourceGate`] watch them. A gate is the only
//! thing a test writes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::functions::{CheckpointedFunction, SourceFunction, SourceStatus};
use crate::error::Result;
use crate::state::operator::{InitContext, SnapshotContext};
use crate::state::schema::OperatorListDeclaration;

/// What a [`SourceGate`] lets its source do at one poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Poll the source for at most this many records (capped by the poll's own `max`).
    Up(usize),
    /// Do not poll the source; report this status instead (`Idle` holds it, still
    /// answering barriers; `Finished` ends it).
    Report(SourceStatus),
}

impl Admit {
    /// Poll the source as it would be without a gate.
    pub const ALL: Admit = Admit::Up(usize::MAX);
    /// Hold: poll nothing, report `Idle`.
    pub const HOLD: Admit = Admit::Report(SourceStatus::Idle);
}

/// Decides, poll by poll, what a [`Gated`] source may read, watching the source's
/// checkpoint hooks. Every method but [`SourceGate::admit`] defaults to doing nothing.
/// The gate is cloned with the source: one per subtask.
pub trait SourceGate: Clone + Send + 'static {
    /// Before a poll: how much the source may read now, or what to report instead. An
    /// `Err` fails the task (a test's injected failure).
    fn admit(&mut self) -> Result<Admit>;

    /// After a poll that emitted `emitted` records and returned `status`: the status to
    /// report (a gate can keep a finished source open by answering `Idle`).
    fn polled(&mut self, _emitted: u64, status: SourceStatus) -> Result<SourceStatus> {
        Ok(status)
    }

    /// The source's attempt starts (before its own `initialize_state`): reset per-attempt
    /// counters here; `ctx` tells the subtask and parallelism.
    fn initialize(&mut self, _ctx: &InitContext) {}

    /// The source is snapshotted for checkpoint `checkpoint_id` (after its own snapshot).
    fn snapshotted(&mut self, _checkpoint_id: u64) {}

    /// Checkpoint `checkpoint_id` completed (before the source hears it).
    fn completed(&mut self, _checkpoint_id: u64) {}
}

/// `inner` behind `gate`: see the module docs.
#[derive(Clone)]
pub struct Gated<S, G> {
    inner: S,
    gate: G,
}

impl<S, G> Gated<S, G> {
    /// `inner`, polled only as `gate` admits.
    pub fn new(inner: S, gate: G) -> Self {
        Gated { inner, gate }
    }

    /// The gate (a test may read what it counted).
    pub fn gate(&self) -> &G {
        &self.gate
    }
}

impl<S: CheckpointedFunction, G: SourceGate> CheckpointedFunction for Gated<S, G> {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.gate.initialize(ctx);
        self.inner.initialize_state(ctx)
    }
    fn operator_state(&self) -> Vec<OperatorListDeclaration> {
        self.inner.operator_state()
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        self.inner.snapshot_state(ctx)?;
        self.gate.snapshotted(ctx.checkpoint_id());
        Ok(())
    }
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.gate.completed(checkpoint_id);
        self.inner.notify_checkpoint_complete(checkpoint_id)
    }
    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<()> {
        self.inner.notify_checkpoint_aborted(checkpoint_id)
    }
}

impl<T, S: SourceFunction<T>, G: SourceGate> SourceFunction<T> for Gated<S, G> {
    fn poll(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus> {
        let up = match self.gate.admit()? {
            Admit::Report(status) => return Ok(status),
            Admit::Up(0) => return Ok(SourceStatus::Idle),
            Admit::Up(n) => n.min(max),
        };
        let before = out.len();
        let status = self.inner.poll(out, up)?;
        self.gate.polled((out.len() - before) as u64, status)
    }
}

/// How long a [`HoldOpen`] keeps a finished source open at most: past it the job ends
/// and the test's checks fail, instead of the test hanging on a condition that never
/// holds.
pub const HOLD_OPEN_LIMIT: Duration = Duration::from_secs(60);

/// A gate that reads its source unhindered and, once the source is exhausted, keeps it
/// open (idle, still answering barriers) until a condition the test watches holds —
/// timers fired, a downstream tally counted everything — so that what must happen before
/// the end of input happens whatever the machine's speed. Optionally it also waits for a
/// checkpoint of the current attempt to complete (every task of the attempt has then
/// started and reset what it counts). Past [`HOLD_OPEN_LIMIT`] it lets the source finish.
#[derive(Clone)]
pub struct HoldOpen {
    done: Arc<dyn Fn() -> bool + Send + Sync>,
    needs_checkpoint: bool,
    checkpointed: bool,
    exhausted_at: Option<Instant>,
}

impl HoldOpen {
    /// Holds the finished source open until `done()` returns true.
    pub fn until(done: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        HoldOpen {
            done: Arc::new(done),
            needs_checkpoint: false,
            checkpointed: false,
            exhausted_at: None,
        }
    }

    /// Also holds until a checkpoint of the current attempt completed.
    pub fn and_a_checkpoint(mut self) -> Self {
        self.needs_checkpoint = true;
        self
    }

    /// Once exhausted: finished when the condition holds (or past the limit), else idle.
    fn after_input(&self) -> SourceStatus {
        let waited = self.exhausted_at.map_or(Duration::ZERO, |t| t.elapsed());
        let done = (self.checkpointed || !self.needs_checkpoint) && (self.done)();
        if done || waited > HOLD_OPEN_LIMIT {
            SourceStatus::Finished
        } else {
            SourceStatus::Idle
        }
    }
}

impl SourceGate for HoldOpen {
    fn initialize(&mut self, _: &InitContext) {
        self.checkpointed = false;
        self.exhausted_at = None;
    }
    fn completed(&mut self, _: u64) {
        self.checkpointed = true;
    }
    fn admit(&mut self) -> Result<Admit> {
        Ok(match self.exhausted_at {
            None => Admit::ALL,
            Some(_) => Admit::Report(self.after_input()),
        })
    }
    fn polled(&mut self, _: u64, status: SourceStatus) -> Result<SourceStatus> {
        if status != SourceStatus::Finished {
            return Ok(status);
        }
        self.exhausted_at = Some(Instant::now());
        Ok(self.after_input())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectors::generator::GeneratorSource;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Reads 5 records, then holds until a checkpoint snapshotted the hold completed.
    #[derive(Clone, Default)]
    struct HoldAtFive {
        read: u64,
        snapshotted_at: Option<u64>,
        released: bool,
    }

    impl SourceGate for HoldAtFive {
        fn admit(&mut self) -> Result<Admit> {
            Ok(match (self.read < 5, self.released) {
                (true, _) => Admit::Up((5 - self.read) as usize),
                (false, true) => Admit::ALL,
                (false, false) => Admit::HOLD,
            })
        }
        fn polled(&mut self, emitted: u64, status: SourceStatus) -> Result<SourceStatus> {
            self.read += emitted;
            Ok(status)
        }
        fn snapshotted(&mut self, id: u64) {
            if self.read >= 5 && self.snapshotted_at.is_none() {
                self.snapshotted_at = Some(id);
            }
        }
        fn completed(&mut self, id: u64) {
            self.released |= self.snapshotted_at.is_some_and(|s| id >= s);
        }
    }

    #[test]
    fn a_gate_caps_holds_and_releases_its_source_and_sees_its_hooks() {
        let mut src = Gated::new(GeneratorSource::new(8), HoldAtFive::default());
        let ctx = InitContext::new(false, 0, 1, std::collections::BTreeMap::new());
        src.initialize_state(&ctx).unwrap();
        let mut out = Vec::new();
        assert_eq!(src.poll(&mut out, 100).unwrap(), SourceStatus::More);
        assert_eq!(out, [0, 1, 2, 3, 4], "capped at the gate's 5");
        assert_eq!(src.poll(&mut out, 100).unwrap(), SourceStatus::Idle);
        assert_eq!(out.len(), 5, "held");
        // A checkpoint that completes before the hold was snapshotted releases nothing.
        src.notify_checkpoint_complete(1).unwrap();
        assert_eq!(src.poll(&mut out, 100).unwrap(), SourceStatus::Idle);
        src.gate.snapshotted(2);
        src.notify_checkpoint_complete(2).unwrap();
        while src.poll(&mut out, 100).unwrap() != SourceStatus::Finished {}
        assert_eq!(out, (0..8).collect::<Vec<u64>>());
        assert_eq!(src.gate().read, 8);
    }

    #[test]
    fn hold_open_keeps_a_finished_source_open_until_its_condition_and_a_checkpoint() {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        let gate = HoldOpen::until(move || f.load(Ordering::SeqCst)).and_a_checkpoint();
        let mut src = Gated::new(GeneratorSource::new(3), gate);
        let ctx = InitContext::new(false, 0, 1, std::collections::BTreeMap::new());
        src.initialize_state(&ctx).unwrap();
        let mut out = Vec::new();
        while out.len() < 3 {
            assert_ne!(src.poll(&mut out, 100).unwrap(), SourceStatus::Finished);
        }
        assert_eq!(
            src.poll(&mut out, 100).unwrap(),
            SourceStatus::Idle,
            "exhausted, held"
        );
        flag.store(true, Ordering::SeqCst);
        assert_eq!(
            src.poll(&mut out, 100).unwrap(),
            SourceStatus::Idle,
            "no checkpoint yet"
        );
        src.notify_checkpoint_complete(1).unwrap();
        assert_eq!(src.poll(&mut out, 100).unwrap(), SourceStatus::Finished);
        // A new attempt forgets the checkpoint of the one before.
        src.initialize_state(&ctx).unwrap();
        assert!(!src.gate().checkpointed);
        assert_eq!(out, [0, 1, 2]);
    }
}
