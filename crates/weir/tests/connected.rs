//! Connected streams (`connect`, `CoProcessFunction`, `KeyedCoProcessFunction`): keyed state
//! and timers shared by both inputs against hand-computed truth, the watermark minimum over
//! both inputs, exactly once under injected failures with one input held back by barrier
//! alignment, and keyed co-process state restored at another parallelism.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::joins::{execute_sorted, timed};
use common::recovery::{restored_at_3_and_1, ts, under_failures};
use common::{config, StopMidRun};
use weir::prelude::*;

// ---- Orders and payments, by hand ------------------------------------------------------

const ORDERS: u64 = 200;
/// An order is paid when its payment's time is at most this much after the order's.
const PAY_WITHIN: u64 = 10;

/// Order `k`: key `k`, time `10 k`.
fn order(k: u64) -> (u64, u64) {
    (k, k * 10)
}

/// Payment `k`: key `k`, time `10 k + (7 k mod 20)` (out of order by less than 20).
fn payment(k: u64) -> (u64, u64) {
    (k, k * 10 + (k * 7) % 20)
}

/// Matches each order with its payment, whichever arrives first; an order whose payment
/// has not come when the watermark passes `order + PAY_WITHIN` times out (event-time timer).
/// Every order also arms a processing-time timer due at once. Both inputs share the keyed
/// states `order` and `early` (a payment that came before its order).
#[derive(Clone, Default)]
struct MatchPayments {
    order: Option<ValueState<u64>>,
    early: Option<ValueState<u64>>,
}

impl CheckpointedFunction for MatchPayments {}

type Row = (u64, &'static str);

impl KeyedCoProcessFunction<u64, (u64, u64), (u64, u64), Row> for MatchPayments {
    fn open(&mut self, s: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.order = Some(s.value_state("order")?);
        self.early = Some(s.value_state("early")?);
        Ok(())
    }

    fn process_element1(
        &mut self,
        (k, ts): (u64, u64),
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, Row>,
    ) -> Result<()> {
        check_timestamp(ctx, ts)?;
        let now = ctx.current_processing_time();
        ctx.register_processing_time_timer(now);
        match ctx.get(self.early.unwrap()).copied() {
            Some(paid) => {
                ctx.clear(self.early.unwrap());
                out.collect((
                    k,
                    if paid <= ts + PAY_WITHIN {
                        "paid"
                    } else {
                        "timeout"
                    },
                ));
            }
            None => {
                ctx.set(self.order.unwrap(), ts);
                ctx.register_event_time_timer(ts + PAY_WITHIN);
            }
        }
        Ok(())
    }

    fn process_element2(
        &mut self,
        (k, ts): (u64, u64),
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, Row>,
    ) -> Result<()> {
        check_timestamp(ctx, ts)?;
        match ctx.get(self.order.unwrap()).copied() {
            Some(o) if ts <= o + PAY_WITHIN => {
                ctx.clear(self.order.unwrap());
                ctx.delete_event_time_timer(o + PAY_WITHIN);
                out.collect((k, "paid"));
            }
            Some(_) => {} // too late: the timer reports the timeout
            None => ctx.set(self.early.unwrap(), ts),
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        _: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, Row>,
    ) -> Result<()> {
        let k = *ctx.key();
        match ctx.time_domain() {
            Some(TimeDomain::ProcessingTime) => out.collect((k, "processing-time timer")),
            _ => {
                if ctx.get(self.order.unwrap()).is_some() {
                    ctx.clear(self.order.unwrap());
                    out.collect((k, "timeout"));
                }
            }
        }
        Ok(())
    }
}

/// Fails unless the record arrived with its event timestamp.
fn check_timestamp(ctx: &KeyedContext<'_, u64>, ts: u64) -> Result<()> {
    if ctx.timestamp() != Some(ts) {
        return Err(Error::user(format!(
            "record of time {ts} arrived with timestamp {:?}",
            ctx.timestamp()
        )));
    }
    Ok(())
}

/// Runs orders (fast) and payments (slow: 1 000/s) at source parallelism 1 into the
/// matcher at parallelism 2.
fn run_orders_and_payments() -> Vec<Row> {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config("orders", dir.path(), 2, CheckpointingMode::ExactlyOnce);
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let exact = WatermarkStrategy::for_bounded_out_of_orderness(Duration::ZERO)
        .with_timestamp_assigner(|k: &u64, _| order(*k).1);
    let jitter = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(20))
        .with_timestamp_assigner(|k: &u64, _| payment(*k).1);
    let orders = env
        .add_source_with_watermarks("orders", GeneratorSource::new(ORDERS), exact)
        .set_parallelism(1)
        .map(order);
    let payments = env
        .add_source_with_watermarks(
            "payments",
            GeneratorSource::new(ORDERS).with_rate(Some(1_000.0)),
            jitter,
        )
        .set_parallelism(1)
        .map(payment);
    orders
        .connect(payments)
        .key_by(|o: &(u64, u64)| o.0, |p: &(u64, u64)| p.0)
        .process(MatchPayments::default())
        .add_sink("collect", out.clone());
    env.execute().unwrap();
    let mut rows = out.take();
    rows.sort();
    rows
}

#[test]
fn keyed_co_process_matches_by_hand() {
    let mut want = Vec::new();
    for k in 0..ORDERS {
        let paid = payment(k).1 <= order(k).1 + PAY_WITHIN;
        want.push((k, if paid { "paid" } else { "timeout" }));
        want.push((k, "processing-time timer"));
    }
    want.sort();
    let got = run_orders_and_payments();
    // The orders' input ends long before the payments' (and so its watermark jumps to the
    // maximum): a timeout before the payment came would show the watermark was not the
    // minimum over both inputs.
    let timeouts = want.iter().filter(|r| r.1 == "timeout").count();
    assert!(timeouts > 0 && timeouts < ORDERS as usize, "{timeouts}");
    assert_eq!(got, want);
}

/// Tags each record with its input: a `CoProcessFunction` without keys.
#[derive(Clone)]
struct Tag;

impl CheckpointedFunction for Tag {}

impl CoProcessFunction<u64, String, (u8, String)> for Tag {
    fn process_element1(&mut self, r: u64, out: &mut Collector<'_, (u8, String)>) -> Result<()> {
        out.collect((1, r.to_string()));
        Ok(())
    }
    fn process_element2(&mut self, r: String, out: &mut Collector<'_, (u8, String)>) -> Result<()> {
        out.collect((2, r));
        Ok(())
    }
    fn on_end_of_input(&mut self, out: &mut Collector<'_, (u8, String)>) -> Result<()> {
        out.collect((0, "end".into()));
        Ok(())
    }
}

#[test]
fn co_process_sees_both_inputs_rebalanced() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config("co", dir.path(), 3, CheckpointingMode::ExactlyOnce);
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let words = env
        .add_source("words", GeneratorSource::new(50))
        .set_parallelism(1)
        .map(|i| format!("w{i}"));
    env.add_source("numbers", GeneratorSource::new(100))
        .connect(words.rebalance())
        .process(Tag)
        .add_sink("collect", out.clone());
    env.execute().unwrap();
    let mut got = out.take();
    got.sort();
    let mut want: Vec<(u8, String)> = (0..3).map(|_| (0, "end".to_string())).collect();
    want.extend((0..100).map(|i| (1, i.to_string())));
    want.extend((0..50).map(|i| (2, format!("w{i}"))));
    want.sort();
    assert_eq!(got, want);
}

