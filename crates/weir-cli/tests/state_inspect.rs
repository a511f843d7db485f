//! End-to-end tests of `weir state ls` and `weir state dump` on checkpoints written by real
//! runs of the built-in jobs: the listing matches the dumps, the dumps decode the built-in
//! state types, and a checkpoint's states agree with each other (the sources' positions
//! account for exactly the counts in keyed state, as exactly-once snapshots must). Errors
//! are one line with exit code 1, and inspecting never changes a checkpoint.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

// ---------------------------------------------------------------------------------------
// helpers

const EVENTS: u64 = 20_000;
const KEYS: u64 = 40;

/// Runs `weir` in `cwd` with `args`, asserts exit 0 and returns stdout.
fn weir_ok(cwd: &Path, args: &[&str]) -> String {
    let r = run(&mut weir(cwd, args));
    r.assert_success();
    r.stdout
}

/// Runs `weir` in `cwd` with `args`, asserts exit 1 with one `error:` line on stderr and
/// nothing on stdout, and returns that line.
fn weir_err(cwd: &Path, args: &[&str]) -> String {
    let r = run(&mut weir(cwd, args));
    assert_eq!(
        r.code(),
        Some(1),
        "expected exit 1 for {args:?}\n{}",
        r.describe()
    );
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "expected one line for {args:?}\n{}",
        r.describe()
    );
    assert!(lines[0].starts_with("error: "), "{}", r.describe());
    assert!(r.stdout.is_empty(), "{}", r.describe());
    lines[0].to_string()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

/// The newest complete checkpoint folder in `job_dir`; panics if there is none.
fn newest_checkpoint(job_dir: &Path) -> PathBuf {
    let ids = completed_checkpoints(job_dir);
    let id = ids
        .last()
        .unwrap_or_else(|| panic!("no complete checkpoint in {}", job_dir.display()));
    job_dir.join(format!("chk-{id}"))
}

/// Runs keyed-count (2 subtasks, rate-limited so that checkpoints complete while it runs)
/// in `cwd` and returns its job folder.
fn run_keyed_count(cwd: &Path, events: u64, rate: u64) -> PathBuf {
    let r = run(&mut weir(cwd, keyed_count_args(cwd, events, rate, 2, None)));
    r.assert_success();
    checkpoint_dir(&cwd.join("ck")).join("keyed-count")
}

/// The arguments of a keyed-count run into `<cwd>/ck` (or its twin on S3), writing into
/// `out` unless `None`.
fn keyed_count_args(
    cwd: &Path,
    events: u64,
    rate: u64,
    parallelism: u32,
    out: Option<&str>,
) -> Vec<String> {
    let ck = checkpoint_arg(&cwd.join("ck"));
    let mut a: Vec<String> = [
        "run",
        "keyed-count",
        "--events",
        &events.to_string(),
        "--keys",
        &KEYS.to_string(),
        "--parallelism",
        &parallelism.to_string(),
        "--rate",
        &rate.to_string(),
        "--checkpoint-interval",
        "50ms",
        "--checkpoint-dir",
        &ck,
    ]
    .map(String::from)
    .to_vec();
    match out {
        Some(o) => a.extend(["--output".to_string(), o.to_string()]),
        None => a.push("--discard-output".into()),
    }
    a
}

/// Runs keyed-count over [`EVENTS`] slowly enough (5 s) to be SIGKILLed once two
/// checkpoints completed, so that its newest checkpoint is a mid-run one (not the final
/// checkpoint every bounded run ends with, taken after the end of input); returns it.
fn kill_keyed_count_mid_run(cwd: &Path) -> PathBuf {
    let job = checkpoint_dir(&cwd.join("ck")).join("keyed-count");
    let mut child = spawn_logged(
        &mut weir(cwd, keyed_count_args(cwd, EVENTS, EVENTS / 5, 2, None)),
        &cwd.join("killed.log"),
    );
    wait_for_checkpoints(&mut child, &job, 2, std::time::Duration::from_secs(30));
    sigkill_running(&mut child, "keyed-count");
    wait_for_dead_lease();
    newest_checkpoint(&job)
}

/// Copies the checkpoint folder `from` (local, or on S3) to the local folder `to`.
fn copy_dir(from: &Path, to: &Path) {
    for (rel, bytes) in stored_tree(from) {
        let target = to.join(rel);
        fs::create_dir_all(target.parent().expect("a folder")).expect("create copy");
        fs::write(&target, bytes).expect("copy file");
    }
}

