//! Upgrading a job whose *map state* changed (issue 26): v1 keeps, per key, a map from a
//! bucket (a user key) to `BucketV1`; v2 to a changed value type. v1 stops mid-input,
//! leaving a mid-run checkpoint. A value whose field changed type migrates through the
//! map's migration function (`states.with_migration(|old: BucketV1| …).map_state(…)`),
//! restored at parallelisms 2 and 3, and every key's count comes out exact (proof that
//! every restored value was read through the function and kept); a field added with a
//! default migrates through serde; a changed user-key type is refused before anything
//! runs, naming the state and the ways out, and `check_savepoint` says so beforehand.

mod common;

use std::marker::PhantomData;
use std::path::Path;

use serde::{Deserialize, Serialize};

use common::upgrade::{
    assert_refused_by_check_and_run, assert_resumes_exactly, keyed_count, row, Upgrade, KEYS, N,
    STOP,
};
use common::{config, StopMidRun};
use weir::prelude::*;
use weir::state::{Key, StateValue};

/// The buckets of a key's map: record `i` goes to bucket `(i / KEYS) % BUCKETS`.
const BUCKETS: u64 = 4;

/// v1's bucket: a count and a label.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct BucketV1 {
    count: u64,
    label: String,
}

/// v2, a field added with a default: serde reads v1's values.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct BucketAdded {
    count: u64,
    label: String,
    #[serde(default)]
    seen_since: u64,
}

/// v2, `count` retyped and `label` replaced by its length: only a function reads v1's.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct BucketRetyped {
    count: String,
    label_len: u64,
}

fn label(key: u64, bucket: u64) -> String {
    format!("key-{key}-bucket-{bucket}")
}

/// What the counting function needs of its map's value type.
trait Bucket: StateValue {
    fn fresh(key: u64, bucket: u64) -> Self;
    fn bump(&mut self);
    fn count(&self) -> u64;
    /// Whether the value is what the job's history says it is (the fields carried over).
    fn consistent(&self, key: u64, bucket: u64) -> bool;
    /// Declares the map `buckets` (v2's with its migration).
    fn declare<UK: Key>(states: &mut KeyedStateStore<'_, u64>) -> Result<MapState<UK, Self>> {
        states.map_state("buckets")
    }
}

impl Bucket for BucketV1 {
    fn fresh(key: u64, bucket: u64) -> Self {
        BucketV1 {
            count: 0,
            label: label(key, bucket),
        }
    }
    fn bump(&mut self) {
        self.count += 1;
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn consistent(&self, key: u64, bucket: u64) -> bool {
        self.label == label(key, bucket)
    }
}

impl Bucket for BucketAdded {
    fn fresh(key: u64, bucket: u64) -> Self {
        BucketAdded {
            count: 0,
            label: label(key, bucket),
            seen_since: 0,
        }
    }
    fn bump(&mut self) {
        self.count += 1;
        self.seen_since += 1;
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn consistent(&self, key: u64, bucket: u64) -> bool {
        // The default (0) for restored values, then one per record since: fewer than all.
        self.label == label(key, bucket) && self.seen_since < self.count
    }
}

impl Bucket for BucketRetyped {
    fn fresh(key: u64, bucket: u64) -> Self {
        BucketRetyped {
            count: "0".into(),
            label_len: label(key, bucket).len() as u64,
        }
    }
    fn bump(&mut self) {
        self.count = (self.count() + 1).to_string();
    }
    fn count(&self) -> u64 {
        self.count.parse().unwrap_or(u64::MAX)
    }
    fn consistent(&self, key: u64, bucket: u64) -> bool {
        self.label_len == label(key, bucket).len() as u64
    }
    fn declare<UK: Key>(states: &mut KeyedStateStore<'_, u64>) -> Result<MapState<UK, Self>> {
        states
            .with_version(2)
            .with_migration(|old: BucketV1| BucketRetyped {
                count: old.count.to_string(),
                label_len: old.label.len() as u64,
            })
            .map_state("buckets")
    }
}

/// How the counting function names a bucket in its map: v1 and v2 by number, the
/// re-keyed v2 by name (a changed user-key type).
trait BucketKey: Key {
    fn of(bucket: u64) -> Self;
    fn number(&self) -> u64;
}

impl BucketKey for u64 {
    fn of(bucket: u64) -> Self {
        bucket
    }
    fn number(&self) -> u64 {
        *self
    }
}

impl BucketKey for String {
    fn of(bucket: u64) -> Self {
        format!("b{bucket}")
    }
    fn number(&self) -> u64 {
        self[1..].parse().unwrap_or(u64::MAX)
    }
}

/// Counts records per key in buckets of type `B` (user keys `UK`); at the end emits
/// `(key, total count)`, or `(key, u64::MAX)` if some bucket is not consistent.
#[derive(Clone)]
struct Buckets<UK, B> {
    state: Option<MapState<UK, B>>,
    _b: PhantomData<fn() -> (UK, B)>,
}

impl<UK, B> Default for Buckets<UK, B> {
    fn default() -> Self {
        Buckets {
            state: None,
            _b: PhantomData,
        }
    }
}

impl<UK, B> CheckpointedFunction for Buckets<UK, B> {}

impl<UK: BucketKey, B: Bucket> KeyedProcessFunction<u64, u64, (u64, u64)> for Buckets<UK, B> {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.state = Some(B::declare(states)?);
        Ok(())
    }

