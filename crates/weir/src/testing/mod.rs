//! Functions and truths for testing jobs that must count exactly once — shared by Weir's
//! own test suites and offered to users for theirs (as Flink's test utilities are).
//!
//! The pattern every exactly-once test here follows: run a job over the generator (event
//! `i` has key `i % keys`), fail it as often as you like, and compare what it produced with
//! [`expected_counts`] — the exact truth, not a tolerance. Over a bounded input a job that
//! ignored its checkpoints and started over would give the same counts, so a recovery test
//! also calls [`assert_resumed`]: the restarts restored completed checkpoints and the
//! sources read only what those checkpoints had not covered.
//!
//! A test that must act at a known point of a running job (a checkpoint mid-input, a kill
//! after it) holds its source there with a [`Gated`] source and a [`SourceGate`], never by
//! waiting "long enough".

mod gated;

pub use gated::{Admit, Gated, HoldOpen, SourceGate, HOLD_OPEN_LIMIT};

use std::collections::HashMap;

use crate::api::functions::{CheckpointedFunction, Collector, KeyedProcessFunction};
use crate::api::stream::StreamEnvironment;
use crate::error::Result;
use crate::runtime::coordinator::executor::JobResult;
use crate::state::keyed::{KeyedContext, KeyedEndContext, KeyedStateStore, ValueState};
use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

/// Counts records per key in value state `count`; emits every `(key, count)` once, at end
/// of input. Lost records show as a low count, replayed ones as a high count.
#[derive(Clone, Default)]
pub struct CountPerKey {
    count: Option<ValueState<u64>>,
}

impl CheckpointedFunction for CountPerKey {}

impl<T> KeyedProcessFunction<u64, T, (u64, u64)> for CountPerKey {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.count = Some(states.value_state("count")?);
        Ok(())
    }

    fn process(
        &mut self,
        _: T,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let count = self.count.expect("open() declares the state");
        *ctx.get_mut_or_insert_with(count, || 0) += 1;
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let count = self.count.expect("open() declares the state");
        for (k, v) in ctx.entries(count) {
            out.collect((k, v));
        }
        Ok(())
    }
}

/// Numbers each key's records 1, 2, 3, … in value state `seq` and emits `(key, number)`
/// for every record: any lost or duplicated *output* shows up as a gap or a repeat in a
/// key's numbers — the check for exactly-once sinks.
#[derive(Clone, Default)]
pub struct Sequence {
    seq: Option<ValueState<u64>>,
}

impl CheckpointedFunction for Sequence {}

impl<T> KeyedProcessFunction<u64, T, (u64, u64)> for Sequence {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.seq = Some(states.value_state("seq")?);
        Ok(())
    }

    fn process(
        &mut self,
        _: T,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let key = *ctx.key();
        let seq = ctx.get_mut_or_insert_with(self.seq.expect("open() declares the state"), || 0);
        *seq += 1;
        let seq = *seq;
        out.collect((key, seq));
        Ok(())
    }
}

/// The exact count of every key among events `0..n` keyed by `i % keys`.
pub fn expected_counts(n: u64, keys: u64) -> HashMap<u64, u64> {
    (0..keys.min(n))
        .map(|k| (k, n / keys + u64::from(k < n % keys)))
        .collect()
}

/// Panics unless `result` proves that the job recovered from checkpoints rather than from
/// the beginning, for a job whose sources emit `total_records` records in all:
/// * at least one attempt started from a checkpoint (a restart, or `--restore`);
/// * every restart restored a checkpoint completed in this run (or the one the run itself
///   started from), which the restart notice names, at a source position past 0;
/// * the last attempt finished, and its sources read exactly the records the restored
///   checkpoint had not covered: `restored + read == total_records`.
///
/// Together with exact final counts this catches a restore that loaded nothing, one that
/// rewound the sources but dropped the state (counts too low) and one that restored the
/// state but replayed the input from the start (the last check, and counts too high).
pub fn assert_resumed(result: &JobResult, total_records: u64) {
    let history = &result.history;
    assert!(
        history.iter().any(|a| a.restored.is_some()),
        "no attempt started from a checkpoint: {history:#?}\nnotices: {:#?}",
        result.notices
    );
    let initial = history.first().and_then(|a| a.restored.as_ref());
    for a in history.iter().skip(1) {
        let Some(r) = &a.restored else {
            panic!(
                "attempt {} restarted from the beginning, not from a checkpoint: {history:#?}\n\
                 notices: {:#?}",
                a.attempt, result.notices
            );
        };
        let ours = result.checkpoints.iter().any(|c| c.id == r.checkpoint_id);
        assert!(
            ours || initial.is_some_and(|i| i.checkpoint_id == r.checkpoint_id),
            "attempt {} restored checkpoint {}, which this run never completed",
            a.attempt,
            r.checkpoint_id
        );
        let named = format!("restarting from {}", r.path.display());
        assert!(
            result.notices.iter().any(|n| n.contains(&named)),
            "no restart notice names {}: {:#?}",
            r.path.display(),
            result.notices
        );
    }
    for a in history.iter() {
        if let Some(r) = &a.restored {
            assert!(
                r.source_records > 0,
                "attempt {} restored checkpoint {} at source position 0 (nothing had been read)",
                a.attempt,
                r.checkpoint_id
            );
        }
    }
    let last = history.last().expect("a job has at least one attempt");
    assert!(last.failure.is_none(), "the last attempt failed: {last:#?}");
    if let Some(r) = &last.restored {
        assert_eq!(
            r.source_records + last.source_records,
            total_records,
            "the last attempt restored checkpoint {} at {} records and then read {}: the \
             sources did not resume where the checkpoint left them",
            r.checkpoint_id,
            r.source_records,
            last.source_records
        );
    }
}

/// Runs `env` to its end on this thread (an environment is not `Send`), and ends the whole
/// test process with a message naming the test if the job is still running after
/// `deadline`: a job that hangs (a continuous source waiting for input that never comes, a
/// wait on a stopped server) then fails the suite at once instead of holding it for ever.
/// Meant for test binaries only, since it exits the process.
pub fn execute_within(env: StreamEnvironment, deadline: Duration) -> Result<JobResult> {
    let (finished, watch) = mpsc::channel::<()>();
    let test = std::thread::current().name().unwrap_or("?").to_string();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(deadline) {
            // Straight to the process's stderr: a test harness captures `eprintln!`, and
            // its capture is lost when the process exits.
            let _ = writeln!(
                std::io::stderr(),
                "{test}: the job did not finish within {deadline:?}; aborting the tests"
            );
            std::process::exit(101);
        }
    });
    let result = env.execute();
    drop(finished);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_counts_sum_to_n_and_are_exact() {
        for (n, keys) in [(0, 5), (3, 5), (10, 5), (11, 5), (1_000_003, 977)] {
            let c = expected_counts(n, keys);
            assert_eq!(c.values().sum::<u64>(), n);
            let mut brute = HashMap::new();
            if n < 100 {
                for i in 0..n {
                    *brute.entry(i % keys).or_insert(0) += 1;
                }
                assert_eq!(c, brute);
            }
        }
    }
}
