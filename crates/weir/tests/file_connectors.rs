//! The file connectors end to end: the transactional `FileSink`'s output is exactly-once
//! under injected failures and never shows uncommitted data; the `FileSource` reads globs
//! exactly once under failures, after a rescale, and in continuous mode.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    assert_resumed_mid_run, assert_stopped_mid_run, config, PauseForCheckpoints, Sequence,
    StopMidRun,
};
use weir::connectors::files::{
    tab_separated, FileCommittable, FileSink, FileSource, FileTransaction, JsonLines, LinesWith,
};
use weir::prelude::*;

// ---------------------------------------------------------------------------------------
// helpers

/// Counts each word (or line) in keyed state; emits `(word, count)` at end of input.
#[derive(Clone, Default)]
struct CountWords {
    count: Option<ValueState<u64>>,
}

impl CheckpointedFunction for CountWords {}

impl KeyedProcessFunction<String, String, (String, u64)> for CountWords {
    fn open(&mut self, states: &mut KeyedStateStore<'_, String>) -> Result<()> {
        self.count = Some(states.value_state("count")?);
        Ok(())
    }
    fn process(
        &mut self,
        _: String,
        ctx: &mut KeyedContext<'_, String>,
        _: &mut Collector<'_, (String, u64)>,
    ) -> Result<()> {
        *ctx.get_mut_or_insert_with(self.count.unwrap(), || 0) += 1;
        Ok(())
    }
    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, String>,
        out: &mut Collector<'_, (String, u64)>,
    ) -> Result<()> {
        for (k, v) in ctx.entries(self.count.unwrap()) {
            out.collect((k, v));
        }
        Ok(())
    }
}

/// The visible (committed) files' `key<TAB>number` (or JSON `[key,number]`) lines by key,
/// and the hidden files left.
fn read_output(dir: &Path) -> (BTreeMap<u64, Vec<u64>>, Vec<String>) {
    let mut by_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut hidden = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.starts_with('.') {
            hidden.push(name);
            continue;
        }
        for line in std::fs::read_to_string(dir.join(&name)).unwrap().lines() {
            let pair = line.strip_prefix('[').and_then(|l| l.strip_suffix(']'));
            let (k, v) = match pair {
                Some(json) => json.split_once(',').expect("[key,number]"),
                None => line.split_once('\t').expect("key<TAB>number"),
            };
            by_key
                .entry(k.parse().unwrap())
                .or_default()
                .push(v.parse().unwrap());
        }
    }
    (by_key, hidden)
}

/// Asserts every key `k < keys` of `0..n` (`key = i % keys`) has exactly the numbers
/// `1..=count`: nothing lost, nothing twice.
fn assert_exactly_once(by_key: &mut BTreeMap<u64, Vec<u64>>, n: u64, keys: u64, what: &str) {
    assert_eq!(by_key.len() as u64, keys, "{what}: every key has output");
    for (k, numbers) in by_key.iter_mut() {
        numbers.sort_unstable();
        let count = n / keys + u64::from(*k < n % keys);
        let want: Vec<u64> = (1..=count).collect();
        if *numbers != want {
            let dups = numbers.windows(2).filter(|w| w[0] == w[1]).count();
            panic!(
                "{what}: key {k} has {} numbers ({dups} repeated), want 1..={count}",
                numbers.len()
            );
        }
    }
}

/// Formats a `(key, number)` pair as a line.
type PairFormat = fn(&(u64, u64), &mut String);

/// The sink of most jobs here: `key<TAB>number` lines, parts rolling at 64 KiB.
fn tsv_sink(out: &Path) -> FileSink<LinesWith<PairFormat>> {
    FileSink::lines_with(out, tab_separated::<u64, u64> as PairFormat).with_max_part_size(64 * 1024)
}

/// generator → key_by → Sequence → `sink`.
fn run_sink_job<S: TwoPhaseCommitSink<(u64, u64)>>(
    cfg: JobConfig,
    n: u64,
    keys: u64,
    sink: S,
) -> JobResult {
    run_sink_job_at(cfg, n, keys, sink, 1_000_000.0)
}

