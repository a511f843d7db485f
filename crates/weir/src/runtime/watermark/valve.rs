//! A task's watermark from the watermarks and idleness of its input channels (Flink's
//! `StatusWatermarkValve`). Pure: the input task feeds it what arrives and forwards what it
//! returns.
//!
//! Rules:
//! * A channel's watermark only rises; a lower one is ignored.
//! * The task's watermark is the minimum over the *aligned* channels: active ones whose
//!   watermark has reached the task's. A channel that becomes active again after being idle
//!   counts only once it has caught up, so its return never moves the task backwards.
//! * The task's watermark is emitted only when it rises: it never goes backwards.
//! * When every channel is idle the task is idle (and forwards that), after advancing to
//!   the highest watermark any channel reached.

use super::{WatermarkStatus, MIN_WATERMARK};

/// What one input channel has said.
#[derive(Debug, Clone, Copy)]
struct Channel {
    watermark: u64,
    idle: bool,
    aligned: bool,
}

/// What the task should forward after an input event, in this order: a status change to
/// active, a watermark, a status change to idle.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ValveOutput {
    /// The task's status changed.
    pub status: Option<WatermarkStatus>,
    /// The task's watermark rose to this.
    pub watermark: Option<u64>,
}

/// The watermark state machine of a task with `n` input channels.
#[derive(Debug)]
pub struct StatusWatermarkValve {
    channels: Vec<Channel>,
    last_output: u64,
    idle: bool,
}

impl StatusWatermarkValve {
    /// A valve over `channels` inputs, all active, at the minimum watermark.
    pub fn new(channels: usize) -> Self {
        StatusWatermarkValve {
            channels: vec![
                Channel {
                    watermark: MIN_WATERMARK,
                    idle: false,
                    aligned: true,
                };
                channels
            ],
            last_output: MIN_WATERMARK,
            idle: false,
        }
    }

    /// The task's current watermark (what the tests observe; the task forwards it as it
    /// rises instead of asking).
    #[cfg(test)]
    pub fn current(&self) -> u64 {
        self.last_output
    }

    /// Channel `c` sent `watermark`.
    pub fn input_watermark(&mut self, c: usize, watermark: u64) -> ValveOutput {
        let ch = &mut self.channels[c];
        if ch.idle || watermark <= ch.watermark {
            return ValveOutput::default();
        }
        ch.watermark = watermark;
        if !ch.aligned && watermark >= self.last_output {
            ch.aligned = true;
        }
        ValveOutput {
            status: None,
            watermark: self.advance_to_min_of_aligned(),
        }
    }

    /// Channel `c` changed its status.
    pub fn input_status(&mut self, c: usize, status: WatermarkStatus) -> ValveOutput {
        let last_output = self.last_output;
        let ch = &mut self.channels[c];
        match status {
            WatermarkStatus::Idle if !ch.idle => {
                ch.idle = true;
                ch.aligned = false;
                if self.channels.iter().all(|c| c.idle) {
                    let highest = self.channels.iter().map(|c| c.watermark).max();
                    let watermark = highest.filter(|&w| w > self.last_output);
                    if let Some(w) = watermark {
                        self.last_output = w;
                    }
                    self.idle = true;
                    ValveOutput {
                        status: Some(WatermarkStatus::Idle),
                        watermark,
                    }
                } else {
                    ValveOutput {
                        status: None,
                        watermark: self.advance_to_min_of_aligned(),
                    }
                }
            }
            WatermarkStatus::Active if ch.idle => {
                ch.idle = false;
                ch.aligned = ch.watermark >= last_output;
                let status =
                    std::mem::replace(&mut self.idle, false).then_some(WatermarkStatus::Active);
                ValveOutput {
                    status,
                    watermark: None,
                }
            }
            _ => ValveOutput::default(),
        }
    }

    fn advance_to_min_of_aligned(&mut self) -> Option<u64> {
        let min = self
            .channels
            .iter()
            .filter(|c| c.aligned)
            .map(|c| c.watermark)
            .min()?;
        (min > self.last_output).then(|| {
            self.last_output = min;
            min
        })
    }
}

#[cfg(test)]
mod tests {
    use super::WatermarkStatus::{Active, Idle};
    use super::*;

    fn wm(w: u64) -> ValveOutput {
        ValveOutput {
            status: None,
            watermark: Some(w),
        }
    }
    const NOTHING: ValveOutput = ValveOutput {
        status: None,
        watermark: None,
    };

    #[test]
    fn the_minimum_over_inputs_and_never_backwards() {
        let mut v = StatusWatermarkValve::new(3);
        assert_eq!(
            v.input_watermark(0, 10),
            NOTHING,
            "1 and 2 are still at the minimum"
        );
        assert_eq!(v.input_watermark(1, 20), NOTHING);
        assert_eq!(v.input_watermark(2, 5), wm(5));
        assert_eq!(
            v.input_watermark(2, 30),
            wm(10),
            "now channel 0 holds it back"
        );
        assert_eq!(
            v.input_watermark(0, 8),
            NOTHING,
            "a lower watermark is ignored"
        );
        assert_eq!(v.input_watermark(0, 25), wm(20));
        assert_eq!(v.current(), 20);
        assert_eq!(v.input_watermark(1, 20), NOTHING, "equal: nothing new");
    }

    #[test]
    fn an_idle_input_does_not_hold_back_the_others() {
        let mut v = StatusWatermarkValve::new(2);
        assert_eq!(v.input_watermark(0, 10), NOTHING);
        assert_eq!(v.input_status(1, Idle), wm(10), "only channel 0 counts now");
        assert_eq!(v.input_watermark(0, 15), wm(15));
        assert_eq!(
            v.input_watermark(1, 100),
            NOTHING,
            "an idle channel's watermark is ignored"
        );
        // Channel 1 comes back behind the task's watermark: it must catch up first.
        assert_eq!(v.input_status(1, Active), NOTHING);
        assert_eq!(v.input_watermark(1, 12), NOTHING);
        assert_eq!(
            v.input_watermark(0, 40),
            wm(40),
            "1 is not aligned yet (12 < 15)"
        );
        assert_eq!(
            v.input_watermark(1, 30),
            NOTHING,
            "30 < 40: still catching up"
        );
        assert_eq!(
            v.input_watermark(1, 50),
            NOTHING,
            "aligned now, but 0 is at 40"
        );
        assert_eq!(v.input_watermark(0, 60), wm(50));
    }

    #[test]
    fn all_inputs_idle_makes_the_task_idle_at_the_highest_watermark() {
        let mut v = StatusWatermarkValve::new(2);
        v.input_watermark(0, 10);
        v.input_watermark(1, 30);
        assert_eq!(v.current(), 10);
        assert_eq!(v.input_status(1, Idle), NOTHING, "channel 0 still at 10");
        assert_eq!(
            v.input_status(0, Idle),
            ValveOutput {
                status: Some(Idle),
                watermark: Some(30)
            }
        );
        assert_eq!(v.input_status(0, Idle), NOTHING, "already idle");
        assert_eq!(
            v.input_status(0, Active),
            ValveOutput {
                status: Some(Active),
                watermark: None
            }
        );
        assert_eq!(v.input_watermark(0, 20), NOTHING, "behind the task's 30");
        assert_eq!(v.input_watermark(0, 31), wm(31));
    }
}
