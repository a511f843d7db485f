//! Flag validation (issue 10, bad input 4): every flag value or combination that makes no
//! sense is refused before anything starts — no control endpoint opened, no checkpoint,
//! output or staging folder created — with exit 2 and an error naming the flag.

mod common;

use std::path::Path;

use common::*;

/// Runs `weir run JOB --events 100 …extra` (keyed-count) or `weir run wordcount --input
/// <file> …extra` in a fresh folder and asserts the refusal.
fn refused(job: &str, extra: &[&str], needles: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("in.txt"), "alpha beta\n").unwrap();
    let mut args: Vec<&str> = vec!["run", job];
    match job {
        "keyed-count" => args.extend(["--events", "100"]),
        _ => args.extend(["--input", "in.txt"]),
    }
    args.extend_from_slice(extra);
    let run = run(&mut weir(tmp.path(), &args));
    assert_clean_error(&run, 2, needles);
    assert!(
        !run.stderr.contains("control endpoint"),
        "the control endpoint opened before the flags were checked\n{}",
        run.describe()
    );
    let left: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "in.txt")
        .collect();
    assert!(
        left.is_empty(),
        "{extra:?} created {left:?} before being refused\n{}",
        run.describe()
    );
    assert!(!Path::new(&tmp.path().join("weir-output")).exists());
}

#[test]
fn zero_keys_parallelism_rate_and_max_parallelism_exit_2() {
    refused("keyed-count", &["--keys", "0"], &["--keys", "at least 1"]);
    refused(
        "keyed-count",
        &["--parallelism", "0"],
        &["--parallelism", "at least 1"],
    );
    refused(
        "keyed-count",
        &["--max-parallelism", "0"],
        &["--max-parallelism", "at least 1"],
    );
    refused("keyed-count", &["--rate", "0"], &["--rate", "positive"]);
    refused("keyed-count", &["--rate=-5"], &["--rate", "positive"]);
    refused(
        "keyed-count",
        &["--parallelism", "40000"],
        &["--parallelism", "at most 32768"],
    );
}

#[test]
fn an_unknown_state_backend_exits_2_naming_both() {
    refused(
        "keyed-count",
        &["--state-backend", "rocksdb"],
        &["--state-backend", "memory", "disk"],
    );
}

#[test]
fn parallelism_above_max_parallelism_exits_2_before_the_endpoint_opens() {
    refused(
        "keyed-count",
        &["--parallelism", "4", "--max-parallelism", "2"],
        &["--parallelism 4", "--max-parallelism 2"],
    );
    refused(
        "wordcount",
        &["--parallelism", "3", "--max-parallelism", "1"],
        &["--parallelism 3", "--max-parallelism 1"],
    );
}

#[test]
fn unaligned_flags_need_exactly_once_and_each_other() {
    refused(
        "keyed-count",
        &["--unaligned", "--mode", "at-least-once"],
        &["--unaligned", "--mode exactly-once"],
    );
    refused(
        "keyed-count",
        &["--aligned-checkpoint-timeout", "100ms"],
        &["--aligned-checkpoint-timeout", "--unaligned"],
    );
    refused(
        "keyed-count",
        &["--unaligned", "--aligned-checkpoint-timeout", "soon"],
        &["--aligned-checkpoint-timeout", "not a duration"],
    );
    refused("keyed-count", &["--sink-rate", "0"], &["--sink-rate"]);
}

#[test]
fn checkpoint_flags_that_mean_nothing_exit_2() {
    refused(
        "keyed-count",
        &["--checkpoint-interval", "0"],
        &["--checkpoint-interval", "use `off`"],
    );
    refused(
        "keyed-count",
        &["--checkpoint-interval", "0s"],
        &["--checkpoint-interval", "use `off`"],
    );
    refused(
        "keyed-count",
        &["--retained-checkpoints", "0"],
        &["--retained-checkpoints", "at least 1"],
    );
    refused(
        "keyed-count",
        &["--max-concurrent-checkpoints", "0"],
        &["--max-concurrent-checkpoints", "at least 1"],
    );
    refused(
        "keyed-count",
        &["--checkpoint-timeout", "0s"],
        &["--checkpoint-timeout", "longer than 0"],
    );
}

