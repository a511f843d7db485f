//! The writer pool: threads that take snapshot jobs off a channel, write them
//! ([`write_snapshot`]) and report each outcome, so that tasks never wait for storage (the
//! asynchronous part of a snapshot, Flink's `AsyncCheckpointRunnable`).
//!
//! The pool knows nothing of the runtime's events: it reports a [`SnapshotWritten`] and
//! the caller says, through `From`, what event that is on its own channel.

use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use super::{write_snapshot, SnapshotJob, TaskAck};
use crate::checkpoint::storage::CheckpointStorage;
use crate::error::Result;
use crate::state::after_ack;

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
                    // Work a snapshot leaves for after its acknowledgement waits for it.
                    after_ack::hold_on_this_thread();
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
                        after_ack::run_held();
                        if !sent {
                            return;
                        }
                    }
                })
                .ok()
        })
        .collect()
}