/// [`run_sink_job`] with the source paced at `rate` records/s.
fn run_sink_job_at<S: TwoPhaseCommitSink<(u64, u64)>>(
    cfg: JobConfig,
    n: u64,
    keys: u64,
    sink: S,
    rate: f64,
) -> JobResult {
    let source = GeneratorSource::new(n).with_rate(Some(common::paced(rate)));
    run_sink_job_from(cfg, source, keys, sink)
}

/// [`run_sink_job`] whose source pauses for a completed checkpoint after every `every`
/// records per subtask ([`PauseForCheckpoints`]): commits along the way on any machine.
fn run_sink_job_pausing<S: TwoPhaseCommitSink<(u64, u64)>>(
    cfg: JobConfig,
    n: u64,
    keys: u64,
    sink: S,
    every: u64,
) -> JobResult {
    let source = PauseForCheckpoints::new(GeneratorSource::new(n), every);
    run_sink_job_from(cfg, source, keys, sink)
}

fn run_sink_job_from<S: TwoPhaseCommitSink<(u64, u64)>>(
    cfg: JobConfig,
    source: impl SourceFunction<u64>,
    keys: u64,
    sink: S,
) -> JobResult {
    let env = StreamEnvironment::new(cfg);
    env.add_source("events", source)
        .uid("events")
        .key_by(move |i: &u64| i % keys)
        .process(Sequence::default())
        .uid("seq")
        .add_sink("files", TwoPhaseCommit::new(sink))
        .uid("files");
    env.execute().unwrap()
}

// ---------------------------------------------------------------------------------------
// the sink inside jobs

#[test]
fn sink_output_is_exactly_once_under_injected_failures() {
    let (n, keys) = (300_000, 100);
    let mut total = 0;
    for seed in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut cfg = config("sink-eo", dir.path(), 2, CheckpointingMode::ExactlyOnce);
        cfg.checkpointing.interval = Some(Duration::from_millis(25));
        cfg.failure_injection = Some(FailureInjection::after_checkpoints(5, seed, n / 2));
        let r = run_sink_job_at(cfg, n, keys, tsv_sink(&out), 200_000.0);
        let (fired, planned) = r.injected_failures.unwrap();
        assert_eq!(fired, planned, "seed {seed}: every failure fired");
        weir::testing::assert_resumed(&r, n);
        let (mut by_key, hidden) = read_output(&out);
        assert_exactly_once(&mut by_key, n, keys, &format!("seed {seed}"));
        assert!(hidden.is_empty(), "seed {seed}: left behind {hidden:?}");
        total += fired;
    }
    assert!(total >= 10);
}

