//! The reference evaluator on small hand-built inputs, against results worked out by hand
//! from the SQL (comments give the reasoning): window boundaries, late events, session
//! merging, join conditions.

use weir_nexmark::csv::to_csv;
use weir_nexmark::generator::{Generator, GeneratorConfig};
use weir_nexmark::reference::{evaluate, evaluate_many, Query};
use weir_nexmark::{Auction, Bid, Event, Person};

/// A time aligned to 10 s (and so to 2 s): the start of a tumbling window.
const T0: i64 = 1_700_000_000_000;

fn person(id: i64, name: &str, state: &str, t: i64) -> Event {
    Event::Person(Person {
        id,
        name: name.into(),
        email_address: "e@x.com".into(),
        credit_card: "0000 0000 0000 0000".into(),
        city: format!("City{id}"),
        state: state.into(),
        date_time: t,
        extra: Default::default(),
    })
}

fn auction(id: i64, seller: i64, category: i64, t: i64, expires: i64) -> Event {
    Event::Auction(Auction {
        id,
        item_name: "item".into(),
        description: "d".into(),
        initial_bid: 1,
        reserve: 2,
        date_time: t,
        expires,
        seller,
        category,
        extra: Default::default(),
    })
}

fn bid(auction: i64, bidder: i64, price: i64, t: i64) -> Event {
    Event::Bid(Bid {
        auction,
        bidder,
        price,
        channel: "Google".into(),
        url: "u".into(),
        date_time: t,
        extra: format!("x{bidder}").into(),
    })
}

fn csv(query: Query, events: Vec<Event>) -> String {
    to_csv(query.columns(), &evaluate(query, events))
}

#[test]
fn q0_passes_bids_through() {
    let events = vec![
        bid(1, 2, 3, T0),
        person(9, "P", "OR", T0),
        bid(4, 5, 6, T0 - 1),
    ];
    assert_eq!(
        csv(Query::Q0, events),
        format!(
            "auction,bidder,price,dateTime,extra\n1,2,3,{T0},x2\n4,5,6,{},x5\n",
            T0 - 1
        )
    );
}

#[test]
fn q1_converts_prices_exactly() {
    let events = vec![bid(1, 2, 100, T0), bid(1, 3, 1, T0), bid(1, 4, 12_345, T0)];
    assert_eq!(
        csv(Query::Q1, events),
        format!(
            "auction,bidder,price,dateTime,extra\n1,2,90.800,{T0},x2\n1,3,0.908,{T0},x3\n\
             1,4,11209.260,{T0},x4\n"
        )
    );
}

#[test]
fn q2_selects_every_123rd_auction() {
    let events = vec![
        bid(123, 1, 10, T0),
        bid(124, 1, 11, T0),
        bid(246, 1, 12, T0),
        bid(0, 1, 13, T0),
    ];
    assert_eq!(
        csv(Query::Q2, events),
        "auction,price\n123,10\n246,12\n0,13\n"
    );
}

#[test]
fn q3_joins_category_10_with_sellers_in_or_id_ca() {
    let events = vec![
        person(1, "Ann", "OR", T0),
        person(2, "Bob", "WA", T0), // wrong state
        auction(10, 1, 10, T0, T0 + 5),
        auction(11, 2, 10, T0, T0 + 5),
        auction(12, 1, 11, T0, T0 + 5), // wrong category
        auction(13, 3, 10, T0, T0 + 5), // its seller registers later: still joins
        person(4, "Dan", "or", T0),     // lower case: the filter is case-sensitive
        auction(14, 4, 10, T0, T0 + 5),
        person(3, "Cy", "CA", T0 + 100_000), // far ahead in time: a regular join drops nothing
    ];
    assert_eq!(
        csv(Query::Q3, events),
        "name,city,state,id\nAnn,City1,OR,10\nCy,City3,CA,13\n"
    );
}