/// The `operators[uid].states[name]` object of an `ls --format json` document.
fn ls_state<'a>(ls: &'a Value, uid: &str, name: &str) -> &'a Value {
    let op = ls["operators"]
        .as_array()
        .expect("operators")
        .iter()
        .find(|o| o["uid"] == uid)
        .unwrap_or_else(|| panic!("no operator {uid} in {ls}"));
    op["states"]
        .as_array()
        .expect("states")
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no state {name} in {op}"))
}

// ---------------------------------------------------------------------------------------
// tests

#[test]
fn keyed_count_ls_and_dump_agree_with_each_other_and_the_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let chk = kill_keyed_count_mid_run(tmp.path());
    let before = stored_tree(&chk);
    assert!(
        before.contains_key(Path::new("_metadata")),
        "{:?}",
        before.keys()
    );
    let c = s(&chk);
    let id: u64 = chk
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("chk-"))
        .and_then(|n| n.parse().ok())
        .expect("chk-<n>");

    // ls, as JSON: the checkpoint's facts and each operator's states.
    let ls = json(&weir_ok(
        tmp.path(),
        &["state", "ls", &c, "--format", "json"],
    ));
    assert_eq!(u(&ls["checkpoint_id"]), id);
    assert_eq!(ls["job"], "keyed-count");
    assert_eq!(ls["mode"], "exactly-once");
    assert_eq!(u(&ls["max_parallelism"]), 128);
    assert!(
        ls["triggered"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{ls}"
    );
    let uids: BTreeSet<&str> = ls["operators"]
        .as_array()
        .expect("operators")
        .iter()
        .map(|o| o["uid"].as_str().expect("uid"))
        .collect();
    assert_eq!(uids, BTreeSet::from(["count", "generator"]));
    for o in ls["operators"].as_array().expect("operators") {
        assert_eq!(u(&o["parallelism"]), 2, "{o}");
    }
    let splits = ls_state(&ls, "generator", "splits");
    assert_eq!(
        (&splits["kind"], u(&splits["entries"])),
        (&"operator list".into(), 2)
    );
    let count = ls_state(&ls, "count", "count");
    assert_eq!(count["kind"], "keyed value");
    let entries = u(&count["entries"]);
    assert!((1..=KEYS).contains(&entries), "{count}");
    let on_disk: u64 = before.values().map(|b| b.len() as u64).sum();
    assert_eq!(u(&ls["total_bytes"]), on_disk, "{ls}");

    // dump of the generator's splits: one per subtask, split j of 2 strides by 2.
    let dump = json(&weir_ok(
        tmp.path(),
        &[
            "state",
            "dump",
            &c,
            "--uid",
            "generator",
            "--state",
            "splits",
            "--format",
            "json",
        ],
    ));
    assert_eq!(dump["kind"], "operator list");
    let splits = dump["entries"].as_array().expect("entries");
    assert_eq!(splits.len(), 2, "{dump}");
    let mut emitted: BTreeMap<u64, u64> = BTreeMap::new();
    for (j, sp) in splits.iter().enumerate() {
        let (index, stride, next) = (u(&sp["index"]), u(&sp["count"]), u(&sp["next"]));
        assert_eq!(
            (u(&sp["subtask"]), index, stride),
            (j as u64, j as u64, 2),
            "{sp}"
        );
        assert!(next >= index && (next - index) % stride == 0, "{sp}");
        assert!(next < EVENTS + stride, "{sp}");
        for v in (index..next).step_by(stride as usize) {
            *emitted.entry(v % KEYS).or_default() += 1;
        }
    }

    // dump of the counts: every key the generator had emitted before the barrier, counted
    // exactly as often as it was emitted.
    let dump = json(&weir_ok(
        tmp.path(),
        &[
            "state", "dump", &c, "--uid", "count", "--state", "count", "--format", "json",
        ],
    ));
    assert_eq!(
        (&dump["job"], &dump["kind"], u(&dump["checkpoint_id"])),
        (&"keyed-count".into(), &"keyed value".into(), id)
    );
    assert!(dump["decoded_as"].is_string(), "{dump}");
    let counts = dump["entries"].as_array().expect("entries");
    assert_eq!(counts.len() as u64, entries, "ls and dump disagree");
    let mut got = BTreeMap::new();
    for e in counts {
        let (key, n) = (u(&e["key"]), u(&e["count"]));
        assert!(key < KEYS && (1..=EVENTS).contains(&n), "{e}");
        assert!(u(&e["key_group"]) < 128 && u(&e["subtask"]) < 2, "{e}");
        assert!(got.insert(key, n).is_none(), "key {key} twice");
    }
    assert_eq!(
        got, emitted,
        "counts in state vs values the sources had emitted"
    );
    // A mid-run checkpoint: the sources had read some of the input, not all of it, and
    // `checkpoints inspect` shows how much (what a restore resumes after).
    let read: u64 = emitted.values().sum();
    assert!(read > 0 && read < EVENTS, "read {read} of {EVENTS}");
    let inspect = json(&weir_ok(
        tmp.path(),
        &["checkpoints", "inspect", &c, "--format", "json"],
    ));
    assert_eq!(
        inspect["sources"],
        serde_json::json!([{ "uid": "generator", "records": read }]),
        "{inspect}"
    );
    let text = weir_ok(tmp.path(), &["checkpoints", "inspect", &c]);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["generator", read.to_string().as_str()]),
        "{text}"
    );
    let list = weir_ok(
        tmp.path(),
        &["checkpoints", "list", &s(chk.parent().unwrap())],
    );
    let row = list
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&id.to_string()))
        .unwrap_or_else(|| panic!("no row for {id}:\n{list}"));
    assert!(row.ends_with(&format!(" {read}")), "{list}");

    // The text forms show the same rows.
    let text = weir_ok(tmp.path(), &["state", "ls", &c]);
    assert!(
        text.starts_with(&format!("checkpoint {id} of job keyed-count at ")),
        "{text}"
    );
    let row = |uid: &str| -> Vec<String> {
        text.lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .find(|t| t.first().map(String::as_str) == Some(uid))
            .unwrap_or_else(|| panic!("no row for {uid}:\n{text}"))
    };
    assert_eq!(
        row("count")[..6],
        [
            "count",
            "2",
            "count",
            "keyed",
            "value",
            &entries.to_string()
        ]
    );
    assert_eq!(
        row("generator")[..6],
        ["generator", "2", "splits", "operator", "list", "2"]
    );
    let text = weir_ok(
        tmp.path(),
        &["state", "dump", &c, "--uid", "count", "--state", "count"],
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with('#') && lines[0].contains(&format!("{entries} entr")),
        "{text}"
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["KEY", "COUNT", "KEY_GROUP", "SUBTASK"]
    );
    assert_eq!(lines.len() as u64, 2 + entries, "{text}");

    // --raw shows the encoded bytes: per key group, adding up to the listed bytes.
    let raw = json(&weir_ok(
        tmp.path(),
        &[
            "state", "dump", &c, "--uid", "count", "--state", "count", "--format", "json", "--raw",
        ],
    ));
    assert!(raw["decoded_as"].is_null(), "{raw}");
    let groups = raw["entries"].as_array().expect("entries");
    let bytes: u64 = groups.iter().map(|g| u(&g["bytes"])).sum();
    assert_eq!(bytes, u(&count["bytes"]));
    for g in groups {
        let hex = g["hex"].as_str().expect("hex");
        assert_eq!(hex.len() as u64, 2 * u(&g["bytes"]), "{g}");
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{g}");
    }

    assert!(
        stored_tree(&chk) == before,
        "inspecting changed the checkpoint"
    );

    // Restored at parallelism 3, the run reads only the events after the checkpoint and
    // its counts are exact.
    let mut args = keyed_count_args(tmp.path(), EVENTS, 1_000_000, 3, Some("out"));
    args.extend(["--restore".into(), c.clone(), "--verify".into()]);
    let r = run(&mut weir(tmp.path(), args));
    r.assert_success();
    assert!(r.stdout.contains("verify: OK"), "{}", r.describe());
    assert_eq!(
        restored_from(&r.stdout),
        Some(chk.clone()),
        "{}",
        r.describe()
    );
    let attempts = assert_resumed(&r, EVENTS);
    assert_eq!(attempts[0].restored.as_ref().map(|a| a.1), Some(read));
    assert_keyed_count_exact(&tmp.path().join("out"), EVENTS, KEYS);
}

