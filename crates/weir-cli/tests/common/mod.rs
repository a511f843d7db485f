//! Helpers shared by the end-to-end tests that run the real `weir` binary as a child
//! process: spawning with a deadline, reading part files, exact keyed-count truth,
//! listing checkpoints, and a tiny seeded PRNG for kill moments.

#![allow(dead_code)]

pub mod child_job;
pub mod disk_s3;
pub mod held;
pub mod kill_resume;
#[path = "../../../weir/tests/support/moto.rs"]
pub mod moto;
pub mod nexmark;
pub mod outage;
pub mod running;
#[path = "../../../weir/tests/support/test_checkpoints.rs"]
mod test_checkpoints;
#[allow(unused_imports)]
pub use test_checkpoints::*;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

#[allow(unused_imports)]
use weir::storage::backend::StorageBackend;

/// Moves the checkpoint or savepoint folder `from` to `to` (local paths or `s3://` URLs on
/// one storage), as a user moves a savepoint: a rename on a local disk, a copy of every
/// object and a delete of the originals on S3.
pub fn move_folder(from: &Path, to: &Path) {
    if !from.to_string_lossy().contains("://") {
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::rename(from, to).unwrap();
        return;
    }
    for (key, bytes) in stored_tree(from) {
        write_object(&to.join(key), &bytes);
    }
    let (backend, name) = parent_backend(from);
    backend.delete_all(&name).unwrap();
}

/// [`checkpoint_dir`] as a `--checkpoint-dir` argument.
pub fn checkpoint_arg(dir: &Path) -> String {
    checkpoint_dir(dir).to_string_lossy().into_owned()
}

/// The binary under test, built by cargo for this test target.
pub const BIN: &str = env!("CARGO_BIN_EXE_weir");

/// Longest a run that is expected to finish may take before the test gives up on it.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// A `weir` command run in `cwd` (so stray default folders land in the test's temp dir),
/// with backtraces off and stdin closed.
pub fn weir<I, S>(cwd: &Path, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(BIN);
    c.args(args)
        .current_dir(cwd)
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .stdin(Stdio::null());
    c
}

/// The arguments of a keyed-count run at parallelism 2 over `events` events and `keys`
/// keys with `extra` flags; a resumed run (`restore`) adds `--restore latest --verify`.
/// What the SIGKILL-and-resume tests run twice.
pub fn keyed_count_args(events: u64, keys: u64, extra: &[&str], restore: bool) -> Vec<String> {
    let (events, keys) = (events.to_string(), keys.to_string());
    let mut a: Vec<String> = ["run", "keyed-count", "--events", &events, "--keys", &keys]
        .into_iter()
        .chain(["--parallelism", "2"])
        .chain(extra.iter().copied())
        .map(String::from)
        .collect();
    if restore {
        a.extend(["--restore", "latest", "--verify"].map(String::from));
    }
    a
}

/// A finished run.
pub struct Run {
    /// Exit status.
    pub status: ExitStatus,
    /// Everything printed on stdout.
    pub stdout: String,
    /// Everything printed on stderr.
    pub stderr: String,
}

impl Run {
    /// The exit code (`None` if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Status, stdout and stderr, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }

    /// Panics with the full output unless the run exited 0.
    pub fn assert_success(&self) {
        assert_eq!(self.code(), Some(0), "weir failed\n{}", self.describe());
    }
}