#[test]
fn q4_averages_the_winning_bids_per_category() {
    let events = vec![
        bid(2, 7, 6, T0 + 20), // before its auction arrives: a regular join still pairs it
        auction(1, 1, 10, T0, T0 + 100),
        auction(2, 1, 10, T0, T0 + 50),
        auction(3, 1, 11, T0, T0 + 10),
        person(9, "Far", "OR", T0 + 1_000_000), // moves the watermark: joins ignore it
        bid(1, 7, 7, T0 + 50),
        bid(1, 7, 9, T0 + 100),   // at `expires`: BETWEEN is inclusive
        bid(1, 7, 100, T0 + 101), // after `expires`
        bid(2, 7, 4, T0 + 10),
        bid(3, 7, 5, T0 + 20), // after auction 3 expired: category 11 gets no row
    ];
    // Category 10: auction 1 wins at 9, auction 2 at 6; AVG(BIGINT) = 15 / 2 = 7.
    assert_eq!(csv(Query::Q4, events), "id,final\n10,7\n");
}

#[test]
fn q5_hop_windows_count_bids_and_late_bids_miss_fired_windows() {
    let events = vec![
        bid(1, 1, 1, T0 + 1_000), // windows starting T0-8s, -6s, -4s, -2s, T0
        bid(2, 1, 1, T0 + 1_500), // the same five
        bid(2, 1, 1, T0 + 9_000), // windows starting T0, +2s, +4s, +6s, +8s
        person(5, "P", "OR", T0 + 15_000), // watermark T0 + 11 s
        // Late: its windows start T0-6s .. T0+2s (ends T0+4s .. T0+12s); only the one
        // ending T0+12s has not fired (end - 1 > watermark), so only it counts the bid.
        bid(3, 1, 1, T0 + 3_000),
    ];
    let mut expected = String::from("auction,num\n");
    for _ in 0..4 {
        expected += "1,1\n2,1\n"; // T0-8s .. T0-2s: one bid each for auctions 1 and 2
    }
    expected += "2,2\n"; // T0: auction 2 has two
    expected += "2,1\n3,1\n"; // T0+2s: auction 2's bid and the late one tie
    expected += "2,1\n2,1\n2,1\n"; // T0+4s .. T0+8s
    assert_eq!(csv(Query::Q5, events), expected);
}

#[test]
fn q7_joins_window_maxima_back_to_every_bid_in_range() {
    let events = vec![
        bid(1, 11, 50, T0 + 1_000),
        bid(2, 12, 80, T0 + 2_000),
        bid(3, 13, 80, T0 + 9_999),  // ties the maximum of [T0, T0+10s)
        bid(4, 14, 80, T0 + 10_000), // in the next window, and at the first one's end
        bid(5, 15, 30, T0 + 15_000),
        person(9, "P", "OR", T0 + 30_000), // watermark T0+26s: both windows fire
        bid(6, 16, 500, T0 + 5_000),       // late: not in the maximum, and 500 matches nothing
        bid(7, 17, 80, T0 + 4_000),        // late: not in the maximum, but joins it (80)
    ];
    // Columns by position: auction, price (under `bidder`), bidder (under `price`).
    let e1 = format!(
        "2,80,12,{},x12\n3,80,13,{},x13\n4,80,14,{},x14\n7,80,17,{},x17\n",
        T0 + 2_000,
        T0 + 9_999,
        T0 + 10_000,
        T0 + 4_000
    );
    let e2 = format!("4,80,14,{},x14\n", T0 + 10_000);
    assert_eq!(
        csv(Query::Q7, events),
        format!("auction,bidder,price,dateTime,extra\n{e1}{e2}")
    );
}

