//! A plain, single-threaded evaluation of the Nexmark queries, to check the engine against.
//!
//! It reads events in arrival order (the order of the input), keeps the watermark, and
//! computes each query's result with ordinary maps and vectors: it shares nothing with the
//! engine's windows, timers or joins. The semantics are those of the benchmark's Flink SQL
//! (nexmark-flink's `queries/*.sql` over `ddl_gen.sql` and `ddl_views.sql`).
//!
//! # Time
//!
//! The source table's watermark is `dateTime - INTERVAL '4' SECOND` over **all** events
//! (persons, auctions and bids share the table, so a person can make a bid late). Flink's
//! generated watermark generator keeps the maximum of that expression and emits it
//! periodically; the reference takes the strictest deterministic reading: the watermark
//! seen by event *i* is `max(dateTime of events 0..i) - 4000` (`i64::MIN` before the first
//! event), as if a watermark were emitted after every event, by one source split reading
//! the input in order. Flink emits its watermark every `auto-watermark-interval` and, with
//! several splits, takes the minimum over them: its watermark lags this one, so it drops a
//! subset of what the reference drops, and which subset depends on timing. Generated
//! streams are in time order, so no generated event is ever late and every reading gives
//! the same result; inputs with late events give the reference's result in an engine whose
//! watermark advances after every event. At the end of the input the watermark becomes
//! `+∞` and every window fires.
//!
//! A window `[start, end)` fires when the watermark reaches `end - 1`. A window operator
//! drops an element for a window that has fired: the element is counted in window `w` only
//! if `w.end - 1 > watermark` when it arrives (for HOP, per window: an element can miss its
//! oldest window and still count in the younger ones, as Flink's slicing operator does).
//! Regular joins (q3, q4, q7's outer join) drop nothing.
//!
//! # The queries (sink columns in brackets; rows are compared as multisets)
//!
//! * **q0** pass-through: every bid `(auction, bidder, price, dateTime, extra)`.
//! * **q1** currency: every bid `(auction, bidder, price, dateTime, extra)` with
//!   `price = 0.908 * price` as `DECIMAL(23, 3)`, exact (`100` → `90.800`).
//! * **q2** selection: bids with `auction % 123 = 0`, `(auction, price)`.
//! * **q3** local item suggestion: regular inner join of auctions with `category = 10` and
//!   persons with `state` in `OR`, `ID`, `CA` (case-sensitive) on `seller = id`,
//!   `(name, city, state, id)` with the auction's id. Both inputs are append-only, so the
//!   changelog holds inserts only and the CSV is that changelog, which is also the final
//!   table: one row per matching (person, auction) pair, written when the later of the two
//!   arrives.
//! * **q4** average price per category: regular join of auctions and bids on
//!   `id = auction` with `auction.dateTime <= bid.dateTime <= expires` (no lateness),
//!   `MAX(price)` per `(auction id, category)`, then `AVG` of those per category as Flink
//!   does for `BIGINT`: integer division truncating toward zero. The query updates its
//!   result; the CSV holds the **final table** (what an upsert sink keyed by category holds
//!   at the end), one row per category in category order, with the sink's columns
//!   `(id, final)` = (category, average).
//! * **q5** hot items: HOP windows of 10 s sliding by 2 s (aligned to epoch 0) over bids,
//!   `count(*)` per auction and window; per window, the auctions whose count equals the
//!   window's maximum, `(auction, num)`, windows in time order, auctions ascending.
//! * **q7** highest bid: TUMBLE windows of 10 s over bids give `MAX(price)` per window and
//!   the window end `e`; a regular join with **every** bid (late ones too, since the join
//!   drops nothing) on `price = max` and `e - 10 s <= dateTime <= e` (both ends
//!   inclusive, so a bid exactly at `e` can also match window `e`). The SQL inserts
//!   `B.auction, B.price, B.bidder, B.dateTime, B.extra` into sink columns
//!   `(auction, bidder, price, dateTime, extra)` by position, so the `bidder` column holds
//!   the price and `price` holds the bidder; the reference reproduces that literally.
//!   Rows by window, bids in arrival order.
//! * **q8** new users: TUMBLE windows of 10 s; distinct `(id, name)` of persons and distinct
//!   sellers of auctions per window, joined on `id = seller` and the same window,
//!   `(id, name, stime)` with the window start; windows in time order, then by id and
//!   name.
//! * **q11** user sessions: SESSION windows with a 10 s gap per bidder; `(bidder,
//!   bid_count, starttime, endtime)` with `endtime` = last bid + 10 s. As in Flink, an
//!   element's window `[t, t + 10 s)` merges with every live session it overlaps or
//!   touches (`start <= other.end && end >= other.start`), so two bids exactly 10 s apart
//!   share a session. A late element is dropped only if its window is late and merges with
//!   no live session (one that has not fired). Rows by session end, then bidder.
//!
//! q0, q1 and q2 write rows in input order.

mod joins;
mod simple;
mod verify;
mod windows;

pub use verify::{compare_csv, compare_rows, Mismatch};

use std::fmt;
use std::str::FromStr;

use crate::csv::Row;
use crate::model::{EpochMillis, Event};

/// The watermark's delay behind the largest `dateTime` seen: the DDL's `INTERVAL '4'
/// SECOND`.
pub const WATERMARK_DELAY_MS: i64 = 4_000;

/// A query the reference evaluates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Query {
    /// Pass-through.
    Q0,
    /// Currency conversion.
    Q1,
    /// Selection.
    Q2,
    /// Local item suggestion (join).
    Q3,
    /// Average price for a category (join and aggregation).
    Q4,
    /// Hot items (HOP windows).
    Q5,
    /// Highest bid (TUMBLE window joined back).
    Q7,
    /// Monitor new users (TUMBLE window join).
    Q8,
    /// User sessions (SESSION windows).
    Q11,
}