#[test]
fn sink_without_periodic_checkpoints_commits_everything_with_the_final_checkpoint() {
    let (n, keys) = (100_000, 50);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut cfg = config("sink-nochk", dir.path(), 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = None;
    // Failures early in the run: with no checkpoint to restore, each restarts the job from
    // scratch (this test is about that path; the others restore checkpoints).
    cfg.failure_injection = Some(FailureInjection {
        failures: 3,
        seed: 7,
        horizon: n / 4,
        after_checkpoint: false,
    });
    let r = run_sink_job(cfg, n, keys, tsv_sink(&out));
    assert_eq!(r.injected_failures.unwrap().0, 3);
    assert_eq!(r.checkpoints.len(), 1, "only the final checkpoint");
    assert!(r.history.len() > 1, "{:#?}", r.history);
    for a in &r.history {
        assert!(a.restored.is_none(), "nothing to restore: {a:#?}");
    }
    assert!(r
        .notices
        .iter()
        .any(|n| n.contains("restarting from the beginning")));
    assert_eq!(
        r.history.last().unwrap().source_records,
        n,
        "read from the start"
    );
    assert!(r.history[..r.history.len() - 1]
        .iter()
        .all(|a| a.failure.is_some()));
    let (mut by_key, hidden) = read_output(&out);
    assert_exactly_once(&mut by_key, n, keys, "no periodic checkpoints");
    assert!(hidden.is_empty(), "left behind {hidden:?}");
}

/// Checkpoints around whose commit [`CrashAroundCommit`] fails: id → crash after the commit.
type CrashPlan = Arc<std::sync::Mutex<BTreeMap<u64, bool>>>;

/// A `FileSink` whose subtasks fail around the first commit of the first `limit` checkpoints
/// they commit, alternately before the commit (completed, never committed: recovery must
/// commit it) and right after it (committed, yet restored as pending: recovery commits
/// again, idempotently).
#[derive(Clone)]
struct CrashAroundCommit {
    inner: FileSink<JsonLines>,
    plan: CrashPlan,
    /// Transactions that crashed already (each crashes once).
    crashed: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    limit: usize,
}

impl TwoPhaseCommitSink<(u64, u64)> for CrashAroundCommit {
    type Transaction = FileTransaction;
    type Committable = FileCommittable;

    fn open(&mut self, ctx: &TransactionContext) -> Result<()> {
        TwoPhaseCommitSink::<(u64, u64)>::open(&mut self.inner, ctx)
    }
    fn recover(&mut self, ctx: &TransactionContext, c: Vec<FileCommittable>) -> Result<()> {
        TwoPhaseCommitSink::<(u64, u64)>::recover(&mut self.inner, ctx, c)
    }
    fn begin(&mut self, ctx: &TransactionContext) -> Result<FileTransaction> {
        TwoPhaseCommitSink::<(u64, u64)>::begin(&mut self.inner, ctx)
    }
    fn write(&mut self, txn: &mut FileTransaction, batch: &mut Vec<(u64, u64)>) -> Result<()> {
        self.inner.write(txn, batch)
    }
    fn pre_commit(
        &mut self,
        ctx: &TransactionContext,
        txn: FileTransaction,
        id: u64,
    ) -> Result<Option<FileCommittable>> {
        TwoPhaseCommitSink::<(u64, u64)>::pre_commit(&mut self.inner, ctx, txn, id)
    }
    fn commit(&mut self, c: FileCommittable) -> Result<()> {
        let id: u64 = c.transaction.rsplit('-').next().unwrap().parse().unwrap();
        let after = {
            let mut plan = self.plan.lock().unwrap();
            let next = plan.len() % 2 == 1;
            if plan.len() < self.limit {
                Some(*plan.entry(id).or_insert(next))
            } else {
                plan.get(&id).copied()
            }
        };
        let first = self.crashed.lock().unwrap().insert(c.transaction.clone());
        match after {
            Some(after) if first => {
                if after {
                    TwoPhaseCommitSink::<(u64, u64)>::commit(&mut self.inner, c.clone())?;
                }
                Err(Error::user(format!(
                    "test crash {} the commit of {}",
                    if after { "after" } else { "before" },
                    c.transaction
                )))
            }
            _ => TwoPhaseCommitSink::<(u64, u64)>::commit(&mut self.inner, c),
        }
    }
    fn abort(&mut self, txn: FileTransaction) -> Result<()> {
        TwoPhaseCommitSink::<(u64, u64)>::abort(&mut self.inner, txn)
    }
}

#[test]
fn recovery_commits_what_a_crash_around_the_commit_left_pending() {
    let (n, keys) = (200_000, 64);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut cfg = config("sink-crash", dir.path(), 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(25));
    let plan = CrashPlan::default();
    let sink = CrashAroundCommit {
        inner: FileSink::json_lines(&out).with_max_part_size(16 * 1024),
        plan: plan.clone(),
        crashed: Default::default(),
        limit: 6,
    };
    // 20 pauses per subtask, each for a checkpoint holding the records before it: at least
    // six commits (each crashing once) happen on any machine, before the input ends.
    let r = run_sink_job_pausing(cfg, n, keys, sink, n / 40);
    let plan = plan.lock().unwrap().clone();
    assert!(
        plan.len() >= 4,
        "crashed around the commits of {plan:?} only"
    );
    assert!(plan.values().any(|a| *a) && plan.values().any(|a| !*a));
    assert!(r.attempts > 6, "{} attempts", r.attempts);
    // A commit runs once its checkpoint completed: every crash restores a checkpoint.
    weir::testing::assert_resumed(&r, n);
    let (mut by_key, hidden) = read_output(&out);
    assert_exactly_once(&mut by_key, n, keys, "crashes around commits");
    assert!(hidden.is_empty(), "left behind {hidden:?}");
}

// ---------------------------------------------------------------------------------------
// the sink driven directly: uncommitted output is never visible

fn txn_ctx(subtask: u32) -> TransactionContext {
    TransactionContext {
        job_name: "direct".into(),
        uid: "out".into(),
        subtask,
        parallelism: 2,
    }
}

type TextSink = FileSink<weir::connectors::files::Lines>;

fn open_sink(dir: &Path, subtask: u32) -> TextSink {
    let mut s = FileSink::text(dir);
    TwoPhaseCommitSink::<u64>::open(&mut s, &txn_ctx(subtask)).unwrap();
    s
}

/// Writes `records` in a transaction and pre-commits it for `checkpoint`.
fn pre_committed(
    s: &mut TextSink,
    subtask: u32,
    checkpoint: u64,
    records: &[u64],
) -> weir::connectors::files::FileCommittable {
    let ctx = txn_ctx(subtask);
    let mut txn = TwoPhaseCommitSink::<u64>::begin(s, &ctx).unwrap();
    TwoPhaseCommitSink::<u64>::write(s, &mut txn, &mut records.to_vec()).unwrap();
    TwoPhaseCommitSink::<u64>::pre_commit(s, &ctx, txn, checkpoint)
        .unwrap()
        .unwrap()
}

/// What a reader sees: the lines of every non-hidden file, sorted.
fn visible_lines(dir: &Path) -> Vec<u64> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if !name.starts_with('.') {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            v.extend(text.lines().map(|l| l.parse::<u64>().unwrap()));
        }
    }
    v.sort_unstable();
    v
}

