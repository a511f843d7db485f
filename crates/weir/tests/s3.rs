//! Checkpoints on a real S3-compatible server: moto's server (`moto_server`, from PyPI;
//! `scripts/test.sh` installs it), started by the tests on loopback. A job checkpoints to
//! `s3://bucket/prefix` and resumes mid-run from it; a corrupted object is skipped; a
//! missing bucket, wrong credentials and a server that is down are one clear error each,
//! without a retry loop; a state file larger than a part is uploaded in parts and read back
//! in ranges; a run whose expired lease was taken over completes no more checkpoints, and
//! of two runs taking over one expired lease exactly one wins.
#![cfg(feature = "s3")]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::moto::{self, make_bucket, server};
use common::*;
use weir::inspect::source_progress;
use weir::prelude::*;
use weir::storage::open_backend;

/// The newest complete checkpoint of `job` under `dir` and the records its sources read.
fn newest(dir: &str, job: &str) -> (PathBuf, u64) {
    let root = PathBuf::from(format!("{dir}/{job}"));
    let b = open_backend(&root).unwrap();
    let id = b
        .list("")
        .unwrap()
        .iter()
        .filter_map(|n| n.strip_prefix("chk-")?.parse::<u64>().ok())
        .filter(|id| b.size(&format!("chk-{id}/_metadata")).is_ok())
        .max()
        .expect("a complete checkpoint on S3");
    let path = root.join(format!("chk-{id}"));
    let sources = source_progress(&path).unwrap();
    (path, sources.iter().map(|s| s.records).sum())
}

#[test]
fn a_job_checkpoints_to_s3_and_resumes_mid_run() {
    server();
    make_bucket("resume");
    let dir = "s3://resume/ckpts";
    let n = 400_000;
    let mut cfg = config("counted", Path::new(dir), 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(50));
    cfg.restart = RestartStrategy::None;
    assert_stopped_mid_run(run_keyed_count_stopping(cfg.clone(), n, 777, 40_000));
    let (mid, at) = newest(dir, "counted");
    assert!(at > 0 && at < n, "stopped at {at}");
    assert!(
        !Path::new("s3:").exists(),
        "nothing went to a local folder named s3:"
    );

    let mut c = cfg.clone();
    c.restore = RestoreFrom::Latest;
    let (counts, r) = run_keyed_count(c, n, 777, None).unwrap();
    assert_resumed_mid_run(&r, &mid, n);
    assert_eq!(counts, expected(n, 777));
}

#[test]
fn a_corrupted_object_is_skipped_for_the_previous_checkpoint() {
    server();
    make_bucket("corrupt");
    let dir = "s3://corrupt/ckpts";
    let mut cfg = config("counted", Path::new(dir), 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(50));
    // Each source subtask pauses for a checkpoint every 25 000 of its 75 000 records: a
    // mid-run checkpoint before the newest however slow the store.
    let (counts, r) =
        run_keyed_count_pausing(cfg.clone(), 300_000, 100, Some(300_000.0), 25_000).unwrap();
    assert_eq!(counts, expected(300_000, 100));
    assert!(r.checkpoints.len() >= 2, "need two checkpoints");
    let (newest_path, _) = newest(dir, "counted");
    let b = open_backend(&newest_path).unwrap();
    let name = b.list("count").unwrap().pop().unwrap();
    let key = format!("count/{name}");
    let mut bytes = b.get(&key, None).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    let mut w = b.put(&key).unwrap();
    w.write(&bytes).unwrap();
    w.commit(&[]).unwrap();
    let mut c = cfg;
    c.restore = RestoreFrom::Latest;
    let (counts, r) = run_keyed_count(c, 300_000, 100, None).unwrap();
    assert_eq!(counts, expected(300_000, 100));
    // It resumed from the previous checkpoint, not from the beginning.
    weir::testing::assert_resumed(&r, 300_000);
    let notice = r.notices.join("\n");
    assert!(notice.contains("skipping checkpoint"), "{notice}");
    assert!(
        notice.contains(&format!("{}/{key}", newest_path.display())),
        "{notice}"
    );
    assert!(notice.contains("checksum"), "{notice}");
}

#[test]
fn a_missing_bucket_is_one_clear_error() {
    server();
    let mut cfg = config(
        "counted",
        Path::new("s3://no-such-bucket/x"),
        1,
        CheckpointingMode::ExactlyOnce,
    );
    // A restart would wait `RETRY_DELAY` first, so a run that took as long was retried: a
    // bound set by the restart strategy, not by how fast this machine answers.
    const RETRY_DELAY: Duration = Duration::from_secs(120);
    cfg.restart = RestartStrategy::FixedDelay {
        attempts: 1,
        delay: RETRY_DELAY,
    };
    let started = Instant::now();
    let err = run_keyed_count(cfg, 10, 2, None).err().unwrap().to_string();
    assert!(err.contains("s3://no-such-bucket/x/counted"), "{err}");
    assert!(err.contains("bucket does not exist"), "{err}");
    assert!(
        started.elapsed() < RETRY_DELAY,
        "a missing bucket was retried: {err}"
    );
}

