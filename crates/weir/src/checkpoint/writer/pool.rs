//! The writer pool: threads that take snapshot jobs off a channel, write them
//! ([`write_snapshot`]) and report each outcome, so that tasks never wait for storage (the
//! asynchronous part of a snapshot, Flink's `AsyncCheckpointRunnable`).
//!
//! The pool knows nothing of the runtime's events: it reports a [`SnapshotWritten`] and
//! the caller says, through `From`, what event that is on its own channel.

use std::cell::RefCell;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use super::{write_snapshot, SnapshotJob, TaskAck};
use crate::checkpoint::storage::CheckpointStorage;
use crate::error::Result;

/// The outcome of writing one task's snapshot: its acknowledgement, or why writing failed
/// (which declines the checkpoint).
pub struct SnapshotWritten {
    /// The attempt of the task (outcomes of older attempts are stale).
    pub attempt: u32,
    /// The task's global index.
    pub task: usize,
    /// The checkpoint written.
    pub checkpoint: u64,
    /// The acknowledgement, or the error.
    pub result: Result<TaskAck>,
}

/// Starts `n` writer threads that write every job received on `jobs` into `storage` and
/// send the outcome on `events`. A thread ends when `jobs` closes (every sender dropped) or
/// `events` does; join the handles to wait until nothing more can be written. Threads
/// that cannot be started are left out (the others carry the load).
pub fn spawn_writers<E>(
    storage: &CheckpointStorage,
    jobs: Receiver<SnapshotJob>,
    events: Sender<E>,
    n: usize,
) -> Vec<JoinHandle<()>>
where
    E: From<SnapshotWritten> + Send + 'static,
{
    (0..n)
        .filter_map(|i| {
            let (storage, jobs, events) = (storage.clone(), jobs.clone(), events.clone());
            std::thread::Builder::new()
                .name(format!("weir-snapshot-writer-{i}"))
                .spawn(move || {
                    AFTER_ACK.with(|a| *a.borrow_mut() = Some(Vec::new()));
                    for job in jobs {
                        let (attempt, task, checkpoint) =
                            (job.attempt, job.task, job.checkpoint_id);
                        let written = SnapshotWritten {
                            attempt,
                            task,
                            checkpoint,
                            result: write_snapshot(&storage, job),
                        };
                        let sent = events.send(written.into()).is_ok();
                        run_after_ack();
                        if !sent {
                            return;
                        }
                    }
                })
                .ok()
        })
        .collect()
}

/// Work left by [`after_ack`].
type Later = Box<dyn FnOnce()>;

thread_local! {
    /// On a writer thread: the work [`after_ack`] left for after the current job's outcome
    /// is sent (`None` on every other thread).
    static AFTER_ACK: RefCell<Option<Vec<Later>>> = const { RefCell::new(None) };
}

/// Runs `f` once the snapshot job being written on this thread is acknowledged (its outcome
/// sent), or now on a thread that is not a writer's. For work a snapshot leaves behind that
/// its checkpoint does not wait for — the disk backend's commit of a barrier's write-back
/// into the LSM, after the delta was written from the same encoded entries
/// (`state/keyed/disk/views.rs`) — so it is off the checkpoint's critical path but still
/// done promptly, by the same thread, before its next job. Nothing may depend on `f` for
/// correctness beyond promptness: a job that is never acknowledged still runs it.
pub(crate) fn after_ack(f: impl FnOnce() + 'static) {
    let f: Later = Box::new(f);
    let now = AFTER_ACK.with(|a| match a.borrow_mut().as_mut() {
        Some(later) => {
            later.push(f);
            None
        }
        None => Some(f),
    });
    if let Some(f) = now {
        f();
    }
}

/// Runs what [`after_ack`] left on this thread (and what that leaves, in turn).
fn run_after_ack() {
    loop {
        let work = AFTER_ACK.with(|a| a.borrow_mut().as_mut().map(std::mem::take));
        match work {
            Some(work) if !work.is_empty() => work.into_iter().for_each(|f| f()),
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::{after_ack, run_after_ack, AFTER_ACK};

    #[test]
    fn work_after_the_ack_waits_on_a_writer_thread_and_runs_at_once_elsewhere() {
        let ran = Rc::new(Cell::new(0));
        let r = ran.clone();
        after_ack(move || r.set(r.get() + 1));
        assert_eq!(ran.get(), 1, "not a writer thread: it ran at once");
        // A writer thread: it waits for the acknowledgement, and work it leaves runs too.
        AFTER_ACK.with(|a| *a.borrow_mut() = Some(Vec::new()));
        let r = ran.clone();
        after_ack(move || {
            let r2 = r.clone();
            after_ack(move || r2.set(r2.get() + 10));
            r.set(r.get() + 1);
        });
        assert_eq!(ran.get(), 1, "it ran before the acknowledgement");
        run_after_ack();
        assert_eq!(ran.get(), 12);
        run_after_ack();
        assert_eq!(ran.get(), 12, "it ran twice");
    }
}
