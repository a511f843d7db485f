//! A deterministic, replayable sequence source: emits `0..n`, split over subtasks.
//!
//! The sequence is divided into *splits*: split `j` of `m` holds `j, j+m, j+2m, …`. A fresh
//! job with parallelism `p` makes `m = p` splits and gives split `s` to subtask `s`, so
//! subtask `s` emits `s, s+p, s+2p, …` (workload W1). Each split's next value is operator
//! list state, so a restore rewinds every split exactly, at any parallelism (splits are
//! redistributed like any list state).
//!
//! A subtask holding several splits (after a restore at a lower parallelism) emits their
//! values merged in increasing order, not split after split: the splits were restored at
//! different positions, and a sequence that stands for time (the Nexmark generator's event
//! numbers) must stay in time order, or the subtask's watermark, taken from the split
//! furthest ahead, would make the others' records late.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::api::functions::{CheckpointedFunction, SourceFunction, SourceStatus};
use crate::error::Result;
use crate::state::operator::{InitContext, SnapshotContext};

/// One strided part of the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Split {
    /// Split index `j`.
    index: u64,
    /// Number of splits `m` (the stride).
    count: u64,
    /// Next value to emit.
    next: u64,
}

/// Emits the numbers `0..n` (see the module docs), optionally paced to a rate.
#[derive(Debug, Clone)]
pub struct GeneratorSource {
    n: u64,
    rate_per_subtask: Option<f64>,
    splits: Vec<Split>,
    started: Option<Instant>,
    emitted: u64,
}

impl GeneratorSource {
    /// A generator of `0..n`.
    pub fn new(n: u64) -> Self {
        GeneratorSource {
            n,
            rate_per_subtask: None,
            splits: Vec::new(),
            started: None,
            emitted: 0,
        }
    }

    /// Limits the whole source (all subtasks together) to about `events_per_second`.
    pub fn with_rate(mut self, events_per_second: Option<f64>) -> Self {
        self.rate_per_subtask = events_per_second;
        self
    }
}

impl CheckpointedFunction for GeneratorSource {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        if ctx.is_restored() && ctx.has_state() {
            self.splits = ctx.list("splits")?;
        } else {
            let p = ctx.parallelism() as u64;
            let s = ctx.subtask_index() as u64;
            self.splits = vec![Split {
                index: s,
                count: p,
                next: s,
            }];
        }
        if let Some(r) = self.rate_per_subtask.as_mut() {
            *r /= ctx.parallelism() as f64;
        }
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        ctx.set_operator_list("splits", &self.splits)
    }

    fn operator_state(&self) -> Vec<crate::state::schema::OperatorListDeclaration> {
        vec![crate::state::schema::OperatorListDeclaration::of::<Split>(
            "splits",
        )]
    }
}

impl SourceFunction<u64> for GeneratorSource {
    fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourceStatus> {
        let mut budget = max as u64;
        if let Some(rate) = self.rate_per_subtask {
            let started = *self.started.get_or_insert_with(Instant::now);
            let allowed = (started.elapsed().as_secs_f64() * rate) as u64;
            budget = budget.min(allowed.saturating_sub(self.emitted));
            if budget == 0 {
                return Ok(SourceStatus::Idle);
            }
        }
        // The splits merged in increasing order (module docs): the split with the lowest
        // next value runs until another split's next value is lower (with one split, to n).
        let n = self.n;
        while budget > 0 {
            let live = self.splits.iter().enumerate().filter(|(_, sp)| sp.next < n);
            let Some((l, _)) = live.clone().min_by_key(|(_, sp)| sp.next) else {
                break;
            };
            let bound = live
                .filter(|&(i, _)| i != l)
                .map(|(_, sp)| sp.next)
                .min()
                .unwrap_or(n);
            let sp = &mut self.splits[l];
            let take = (bound - sp.next).div_ceil(sp.count).clamp(1, budget);
            out.extend((0..take).map(|i| sp.next + i * sp.count));
            sp.next += take * sp.count;
            budget -= take;
            self.emitted += take;
        }
        if self.splits.iter().all(|s| s.next >= n) {
            Ok(SourceStatus::Finished)
        } else {
            Ok(SourceStatus::More)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn init(g: &mut GeneratorSource, s: u32, p: u32) {
        g.initialize_state(&InitContext::new(false, s, p, BTreeMap::new()))
            .unwrap();
    }

    fn drain(g: &mut GeneratorSource, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        while g.poll(&mut out, max).unwrap() != SourceStatus::Finished {}
        out
    }

    #[test]
    fn subtasks_stride_and_cover_everything_once() {
        let mut all = Vec::new();
        for s in 0..3 {
            let mut g = GeneratorSource::new(100);
            init(&mut g, s, 3);
            let v = drain(&mut g, 7);
            assert!(v.iter().all(|x| x % 3 == s as u64));
            all.extend(v);
        }
        all.sort();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn restore_rewinds_to_the_snapshot_even_at_another_parallelism() {
        let mut snaps = Vec::new();
        let mut before = Vec::new();
        for s in 0..2 {
            let mut g = GeneratorSource::new(50);
            init(&mut g, s, 2);
            let mut out = Vec::new();
            g.poll(&mut out, 10).unwrap();
            before.extend(out);
            let mut ctx = SnapshotContext::new(1);
            g.snapshot_state(&mut ctx).unwrap();
            snaps.push(ctx.lists);
        }
        let old: Vec<_> = snaps.iter().map(Some).collect();
        let mut after = Vec::new();
        for s in 0..3 {
            let lists = crate::state::operator::redistribute(&old, s, 3);
            let mut g = GeneratorSource::new(50);
            g.initialize_state(&InitContext::new(true, s, 3, lists))
                .unwrap();
            after.extend(drain(&mut g, 4));
        }
        before.extend(after);
        before.sort();
        assert_eq!(before, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn several_splits_are_merged_in_increasing_order() {
        // Two splits of three restored at different positions into one subtask.
        let splits = vec![
            Split {
                index: 0,
                count: 3,
                next: 30,
            },
            Split {
                index: 2,
                count: 3,
                next: 14,
            },
        ];
        let mut g = GeneratorSource::new(60);
        g.splits = splits;
        let v = drain(&mut g, 4);
        let mut want: Vec<u64> = (14..60).step_by(3).chain((30..60).step_by(3)).collect();
        want.sort();
        assert_eq!(v, want);
    }
}
