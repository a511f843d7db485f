//! A user's job on `weir::runner`: the README's example (`crates/weir/examples/hello.rs`,
//! compiled into this test) runs as a program of its own — this test binary re-executes
//! itself as the job — to completion with exact output, under injected failures with proof
//! of the restore, under `weir savepoint` / `weir stop` and a rescaled resume, and with bad
//! flags.

mod common;

#[allow(dead_code)]
#[path = "../../weir/examples/hello.rs"]
mod hello;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::running::{wait_for_a_checkpoint, Running};
use common::*;

/// The environment variable that makes this test binary the job: its value is the job's
/// arguments, separated by ASCII unit separators.
const CHILD: &str = "WEIR_RUNNER_TEST_JOB";

child_job::job_process!(CHILD, "hello", hello::build);

/// The job as a command run in `cwd` with `args`.
fn job(cwd: &Path, args: &[&str]) -> Command {
    child_job::command(CHILD, "hello", cwd, args)
}

/// Each key's counts are exactly `1..=n` (every event counted once, and its running count
/// written once), for `events` events over `keys` keys.
fn assert_exact(dir: &Path, events: u64, keys: u64) {
    let got = child_job::committed(dir);
    assert_eq!(
        got.len() as u64,
        keys.min(events),
        "keys in {}",
        dir.display()
    );
    for (k, mut counts) in got {
        counts.sort_unstable();
        let want: Vec<u64> = (1..=expected_count(events, keys, k)).collect();
        assert!(
            counts == want,
            "key {k}: {} counts, not 1..=n",
            counts.len()
        );
    }
}

#[test]
fn runs_to_completion_with_exact_output() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run(&mut job(
        tmp.path(),
        &["--events", "20000", "--keys", "7", "--parallelism", "2"],
    ));
    run.assert_success();
    assert!(
        run.stdout.contains("hello: finished in") && run.stdout.contains("restarts: 0"),
        "{}",
        run.describe()
    );
    assert!(
        run.stderr
            .contains("weir: hello — parallelism 2, exactly-once checkpoints every 1s"),
        "{}",
        run.describe()
    );
    assert_exact(&tmp.path().join("hello-output"), 20_000, 7);
}

#[test]
fn injected_failures_restore_checkpoints_and_the_output_stays_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let events = 300_000;
    let run = run(&mut job(
        tmp.path(),
        &[
            "--events",
            &events.to_string(),
            "--keys",
            "11",
            "--rate",
            "600000",
            "--parallelism",
            "2",
            "--checkpoint-interval",
            "50ms",
            "--inject-failures",
            "3",
            "--seed",
            "5",
            "--restart-strategy",
            "fixed-delay",
            "--restart-delay",
            "10ms",
        ],
    ));
    run.assert_success();
    assert!(
        run.stdout.contains("(injected failures: 3 of 3)"),
        "{}",
        run.describe()
    );
    let attempts = assert_resumed(&run, events);
    assert_eq!(attempts.len(), 4, "{}", run.describe());
    assert_exact(&tmp.path().join("hello-output"), events, 11);
}

#[test]
fn weir_savepoint_and_stop_control_it_and_it_resumes_rescaled() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let events = 2_000_000u64;
    let n = events.to_string();
    // Relative to the job's working folder locally; a prefix of the tests' bucket on S3.
    let ck = if on_s3() {
        checkpoint_arg(&t.join("ck"))
    } else {
        "ck".to_string()
    };
    let job_flags = ["--events", &n, "--keys", "13", "--checkpoint-dir", &ck];
    let mut first: Vec<&str> = job_flags.to_vec();
    first.extend(["--rate", "100000", "--parallelism", "2"]);
    first.extend(["--checkpoint-interval", "100ms"]);
    let running = Running::start(&mut job(t, &first), t.join("job.log"));
    wait_for_a_checkpoint(&t.join("ck/hello"));
    let sp = run(&mut weir(t, ["savepoint", "--job", &running.addr]));
    sp.assert_success();
    let sp_path = match sp.stdout.trim() {
        remote if remote.contains("://") => PathBuf::from(remote),
        local => t.join(local),
    };
    assert!(is_object(&sp_path.join("_metadata")), "{}", sp.describe());
    let stop = run(&mut weir(t, ["stop", "--job", &running.addr]));
    stop.assert_success();
    let stopped_at = stop.stdout.trim().to_string();
    let (code, log) = running.finish();
    assert_eq!(code, Some(0), "{log}");
    let sp_name = Path::new(&stopped_at)
        .file_name()
        .expect("a savepoint folder");
    assert!(
        log.lines()
            .any(|l| l.starts_with("stopped with savepoint")
                && l.ends_with(&*sp_name.to_string_lossy())),
        "{stopped_at}\n{log}"
    );
    // Resume from the final savepoint at another parallelism, unthrottled.
    let mut resume: Vec<&str> = job_flags.to_vec();
    resume.extend(["--parallelism", "3", "--restore", &stopped_at]);
    let run = run(&mut job(t, &resume));
    run.assert_success();
    let restored = restored_from(&run.stdout).expect("restored the savepoint");
    assert_eq!(restored.file_name(), Some(sp_name), "{}", run.describe());
    assert_resumed(&run, events);
    assert_exact(&t.join("hello-output"), events, 13);
}

#[test]
fn bad_flags_exit_2_naming_the_flag_and_help_lists_both_kinds() {
    let tmp = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (&["--parallelism", "0"][..], "--parallelism"),
        (&["--keys", "0"][..], "--keys"),
        (&["--checkpoint-interval", "0"][..], "use `off`"),
        (
            &["--parallelism", "4", "--max-parallelism", "2"][..],
            "--max-parallelism 2",
        ),
        (&["--no-such-flag"][..], "--no-such-flag"),
    ] {
        let r = run(&mut job(tmp.path(), args));
        assert_eq!(r.code(), Some(2), "{args:?}\n{}", r.describe());
        assert!(r.stderr.contains(needle), "{args:?}\n{}", r.describe());
        assert!(!r.stderr.contains("control endpoint"), "{}", r.describe());
    }
    assert!(!tmp.path().join("weir-checkpoints").exists());
    let help = run(&mut job(tmp.path(), &["--help"]));
    help.assert_success();
    for flag in [
        "--events",
        "--rate",
        "--checkpoint-interval",
        "--restore",
        "--control",
    ] {
        assert!(help.stdout.contains(flag), "{flag}\n{}", help.describe());
    }
}

/// The README's "Write your own job" shows the example this test compiles, verbatim.
#[test]
fn readme_shows_the_compiled_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let example = std::fs::read_to_string(root.join("crates/weir/examples/hello.rs")).unwrap();
    let section = readme
        .split("## Write your own job")
        .nth(1)
        .expect("README has a \"Write your own job\" section");
    let shown = section
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a rust block in the section");
    assert_eq!(shown, example, "README.md and examples/hello.rs differ");
    assert!(
        example.lines().count() <= 40,
        "the example grew past 40 lines"
    );
}
