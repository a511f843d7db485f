//! End-to-end tests of the `weir` command: exact wordcount of real text (with and without
//! injected failures), keyed-count under injected failures, fallback past corrupted
//! checkpoints, one-line errors for bad input, and a fresh start when there is nothing to
//! restore.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use common::*;

// ---------------------------------------------------------------------------------------
// helpers

const LICENCES: &str = "/usr/share/common-licenses";

/// GPL-3, or else any regular file among the licences; panics if there is none.
fn licence_file() -> PathBuf {
    let gpl = Path::new(LICENCES).join("GPL-3");
    if gpl.is_file() {
        return gpl;
    }
    licence_files()
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no licence text found under {LICENCES}; these tests need one"))
}

/// Every regular file (symlinks resolved) among the licences, sorted by name.
fn licence_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(LICENCES)
        .unwrap_or_else(|e| panic!("cannot list {LICENCES}: {e}; these tests need licence texts"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && !p.is_symlink())
        .collect();
    v.sort();
    v
}

/// The word counts of `text` by the rule the CLI documents, computed independently:
/// lowercase the whole text, split on every char that is not an ASCII letter, digit or
/// '_', drop empty tokens.
fn word_counts(text: &str) -> BTreeMap<String, u64> {
    let lower = text.to_lowercase();
    let mut m = BTreeMap::new();
    for w in lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
    {
        *m.entry(w.to_string()).or_insert(0) += 1;
    }
    m
}

/// Asserts that the `word,count` lines of output `o`, as a multiset, are exactly `want`.
fn assert_word_counts(o: &Path, want: &BTreeMap<String, u64>) {
    assert!(
        o.join("_SUCCESS").is_file(),
        "{} not published",
        o.display()
    );
    let mut got = read_pairs(o);
    got.sort();
    let want: Vec<(String, u64)> = want.iter().map(|(w, c)| (w.clone(), *c)).collect();
    if got != want {
        let gm: BTreeMap<_, _> = got.iter().cloned().collect();
        let wm: BTreeMap<_, _> = want.iter().cloned().collect();
        let diff: Vec<String> = wm
            .iter()
            .filter(|(w, c)| gm.get(*w) != Some(c))
            .map(|(w, c)| format!("{w}: want {c}, got {:?}", gm.get(w)))
            .chain(
                gm.iter()
                    .filter(|(w, _)| !wm.contains_key(*w))
                    .map(|(w, c)| format!("{w}: unexpected, got {c}")),
            )
            .take(8)
            .collect();
        panic!(
            "wordcount output differs ({} lines, {} expected; {} duplicate lines): {}",
            got.len(),
            want.len(),
            got.len() - gm.len(),
            diff.join("; ")
        );
    }
}

/// [`assert_clean_error`] for the CLI's own bad input, whose message also fits in a few
/// lines.
fn assert_short_clean_error(run: &Run, code: i32, needles: &[&str]) {
    let lines = run.stderr.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(
        lines < 5,
        "stderr is not short ({lines} lines)\n{}",
        run.describe()
    );
    assert_clean_error(run, code, needles);
}

/// Args for a wordcount at parallelism 2 of `inputs` into `tmp/counts`, checkpoints in
/// `tmp/chk`, then `extra`.
fn wordcount(tmp: &Path, inputs: &[&Path], extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = vec!["run".into(), "wordcount".into(), "--input".into()];
    a.extend(inputs.iter().map(|i| s(i)));
    a.extend(
        [
            "--output",
            &s(&tmp.join("counts")),
            "--parallelism",
            "2",
            "--checkpoint-dir",
            &checkpoint_arg(&tmp.join("chk")),
        ]
        .map(String::from),
    );
    a.extend(extra.iter().map(|x| x.to_string()));
    a
}

/// Three injected failures (seed 1), with checkpoints and restarts every 10 ms.
const THREE_FAILURES: [&str; 8] = [
    "--inject-failures",
    "3",
    "--seed",
    "1",
    "--restart-delay",
    "10ms",
    "--checkpoint-interval",
    "10ms",
];