// ---- Exactly once, alignment and rescaling ---------------------------------------------

const KEYS: u64 = 10;
const BUCKET_MS: u64 = 100;
/// Larger than the jitter and than the lag between two splits a rescaled generator subtask
/// reads alternately.
const BOUND_MS: u64 = 10_000;
/// The bound when restoring at parallelism 1: one subtask then reads two splits that the
/// checkpoint may have left far apart (each input's stop waits only for its own
/// subtasks), so a record could come after its bucket's timer fired. Above every
/// timestamp: the timers all fire at the end of input.
const RESCALE_BOUND_MS: u64 = 100_000;

/// `(key, records of input 1, records of input 2, event-time timers fired)`.
type Counts = (u64, u64, u64, u64);

/// Counts each input's records per key in keyed state; every record of the second input
/// arms an event-time timer at the end of its time bucket, and the firings are counted in
/// state too. Emits the counts at the end of input.
#[derive(Clone, Default)]
struct CountBoth {
    c1: Option<ValueState<u64>>,
    c2: Option<ValueState<u64>>,
    fired: Option<ValueState<u64>>,
}

impl CheckpointedFunction for CountBoth {}

impl KeyedCoProcessFunction<u64, u64, u64, Counts> for CountBoth {
    fn open(&mut self, s: &mut KeyedStateStore<'_, u64>) -> Result<()> {
        self.c1 = Some(s.value_state("c1")?);
        self.c2 = Some(s.value_state("c2")?);
        self.fired = Some(s.value_state("fired")?);
        Ok(())
    }
    fn process_element1(
        &mut self,
        _: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, Counts>,
    ) -> Result<()> {
        *ctx.get_mut_or_insert_with(self.c1.unwrap(), || 0) += 1;
        Ok(())
    }
    fn process_element2(
        &mut self,
        i: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, Counts>,
    ) -> Result<()> {
        *ctx.get_mut_or_insert_with(self.c2.unwrap(), || 0) += 1;
        ctx.register_event_time_timer(bucket_end(ts(i)));
        Ok(())
    }
    fn on_timer(
        &mut self,
        _: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _: &mut Collector<'_, Counts>,
    ) -> Result<()> {
        *ctx.get_mut_or_insert_with(self.fired.unwrap(), || 0) += 1;
        Ok(())
    }
    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, Counts>,
    ) -> Result<()> {
        let (c1, c2, fired) = (self.c1.unwrap(), self.c2.unwrap(), self.fired.unwrap());
        ctx.apply_to_all_keys(&c1, |c| {
            let k = *c.key();
            let get = |c: &mut KeyedContext<'_, u64>, s| c.get(s).copied().unwrap_or(0);
            out.collect((k, get(c, c1), get(c, c2), get(c, fired)));
            Ok(())
        })?;
        // Keys seen only on the second input.
        ctx.apply_to_all_keys(&c2, |c| {
            if c.get(c1).is_none() {
                let k = *c.key();
                let f = c.get(fired).copied().unwrap_or(0);
                out.collect((k, 0, c.get(c2).copied().unwrap_or(0), f));
            }
            Ok(())
        })
    }
}