#[test]
fn q8_joins_new_persons_and_sellers_per_tumbling_window() {
    let events = vec![
        person(1, "Ann", "OR", T0 + 100),
        auction(100, 1, 10, T0 + 9_999, T0 + 20_000), // same window as Ann
        person(2, "Bob", "OR", T0 + 9_999),
        auction(101, 2, 10, T0 + 10_000, T0 + 20_000), // the next window: no match
        person(3, "Cy", "OR", T0 + 12_000),
        person(3, "Cy", "OR", T0 + 12_500), // the same (id, name) again: one row
        auction(102, 3, 10, T0 + 13_000, T0 + 20_000),
        auction(103, 3, 10, T0 + 14_000, T0 + 20_000), // the same seller again: one row
        person(8, "Dee", "OR", T0 + 21_000),
        person(9, "Far", "OR", T0 + 30_000), // watermark T0+26s
        auction(104, 8, 10, T0 + 25_000, T0 + 40_000), // [T0+20s, T0+30s) still open
        person(7, "Gil", "OR", T0 + 5_000),  // late: [T0, T0+10s) has fired
        auction(105, 7, 10, T0 + 5_000, T0 + 40_000),
        bid(1, 1, 1, T0 + 33_998), // watermark T0+29.998s: [T0+20s, T0+30s) is still open
        person(11, "Eve", "OR", T0 + 25_500),
        auction(106, 11, 10, T0 + 25_500, T0 + 40_000),
        bid(1, 1, 1, T0 + 33_999), // watermark T0+29.999s = end - 1: the window fires
        person(12, "Hal", "OR", T0 + 25_500),
        auction(107, 12, 10, T0 + 25_500, T0 + 40_000),
    ];
    assert_eq!(
        csv(Query::Q8, events),
        format!(
            "id,name,stime\n1,Ann,{T0}\n3,Cy,{}\n8,Dee,{}\n11,Eve,{}\n",
            T0 + 10_000,
            T0 + 20_000,
            T0 + 20_000
        )
    );
}

#[test]
fn q11_sessions_merge_touching_windows_and_drop_late_loners() {
    let events = vec![
        bid(1, 1, 1, T0),
        bid(1, 2, 1, T0),
        bid(1, 1, 1, T0 + 5_000),          // bidder 1: [T0, T0+15s)
        bid(1, 3, 1, T0 + 12_000),         // bidder 3: [T0+12s, T0+22s); watermark now T0+8s
        bid(1, 3, 1, T0),                  // bidder 3: [T0, T0+10s), apart from the first
        bid(1, 3, 1, T0 + 6_000),          // bridges both: [T0, T0+22s), 3 bids
        bid(1, 2, 1, T0 + 10_001),         // 1 ms past bidder 2's session: a new one
        bid(1, 1, 1, T0 + 15_000),         // exactly the gap after T0+5s: touches, merges
        person(9, "P", "OR", T0 + 40_000), // watermark T0+36s
        bid(1, 4, 1, T0 + 20_000),         // late and alone: dropped
        bid(1, 1, 1, T0 + 20_000),         // bidder 1's session has fired: late and alone, dropped
        bid(1, 5, 1, T0 + 30_000),         // [T0+30s, T0+40s) is open
        bid(1, 5, 1, T0 + 25_000),         // late, but touches bidder 5's open session: merged
    ];
    // Rows by session end.
    let expected = format!(
        "bidder,bid_count,starttime,endtime\n\
         2,1,{T0},{}\n2,1,{},{}\n3,3,{T0},{}\n1,3,{T0},{}\n5,2,{},{}\n",
        T0 + 10_000,
        T0 + 10_001,
        T0 + 20_001,
        T0 + 22_000,
        T0 + 25_000,
        T0 + 25_000,
        T0 + 40_000
    );
    assert_eq!(csv(Query::Q11, events), expected);
}

#[test]
fn unknown_query_names_the_known_ones() {
    let err = "q6".parse::<Query>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown query \"q6\": the reference evaluates q0, q1, q2, q3, q4, q5, q7, q8, q11"
    );
    assert_eq!("Q11".parse::<Query>(), Ok(Query::Q11));
}

#[test]
fn generated_events_give_results_for_every_query() {
    let g = Generator::new(GeneratorConfig::default()).unwrap();
    let events = g
        .iter_from(0)
        .take(20_000)
        .map(Ok::<_, std::convert::Infallible>);
    let mut counts = vec![0u64; Query::ALL.len()];
    let n = evaluate_many(&Query::ALL, events, |i, _| counts[i] += 1).unwrap();
    assert_eq!(n, 20_000);
    let count = |q: Query| counts[Query::ALL.iter().position(|&x| x == q).unwrap()];
    assert_eq!(count(Query::Q0), 18_400);
    assert_eq!(count(Query::Q1), 18_400);
    for q in [
        Query::Q2,
        Query::Q3,
        Query::Q4,
        Query::Q5,
        Query::Q7,
        Query::Q8,
        Query::Q11,
    ] {
        assert!(count(q) > 0, "{q} gave no rows");
    }
}
