//! End-to-end exactly-once output through the two-phase-commit protocol, against an
//! in-memory transactional store: under injected failures every record is committed exactly
//! once, bounded jobs end with everything committed (the final checkpoint), and nothing
//! pre-committed is visible before its checkpoint completes. The store checks every
//! commit against the checkpoint folder: a transaction may be committed only once its
//! checkpoint's `_metadata` exists (the checkpoint completed), and pre-committed only while
//! it does not, so an engine that committed at pre-commit time fails every test here.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{checkpoint_dir, config, Sequence};
use weir::prelude::*;
use weir::storage::backend::StorageBackend;

/// A transactional store: prepared transactions by name, and committed rows.
#[derive(Default)]
struct Store {
    prepared: BTreeMap<String, Vec<(u64, u64)>>,
    committed: Vec<(u64, u64)>,
    /// Names of committed transactions (a second commit of one is a no-op).
    done: std::collections::HashSet<String>,
    commits: u64,
    /// Commits (and pre-commits) checked against the checkpoint folder.
    checked: u64,
    /// Protocol violations seen: a commit before its checkpoint completed, or a pre-commit
    /// after. Recorded rather than panicked on, so the engine's restart cannot hide them.
    violations: Vec<String>,
}

#[derive(Clone)]
struct StoreSink {
    store: Arc<Mutex<Store>>,
    /// `<checkpoint-dir>/<job>` (local or on S3, [`common::checkpoint_dir`]): where
    /// `chk-<id>/_metadata` marks a completed checkpoint.
    job_dir: Arc<dyn StorageBackend>,
}

impl StoreSink {
    /// A sink for the job whose checkpoints are in `<checkpoint_dir(dir)>/<job>`.
    fn new(dir: &Path, job: &str) -> Self {
        let job_dir = weir::storage::open_backend(&checkpoint_dir(dir).join(job)).unwrap();
        StoreSink {
            store: Arc::default(),
            job_dir: Arc::from(job_dir),
        }
    }

    /// Whether checkpoint `id` is complete: its `_metadata` exists.
    fn completed(&self, id: u64) -> bool {
        self.job_dir.size(&format!("chk-{id}/_metadata")).is_ok()
    }
}

/// The checkpoint id at the end of a transaction name `<prefix><subtask>-<id>`.
fn checkpoint_of(name: &str) -> u64 {
    name.rsplit_once('-')
        .and_then(|(_, id)| id.parse().ok())
        .unwrap_or_else(|| panic!("transaction name {name} does not end with a checkpoint id"))
}

impl TwoPhaseCommitSink<(u64, u64)> for StoreSink {
    type Transaction = Vec<(u64, u64)>;
    type Committable = String;

    fn recover(&mut self, ctx: &TransactionContext, committable: Vec<String>) -> Result<()> {
        for name in committable {
            self.commit(name)?;
        }
        let mut s = self.store.lock().unwrap();
        let prefix = ctx.prefix();
        s.prepared.retain(|name, _| !name.starts_with(&prefix)); // abort lingering
        Ok(())
    }
    fn begin(&mut self, _: &TransactionContext) -> Result<Vec<(u64, u64)>> {
        Ok(Vec::new())
    }
    fn write(&mut self, txn: &mut Vec<(u64, u64)>, batch: &mut Vec<(u64, u64)>) -> Result<()> {
        txn.append(batch);
        Ok(())
    }
    fn pre_commit(
        &mut self,
        ctx: &TransactionContext,
        txn: Vec<(u64, u64)>,
        id: u64,
    ) -> Result<Option<String>> {
        let name = ctx.transaction_name(id);
        let early = self.completed(id);
        let mut s = self.store.lock().unwrap();
        assert!(!s.done.contains(&name), "transaction name {name} reused");
        s.checked += 1;
        if early {
            s.violations.push(format!(
                "{name} pre-committed after checkpoint {id} had completed"
            ));
        }
        s.prepared.insert(name.clone(), txn);
        Ok(Some(name))
    }
    fn commit(&mut self, name: String) -> Result<()> {
        let id = checkpoint_of(&name);
        let complete = self.completed(id);
        let mut s = self.store.lock().unwrap();
        s.checked += 1;
        if !complete {
            s.violations.push(format!(
                "{name} committed before checkpoint {id} completed (no _metadata)"
            ));
        }
        if let Some(rows) = s.prepared.remove(&name) {
            s.committed.extend(rows);
            s.done.insert(name);
            s.commits += 1;
        } else if !s.done.contains(&name) {
            panic!("commit of unknown transaction {name}");
        }
        Ok(())
    }
    fn abort(&mut self, _: Vec<(u64, u64)>) -> Result<()> {
        Ok(())
    }
}

/// Asserts that every pre-commit ran before, and every commit after, its checkpoint
/// completed, and that such checks happened.
fn check_protocol(s: &Store) {
    assert!(
        s.violations.is_empty(),
        "two-phase commit out of order ({} times), first:\n{}",
        s.violations.len(),
        s.violations[..s.violations.len().min(10)].join("\n")
    );
    assert!(s.checked > 0 && s.commits > 0, "nothing was committed");
}

