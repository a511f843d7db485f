//! `weir transactions list|settle` for the file sink: keyed-count (`--sink files:DIR`) is
//! SIGKILLed after a checkpoint, its hidden parts are listed with what the latest completed
//! checkpoint says of each and settled accordingly (pending parts it lists renamed to their
//! visible names, every other part of the sink deleted), orphans are left alone until
//! `--abort-orphans`, a second settle does nothing, and the resumed job is still exact.

mod common;
mod connectors_support;

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;

use common::*;
use connectors_support::*;

/// A part of the job's sink for a checkpoint that never completed: abort (delete).
const AFTER_CHECKPOINT: &str = ".part-keyed-count~sink-files~0-999999.inprogress";
/// The job's prefix, a sink the checkpoint does not know: an orphan.
const ORPHAN: &str = ".part-keyed-count~old-sink~0-1-0.tsv.pending";
/// Another job's: never listed, never touched.
const FOREIGN: &str = ".part-other-job~sink-files~0-1-0.tsv.pending";

/// keyed-count with a file sink, in a temporary folder: where its checkpoints go, where
/// its sink writes, and the `--sink` argument naming that folder.
struct FileSinkJob {
    tmp: tempfile::TempDir,
    chk: PathBuf,
    out: PathBuf,
    sink: String,
}

impl FileSinkJob {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let (chk, out) = (tmp.path().join("chk"), tmp.path().join("out"));
        let sink = format!("files:{}", s(&out));
        FileSinkJob {
            tmp,
            chk,
            out,
            sink,
        }
    }

    /// The job, after a run of keyed-count to its end (its final checkpoint completed).
    fn finished() -> Self {
        let job = FileSinkJob::new();
        let args = keyed_count_updates(&job.chk, &job.sink, 2_000, 7, &[]);
        run(&mut weir(job.tmp.path(), args)).assert_success();
        job
    }
}

#[test]
fn file_parts_are_listed_and_settled_as_the_checkpoint_says() {
    let FileSinkJob {
        tmp,
        chk,
        out,
        sink,
    } = FileSinkJob::new();
    let (n, keys) = (400_000u64, 37u64);
    let args = killed_after_a_checkpoint(tmp.path(), &chk, &sink, (n, keys), 0x7b);
    eprintln!("hidden parts after the kill: {:?}", hidden_files(&out));
    for (name, line) in [
        (AFTER_CHECKPOINT, "888888\t1\n"),
        (ORPHAN, "999999\t1\n"),
        (FOREIGN, "777777\t1\n"),
    ] {
        fs::write(out.join(name), line).unwrap();
    }

    let chk_arg = checkpoint_arg(&chk);
    let list = transactions(tmp.path(), "list", &chk_arg, &sink, &[]);
    list.assert_success();
    let line = |name: &str| {
        list.stdout
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{name} not listed\n{}", list.describe()))
            .trim_end()
            .to_string()
    };
    assert!(line(AFTER_CHECKPOINT).ends_with("abort"));
    assert!(line(ORPHAN).ends_with("orphan"));
    assert!(!list.stdout.contains(FOREIGN), "{}", list.describe());

    let mut yes = vec!["--yes"];
    let settled = transactions(tmp.path(), "settle", &chk_arg, &sink, &yes);
    settled.assert_success();
    assert!(
        settled
            .stdout
            .contains(&format!("deleted {AFTER_CHECKPOINT}")),
        "{}",
        settled.describe()
    );
    assert!(settled.stdout.contains("1 orphan(s) left alone"));
    let mut left = hidden_files(&out);
    left.sort();
    assert_eq!(left, vec![ORPHAN.to_string(), FOREIGN.to_string()]);
    if let Some(p) = prefix_problem(&group(committed_tsv(&out))) {
        panic!("after settle, the committed parts are not exactly-once: {p}");
    }

    let again = transactions(tmp.path(), "settle", &chk_arg, &sink, &yes);
    again.assert_success();
    assert!(
        again.stdout.contains("nothing to settle"),
        "{}",
        again.describe()
    );

    resume_exact(
        &mut weir(tmp.path(), args(true)),
        || committed_tsv(&out),
        n,
        keys,
        "files after settle and resume",
    );

    yes.push("--abort-orphans");
    let orphans = transactions(tmp.path(), "settle", &chk_arg, &sink, &yes);
    orphans.assert_success();
    assert!(orphans.stdout.contains(&format!("deleted {ORPHAN}")));
    assert_eq!(hidden_files(&out), vec![FOREIGN.to_string()]);
}

/// A checkpoint whose `_metadata` cannot be read (here: a foreign file) is never taken for
/// the job's word: a newer one is passed over with a note naming it (the verdicts follow
/// the newest readable checkpoint, as `--restore latest` would), and a job with no
/// readable checkpoint is an error naming the unreadable one and the way out.
#[test]
fn an_unreadable_checkpoint_is_passed_over_by_name() {
    let FileSinkJob { tmp, chk, sink, .. } = FileSinkJob::finished();
    let newest = *completed_checkpoints(&chk.join("keyed-count"))
        .last()
        .expect("the final checkpoint");
    let foreign = newest + 1;
    let job_dir = checkpoint_dir(&chk).join("keyed-count");
    write_object(
        &job_dir.join(format!("chk-{foreign}/_metadata")),
        b"{\"json\": true}",
    );
    let chk_arg = checkpoint_arg(&chk);
    let list = transactions(tmp.path(), "list", &chk_arg, &sink, &[]);
    list.assert_success();
    for needle in [
        &format!("chk-{foreign} is unreadable"),
        &format!("judged by chk-{newest}"),
    ] {
        assert!(
            list.stdout.contains(needle.as_str()),
            "{needle}: {}",
            list.describe()
        );
    }

    // Only the foreign checkpoint: nothing says what to commit.
    let alone = tmp.path().join("alone");
    write_object(
        &checkpoint_dir(&alone).join("keyed-count/chk-1/_metadata"),
        b"{\"json\": true}",
    );
    let none = transactions(tmp.path(), "list", &checkpoint_arg(&alone), &sink, &[]);
    assert_clean_error(
        &none,
        1,
        &[
            "no completed checkpoint",
            "unreadable: chk-1",
            "restart the job from a savepoint",
        ],
    );
}

/// `settle` without `--yes` asks first, on stderr: an answer other than yes settles
/// nothing (exit 1), `y` settles.
#[test]
fn settle_asks_before_it_touches_anything() {
    let FileSinkJob {
        tmp,
        chk,
        out,
        sink,
    } = FileSinkJob::finished();
    // A part of the job's sink no completed checkpoint lists: to delete.
    fs::write(out.join(AFTER_CHECKPOINT), "888888\t1\n").unwrap();
    let chk_arg = checkpoint_arg(&chk);
    let answered = |answer: &str| {
        let args = [
            "transactions",
            "settle",
            "--checkpoint-dir",
            &chk_arg,
            "--sink",
            &sink,
        ];
        let mut child = weir(tmp.path(), args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(answer.as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        );
        assert!(
            stderr.contains("roll back 1 transaction(s)? [y/N]"),
            "{stdout}\n{stderr}"
        );
        (o.status.code(), stdout)
    };
    let (code, stdout) = answered("no\n");
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("nothing settled"), "{stdout}");
    assert!(out.join(AFTER_CHECKPOINT).exists(), "settled without a yes");
    let (code, stdout) = answered("y\n");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!("deleted {AFTER_CHECKPOINT}")),
        "{stdout}"
    );
    assert!(!out.join(AFTER_CHECKPOINT).exists());
}
