//! A keyed-count job on the disk state backend whose incremental checkpoints go into a
//! bucket of the shared moto server ([`super::moto`]): the setup the end-to-end tests of
//! keyed state on disk with its durable copy in object storage (`disk_state_remote`,
//! `disk_state_bound`) share, each adding its own sizes and flags.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{keyed_count_args, moto, s, weir};

/// How long a killed run's lease on the job folder lasts (renewed every third of it): short,
/// so a resumed run need not wait long before it may take the folder over.
pub const LEASE_SECONDS: u64 = 4;

/// The number after `prefix` on a line of `text` (e.g. `"restoring lazily: "` → bytes): how
/// the tests read the figures a run reports on stderr.
pub fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Records the sources of checkpoint `id` of the job folder at `url` had read (`None`:
/// unreadable, e.g. removed by retention meanwhile): how a test sees that a held run's
/// checkpoint is at its hold.
pub fn position(url: &str, id: u64) -> Option<u64> {
    let path = format!("{url}/chk-{id}");
    let sources = weir::inspect::source_progress(Path::new(&path)).ok()?;
    Some(sources.iter().map(|s| s.records).sum())
}

/// keyed-count on the disk backend with incremental checkpoints into bucket `bucket`: its
/// temp dir (local state and output), and where its checkpoints go.
pub struct DiskS3Job {
    /// The run's working folder: its `state` dir, its `out` and its logs.
    pub tmp: tempfile::TempDir,
    /// `--checkpoint-dir` (`s3://<bucket>/chk`).
    pub dir: String,
    /// The job folder (`s3://<bucket>/chk/keyed-count`).
    pub url: String,
}

impl DiskS3Job {
    /// A job checkpointing into `bucket`, made afresh on the moto server (so each test has
    /// its own).
    pub fn new(bucket: &str) -> DiskS3Job {
        moto::make_bucket(bucket);
        let dir = format!("s3://{bucket}/chk");
        DiskS3Job {
            tmp: tempfile::tempdir().unwrap(),
            url: format!("{dir}/keyed-count"),
            dir,
        }
    }

    /// Where the run writes its counts (what `assert_keyed_count_exact` reads).
    pub fn out(&self) -> PathBuf {
        self.tmp.path().join("out")
    }

    /// The run over `events` events and `keys` keys (`restore`: resumed with `--restore
    /// latest --verify`) on the disk backend, checkpointing incrementally into the bucket,
    /// with the flags `more` (rate, interval, sizes…), moto's environment and a lease of
    /// [`LEASE_SECONDS`].
    pub fn keyed_count(&self, events: u64, keys: u64, restore: bool, more: &[&str]) -> Command {
        let (st, out) = (s(&self.tmp.path().join("state")), s(&self.out()));
        let mut extra = more.to_vec();
        extra.extend_from_slice(&[
            "--checkpoint-dir",
            &self.dir,
            "--state-backend",
            "disk",
            "--state-dir",
            &st,
            "--incremental-checkpoints",
            "--output",
            &out,
        ]);
        let mut c = weir(
            self.tmp.path(),
            keyed_count_args(events, keys, &extra, restore),
        );
        c.envs(moto::child_env())
            .env("WEIR_S3_LEASE_SECONDS", LEASE_SECONDS.to_string());
        c
    }
}