/// Test settings, keeping every completed checkpoint: a commit of checkpoint `n` must find
/// `chk-n/_metadata` even if newer checkpoints completed in the meantime.
fn tpc_config(name: &str, dir: &Path, parallelism: u32) -> JobConfig {
    let mut cfg = config(name, dir, parallelism, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.retained = 1_000_000;
    cfg
}

/// Every key's committed values are exactly 1..=expected, each once.
fn check_sequences(rows: &[(u64, u64)], n: u64, keys: u64) {
    let mut per_key: HashMap<u64, Vec<u64>> = HashMap::new();
    for &(k, v) in rows {
        per_key.entry(k).or_default().push(v);
    }
    assert_eq!(per_key.len() as u64, keys, "every key has output");
    for (k, mut vs) in per_key {
        vs.sort_unstable();
        let expected = n / keys + u64::from(k < n % keys);
        let want: Vec<u64> = (1..=expected).collect();
        assert_eq!(vs, want, "key {k}: gaps or repeats");
    }
}

fn sequence_job(
    cfg: JobConfig,
    n: u64,
    keys: u64,
    rate: Option<f64>,
    sink: StoreSink,
) -> StreamEnvironment {
    sequence_job_over(cfg, GeneratorSource::new(n).with_rate(rate), keys, sink)
}

/// [`sequence_job`] over any source of `0..n`.
fn sequence_job_over(
    cfg: JobConfig,
    source: impl SourceFunction<u64>,
    keys: u64,
    sink: StoreSink,
) -> StreamEnvironment {
    let env = StreamEnvironment::new(cfg);
    env.add_source("events", source)
        .uid("events")
        .key_by(move |i: &u64| i % keys)
        .process(Sequence::default())
        .uid("sequence")
        .add_sink("store", TwoPhaseCommit::new(sink))
        .uid("store");
    env
}

#[test]
fn committed_output_is_exactly_once_under_failures() {
    let dir = tempfile::tempdir().unwrap();
    let (n, keys) = (200_000, 50);
    let mut cfg = tpc_config("tpc", dir.path(), 2);
    cfg.failure_injection = Some(FailureInjection {
        failures: 12,
        seed: 7,
        horizon: n * 2,
        after_checkpoint: false,
    });
    let sink = StoreSink::new(dir.path(), "tpc");
    let result = sequence_job(cfg, n, keys, Some(400_000.0), sink.clone())
        .execute()
        .unwrap();
    assert_eq!(result.injected_failures.map(|f| f.0), Some(12));
    let s = sink.store.lock().unwrap();
    assert!(
        s.prepared.is_empty(),
        "left prepared: {:?}",
        s.prepared.keys()
    );
    check_sequences(&s.committed, n, keys);
    check_protocol(&s);
}

#[test]
fn a_bounded_job_ends_with_everything_committed_without_waiting_an_interval() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tpc_config("tpc-final", dir.path(), 2);
    cfg.checkpointing.interval = Some(Duration::from_secs(3600));
    let sink = StoreSink::new(dir.path(), "tpc-final");
    let started = Instant::now();
    let result = sequence_job(cfg, 10_000, 10, None, sink.clone())
        .execute()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the final checkpoint must not wait for the interval"
    );
    assert_eq!(result.checkpoints.len(), 1, "exactly the final checkpoint");
    let s = sink.store.lock().unwrap();
    assert!(s.prepared.is_empty());
    check_sequences(&s.committed, 10_000, 10);
    check_protocol(&s);
}

#[test]
fn without_periodic_checkpoints_the_final_checkpoint_commits_once_for_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tpc_config("tpc-off", dir.path(), 2);
    cfg.checkpointing.interval = None;
    let sink = StoreSink::new(dir.path(), "tpc-off");
    let result = sequence_job(cfg, 10_000, 10, None, sink.clone())
        .execute()
        .unwrap();
    assert_eq!(result.checkpoints.len(), 1, "just the final checkpoint");
    let s = sink.store.lock().unwrap();
    assert!(s.prepared.is_empty());
    assert_eq!(s.commits, 2, "one transaction per subtask");
    check_sequences(&s.committed, 10_000, 10);
    check_protocol(&s);
}

#[test]
fn pre_committed_output_is_invisible_until_its_checkpoint_completes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tpc_config("tpc-visible", dir.path(), 1);
    cfg.checkpointing.interval = Some(Duration::from_millis(50));
    let sink = StoreSink::new(dir.path(), "tpc-visible");
    let store = sink.store.clone();
    // A reader that watches while the job runs: committed rows only ever grow by whole
    // transactions, and each key's committed values are a prefix 1..m (never a hole).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let looks = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = {
        let (store, stop, looks) = (store.clone(), stop.clone(), looks.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let s = store.lock().unwrap();
                let mut max: HashMap<u64, (u64, u64)> = HashMap::new();
                for &(k, v) in &s.committed {
                    let e = max.entry(k).or_default();
                    e.0 = e.0.max(v);
                    e.1 += 1;
                }
                for (k, (m, c)) in max {
                    assert_eq!(m, c, "key {k}: committed values are not a prefix");
                }
                drop(s);
                looks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    // The source pauses every 25 000 records until a checkpoint covering them completed
    // (committing them) and the reader looked since: commits along the way and looks at
    // them are certain, however fast the machine.
    let last_look = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let looked = {
        let looks = looks.clone();
        move || {
            let now = looks.load(std::sync::atomic::Ordering::SeqCst);
            now > last_look.swap(now, std::sync::atomic::Ordering::SeqCst)
        }
    };
    let source = common::PauseForCheckpoints::until(
        GeneratorSource::new(100_000).with_rate(Some(200_000.0)),
        25_000,
        looked,
    );
    sequence_job_over(cfg, source, 5, sink).execute().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().unwrap();
    assert!(looks.load(std::sync::atomic::Ordering::SeqCst) >= 4);
    let s = store.lock().unwrap();
    assert!(s.commits > 2, "several checkpoints committed along the way");
    check_sequences(&s.committed, 100_000, 5);
    check_protocol(&s);
}