    fn process(
        &mut self,
        record: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let key = *ctx.key();
        let bucket = (record / KEYS) % BUCKETS;
        let state = self.state.as_ref().expect("declared in open");
        ctx.map(state)
            .get_mut_or_insert_with(UK::of(bucket), || B::fresh(key, bucket))
            .bump();
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, (u64, u64)>,
    ) -> Result<()> {
        let state = self.state.as_ref().expect("declared in open");
        ctx.apply_to_all_keys(state, |c| {
            let key = *c.key();
            let map = c.map(state);
            let consistent = map.entries().all(|(b, v)| v.consistent(key, b.number()));
            let total: u64 = map.values().map(Bucket::count).sum();
            out.collect((key, if consistent { total } else { u64::MAX }));
            Ok(())
        })
    }
}

fn cfg(dir: &Path) -> JobConfig {
    config("upgrade-maps", dir, 2, CheckpointingMode::ExactlyOnce)
}

/// The job counting in buckets `B` named by `UK`, reading `source`.
fn job<UK: BucketKey, B: Bucket, S: SourceFunction<u64>>(
    cfg: JobConfig,
    source: S,
    out: &CollectSink<(u64, u64)>,
) -> StreamEnvironment {
    let env = StreamEnvironment::new(cfg);
    let events = env.add_source("events", source).uid("events");
    keyed_count(events, |i: &u64| i % KEYS, Buckets::<UK, B>::default(), out);
    env
}

/// v1 (numbered buckets of `BucketV1`) stopped mid-input.
fn upgrade() -> Upgrade {
    Upgrade::after_v1(cfg, |c| {
        let source = StopMidRun::new(GeneratorSource::new(N), STOP);
        job::<u64, BucketV1, _>(c, source, &CollectSink::new())
    })
}

/// v1's checkpoint restored by v2 (buckets `B`) at parallelisms 2 and 3: `savepoint
/// check` gives the map `verdict`, and every key's count is exact.
fn evolves<B: Bucket>(verdict: &str) {
    let up = upgrade();
    for p in [2, 3] {
        let mut c = up.v2();
        c.parallelism = p;
        let out = CollectSink::new();
        let env = job::<u64, B, _>(c, GeneratorSource::new(N), &out);
        let report = env.check_savepoint(&up.mid).unwrap();
        assert!(report.refusals(false).is_empty(), "{}", report.table());
        let buckets = row(&report, "count", "buckets");
        assert_eq!(buckets.verdict, verdict, "{}", report.table());
        let at = format!("at parallelism {p}");
        assert_resumes_exactly(env, &up.mid, &out, (N, KEYS), &at);
    }
}

#[test]
fn a_map_states_values_migrate_through_its_migration_function_at_2_and_3() {
    evolves::<BucketRetyped>("migrates (migration function)");
}

#[test]
fn a_map_states_values_with_a_field_added_migrate_through_serde() {
    evolves::<BucketAdded>("migrates (serde)");
}

#[test]
fn a_map_whose_user_key_type_changed_is_refused_naming_the_state_and_check_says_so() {
    let up = upgrade();
    let out = CollectSink::new();
    // Buckets named, not numbered, with the migration function: it cannot help.
    let env = job::<String, BucketRetyped, _>(up.v2(), GeneratorSource::new(N), &out);
    let report = env.check_savepoint(&up.mid).unwrap();
    let buckets = row(&report, "count", "buckets");
    assert_eq!(buckets.verdict, "incompatible", "{}", report.table());
    let parts = [
        "operator 'count'",
        "state 'buckets'",
        "user-key type changed",
        "u64",
        "String",
        "keep the map's old user-key type",
        "--allow-non-restored-state",
        "fresh",
    ];
    assert_refused_by_check_and_run(env, &up.mid, false, &out, &parts);
    // The way out: drop the map. The run restores the rest and counts afresh.
    let mut c = up.v2();
    c.allow_non_restored_state = true;
    let env = job::<String, BucketRetyped, _>(c, GeneratorSource::new(N), &out);
    let r = env.execute().unwrap();
    assert!(
        r.notices
            .iter()
            .any(|n| n.contains("dropping keyed state 'buckets'")),
        "{:?}",
        r.notices
    );
    let counted: u64 = out.take().into_iter().map(|(_, c)| c).sum();
    assert!(
        counted < N,
        "the dropped buckets started from zero: {counted}"
    );
}
