//! The sink's transactions driven directly: names, rolling, commit and recovery.

use super::*;

fn ctx(subtask: u32) -> TransactionContext {
    TransactionContext {
        job_name: "job".into(),
        uid: "out".into(),
        subtask,
        parallelism: 2,
    }
}

type Sink = FileSink<Lines>;

fn opened(dir: &Path, subtask: u32) -> Sink {
    let mut s = FileSink::text(dir);
    TwoPhaseCommitSink::<u32>::open(&mut s, &ctx(subtask)).unwrap();
    s
}

fn write(s: &mut Sink, txn: &mut FileTransaction, records: &[u32]) {
    s.write(txn, &mut records.to_vec()).unwrap();
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn a_transaction_moves_from_in_progress_to_pending_to_committed() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = opened(dir.path(), 1);
    let mut txn = TwoPhaseCommitSink::<u32>::begin(&mut s, &ctx(1)).unwrap();
    write(&mut s, &mut txn, &[1, 2]);
    assert_eq!(listing(dir.path()), [".part-job~out~1-0.inprogress"]);
    let c = TwoPhaseCommitSink::<u32>::pre_commit(&mut s, &ctx(1), txn, 7)
        .unwrap()
        .unwrap();
    assert_eq!(c.transaction, "job~out~1-7");
    assert_eq!(listing(dir.path()), [".part-job~out~1-7-0.pending"]);
    TwoPhaseCommitSink::<u32>::commit(&mut s, c.clone()).unwrap();
    assert_eq!(listing(dir.path()), ["part-job~out~1-7-0"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("part-job~out~1-7-0")).unwrap(),
        "1\n2\n"
    );
    // Idempotent.
    TwoPhaseCommitSink::<u32>::commit(&mut s, c).unwrap();
    assert_eq!(listing(dir.path()), ["part-job~out~1-7-0"]);
}

#[test]
fn an_empty_transaction_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = opened(dir.path(), 0);
    let txn = TwoPhaseCommitSink::<u32>::begin(&mut s, &ctx(0)).unwrap();
    let c = TwoPhaseCommitSink::<u32>::pre_commit(&mut s, &ctx(0), txn, 1).unwrap();
    assert!(c.is_none());
    assert!(listing(dir.path()).is_empty());
}

#[test]
fn parts_roll_at_the_size_limit_and_keep_record_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = opened(dir.path(), 0).with_max_part_size(10);
    let mut txn = TwoPhaseCommitSink::<u32>::begin(&mut s, &ctx(0)).unwrap();
    // Lines of 4 bytes: two fit in 10, the third rolls.
    write(&mut s, &mut txn, &[100, 101, 102, 103, 104]);
    let c = TwoPhaseCommitSink::<u32>::pre_commit(&mut s, &ctx(0), txn, 3)
        .unwrap()
        .unwrap();
    assert_eq!(c.parts.len(), 3);
    TwoPhaseCommitSink::<u32>::commit(&mut s, c).unwrap();
    let files = listing(dir.path());
    assert_eq!(
        files,
        [
            "part-job~out~0-3-0",
            "part-job~out~0-3-1",
            "part-job~out~0-3-2"
        ]
    );
    let all: String = files
        .iter()
        .map(|f| std::fs::read_to_string(dir.path().join(f)).unwrap())
        .collect();
    assert_eq!(all, "100\n101\n102\n103\n104\n");
    // A record larger than the limit still gets written, alone in its part.
    let mut s = opened(dir.path(), 1).with_max_part_size(2);
    let mut txn = TwoPhaseCommitSink::<u32>::begin(&mut s, &ctx(1)).unwrap();
    write(&mut s, &mut txn, &[12345, 6]);
    let c = TwoPhaseCommitSink::<u32>::pre_commit(&mut s, &ctx(1), txn, 4)
        .unwrap()
        .unwrap();
    assert_eq!(c.parts.len(), 2);
}