#[test]
fn wordcount_states_decode_and_match_the_input_read_so_far() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // About 5 MB, so that checkpoints complete while the file is read.
    let words = [
        "alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta",
    ];
    let mut text = String::new();
    let mut rng = XorShift::from_env(7);
    for _ in 0..200_000 {
        let line: Vec<&str> = (0..5).map(|_| words[rng.range(0, 7) as usize]).collect();
        text.push_str(&line.join(" "));
        text.push('\n');
    }
    let input = tmp.path().join("in.txt");
    fs::write(&input, &text).expect("write input");
    weir_ok(
        tmp.path(),
        &[
            "run",
            "wordcount",
            "--input",
            "in.txt",
            "--checkpoint-interval",
            "20ms",
            "--discard-output",
            "--checkpoint-dir",
            &checkpoint_arg(&tmp.path().join("ck")),
        ],
    );
    let chk = newest_checkpoint(&checkpoint_dir(&tmp.path().join("ck")).join("wordcount"));
    let c = s(&chk);

    let files = json(&weir_ok(
        tmp.path(),
        &[
            "state", "dump", &c, "--uid", "files", "--state", "files", "--format", "json",
        ],
    ));
    let splits = files["entries"].as_array().expect("entries");
    assert_eq!(splits.len(), 1, "{files}");
    assert_eq!(splits[0]["path"], "in.txt");
    let read = match splits[0]["offset"].as_u64() {
        Some(offset) => {
            assert_eq!(splits[0]["finished"], false);
            offset as usize
        }
        None => {
            assert_eq!(splits[0]["finished"], true, "{files}");
            text.len()
        }
    };
    assert!(read <= text.len() && (read == 0 || text.as_bytes()[read - 1] == b'\n'));
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for w in text[..read].split_whitespace() {
        *want.entry(w.to_string()).or_default() += 1;
    }

    let counts = json(&weir_ok(
        tmp.path(),
        &[
            "state", "dump", &c, "--uid", "count", "--state", "count", "--format", "json",
        ],
    ));
    let got: BTreeMap<String, u64> = counts["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| (e["key"].as_str().expect("word").to_string(), u(&e["count"])))
        .collect();
    assert_eq!(
        got, want,
        "word counts in state vs the input before the offset"
    );
}

