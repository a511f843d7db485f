//! q11 — user sessions: how many bids each bidder made per session of activity.
//!
//! ```sql
//! INSERT INTO nexmark_q11  -- (bidder, bid_count, starttime, endtime)
//! SELECT B.bidder, count(*) as bid_count,
//!     SESSION_START(B.dateTime, INTERVAL '10' SECOND) as starttime,
//!     SESSION_END(B.dateTime, INTERVAL '10' SECOND) as endtime
//! FROM bid B
//! GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND);
//! ```
//!
//! A session window per bidder with a 10 s gap, counted incrementally: a session ends
//! 10 s after its last bid, and a bid within 10 s of two sessions merges them (the counts
//! add up).

use weir::prelude::*;
use weir_nexmark::csv::{Row, Value};
use weir_nexmark::Event;

use super::event_time::TEN_SECONDS;
use super::queries::{bids, ResultRow};

/// q11 over `events` (with timestamps and watermarks).
pub fn q11(events: DataStream<Event>) -> DataStream<Q11Row> {
    let sessions = EventTimeSessionWindows::with_gap(TEN_SECONDS).expect("10 s is a valid gap");
    bids(events)
        .map(|b| b.bidder)
        .name("q11-bidders")
        .key_by(|bidder: &i64| *bidder)
        .window(sessions)
        .aggregate_with_window(CountBids, |bidder, session, count| Q11Row {
            bidder: *bidder,
            bid_count: count,
            start: session.start as i64,
            end: session.end as i64,
        })
        .uid("q11-sessions")
}

/// `count(*)`: sessions merge, so counts add up.
#[derive(Clone, Copy, Debug)]
pub struct CountBids;

impl AggregateFunction<i64, i64, i64> for CountBids {
    fn create_accumulator(&self) -> i64 {
        0
    }

    fn add(&self, _bidder: i64, acc: &mut i64) {
        *acc += 1;
    }

    fn get_result(&self, acc: &i64) -> i64 {
        *acc
    }

    fn merge(&self, a: i64, b: i64) -> Option<i64> {
        Some(a + b)
    }
}

/// A q11 row: `(bidder, bid_count, starttime, endtime)`, the session's end being its last
/// bid plus the gap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Q11Row {
    /// The bidder.
    pub bidder: i64,
    /// Bids in the session.
    pub bid_count: i64,
    /// The session's first bid's time.
    pub start: i64,
    /// The session's last bid's time plus 10 s.
    pub end: i64,
}

impl ResultRow for Q11Row {
    fn row(&self) -> Row {
        vec![
            Value::Int(self.bidder),
            Value::Int(self.bid_count),
            Value::Int(self.start),
            Value::Int(self.end),
        ]
    }
}
