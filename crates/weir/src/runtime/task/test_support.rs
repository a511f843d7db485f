//! Fixtures of the task loops' tests, written once: a chain that logs what reaches it
//! (optionally holding each push, or switching its room under the consumers' credit), and
//! a task context over test channels.

use std::fmt::Display;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::{Control, TaskContext, TaskMetrics};
use crate::checkpoint::writer::SnapshotJob;
use crate::error::Result;
use crate::runtime::alignment::CheckpointingMode;
use crate::runtime::event::CheckpointBarrier;
use crate::runtime::output::{Output, TaskSnapshot};
use crate::runtime::watermark::WatermarkStatus;

/// The end of a test chain: logs `R<x>` per record and `S<id>` per snapshot, and with
/// `event_time` also `R<x>@<t>` for timestamped records, `W<w>` per watermark and the
/// watermark statuses.
pub(super) struct LogChain {
    pub log: Arc<Mutex<Vec<String>>>,
    pub event_time: bool,
    /// Each push first waits on it (open once its sender is dropped).
    pub gate: Option<Receiver<()>>,
    /// The room the test switches; without it the chain always has room.
    pub room: Option<Arc<AtomicBool>>,
    /// What [`Output::batch_hint`] says (a writer's debloated batches); `None`: a full
    /// batch.
    pub hint: Option<usize>,
}

impl LogChain {
    /// A chain logging into `log`, event time included, never held, always with room.
    pub fn new(log: &Arc<Mutex<Vec<String>>>) -> Self {
        LogChain {
            log: log.clone(),
            event_time: true,
            gate: None,
            room: None,
            hint: None,
        }
    }

    fn wait(&self) {
        if let Some(gate) = &self.gate {
            let _ = gate.recv();
        }
    }

    fn note(&self, entry: String) {
        self.log.lock().unwrap().push(entry);
    }
}

impl<T: Display> Output<T> for LogChain {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        self.wait();
        let mut log = self.log.lock().unwrap();
        log.extend(batch.drain(..).map(|x| format!("R{x}")));
        Ok(())
    }
    fn push_timestamped(&mut self, batch: &mut Vec<T>, ts: &mut Vec<u64>) -> Result<()> {
        if !self.event_time {
            ts.clear();
            return self.push(batch);
        }
        self.wait();
        let mut log = self.log.lock().unwrap();
        log.extend(
            batch
                .drain(..)
                .zip(ts.drain(..))
                .map(|(x, t)| format!("R{x}@{t}")),
        );
        Ok(())
    }
    fn on_watermark(&mut self, w: u64) -> Result<()> {
        if self.event_time {
            self.note(format!("W{w}"));
        }
        Ok(())
    }
    fn on_watermark_status(&mut self, s: WatermarkStatus) -> Result<()> {
        if self.event_time {
            self.note(format!("{s:?}"));
        }
        Ok(())
    }
    fn on_processing_time(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
    fn snapshot(&mut self, b: CheckpointBarrier, _: &mut TaskSnapshot) -> Result<()> {
        self.note(format!("S{}", b.id));
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<()> {
        Ok(())
    }
    fn notify_complete(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
    fn notify_aborted(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
    fn has_room(&self) -> bool {
        self.room
            .as_ref()
            .is_none_or(|room| room.load(Ordering::Relaxed))
    }
    fn batch_hint(&self) -> usize {
        self.hint.unwrap_or(crate::runtime::BATCH_SIZE)
    }
}

/// Subtask 0 of 1 in `mode`, batches flushed every 5 ms, with the senders of its control
/// messages and the receiver of its snapshot jobs.
pub(super) fn context(
    mode: CheckpointingMode,
) -> (TaskContext, Sender<Control>, Receiver<SnapshotJob>) {
    let (ctl_tx, ctl_rx) = crossbeam_channel::unbounded();
    let (writer_tx, writer_rx) = crossbeam_channel::unbounded();
    let ctx = TaskContext {
        index: 0,
        subtask: 0,
        parallelism: 1,
        attempt: 1,
        mode,
        buffer_timeout: Duration::from_millis(5),
        control: ctl_rx,
        writer: writer_tx,
        injector: None,
        metrics: Arc::new(TaskMetrics::default()),
        events: crossbeam_channel::unbounded().0,
    };
    (ctx, ctl_tx, writer_rx)
}