fn hidden_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.')
        })
        .count()
}

#[test]
fn output_is_visible_only_once_committed_and_commits_are_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open_sink(dir.path(), 0);
    let ctx = txn_ctx(0);
    let mut txn = TwoPhaseCommitSink::<u64>::begin(&mut s, &ctx).unwrap();
    TwoPhaseCommitSink::<u64>::write(&mut s, &mut txn, &mut vec![1, 2, 3]).unwrap();
    assert!(
        visible_lines(dir.path()).is_empty(),
        "in progress is hidden"
    );
    let c = TwoPhaseCommitSink::<u64>::pre_commit(&mut s, &ctx, txn, 1)
        .unwrap()
        .unwrap();
    assert!(visible_lines(dir.path()).is_empty(), "pending is hidden");
    TwoPhaseCommitSink::<u64>::commit(&mut s, c.clone()).unwrap();
    assert_eq!(visible_lines(dir.path()), [1, 2, 3]);
    TwoPhaseCommitSink::<u64>::commit(&mut s, c).unwrap();
    assert_eq!(
        visible_lines(dir.path()),
        [1, 2, 3],
        "a second commit adds nothing"
    );
    assert_eq!(hidden_files(dir.path()), 0);
}

#[test]
fn a_crash_after_pre_commit_is_committed_by_recovery_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    // Checkpoint 4 pre-committed on both subtasks and completed, but nobody heard it;
    // subtask 1 went on writing checkpoint 5 (pre-committed, never completed) and more.
    let mut s0 = open_sink(dir.path(), 0);
    let mut s1 = open_sink(dir.path(), 1);
    let c0 = pre_committed(&mut s0, 0, 4, &[1, 2]);
    let c1 = pre_committed(&mut s1, 1, 4, &[3]);
    pre_committed(&mut s1, 1, 5, &[4]);
    let mut t = TwoPhaseCommitSink::<u64>::begin(&mut s1, &txn_ctx(1)).unwrap();
    TwoPhaseCommitSink::<u64>::write(&mut s1, &mut t, &mut vec![5]).unwrap();
    std::mem::forget(t);
    drop((s0, s1));
    assert!(visible_lines(dir.path()).is_empty());

    // The restored job (at parallelism 1) recovers checkpoint 4's handles on subtask 0.
    let mut fresh = open_sink(dir.path(), 0);
    TwoPhaseCommitSink::<u64>::recover(&mut fresh, &txn_ctx(0), vec![c0, c1]).unwrap();
    assert_eq!(visible_lines(dir.path()), [1, 2, 3]);
    assert_eq!(
        hidden_files(dir.path()),
        0,
        "checkpoint 5 and the open part aborted"
    );
}