/// Args for a keyed-count of 1000 events with checkpoints in `chk` and output in `out`.
fn thousand_events(chk: &str, out: &Path) -> Vec<String> {
    [
        "run",
        "keyed-count",
        "--events",
        "1000",
        "--checkpoint-dir",
        chk,
        "--output",
        &s(out),
    ]
    .map(String::from)
    .to_vec()
}

/// Args for a small keyed-count run into `tmp/chk` and `tmp/out`, then `extra`.
fn small_keyed_count(tmp: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "keyed-count",
        "--events",
        "1000",
        "--keys",
        "10",
        "--checkpoint-dir",
        &checkpoint_arg(&tmp.join("chk")),
        "--output",
        &s(&tmp.join("out")),
    ]
    .map(String::from)
    .to_vec();
    a.extend(extra.iter().map(|x| x.to_string()));
    a
}

// ---------------------------------------------------------------------------------------
// a. wordcount on real text

/// The truth formula used by every keyed-count check agrees with brute-force counting.
#[test]
fn keyed_count_truth_formula_matches_brute_force() {
    for (n, k) in [(0u64, 3u64), (10, 3), (1003, 10), (97, 97), (5, 8)] {
        for key in 0..k {
            let brute = (0..n).filter(|i| i % k == key).count() as u64;
            assert_eq!(expected_count(n, k, key), brute, "n={n} k={k} key={key}");
        }
    }
}

/// Wordcount of a licence text at parallelism 2 equals an independent count of its words.
#[test]
fn wordcount_of_a_licence_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let input = licence_file();
    let o = tmp.path().join("counts");
    let run = run(&mut weir(tmp.path(), wordcount(tmp.path(), &[&input], &[])));
    run.assert_success();
    let text = String::from_utf8_lossy(&fs::read(&input).unwrap()).into_owned();
    let want = word_counts(&text);
    assert!(
        want.len() > 100,
        "suspiciously few words in {}",
        input.display()
    );
    assert_word_counts(&o, &want);
}

/// Wordcount of a licence text with 3 injected task panics still equals the independent
/// count. Each failure waits for a checkpoint in its attempt, and the text is read in a
/// moment: the summary must say how many fired and, if some could not, why; every restart
/// that did happen resumed from a checkpoint.
#[test]
fn wordcount_with_injected_failures_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let input = licence_file();
    let o = tmp.path().join("counts");
    let run = run(&mut weir(
        tmp.path(),
        wordcount(tmp.path(), &[&input], &THREE_FAILURES),
    ));
    run.assert_success();
    let fired = (0..=3)
        .find(|f| run.stdout.contains(&format!("injected failures: {f} of 3")))
        .unwrap_or_else(|| panic!("no injected failures count\n{}", run.describe()));
    assert!(
        run.stdout.contains(&format!("restarts: {fired} ")),
        "{}",
        run.describe()
    );
    if fired < 3 {
        let why = format!(
            "the input ended before the other {} could follow",
            3 - fired
        );
        assert!(run.stdout.contains(&why), "{}", run.describe());
    }
    let text = fs::read_to_string(&input).unwrap();
    if fired > 0 {
        assert_resumed(&run, text.lines().count() as u64);
    }
    assert_word_counts(&o, &word_counts(&text));
}

