//! `weir checkpoints list`: complete, incomplete and unreadable checkpoints, for one job's
//! folder and for a whole checkpoint directory.

mod common;

use common::*;

/// A keyed-count of 300 000 events over 8 keys at 600 000 a second, its output discarded,
/// with checkpoints in `ck` under the flags `checkpointing`. Four injected failures, each
/// held back until a checkpoint of its attempt completed, make at least four checkpoints
/// complete mid-run (five with the final one) however fast or slow the machine is.
fn paced_run(ck: &std::path::Path, checkpointing: &[&str]) -> Vec<String> {
    let dir = checkpoint_arg(ck);
    let mut extra = vec![
        "--rate",
        "600000",
        "--checkpoint-dir",
        &dir,
        "--discard-output",
        "--inject-failures",
        "4",
        "--restart-delay",
        "10ms",
    ];
    extra.extend_from_slice(checkpointing);
    keyed_count_args(300_000, 8, &extra, false)
}

/// Leaves several complete checkpoints of keyed-count in `<tmp>/ck/keyed-count`.
fn leave_checkpoints(tmp: &std::path::Path) -> std::path::PathBuf {
    let ck = tmp.join("ck");
    run(&mut weir(
        tmp,
        paced_run(&ck, &["--checkpoint-interval", "50ms"]),
    ))
    .assert_success();
    ck
}

/// Every chk folder is listed with its status; a truncated `_metadata` is called
/// unreadable with the cause, a folder without `_metadata` incomplete.
#[test]
fn lists_complete_incomplete_and_unreadable_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let ck = leave_checkpoints(tmp.path());
    let job = ck.join("keyed-count");
    let done = completed_checkpoints(&job);
    assert!(
        done.len() >= 2,
        "need two complete checkpoints, have {done:?}"
    );
    // Where the checkpoints are: `ck` itself, or its twin on S3.
    let (ck, job) = (checkpoint_dir(&ck), checkpoint_dir(&ck).join("keyed-count"));
    // The run swept up checkpoints in flight when it ended: only complete ones remain.
    let folders = list_folder(&job)
        .iter()
        .filter(|n| n.starts_with("chk-"))
        .count();
    assert_eq!(
        folders,
        done.len(),
        "incomplete checkpoint folders left behind"
    );
    let newest = *done.last().unwrap();
    let meta = job.join(format!("chk-{newest}")).join("_metadata");
    let bytes = read_object(&meta);
    write_object(&meta, &bytes[..bytes.len() / 2]);
    if on_s3() {
        // No empty folders in object storage: a lone state file without `_metadata`.
        write_object(&job.join("chk-999/count/kg-0-128"), b"half-written");
    } else {
        std::fs::create_dir_all(job.join("chk-999")).unwrap();
    }

    for dir in [&ck, &job] {
        let r = run(&mut weir(tmp.path(), ["checkpoints", "list", &s(dir)]));
        r.assert_success();
        let line = |id: u64| {
            r.stdout
                .lines()
                .find(|l| l.split_whitespace().nth(1) == Some(&id.to_string()))
                .unwrap_or_else(|| panic!("no row for {id}\n{}", r.describe()))
                .to_string()
        };
        assert!(line(newest).contains("unreadable"), "{}", r.describe());
        assert!(
            r.stdout.contains("truncated"),
            "cause shown\n{}",
            r.describe()
        );
        assert!(line(done[0]).contains("complete"), "{}", r.describe());
        assert!(line(999).contains("incomplete"), "{}", r.describe());
    }

    let r = run(&mut weir(
        tmp.path(),
        ["checkpoints", "list", &s(&job), "--format", "json"],
    ));
    r.assert_success();
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), done.len() + 1);
    let complete = rows.iter().filter(|r| r["status"] == "complete").count();
    assert_eq!(complete, done.len() - 1);
}

/// Retention (`--retained-checkpoints 2`) keeps the two newest complete checkpoints and
/// deletes every older one, its objects included: on S3 (`WEIR_TEST_CHECKPOINT_DIR=s3`)
/// no `chk-` prefix of a discarded checkpoint is left either; `weir checkpoints list`
/// shows the two.
#[test]
fn retention_keeps_the_newest_and_deletes_the_older_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let ck = tmp.path().join("ck");
    let r = run(&mut weir(
        tmp.path(),
        paced_run(
            &ck,
            &[
                "--checkpoint-interval",
                "30ms",
                "--retained-checkpoints",
                "2",
            ],
        ),
    ));
    r.assert_success();
    let completed: u64 = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("checkpoints: "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no checkpoint count in the summary\n{}", r.describe()));
    assert!(
        completed >= 4,
        "{completed} checkpoints: too few for retention to delete any\n{}",
        r.describe()
    );
    let kept = completed_checkpoints(&ck.join("keyed-count"));
    assert_eq!(kept.len(), 2, "kept {kept:?} of {completed}");
    let job = checkpoint_dir(&ck).join("keyed-count");
    let mut folders: Vec<u64> = list_folder(&job)
        .iter()
        .filter_map(|n| n.strip_prefix("chk-")?.parse().ok())
        .collect();
    folders.sort_unstable();
    assert_eq!(folders, kept, "discarded checkpoints left objects behind");
    let list = run(&mut weir(tmp.path(), ["checkpoints", "list", &s(&job)]));
    list.assert_success();
    for id in &kept {
        let row = list
            .stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(&id.to_string()));
        assert!(
            row.is_some_and(|l| l.contains("complete")),
            "{}",
            list.describe()
        );
    }
}

/// A path that is not a folder is one clear error line, exit 1.
#[test]
fn missing_folder_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let r = run(&mut weir(
        tmp.path(),
        ["checkpoints", "list", "/nonexistent/ck"],
    ));
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("/nonexistent/ck"), "{}", r.describe());
    assert!(r.stderr.lines().count() <= 2, "{}", r.describe());
}

/// `checkpoints inspect` describes one checkpoint with its sources' positions, in text and
/// JSON; a folder that is not a checkpoint is one clear error.
#[test]
fn inspect_shows_operators_sizes_and_source_positions() {
    let tmp = tempfile::tempdir().unwrap();
    let ck = leave_checkpoints(tmp.path());
    let job = ck.join("keyed-count");
    let newest = *completed_checkpoints(&job).last().unwrap();
    let chk = checkpoint_dir(&ck)
        .join("keyed-count")
        .join(format!("chk-{newest}"));
    let r = run(&mut weir(tmp.path(), ["checkpoints", "inspect", &s(&chk)]));
    r.assert_success();
    for needle in [
        "checkpoint",
        "generator",
        "count",
        "source positions",
        "NEXT",
    ] {
        assert!(r.stdout.contains(needle), "{needle}\n{}", r.describe());
    }
    let r = run(&mut weir(
        tmp.path(),
        ["checkpoints", "inspect", &s(&chk), "--format", "json"],
    ));
    r.assert_success();
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["kind"], "checkpoint");
    let splits = v["source_positions"][0]["splits"].as_array().unwrap();
    assert_eq!(splits.len(), 2, "one split per generator subtask");
    let r = run(&mut weir(tmp.path(), ["checkpoints", "inspect", &s(&job)]));
    assert_eq!(r.code(), Some(1), "{}", r.describe());
}
