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
//!
//! The distinct persons are keyed by `id` alone, not by `(id, name)`: hashing and encoding
//! an `i64` key costs a fraction of a string's, and the generator gives every person event
//! an id of its own, so a window holds one name per id. The result stays exactly the
//! SQL's for any input (a JSON file may repeat an id with another name): the window keeps
//! every distinct name of an id ([`DistinctNames`]) and emits one person per name.

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
        .key_by(|p: &(i64, String)| p.0)
        .window(tumbling())
        .aggregate_with_window(DistinctNames, |&id, window, names: Names| {
            (id, window.start as i64, names)
        })
        .uid("q8-distinct-persons")
        .flat_map(|(id, start, (first, others)): (i64, i64, Names)| {
            std::iter::once(first)
                .chain(others)
                .map(move |name| NewPerson { id, name, start })
        })
        .name("q8-new-persons");
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

/// The distinct names of one person id in one window: the first, and (almost always
/// empty, so without an allocation) the others.
pub type Names = (String, Vec<String>);

/// Keeps the distinct names of a person id in a window: `GROUP BY id, name` for a stream
/// keyed by `id`.
struct DistinctNames;

impl AggregateFunction<(i64, String), Option<Names>, Names> for DistinctNames {
    fn create_accumulator(&self) -> Option<Names> {
        None
    }
    fn add(&self, (_, name): (i64, String), acc: &mut Option<Names>) {
        match acc {
            None => *acc = Some((name, Vec::new())),
            Some((first, others)) => {
                if *first != name && !others.contains(&name) {
                    others.push(name);
                }
            }
        }
    }
    fn get_result(&self, acc: &Option<Names>) -> Names {
        acc.clone()
            .expect("a window's accumulator holds a name once a person was added")
    }
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
