//! Every built-in job (keyed-count, wordcount, window-sum and every Nexmark query) is
//! SIGKILLed at a seeded-random moment after it completed a checkpoint of its own, mid-input,
//! and resumed with `--restore latest`: the output is exact (`--verify`, or the truth
//! computed here for wordcount), the resumed run restored that checkpoint and read only the
//! rest of the input, and the killed run left its output unpublished.
//!
//! What this guards: a job's output survives a restore by construction (`Job::output` keeps
//! its staging folder through a kill, and the restoring run continues it), so the part files
//! a checkpoint committed are there for the run that restores it, whatever the job.
//!
//! Mid-input without depending on the machine's speed: each killed run is limited by a rate
//! to several seconds in all (a slow machine only makes it longer), and it is killed at most
//! 300 ms after one of its first checkpoints; a run that ended before is reported as such.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::kill_resume::{kill_after_checkpoint, resume_from, Kill};
use common::*;

/// One built-in job of the loop: `weir run <job> <args>`.
struct Spec {
    /// The job's name: its subcommand and checkpoint folder.
    job: &'static str,
    /// Its own flags (input, keys, …), without rates.
    args: Vec<String>,
    /// The flag that slows the killed run down (the resumed run sets it 50 times higher).
    rate_flag: &'static str,
    /// The killed run's rate.
    rate: u64,
    /// Source records of a whole run (what a resumed run must read less of).
    total: u64,
    /// Whether the job checks itself (`--verify`); else the test compares the output.
    verifies: bool,
    /// The run is killed after a checkpoint with an id in this range (seeded).
    kill_after: (u64, u64),
}

impl Spec {
    fn command(&self, tmp: &Path, restore: bool) -> Vec<String> {
        let (d, o) = (tmp.join("chk"), tmp.join("out"));
        let rate = if restore { self.rate * 50 } else { self.rate };
        let mut a: Vec<String> = ["run", self.job].map(String::from).to_vec();
        a.extend(self.args.iter().cloned());
        a.extend(
            [
                "--parallelism",
                "2",
                "--checkpoint-interval",
                "50ms",
                "--checkpoint-dir",
                &checkpoint_arg(&d),
                "--output",
                &s(&o),
                "--restart-delay",
                "10ms",
                self.rate_flag,
                &rate.to_string(),
            ]
            .map(String::from),
        );
        if restore {
            a.extend(["--restore", "latest"].map(String::from));
            if self.verifies {
                a.push("--verify".into());
            }
        }
        a
    }
}

/// Runs `spec` once, SIGKILLs it 0–300 ms (seeded) after a completed checkpoint (seeded
/// within `spec.kill_after`),
/// then resumes it with `--restore latest` and returns the finished resumed run, checked:
/// it succeeded, restored the newest checkpoint of the killed run, and read only the rest.
fn kill_and_resume(spec: &Spec, seed: u64) -> (tempfile::TempDir, Run) {
    let tmp = tempfile::tempdir().unwrap();
    let job_dir = tmp.path().join("chk").join(spec.job);
    let mut rng = XorShift::from_env(seed);
    // After a few checkpoints, so that the sinks committed output before the kill.
    let after_checkpoint = rng.range(spec.kill_after.0, spec.kill_after.1);
    let what = format!("{} {:?}", spec.job, spec.args);
    let kill = Kill {
        job_dir: &job_dir,
        log: &tmp.path().join("killed.log"),
        after_checkpoint,
        delay_ms: rng.range(0, 300),
        what: &what,
    };
    let newest = kill_after_checkpoint(
        &mut weir(tmp.path(), spec.command(tmp.path(), false)),
        &kill,
    );
    assert!(
        !tmp.path().join("out").exists(),
        "{}: the killed run published a partial output",
        spec.job
    );
    let run = resume_from(
        &mut weir(tmp.path(), spec.command(tmp.path(), true)),
        newest,
        &what,
    );
    assert_resumed(&run, spec.total);
    if spec.verifies {
        assert!(
            run.stdout.contains("verify: OK"),
            "{} {:?}: not exact after a SIGKILL and a restore\n{}",
            spec.job,
            spec.args,
            run.describe()
        );
    }
    (tmp, run)
}

#[test]
fn keyed_count_is_exact_after_a_sigkill_and_a_restore() {
    let (events, keys) = (300_000, 97);
    let spec = Spec {
        job: "keyed-count",
        args: ["--events", &events.to_string(), "--keys", &keys.to_string()]
            .map(String::from)
            .to_vec(),
        rate_flag: "--rate",
        rate: 60_000,
        total: events,
        verifies: true,
        kill_after: (2, 4),
    };
    let (tmp, _) = kill_and_resume(&spec, 0x0a11_0001);
    assert_keyed_count_exact(&tmp.path().join("out"), events, keys);
}

#[test]
fn window_sum_is_exact_after_a_sigkill_and_a_restore() {
    let events = 300_000;
    let spec = Spec {
        job: "window-sum",
        args: [
            "--events",
            &events.to_string(),
            "--keys",
            "50",
            "--tps",
            "30000",
            // Windows of 100 ms of event time, 3000 events each: several fire and are
            // committed before the kill.
            "--window-ms",
            "100",
        ]
        .map(String::from)
        .to_vec(),
        rate_flag: "--rate",
        rate: 60_000,
        total: events,
        verifies: true,
        kill_after: (2, 4),
    };
    kill_and_resume(&spec, 0x0a11_0002);
}

#[test]
fn wordcount_is_exact_after_a_sigkill_and_a_restore() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("words.txt");
    // 40 000 lines of 3 words each over 101 distinct words.
    let (lines, mut truth) = (40_000u64, BTreeMap::<String, u64>::new());
    let mut text = String::new();
    for i in 0..lines {
        let words = [i % 101, (i * 7) % 101, (i * 13 + 5) % 101].map(|w| format!("w{w}"));
        for w in &words {
            *truth.entry(w.clone()).or_default() += 1;
        }
        text.push_str(&words.join(" "));
        text.push('\n');
    }
    std::fs::write(&input, text).unwrap();
    let spec = Spec {
        job: "wordcount",
        args: vec!["--input".into(), s(&input)],
        rate_flag: "--sink-rate",
        rate: 12_000,
        total: lines,
        verifies: false,
        // The count's rate backs the file source up with a full pipeline (~40 000 words,
        // which the rate drains in ~3.5 s), and the first barrier waits behind it: the
        // kill comes after the first checkpoint, long before the input's end at 10 s.
        kill_after: (1, 1),
    };
    let (run_dir, _) = kill_and_resume(&spec, 0x0a11_0003);
    let got: BTreeMap<String, u64> = read_pairs(&run_dir.path().join("out"))
        .into_iter()
        .collect();
    assert_eq!(
        got, truth,
        "wordcount is not exact after a SIGKILL and a restore"
    );
}

#[test]
fn every_nexmark_query_is_exact_after_a_sigkill_and_a_restore() {
    let events = 30_000;
    for (i, query) in ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q11"]
        .into_iter()
        .enumerate()
    {
        let spec = Spec {
            job: "nexmark",
            args: ["--query", query, "--events", &events.to_string()]
                .map(String::from)
                .to_vec(),
            rate_flag: "--rate",
            rate: 6_000,
            total: events,
            verifies: true,
            kill_after: (2, 4),
        };
        kill_and_resume(&spec, 0x0a11_0010 + i as u64);
    }
}
