//! `--sink files:DIR` of the built-in jobs: exactly-once part files under injected failures
//! and whole-process SIGKILLs, `--source files:GLOB`, and the errors of bad connector flags
//! (which need no server).

mod common;
mod connectors_support;

use std::collections::BTreeMap;
use std::fs;

use common::*;
use connectors_support::*;

/// keyed-count `--emit updates` into files: with 10 injected failures at parallelism 2:
/// every key's committed counts are exactly 1..n, and nothing hidden is left behind.
#[test]
fn files_sink_is_exact_under_injected_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let (chk, out) = (tmp.path().join("chk"), tmp.path().join("out"));
    let (n, keys) = (400_000u64, 97u64);
    let sink = format!("files:{}", s(&out));
    let extra = [
        "--parallelism",
        "2",
        "--checkpoint-interval",
        "20ms",
        "--rate",
        "1000000",
        "--inject-failures",
        "10",
        "--seed",
        "3",
    ];
    let run = run(&mut weir(
        tmp.path(),
        keyed_count_updates(&chk, &sink, n, keys, &extra),
    ));
    run.assert_success();
    assert!(
        run.stdout.contains("injected failures: 10 of 10"),
        "{}",
        run.describe()
    );
    assert!(
        run.stdout.contains(&format!("sink: {sink} (committed)")),
        "{}",
        run.describe()
    );
    let parts = fs::read_dir(&out).unwrap().count();
    assert!(
        parts > 2,
        "only {parts} part files: the output was not committed checkpoint by checkpoint"
    );
    assert_updates_exact(&group(committed_tsv(&out)), n, keys, "files sink");
    assert_eq!(
        hidden_files(&out),
        Vec::<String>::new(),
        "uncommitted parts left"
    );
    assert!(
        !tmp.path().join("weir-output").exists(),
        "--output's default folder was written although --sink was given"
    );
}

/// SIGKILL keyed-count (files: sink) 4 times at random moments, resuming each time with
/// `--restore latest`: after every kill the committed output is a prefix 1..m of every
/// key's counts (never a duplicate or a gap), and the final run completes it exactly.
#[test]
fn files_sink_is_exact_after_sigkills_and_restore_latest() {
    let tmp = tempfile::tempdir().unwrap();
    let (chk, out) = (tmp.path().join("chk"), tmp.path().join("out"));
    // 5 s at the rate: longer than the 4 killed runs together (at most 3.6 s).
    let (n, keys) = (500_000u64, 101u64);
    let sink = format!("files:{}", s(&out));
    let args = kill_run_args(&chk, &sink, (n, keys), "100000");
    kill_loop(
        tmp.path(),
        &chk.join("keyed-count"),
        (4, (300, 900)),
        0x5eed_f11e,
        &args,
        |i| {
            let per_key = group(committed_tsv(&out));
            if let Some(p) = prefix_problem(&per_key) {
                panic!("after kill {i}, the committed output is not exactly-once: {p}");
            }
        },
    );
    let run = run(&mut weir(tmp.path(), args(true)));
    run.assert_success();
    assert!(restored_from(&run.stdout).is_some(), "{}", run.describe());
    assert_updates_exact(
        &group(committed_tsv(&out)),
        n,
        keys,
        "files sink after kills",
    );
    assert_eq!(
        hidden_files(&out),
        Vec::<String>::new(),
        "uncommitted parts left"
    );
}

/// A fresh run into a folder holding an earlier run's output is refused before it starts
/// (the outputs would mix); the earlier files stay untouched.
#[test]
fn files_sink_refuses_a_folder_with_earlier_output() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let sink = format!("files:{}", s(&out));
    let first = run(&mut weir(
        tmp.path(),
        keyed_count_updates(&tmp.path().join("chk1"), &sink, 1000, 10, &[]),
    ));
    first.assert_success();
    let before = tree(&out);
    let second = run(&mut weir(
        tmp.path(),
        keyed_count_updates(&tmp.path().join("chk2"), &sink, 1000, 10, &[]),
    ));
    assert_clean_error(&second, 1, &["already holds output", "--restore latest"]);
    assert!(tree(&out) == before, "the earlier output was changed");
}