/// Wordcount of 50 copies of 6 licences in 2 files, 3 panics recovered from checkpoints: exact.
#[test]
fn wordcount_big_input_with_failures_and_checkpoints_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let mut unit = String::new();
    for f in licence_files().iter().take(6) {
        unit.push_str(&String::from_utf8_lossy(&fs::read(f).unwrap()));
        unit.push('\n');
    }
    let text = unit.repeat(50);
    assert!(
        text.len() > 1_000_000,
        "too little licence text: {} bytes",
        text.len()
    );
    // Split at a line boundary near the middle.
    let mid = text[text.len() / 2..].find('\n').unwrap() + text.len() / 2 + 1;
    let (a, b) = (tmp.path().join("a.txt"), tmp.path().join("b.txt"));
    fs::write(&a, &text[..mid]).unwrap();
    fs::write(&b, &text[mid..]).unwrap();
    let o = tmp.path().join("counts");
    let run = run(&mut weir(
        tmp.path(),
        wordcount(tmp.path(), &[&a, &b], &THREE_FAILURES),
    ));
    run.assert_success();
    assert!(
        run.stdout.contains("injected failures: 3 of 3"),
        "not every failure fired\n{}",
        run.describe()
    );
    // Every failure waited for a checkpoint: each restart restored one mid-file, and the
    // last attempt read only the lines after it.
    let lines = (text[..mid].lines().count() + text[mid..].lines().count()) as u64;
    let attempts = assert_resumed(&run, lines);
    assert_eq!(attempts.len(), 4, "{}", run.describe());
    assert_word_counts(&o, &word_counts(&text));
}

// ---------------------------------------------------------------------------------------
// b. keyed-count with injected failures

/// Runs the 1M-event keyed-count with ten injected failures under `seed`.
fn keyed_count_with_ten_failures(seed: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("out");
    // Slower on S3, whose checkpoints take longer: ten must still fit in the input.
    let rate = paced(2_000_000.0).to_string();
    let run = run(&mut weir(
        tmp.path(),
        [
            "run",
            "keyed-count",
            "--parallelism",
            "2",
            "--inject-failures",
            "10",
            "--seed",
            seed,
            "--restart-delay",
            "5ms",
            "--checkpoint-interval",
            "20ms",
            "--restart-strategy",
            "fixed-delay",
            "--rate",
            &rate,
            "--events",
            "1000000",
            "--keys",
            "1000",
            "--verify",
            "--checkpoint-dir",
            &checkpoint_arg(&tmp.path().join("chk")),
            "--output",
            &s(&o),
        ],
    ));
    run.assert_success();
    assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    assert!(
        run.stdout.contains("injected failures: 10 of 10"),
        "{}",
        run.describe()
    );
    // One failure per attempt, each after a checkpoint: exactly 10 restarts, each from a
    // checkpoint with progress, and the sources read only what the last one had not.
    assert!(run.stdout.contains("restarts: 10 "), "{}", run.describe());
    let attempts = assert_resumed(&run, 1_000_000);
    assert_eq!(attempts.len(), 11, "{}", run.describe());
    assert_keyed_count_exact(&o, 1_000_000, 1000);
}

/// keyed-count (1M events, parallelism 2) survives 10 injected failures (seed 1) exactly.
#[test]
fn keyed_count_ten_injected_failures_seed_1() {
    keyed_count_with_ten_failures("1");
}

/// keyed-count (1M events, parallelism 2) survives 10 injected failures (seed 7) exactly.
#[test]
fn keyed_count_ten_injected_failures_seed_7() {
    keyed_count_with_ten_failures("7");
}

// ---------------------------------------------------------------------------------------
// c. corrupted newest checkpoint

