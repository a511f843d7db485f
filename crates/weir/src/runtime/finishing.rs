//! How a task ends: pure decision logic, no I/O (FLIP-147's final checkpoint, and
//! stop-with-savepoint).
//!
//! A task *ends* in one of two ways:
//! * its input ends (end-of-input from every input, or its source is exhausted, or a
//!   draining stop ended the source) — it emits what it holds and sends end-of-input on;
//! * it takes the snapshot of a stopping savepoint without drain — its state stays as it is,
//!   to be resumed from the savepoint.
//!
//! It may *exit* (drop its outputs, which closes its channels) only once that end is
//! committed: a checkpoint whose barrier it snapshotted after the end has completed. That is
//! what lets two-phase-commit sinks commit the last transaction of a bounded job, and what
//! keeps a stopped job's sinks from exiting with uncommitted output. It holds without
//! periodic checkpoints too: the coordinator then takes just the final one, so that sinks
//! commit once for the whole job, never per subtask.
//!
//! Invariants:
//! * Once the input ended it never restarts; a stop without drain is undone when its
//!   savepoint is aborted (the job goes on running).
//! * Every snapshot taken after the end captures *frozen* state: no record and no timer
//!   changes it any more, so it can stand in for the task in any later checkpoint.
//!
//! This is the task's side. The coordinator's side — keeping each task's newest frozen
//! snapshot and writing it for the task once it exited, and expediting the final
//! checkpoint — is `checkpoint::coordinator::attempt`, pure as well.

/// A task's progress towards its end; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Finishing {
    /// The task's input ended.
    input_ended: bool,
    /// The first snapshot taken after the input ended.
    first_after_end: Option<u64>,
    /// A stopping savepoint (no drain) snapshotted and not aborted.
    stopping: Option<u64>,
    /// The end is committed: the task may exit.
    done: bool,
}

impl Finishing {
    /// A running task.
    pub fn new() -> Self {
        Self::default()
    }

    /// A stopping savepoint's barrier `id` is about to be handled (before a draining
    /// source ends its input for it, and before the snapshot): the task ends with it.
    pub fn on_stop_barrier(&mut self, id: u64) {
        self.stopping = Some(id);
    }

    /// The task's input ended (it has emitted what it held).
    pub fn on_input_ended(&mut self) {
        self.input_ended = true;
    }

    /// Whether the input ended.
    pub fn input_ended(&self) -> bool {
        self.input_ended
    }

    /// The task snapshotted for barrier `id`. Returns whether the snapshot captures frozen
    /// (final) state.
    pub fn on_snapshot(&mut self, id: u64) -> bool {
        if self.input_ended && self.first_after_end.is_none() {
            self.first_after_end = Some(id);
        }
        self.is_frozen()
    }

    /// Whether nothing changes the task's state any more (input ended or stopping): no
    /// records, no timers.
    pub fn is_frozen(&self) -> bool {
        self.input_ended || self.stopping.is_some()
    }

    /// Checkpoint `id` completed (and with it every earlier one it subsumed).
    pub fn on_complete(&mut self, id: u64) {
        let target = match (self.stopping, self.input_ended, self.first_after_end) {
            (Some(stop), _, _) => Some(stop),
            (None, true, first) => first,
            (None, false, _) => None,
        };
        if target.is_some_and(|t| id >= t) {
            self.done = true;
        }
    }

    /// Checkpoint `id` was aborted: a stop with it is called off (the job goes on; a
    /// drained input stays ended).
    pub fn on_aborted(&mut self, id: u64) {
        if self.stopping == Some(id) {
            self.stopping = None;
        }
    }

    /// Whether the task may exit (once its inputs closed, for tasks with inputs).
    pub fn is_done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_end_waits_for_a_later_checkpoint_to_complete() {
        let mut f = Finishing::new();
        assert!(!f.on_snapshot(3), "running state is not frozen");
        f.on_input_ended();
        assert!(!f.is_done());
        f.on_complete(3);
        assert!(!f.is_done(), "checkpoint 3 was taken before the end");
        assert!(f.on_snapshot(4));
        f.on_aborted(4);
        assert!(!f.is_done());
        assert!(f.on_snapshot(5));
        f.on_complete(5);
        assert!(f.is_done());
    }

    #[test]
    fn a_completion_of_a_later_checkpoint_also_commits_the_end() {
        let mut f = Finishing::new();
        f.on_input_ended();
        f.on_snapshot(7); // a savepoint: never announced as complete
        f.on_snapshot(8);
        f.on_complete(8);
        assert!(f.is_done());
    }

    #[test]
    fn a_stop_ends_when_its_savepoint_completes_and_is_undone_by_its_abort() {
        let mut f = Finishing::new();
        f.on_stop_barrier(2);
        assert!(f.on_snapshot(2));
        f.on_aborted(2);
        assert!(!f.is_frozen(), "the job goes on after a failed stop");
        assert!(!f.is_done());
        f.on_stop_barrier(3);
        f.on_snapshot(3);
        f.on_complete(3);
        assert!(f.is_done());
    }

    #[test]
    fn a_draining_stop_waits_for_its_savepoint_and_stays_ended_after_its_abort() {
        let mut f = Finishing::new();
        f.on_stop_barrier(1);
        f.on_input_ended();
        f.on_snapshot(1);
        f.on_aborted(1);
        assert!(f.is_frozen(), "a drained input never restarts");
        assert!(!f.is_done());
        f.on_snapshot(2);
        f.on_complete(2);
        assert!(f.is_done());
    }
}