#[test]
fn a_crash_after_commit_before_the_notification_completed_commits_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open_sink(dir.path(), 0);
    let c = pre_committed(&mut s, 0, 9, &[7, 8]);
    TwoPhaseCommitSink::<u64>::commit(&mut s, c.clone()).unwrap();
    drop(s);
    let mut fresh = open_sink(dir.path(), 0);
    TwoPhaseCommitSink::<u64>::recover(&mut fresh, &txn_ctx(0), vec![c]).unwrap();
    assert_eq!(visible_lines(dir.path()), [7, 8]);
}

// ---------------------------------------------------------------------------------------
// the source

/// Writes `files` text files of `lines` lines each under `root` (nested folders), plus
/// files the glob must skip; returns the expected word counts.
fn make_corpus(root: &Path, files: usize, lines: usize) -> HashMap<String, u64> {
    let mut want: HashMap<String, u64> = HashMap::new();
    for f in 0..files {
        let path = root.join(format!("part{}/sub{}/f{f}.txt", f % 2, f % 3));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut text = String::new();
        for i in 0..lines {
            let line = format!("w{} v{} f{f}", (i * 7 + f) % 37, i % 101);
            for w in line.split(' ') {
                *want.entry(w.to_string()).or_default() += 1;
            }
            text.push_str(&line);
            text.push('\n');
        }
        std::fs::write(path, text).unwrap();
    }
    std::fs::write(root.join("part0/skip.log"), "not me\n").unwrap();
    std::fs::write(root.join("part0/.hidden.txt"), "not me\n").unwrap();
    want
}

/// Asserts the word counts match, naming a few words that differ.
fn assert_counts(got: &HashMap<String, u64>, want: &HashMap<String, u64>, what: &str) {
    let mut diff: Vec<String> = want
        .iter()
        .filter(|(w, c)| got.get(*w) != Some(*c))
        .map(|(w, c)| format!("{w}: {:?} want {c}", got.get(w)))
        .collect();
    diff.extend(
        got.keys()
            .filter(|w| !want.contains_key(*w))
            .map(|w| format!("{w}: unexpected")),
    );
    diff.sort();
    diff.truncate(5);
    assert!(diff.is_empty(), "{what}: counts differ, e.g. {diff:?}");
}

/// files → (throttle) → words → key_by → count → collect.
fn run_wordcount(cfg: JobConfig, source: FileSource) -> (HashMap<String, u64>, JobResult) {
    let (counts, r) = run_wordcount_over(cfg, source);
    (counts, r.unwrap())
}

/// [`run_wordcount`] over any source of lines.
fn run_wordcount_over<S: SourceFunction<String>>(
    cfg: JobConfig,
    source: S,
) -> (HashMap<String, u64>, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let mut seen = 0u64;
    env.add_source("files", source)
        .uid("files")
        .map(move |line: String| {
            // Slow enough that checkpoints land in the middle of the files (on S3, where a
            // checkpoint takes several requests, three times slower).
            seen += 1;
            if seen.is_multiple_of(250) {
                std::thread::sleep(Duration::from_millis(if common::on_s3() { 3 } else { 1 }));
            }
            line
        })
        .flat_map(|line: String| line.split(' ').map(str::to_string).collect::<Vec<String>>())
        .key_by(|w: &String| w.clone())
        .process(CountWords::default())
        .uid("count")
        .add_sink("collect", out.clone())
        .uid("sink");
    let r = env.execute();
    let mut counts = HashMap::new();
    for (w, c) in out.take() {
        assert!(counts.insert(w.clone(), c).is_none(), "{w} emitted twice");
    }
    (counts, r)
}

#[test]
fn a_glob_is_read_exactly_once_under_injected_failures() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data");
    let want = make_corpus(&root, 7, 12_000);
    let lines = 7 * 12_000;
    let mut cfg = config("glob-eo", dir.path(), 2, CheckpointingMode::ExactlyOnce);
    // Lines at the source plus words at the counter: ~4 × lines records per pass. Each
    // failure waits for a checkpoint of its attempt; one still waiting when the input ends
    // does not fire (the input is not paced: on a loaded machine the last may not).
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(6, 3, lines));
    let source = FileSource::new([root.join("**/*.txt")]).unwrap();
    let (counts, r) = run_wordcount(cfg, source);
    let (fired, _) = r.injected_failures.unwrap();
    assert!(fired >= 3, "{fired} failures fired");
    weir::testing::assert_resumed(&r, lines);
    assert_counts(&counts, &want, "glob under failures");
}