/// Waits for `child` until `timeout`; kills it and panics if it is still running then.
pub fn wait_deadline(child: &mut Child, timeout: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {timeout:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

fn drain<R: Read + Send + 'static>(r: Option<R>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Runs `cmd` to completion (at most [`RUN_TIMEOUT`]) and captures its output.
pub fn run(cmd: &mut Command) -> Run {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the weir binary");
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let status = wait_deadline(&mut child, RUN_TIMEOUT, "weir");
    Run {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// What follows `needle` on the first *complete* line of `text` (one ended by a newline)
/// that holds it. A log read while its writer is mid-line may end in a part of a line: an
/// address taken from `coordinator listening on ` before the address itself was written
/// is empty, which once failed CI.
#[allow(dead_code)]
pub fn after_on_complete_line<'a>(text: &'a str, needle: &str) -> Option<&'a str> {
    (text.split_inclusive('\n'))
        .filter_map(|l| l.strip_suffix('\n'))
        .find_map(|l| l.split_once(needle).map(|(_, rest)| rest))
}

/// Starts `cmd` with its output in `log` (stdout and stderr appended to one file), for
/// runs that the test kills.
pub fn spawn_logged(cmd: &mut Command, log: &Path) -> Child {
    let f = fs::File::create(log).expect("create log file");
    cmd.stdout(Stdio::from(f.try_clone().expect("clone log handle")))
        .stderr(Stdio::from(f))
        .spawn()
        .expect("cannot start the weir binary")
}

/// `path` as a string argument (temp paths are UTF-8 on the test machines).
pub fn s(path: &Path) -> String {
    path.to_str().expect("UTF-8 temp path").to_string()
}

/// The exact count of key `k` among events `0..n` with key `i % keys`: `n / keys`, plus one
/// for the first `n % keys` keys.
pub fn expected_count(n: u64, keys: u64, k: u64) -> u64 {
    n / keys + u64::from(k < n % keys)
}

/// Every `key,count` line of the `part-*` files in `dir` (a published Weir output);
/// panics on a malformed line.
pub fn read_pairs(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list output {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no part files in {}", dir.display());
    let mut out = Vec::new();
    for f in files {
        let text = fs::read_to_string(&f).expect("read part file");
        for line in text.lines() {
            let (k, v) = line
                .rsplit_once(',')
                .unwrap_or_else(|| panic!("{}: not a key,count line: {line:?}", f.display()));
            let v: u64 = v
                .parse()
                .unwrap_or_else(|_| panic!("{}: bad count in {line:?}", f.display()));
            out.push((k.to_string(), v));
        }
    }
    out
}

/// `key → count` of a keyed-count output; panics if a key is not a number or appears twice.
pub fn keyed_counts(dir: &Path) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for (k, v) in read_pairs(dir) {
        let key: u64 = k
            .parse()
            .unwrap_or_else(|_| panic!("key {k:?} is not a number"));
        assert!(m.insert(key, v).is_none(), "key {key} appears twice");
    }
    m
}

/// Asserts that `dir` is a published output (`_SUCCESS`) whose counts are exactly the
/// truth for `n` events over `keys` keys.
pub fn assert_keyed_count_exact(dir: &Path, n: u64, keys: u64) {
    assert!(
        dir.join("_SUCCESS").is_file(),
        "{} has no _SUCCESS marker",
        dir.display()
    );
    let got = keyed_counts(dir);
    let want: BTreeMap<u64, u64> = (0..keys.min(n))
        .map(|k| (k, expected_count(n, keys, k)))
        .collect();
    if got != want {
        let wrong: Vec<String> = want
            .iter()
            .filter(|(k, v)| got.get(k) != Some(v))
            .take(5)
            .map(|(k, v)| format!("key {k}: want {v}, got {:?}", got.get(k)))
            .collect();
        panic!(
            "keyed-count output in {} is not exact ({} keys, {} expected): {}",
            dir.display(),
            got.len(),
            want.len(),
            wrong.join("; ")
        );
    }
}

/// Ids of the complete checkpoints (`chk-<n>` folders holding `_metadata`) in `job_dir`,
/// ascending; empty if the folder does not exist.
pub fn completed_checkpoints(job_dir: &Path) -> Vec<u64> {
    if on_s3() {
        // `job_dir` is `<dir>/<job>` for the local `dir` the test made: read its S3 twin.
        let (dir, job) = (job_dir.parent().unwrap(), job_dir.file_name().unwrap());
        return complete_checkpoint_ids(&checkpoint_dir(dir).join(job));
    }
    complete_checkpoint_ids(job_dir)
}

/// The records the sources had read in all at checkpoint `id` of the local `job_dir`
/// (`None`: it does not read, e.g. not written yet).
pub fn records_at(job_dir: &Path, id: u64) -> Option<u64> {
    let path = job_dir.join(format!("chk-{id}"));
    let sources = weir::inspect::source_progress(&path).ok()?;
    Some(sources.iter().map(|s| s.records).sum())
}

/// Waits until a checkpoint of the local `job_dir` newer than `after` has completed with
/// its sources at exactly `records` read in all — one taken while held sources wait at
/// that point — and returns its id. Panics if `child` (when given) exits first; the 120 s
/// limit is a safety net, not a pace.
pub fn wait_for_checkpoint_at(
    mut child: Option<&mut Child>,
    job_dir: &Path,
    after: u64,
    records: u64,
) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let at = completed_checkpoints(job_dir)
            .into_iter()
            .filter(|&id| id > after)
            .find(|&id| records_at(job_dir, id) == Some(records));
        if let Some(id) = at {
            return id;
        }
        if let Some(child) = child.as_deref_mut() {
            if let Some(st) = child.try_wait().expect("try_wait") {
                panic!("weir exited ({st}) before a checkpoint at {records} records");
            }
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint at {records} records in {}",
            job_dir.display()
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Polls until `job_dir` holds at least `n` complete checkpoints; panics if `child` exits
/// first or `timeout` passes.
pub fn wait_for_checkpoints(child: &mut Child, job_dir: &Path, n: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        if completed_checkpoints(job_dir).len() >= n {
            return;
        }
        if let Some(st) = child.try_wait().expect("try_wait") {
            panic!(
                "weir exited ({st}) before {n} checkpoints completed in {}",
                job_dir.display()
            );
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{n} checkpoints did not complete in {} within {timeout:?}",
                job_dir.display()
            );
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// SIGKILLs `child` (std's `Child::kill` sends SIGKILL on Unix), first asserting that it was
/// still running — a child that already exited would make the kill test meaningless.
pub fn sigkill_running(child: &mut Child, what: &str) {
    if let Some(st) = child.try_wait().expect("try_wait") {
        panic!("{what} exited ({st}) before it could be killed; the run is too short");
    }
    child.kill().expect("SIGKILL");
    let st = child.wait().expect("wait after kill");
    assert!(
        st.code().is_none(),
        "{what} was not ended by the signal: {st}"
    );
}

/// One `attempt N: …` line of a run summary: where the attempt's sources started and what
/// they read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The attempt's number (1 for the first).
    pub n: u32,
    /// The checkpoint it restored: id, the records its sources had read, and its folder;
    /// `None` for a start from the beginning.
    pub restored: Option<(u64, u64, PathBuf)>,
    /// Records its sources read.
    pub read: u64,
    /// Whether it failed.
    pub failed: bool,
}

/// The `attempt N: …` lines of a run summary (none for a single fresh attempt); panics on
/// one it cannot parse.
pub fn attempts(stdout: &str) -> Vec<Attempt> {
    stdout
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("attempt "))
        .map(|l| {
            parse_attempt(l)
                .unwrap_or_else(|| panic!("cannot parse the attempt line {l:?} in\n{stdout}"))
        })
        .collect()
}

/// `N: from checkpoint ID at source record P, read R[, failed] — PATH` or
/// `N: from the start, read R[, failed]`.
fn parse_attempt(l: &str) -> Option<Attempt> {
    let (n, rest) = l.split_once(": ")?;
    let (desc, path) = match rest.split_once(" — ") {
        Some((d, p)) => (d, Some(PathBuf::from(p))),
        None => (rest, None),
    };
    let parts: Vec<&str> = desc.split(", ").collect();
    let restored = match parts[0].strip_prefix("from checkpoint ") {
        Some(r) => {
            let (id, pos) = r.split_once(" at source record ")?;
            Some((id.parse().ok()?, pos.parse().ok()?, path?))
        }
        None if parts[0] == "from the start" => None,
        None => return None,
    };
    let read = parts.get(1)?.strip_prefix("read ")?.parse().ok()?;
    Some(Attempt {
        n: n.parse().ok()?,
        restored,
        read,
        failed: parts.get(2) == Some(&"failed"),
    })
}

/// The records the sources read in the run (the summary's first line, replays included).
pub fn records_read(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.split(" s — ").nth(1))
        .and_then(|r| r.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `… records read` in the summary:\n{stdout}"))
}

/// The checkpoint folder the run's first attempt restored (`--restore`), if any.
pub fn restored_from(stdout: &str) -> Option<PathBuf> {
    let first = attempts(stdout).into_iter().next()?;
    first.restored.map(|(_, _, path)| path)
}

/// Asserts from `run`'s summary and notices that it recovered from checkpoints, not from
/// the beginning, for sources holding `total` records: some attempt restored a checkpoint;
/// every restart restored one at a source position past 0, which its `restarting from`
/// notice names; the records read add up; and the last attempt finished after reading
/// exactly what its checkpoint had not covered (fewer than `total`). Over a bounded input
/// a run that started over gives the same final counts, so exact counts alone prove
/// nothing; this does. Returns the attempts.
pub fn assert_resumed(run: &Run, total: u64) -> Vec<Attempt> {
    let all = attempts(&run.stdout);
    assert!(
        all.iter().any(|a| a.restored.is_some()),
        "no attempt restored a checkpoint\n{}",
        run.describe()
    );
    for (i, a) in all.iter().enumerate() {
        assert_eq!(a.n as usize, i + 1, "{}", run.describe());
        if i > 0 || a.restored.is_some() {
            let Some((id, pos, path)) = &a.restored else {
                panic!(
                    "attempt {} started over from the beginning\n{}",
                    a.n,
                    run.describe()
                );
            };
            assert!(
                path.ends_with(format!("chk-{id}")) || is_object(&path.join("_metadata")),
                "attempt {} names {} for checkpoint {id}\n{}",
                a.n,
                path.display(),
                run.describe()
            );
            assert!(
                *pos > 0 && *pos < total,
                "attempt {} restored checkpoint {id} at source record {pos} of {total}\n{}",
                a.n,
                run.describe()
            );
        }
        if i > 0 {
            let (_, _, path) = a.restored.as_ref().expect("checked above");
            let notice = format!("attempt {} failed: ", i);
            let named = format!("restarting from {}", path.display());
            assert!(
                run.stderr
                    .lines()
                    .any(|l| l.contains(&notice) && l.contains(&named)),
                "no restart notice names {}\n{}",
                path.display(),
                run.describe()
            );
            assert!(all[i - 1].failed, "{}", run.describe());
        }
    }
    let last = all.last().expect("checked above");
    assert!(!last.failed, "the last attempt failed\n{}", run.describe());
    let (id, pos, _) = last.restored.as_ref().expect("checked above");
    assert_eq!(
        pos + last.read,
        total,
        "the last attempt restored checkpoint {id} at source record {pos} and then read {}: \
         the sources did not resume where the checkpoint left them\n{}",
        last.read,
        run.describe()
    );
    assert_eq!(
        records_read(&run.stdout),
        all.iter().map(|a| a.read).sum::<u64>(),
        "{}",
        run.describe()
    );
    all
}

/// xorshift64: a tiny seeded PRNG, so kill moments are random but reproducible.
pub struct XorShift(u64);

impl XorShift {
    /// Seeded from `WEIR_TEST_SEED` if set, else `default`; prints the seed it uses.
    pub fn from_env(default: u64) -> Self {
        let seed = std::env::var("WEIR_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default);
        eprintln!("kill-moment seed: {seed} (set WEIR_TEST_SEED to change)");
        XorShift(seed.max(1))
    }

    /// The next raw value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// A snapshot of every file (relative path → bytes) under `dir`, to prove it untouched.
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in fs::read_dir(dir).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).expect("under root").to_path_buf();
                out.insert(rel, fs::read(&p).expect("read file"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Every file under the checkpoint folder `root` (a local path or an `s3://` URL) by its
/// path relative to `root`, with its bytes: [`tree`] on whichever storage holds it.
pub fn stored_tree(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    if !on_s3() || !root.to_string_lossy().contains("://") {
        return tree(root);
    }
    let backend = weir::storage::open_backend(root).unwrap();
    let (mut out, mut folders) = (BTreeMap::new(), vec![String::new()]);
    while let Some(folder) = folders.pop() {
        for name in backend.list(&folder).unwrap() {
            let key = match folder.as_str() {
                "" => name,
                f => format!("{f}/{name}"),
            };
            match backend.size(&key) {
                Ok(_) => {
                    let bytes = backend.get(&key, None).unwrap();
                    out.insert(PathBuf::from(&key), bytes);
                }
                Err(_) => folders.push(key),
            }
        }
    }
    out
}

/// Starts `args(restore)` `kills` times (the first fresh, the rest with `--restore latest`)
/// and SIGKILLs each run a random number of milliseconds in `window` later, asserting it
/// was still running; `after_kill(i)` checks the committed output. Every other run (the
/// odd ones, all restores) is killed only `delay` after it completed a checkpoint of its
/// own, so those restores made progress by construction, however slow the machine; the
/// others die `delay` after their start, restore included. Returns the newest complete
/// checkpoint.
pub fn kill_loop(
    tmp: &Path,
    job_dir: &Path,
    plan: (usize, (u64, u64)),
    seed: u64,
    args: impl Fn(bool) -> Vec<String>,
    after_kill: impl FnMut(usize),
) -> u64 {
    kill_loop_until(tmp, job_dir, plan, seed, args, || true, after_kill)
}

/// [`kill_loop`] whose waited runs (the odd ones) also wait until `ready()` holds before
/// their random delay: for a test that needs something to have happened before a kill
/// (a window result committed, say) and must not count on it happening "in time".
pub fn kill_loop_until(
    tmp: &Path,
    job_dir: &Path,
    plan: (usize, (u64, u64)),
    seed: u64,
    args: impl Fn(bool) -> Vec<String>,
    ready: impl Fn() -> bool,
    after_kill: impl FnMut(usize),
) -> u64 {
    let command = |restore| weir(tmp, args(restore));
    kill_loop_command_until(tmp, job_dir, plan, seed, command, ready, after_kill)
}

/// [`kill_loop`] for any program, not only `weir`: `command(restore)` builds the run (a
/// user's job in a child process, say: [`child_job::command`]).
pub fn kill_loop_command(
    tmp: &Path,
    job_dir: &Path,
    plan: (usize, (u64, u64)),
    seed: u64,
    command: impl Fn(bool) -> Command,
    after_kill: impl FnMut(usize),
) -> u64 {
    kill_loop_command_until(tmp, job_dir, plan, seed, command, || true, after_kill)
}

/// [`kill_loop_until`] for any program.
fn kill_loop_command_until(
    tmp: &Path,
    job_dir: &Path,
    (kills, window): (usize, (u64, u64)),
    seed: u64,
    command: impl Fn(bool) -> Command,
    ready: impl Fn() -> bool,
    mut after_kill: impl FnMut(usize),
) -> u64 {
    assert!(
        kills >= 2,
        "a kill loop needs a run that waits for a checkpoint"
    );
    let mut rng = XorShift::from_env(seed);
    let (mut newest, mut progressed, mut waited) = (0u64, 0usize, 0usize);
    for i in 0..kills {
        let delay = rng.range(window.0, window.1);
        let log = tmp.join(format!("run-{i}.log"));
        let mut child = spawn_logged(&mut command(i > 0), &log);
        let waits = i % 2 == 1;
        if waits {
            // Killed `delay` after it completed a checkpoint of its own (and `ready()`
            // held): its restore progressed by construction, not because it was fast
            // enough. The others die `delay` after their start, restore included.
            wait_for_checkpoint_after(job_dir, newest, &mut child, i, &ready);
            waited += 1;
        }
        thread::sleep(Duration::from_millis(delay));
        sigkill_running(&mut child, &format!("run {i} (killed after {delay} ms)"));
        wait_for_dead_lease();
        after_kill(i);
        let now = completed_checkpoints(job_dir).last().copied().unwrap_or(0);
        if waits {
            progressed += usize::from(now > newest);
        }
        newest = newest.max(now);
    }
    assert!(
        newest > 0 && progressed == waited,
        "only {progressed} of the {waited} runs killed after a checkpoint of their own left \
         a new checkpoint in {}",
        job_dir.display()
    );
    newest
}

/// Waits (up to 120 s) until `job_dir` holds a complete checkpoint newer than `newest` and
/// `ready()` holds, failing the test if run `i` exits or never gets there.
fn wait_for_checkpoint_after(
    job_dir: &Path,
    newest: u64,
    child: &mut Child,
    i: usize,
    ready: impl Fn() -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while completed_checkpoints(job_dir).last().copied().unwrap_or(0) <= newest || !ready() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("run {i} ended ({status}) before completing a checkpoint");
        }
        assert!(
            Instant::now() < deadline,
            "run {i} completed no checkpoint (or was not ready) in 120 s in {}",
            job_dir.display()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts a refused run failed the way users deserve: exit `code`, an `error:` line on
/// stderr naming every needle, no panic or backtrace, no job summary.
pub fn assert_clean_error(run: &Run, code: i32, needles: &[&str]) {
    assert_eq!(
        run.code(),
        Some(code),
        "wrong exit code\n{}",
        run.describe()
    );
    for bad in ["stack backtrace", "panicked", "RUST_BACKTRACE"] {
        assert!(
            !run.stderr.contains(bad),
            "stderr has {bad:?}\n{}",
            run.describe()
        );
    }
    assert!(
        run.stderr.lines().any(|l| l.starts_with("error:")),
        "no `error:` line\n{}",
        run.describe()
    );
    for n in needles {
        assert!(
            run.stderr.contains(n),
            "stderr does not mention {n:?}\n{}",
            run.describe()
        );
    }
    assert!(
        !run.stdout.contains("finished in"),
        "the job ran\n{}",
        run.describe()
    );
}
