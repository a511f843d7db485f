//! q7 — highest bid: the bids whose price is the highest of their 10 s window.
//!
//! ```sql
//! INSERT INTO nexmark_q7  -- (auction, bidder, price, dateTime, extra)
//! SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra
//! FROM bid B
//! JOIN (
//!   SELECT MAX(price) AS maxprice, window_end as dateTime
//!   FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
//!   GROUP BY window_start, window_end
//! ) B1
//! ON B.price = B1.maxprice
//! WHERE B.dateTime BETWEEN B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime;
//! ```
//!
//! Flink evaluates this as a window aggregate joined with *every* bid, so it keeps every
//! bid of the window until the maximum is known (and ran out of 4 GB at 10 M events). The
//! program here keys the bids by their window and keeps, per window, only the current
//! maximum and the bids at it: the maximum only grows, so a bid below it can never match.
//!
//! * The join's `BETWEEN` is inclusive at both ends: a bid at exactly a window's end `e`
//!   is in the next window for `MAX`, and still joins window `e`. Such a bid goes to both
//!   windows, to `e` as a join candidate only ([`WindowBid::counts`] is false).
//! * A window fires when the watermark passes its end, emitting its bids at the maximum.
//!   The aggregate drops late bids (their window has fired), but the join drops nothing:
//!   a late bid at a fired window's maximum is still a result, so each window's final
//!   maximum stays in state (one number per 10 s of event time).
//! * The SQL inserts `B.auction, B.price, B.bidder, ...` into the sink's
//!   `(auction, bidder, price, ...)` by position: the `bidder` column holds the price and
//!   `price` the bidder. [`Q7Row`] writes exactly that.

use serde::{Deserialize, Serialize};
use weir::prelude::*;
use weir_nexmark::csv::{Row, Value};
use weir_nexmark::{Bid, Event, Extra};

use super::event_time::TEN_SECONDS;
use super::queries::{bids, ResultRow};

/// The window size in milliseconds.
const SIZE_MS: u64 = TEN_SECONDS.as_millis() as u64;

/// q7 over `events` (with timestamps and watermarks).
pub fn q7(events: DataStream<Event>) -> DataStream<Q7Row> {
    bids(events)
        .flat_map(WindowBid::of)
        .name("q7-windows")
        .key_by(|b: &WindowBid| b.window_end)
        .process(HighestBids::default())
        .name("q7-highest-bids")
        .uid("q7-highest-bids")
}

/// A bid for one window it may match: what q7 keeps of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowBid {
    /// The end of the window, exclusive (the SQL's `window_end`): the key.
    pub window_end: u64,
    /// Whether the bid is in the window (and so counts for its `MAX(price)`), rather than
    /// exactly at its end (a join candidate only).
    pub counts: bool,
    /// The bid's auction.
    pub auction: i64,
    /// The bid's bidder.
    pub bidder: i64,
    /// The bid's price.
    pub price: i64,
    /// The bid's `dateTime`.
    pub date_time: i64,
    /// The bid's `extra`.
    pub extra: Extra,
}

impl WindowBid {
    /// The windows `bid` may match: its own, and the one ending at its time if it is
    /// exactly at a window boundary (the `BETWEEN`'s inclusive upper end).
    fn of(bid: Bid) -> impl IntoIterator<Item = WindowBid> {
        let t = bid.date_time.max(0) as u64;
        let end = t - t % SIZE_MS + SIZE_MS;
        let own = WindowBid {
            window_end: end,
            counts: true,
            auction: bid.auction,
            bidder: bid.bidder,
            price: bid.price,
            date_time: bid.date_time,
            extra: bid.extra,
        };
        let at_end = (t.is_multiple_of(SIZE_MS) && t > 0).then(|| WindowBid {
            window_end: t,
            counts: false,
            extra: own.extra.clone(),
            ..own
        });
        std::iter::once(own).chain(at_end)
    }
}

/// One window's state: its highest price so far and the bids at it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HighestSoFar {
    /// The highest price of the bids in the window; `None` while it has none.
    max: Option<i64>,
    /// Whether the window has fired: `max` is final. Kept in state because the watermark
    /// is not: after a restore it starts again from nothing.
    fired: bool,
    /// Candidates not below `max` (all of them while `max` is `None`).
    bids: Vec<WindowBid>,
}

/// Per window (the key), the bids at its highest price, emitted when the watermark passes
/// the window's end (see the module docs).
#[derive(Clone, Default)]
pub struct HighestBids {
    state: Option<ValueState<HighestSoFar>>,
}

impl CheckpointedFunction for HighestBids {}

impl KeyedProcessFunction<u64, WindowBid, Q7Row> for HighestBids {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> weir::Result<()> {
        self.state = Some(states.value_state("highest")?);
        Ok(())
    }

    fn process(
        &mut self,
        bid: WindowBid,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, Q7Row>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() declares the state");
        let end = bid.window_end;
        let passed = ctx.current_watermark().is_some_and(|w| w >= end - 1);
        if !passed {
            let w = ctx.get_mut_or_insert_with(state, HighestSoFar::default);
            if !w.fired {
                if bid.counts && w.max.is_none_or(|m| bid.price > m) {
                    w.max = Some(bid.price);
                    w.bids.retain(|b| b.price >= bid.price);
                }
                if w.max.is_none_or(|m| bid.price >= m) {
                    w.bids.push(bid);
                }
                ctx.register_event_time_timer(end - 1);
                return Ok(());
            }
        }
        // A late bid: the aggregate has its final maximum (or never had one), only the
        // join side is left.
        if ctx.get(state).is_some_and(|w| w.max == Some(bid.price)) {
            out.collect(Q7Row::of(&bid));
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        _time: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, Q7Row>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() declares the state");
        let Some(w) = ctx.get(state).cloned() else {
            return Ok(());
        };
        let Some(max) = w.max else {
            // Only candidates at its end, no bid in it: no maximum, nothing joins.
            ctx.clear(state);
            return Ok(());
        };
        for b in w.bids.iter().filter(|b| b.price == max) {
            out.collect(Q7Row::of(b));
        }
        // Keep the final maximum for late candidates; the bids are done.
        ctx.set(
            state,
            HighestSoFar {
                max: Some(max),
                fired: true,
                bids: Vec::new(),
            },
        );
        Ok(())
    }
}

/// A q7 row: `(auction, price, bidder, dateTime, extra)` in the sink's columns
/// `(auction, bidder, price, dateTime, extra)`, the SQL's positional column swap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Q7Row {
    /// The bid's auction.
    pub auction: i64,
    /// The bid's price (in the sink's `bidder` column).
    pub price: i64,
    /// The bid's bidder (in the sink's `price` column).
    pub bidder: i64,
    /// The bid's `dateTime`.
    pub date_time: i64,
    /// The bid's `extra`.
    pub extra: Extra,
}

impl Q7Row {
    fn of(b: &WindowBid) -> Self {
        Q7Row {
            auction: b.auction,
            price: b.price,
            bidder: b.bidder,
            date_time: b.date_time,
            extra: b.extra.clone(),
        }
    }
}

impl ResultRow for Q7Row {
    fn row(&self) -> Row {
        vec![
            Value::Int(self.auction),
            Value::Int(self.price),
            Value::Int(self.bidder),
            Value::Int(self.date_time),
            Value::Str(self.extra.to_string()),
        ]
    }
}
