//! Upgrading a job whose *edge* type changed while records were in flight (issue 26): an
//! unaligned checkpoint saves the records queued before a keyed count as channel state,
//! encoded as v1's struct. v2 reads them as a changed struct before any record flows: a
//! field added with a default migrates each record and the run ends exact (the migrated
//! records are exactly those the checkpoint saved in flight, each with the default); a
//! field whose type changed is refused before any record, naming the operator, the
//! channel, both types and the ways out. `check_savepoint` lists the channel state with
//! its recorded schema and decision.
//!
//! The records in flight are made deterministic: v1 takes no periodic checkpoint; its
//! source emits [`THRESHOLD`] records and pauses until it has snapshotted; once the count
//! holds its first record (so its state will not be empty) the test triggers one
//! checkpoint, and the count goes on
//! only when the source task's part of it is written (so the barrier is announced on the
//! count's lane already, and its marker sent: the channel has room for every batch of the
//! paused source and the marker). Every record but the first chunk the count processes is
//! then in its input channel when it takes its snapshot.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use common::upgrade::{assert_names, assert_resumes_exactly, keyed_count, row};
use common::{checkpoint_dir, config, expected};
use weir::prelude::*;
use weir::state::StateValue;
use weir::testing::{Admit, Gated, SourceGate};

const N: u64 = 20_000;
const KEYS: u64 = 10;
/// v1's source pauses after this many records until its one checkpoint: more than a
/// chunk the count processes before its snapshot (256), so records are in flight.
const THRESHOLD: u64 = 1_000;
const JOB: &str = "upgrade-channel";

/// v1's record.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct ClickV1 {
    user: u64,
    n: u64,
}

/// v2: a field added with a default (0 for records migrated from v1, 1 for new ones).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct ClickAdded {
    user: u64,
    n: u64,
    #[serde(default)]
    weight: u64,
}

/// v2: a field whose type changed: incompatible.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct ClickRetyped {
    user: String,
    n: u64,
}

/// What the job needs of its record type.
trait Click: StateValue {
    fn new(n: u64) -> Self;
    fn user(&self) -> u64;
    /// Whether the record is one migrated from v1 (checked to be intact first).
    fn migrated(&self) -> bool;
}

impl Click for ClickV1 {
    fn new(n: u64) -> Self {
        ClickV1 { user: n % KEYS, n }
    }
    fn user(&self) -> u64 {
        self.user
    }
    fn migrated(&self) -> bool {
        assert_eq!(self.n % KEYS, self.user, "{self:?}");
        false
    }
}

impl Click for ClickAdded {
    fn new(n: u64) -> Self {
        ClickAdded {
            user: n % KEYS,
            n,
            weight: 1,
        }
    }
    fn user(&self) -> u64 {
        self.user
    }
    fn migrated(&self) -> bool {
        assert_eq!(
            self.n % KEYS,
            self.user,
            "a migrated record is garbled: {self:?}"
        );
        assert!(self.weight <= 1, "{self:?}");
        self.weight == 0
    }
}

impl Click for ClickRetyped {
    fn new(n: u64) -> Self {
        ClickRetyped {
            user: (n % KEYS).to_string(),
            n,
        }
    }
    fn user(&self) -> u64 {
        self.user.parse().unwrap()
    }
    fn migrated(&self) -> bool {
        false
    }
}

/// The gate of v1's source (the numbers below [`N`]): it pauses after [`THRESHOLD`]
/// until a checkpoint has snapshotted it.
#[derive(Clone)]
struct PauseOnce {
    emitted: u64,
    snapshotted: bool,
}

impl SourceGate for PauseOnce {
    fn snapshotted(&mut self, _: u64) {
        self.snapshotted |= self.emitted >= THRESHOLD;
    }
    fn admit(&mut self) -> Result<Admit> {
        Ok(if self.snapshotted {
            Admit::ALL
        } else if self.emitted < THRESHOLD {
            Admit::Up((THRESHOLD - self.emitted) as usize)
        } else {
            Admit::HOLD
        })
    }
    fn polled(&mut self, emitted: u64, status: SourceStatus) -> Result<SourceStatus> {
        self.emitted += emitted;
        Ok(status)
    }
}

/// Turns numbers into clicks in the source's task, counting them in `seen`; notes the
/// first checkpoint it snapshots in `gate` (and writes an operator list, so the checkpoint
/// writes a file for it once the task's snapshot is taken).
struct ToClick<C> {
    seen: Arc<AtomicU64>,
    gate: Arc<AtomicU64>,
    _c: std::marker::PhantomData<fn() -> C>,
}

