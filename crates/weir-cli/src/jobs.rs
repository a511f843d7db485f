//! The built-in jobs: `keyed-count` (workload W1) and `wordcount`.
//!
//! Both are ordinary DataStream programs; the CLI only fills in their configuration and,
//! with `--source`/`--sink`, the connectors at their ends ([`crate::connect`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use weir::prelude::*;
use weir::state::Key;
use weir::state::KeyGroupRange;

use crate::connect::{self, CountKey, Prepared, SinkFormat, SinkSpec};

/// The exact count of key `k` among events `0..n` with `key = i % keys`.
pub fn expected_count(n: u64, keys: u64, k: u64) -> u64 {
    n / keys + u64::from(k < n % keys)
}

/// The padding of key `k`'s state after its `count`th record with `--value-bytes bytes`:
/// `bytes` ASCII characters repeating the key's stable hash and the count in hex, so the
/// value is as large as asked, changes with every record, and has one right content for
/// the exact count (what `--verify` checks). A String, whose bytes postcard copies whole.
pub fn padding<K: std::hash::Hash>(k: &K, count: u64, bytes: usize) -> String {
    let unit = format!("{:016x}{count:016x}", weir::state::stable_hash(k));
    let mut p = unit.repeat(bytes.div_ceil(unit.len()));
    p.truncate(bytes);
    p
}

/// Per-subtask verdicts of the in-state verification (latest attempt wins).
pub type StateVerdicts = Arc<Mutex<BTreeMap<u32, Result<u64, String>>>>;

/// Counts records per key in keyed value state. With `emit_updates` it emits
/// `(key, count)` for every record (W1); it always emits the final counts at end of input
/// unless `emit_final` is off. With `verify`, it checks its final state against the exact
/// counts of the generator workload.
#[derive(Clone)]
pub struct CountPerKey<K> {
    count: Option<ValueState<u64>>,
    /// `--value-bytes`: each key's padding state (declared only when the size is not 0).
    pad: Option<ValueState<String>>,
    /// Bytes of each key's padding (0: none).
    value_bytes: usize,
    emit_updates: bool,
    emit_final: bool,
    verify: Option<(u64, u64, u32, StateVerdicts)>,
    subtask: u32,
    parallelism: u32,
    /// `--sink-rate`: records per second over all subtasks, if limited.
    rate: Option<f64>,
    /// When this subtask counted its first record, and how many it counted since.
    throttle: Option<(std::time::Instant, u64)>,
    _k: std::marker::PhantomData<fn() -> K>,
}

impl<K> CountPerKey<K> {
    /// A counter; see the type docs.
    pub fn new(emit_updates: bool, emit_final: bool) -> Self {
        CountPerKey {
            count: None,
            pad: None,
            value_bytes: 0,
            emit_updates,
            emit_final,
            verify: None,
            subtask: 0,
            parallelism: 1,
            rate: None,
            throttle: None,
            _k: std::marker::PhantomData,
        }
    }

    /// Limits counting to about `rate` records per second over all subtasks (`None`: no
    /// limit): a slow stage that backs the sources up, for checkpoints under backpressure
    /// (benchmark W3, the unaligned-checkpoint kill tests).
    pub fn with_rate(mut self, rate: Option<f64>) -> Self {
        self.rate = rate;
        self
    }

    /// Gives each key a second state of `bytes` bytes besides its count, rewritten with
    /// every record ([`padding`]; `keyed-count --value-bytes`, hidden: for tests of a state
    /// larger than memory built from few events). 0: none, and no such state is declared.
    pub fn with_value_bytes(mut self, bytes: usize) -> Self {
        self.value_bytes = bytes;
        self
    }