fn bucket_end(t: u64) -> u64 {
    t / BUCKET_MS * BUCKET_MS + BUCKET_MS - 1
}

/// The counts of `n1` records `0..n1` on input 1 and `n2` on input 2, keyed by `i % KEYS`.
fn truth(n1: u64, n2: u64) -> Vec<Counts> {
    let mut t: HashMap<u64, (u64, u64, std::collections::HashSet<u64>)> = HashMap::new();
    for i in 0..n1 {
        t.entry(i % KEYS).or_default().0 += 1;
    }
    for i in 0..n2 {
        let e = t.entry(i % KEYS).or_default();
        e.1 += 1;
        e.2.insert(bucket_end(ts(i)));
    }
    let mut rows: Vec<Counts> = t
        .into_iter()
        .map(|(k, (c1, c2, b))| (k, c1, c2, b.len() as u64))
        .collect();
    rows.sort();
    rows
}

/// Input 1 (fast, `first`) and input 2 (`second`, typically rate-limited) counted per key.
fn run_counts<S1: SourceFunction<u64>, S2: SourceFunction<u64>>(
    cfg: JobConfig,
    bound_ms: u64,
    first: S1,
    second: S2,
) -> (Vec<Counts>, Result<JobResult>) {
    let env = StreamEnvironment::new(cfg);
    let out = CollectSink::new();
    let a = timed(&env, "first", first, bound_ms);
    let b = timed(&env, "second", second, bound_ms);
    a.connect(b)
        .key_by(|i: &u64| i % KEYS, |i: &u64| i % KEYS)
        .process(CountBoth::default())
        .uid("count-both")
        .add_sink("collect", out.clone())
        .uid("sink");
    execute_sorted(env, &out)
}

#[test]
fn keyed_co_process_is_exactly_once_under_failures_with_a_held_back_input() {
    let (n1, n2) = (200_000, 20_000);
    // The first input runs unthrottled, the second at 40 000 records/s: every
    // barrier reaches the keyed task first on the fast input's channels, which alignment
    // must hold until the slow input's barrier arrives. A record of the fast input let
    // through early would be counted twice after the next failure.
    let rows = under_failures("co-failures", n1 + n2, 4, 11, |cfg| {
        run_counts(
            cfg,
            BOUND_MS,
            GeneratorSource::new(n1),
            common::joins::paced(n2, 40_000.0),
        )
    });
    assert_eq!(rows, truth(n1, n2));
}

#[test]
fn keyed_co_process_state_restores_at_another_parallelism() {
    let (n1, n2) = (60_000, 30_000);
    restored_at_3_and_1(
        "co-rescale",
        n1 + n2,
        3_000,
        |cfg, stop| match stop {
            // The second input stops earlier than the first (2 000 records per subtask).
            Some(at) => run_counts(
                cfg,
                RESCALE_BOUND_MS,
                StopMidRun::new(GeneratorSource::new(n1), at),
                StopMidRun::new(GeneratorSource::new(n2), 2_000),
            ),
            None => run_counts(
                cfg,
                RESCALE_BOUND_MS,
                GeneratorSource::new(n1),
                GeneratorSource::new(n2),
            ),
        },
        |_| {},
        |p, rows| assert_eq!(rows, truth(n1, n2), "parallelism {p}"),
    );
}
