//! The windowed queries on generated events (in time order, so nothing is late) against a
//! second, deliberately different computation: scan every window over all events, and
//! sort each bidder's bids to cut sessions. The two must agree as multisets.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use weir_nexmark::csv::{Row, Value};
use weir_nexmark::generator::{Generator, GeneratorConfig};
use weir_nexmark::reference::{compare_rows, evaluate, Query};
use weir_nexmark::{Bid, Event};

/// 40 000 events at 1 000 events/s: 40 s of event time, so several windows and sessions.
fn events() -> Vec<Event> {
    let g = Generator::new(GeneratorConfig {
        tps: 1_000,
        ..GeneratorConfig::default()
    })
    .unwrap();
    g.iter_from(0).take(40_000).collect()
}

fn bids(events: &[Event]) -> Vec<&Bid> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Bid(b) => Some(b),
            _ => None,
        })
        .collect()
}

/// Window starts, every `step` ms, of the windows of `size` that can hold an event.
fn starts(events: &[Event], step: i64, size: i64) -> impl Iterator<Item = i64> {
    let min = events.iter().map(Event::date_time).min().unwrap();
    let max = events.iter().map(Event::date_time).max().unwrap();
    let first = (min - size).div_euclid(step) * step;
    (first..=max).step_by(step as usize)
}

fn check(query: Query, events: &[Event], expected: Vec<Row>) {
    assert!(!expected.is_empty(), "{query}: the scenario gives no rows");
    let actual = evaluate(query, events.to_vec());
    if let Some(m) = compare_rows(&expected, &actual) {
        panic!("{query}: {m}");
    }
}

#[test]
fn q5_by_scanning_every_hop_window() {
    let events = events();
    let bids = bids(&events);
    let mut expected = Vec::new();
    for s in starts(&events, 2_000, 10_000) {
        let mut counts: HashMap<i64, i64> = HashMap::new();
        for b in bids
            .iter()
            .filter(|b| s <= b.date_time && b.date_time < s + 10_000)
        {
            *counts.entry(b.auction).or_default() += 1;
        }
        if let Some(&max) = counts.values().max() {
            for (&auction, &n) in &counts {
                if n == max {
                    expected.push(vec![Value::Int(auction), Value::Int(n)]);
                }
            }
        }
    }
    check(Query::Q5, &events, expected);
}

#[test]
fn q7_by_scanning_every_tumbling_window() {
    let events = events();
    let bids = bids(&events);
    let mut expected = Vec::new();
    for s in starts(&events, 10_000, 10_000) {
        let end = s + 10_000;
        let in_window = bids
            .iter()
            .filter(|b| s <= b.date_time && b.date_time < end);
        let Some(max) = in_window.map(|b| b.price).max() else {
            continue;
        };
        for b in bids
            .iter()
            .filter(|b| b.price == max && s <= b.date_time && b.date_time <= end)
        {
            expected.push(vec![
                Value::Int(b.auction),
                Value::Int(b.price),
                Value::Int(b.bidder),
                Value::Int(b.date_time),
                Value::Str(b.extra.to_string()),
            ]);
        }
    }
    check(Query::Q7, &events, expected);
}

#[test]
fn q8_by_scanning_every_tumbling_window() {
    let events = events();
    let mut expected = Vec::new();
    for s in starts(&events, 10_000, 10_000) {
        let inside = |t: i64| s <= t && t < s + 10_000;
        let mut persons = BTreeSet::new();
        let mut sellers = BTreeSet::new();
        for e in &events {
            match e {
                Event::Person(p) if inside(p.date_time) => {
                    persons.insert((p.id, p.name.clone()));
                }
                Event::Auction(a) if inside(a.date_time) => {
                    sellers.insert(a.seller);
                }
                _ => {}
            }
        }
        for (id, name) in persons {
            if sellers.contains(&id) {
                expected.push(vec![Value::Int(id), Value::Str(name), Value::Int(s)]);
            }
        }
    }
    check(Query::Q8, &events, expected);
}

#[test]
fn q11_by_sorting_each_bidders_bids() {
    let events = events();
    let mut times: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for b in bids(&events) {
        times.entry(b.bidder).or_default().push(b.date_time);
    }
    let mut expected = Vec::new();
    for (bidder, mut ts) in times {
        ts.sort_unstable();
        let mut start = ts[0];
        let mut last = ts[0];
        let mut count = 0;
        for t in ts {
            // Windows [last, last + 10 s) and [t, t + 10 s) touch when t <= last + 10 s.
            if t > last + 10_000 {
                expected.push(vec![
                    Value::Int(bidder),
                    Value::Int(count),
                    Value::Int(start),
                    Value::Int(last + 10_000),
                ]);
                start = t;
                count = 0;
            }
            last = t;
            count += 1;
        }
        expected.push(vec![
            Value::Int(bidder),
            Value::Int(count),
            Value::Int(start),
            Value::Int(last + 10_000),
        ]);
    }
    check(Query::Q11, &events, expected);
}
