//! The operator a [`WatermarkStrategy`] becomes (Flink's `TimestampsAndWatermarksOperator`):
//! it gives every record its timestamp, feeds the generator, and emits watermarks and
//! idleness downstream — after the batch whose records moved them, so a watermark never
//! overtakes a record it covers.
//!
//! It replaces the watermarks of its input: upstream watermarks and idleness are dropped,
//! except the final watermark ([`MAX_WATERMARK`]) that ends a bounded input, which it
//! forwards. Its periodic call comes with the task's processing-time tick, at most every
//! auto-watermark interval (0 turns periodic emission off).

use super::alignment::{AlignmentGroup, AlignmentMember};
use super::{TimestampAssigner, MAX_WATERMARK, MIN_WATERMARK};
use super::{WatermarkGenerator, WatermarkOutput, WatermarkStatus, WatermarkStrategy};
use crate::error::{Error, Result};
use crate::runtime::event::CheckpointBarrier;
use crate::runtime::output::{Output, TaskSnapshot};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Assigns timestamps and generates watermarks; see the module docs.
pub struct TimestampsAndWatermarksOp<T> {
    assigner: Option<TimestampAssigner<T>>,
    /// Membership of the strategy's alignment group (at sources only).
    alignment: Option<AlignmentMember>,
    generator: Box<dyn WatermarkGenerator<T>>,
    output: WatermarkOutput,
    interval_ms: u64,
    last_periodic_ms: Option<u64>,
    timestamps: Vec<u64>,
    next: Box<dyn Output<T>>,
}

impl<T> TimestampsAndWatermarksOp<T> {
    /// An instance of `strategy` emitting periodically every `interval_ms` (0: never).
    pub(crate) fn new(
        strategy: &WatermarkStrategy<T>,
        interval_ms: u64,
        next: Box<dyn Output<T>>,
    ) -> Result<Self>
    where
        T: 'static,
    {
        Ok(TimestampsAndWatermarksOp {
            assigner: strategy.assigner(),
            alignment: None,
            generator: strategy.create_generator()?,
            output: WatermarkOutput::default(),
            interval_ms,
            last_periodic_ms: None,
            timestamps: Vec::new(),
            next,
        })
    }

    /// An instance at a source: it joins `group`, the job's alignment group of the
    /// strategy's group name (if it has one), and returns the flag that tells the source
    /// task to pause.
    pub(crate) fn at_source(
        strategy: &WatermarkStrategy<T>,
        group: Option<&Arc<AlignmentGroup>>,
        interval_ms: u64,
        next: Box<dyn Output<T>>,
    ) -> Result<(Self, Option<Arc<AtomicBool>>)>
    where
        T: 'static,
    {
        let mut op = Self::new(strategy, interval_ms, next)?;
        if let (Some(group), Some((_, drift))) = (group, strategy.alignment()) {
            op.alignment = Some(group.join(drift));
        }
        let flag = op.alignment.as_ref().map(AlignmentMember::pause_flag);
        Ok((op, flag))
    }

    /// The watermark this instance counts with in its alignment group.
    fn aligned_watermark(&self) -> Option<u64> {
        let w = self.output.current_watermark();
        (!self.output.idle && w > MIN_WATERMARK && w < MAX_WATERMARK).then_some(w)
    }

    /// Sends what the generator changed: active, then the watermark, then idle.
    fn emit_changes(&mut self) -> Result<()> {
        let (activate, watermark, go_idle) = self.output.take_changes();
        if activate.is_some() || watermark.is_some() || go_idle {
            if let Some(member) = &self.alignment {
                member.report(self.aligned_watermark());
            }
        }
        if let Some(status) = activate {
            self.next.on_watermark_status(status)?;
        }
        if let Some(w) = watermark {
            self.next.on_watermark(w)?;
        }
        if go_idle {
            self.next.on_watermark_status(WatermarkStatus::Idle)?;
        }
        Ok(())
    }
}