impl<C> Clone for ToClick<C> {
    fn clone(&self) -> Self {
        ToClick {
            seen: self.seen.clone(),
            gate: self.gate.clone(),
            _c: std::marker::PhantomData,
        }
    }
}

impl<C: Click> CheckpointedFunction for ToClick<C> {
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        let _ =
            self.gate
                .compare_exchange(0, ctx.checkpoint_id(), Ordering::SeqCst, Ordering::SeqCst);
        ctx.set_operator_list("seen", &[self.seen.load(Ordering::SeqCst)])
    }
}

impl<C: Click> ProcessFunction<u64, C> for ToClick<C> {
    fn process(&mut self, n: u64, out: &mut Collector<'_, C>) -> Result<()> {
        self.seen.fetch_add(1, Ordering::SeqCst);
        out.collect(C::new(n));
        Ok(())
    }
}

/// v1's hold: the count's first record waits until checkpoint `gate` has the source
/// task's file (`click/op-0`), written after that task announced the barrier.
#[derive(Clone)]
struct Hold {
    /// Set when the count starts holding.
    holding: Arc<AtomicBool>,
    gate: Arc<AtomicU64>,
    job: PathBuf,
    gave_up: Arc<AtomicBool>,
}

impl Hold {
    fn wait(&self) {
        self.holding.store(true, Ordering::SeqCst);
        let start = Instant::now();
        loop {
            let id = self.gate.load(Ordering::SeqCst);
            if id > 0 && self.job.join(format!("chk-{id}/click/op-0")).exists() {
                return;
            }
            if start.elapsed() > Duration::from_secs(60) {
                self.gave_up.store(true, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Counts records per user; counts the migrated ones in `migrated`.
struct Count<C> {
    state: Option<ValueState<u64>>,
    hold: Option<Hold>,
    migrated: Arc<AtomicU64>,
    _c: std::marker::PhantomData<fn() -> C>,
}

impl<C> Clone for Count<C> {
    fn clone(&self) -> Self {
        Count {
            state: None,
            hold: self.hold.clone(),
            migrated: self.migrated.clone(),
            _c: std::marker::PhantomData,
        }
    }
}

impl<C: Click> CheckpointedFunction for Count<C> {}

impl<C: Click> KeyedProcessFunction<u64, C, (u64, u64)> for Count<C> {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.state = Some(states.value_state("count")?);
        Ok(())
    }
    fn process(
        &mut self,
        c: C,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        if let Some(hold) = self.hold.take() {
            hold.wait();
        }
        if c.migrated() {
            self.migrated.fetch_add(1, Ordering::SeqCst);
        }
        *ctx.get_mut_or_insert_with(self.state.expect("open"), || 0) += 1;
        Ok(())
    }
    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        for (k, v) in ctx.entries(self.state.expect("open")) {
            out.collect((k, v));
        }
        Ok(())
    }
}

fn cfg(dir: &Path) -> JobConfig {
    let mut c = config(JOB, dir, 1, CheckpointingMode::ExactlyOnce);
    c.checkpointing.unaligned = true;
    c.checkpointing.retained = 10_000; // the held checkpoint stays to be restored
                                       // Room for the paused source's every batch (of one record at least) and its marker.
    c.channel_capacity = THRESHOLD as usize + 2;
    c.restart = RestartStrategy::None;
    c
}

/// Numbers (from `source`) → clicks of type `C` → `key_by(user)` → count → collected;
/// `seen` and `gate` as [`ToClick`] says.
fn job<C: Click, S: SourceFunction<u64>>(
    c: JobConfig,
    source: S,
    (seen, gate): (&Arc<AtomicU64>, &Arc<AtomicU64>),
    hold: Option<Hold>,
    migrated: &Arc<AtomicU64>,
    out: &CollectSink<(u64, u64)>,
) -> StreamEnvironment {
    let env = StreamEnvironment::new(c);
    env.register_type::<C>();
    let to_click = ToClick::<C> {
        seen: seen.clone(),
        gate: gate.clone(),
        _c: std::marker::PhantomData,
    };
    let count = Count::<C> {
        state: None,
        hold,
        migrated: migrated.clone(),
        _c: std::marker::PhantomData,
    };
    let clicks = env
        .add_source("events", source)
        .uid("events")
        .process(to_click)
        .uid("click");
    keyed_count(clicks, |c: &C| c.user(), count, out);
    env
}

/// Runs v1 to its end, its one checkpoint taken as the module docs say; returns that
/// checkpoint and the records it saved in flight.
fn v1_checkpoint(dir: &Path) -> (PathBuf, u64) {
    let (seen, gate) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let job_dir = checkpoint_dir(dir).join(JOB);
    let hold = Hold {
        holding: Arc::default(),
        gate: gate.clone(),
        job: job_dir.clone(),
        gave_up: Arc::default(),
    };
    let mut c = cfg(dir);
    c.checkpointing.interval = None; // the test triggers the one checkpoint
    let out = CollectSink::new();
    let pause = PauseOnce {
        emitted: 0,
        snapshotted: false,
    };
    let source = Gated::new(GeneratorSource::new(N), pause);
    let none = Arc::default();
    let held = Some(hold.clone());
    let env = job::<ClickV1, _>(c, source, (&seen, &gate), held, &none, &out);
    let control = env.control();
    let holding = hold.holding.clone();
    let trigger = std::thread::spawn(move || {
        let start = Instant::now();
        while seen.load(Ordering::SeqCst) < THRESHOLD || !holding.load(Ordering::SeqCst) {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "in a minute, the source emitted {} of {THRESHOLD} records, the count \
                     holding: {}",
                    seen.load(Ordering::SeqCst),
                    holding.load(Ordering::SeqCst)
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        control.trigger_checkpoint().map_err(|e| e.to_string())
    });
    let r = weir::testing::execute_within(env, Duration::from_secs(120)).unwrap();
    let done = trigger.join().unwrap().unwrap();
    assert!(
        !hold.gave_up.load(Ordering::SeqCst),
        "the count held for a minute without the checkpoint's source part: {r:#?}"
    );
    let got: HashMap<u64, u64> = out.take().into_iter().collect();
    assert_eq!(got, expected(N, KEYS), "v1 is exact");
    assert_eq!(gate.load(Ordering::SeqCst), done.id);
    let held = r
        .checkpoints
        .iter()
        .find(|c| c.id == done.id)
        .unwrap_or_else(|| panic!("checkpoint {} is not in the result: {r:#?}", done.id));
    assert!(
        held.in_flight_records > 0,
        "checkpoint {} saved no records in flight: {held:#?}",
        done.id
    );
    (done.path, held.in_flight_records)
}

#[test]
fn records_in_flight_with_a_field_added_migrate_and_the_run_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (held, in_flight) = v1_checkpoint(dir.path());
    let mut c = cfg(dir.path());
    c.restore = RestoreFrom::Path(held.clone());
    let out = CollectSink::new();
    let migrated = Arc::new(AtomicU64::new(0));
    let env = job::<ClickAdded, _>(
        c,
        GeneratorSource::new(N),
        (&Arc::default(), &Arc::default()),
        None,
        &migrated,
        &out,
    );
    let report = env.check_savepoint(&held).unwrap();
    let row = row(&report, "count", "(channel state)");
    assert_eq!(
        row.verdict,
        format!("{in_flight} records in flight: migrates (serde)"),
        "{}",
        report.table()
    );
    assert!(row.old.as_ref().unwrap().type_name.ends_with("ClickV1"));
    assert!(row.new.as_ref().unwrap().type_name.ends_with("ClickAdded"));
    assert!(report.refusals(false).is_empty(), "{}", report.table());
    assert_resumes_exactly(env, &held, &out, (N, KEYS), "exact after the upgrade");
    assert_eq!(
        migrated.load(Ordering::SeqCst),
        in_flight,
        "every record in flight, and only those, came through the migration"
    );
}

#[test]
fn records_in_flight_whose_field_changed_type_are_refused_naming_the_channel() {
    let dir = tempfile::tempdir().unwrap();
    let (held, _) = v1_checkpoint(dir.path());
    let mut c = cfg(dir.path());
    c.restore = RestoreFrom::Path(held.clone());
    let out = CollectSink::new();
    let none = Arc::default();
    let env = job::<ClickRetyped, _>(
        c,
        GeneratorSource::new(N),
        (&none, &none),
        None,
        &none,
        &out,
    );
    let report = env.check_savepoint(&held).unwrap();
    assert_eq!(report.refusals(true).len(), 1, "{}", report.table());
    let e = env.execute().unwrap_err().to_string();
    let parts = [
        "operator 'count'",
        "channel state of subtask 0 channel 0",
        "ClickV1",
        "ClickRetyped",
        "weir stop",
        "fresh",
    ];
    assert_names(&e, &parts);
    assert!(out.take().is_empty(), "no record may be counted");
}
