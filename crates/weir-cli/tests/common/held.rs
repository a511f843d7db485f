//! A source that holds mid-input, so that a test can act on a running job at a known
//! point whatever the machine's speed: each subtask reads `n` records in its attempt, then
//! reads nothing and never ends, and says so with a marker file. A checkpoint or savepoint
//! taken once every subtask's marker is there covers exactly the records read, and a job
//! whose sources hold is still running when its checkpoints complete (what a test that
//! SIGKILLs it right after needs).

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use weir::prelude::*;

use super::RUN_TIMEOUT;

/// A source holding after `hold_after` records of this attempt: it then reads nothing and
/// never ends, and writes `marks/held-<subtask>` once. Without `hold_after`, `inner` as is.
#[derive(Clone)]
pub struct Held<S> {
    inner: S,
    hold_after: Option<u64>,
    emitted: u64,
    marks: PathBuf,
    subtask: u32,
    marked: bool,
}

impl<S: CheckpointedFunction> CheckpointedFunction for Held<S> {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.subtask = ctx.subtask_index();
        self.inner.initialize_state(ctx)
    }
    fn operator_state(&self) -> Vec<OperatorListDeclaration> {
        self.inner.operator_state()
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        self.inner.snapshot_state(ctx)
    }
    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<()> {
        self.inner.notify_checkpoint_complete(id)
    }
    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<()> {
        self.inner.notify_checkpoint_aborted(id)
    }
}

impl<T, S: SourceFunction<T>> SourceFunction<T> for Held<S> {
    fn poll(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus> {
        let Some(hold_after) = self.hold_after else {
            return self.inner.poll(out, max);
        };
        let left = hold_after.saturating_sub(self.emitted);
        if left == 0 {
            if !self.marked {
                self.marked = true;
                std::fs::create_dir_all(&self.marks)
                    .and_then(|()| {
                        std::fs::write(self.marks.join(format!("held-{}", self.subtask)), "")
                    })
                    .map_err(|e| Error::user(format!("writing the hold marker: {e}")))?;
            }
            return Ok(SourceStatus::Idle);
        }
        let before = out.len();
        let status = self.inner.poll(out, max.min(left as usize))?;
        self.emitted += (out.len() - before) as u64;
        Ok(status)
    }
}

impl<S> Held<S> {
    /// `inner`, holding after `hold_after` records per subtask (never when `None`), its
    /// markers in `marks`.
    pub fn new(inner: S, hold_after: Option<u64>, marks: &Path) -> Self {
        Held {
            inner,
            hold_after,
            emitted: 0,
            marks: marks.to_path_buf(),
            subtask: 0,
            marked: false,
        }
    }
}

/// Polls until every one of `subtasks` source subtasks wrote its hold marker in `marks`;
/// fails if `child` exits first or the run's timeout passes.
pub fn wait_until_held(child: &mut Child, marks: &Path, subtasks: u32) {
    let deadline = Instant::now() + RUN_TIMEOUT;
    loop {
        if (0..subtasks).all(|i| marks.join(format!("held-{i}")).exists()) {
            return;
        }
        if let Some(st) = child.try_wait().expect("try_wait") {
            panic!("the job exited ({st}) before its sources held");
        }
        assert!(Instant::now() < deadline, "the sources did not hold");
        std::thread::sleep(Duration::from_millis(10));
    }
}