#[test]
fn a_restore_at_another_parallelism_resumes_every_file_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data");
    let want = make_corpus(&root, 5, 16_000);
    let cfg = config(
        "glob-rescale",
        dir.path(),
        2,
        CheckpointingMode::ExactlyOnce,
    );
    let source = FileSource::new([root.join("**/*.txt")]).unwrap();
    // The first run stops mid-input: each subtask after 20 000 lines (of 80 000 in all).
    let mut first = cfg.clone();
    first.restart = RestartStrategy::None;
    let (_, r) = run_wordcount_over(first, StopMidRun::new(source.clone(), 20_000));
    assert_stopped_mid_run(r);
    let (chk, _) = common::newest_checkpoint(dir.path(), "glob-rescale");
    // Restore that checkpoint at parallelism 3, then 1.
    for p in [3, 1] {
        let mut c = cfg.clone();
        c.parallelism = p;
        c.restore = RestoreFrom::Path(chk.clone());
        let (counts, r) = run_wordcount(c, source.clone());
        assert_resumed_mid_run(&r, &chk, 5 * 16_000);
        assert_counts(&counts, &want, &format!("restored at parallelism {p}"));
    }
}

#[test]
fn continuous_mode_reads_a_file_added_while_running_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("inbox");
    std::fs::create_dir_all(&root).unwrap();
    let folder = root.clone();
    let write = move |name: &str, lines: usize| {
        // Written under a hidden name, then renamed: files appear atomically.
        let text: String = (0..lines).map(|i| format!("{name}:{i}\n")).collect();
        let tmp = folder.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, folder.join(name)).unwrap();
    };
    for f in 0..6 {
        write(&format!("f{f}.txt"), 5_000);
    }
    let marker = root.join("_DONE");
    let mut cfg = config("continuous", dir.path(), 2, CheckpointingMode::ExactlyOnce);
    // Lines at the source plus lines at the counter: 80k records per pass, so failures
    // are due before, while and after the late file is read; each waits for a checkpoint
    // of its attempt, and at least two land before the late file is written.
    cfg.failure_injection = Some(FailureInjection::after_checkpoints(6, 11, 60_000));
    let source = FileSource::new([&root])
        .unwrap()
        .continuous(Duration::from_millis(10))
        .until_exists(&marker);
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let read = Arc::new(AtomicU64::new(0));
    let counter = read.clone();
    env.add_source("files", source)
        .uid("files")
        .map(move |line: String| {
            // Slow enough that checkpoints land between finished and unread files.
            if counter.fetch_add(1, Ordering::Relaxed).is_multiple_of(50) {
                std::thread::sleep(Duration::from_millis(1));
            }
            line
        })
        .key_by(|l: &String| l.clone())
        .process(CountWords::default())
        .uid("count")
        .add_sink("collect", out.clone())
        .uid("sink");
    // Once the first files are being read and the job restarted twice, add one more and
    // then the end marker.
    let write_late = write.clone();
    let metrics = env.metrics();
    let producer = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while (read.load(Ordering::Relaxed) < 20_000
            || metrics.restarts.load(Ordering::Relaxed) < 2)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        write_late("late.txt", 10_000);
        std::fs::write(&marker, "").unwrap();
    });
    let r = env.execute().unwrap();
    producer.join().unwrap();
    // The failures planned after the late file fire if checkpoints complete before the
    // input ends; two fired before it by construction.
    let (fired, _) = r.injected_failures.unwrap();
    assert!(fired >= 2, "{fired} failures fired");
    weir::testing::assert_resumed(&r, 40_000);
    let counts: Vec<(String, u64)> = out.take();
    assert_eq!(
        counts.len(),
        40_000,
        "every line of the first files and the late one"
    );
    let twice: Vec<_> = counts.iter().filter(|(_, c)| *c != 1).take(3).collect();
    assert!(twice.is_empty(), "each line once, not {twice:?}");
    assert!(counts.iter().any(|(l, _)| l == "late.txt:9999"));
}
