//! q4 — average closing price per category.
//!
//! ```sql
//! INSERT INTO discard_sink
//! SELECT Q.category, AVG(Q.final)
//! FROM (
//!     SELECT MAX(B.price) AS final, A.category
//!     FROM auction A, bid B
//!     WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
//!     GROUP BY A.id, A.category
//! ) Q
//! GROUP BY Q.category;
//! ```
//!
//! Two keyed stages, as the SQL's two `GROUP BY`s:
//!
//! 1. **Winning bids** ([`WinningBids`]): auctions and bids connected and keyed by auction
//!    id. Per auction, the highest price among its bids inside `[dateTime, expires]` — a
//!    regular join, which drops nothing. An event-time timer at `expires` closes the
//!    auction: once the watermark passes it, no in-time bid is still to come, and the
//!    auction's final price goes downstream as a [`PriceChange`]. A late bid (one the
//!    watermark had already passed) that still raises a closed auction's price sends the
//!    difference, so the result never depends on how fast the watermark moved. Bids that
//!    arrive before their auction (the generator bids on auctions up to ten ids ahead)
//!    wait in keyed state for it.
//! 2. **Average per category** ([`AveragePrice`]): keyed by category, the sum and count of
//!    the auctions' final prices; `AVG` over `BIGINT` is a `BIGINT`, the sum divided by the
//!    count, truncated toward zero.
//!
//! The query's result is an updating table; the CSV holds its **final** state, one row per
//! category `(id, final)`, written when the input ends — what an upsert sink keyed by
//! category holds at the end, and what the reference evaluator writes.
//!
//! Auction ids are unique in Nexmark (the generator's, and the table's key): bids are folded
//! into their auction's maximum as they come, so an input that repeats an auction id joins
//! the repeat with the bids after it, and with the bids that waited for the first.

use serde::{Deserialize, Serialize};
use weir::prelude::*;
use weir_nexmark::csv::{Row, Value};
use weir_nexmark::{Auction, Bid, Event};

use super::event_time::with_event_time;
use super::queries::ResultRow;

/// q4 over `events`: the average final price per category, when the input ends.
pub fn q4(events: DataStream<Event>) -> DataStream<Q4Row> {
    let events = with_event_time(events);
    let auctions = events
        .clone()
        .flat_map(|e: Event| match e {
            Event::Auction(a) => Some(a),
            _ => None,
        })
        .name("q4-auctions");
    let bids = events
        .flat_map(|e: Event| match e {
            Event::Bid(b) => Some(b),
            _ => None,
        })
        .name("q4-bids");
    auctions
        .connect(bids)
        .key_by(|a: &Auction| a.id, |b: &Bid| b.auction)
        .process(WinningBids::default())
        .uid("q4-winning-bids")
        .name("q4-winning-bids")
        .key_by(|c: &PriceChange| c.category)
        .process(AveragePrice::default())
        .uid("q4-average")
        .name("q4")
}

/// One auction's part in the join: its lifetime, category and highest in-time bid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenAuction {
    opens: i64,
    expires: i64,
    category: i64,
    /// The highest price of a bid with `opens <= dateTime <= expires`, if any.
    max: Option<i64>,
    /// Whether the watermark passed `expires` and `max` went downstream.
    closed: bool,
}

/// Keyed state of [`WinningBids`] per auction id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuctionBids {
    /// The auction(s) with this id (one in Nexmark).
    auctions: Vec<OpenAuction>,
    /// `(dateTime, price)` of the bids that arrived before any auction with this id.
    waiting: Vec<(i64, i64)>,
}

/// A change of one auction's final price, for its category's average: `old` is `None` when
/// the auction enters the average, the price it had otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriceChange {
    category: i64,
    old: Option<i64>,
    new: i64,
}

/// Stage 1 of q4: the regular join of auctions and bids, `MAX(price)` per auction.
#[derive(Clone, Default)]
pub struct WinningBids {
    state: Option<ValueState<AuctionBids>>,
}

impl CheckpointedFunction for WinningBids {}

/// The event time of an auction's `expires` as a timer time (a negative one is already
/// due).
fn timer_time(expires: i64) -> u64 {
    u64::try_from(expires).unwrap_or(0)
}