/// Runs a rate-limited keyed-count until three checkpoints are complete, SIGKILLs it, lets
/// `damage` harm the newest one, restores with `--restore latest --verify`, and returns the
/// run with the newest and second-newest ids.
fn kill_damage_restore(
    tmp: &Path,
    damage: impl FnOnce(&Path) -> PathBuf,
) -> (Run, u64, u64, PathBuf) {
    let (d, o) = (tmp.join("chk"), tmp.join("out"));
    let (n, keys) = (150_000u64, 1000u64);
    let (chk, out) = (checkpoint_arg(&d), s(&o));
    let args = |restore: bool| {
        // The killed run lasts 15 s at its rate, far longer than its three checkpoints
        // take on a loaded machine (the rate bounds it from below); the restore is fast.
        let extra = [
            "--checkpoint-interval",
            "50ms",
            "--rate",
            if restore { "1000000" } else { "10000" },
            "--checkpoint-dir",
            &chk,
            "--output",
            &out,
        ];
        keyed_count_args(n, keys, &extra, restore)
    };
    let job = d.join("keyed-count");
    let mut child = spawn_logged(&mut weir(tmp, args(false)), &tmp.join("first.log"));
    wait_for_checkpoints(&mut child, &job, 3, RUN_TIMEOUT);
    sigkill_running(&mut child, "first run");
    wait_for_dead_lease();
    let ids = completed_checkpoints(&job);
    let (newest, older) = (ids[ids.len() - 1], ids[ids.len() - 2]);
    // Where the checkpoints are: `job` itself, or its twin on S3.
    let stored = checkpoint_dir(&d).join("keyed-count");
    let damaged = damage(&stored.join(format!("chk-{newest}")));
    let run = run(&mut weir(tmp, args(true)));
    run.assert_success();
    assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    assert_eq!(
        restored_from(&run.stdout),
        Some(stored.join(format!("chk-{older}"))),
        "did not fall back to the next newest checkpoint\n{}",
        run.describe()
    );
    assert_resumed(&run, n);
    assert_keyed_count_exact(&o, n, keys);
    (run, newest, older, damaged)
}

/// A corrupted state file in the newest checkpoint is skipped, named, and the run is exact.
#[test]
fn corrupted_state_file_in_newest_checkpoint_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, newest, _, file) = kill_damage_restore(tmp.path(), |chk| {
        let state = chk.join("count");
        let first = list_folder(&state).into_iter().next();
        let f = state.join(first.expect("a keyed state file"));
        let mut bytes = read_object(&f);
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        bytes[mid + 1] ^= 0x5a;
        write_object(&f, &bytes);
        f
    });
    assert_skipped_and_named(&run, newest, &file, "corrupt");
}

/// The restore skipped checkpoint `newest`, naming the damaged `file` and the `cause`.
fn assert_skipped_and_named(run: &Run, newest: u64, file: &Path, cause: &str) {
    assert!(
        run.stderr
            .contains(&format!("skipping checkpoint {newest} ")),
        "{}",
        run.describe()
    );
    assert!(
        run.stderr.contains(&s(file)),
        "file not named\n{}",
        run.describe()
    );
    assert!(
        run.stderr.contains(cause),
        "cause not named\n{}",
        run.describe()
    );
}

/// A truncated `_metadata` in the newest checkpoint is skipped, named, and the run is exact.
#[test]
fn truncated_metadata_in_newest_checkpoint_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, newest, _, file) = kill_damage_restore(tmp.path(), |chk| {
        let f = chk.join("_metadata");
        let bytes = read_object(&f);
        write_object(&f, &bytes[..bytes.len() / 2]);
        f
    });
    assert_skipped_and_named(&run, newest, &file, "truncat");
}

// ---------------------------------------------------------------------------------------
// d. bad input

/// A missing `--input` file: exit 1 with one line naming the path.
#[test]
fn missing_input_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-input.txt");
    let run = run(&mut weir(
        tmp.path(),
        [
            "run",
            "wordcount",
            "--input",
            &s(&missing),
            "--output",
            &s(&tmp.path().join("out")),
            "--checkpoint-dir",
            &checkpoint_arg(&tmp.path().join("chk")),
        ],
    ));
    assert_short_clean_error(&run, 1, &[&s(&missing)]);
    assert!(!tmp.path().join("out").exists());
}

/// `--checkpoint-interval 5x` is a flag error: exit 2, naming the bad value.
#[test]
fn malformed_checkpoint_interval_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run(&mut weir(
        tmp.path(),
        small_keyed_count(tmp.path(), &["--checkpoint-interval", "5x"]),
    ));
    assert_short_clean_error(&run, 2, &["5x", "--checkpoint-interval"]);
}