/// A query name the reference does not know; the message lists the ones it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownQuery(pub String);

impl fmt::Display for UnknownQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = Query::ALL.iter().map(|q| q.name()).collect();
        write!(
            f,
            "unknown query {:?}: the reference evaluates {}",
            self.0,
            known.join(", ")
        )
    }
}

impl std::error::Error for UnknownQuery {}

impl FromStr for Query {
    type Err = UnknownQuery;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Query::ALL
            .iter()
            .copied()
            .find(|q| q.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownQuery(s.to_string()))
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Query {
    /// Every query the reference evaluates, in order.
    pub const ALL: [Query; 9] = [
        Query::Q0,
        Query::Q1,
        Query::Q2,
        Query::Q3,
        Query::Q4,
        Query::Q5,
        Query::Q7,
        Query::Q8,
        Query::Q11,
    ];

    /// The query's name, as in the benchmark (`q5`).
    pub fn name(self) -> &'static str {
        match self {
            Query::Q0 => "q0",
            Query::Q1 => "q1",
            Query::Q2 => "q2",
            Query::Q3 => "q3",
            Query::Q4 => "q4",
            Query::Q5 => "q5",
            Query::Q7 => "q7",
            Query::Q8 => "q8",
            Query::Q11 => "q11",
        }
    }

    /// The sink table's columns, which head the CSV.
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            Query::Q0 | Query::Q1 | Query::Q7 => {
                &["auction", "bidder", "price", "dateTime", "extra"]
            }
            Query::Q2 => &["auction", "price"],
            Query::Q3 => &["name", "city", "state", "id"],
            Query::Q4 => &["id", "final"],
            Query::Q5 => &["auction", "num"],
            Query::Q8 => &["id", "name", "stime"],
            Query::Q11 => &["bidder", "bid_count", "starttime", "endtime"],
        }
    }

    /// A fresh evaluation of this query.
    pub fn evaluator(self) -> Box<dyn Evaluator> {
        match self {
            Query::Q0 => Box::new(simple::Q0),
            Query::Q1 => Box::new(simple::Q1),
            Query::Q2 => Box::new(simple::Q2),
            Query::Q3 => Box::<joins::Q3>::default(),
            Query::Q4 => Box::<joins::Q4>::default(),
            Query::Q5 => Box::<windows::Q5>::default(),
            Query::Q7 => Box::<windows::Q7>::default(),
            Query::Q8 => Box::<windows::Q8>::default(),
            Query::Q11 => Box::<windows::Q11>::default(),
        }
    }
}

/// One query's evaluation: sees the events in order with the watermark each one meets,
/// emits rows as soon as they are final, and the rest at the end of the input.
pub trait Evaluator {
    /// `event` arrives while the watermark is `watermark`.
    fn on_event(&mut self, event: &Event, watermark: EpochMillis, emit: &mut dyn FnMut(Row));
    /// The input has ended (the watermark is `+∞`): emit what is left.
    fn finish(self: Box<Self>, emit: &mut dyn FnMut(Row));
}

/// The source's watermark: the largest `dateTime` so far minus 4 s.
#[derive(Clone, Copy, Debug)]
pub struct Watermark {
    max_time: Option<EpochMillis>,
}

impl Default for Watermark {
    fn default() -> Self {
        Self::new()
    }
}

impl Watermark {
    /// Before any event: the watermark is `i64::MIN`.
    pub fn new() -> Self {
        Watermark { max_time: None }
    }

    /// The watermark now.
    pub fn current(&self) -> EpochMillis {
        match self.max_time {
            Some(t) => t.saturating_sub(WATERMARK_DELAY_MS),
            None => i64::MIN,
        }
    }

    /// Takes `event_time` into account (after the event has been processed).
    pub fn observe(&mut self, event_time: EpochMillis) {
        self.max_time = Some(self.max_time.map_or(event_time, |m| m.max(event_time)));
    }
}

/// Evaluates several queries in one pass over `events`; `emit(i, row)` receives the rows
/// of `queries[i]`. Stops at the first error of the input and returns it.
pub fn evaluate_many<E>(
    queries: &[Query],
    events: impl IntoIterator<Item = Result<Event, E>>,
    mut emit: impl FnMut(usize, Row),
) -> Result<u64, E> {
    let mut evaluators: Vec<Box<dyn Evaluator>> = queries.iter().map(|q| q.evaluator()).collect();
    let mut watermark = Watermark::new();
    let mut count = 0;
    for event in events {
        let event = event?;
        let wm = watermark.current();
        for (i, ev) in evaluators.iter_mut().enumerate() {
            ev.on_event(&event, wm, &mut |row| emit(i, row));
        }
        watermark.observe(event.date_time());
        count += 1;
    }
    for (i, ev) in evaluators.into_iter().enumerate() {
        ev.finish(&mut |row| emit(i, row));
    }
    Ok(count)
}

/// Evaluates `query` over `events` and returns its rows, in the reference's order.
pub fn evaluate(query: Query, events: impl IntoIterator<Item = Event>) -> Vec<Row> {
    let mut rows = Vec::new();
    let result = evaluate_many::<std::convert::Infallible>(
        &[query],
        events.into_iter().map(Ok),
        |_, row| rows.push(row),
    );
    match result {
        Ok(_) => rows,
        Err(never) => match never {},
    }
}

/// Window arithmetic shared by the windowed queries (plain integer math, aligned to the
/// epoch as Flink's windows with offset 0).
pub(crate) fn window_start(t: EpochMillis, slide: i64) -> EpochMillis {
    t - t.rem_euclid(slide)
}
