//! q8 — monitor new users: people who opened an auction in the same 10 s window in which
//! they registered.
//!
//! ```sql
//! INSERT INTO nexmark_q8  -- (id, name, stime)
//! SELECT P.id, P.name, P.starttime
//! FROM (
//!   SELECT id, name, window_start AS starttime, window_end AS endtime
//!   FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
//!   GROUP BY id, name, window_start, window_end
//! ) P
//! JOIN (
//!   SELECT seller, window_start AS starttime, window_end AS endtime
//!   FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
//!   GROUP BY seller, window_start, window_end
//! ) A
//! ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;
//! ```
//!
//! Each `GROUP BY` is a tumbling window that keeps one record per key (the distinct
//! persons, the distinct sellers); their results are timestamped with the window's last
//! millisecond, so they fall into the same window of the window join on `id = seller`
//! that follows.

use weir::prelude::*;
use weir_nexmark::csv::{Row, Value};
use weir_nexmark::Event;

use super::event_time::TEN_SECONDS;
use super::queries::ResultRow;

/// q8 over `events` (with timestamps and watermarks).
pub fn q8(events: DataStream<Event>) -> DataStream<Q8Row> {
    let tumbling = || TumblingEventTimeWindows::of(TEN_SECONDS).expect("10 s is a valid size");
    // P: the distinct (id, name) per window, with the window's start.
    let persons = events
        .clone()
        .flat_map(|e: Event| match e {
            Event::Person(p) => Some((p.id, p.name)),
            _ => None,
        })
        .name("q8-persons")
        .key_by(|p: &(i64, String)| p.clone())
        .window(tumbling())
        .reduce_with_window(
            |first, _| first,
            |_, window, (id, name)| NewPerson {
                id,
                name,
                start: window.start as i64,
            },
        )
        .uid("q8-distinct-persons");
    // A: the distinct sellers per window.
    let sellers = events
        .flat_map(|e: Event| match e {
            Event::Auction(a) => Some(a.seller),
            _ => None,
        })
        .name("q8-sellers")
        .key_by(|seller: &i64| *seller)
        .window(tumbling())
        .reduce(|first, _| first)
        .uid("q8-distinct-sellers");
    // P JOIN A ON P.id = A.seller, in the same window.
    persons
        .join(sellers)
        .where_key(|p: &NewPerson| p.id)
        .equal_to(|seller: &i64| *seller)
        .window(tumbling())
        .apply(|p: &NewPerson, _seller: &i64| Q8Row(p.clone()))
        .uid("q8-join")
}

/// A person registered in a window: `(id, name, window start)`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NewPerson {
    /// The person's id.
    pub id: i64,
    /// The person's name.
    pub name: String,
    /// The start of the window they registered in.
    pub start: i64,
}

/// A q8 row: `(id, name, stime)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Q8Row(pub NewPerson);

impl ResultRow for Q8Row {
    fn row(&self) -> Row {
        let p = &self.0;
        vec![
            Value::Int(p.id),
            Value::Str(p.name.clone()),
            Value::Int(p.start),
        ]
    }
}
