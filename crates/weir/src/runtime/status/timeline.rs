//! A subtask's checkpoint phases as instants after the trigger: what the dashboard's
//! checkpoint timeline draws, one row per subtask.

use serde::Serialize;

use crate::checkpoint::writer::PhaseTimes;

/// When each phase of a subtask's snapshot happened, in milliseconds after the
/// checkpoint's trigger (microsecond resolution; the trigger itself is known to the
/// millisecond, so all rows share up to 1 ms of offset). Instants rather than durations,
/// so gaps show too: a barrier stuck upstream, a snapshot queued for a writer, an
/// acknowledgement waiting for the executor.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SubtaskTimeline {
    /// The first barrier reached the task: alignment started.
    pub barrier_ms: f64,
    /// The last barrier arrived: alignment ended, the synchronous part started.
    pub sync_start_ms: f64,
    /// The synchronous part ended: the task went back to its records.
    pub sync_end_ms: f64,
    /// A writer started the asynchronous part.
    pub async_start_ms: f64,
    /// The asynchronous part ended.
    pub async_end_ms: f64,
    /// The acknowledgement reached the executor.
    pub ack_ms: f64,
}

impl SubtaskTimeline {
    /// `times` relative to a trigger at `trigger_ms`; `None` if the barrier's arrival was
    /// not recorded.
    pub(crate) fn relative(times: &PhaseTimes, trigger_ms: u64) -> Option<Self> {
        if times.barrier_us == 0 {
            return None;
        }
        let origin = trigger_ms.saturating_mul(1000) as i128;
        let at = |us: u64| (us as i128 - origin) as f64 / 1000.0;
        // An unrecorded (0) or out-of-order later phase sits where the one before it ended.
        let mut last = 0;
        let mut step = |us: u64| {
            last = us.max(last);
            at(last)
        };
        Some(Self {
            barrier_ms: step(times.barrier_us),
            sync_start_ms: step(times.sync_start_us),
            sync_end_ms: step(times.sync_end_us),
            async_start_ms: step(times.async_start_us),
            async_end_ms: step(times.async_end_us),
            ack_ms: step(times.ack_us),
        })
    }
}
