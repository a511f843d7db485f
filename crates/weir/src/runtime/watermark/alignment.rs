//! Watermark alignment (Flink's `withWatermarkAlignment`, FLIP-182): the source splits of one
//! alignment group share their watermarks, and a split whose watermark runs more than the
//! maximum drift ahead of the group's slowest one pauses reading until the others catch up.
//! That keeps the state of event-time operators bounded when one input is much faster than
//! another — typically while a job catches up after recovery.
//!
//! Only members that have a watermark count: a split that has not emitted one yet, is idle,
//! or has finished (the maximum watermark) never holds the others back. A member leaves
//! the group when it is dropped (its task ended), so a failed attempt's splits do not hold
//! back the next attempt's.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The shared state of one alignment group (one per group name and job).
#[derive(Debug)]
pub(crate) struct AlignmentGroup {
    /// Member id → its watermark, for members that have one and are neither idle nor done.
    members: Mutex<BTreeMap<u64, u64>>,
    next_id: AtomicU64,
    /// The lowest watermark of the members that count (`u64::MAX` when none does).
    min: AtomicU64,
}

impl Default for AlignmentGroup {
    /// An empty group: nobody holds anybody back.
    fn default() -> Self {
        AlignmentGroup {
            members: Mutex::default(),
            next_id: AtomicU64::new(0),
            min: AtomicU64::new(u64::MAX),
        }
    }
}

impl AlignmentGroup {
    /// A new member (one source split) that may run `max_drift_ms` ahead of the slowest.
    pub(crate) fn join(self: &Arc<Self>, max_drift_ms: u64) -> AlignmentMember {
        AlignmentMember {
            group: self.clone(),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            max_drift_ms,
            paused: Arc::default(),
        }
    }

    fn update(&self, id: u64, watermark: Option<u64>) {
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        match watermark {
            Some(w) => members.insert(id, w),
            None => members.remove(&id),
        };
        let min = members.values().min().copied().unwrap_or(u64::MAX);
        self.min.store(min, Ordering::Relaxed);
    }
}

/// One split's membership in an [`AlignmentGroup`].
#[derive(Debug)]
pub(crate) struct AlignmentMember {
    group: Arc<AlignmentGroup>,
    id: u64,
    max_drift_ms: u64,
    /// Whether the split must pause; read by the source task before every poll.
    paused: Arc<AtomicBool>,
}

impl AlignmentMember {
    /// The flag the source task reads.
    pub(crate) fn pause_flag(&self) -> Arc<AtomicBool> {
        self.paused.clone()
    }

    /// Whether the split is paused.
    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Reports this split's watermark (`None`: it does not count — no watermark yet, idle
    /// or finished) and decides whether it pauses.
    pub(crate) fn report(&self, watermark: Option<u64>) {
        self.group.update(self.id, watermark);
        self.refresh(watermark);
    }

    /// Re-decides whether the split pauses, the others having moved on meanwhile.
    pub(crate) fn refresh(&self, watermark: Option<u64>) {
        let allowed = (self.group.min.load(Ordering::Relaxed)).saturating_add(self.max_drift_ms);
        let paused = watermark.is_some_and(|w| w > allowed);
        self.paused.store(paused, Ordering::Relaxed);
    }
}

impl Drop for AlignmentMember {
    fn drop(&mut self) {
        self.group.update(self.id, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_ahead_of_the_slowest_by_more_than_the_drift_pauses() {
        let g = Arc::new(AlignmentGroup::default());
        let (a, b) = (g.join(100), g.join(100));
        let paused = |m: &AlignmentMember| m.pause_flag().load(Ordering::Relaxed);
        a.report(Some(1_000));
        assert!(!paused(&a), "alone in the group");
        b.report(Some(950));
        a.refresh(Some(1_000));
        assert!(!paused(&a), "50 ahead, drift 100");
        a.report(Some(1_051));
        assert!(paused(&a), "101 ahead");
        assert!(!paused(&b), "the slowest never pauses");
        b.report(Some(960));
        a.refresh(Some(1_051));
        assert!(!paused(&a), "b caught up to within the drift");
        // An idle (or finished) split no longer counts; nor does one that left.
        a.report(Some(5_000));
        assert!(paused(&a));
        b.report(None);
        a.refresh(Some(5_000));
        assert!(!paused(&a), "b is idle");
        b.report(Some(100));
        a.refresh(Some(5_000));
        assert!(paused(&a));
        drop(b);
        a.refresh(Some(5_000));
        assert!(!paused(&a), "b left the group");
    }
}