#[test]
fn a_second_run_is_refused_while_the_lease_is_held() {
    server();
    make_bucket("lease");
    let dir = Path::new("s3://lease/ckpts");
    let own = || open_backend(&dir.join("job")).unwrap().take_ownership();
    let first = own().unwrap();
    let err = own().unwrap_err();
    assert!(err.to_string().contains("in use by another run"), "{err}");
    drop(first);
    own().unwrap();
}

#[test]
fn a_server_that_is_down_is_one_clear_error() {
    server();
    // Port 1 (tcpmux) has no listener; a free port picked here could be taken meanwhile
    // by a moto server another test starts.
    let closed = 1;
    let dir = "s3://down/x".to_string();
    let err = {
        use weir::storage::backend::StorageBackend;
        let b = weir::storage::open_with_endpoint(&dir, &format!("http://127.0.0.1:{closed}"));
        b.and_then(|b| b.list("")).unwrap_err().to_string()
    };
    assert!(err.contains("cannot be reached"), "{err}");
}

#[test]
fn wrong_credentials_are_one_clear_error_without_retries() {
    use weir::storage::backend::StorageBackend;
    server(); // sets the AWS_* keys, which this server knows nothing of
    let auth = moto::Moto::start_with_auth();
    let b = weir::storage::open_with_endpoint("s3://creds/x", &auth.endpoint()).unwrap();
    let write = b.put("probe").and_then(|mut w| {
        w.write(b"probe")?;
        w.commit(&[])
    });
    let err = write.unwrap_err().to_string();
    assert!(err.contains("s3://creds/x/probe"), "{err}");
    assert!(err.contains("InvalidAccessKeyId"), "{err}");
    assert!(err.contains("refused the credentials"), "{err}");
    assert!(err.contains("AWS_ACCESS_KEY_ID"), "{err}");
    // The client names its retries in the error ("after N retries"): a refusal has none,
    // whatever the time it took.
    assert!(!err.contains("retries"), "retried a refusal: {err}");
    let err = b.list("").unwrap_err().to_string();
    assert!(err.contains("refused the credentials"), "{err}");
    assert!(!err.contains("retries"), "retried a refusal: {err}");
}

