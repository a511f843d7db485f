//! q3 — local item suggestion: who sells in category 10 from Oregon, Idaho or California.
//!
//! ```sql
//! INSERT INTO discard_sink
//! SELECT P.name, P.city, P.state, A.id
//! FROM auction AS A INNER JOIN person AS P on A.seller = P.id
//! WHERE A.category = 10 and (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA');
//! ```
//!
//! A *regular* join: no window, no time. Both inputs are filtered first, then keyed by the
//! person (`P.id`, `A.seller`) and met in one [`KeyedCoProcessFunction`] that keeps each
//! side in keyed state, as Flink's streaming join does: a person joins every matching
//! auction seen before it, an auction every matching person, and the pair is emitted once,
//! when the later of the two arrives. Both inputs are append-only, so the rows are
//! inserts only and the CSV is the final table. The state is checkpointed, restored and
//! redistributed by key group on rescale like any keyed state.

use serde::{Deserialize, Serialize};
use weir::prelude::*;
use weir_nexmark::csv::{Row, Value};
use weir_nexmark::{Auction, Event, Person};

use super::queries::ResultRow;

/// The person columns q3 keeps and writes: `(name, city, state)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seller {
    name: String,
    city: String,
    state: String,
}

/// q3 over `events`: one row per (person from OR/ID/CA, auction of theirs in category 10).
pub fn q3(events: DataStream<Event>) -> DataStream<Q3Row> {
    let persons = events
        .clone()
        .flat_map(|e: Event| match e {
            Event::Person(p) if matches!(p.state.as_str(), "OR" | "ID" | "CA") => Some(p),
            _ => None,
        })
        .name("q3-persons");
    let auctions = events
        .flat_map(|e: Event| match e {
            Event::Auction(a) if a.category == 10 => Some(a),
            _ => None,
        })
        .name("q3-auctions");
    persons
        .connect(auctions)
        .key_by(|p: &Person| p.id, |a: &Auction| a.seller)
        .process(LocalItems::default())
        .uid("q3-join")
        .name("q3")
}

/// The regular join of q3: per seller id, the persons and the auction ids seen so far.
#[derive(Clone, Default)]
pub struct LocalItems {
    /// The persons with this id (one, unless the input repeats an id).
    persons: Option<ListState<Seller>>,
    /// The ids of this seller's auctions in category 10.
    auctions: Option<ListState<i64>>,
}

impl CheckpointedFunction for LocalItems {}

impl KeyedCoProcessFunction<i64, Person, Auction, Q3Row> for LocalItems {
    fn open(&mut self, states: &mut KeyedStateStore<'_, i64>) -> weir::Result<()> {
        self.persons = Some(states.list_state("persons")?);
        self.auctions = Some(states.list_state("auctions")?);
        Ok(())
    }

    fn process_element1(
        &mut self,
        p: Person,
        ctx: &mut KeyedContext<'_, i64>,
        out: &mut Collector<'_, Q3Row>,
    ) -> weir::Result<()> {
        let seller = Seller {
            name: p.name,
            city: p.city,
            state: p.state,
        };
        let auctions = self.auctions.as_ref().expect("open() runs first");
        for &id in ctx.list(auctions).get() {
            out.collect(Q3Row(seller.clone(), id));
        }
        let persons = self.persons.as_ref().expect("open() runs first");
        ctx.list(persons).add(seller);
        Ok(())
    }

    fn process_element2(
        &mut self,
        a: Auction,
        ctx: &mut KeyedContext<'_, i64>,
        out: &mut Collector<'_, Q3Row>,
    ) -> weir::Result<()> {
        let persons = self.persons.as_ref().expect("open() runs first");
        for seller in ctx.list(persons).get() {
            out.collect(Q3Row(seller.clone(), a.id));
        }
        let auctions = self.auctions.as_ref().expect("open() runs first");
        ctx.list(auctions).add(a.id);
        Ok(())
    }
}

/// A q3 row: the seller's `(name, city, state)` and the auction's id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Q3Row(pub Seller, pub i64);

impl ResultRow for Q3Row {
    fn row(&self) -> Row {
        let s = &self.0;
        vec![
            Value::Str(s.name.clone()),
            Value::Str(s.city.clone()),
            Value::Str(s.state.clone()),
            Value::Int(self.1),
        ]
    }
}
