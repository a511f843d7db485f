//! q5 — hot items: the auctions with the most bids in each sliding window.
//!
//! ```sql
//! INSERT INTO discard_sink
//! SELECT AuctionBids.auction, AuctionBids.num
//!  FROM (
//!    SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
//!    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
//!    GROUP BY auction, window_start, window_end
//!  ) AS AuctionBids
//!  JOIN (
//!    SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
//!    FROM ( <the same count per auction and window> ) AS CountBids
//!    GROUP BY CountBids.starttime, CountBids.endtime
//!  ) AS MaxBids
//!  ON AuctionBids.starttime = MaxBids.starttime AND
//!     AuctionBids.endtime = MaxBids.endtime AND
//!     AuctionBids.num >= MaxBids.maxn;
//! ```
//!
//! Two windowed stages:
//!
//! 1. Bids keyed by auction in sliding event-time windows of 10 s every 2 s, counted
//!    incrementally (one counter per auction and window). Each count is emitted when its
//!    window fires, timestamped with the window's last millisecond.
//! 2. The counts keyed by their window's end, in 2 s tumbling windows: a count's timestamp
//!    (`end - 1`) falls in exactly one of them, which fires at the same watermark as the
//!    window it counts, after every subtask of stage 1 has sent that window's counts (the
//!    watermark is the minimum over them). It keeps the highest count and the auctions
//!    that have it, and emits one row per such auction — the SQL's self-join on
//!    `num >= maxn`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir::prelude::*;
use weir_nexmark::csv::{Row, Value};
use weir_nexmark::{Bid, Event};

use super::event_time::with_event_time;
use super::queries::{bids, ResultRow};

/// The HOP window's size.
const SIZE: Duration = Duration::from_secs(10);
/// The HOP window's slide.
const SLIDE: Duration = Duration::from_secs(2);

/// q5 over `events`: per window, the auctions with the most bids.
pub fn q5(events: DataStream<Event>) -> weir::Result<DataStream<Q5Row>> {
    let counts = bids(with_event_time(events))
        // Only the auction is counted: project it before the shuffle (records keep their
        // timestamps through a map).
        .map(|b: Bid| b.auction)
        .name("q5-auctions")
        .key_by(|&auction: &i64| auction)
        .window(SlidingEventTimeWindows::of(SIZE, SLIDE)?)
        .aggregate_with_window(Count, |&auction, w, num| AuctionCount {
            end: w.end,
            auction,
            num,
        })
        .uid("q5-counts");
    let hot = counts
        .key_by(|c: &AuctionCount| c.end)
        .window(TumblingEventTimeWindows::of(SLIDE)?)
        .aggregate_with_window(MaxCount, |_, _, hot: HotAuctions| hot)
        .uid("q5-max");
    Ok(hot
        .flat_map(|hot: HotAuctions| {
            let num = hot.num;
            hot.auctions.into_iter().map(move |a| Q5Row(a, num))
        })
        .name("q5"))
}

/// `count(*)` of a window's auctions, as an incremental aggregate.
#[derive(Clone, Copy)]
pub struct Count;

impl AggregateFunction<i64, u64, u64> for Count {
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: i64, acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// One auction's bid count in the window ending at `end`: stage 1's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuctionCount {
    end: u64,
    auction: i64,
    num: u64,
}

/// The highest count of a window and the auctions that have it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotAuctions {
    num: u64,
    auctions: Vec<i64>,
}

/// `max(num)` and the auctions with `num >= max` as an incremental aggregate: a count
/// above the maximum replaces the auctions, one equal to it joins them.
#[derive(Clone, Copy)]
pub struct MaxCount;

impl AggregateFunction<AuctionCount, HotAuctions, HotAuctions> for MaxCount {
    fn create_accumulator(&self) -> HotAuctions {
        HotAuctions::default()
    }
    fn add(&self, c: AuctionCount, acc: &mut HotAuctions) {
        if c.num > acc.num {
            acc.num = c.num;
            acc.auctions.clear();
        }
        if c.num == acc.num {
            acc.auctions.push(c.auction);
        }
    }
    fn get_result(&self, acc: &HotAuctions) -> HotAuctions {
        acc.clone()
    }
}

/// A q5 row: `(auction, num)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Q5Row(pub i64, pub u64);

impl ResultRow for Q5Row {
    fn row(&self) -> Row {
        vec![Value::Int(self.0), Value::Int(self.1 as i64)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_count_keeps_every_auction_with_the_highest_count() {
        let mut acc = MaxCount.create_accumulator();
        for (auction, num) in [(1, 2), (2, 5), (3, 1), (4, 5), (5, 4)] {
            let c = AuctionCount {
                end: 10_000,
                auction,
                num,
            };
            MaxCount.add(c, &mut acc);
        }
        let hot = MaxCount.get_result(&acc);
        assert_eq!(hot.num, 5);
        assert_eq!(hot.auctions, [2, 4]);
        assert_eq!(Q5Row(2, 5).row(), [Value::Int(2), Value::Int(5)]);
    }
}
