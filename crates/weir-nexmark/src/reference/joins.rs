//! q3 and q4: regular (unwindowed) joins, which keep everything and drop nothing.

use std::collections::{BTreeMap, HashMap};

use super::Evaluator;
use crate::csv::{Row, Value};
use crate::model::{EpochMillis, Event};

/// q3: auctions in category 10 joined with sellers from OR, ID or CA.
#[derive(Default)]
pub(super) struct Q3 {
    /// Persons that pass the state filter, by id: (name, city, state).
    persons: HashMap<i64, Vec<(String, String, String)>>,
    /// Auction ids in category 10, by seller.
    auctions: HashMap<i64, Vec<i64>>,
}

fn q3_row(person: &(String, String, String), auction_id: i64) -> Row {
    vec![
        Value::Str(person.0.clone()),
        Value::Str(person.1.clone()),
        Value::Str(person.2.clone()),
        Value::Int(auction_id),
    ]
}

impl Evaluator for Q3 {
    fn on_event(&mut self, event: &Event, _: EpochMillis, emit: &mut dyn FnMut(Row)) {
        match event {
            Event::Person(p) if matches!(p.state.as_str(), "OR" | "ID" | "CA") => {
                let person = (p.name.clone(), p.city.clone(), p.state.clone());
                for &auction_id in self.auctions.get(&p.id).into_iter().flatten() {
                    emit(q3_row(&person, auction_id));
                }
                self.persons.entry(p.id).or_default().push(person);
            }
            Event::Auction(a) if a.category == 10 => {
                for person in self.persons.get(&a.seller).into_iter().flatten() {
                    emit(q3_row(person, a.id));
                }
                self.auctions.entry(a.seller).or_default().push(a.id);
            }
            _ => {}
        }
    }

    fn finish(self: Box<Self>, _: &mut dyn FnMut(Row)) {}
}

/// q4: per category, the average over auctions of their highest bid within the auction's
/// lifetime.
#[derive(Default)]
pub(super) struct Q4 {
    /// Auctions by id: (dateTime, expires, category).
    auctions: HashMap<i64, Vec<(EpochMillis, EpochMillis, i64)>>,
    /// Bids by auction id: (dateTime, price).
    bids: HashMap<i64, Vec<(EpochMillis, i64)>>,
}

impl Evaluator for Q4 {
    fn on_event(&mut self, event: &Event, _: EpochMillis, _: &mut dyn FnMut(Row)) {
        match event {
            Event::Auction(a) => {
                let entry = (a.date_time, a.expires, a.category);
                self.auctions.entry(a.id).or_default().push(entry);
            }
            Event::Bid(b) => self
                .bids
                .entry(b.auction)
                .or_default()
                .push((b.date_time, b.price)),
            Event::Person(_) => {}
        }
    }

    fn finish(self: Box<Self>, emit: &mut dyn FnMut(Row)) {
        // GROUP BY A.id, A.category: MAX(B.price) over the joined pairs.
        let mut finals: HashMap<(i64, i64), i64> = HashMap::new();
        for (id, auctions) in &self.auctions {
            let Some(bids) = self.bids.get(id) else {
                continue;
            };
            for &(opens, expires, category) in auctions {
                for &(time, price) in bids {
                    if opens <= time && time <= expires {
                        let max = finals.entry((*id, category)).or_insert(price);
                        *max = (*max).max(price);
                    }
                }
            }
        }
        // GROUP BY category: AVG over BIGINT is BIGINT, sum / count truncated.
        let mut per_category: BTreeMap<i64, (i128, i128)> = BTreeMap::new();
        for ((_, category), max) in finals {
            let acc = per_category.entry(category).or_insert((0, 0));
            acc.0 += max as i128;
            acc.1 += 1;
        }
        for (category, (sum, count)) in per_category {
            emit(vec![Value::Int(category), Value::Int((sum / count) as i64)]);
        }
    }
}