    /// Sleeps while this subtask is ahead of its share of the rate (checked every 64
    /// records, so an unlimited counter pays one branch per record).
    #[inline]
    fn throttle(&mut self) {
        let Some(rate) = self.rate else { return };
        let (started, seen) = self
            .throttle
            .get_or_insert_with(|| (std::time::Instant::now(), 0));
        *seen += 1;
        if seen.is_multiple_of(64) {
            let per_subtask = rate / f64::from(self.parallelism.max(1));
            let due = std::time::Duration::from_secs_f64(*seen as f64 / per_subtask);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
}

impl<K> CheckpointedFunction for CountPerKey<K> {
    fn initialize_state(&mut self, ctx: &InitContext) -> weir::Result<()> {
        self.subtask = ctx.subtask_index();
        self.parallelism = ctx.parallelism();
        Ok(())
    }
}

impl<K: Key, I: 'static> KeyedProcessFunction<K, I, (K, u64)> for CountPerKey<K> {
    fn open(&mut self, states: &mut KeyedStateStore<'_, K>) -> weir::Result<()> {
        self.count = Some(states.value_state("count")?);
        if self.value_bytes > 0 {
            self.pad = Some(states.value_state("pad")?);
        }
        Ok(())
    }

    #[inline]
    fn process(
        &mut self,
        _record: I,
        ctx: &mut KeyedContext<'_, K>,
        out: &mut Collector<'_, (K, u64)>,
    ) -> weir::Result<()> {
        self.throttle();
        let state = self.count.expect("open() declares the state");
        let c = ctx.get_mut_or_insert_with(state, || 0);
        *c += 1;
        let c = *c;
        if let Some(pad) = self.pad {
            let p = padding(ctx.key(), c, self.value_bytes);
            ctx.set(pad, p);
        }
        if self.emit_updates {
            out.collect((ctx.key().clone(), c));
        }
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, K>,
        out: &mut Collector<'_, (K, u64)>,
    ) -> weir::Result<()> {
        let state = self.count.expect("open() declares the state");
        if let Some((n, keys, maxp, verdicts)) = &self.verify {
            let range = KeyGroupRange::for_subtask(self.subtask, self.parallelism, *maxp);
            let mut verdict = verify_state(ctx, state, *n, *keys, *maxp, range);
            if let (Ok(checked), Some(pad)) = (&verdict, self.pad) {
                verdict = verify_padding(ctx, pad, *n, *keys, self.value_bytes, *checked);
            }
            verdicts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(self.subtask, verdict);
        }
        if self.emit_final {
            for (k, v) in ctx.entries(state) {
                out.collect((k, v));
            }
        }
        Ok(())
    }
}

/// Compares one subtask's final counts with the truth; `Ok(keys checked)` or a description.
/// The entries stream through [`crate::count_check::check_counts`] (a bit per key), so a
/// state larger than memory is checked in bounded memory.
fn verify_state<K: Key>(
    ctx: &mut KeyedEndContext<'_, K>,
    state: ValueState<u64>,
    n: u64,
    keys: u64,
    maxp: u32,
    range: KeyGroupRange,
) -> Result<u64, String> {
    // Only u64 keys (keyed-count) are verifiable; other key types have no known truth.
    let entries = ctx.entries(state).map(|(k, v)| {
        (&k as &dyn std::any::Any)
            .downcast_ref::<u64>()
            .map(|k| (*k, v))
    });
    crate::count_check::check_counts(entries, n, keys, maxp, range)
}

/// Checks one subtask's padding states against the exact counts (after [`verify_state`]
/// found `checked` keys with exact counts): every key has one, of the content its exact
/// count gives. Reads the entries one at a time, so a state larger than memory is checked
/// in bounded memory. `Ok(checked)` or a description.
fn verify_padding<K: Key>(
    ctx: &mut KeyedEndContext<'_, K>,
    pad: ValueState<String>,
    n: u64,
    keys: u64,
    bytes: usize,
    checked: u64,
) -> Result<u64, String> {
    let (mut seen, mut wrong) = (0u64, Vec::new());
    for (k, v) in ctx.entries(pad) {
        seen += 1;
        let Some(k) = (&k as &dyn std::any::Any).downcast_ref::<u64>() else {
            continue;
        };
        if v != padding(k, expected_count(n, keys, *k), bytes) {
            wrong.push(format!(
                "key {k}: its {}-byte value is not the one of its exact count",
                v.len()
            ));
        }
    }
    if seen != checked {
        wrong.push(format!("{seen} keys with a value, {checked} expected"));
    }
    if wrong.is_empty() {
        Ok(checked)
    } else {
        let n_wrong = wrong.len();
        wrong.truncate(3);
        Err(format!("{n_wrong} wrong: {}", wrong.join("; ")))
    }
}

/// How keyed-count's counter works besides its input and output.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountOptions {
    /// Emit `(key, count)` for every record (W1) instead of the final counts.
    pub emit_updates: bool,
    /// `--sink-rate`: records per second over all subtasks, if limited.
    pub sink_rate: Option<f64>,
    /// `--value-bytes`: bytes of each key's padding state (0: none).
    pub value_bytes: usize,
}