/// A restore from a checkpoint older than the job's newest rewinds the sources past
/// output the sink already committed, which is then written again (as in Flink): the run
/// says so up front, and restoring `latest` does not.
#[test]
fn restoring_an_older_checkpoint_says_committed_output_is_written_again() {
    let tmp = tempfile::tempdir().unwrap();
    let (chk, out) = (tmp.path().join("chk"), tmp.path().join("out"));
    let sink = format!("files:{}", s(&out));
    let paced = [
        "--rate",
        "200000",
        "--checkpoint-interval",
        "50ms",
        "--retained-checkpoints",
        "100",
    ];
    let args = |extra: &[&str]| {
        let mut a = paced.to_vec();
        a.extend_from_slice(extra);
        keyed_count_updates(&chk, &sink, 100_000, 10, &a)
    };
    // Two injected failures, each held back until a checkpoint of its attempt completed:
    // with the final one, three checkpoints or more however fast the run was.
    let failures = ["--inject-failures", "2"];
    let first = run(&mut weir(tmp.path(), args(&failures)));
    first.assert_success();
    assert!(!first.stderr.contains("older than"), "{}", first.describe());
    let done = completed_checkpoints(&chk.join("keyed-count"));
    assert!(done.len() >= 3, "too few checkpoints: {done:?}");
    let job = checkpoint_dir(&chk).join("keyed-count");
    let oldest = s(&job.join(format!("chk-{}", done[0])));
    let rewound = run(&mut weir(tmp.path(), args(&["--restore", &oldest])));
    rewound.assert_success();
    let notice = format!("restoring checkpoint {}, older than the", done[0]);
    assert!(
        rewound.stderr.contains(&notice) && rewound.stderr.contains("written again"),
        "{}",
        rewound.describe()
    );
    let latest = run(&mut weir(tmp.path(), args(&["--restore", "latest"])));
    latest.assert_success();
    assert!(
        !latest.stderr.contains("older than"),
        "{}",
        latest.describe()
    );
}

/// wordcount `--source files:GLOB --sink files:DIR --sink-format jsonl` and `--input GLOB
/// --output DIR` both count exactly the words of the matching files, as written out by hand
/// below (not taken from either run), and nothing of the file the glob leaves out.
#[test]
fn wordcount_files_source_jsonl_sink_and_plain_run_count_the_words_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    fs::create_dir(&input).unwrap();
    fs::write(input.join("a.txt"), "the cat\nthe dog and the \"bird\"\n").unwrap();
    fs::write(input.join("b.txt"), "Cat, DOG; cat\n").unwrap();
    fs::write(input.join("skip.md"), "not read\n").unwrap();
    let glob = s(&input.join("*.txt"));
    let plain = run(&mut weir(
        tmp.path(),
        [
            "run",
            "wordcount",
            "--input",
            &glob,
            "--output",
            &s(&tmp.path().join("plain")),
            "--checkpoint-dir",
            &checkpoint_arg(&tmp.path().join("chk1")),
        ],
    ));
    plain.assert_success();
    // The truth, from wordcount's definition (lowercase, split on anything but ASCII letters,
    // digits and `_`): a.txt has the ×3, cat, dog, and, bird; b.txt has cat ×2, dog;
    // skip.md does not match the glob.
    let want: BTreeMap<String, u64> = [("and", 1), ("bird", 1), ("cat", 3), ("dog", 2), ("the", 3)]
        .into_iter()
        .map(|(w, c)| (w.to_string(), c))
        .collect();
    let mut plain_counts = BTreeMap::new();
    for (word, count) in read_pairs(&tmp.path().join("plain")) {
        assert!(
            plain_counts.insert(word.clone(), count).is_none(),
            "--output: {word} appears twice"
        );
    }
    assert_eq!(plain_counts, want, "--input/--output counts");
    let out = tmp.path().join("jsonl");
    let run = run(&mut weir(
        tmp.path(),
        [
            "run",
            "wordcount",
            "--source",
            &format!("files:{glob}"),
            "--sink",
            &format!("files:{}", s(&out)),
            "--sink-format",
            "jsonl",
            "--checkpoint-dir",
            &checkpoint_arg(&tmp.path().join("chk2")),
        ],
    ));
    run.assert_success();
    let mut got = BTreeMap::new();
    for e in fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        assert!(p.to_string_lossy().ends_with(".jsonl"), "{}", p.display());
        for line in fs::read_to_string(&p).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let word = v["word"].as_str().unwrap().to_string();
            let count = v["count"].as_u64().unwrap();
            assert!(
                got.insert(word, count).is_none(),
                "jsonl: a word appears twice"
            );
        }
    }
    assert_eq!(got, want, "--source files:/--sink files: jsonl counts");
}