/// `--inject-failures` with checkpoints off is a flag error (each failure waits for a
/// checkpoint, so none could fire): exit 2, naming both flags.
#[test]
fn injected_failures_without_checkpoints_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run(&mut weir(
        tmp.path(),
        small_keyed_count(
            tmp.path(),
            &["--inject-failures", "1", "--checkpoint-interval", "off"],
        ),
    ));
    assert_short_clean_error(&run, 2, &["--inject-failures", "--checkpoint-interval off"]);
}

/// `--parallelism 0` is refused with a non-zero exit and a line naming the flag.
#[test]
fn zero_parallelism_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run(&mut weir(
        tmp.path(),
        small_keyed_count(tmp.path(), &["--parallelism", "0"]),
    ));
    assert_ne!(run.code(), Some(0), "{}", run.describe());
    let code = run.code().expect("exited, not killed");
    assert_short_clean_error(&run, code, &["--parallelism"]);
}

/// A checkpoint dir below a regular file cannot be created: exit 1, naming the path.
#[test]
fn unwritable_checkpoint_dir_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    fs::write(&file, "not a folder").unwrap();
    let d = file.join("sub");
    let run = run(&mut weir(
        tmp.path(),
        thousand_events(&s(&d), &tmp.path().join("out")),
    ));
    assert_short_clean_error(&run, 1, &[&s(&d)]);
    assert!(!tmp.path().join("out").exists());
}

/// `--restore` of a path that does not exist: exit 1, naming the path.
#[test]
fn restore_from_missing_path_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nonexistent");
    let run = run(&mut weir(
        tmp.path(),
        small_keyed_count(tmp.path(), &["--restore", &s(&missing)]),
    ));
    assert_short_clean_error(&run, 1, &[&s(&missing)]);
    assert!(!tmp.path().join("out").exists());
}

/// `--restore` of a folder without `_metadata`: exit 1, naming the folder and `_metadata`.
#[test]
fn restore_from_non_checkpoint_folder_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("not-a-checkpoint");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("notes.txt"), "hello").unwrap();
    let run = run(&mut weir(
        tmp.path(),
        small_keyed_count(tmp.path(), &["--restore", &s(&dir)]),
    ));
    assert_short_clean_error(&run, 1, &[&s(&dir), "_metadata"]);
    assert!(!tmp.path().join("out").exists());
    assert_eq!(fs::read_to_string(dir.join("notes.txt")).unwrap(), "hello");
}

/// `--output` at a foreign non-empty folder: exit 1, naming it, and leaving it untouched.
#[test]
fn foreign_output_folder_is_refused_and_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("precious");
    fs::create_dir_all(o.join("sub")).unwrap();
    fs::write(o.join("keep.txt"), "my data").unwrap();
    fs::write(o.join("part-0"), "looks like output but is not").unwrap();
    fs::write(o.join("sub/deep.txt"), "more").unwrap();
    let before = tree(&o);
    let run = run(&mut weir(
        tmp.path(),
        thousand_events(&checkpoint_arg(&tmp.path().join("chk")), &o),
    ));
    assert_short_clean_error(&run, 1, &[&s(&o)]);
    assert!(tree(&o) == before, "the foreign output folder was modified");
}

// ---------------------------------------------------------------------------------------
// e. nothing to restore

/// `--restore latest` with no complete checkpoint starts fresh, says so, and counts exactly.
#[test]
fn restore_latest_without_checkpoints_starts_fresh() {
    for incomplete in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("chk");
        fs::create_dir(&d).unwrap();
        if incomplete {
            // A checkpoint cut short: a state file and no `_metadata` (on S3, in the twin).
            let half = checkpoint_dir(&d).join("keyed-count/chk-7/count");
            if on_s3() {
                write_object(&half.join("kg-0-128"), b"half-written");
            } else {
                fs::create_dir_all(&half).unwrap();
                fs::write(half.join("kg-0-128"), b"half-written").unwrap();
            }
        }
        let run = run(&mut weir(
            tmp.path(),
            small_keyed_count(tmp.path(), &["--restore", "latest", "--verify"]),
        ));
        run.assert_success();
        assert!(run.stderr.contains("starting fresh"), "{}", run.describe());
        assert!(!run.stderr.contains("skipping"), "{}", run.describe());
        assert_eq!(restored_from(&run.stdout), None, "{}", run.describe());
        assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
        assert_keyed_count_exact(&tmp.path().join("out"), 1000, 10);
    }
}