/// A payload of `len` bytes that differs at every offset (so misplaced parts show).
fn pattern(len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

#[test]
fn a_state_file_larger_than_a_part_is_uploaded_in_parts_and_read_in_ranges() {
    use weir::storage::transfers;
    server();
    make_bucket("bigfiles");
    let b = open_backend(Path::new("s3://bigfiles/ck/job")).unwrap();
    // 40 MiB and a bit, written in uneven pieces: five parts of 8 MiB and a short last one.
    let payload = pattern((40 << 20) + 12_345);
    let before = transfers();
    let mut w = b.put("chk-7/count/kg-0-127").unwrap();
    for piece in payload.chunks((1 << 20) + 7) {
        w.write(piece).unwrap();
    }
    // The head (an envelope's header, known last) lands in the first part, sent last.
    w.commit(b"HEAD").unwrap();
    let wrote = transfers();
    // (Counters are the process's: other tests may upload meanwhile.)
    assert!(wrote.multipart_uploads > before.multipart_uploads);
    assert!(
        wrote.parts_uploaded - before.parts_uploaded >= 6,
        "{before:?} → {wrote:?}"
    );
    assert_eq!(
        b.size("chk-7/count/kg-0-127").unwrap(),
        payload.len() as u64
    );
    // Read back as a restore reads a large file: big reads, split into ranges.
    let mut read = vec![0; payload.len()];
    b.read_at("chk-7/count/kg-0-127", 0, &mut read).unwrap();
    let after = transfers();
    assert_eq!(&read[..4], b"HEAD");
    assert!(read[4..] == payload[4..], "the payload came back different");
    assert!(
        after.ranged_gets - wrote.ranged_gets >= 6,
        "{wrote:?} → {after:?}"
    );
}

#[test]
fn an_upload_dropped_before_commit_leaves_nothing() {
    server();
    make_bucket("dropped");
    let b = weir::storage::open_backend(Path::new("s3://dropped/x")).unwrap();
    let mut w = b.put("big").unwrap();
    w.write(&pattern(20 << 20)).unwrap();
    drop(w);
    assert!(b.size("big").unwrap_err().is_not_found());
    assert!(b.list("").unwrap().is_empty());
    // A write of exactly one part is one plain PUT, visible whole.
    let mut w = b.put("one").unwrap();
    w.write(&pattern(8 << 20)).unwrap();
    w.commit(b"head").unwrap();
    let got = b.get("one", None).unwrap();
    assert_eq!(&got[..4], b"head");
    assert_eq!(got[4..], pattern(8 << 20)[4..]);
}

/// Overwrites the lease of `job_url` with one that expired long ago, as a run that
/// stalled past its lease leaves it.
fn expire_lease(job_url: &str) {
    let b = weir::storage::open_backend(Path::new(job_url)).unwrap();
    let mut w = b.put("_lease").unwrap();
    w.write(b"1 a run that stalled").unwrap();
    w.commit(&[]).unwrap();
}

#[test]
fn a_run_whose_expired_lease_was_taken_over_completes_no_more_checkpoints() {
    server();
    make_bucket("fenced");
    let job = Path::new("s3://fenced/ck/job");
    let old = open_backend(job).unwrap();
    let old_lease = old.take_ownership().unwrap();
    old.put_if_absent("chk-1/_metadata", b"one").unwrap();
    // The old run stalls past its lease's expiry, and a new run takes the folder over.
    expire_lease("s3://fenced/ck/job");
    let new = open_backend(job).unwrap();
    let _new_lease = new.take_ownership().unwrap();
    // The old run wakes up: its completion is refused, naming the cause and the way out.
    let err = old
        .put_if_absent("chk-2/_metadata", b"two")
        .unwrap_err()
        .to_string();
    assert!(err.contains("s3://fenced/ck/job"), "{err}");
    assert!(err.contains("was taken over by"), "{err}");
    assert!(err.contains("writes nothing more there"), "{err}");
    assert!(old.ownership_lost().is_some_and(|e| e.is_ownership_lost()));
    assert!(new.ownership_lost().is_none());
    assert!(new.size("chk-2/_metadata").unwrap_err().is_not_found());
    // Nor does it write state files or delete checkpoints (its retention) any more.
    let err = old.put("chk-3/count/f").err().unwrap();
    assert!(err.to_string().contains("was taken over by"), "{err}");
    assert!(old.delete_all("chk-1").is_err());
    assert!(
        new.size("chk-1/_metadata").is_ok(),
        "the old run deleted a checkpoint"
    );
    // The new run completes checkpoints; the old one, gone, leaves the lease to it.
    new.put_if_absent("chk-2/_metadata", b"two").unwrap();
    drop(old_lease);
    let third = open_backend(job).unwrap().take_ownership().err().unwrap();
    assert!(
        third.to_string().contains("in use by another run"),
        "{third}"
    );
}

/// A renewal of the lease that reached the server but whose answer was lost (the store went
/// away mid-request) leaves the run with a stale ETag: its next renewal is refused as a
/// precondition, yet the lease still names this run, which must go on holding it rather
/// than stop as if another run had taken the folder over.
#[test]
fn a_renewal_whose_answer_was_lost_is_recognised_as_the_runs_own() {
    server();
    make_bucket("ownrenewal");
    let job = Path::new("s3://ownrenewal/ck/job");
    let run = open_backend(job).unwrap();
    let _lease = run.take_ownership().unwrap();
    // What the lost renewal wrote: the same holder, a later expiry (so a new ETag).
    let outside = open_backend(job).unwrap();
    let text = String::from_utf8(outside.get("_lease", None).unwrap().to_vec()).unwrap();
    let (expiry, holder) = text.split_once(' ').unwrap();
    let later = expiry.parse::<u64>().unwrap() + 1000;
    let mut w = outside.put("_lease").unwrap();
    w.write(format!("{later} {holder}").as_bytes()).unwrap();
    w.commit(&[]).unwrap();
    // Completing a checkpoint renews the lease first: still this run's.
    run.put_if_absent("chk-1/_metadata", b"one").unwrap();
    assert!(run.ownership_lost().is_none());
    // Another run's holder in the lease is still a takeover.
    let mut w = outside.put("_lease").unwrap();
    w.write(format!("{later} another run").as_bytes()).unwrap();
    w.commit(&[]).unwrap();
    let err = run.put_if_absent("chk-2/_metadata", b"two").unwrap_err();
    assert!(
        err.to_string().contains("was taken over by another run"),
        "{err}"
    );
}

#[test]
fn of_two_runs_taking_over_an_expired_lease_exactly_one_wins() {
    server();
    make_bucket("takeover");
    for round in 0..5 {
        let job = format!("job-{round}");
        let url = format!("s3://takeover/ck/{job}");
        let own = || open_backend(Path::new(&url)).and_then(|b| Ok((b.take_ownership()?, b)));
        let first = own().unwrap();
        expire_lease(&format!("s3://takeover/ck/{job}"));
        let start = std::sync::Barrier::new(2);
        let results: Vec<_> = std::thread::scope(|s| {
            let open = || {
                start.wait();
                own()
            };
            let (a, b) = (s.spawn(open), s.spawn(open));
            vec![a.join().unwrap(), b.join().unwrap()]
        });
        let outcomes: Vec<_> = results
            .iter()
            .map(|r| r.as_ref().map(|_| "won").map_err(|e| e.to_string()))
            .collect();
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {outcomes:?}");
        let lost = results.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert!(lost.to_string().contains("in use by another run"), "{lost}");
        // The stalled first holder cannot complete a checkpoint any more.
        assert!(first.1.put_if_absent("chk-1/_metadata", b"x").is_err());
    }
}