impl<T: Send> TimestampsAndWatermarksOp<T> {
    /// Assigns the timestamps (`timestamps` holds the records' own when `carried`, else it
    /// is filled), feeds the generator and pushes the batch on. A watermark the generator
    /// emits for a record (punctuated) goes out right after that record: the batch is cut
    /// there, so later records of the batch can be late, exactly as one record at a time.
    fn assign_and_push(
        &mut self,
        batch: &mut Vec<T>,
        timestamps: &mut Vec<u64>,
        carried: bool,
    ) -> Result<()> {
        let mut i = 0;
        while i < batch.len() {
            let r = &batch[i];
            let t = match (&self.assigner, carried) {
                (Some(assign), true) => assign(r, Some(timestamps[i])),
                (None, true) => timestamps[i],
                (Some(assign), false) => assign(r, None),
                (None, false) => return Err(missing_timestamp()),
            };
            if carried {
                timestamps[i] = t;
            } else {
                timestamps.push(t);
            }
            self.generator.on_event(&batch[i], t, &mut self.output);
            i += 1;
            if self.output.has_changes() && i < batch.len() {
                let mut rest = batch.split_off(i);
                let mut rest_timestamps = if carried {
                    timestamps.split_off(i)
                } else {
                    Vec::with_capacity(rest.len())
                };
                self.next.push_timestamped(batch, timestamps)?;
                self.emit_changes()?;
                std::mem::swap(batch, &mut rest);
                std::mem::swap(timestamps, &mut rest_timestamps);
                i = 0;
            }
        }
        self.next.push_timestamped(batch, timestamps)?;
        self.emit_changes()
    }
}

fn missing_timestamp() -> Error {
    Error::InvalidJob(
        "a record without a timestamp reached a watermark strategy without a timestamp \
         assigner; give the strategy one with WatermarkStrategy::with_timestamp_assigner"
            .into(),
    )
}

impl<T: Send> Output<T> for TimestampsAndWatermarksOp<T> {
    fn push(&mut self, batch: &mut Vec<T>) -> Result<()> {
        if self.assigner.is_none() {
            return Err(missing_timestamp());
        }
        let mut timestamps = std::mem::take(&mut self.timestamps);
        timestamps.clear();
        let pushed = self.assign_and_push(batch, &mut timestamps, false);
        self.timestamps = timestamps;
        pushed
    }
    fn push_timestamped(&mut self, batch: &mut Vec<T>, timestamps: &mut Vec<u64>) -> Result<()> {
        self.assign_and_push(batch, timestamps, true)
    }
    fn on_watermark(&mut self, watermark: u64) -> Result<()> {
        if watermark == MAX_WATERMARK {
            self.output.emit_watermark(MAX_WATERMARK);
            self.emit_changes()?;
        }
        Ok(())
    }
    fn on_watermark_status(&mut self, _: WatermarkStatus) -> Result<()> {
        Ok(())
    }
    fn on_processing_time(&mut self, now_ms: u64) -> Result<()> {
        let due = self
            .last_periodic_ms
            .is_none_or(|last| now_ms.saturating_sub(last) >= self.interval_ms);
        if self.interval_ms > 0 && due {
            self.last_periodic_ms = Some(now_ms);
            // A paused split reads nothing: asking its generator would only let it mark the
            // split idle for the pause, which would lift the pause.
            if !self
                .alignment
                .as_ref()
                .is_some_and(AlignmentMember::is_paused)
            {
                self.generator.on_periodic_emit(&mut self.output);
                self.emit_changes()?;
            }
            if let Some(member) = &self.alignment {
                member.refresh(self.aligned_watermark());
            }
        }
        self.next.on_processing_time(now_ms)
    }
    fn snapshot(&mut self, b: CheckpointBarrier, s: &mut TaskSnapshot) -> Result<()> {
        self.next.snapshot(b, s)
    }
    crate::runtime::output::forward_room!();
    fn flush(&mut self) -> Result<()> {
        self.next.flush()
    }
    fn end_of_input(&mut self) -> Result<()> {
        self.on_watermark(MAX_WATERMARK)?;
        self.next.end_of_input()
    }
    fn notify_complete(&mut self, id: u64) -> Result<()> {
        self.next.notify_complete(id)
    }
    fn notify_aborted(&mut self, id: u64) -> Result<()> {
        self.next.notify_aborted(id)
    }
}
