//! Helpers shared by the `connectors_*` tests: the keyed-count command line with a
//! `--sink`, the exactly-once check of `--emit updates` output (every key's counts are
//! exactly `1..=n`) and the arguments of the SIGKILL loops (the loop itself and the
//! clean-error check are in `common`).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// keyed-count with `--emit updates` into `sink`, checkpoints in `chk`, then `extra`.
pub fn keyed_count_updates(
    chk: &Path,
    sink: &str,
    events: u64,
    keys: u64,
    extra: &[&str],
) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "keyed-count",
        "--events",
        &events.to_string(),
        "--keys",
        &keys.to_string(),
        "--emit",
        "updates",
        "--sink",
        sink,
        "--checkpoint-dir",
        &checkpoint_arg(chk),
        "--restart-delay",
        "5ms",
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    a.extend(extra.iter().map(|x| x.to_string()));
    a
}

/// The command line of a SIGKILL loop's runs ([`kill_loop`]'s `args`): keyed-count into
/// `sink` at parallelism 2, checkpoints every 50 ms, the generator paced to `rate` events
/// per second, and `--restore latest` for every run after the first.
pub fn kill_run_args<'a>(
    chk: &'a Path,
    sink: &'a str,
    (events, keys): (u64, u64),
    rate: &'a str,
) -> impl Fn(bool) -> Vec<String> + 'a {
    move |restore| {
        let mut extra = vec![
            "--parallelism",
            "2",
            "--checkpoint-interval",
            "50ms",
            "--rate",
            rate,
        ];
        if restore {
            extra.extend(["--restore", "latest"]);
        }
        keyed_count_updates(chk, sink, events, keys, &extra)
    }
}

/// Starts `args(restore)` `kills` times (the first fresh, the rest with `--restore latest`)
/// and SIGKILLs each run mid-run: once it completed a checkpoint newer than any before it
/// (so a restored run proved it resumed and progressed), plus a random 0–`extra_ms` ms
/// (seeded, see [`XorShift::from_env`]), asserting it had not finished. Driven by
/// checkpoints rather than by wall time, so a loaded machine makes it slower, not wrong.
/// `after_kill(i)` checks the committed output. Returns the newest complete checkpoint.
pub fn kill_after_new_checkpoints(
    tmp: &Path,
    job_dir: &Path,
    (kills, extra_ms): (usize, u64),
    seed: u64,
    args: impl Fn(bool) -> Vec<String>,
    mut after_kill: impl FnMut(usize),
) -> u64 {
    let mut rng = XorShift::from_env(seed);
    let mut newest = 0u64;
    for i in 0..kills {
        let log = tmp.join(format!("run-{i}.log"));
        let mut child = spawn_logged(&mut weir(tmp, args(i > 0)), &log);
        let deadline = Instant::now() + RUN_TIMEOUT;
        while completed_checkpoints(job_dir)
            .last()
            .is_none_or(|&id| id <= newest)
        {
            if let Some(st) = child.try_wait().expect("try_wait") {
                panic!(
                    "run {i} exited ({st}) before completing a checkpoint after chk-{newest}; \
                     see {}",
                    log.display()
                );
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("run {i} completed no checkpoint after chk-{newest} within {RUN_TIMEOUT:?}");
            }
            thread::sleep(Duration::from_millis(5));
        }
        let extra = rng.range(0, extra_ms);
        thread::sleep(Duration::from_millis(extra));
        sigkill_running(
            &mut child,
            &format!("run {i} (killed {extra} ms after a checkpoint after chk-{newest})"),
        );
        wait_for_dead_lease();
        after_kill(i);
        newest = completed_checkpoints(job_dir)
            .last()
            .copied()
            .unwrap_or(newest);
    }
    newest
}

/// keyed-count into `sink` over `events` (events, keys), paced at 100 000 events a second,
/// SIGKILLed once after its first complete checkpoint ([`kill_after_new_checkpoints`],
/// seeded by `seed`): the prepared or pre-committed transactions `weir transactions
/// list|settle` then settle. Returns the runs' command line, for the resume.
pub fn killed_after_a_checkpoint<'a>(
    tmp: &Path,
    chk: &'a Path,
    sink: &'a str,
    events: (u64, u64),
    seed: u64,
) -> impl Fn(bool) -> Vec<String> + 'a {
    let args = kill_run_args(chk, sink, events, "100000");
    let job_dir = chk.join("keyed-count");
    let newest = kill_after_new_checkpoints(tmp, &job_dir, (1, 0), seed, &args, |_| {});
    assert!(newest > 0);
    args
}

