//! The Nexmark queries as DataStream programs, each a short function a user can read next
//! to its SQL (nexmark-flink's `queries/qN.sql`), with the rows it writes.
//!
//! Every query takes the stream of events and returns a stream of [`ResultRow`]s: records
//! that know their CSV row, so the sink writes exactly the rows the reference evaluator
//! (`weir_nexmark::reference`) writes. The joined and windowed queries have a file each
//! (`q3.rs`, …, `q11.rs`) and share the helpers here; their event time is in
//! `event_time.rs`.

use weir::prelude::*;
use weir_nexmark::csv::{Row, Value};
use weir_nexmark::generator::EventKind;
use weir_nexmark::{Bid, Event, Query};

use super::source::Kinds;

/// A query's result record: its row in the sink's column order ([`Query::columns`]).
pub trait ResultRow: Clone + Send + 'static {
    /// Appends the record's CSV line (fields, commas and the newline) to `out`, exactly as
    /// `weir_nexmark::csv::CsvWriter` writes the row.
    fn write_csv(&self, out: &mut Vec<u8>) {
        for (i, v) in self.row().iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            v.write_field(out);
        }
        out.push(b'\n');
    }

    /// The record as a row of SQL values.
    fn row(&self) -> Row;
}

/// The queries `weir run nexmark` runs, in order.
pub const RUNNABLE: &[Query] = &[
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

/// Only bids: what q0, q1, q2, q5, q7 and q11 read.
pub const BIDS: Kinds = &[EventKind::Bid];

/// The event kinds `query` reads (the generator skips the others).
pub fn kinds(query: Query) -> Kinds {
    match query {
        Query::Q3 | Query::Q8 => &[EventKind::Person, EventKind::Auction],
        Query::Q4 => &[EventKind::Auction, EventKind::Bid],
        _ => BIDS,
    }
}

/// The bids of a stream of events (the SQL's `FROM bid`, a view with `event_type = 2`).
pub fn bids(events: DataStream<Event>) -> DataStream<Bid> {
    events
        .flat_map(|e: Event| match e {
            Event::Bid(b) => Some(b),
            _ => None,
        })
        .name("bids")
}

/// q0 — pass-through:
/// `SELECT auction, bidder, price, dateTime, extra FROM bid`.
pub fn q0(events: DataStream<Event>) -> DataStream<Q0Row> {
    bids(events).map(Q0Row).name("q0")
}

/// A q0 row: the bid, unchanged.
#[derive(Clone, Debug)]
pub struct Q0Row(pub Bid);

impl ResultRow for Q0Row {
    fn row(&self) -> Row {
        let b = &self.0;
        vec![
            Value::Int(b.auction),
            Value::Int(b.bidder),
            Value::Int(b.price),
            Value::Int(b.date_time),
            Value::Str(b.extra.to_string()),
        ]
    }
}

/// q1 — currency conversion:
/// `SELECT auction, bidder, 0.908 * price as price, dateTime, extra FROM bid`.
pub fn q1(events: DataStream<Event>) -> DataStream<Q1Row> {
    bids(events).map(Q1Row).name("q1")
}

/// A q1 row: the bid with its price times 0.908, a `DECIMAL(23, 3)` (exact at scale 3,
/// since 0.908 is `DECIMAL(4, 3)`: 100 becomes `90.800`).
#[derive(Clone, Debug)]
pub struct Q1Row(pub Bid);

impl ResultRow for Q1Row {
    fn row(&self) -> Row {
        let b = &self.0;
        vec![
            Value::Int(b.auction),
            Value::Int(b.bidder),
            Value::Decimal {
                unscaled: b.price as i128 * 908,
                scale: 3,
            },
            Value::Int(b.date_time),
            Value::Str(b.extra.to_string()),
        ]
    }
}

/// q2 — selection:
/// `SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0`.
pub fn q2(events: DataStream<Event>) -> DataStream<Q2Row> {
    bids(events)
        // SQL MOD takes the dividend's sign; only zero matters here.
        .flat_map(|b: Bid| (b.auction % 123 == 0).then_some(Q2Row(b.auction, b.price)))
        .name("q2")
}

/// A q2 row: `(auction, price)`.
#[derive(Clone, Copy, Debug)]
pub struct Q2Row(pub i64, pub i64);

impl ResultRow for Q2Row {
    fn row(&self) -> Row {
        vec![Value::Int(self.0), Value::Int(self.1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_nexmark::csv::CsvWriter;
    use weir_nexmark::generator::Generator;

    /// The rows' CSV lines equal what the reference's CSV writer writes for them.
    fn same_line(r: &impl ResultRow) {
        let mut ours = Vec::new();
        r.write_csv(&mut ours);
        let mut theirs = Vec::new();
        let mut w = CsvWriter::new(&mut theirs, &[]).unwrap();
        w.write_row(&r.row()).unwrap();
        w.finish().unwrap();
        // The reference's header line of no columns is a lone newline.
        assert_eq!(ours, theirs[1..]);
    }

    #[test]
    fn rows_are_written_as_the_reference_writes_them() {
        let g = Generator::new(Default::default()).unwrap();
        let bid = (0..100)
            .find_map(|n| match g.event(n) {
                Event::Bid(b) => Some(b),
                _ => None,
            })
            .unwrap();
        same_line(&Q0Row(bid.clone()));
        same_line(&Q1Row(Bid {
            price: 100,
            extra: "a,\"b\"".into(),
            ..bid.clone()
        }));
        let mut line = Vec::new();
        Q1Row(Bid { price: 100, ..bid }).write_csv(&mut line);
        assert!(String::from_utf8(line).unwrap().contains(",90.800,"));
        same_line(&Q2Row(1107, 5));
    }
}
