//! `--state-backend disk` end to end (issue 25): keyed-count SIGKILLed mid-run on the disk
//! backend, then `--restore latest` on it, is exact; the working folder of the killed run is
//! removed by the next start, and the finished run leaves none behind.
//!
//! Every other suite of this crate runs on the disk backend with `WEIR_STATE_BACKEND=disk`
//! (the binary takes its backend from it when no flag is given).

mod common;

use std::path::Path;

use common::*;

/// The run folders (`run-<pid>-<n>`) under the job's state folder.
fn runs(state: &Path) -> Vec<String> {
    std::fs::read_dir(state.join("keyed-count"))
        .map(|r| {
            r.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("run-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn keyed_count_on_disk_survives_a_sigkill_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, o, state) = (
        tmp.path().join("chk"),
        tmp.path().join("out"),
        tmp.path().join("state"),
    );
    let (n, keys) = (150_000u64, 5000u64);
    let (chk, out, st) = (checkpoint_arg(&d), s(&o), s(&state));
    let args = |restore: bool| {
        let extra = [
            "--checkpoint-interval",
            "50ms",
            "--rate",
            if restore { "1000000" } else { "10000" },
            "--checkpoint-dir",
            &chk,
            "--output",
            &out,
            "--state-backend",
            "disk",
            "--state-dir",
            &st,
        ];
        keyed_count_args(n, keys, &extra, restore)
    };
    let job = d.join("keyed-count");
    let mut child = spawn_logged(
        &mut weir(tmp.path(), args(false)),
        &tmp.path().join("first.log"),
    );
    wait_for_checkpoints(&mut child, &job, 3, RUN_TIMEOUT);
    let killed = runs(&state);
    assert_eq!(
        killed.len(),
        1,
        "the running job works in one run folder: {killed:?}"
    );
    sigkill_running(&mut child, "first run");
    let run = run(&mut weir(tmp.path(), args(true)));
    run.assert_success();
    assert!(run.stdout.contains("verify: OK"), "{}", run.describe());
    assert_resumed(&run, n);
    assert_keyed_count_exact(&o, n, keys);
    assert!(
        runs(&state).is_empty(),
        "the killed run's folder {killed:?} is removed at the next start, the finished \
         run's at its end: {:?}",
        runs(&state)
    );
}