/// `weir transactions VERB --checkpoint-dir CHK --sink SINK EXTRA…` run in `tmp`: the
/// command the transactions tests of every sink run, spelled once.
pub fn transactions(tmp: &Path, verb: &str, chk: &str, sink: &str, extra: &[&str]) -> Run {
    let mut args = vec!["transactions", verb, "--checkpoint-dir", chk];
    args.extend(["--sink", sink]);
    args.extend(extra);
    run(&mut weir(tmp, args))
}

/// `key → every count emitted for it`, from `(key, count)` records in any order.
pub fn group(records: impl IntoIterator<Item = (u64, u64)>) -> BTreeMap<u64, Vec<u64>> {
    let mut per_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (k, c) in records {
        per_key.entry(k).or_default().push(c);
    }
    for v in per_key.values_mut() {
        v.sort_unstable();
    }
    per_key
}

/// Why `per_key` is not a prefix `1..=m` for every key (no duplicate, no gap), if it is not.
pub fn prefix_problem(per_key: &BTreeMap<u64, Vec<u64>>) -> Option<String> {
    for (k, counts) in per_key {
        for (i, c) in counts.iter().enumerate() {
            if *c != i as u64 + 1 {
                let dup = counts.windows(2).any(|w| w[0] == w[1]);
                return Some(format!(
                    "key {k}: counts are not 1..={} ({}; first wrong at position {i}: {c})",
                    counts.len(),
                    if dup { "duplicates" } else { "a gap" }
                ));
            }
        }
    }
    None
}

/// Asserts that the `--emit updates` output of keyed-count over `n` events and `keys` keys
/// is exactly once: every key's counts are exactly `1..=expected_count(k)`.
pub fn assert_updates_exact(per_key: &BTreeMap<u64, Vec<u64>>, n: u64, keys: u64, what: &str) {
    if let Some(p) = prefix_problem(per_key) {
        panic!("{what}: not exactly-once: {p}");
    }
    let want: BTreeMap<u64, u64> = (0..keys.min(n))
        .map(|k| (k, expected_count(n, keys, k)))
        .collect();
    let got: BTreeMap<u64, u64> = per_key.iter().map(|(k, v)| (*k, v.len() as u64)).collect();
    if got != want {
        let wrong: Vec<String> = want
            .iter()
            .filter(|(k, v)| got.get(k) != Some(v))
            .take(5)
            .map(|(k, v)| format!("key {k}: want 1..={v}, got {:?} counts", got.get(k)))
            .collect();
        panic!(
            "{what}: {} keys, {} expected; {}",
            got.len(),
            want.len(),
            wrong.join("; ")
        );
    }
}

/// Runs `resumed` (a keyed-count with `--restore latest`), asserts it succeeded and restored
/// a checkpoint (a fresh start would give the same counts over a bounded input), then that
/// what `committed` reads afterwards is exactly once: the last step of every kill-or-settle
/// then resume test of the sinks.
pub fn resume_exact(
    resumed: &mut std::process::Command,
    committed: impl FnOnce() -> Vec<(u64, u64)>,
    n: u64,
    keys: u64,
    what: &str,
) {
    let resumed = run(resumed);
    resumed.assert_success();
    assert!(
        restored_from(&resumed.stdout).is_some(),
        "{what}: the resumed run restored no checkpoint: {}",
        resumed.describe()
    );
    assert_updates_exact(&group(committed()), n, keys, what);
}

/// Every `key<TAB>count` line of the committed (visible) part files in `dir`; hidden
/// in-progress and pending files are not output and are skipped, as readers do.
pub fn committed_tsv(dir: &Path) -> Vec<(u64, u64)> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd {
        let p = e.expect("dir entry").path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("part-") {
            continue;
        }
        assert!(name.ends_with(".tsv"), "unexpected file {name}");
        for line in fs::read_to_string(&p).expect("read part file").lines() {
            let (k, c) = line
                .split_once('\t')
                .unwrap_or_else(|| panic!("{name}: not key<TAB>count: {line:?}"));
            out.push((k.parse().unwrap(), c.parse().unwrap()));
        }
    }
    out
}

/// Hidden files (in-progress or pending parts) left in `dir`.
pub fn hidden_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .expect("list sink folder")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}
