//! Sinks for tests and benchmarks: collect into memory, or discard.

use std::sync::{Arc, Mutex};

use crate::api::functions::{CheckpointedFunction, SinkFunction};
use crate::error::Result;
use crate::state::operator::InitContext;

/// Collects records in memory, per subtask. At the start of each attempt a subtask's
/// records are cleared, so after a recovery it holds what the *latest* attempt emitted —
/// exactly right for jobs that emit their results at end of input (and a test helper, not
/// an exactly-once sink for streaming output).
pub struct CollectSink<T> {
    parts: Arc<Mutex<Vec<Vec<T>>>>,
    subtask: usize,
}

impl<T> Clone for CollectSink<T> {
    fn clone(&self) -> Self {
        CollectSink {
            parts: self.parts.clone(),
            subtask: self.subtask,
        }
    }
}

impl<T> Default for CollectSink<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> CollectSink<T> {
    /// An empty sink; clones share the collected records.
    pub fn new() -> Self {
        CollectSink {
            parts: Arc::new(Mutex::new(Vec::new())),
            subtask: 0,
        }
    }

    /// Takes every collected record (all subtasks).
    pub fn take(&self) -> Vec<T> {
        let mut parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
        parts.drain(..).flatten().collect()
    }
}

impl<T> CheckpointedFunction for CollectSink<T> {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        self.subtask = ctx.subtask_index() as usize;
        let mut parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
        if parts.len() <= self.subtask {
            parts.resize_with(self.subtask + 1, Vec::new);
        }
        parts[self.subtask].clear();
        Ok(())
    }
}

impl<T: Send + 'static> SinkFunction<T> for CollectSink<T> {
    fn invoke(&mut self, batch: &mut Vec<T>) -> Result<()> {
        let mut parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
        parts[self.subtask].append(batch);
        Ok(())
    }
}

/// Drops every record (benchmarks: measures the engine, not the output).
#[derive(Clone, Copy, Default, Debug)]
pub struct DiscardSink;

impl CheckpointedFunction for DiscardSink {}

impl<T: Send + 'static> SinkFunction<T> for DiscardSink {
    fn invoke(&mut self, batch: &mut Vec<T>) -> Result<()> {
        batch.clear();
        Ok(())
    }
}