impl KeyedCoProcessFunction<i64, Auction, Bid, PriceChange> for WinningBids {
    fn open(&mut self, states: &mut KeyedStateStore<'_, i64>) -> weir::Result<()> {
        self.state = Some(states.value_state("auction-bids")?);
        Ok(())
    }

    fn process_element1(
        &mut self,
        a: Auction,
        ctx: &mut KeyedContext<'_, i64>,
        _: &mut Collector<'_, PriceChange>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() runs first");
        let s = ctx.get_mut_or_insert_with(state, AuctionBids::default);
        let max = s
            .waiting
            .iter()
            .filter(|&&(t, _)| a.date_time <= t && t <= a.expires)
            .map(|&(_, price)| price)
            .max();
        s.auctions.push(OpenAuction {
            opens: a.date_time,
            expires: a.expires,
            category: a.category,
            max,
            closed: false,
        });
        // Fires once the watermark passes `expires` (at once if it already has).
        ctx.register_event_time_timer(timer_time(a.expires));
        Ok(())
    }

    fn process_element2(
        &mut self,
        b: Bid,
        ctx: &mut KeyedContext<'_, i64>,
        out: &mut Collector<'_, PriceChange>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() runs first");
        let s = ctx.get_mut_or_insert_with(state, AuctionBids::default);
        if s.auctions.is_empty() {
            s.waiting.push((b.date_time, b.price));
            return Ok(());
        }
        for a in &mut s.auctions {
            let in_time = a.opens <= b.date_time && b.date_time <= a.expires;
            if !in_time || a.max.is_some_and(|m| m >= b.price) {
                continue;
            }
            if a.closed {
                // A late bid raises a price already counted: send the difference.
                out.collect(PriceChange {
                    category: a.category,
                    old: a.max,
                    new: b.price,
                });
            }
            a.max = Some(b.price);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp_ms: u64,
        ctx: &mut KeyedContext<'_, i64>,
        out: &mut Collector<'_, PriceChange>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() runs first");
        let s = ctx.get_mut_or_insert_with(state, AuctionBids::default);
        for a in &mut s.auctions {
            if a.closed || timer_time(a.expires) > timestamp_ms {
                continue;
            }
            a.closed = true;
            if let Some(max) = a.max {
                out.collect(PriceChange {
                    category: a.category,
                    old: None,
                    new: max,
                });
            }
        }
        // The state stays: a late bid may still raise a closed auction's price.
        Ok(())
    }
}

/// `(sum, count)` of the final prices of one category's auctions.
type Average = (i128, i64);

/// Stage 2 of q4: `AVG(final)` per category, written when the input ends.
#[derive(Clone, Default)]
pub struct AveragePrice {
    state: Option<ValueState<Average>>,
}

impl CheckpointedFunction for AveragePrice {}

impl KeyedProcessFunction<i64, PriceChange, Q4Row> for AveragePrice {
    fn open(&mut self, states: &mut KeyedStateStore<'_, i64>) -> weir::Result<()> {
        self.state = Some(states.value_state("sum-count")?);
        Ok(())
    }

    fn process(
        &mut self,
        c: PriceChange,
        ctx: &mut KeyedContext<'_, i64>,
        _: &mut Collector<'_, Q4Row>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() runs first");
        let (sum, count) = ctx.get_mut_or_insert_with(state, || (0, 0));
        *sum += i128::from(c.new) - i128::from(c.old.unwrap_or(0));
        *count += i64::from(c.old.is_none());
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, i64>,
        out: &mut Collector<'_, Q4Row>,
    ) -> weir::Result<()> {
        let state = self.state.expect("open() runs first");
        for (category, (sum, count)) in ctx.entries(state) {
            if count > 0 {
                // Integer division truncates toward zero, as Flink's AVG over BIGINT.
                out.collect(Q4Row(category, (sum / i128::from(count)) as i64));
            }
        }
        Ok(())
    }
}

/// A q4 row: `(category, average final price)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Q4Row(pub i64, pub i64);

impl ResultRow for Q4Row {
    fn row(&self) -> Row {
        vec![Value::Int(self.0), Value::Int(self.1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_timer_times() {
        assert_eq!(Q4Row(10, 7).row(), [Value::Int(10), Value::Int(7)]);
        assert_eq!(timer_time(-5), 0);
        assert_eq!(timer_time(1_704_067_200_000), 1_704_067_200_000);
    }
}