#[test]
fn errors_are_one_line_and_exit_1() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = run_keyed_count(tmp.path(), 2_000, 10_000);
    let chk = newest_checkpoint(&job);
    let c = s(&chk);
    let dump = |dir: &str, uid: &str, state: &str| {
        weir_err(
            tmp.path(),
            &["state", "dump", dir, "--uid", uid, "--state", state],
        )
    };

    let e = dump(&c, "nope", "count");
    assert!(e.contains("no operator with uid 'nope'"), "{e}");
    assert!(e.ends_with("its operators are: count, generator"), "{e}");
    let e = dump(&c, "count", "nope");
    assert!(e.contains("operator 'count' has no state 'nope'"), "{e}");
    assert!(e.ends_with("its states are: count"), "{e}");

    let e = weir_err(tmp.path(), &["state", "ls", "missing"]);
    assert!(
        e.contains("not a complete checkpoint (no such folder): missing"),
        "{e}"
    );
    let e = weir_err(tmp.path(), &["state", "ls", &s(&job)]);
    assert!(
        e.contains("is a job's checkpoint folder") && e.contains("chk-"),
        "{e}"
    );

    // A flipped byte in the counts' state file: ls and a dump of that operator say which
    // file is corrupt; the generator's files are still readable.
    let bad = tmp.path().join("bad");
    copy_dir(&chk, &bad);
    let b = s(&bad);
    let kg = fs::read_dir(bad.join("count"))
        .expect("count folder")
        .map(|e| e.expect("entry").path())
        .find(|p| fs::metadata(p).map(|m| m.len() > 30).unwrap_or(false))
        .expect("a keyed state file");
    let good = fs::read(&kg).expect("read");
    let mut flipped = good.clone();
    flipped[24] ^= 0x10;
    fs::write(&kg, &flipped).expect("write");
    let name = kg.file_name().and_then(|n| n.to_str()).expect("name");
    let e = weir_err(tmp.path(), &["state", "ls", &b]);
    assert!(e.contains(&format!("count/{name} is corrupted")), "{e}");
    let e = dump(&b, "count", "count");
    assert!(e.contains("is corrupted (checksum mismatch"), "{e}");
    weir_ok(
        tmp.path(),
        &[
            "state",
            "dump",
            &b,
            "--uid",
            "generator",
            "--state",
            "splits",
        ],
    );

    // Truncated.
    fs::write(&kg, &good[..good.len() - 3]).expect("write");
    let e = weir_err(tmp.path(), &["state", "ls", &b]);
    assert!(e.contains(&format!("count/{name} is truncated")), "{e}");
    fs::write(&kg, &good).expect("write");
    weir_ok(tmp.path(), &["state", "ls", &b]);

    // Foreign metadata.
    fs::write(bad.join("_metadata"), "{\"checkpoint\": 1}\n").expect("write");
    let e = weir_err(tmp.path(), &["state", "ls", &b]);
    assert!(e.contains("_metadata is not a Weir checkpoint file"), "{e}");

    // Bad flags are clap's business: exit 2.
    let r = run(&mut weir(
        tmp.path(),
        ["state", "ls", c.as_str(), "--format", "yaml"],
    ));
    assert_eq!(r.code(), Some(2), "{}", r.describe());
}