/// Bad connector flags exit 2 naming the spec, the accepted forms and the cause; nothing
/// runs and no output folder appears.
#[test]
fn bad_connector_flags_exit_2_and_say_why() {
    let tmp = tempfile::tempdir().unwrap();
    let kc = |extra: &[&str]| {
        let mut a = vec!["run", "keyed-count", "--events", "100"];
        a.extend_from_slice(extra);
        run(&mut weir(tmp.path(), a))
    };
    const FORMS: &str = "files:DIR, postgres://";
    #[cfg_attr(not(any(feature = "postgres", feature = "nats")), allow(unused_mut))]
    let mut cases: Vec<(&[&str], &[&str])> = vec![
        (
            &["--sink", "s3://bucket/x"][..],
            &["s3://bucket/x", FORMS, "not a sink spec"][..],
        ),
        (&["--sink", "files:"], &["files:", FORMS, "no folder"]),
        (
            &["--sink", "files:o", "--output", "x"],
            &["--sink", "--output"],
        ),
        (
            &["--sink", "files:o", "--discard-output"],
            &["--sink", "--discard-output"],
        ),
        (&["--sink-format", "jsonl"], &["--sink"]),
        (
            &["--source", "files:x"],
            &["files:x", "nats://HOST", "reads numbers"],
        ),
    ];
    // The clients' own URL checks, in builds that have them.
    #[cfg(feature = "postgres")]
    cases.push((
        &["--sink", "postgres://u@h/db"],
        &["postgres://u@h/db", "table is missing", FORMS],
    ));
    #[cfg(feature = "nats")]
    cases.extend([
        (
            &["--sink", "nats://h:99999/s"][..],
            &["nats://h:99999/s", "port '99999'", FORMS][..],
        ),
        (
            &["--sink", "nats://h/s", "--sink-format", "jsonl"],
            &["--sink-format", "files:"],
        ),
    ]);
    for (extra, needles) in cases {
        let run = kc(extra);
        assert_clean_error(&run, 2, needles);
    }
    #[cfg(feature = "nats")]
    {
        // A NATS source beside a flag it contradicts: --verify needs the generator's known
        // truth, --event-time stamps the generator's events, which a --source replaces,
        // and --source and --events contradict each other.
        for (extra, needles) in [
            (&["--verify"][..], &["--verify", "--source"]),
            (&["--event-time"], &["--event-time", "--source"]),
            (&["--events", "5"], &["--source", "--events"]),
        ] {
            let mut args = vec!["run", "keyed-count", "--source", "nats://127.0.0.1:1/s"];
            args.extend_from_slice(extra);
            let r = run(&mut weir(tmp.path(), args));
            assert_clean_error(&r, 2, needles);
        }
    }
    let r = run(&mut weir(
        tmp.path(),
        ["run", "wordcount", "--source", "kafka://x"],
    ));
    assert_clean_error(&r, 2, &["kafka://x", "files:GLOB", "nats://"]);
    assert!(!tmp.path().join("weir-output").exists());
    assert!(!tmp.path().join("o").exists());
}