#[test]
fn restart_flags_are_checked() {
    refused(
        "keyed-count",
        &["--identical-failure-limit", "0"],
        &["--identical-failure-limit", "`off`"],
    );
    refused(
        "keyed-count",
        &["--max-failures-per-interval", "3"],
        &["--max-failures-per-interval", "failure-rate only"],
    );
    refused(
        "keyed-count",
        &[
            "--failure-rate-interval",
            "1m",
            "--restart-strategy",
            "fixed-delay",
        ],
        &["--failure-rate-interval", "failure-rate only"],
    );
    refused(
        "keyed-count",
        &[
            "--restart-strategy",
            "failure-rate",
            "--max-failures-per-interval",
            "0",
        ],
        &["--max-failures-per-interval", "at least 1"],
    );
    refused("keyed-count", &["--job-name", "a/b"], &["--job-name"]);
}

#[test]
fn a_bad_auto_watermark_interval_is_refused_naming_the_flag() {
    refused(
        "keyed-count",
        &["--auto-watermark-interval", "soon"],
        &["--auto-watermark-interval"],
    );
}

#[test]
fn wordcount_refuses_rate_instead_of_ignoring_it() {
    refused("wordcount", &["--rate", "100"], &["--rate"]);
    refused(
        "wordcount",
        &["--max-line-length", "0"],
        &["--max-line-length", "at least 1"],
    );
}

/// The new flags work, not only parse: failure-rate restarts recover an injected failure,
/// `--identical-failure-limit off` is accepted, and a line longer than
/// `--max-line-length` fails the run naming the file.
#[test]
fn failure_rate_and_max_line_length_take_effect() {
    let tmp = tempfile::tempdir().unwrap();
    let run1 = run(&mut weir(
        tmp.path(),
        [
            "run",
            "keyed-count",
            "--events",
            "200000",
            "--keys",
            "7",
            "--rate",
            "400000",
            "--checkpoint-interval",
            "50ms",
            "--inject-failures",
            "1",
            "--restart-strategy",
            "failure-rate",
            "--max-failures-per-interval",
            "3",
            "--failure-rate-interval",
            "1m",
            "--restart-delay",
            "10ms",
            "--identical-failure-limit",
            "off",
            "--verify",
        ],
    ));
    run1.assert_success();
    assert!(run1.stdout.contains("verify: OK"), "{}", run1.describe());
    assert!(run1.stdout.contains("restarts: 1"), "{}", run1.describe());

    std::fs::write(
        tmp.path().join("long.txt"),
        format!("{}\n", "a".repeat(100)),
    )
    .unwrap();
    let run2 = run(&mut weir(
        tmp.path(),
        [
            "run",
            "wordcount",
            "--input",
            "long.txt",
            "--max-line-length",
            "10",
            "--restart-strategy",
            "none",
            "--output",
            "o",
        ],
    ));
    assert_clean_error(&run2, 1, &["long.txt"]);
    assert!(!tmp.path().join("o").exists());
}

#[test]
fn sink_rate_zero_names_sink_rate() {
    refused(
        "keyed-count",
        &["--sink-rate", "0"],
        &["--sink-rate", "leave --sink-rate out"],
    );
    let tmp = tempfile::tempdir().unwrap();
    let r = run(&mut weir(
        tmp.path(),
        ["run", "keyed-count", "--events", "10", "--sink-rate", "0"],
    ));
    assert!(!r.stderr.contains("leave --rate out"), "{}", r.describe());
}

#[test]
fn storage_locations_without_a_bucket_or_with_a_scheme_typo_exit_2() {
    // `s3://` alone once took the job's name for the bucket.
    refused(
        "keyed-count",
        &["--checkpoint-dir", "s3://"],
        &["--checkpoint-dir", "no bucket", "s3://bucket/prefix"],
    );
    // `s3:bkt/x` once wrote a local folder named `s3:bkt` (`refused` checks none is made).
    refused(
        "keyed-count",
        &["--checkpoint-dir", "s3:bkt/x"],
        &["--checkpoint-dir", "did you mean s3://bkt/x?"],
    );
    refused(
        "keyed-count",
        &["--savepoint-dir", "s3:bkt/sp"],
        &["--savepoint-dir", "did you mean s3://bkt/sp?"],
    );
}
