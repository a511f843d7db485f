//! What the `weir run nexmark` tests share, written once: the run's arguments, the
//! reference evaluator's CSV and the comparison with it, and the checks of a run under
//! injected panics and of the last run after SIGKILLs.

use std::fs;
use std::path::Path;

use super::{assert_resumed, checkpoint_arg, checkpoint_dir, restored_from, run, s, weir, Run};

/// `weir run nexmark --query q` over the generator flags `input` (or `--input FILE`) at
/// parallelism `p`, into `o` with checkpoints in `d`, plus `extra`.
pub fn run_args(
    q: &str,
    p: u32,
    input: &[impl AsRef<str>],
    d: &Path,
    o: &Path,
    extra: &[impl AsRef<str>],
) -> Vec<String> {
    let mut a: Vec<String> = ["run", "nexmark", "--query", q].map(String::from).to_vec();
    a.extend(input.iter().map(|x| x.as_ref().to_string()));
    a.extend(
        [
            "--parallelism",
            &p.to_string(),
            "--checkpoint-dir",
            &checkpoint_arg(d),
            "--output",
            &s(o),
        ]
        .map(String::from),
    );
    a.extend(extra.iter().map(|x| x.as_ref().to_string()));
    a
}

/// `args`, with `--restore latest` if `restore`.
pub fn restoring(mut args: Vec<String>, restore: bool) -> Vec<String> {
    if restore {
        args.extend(["--restore", "latest"].map(String::from));
    }
    args
}

/// The CSV the reference writes for `q` over `input`.
pub fn reference_csv(tmp: &Path, q: &str, input: &[impl AsRef<str>]) -> String {
    let dir = tmp.join(format!("reference-{q}"));
    let mut args: Vec<String> = ["nexmark", "reference", "--query", q, "--output"]
        .map(String::from)
        .to_vec();
    args.push(s(&dir));
    args.extend(input.iter().map(|x| x.as_ref().to_string()));
    run(&mut weir(tmp, args)).assert_success();
    fs::read_to_string(dir.join(format!("{q}.csv"))).unwrap()
}

/// Asserts that the published `o/<q>.csv` equals the reference's CSV over `input` as
/// multisets of rows, and that the reference has at least `min_rows` rows (a test over no
/// result could not fail).
pub fn assert_same_as_reference(
    tmp: &Path,
    o: &Path,
    q: &str,
    input: &[impl AsRef<str>],
    min_rows: usize,
) {
    let ours = fs::read_to_string(o.join(format!("{q}.csv"))).unwrap();
    let want = reference_csv(tmp, q, input);
    let rows = want.lines().count().saturating_sub(1);
    assert!(
        rows >= min_rows,
        "the reference of {q} has only {rows} rows, fewer than {min_rows}"
    );
    if let Err(m) = weir_nexmark::reference::compare_csv(&want, &ours) {
        panic!("{q} differs from the reference: {m}");
    }
    assert!(o.join("_SUCCESS").exists());
}

/// The flags of four injected panics under `seed` at `rate` events a second, each once a
/// checkpoint (every 20 ms) completed in its attempt, restarts after 5 ms, verified.
pub fn four_panics(rate: &str, seed: &str) -> Vec<String> {
    [
        "--rate",
        rate,
        "--checkpoint-interval",
        "20ms",
        "--inject-failures",
        "4",
        "--seed",
        seed,
        "--restart-strategy",
        "fixed-delay",
        "--restart-delay",
        "5ms",
        "--verify",
    ]
    .map(String::from)
    .to_vec()
}

/// Asserts that a run with [`four_panics`] over `events` succeeded and verified, that all
/// four fired, and that each of the four restarts resumed from a checkpoint.
pub fn assert_four_panics_resumed(run: &Run, events: u64) {
    run.assert_success();
    assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    assert!(
        run.stdout.contains("injected failures: 4 of 4"),
        "{}",
        run.describe()
    );
    let attempts = assert_resumed(run, events);
    assert_eq!(attempts.len(), 5, "{}", run.describe());
}

/// Runs `last` (a `--restore latest` run of the job `nexmark` with checkpoints in `d`)
/// with `--verify`, and asserts that it verified and resumed from checkpoint `newest`,
/// reading only what it had not covered of `events`.
pub fn run_last_from_newest(tmp: &Path, d: &Path, newest: u64, mut last: Vec<String>, events: u64) {
    last.push("--verify".into());
    let run = run(&mut weir(tmp, last));
    run.assert_success();
    assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    assert_eq!(
        restored_from(&run.stdout),
        Some(
            checkpoint_dir(d)
                .join("nexmark")
                .join(format!("chk-{newest}"))
        ),
        "{}",
        run.describe()
    );
    assert_resumed(&run, events);
}