#[test]
fn recover_commits_the_given_and_deletes_every_other_lingering_file() {
    let dir = tempfile::tempdir().unwrap();
    // Old run: subtask 0 pre-committed checkpoint 5 (in the checkpoint) and 6 (not), and
    // has checkpoint 7's part in progress; subtask 1's checkpoint 4 already committed.
    let mut old = opened(dir.path(), 0);
    let mut t = TwoPhaseCommitSink::<u32>::begin(&mut old, &ctx(0)).unwrap();
    write(&mut old, &mut t, &[5]);
    let c5 = TwoPhaseCommitSink::<u32>::pre_commit(&mut old, &ctx(0), t, 5)
        .unwrap()
        .unwrap();
    let mut t = TwoPhaseCommitSink::<u32>::begin(&mut old, &ctx(0)).unwrap();
    write(&mut old, &mut t, &[6]);
    TwoPhaseCommitSink::<u32>::pre_commit(&mut old, &ctx(0), t, 6).unwrap();
    let mut t = TwoPhaseCommitSink::<u32>::begin(&mut old, &ctx(0)).unwrap();
    write(&mut old, &mut t, &[7]);
    std::mem::forget(t); // a crash: nothing closes it
    let mut old1 = opened(dir.path(), 1);
    let mut t = TwoPhaseCommitSink::<u32>::begin(&mut old1, &ctx(1)).unwrap();
    write(&mut old1, &mut t, &[4]);
    let c4 = TwoPhaseCommitSink::<u32>::pre_commit(&mut old1, &ctx(1), t, 4)
        .unwrap()
        .unwrap();
    TwoPhaseCommitSink::<u32>::commit(&mut old1, c4.clone()).unwrap();
    // Files of another sink in the same folder, and a reader's file, are left alone.
    std::fs::write(dir.path().join(".part-job~other~0-0.inprogress"), "x").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "x").unwrap();

    let mut new = opened(dir.path(), 0);
    TwoPhaseCommitSink::<u32>::recover(&mut new, &ctx(0), vec![c4, c5]).unwrap();
    assert_eq!(
        listing(dir.path()),
        [
            ".part-job~other~0-0.inprogress",
            "notes.txt",
            "part-job~out~0-5-0",
            "part-job~out~1-4-0"
        ]
    );
}

#[test]
fn a_lost_pending_file_and_an_occupied_name_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = opened(dir.path(), 0);
    let mut t = TwoPhaseCommitSink::<u32>::begin(&mut s, &ctx(0)).unwrap();
    write(&mut s, &mut t, &[1]);
    let c = TwoPhaseCommitSink::<u32>::pre_commit(&mut s, &ctx(0), t, 1)
        .unwrap()
        .unwrap();
    std::fs::remove_file(dir.path().join(".part-job~out~0-1-0.pending")).unwrap();
    let err = TwoPhaseCommitSink::<u32>::commit(&mut s, c)
        .unwrap_err()
        .to_string();
    assert!(err.contains("job~out~0-1") && err.contains("lost"), "{err}");

    // A second run into the same folder would reuse committed names: refused.
    std::fs::write(dir.path().join("part-job~out~0-2-0"), "old\n").unwrap();
    let mut t = TwoPhaseCommitSink::<u32>::begin(&mut s, &ctx(0)).unwrap();
    write(&mut s, &mut t, &[2]);
    let err = TwoPhaseCommitSink::<u32>::pre_commit(&mut s, &ctx(0), t, 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("refusing to overwrite"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("part-job~out~0-2-0")).unwrap(),
        "old\n"
    );
}

#[test]
fn an_unusable_folder_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("occupied");
    std::fs::write(&file, "").unwrap();
    let mut s = FileSink::text(file.join("out"));
    let err = TwoPhaseCommitSink::<u32>::open(&mut s, &ctx(0))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot create output folder") && err.contains("occupied"),
        "{err}"
    );
}

#[test]
fn abort_deletes_the_transactions_parts() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = opened(dir.path(), 0).with_max_part_size(1);
    let mut t = TwoPhaseCommitSink::<u32>::begin(&mut s, &ctx(0)).unwrap();
    write(&mut s, &mut t, &[1, 2, 3]);
    assert_eq!(listing(dir.path()).len(), 3);
    TwoPhaseCommitSink::<u32>::abort(&mut s, t).unwrap();
    assert!(listing(dir.path()).is_empty());
}
