//! A bounded local disk for keyed state whose durable copy is in object storage
//! (`--state-cache-size`, issue 25 item 4), end to end on a moto S3 server: keyed-count on
//! the disk backend with incremental checkpoints into the bucket and a bound of a fraction
//! of each subtask's state. Past the bound, each confirmed checkpoint drops key groups its
//! chain holds unchanged from the local LSM; the run ends exact, its LSMs stayed near the
//! bound at every checkpoint, and the dropped groups were fetched again when touched (the
//! run's own reports). SIGKILLed mid-run, it resumes exact with `--restore latest`. The
//! flag is refused where it cannot hold, naming the way out.
#![cfg(feature = "s3")]

mod common;

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use common::moto;
use common::*;

/// Events and keys of each run: about 4 MB of counts with 512-byte values, over two
/// subtasks — several times [`BOUND`] each.
const EVENTS: u64 = 120_000;
const KEYS: u64 = 8000;

/// The bound on each subtask's local LSM.
const BOUND: u64 = 512 << 10;

/// The LSM's write buffer in these runs: what may sit in memtables and the journal on top
/// of the bound between two checkpoints.
const WRITE_BUFFER: &str = "128KiB";

/// How long the killed run's lease on the job folder lasts.
const LEASE_SECONDS: u64 = 4;

/// The number after `prefix` on a line of `text`.
fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// keyed-count bounded to [`BOUND`] per subtask, checkpointing into bucket `bucket`.
struct Job {
    tmp: tempfile::TempDir,
    dir: String,
    url: String,
}

impl Job {
    fn new(bucket: &str) -> Job {
        moto::make_bucket(bucket);
        let dir = format!("s3://{bucket}/chk");
        Job {
            tmp: tempfile::tempdir().unwrap(),
            url: format!("{dir}/keyed-count"),
            dir,
        }
    }

    fn out(&self) -> std::path::PathBuf {
        self.tmp.path().join("out")
    }

    /// The run (`restore`: resumed with `--restore latest --verify`), with `more` flags.
    fn command(&self, restore: bool, more: &[&str]) -> std::process::Command {
        let (st, out) = (s(&self.tmp.path().join("state")), s(&self.out()));
        let bound = BOUND.to_string();
        let mut extra = vec![
            "--rate",
            "20000",
            "--checkpoint-interval",
            "200ms",
            "--checkpoint-dir",
            &self.dir,
            "--state-backend",
            "disk",
            "--state-dir",
            &st,
            "--incremental-checkpoints",
            "--state-cache-size",
            &bound,
            "--state-write-buffer",
            WRITE_BUFFER,
            "--state-cache-entries",
            "256",
            "--value-bytes",
            "512",
            "--output",
            &out,
        ];
        extra.extend_from_slice(more);
        let mut c = weir(
            self.tmp.path(),
            keyed_count_args(EVENTS, KEYS, &extra, restore),
        );
        c.envs(moto::child_env())
            .env("WEIR_S3_LEASE_SECONDS", LEASE_SECONDS.to_string());
        c
    }
}

/// What a run reports of the bound: (sections dropped, the largest local LSM at a
/// checkpoint's barrier), and of fetches: sections fetched on demand.
fn reports(r: &Run) -> (u64, u64, u64) {
    let dropped = number_after(&r.stderr, "state cache: dropped ")
        .unwrap_or_else(|| panic!("nothing was dropped\n{}", r.describe()));
    let largest = number_after(&r.stderr, "the largest local state at a checkpoint was ")
        .unwrap_or_else(|| panic!("no largest local state\n{}", r.describe()));
    let fetched = number_after(&r.stderr, "lazy restore: fetched ")
        .unwrap_or_else(|| panic!("nothing was fetched back\n{}", r.describe()));
    (dropped, largest, fetched)
}

#[test]
fn a_state_several_times_the_bound_stays_near_it_and_ends_exact() {
    let job = Job::new("bounded");
    let r = run(&mut job.command(false, &[]));
    r.assert_success();
    assert_keyed_count_exact(&job.out(), EVENTS, KEYS);
    let (dropped, largest, fetched) = reports(&r);
    assert!(dropped > 0 && fetched > 0, "{}", r.describe());
    // The bound, plus what one checkpoint interval writes before the next eviction: the
    // write buffers (a memtable per state and the journal) of the subtask.
    let slack = 8 * (128 << 10);
    assert!(
        largest <= BOUND + slack,
        "a subtask's LSM held {largest} bytes at a checkpoint, bound {BOUND}\n{}",
        r.describe()
    );
}

#[test]
fn a_bounded_run_killed_mid_way_resumes_exact() {
    let job = Job::new("bounded-kill");
    let mut child = spawn_logged(
        &mut job.command(false, &[]),
        &job.tmp.path().join("first.log"),
    );
    // Killed once a few checkpoints completed (some after evictions: the state passes the
    // bound within the first thousands of events). The 120 s limit is a safety net.
    let deadline = Instant::now() + Duration::from_secs(120);
    while complete_checkpoint_ids(Path::new(&job.url)).len() < 3 {
        if let Some(st) = child.try_wait().expect("try_wait") {
            panic!("the run exited ({st}) before three checkpoints completed");
        }
        assert!(Instant::now() < deadline, "no three complete checkpoints");
        thread::sleep(Duration::from_millis(20));
    }
    sigkill_running(&mut child, "the bounded run");
    thread::sleep(Duration::from_secs(LEASE_SECONDS) + Duration::from_millis(500));
    let resumed = run(&mut job.command(true, &[]));
    resumed.assert_success();
    assert!(
        resumed.stdout.contains("verify: OK"),
        "{}",
        resumed.describe()
    );
    assert_resumed(&resumed, EVENTS);
    assert_keyed_count_exact(&job.out(), EVENTS, KEYS);
}

#[test]
fn the_bound_is_refused_where_it_cannot_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let local = s(&tmp.path().join("chk"));
    let refused = |flags: &[&str], needles: &[&str]| {
        let mut args = vec!["--state-cache-size", "1MiB", "--output"];
        let out = s(&tmp.path().join("out"));
        args.push(&out);
        args.extend_from_slice(flags);
        let r = run(
            &mut weir(tmp.path(), keyed_count_args(100, 10, &args, false)).envs(moto::child_env()),
        );
        assert_clean_error(&r, 2, needles);
    };
    refused(
        &["--state-backend", "memory", "--checkpoint-dir", &local],
        &["--state-cache-size", "--state-backend disk"],
    );
    refused(
        &["--state-backend", "disk", "--checkpoint-dir", &local],
        &["--state-cache-size", "--incremental-checkpoints"],
    );
    refused(
        &[
            "--state-backend",
            "disk",
            "--incremental-checkpoints",
            "--checkpoint-dir",
            &local,
        ],
        &["--state-cache-size", "local --checkpoint-dir", "s3://"],
    );
}
