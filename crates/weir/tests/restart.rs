//! Restart strategies end to end: a failure that repeats identically ends the job with its
//! cause instead of restarting for ever, and the failure-rate strategy gives up on a burst.

mod common;

use std::time::Duration;

use weir::prelude::*;

fn config(name: &str, dir: &std::path::Path) -> JobConfig {
    let mut c = JobConfig::new(name);
    c.checkpoint_dir = common::checkpoint_dir(dir);
    c.checkpointing.interval = Some(Duration::from_millis(20));
    c
}

/// Fails on record `bad`, as a decoder does on a record it cannot read.
#[derive(Clone)]
struct Decode {
    bad: u64,
}

impl CheckpointedFunction for Decode {}

impl ProcessFunction<u64, u64> for Decode {
    fn process(&mut self, i: u64, out: &mut Collector<'_, u64>) -> Result<()> {
        if i == self.bad {
            return Err(Error::User(format!("cannot decode record {i}")));
        }
        out.collect(i);
        Ok(())
    }
}

/// A job over `n` generated records whose map fails on record `bad` every time it sees it,
/// as a job does on a record it cannot decode.
fn run_with_bad_record(cfg: JobConfig, n: u64, bad: u64) -> Result<JobResult> {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    env.add_source("events", GeneratorSource::new(n).with_rate(Some(500_000.0)))
        .uid("events")
        .process(Decode { bad })
        .uid("decode")
        .key_by(|i: &u64| i % 10)
        .reduce(|a, b| a + b)
        .uid("sum")
        .add_sink("collect", out);
    env.execute()
}

#[test]
fn a_failure_that_repeats_identically_ends_the_job_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("bad-record", dir.path());
    // The default strategy (unbounded exponential delay), with short delays for the test.
    cfg.restart = RestartStrategy::ExponentialDelay {
        attempts: u32::MAX,
        initial: Duration::from_millis(5),
        max: Duration::from_millis(50),
    };
    assert_eq!(cfg.identical_failure_limit, Some(5), "on by default");
    let err = run_with_bad_record(cfg, 200_000, 120_000).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("cannot decode record 120000"), "{msg}");
    assert!(
        msg.contains("not restarting: the same failure happened 5 times in a row"),
        "{msg}"
    );
    let Error::JobFailed { attempts, .. } = err else {
        panic!("expected JobFailed, got {err:?}");
    };
    // Checkpoints taken on the way to the bad record are progress, so the count may start
    // late; but it ends the job within a few attempts of the checkpoints catching up.
    assert!((5..=30).contains(&attempts), "{attempts} attempts");
}

#[test]
fn without_the_limit_the_strategy_alone_decides() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("bad-record-unlimited", dir.path());
    cfg.identical_failure_limit = None;
    cfg.restart = RestartStrategy::FixedDelay {
        attempts: 8,
        delay: Duration::from_millis(1),
    };
    let err = run_with_bad_record(cfg, 50_000, 20_000).unwrap_err();
    let Error::JobFailed { attempts, why, .. } = &err else {
        panic!("expected JobFailed, got {err:?}");
    };
    assert_eq!(*attempts, 9, "{err}");
    assert!(why.is_empty(), "{err}");
}

#[test]
fn failure_rate_gives_up_on_a_burst_of_failures() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("burst", dir.path());
    cfg.restart = RestartStrategy::FailureRate {
        max_failures: 2,
        interval: Duration::from_secs(600),
        delay: Duration::from_millis(1),
    };
    // Five injected failures (never "identical"), all within the window: the third one
    // exceeds the rate.
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(5, 3, 50_000));
    let err = run_with_bad_record(cfg, 400_000, u64::MAX).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("injected failure 3 of 5"), "{msg}");
    assert!(
        msg.contains("3 failures within 600s exceed the failure-rate limit of 2"),
        "{msg}"
    );
}

#[test]
fn failure_rate_restarts_failures_that_stay_under_the_rate() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("sparse", dir.path());
    cfg.restart = RestartStrategy::FailureRate {
        max_failures: 3,
        interval: Duration::from_secs(600),
        delay: Duration::from_millis(1),
    };
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(3, 3, 50_000));
    let r = run_with_bad_record(cfg, 200_000, u64::MAX).unwrap();
    assert_eq!(r.injected_failures, Some((3, 3)));
    assert_eq!(r.attempts, 4);
}

/// A checkpoint that can never complete (here: a zero timeout; a full disk behaves the same)
/// fails the job under the default tolerance; the restarts fail identically, so the job ends
/// with the cause after a few attempts instead of retrying for ever, and leaves no
/// half-written checkpoint behind.
#[test]
fn a_checkpoint_that_can_never_complete_ends_the_job_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("no-checkpoint-completes", dir.path());
    cfg.checkpointing.timeout = Duration::ZERO;
    cfg.restart = RestartStrategy::ExponentialDelay {
        attempts: u32::MAX,
        initial: Duration::from_millis(5),
        max: Duration::from_millis(20),
    };
    let err = run_with_bad_record(cfg, 100_000, u64::MAX).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("timed out"), "{msg}");
    assert!(msg.contains("not restarting"), "{msg}");
    let Error::JobFailed { attempts, .. } = err else {
        panic!("expected JobFailed, got {err:?}");
    };
    assert_eq!(attempts, 5, "{msg}");
    let left: Vec<_> = common::job_folder_entries(dir.path(), "no-checkpoint-completes")
        .into_iter()
        .filter(|n| n != "_lock" && n != "_lease")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