// ---------------------------------------------------------------------------------------
// f. what --verify reads

/// `--emit updates --output --verify` checks the published lines: each key's counts are
/// exactly 1..n (it used to report a mismatch without checking anything).
#[test]
fn verify_checks_every_update_in_the_output() {
    let tmp = tempfile::tempdir().unwrap();
    let (n, keys) = (5_000u64, 7u64);
    let run = run(&mut weir(
        tmp.path(),
        [
            "run",
            "keyed-count",
            "--events",
            &n.to_string(),
            "--keys",
            &keys.to_string(),
            "--parallelism",
            "2",
            "--emit",
            "updates",
            "--verify",
            "--checkpoint-dir",
            &checkpoint_arg(&tmp.path().join("chk")),
            "--output",
            &s(&tmp.path().join("out")),
        ],
    ));
    run.assert_success();
    assert!(
        run.stdout
            .contains("verify: OK — 7 keys, each with its counts exactly 1..n (5000 lines)"),
        "{}",
        run.describe()
    );
}

/// With a `files:` sink, `--verify` reads what was committed, across the runs of the job:
/// a line that should not be there fails it (exit 3), although the job's state is exact.
#[test]
fn verify_reads_what_a_files_sink_committed() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, out) = (tmp.path().join("chk"), tmp.path().join("sink"));
    let (n, keys) = (200_000u64, 13u64);
    let (chk, sink) = (checkpoint_arg(&d), format!("files:{}", s(&out)));
    let args = |restore: bool| {
        let extra = [
            "--emit",
            "updates",
            // The killed run lasts 10 s at its rate: far longer than its two checkpoints.
            "--rate",
            if restore { "1000000" } else { "20000" },
            "--checkpoint-interval",
            "50ms",
            "--checkpoint-dir",
            &chk,
            "--sink",
            &sink,
        ];
        keyed_count_args(n, keys, &extra, restore)
    };
    let job = d.join("keyed-count");
    let mut child = spawn_logged(
        &mut weir(tmp.path(), args(false)),
        &tmp.path().join("a.log"),
    );
    wait_for_checkpoints(&mut child, &job, 2, RUN_TIMEOUT);
    sigkill_running(&mut child, "the first run");
    wait_for_dead_lease();
    // A committed-looking file with a count key 0 already has.
    fs::write(out.join("part-planted.tsv"), "0\t1\n").unwrap();
    let run = run(&mut weir(tmp.path(), args(true)));
    assert_eq!(run.code(), Some(3), "{}", run.describe());
    assert!(
        run.stdout.contains("verify: MISMATCH")
            && run.stdout.contains("key 0: count 1 appears twice"),
        "{}",
        run.describe()
    );
    assert_resumed(&run, n);
    // Without the planted line, the committed output of both runs is exact.
    fs::remove_file(out.join("part-planted.tsv")).unwrap();
    let mut seen: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for e in fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        if p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("part-")
        {
            for line in fs::read_to_string(&p).unwrap().lines() {
                let (k, c) = line.split_once('\t').unwrap();
                seen.entry(k.parse().unwrap())
                    .or_default()
                    .push(c.parse().unwrap());
            }
        }
    }
    for k in 0..keys {
        let mut got = seen.remove(&k).unwrap_or_default();
        got.sort_unstable();
        let want: Vec<u64> = (1..=expected_count(n, keys, k)).collect();
        assert!(got == want, "key {k}: {} counts committed", got.len());
    }
}