/// Where a job's `(key, count)` records go.
pub enum Output {
    /// `key,count` lines in part files in a staging folder (`--output`).
    Files(PathBuf),
    /// Nowhere (benchmarks).
    Discard,
    /// An exactly-once connector (`--sink`).
    Connector(SinkSpec, SinkFormat),
}

/// How far out of order keyed-count's `--event-time` stamps may be: the watermark trails
/// the newest stamp by this much.
pub const EVENT_TIME_BOUND: std::time::Duration = std::time::Duration::from_millis(100);

/// Milliseconds since the Unix epoch (0 if the clock is before it).
fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Where keyed-count's event numbers come from.
pub enum Events<'a> {
    /// The generator: `0..n`, at most `rate` per second.
    Generator {
        /// Number of events.
        n: u64,
        /// Events per second over all subtasks.
        rate: Option<f64>,
        /// Hold each subtask after this many events until this file exists
        /// ([`HeldGenerator`]).
        hold: Vec<(u64, PathBuf)>,
        /// The generator's parallelism (`None`: the job's).
        parallelism: Option<u32>,
        /// Stamp each event with the wall-clock time it was generated, and follow the
        /// stream with watermarks (bounded out-of-orderness of [`EVENT_TIME_BOUND`]):
        /// the counts do not change, but the job runs in event time and shows its
        /// watermark lag.
        event_time: bool,
    },
    /// The `--source` connector.
    Connector(&'a Prepared),
}

/// The generator, each subtask held after `at` events until the file `release` exists
/// (`keyed-count --hold-at N --release-file PATH`, hidden: for tests), and so on for each
/// further `(at, release)` pair (ascending counts). A test that must kill a process
/// mid-input holds the input this way, so the kill lands before the end whatever the
/// machine's speed, then creates the file; several holds let it see the state settle at
/// each (a checkpoint taken at one hold, then changes up to the next). A restored subtask
/// counts afresh from its checkpoint, so create the files before anything restores.
#[derive(Clone)]
pub struct HeldGenerator {
    inner: GeneratorSource,
    /// The holds not passed yet, in order.
    holds: Vec<(u64, PathBuf)>,
    /// How many of `holds` this subtask has passed.
    passed: usize,
    emitted: u64,
}

impl HeldGenerator {
    /// Holds `inner` as the type's docs say.
    pub fn new(inner: GeneratorSource, holds: Vec<(u64, PathBuf)>) -> Self {
        HeldGenerator {
            inner,
            holds,
            passed: 0,
            emitted: 0,
        }
    }
}

impl CheckpointedFunction for HeldGenerator {
    fn initialize_state(&mut self, ctx: &InitContext) -> weir::error::Result<()> {
        self.inner.initialize_state(ctx)
    }
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> weir::error::Result<()> {
        self.inner.snapshot_state(ctx)
    }
    fn notify_checkpoint_complete(&mut self, id: u64) -> weir::error::Result<()> {
        self.inner.notify_checkpoint_complete(id)
    }
    fn notify_checkpoint_aborted(&mut self, id: u64) -> weir::error::Result<()> {
        self.inner.notify_checkpoint_aborted(id)
    }
    fn operator_state(&self) -> Vec<OperatorListDeclaration> {
        self.inner.operator_state()
    }
}

impl SourceFunction<u64> for HeldGenerator {
    fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> weir::error::Result<SourceStatus> {
        let mut max = max;
        while let Some((at, release)) = self.holds.get(self.passed) {
            if self.emitted >= *at && release.exists() {
                self.passed += 1;
                continue;
            }
            let left = at.saturating_sub(self.emitted) as usize;
            if left == 0 {
                return Ok(SourceStatus::Idle);
            }
            max = max.min(left);
            break;
        }
        let before = out.len();
        let status = self.inner.poll(out, max)?;
        self.emitted += (out.len() - before) as u64;
        Ok(status)
    }
}

