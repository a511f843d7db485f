//! `weir run window-sum` (workload W2): every window's sum exact under injected panics at
//! parallelism 2, the run resumed from a checkpoint rather than from scratch, and bad flags
//! refused with the cause.

mod common;

use common::*;

/// Injected failures never depend on the machine's speed: 20 000 events end in
/// milliseconds, long before the first checkpoint at 300 ms, yet both failures fire, each
/// after a checkpoint with progress, because the sources hold while a failure waits for one.
#[test]
fn injected_failures_fire_even_when_the_input_would_end_before_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    let r = run(&mut weir(
        tmp.path(),
        [
            "run",
            "window-sum",
            "--events",
            "20000",
            "--keys",
            "10",
            "--parallelism",
            "2",
            "--checkpoint-interval",
            "300ms",
            "--checkpoint-dir",
            &checkpoint_arg(&d),
            "--output",
            &s(&o),
            "--inject-failures",
            "2",
            "--seed",
            "7",
            "--verify",
        ],
    ));
    r.assert_success();
    assert!(
        r.stdout.contains("injected failures: 2 of 2"),
        "{}",
        r.describe()
    );
    assert!(r.stdout.contains("verify: OK"), "{}", r.describe());
    let resumed = attempts(&r.stdout);
    assert_eq!(resumed.len(), 3, "{}", r.describe());
    assert!(
        resumed[1..].iter().all(|a| a.restored.is_some()),
        "every restart resumes from a checkpoint\n{}",
        r.describe()
    );
}

#[test]
fn sums_are_exact_after_injected_failures_resumed_from_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o) = (tmp.path().join("chk"), tmp.path().join("out"));
    // 1 M events at 100 k per second of event time: 10 windows of 1 s over 1000 keys.
    let r = run(&mut weir(
        tmp.path(),
        [
            "run",
            "window-sum",
            "--events",
            "1000000",
            "--keys",
            "1000",
            "--tps",
            "100000",
            "--parallelism",
            "2",
            "--checkpoint-interval",
            "100ms",
            "--checkpoint-dir",
            &checkpoint_arg(&d),
            "--output",
            &s(&o),
            "--inject-failures",
            "2",
            "--seed",
            "7",
            "--verify",
        ],
    ));
    r.assert_success();
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains("verify: OK — 10000 window sums, every one exact"),
        "{}",
        r.describe()
    );
    assert!(
        all.contains("injected failures: 2 of 2"),
        "both failures fired\n{}",
        r.describe()
    );
    // The last attempt resumed from a checkpoint past the start.
    let last = all
        .lines()
        .rfind(|l| l.trim_start().starts_with("attempt "))
        .unwrap_or_default();
    assert!(
        last.contains("from checkpoint") && !last.contains("at source record 0,"),
        "the last attempt did not resume from a checkpoint: {last}\n{}",
        r.describe()
    );
}

#[test]
fn bad_flags_are_refused_with_the_cause() {
    let tmp = tempfile::tempdir().unwrap();
    for (flags, needle) in [
        (&["--keys", "0"][..], "must be at least 1"),
        (&["--window-ms", "0"][..], "must be at least 1"),
        (&["--tps", "x"][..], "'x' is not a whole number"),
        (
            &["--discard-output", "--verify"][..],
            "drop --discard-output",
        ),
    ] {
        let mut args = vec!["run", "window-sum", "--events", "10"];
        args.extend_from_slice(flags);
        let r = run(&mut weir(tmp.path(), args));
        assert_eq!(r.code(), Some(2), "{flags:?}\n{}", r.describe());
        assert!(r.stderr.contains(needle), "{flags:?}\n{}", r.describe());
    }
}
