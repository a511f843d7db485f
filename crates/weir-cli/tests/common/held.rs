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
use weir::testing::{Admit, Gated, SourceGate};

use super::RUN_TIMEOUT;

/// A source's gate holding after `hold_after` records of this attempt: the source then
/// reads nothing and never ends, and `marks/held-<subtask>` is written once. Without
/// `hold_after`, the source as is.
#[derive(Clone)]
pub struct Held {
    hold_after: Option<u64>,
    emitted: u64,
    marks: PathBuf,
    subtask: u32,
    marked: bool,
}

impl SourceGate for Held {
    fn initialize(&mut self, ctx: &InitContext) {
        self.subtask = ctx.subtask_index();
    }
    fn admit(&mut self) -> Result<Admit> {
        let Some(hold_after) = self.hold_after else {
            return Ok(Admit::ALL);
        };
        let left = hold_after.saturating_sub(self.emitted);
        if left > 0 {
            return Ok(Admit::Up(left as usize));
        }
        if !self.marked {
            self.marked = true;
            std::fs::create_dir_all(&self.marks)
                .and_then(|()| {
                    std::fs::write(self.marks.join(format!("held-{}", self.subtask)), "")
                })
                .map_err(|e| Error::user(format!("writing the hold marker: {e}")))?;
        }
        Ok(Admit::HOLD)
    }
    fn polled(&mut self, emitted: u64, status: SourceStatus) -> Result<SourceStatus> {
        self.emitted += emitted;
        Ok(status)
    }
}

impl Held {
    /// `inner`, holding after `hold_after` records per subtask (never when `None`), its
    /// markers in `marks`.
    pub fn new<S>(inner: S, hold_after: Option<u64>, marks: &Path) -> Gated<S, Held> {
        Gated::new(
            inner,
            Held {
                hold_after,
                emitted: 0,
                marks: marks.to_path_buf(),
                subtask: 0,
                marked: false,
            },
        )
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