/// Where wordcount's lines come from.
pub enum Lines<'a> {
    /// Files (`--input`, `--source files:GLOB`).
    Files(Box<FileLineSource>),
    /// The `--source` connector.
    Connector(&'a Prepared),
}

fn format_pair<K: std::fmt::Display>(r: &(K, u64), line: &mut String) {
    use std::fmt::Write;
    let _ = write!(line, "{},{}", r.0, r.1);
}

/// Builds `keyed-count` into `env`: generator (or `--source`) → key_by(i % keys) → count →
/// sink. `verify_state` needs the generator (the only input whose truth is known).
pub fn keyed_count(
    env: &StreamEnvironment,
    events: Events<'_>,
    keys: u64,
    options: CountOptions,
    output: Output,
    verify_state: Option<StateVerdicts>,
) -> anyhow::Result<()> {
    let mut count = CountPerKey::<u64>::new(options.emit_updates, !options.emit_updates)
        .with_rate(options.sink_rate)
        .with_value_bytes(options.value_bytes);
    let numbers = match events {
        Events::Generator {
            n,
            rate,
            hold,
            parallelism,
            event_time,
        } => {
            if let Some(v) = verify_state {
                count.verify = Some((n, keys, env.config().max_parallelism, v));
            }
            let generator = GeneratorSource::new(n).with_rate(rate);
            let numbers = match hold.is_empty() {
                true => env.add_source("generator", generator),
                false => env.add_source("generator", HeldGenerator::new(generator, hold)),
            }
            .uid("generator");
            let numbers = match parallelism {
                Some(p) => numbers.set_parallelism(p),
                None => numbers,
            };
            if event_time {
                let strategy = WatermarkStrategy::for_bounded_out_of_orderness(EVENT_TIME_BOUND)
                    .with_timestamp_assigner(|_, _| wall_clock_ms());
                numbers
                    .assign_timestamps_and_watermarks(strategy)
                    .name("timestamps")
                    .uid("timestamps")
            } else {
                numbers
            }
        }
        Events::Connector(p) => p.numbers(env)?,
    };
    let counts = numbers
        .key_by(move |i: &u64| i % keys)
        .process(count)
        .name("count")
        .uid("count");
    add_output(counts, output);
    Ok(())
}

fn add_output<K: CountKey>(s: DataStream<(K, u64)>, output: Output) {
    match output {
        Output::Files(dir) => {
            s.add_sink("output", TextFileSink::new(dir, format_pair::<K>))
                .uid("output");
        }
        Output::Discard => {
            s.add_sink("discard", DiscardSink).uid("discard");
        }
        Output::Connector(spec, format) => connect::add_sink(s, &spec, format),
    }
}

/// Splits a line into words: lowercase, then split on anything that is not an ASCII
/// letter, digit or underscore; empty tokens dropped.
pub fn tokenize(line: &str) -> impl Iterator<Item = String> + '_ {
    let lower = line.to_lowercase();
    lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect::<Vec<_>>()
        .into_iter()
}

/// Builds `wordcount` into `env`: files (or `--source`) → words → key_by(word) → count (at
/// most `rate` words per second over all subtasks, if given) → sink.
pub fn wordcount(
    env: &StreamEnvironment,
    lines: Lines<'_>,
    output: Output,
    rate: Option<f64>,
) -> anyhow::Result<()> {
    let lines = match lines {
        Lines::Files(source) => env.add_source("files", *source).uid("files"),
        Lines::Connector(p) => p.lines(env)?,
    };
    let counts = lines
        .flat_map(|line: String| tokenize(&line).collect::<Vec<_>>())
        .name("tokenize")
        .key_by(|w: &String| w.clone())
        .process(CountPerKey::<String>::new(false, true).with_rate(rate))
        .name("count")
        .uid("count");
    add_output(counts, output);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenize_follows_the_spec() {
        let words: Vec<_> = tokenize("Hello, World! it's foo_bar-42 ÉTÉ").collect();
        assert_eq!(
            words,
            vec!["hello", "world", "it", "s", "foo_bar", "42", "t"]
        );
    }

    #[test]
    fn expected_counts_sum_to_n() {
        let (n, k) = (1003, 10);
        assert_eq!((0..k).map(|i| expected_count(n, k, i)).sum::<u64>(), n);
    }
}