/// On the disk backend with incremental checkpoints, a checkpoint whose keyed state is a
/// chain (a base and deltas): `state dump` shows the base with the deltas applied, exactly
/// the counts of the records the sources had read, and `--raw` shows each group's deltas
/// beside its base. The input is held at a series of points a few records apart, and a
/// checkpoint is awaited at each: a delta comes within two points (a small change after a
/// base is a delta; a chain whose deltas outgrew half its base gets a new base, and then
/// the next point's change is a delta on it), whatever the machine's speed.
#[test]
fn ls_and_dump_read_an_incremental_chain() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut args = keyed_count_args(tmp.path(), EVENTS, 1_000_000, 2, None);
    let state_dir = s(&tmp.path().join("state"));
    // Per generator subtask: all keys by the first point, then 5 records per point.
    let holds: Vec<u64> = (0..8).map(|i| EVENTS / 8 + 5 * i).collect();
    let releases: Vec<PathBuf> = (0..holds.len())
        .map(|i| tmp.path().join(format!("release-{i}")))
        .collect();
    let hold_arg = holds
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let release_arg = releases.iter().map(|r| s(r)).collect::<Vec<_>>().join(",");
    args.extend(
        [
            "--state-backend",
            "disk",
            "--state-dir",
            &state_dir,
            "--incremental-checkpoints",
            "--retained-checkpoints",
            "1000",
            "--hold-at",
            &hold_arg,
            "--release-file",
            &release_arg,
        ]
        .map(String::from),
    );
    let job = checkpoint_dir(&tmp.path().join("ck")).join("keyed-count");
    let mut child = spawn_logged(&mut weir(tmp.path(), args), &tmp.path().join("run.log"));
    let dump = |c: &str, raw: bool| {
        let mut a = vec!["state", "dump", c, "--uid", "count", "--state", "count"];
        if raw {
            a.push("--raw");
        }
        a.extend(["--format", "json"]);
        json(&weir_ok(tmp.path(), &a))
    };
    let mut found = None;
    for (hold, release) in holds.iter().zip(&releases) {
        // A checkpoint taken while both subtasks are held at this point.
        let id = wait_for_checkpoint_at(Some(&mut child), &job, 0, 2 * hold);
        let c = s(&job.join(format!("chk-{id}")));
        let raw = dump(&c, true);
        let groups = raw["entries"].as_array().expect("entries");
        if groups
            .iter()
            .any(|g| g["deltas"].as_u64().is_some_and(|d| d > 0))
        {
            assert!(groups.iter().all(|g| g["changes_hex"].is_string()), "{raw}");
            found = Some((c, 2 * hold));
            break;
        }
        fs::write(release, b"").expect("release");
    }
    let (c, read) = found.expect("no checkpoint at the held points was a chain");
    // The two subtasks emitted 0..read between them, each value once.
    let mut truth: BTreeMap<u64, u64> = BTreeMap::new();
    for v in 0..read {
        *truth.entry(v % KEYS).or_default() += 1;
    }
    let got: BTreeMap<u64, u64> = dump(&c, false)["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| (u(&e["key"]), u(&e["count"])))
        .collect();
    assert_eq!(
        got, truth,
        "the counts at the chain, base and deltas merged"
    );
    let ls = json(&weir_ok(
        tmp.path(),
        &["state", "ls", &c, "--format", "json"],
    ));
    let count = ls_state(&ls, "count", "count");
    assert!(u(&count["key_groups"]) > 0, "{count}");
    sigkill_running(&mut child, "keyed-count");
}
