//! JSON lines: the issue's shape, a lossless round trip, and errors that name the line and
//! the field.

use weir_nexmark::generator::{Generator, GeneratorConfig};
use weir_nexmark::json::{parse_line, write_events, EventReader, ReadError};
use weir_nexmark::{Bid, Event};

#[test]
fn round_trip_of_generated_events() {
    let g = Generator::new(GeneratorConfig::default()).unwrap();
    let events: Vec<Event> = g.iter_from(0).take(2_000).collect();
    let mut text = Vec::new();
    assert_eq!(write_events(&mut text, events.clone()).unwrap(), 2_000);
    let back: Vec<Event> = EventReader::new(&text[..]).map(|e| e.unwrap()).collect();
    assert_eq!(back, events);
}

#[test]
fn lines_are_nested_as_the_ddl_and_hold_only_their_kind() {
    let bid = Event::Bid(Bid {
        auction: 1000,
        bidder: 1001,
        price: 250,
        channel: "Google".into(),
        url: "https://x/y".into(),
        date_time: 1_704_067_200_123,
        extra: Default::default(),
    });
    assert_eq!(
        bid.to_json(),
        r#"{"event_type":2,"bid":{"auction":1000,"bidder":1001,"price":250,"channel":"Google","url":"https://x/y","dateTime":1704067200123,"extra":""}}"#
    );
    let g = Generator::new(GeneratorConfig::default()).unwrap();
    let person = g.event(0).to_json();
    assert!(
        person.starts_with(r#"{"event_type":0,"person":{"id":1000,"name":"#),
        "{person}"
    );
    for key in [
        "emailAddress",
        "creditCard",
        "city",
        "state",
        "dateTime",
        "extra",
    ] {
        assert!(person.contains(&format!("\"{key}\":")), "{key} in {person}");
    }
    assert!(!person.contains("auction") && !person.contains("\"bid\""));
    let auction = g.event(1).to_json();
    for key in [
        "itemName",
        "description",
        "initialBid",
        "reserve",
        "dateTime",
        "expires",
        "seller",
        "category",
    ] {
        assert!(
            auction.contains(&format!("\"{key}\":")),
            "{key} in {auction}"
        );
    }
}

#[test]
fn timestamps_may_be_strings_and_other_kinds_may_be_null() {
    let line = r#"{"event_type":2,"person":null,"auction":null,"bid":{"auction":1,"bidder":2,"price":3,"channel":"c","url":"u","dateTime":"2024-01-01 00:00:01.500","extra":"","more":true}}"#;
    let Event::Bid(b) = parse_line(line, 1).unwrap() else {
        panic!("not a bid")
    };
    assert_eq!(b.date_time, 1_704_067_201_500);
}

fn error_of(text: &str) -> String {
    let mut reader = EventReader::new(text.as_bytes());
    loop {
        match reader.next() {
            Some(Ok(_)) => continue,
            Some(Err(e)) => return e.to_string(),
            None => panic!("no error in {text:?}"),
        }
    }
}

const GOOD: &str = r#"{"event_type":2,"bid":{"auction":1,"bidder":2,"price":3,"channel":"c","url":"u","dateTime":5,"extra":""}}"#;

#[test]
fn a_line_that_does_not_parse() {
    let text = format!("{GOOD}\n\n{{\"event_type\":2,\"bid\":{{\"auction\":1,\n");
    assert_eq!(
        error_of(&text),
        "line 3: not valid JSON: EOF while parsing a value at line 1 column 35"
    );
}

#[test]
fn a_timestamp_that_does_not_parse() {
    let bad = GOOD.replace("\"dateTime\":5", "\"dateTime\":\"yesterday\"");
    let msg = error_of(&format!("{GOOD}\n{bad}\n"));
    assert!(
        msg.starts_with("line 2: field bid.dateTime: timestamp \"yesterday\" does not parse"),
        "{msg}"
    );
    let bad = r#"{"event_type":1,"auction":{"id":1,"itemName":"i","description":"d","initialBid":1,"reserve":2,"dateTime":1,"expires":"2024-02-30 00:00:00","seller":1,"category":10,"extra":""}}"#;
    let msg = error_of(bad);
    assert!(
        msg.starts_with("line 1: field auction.expires: timestamp"),
        "{msg}"
    );
}

#[test]
fn an_unknown_event_type() {
    let bad = GOOD.replace("\"event_type\":2", "\"event_type\":7");
    assert_eq!(
        error_of(&bad),
        "line 1: field event_type: unknown event type 7: expected 0 (person), 1 (auction) or 2 (bid)"
    );
    let bad = GOOD.replace("\"event_type\":2", "\"event_type\":\"bid\"");
    assert_eq!(
        error_of(&bad),
        "line 1: field event_type: expected an integer 0, 1 or 2, found \"bid\""
    );
}

#[test]
fn a_wrong_or_missing_field() {
    let bad = GOOD.replace("\"price\":3", "\"price\":\"3\"");
    assert_eq!(
        error_of(&bad),
        "line 1: field bid.price: expected a 64-bit integer, found \"3\""
    );
    let bad = GOOD.replace("\"url\":\"u\",", "");
    assert_eq!(error_of(&bad), "line 1: field bid.url: missing");
    let bad = GOOD.replace("\"bid\":", "\"person\":");
    assert_eq!(
        error_of(&bad),
        "line 1: field bid: missing: this event_type needs a \"bid\" object"
    );
    assert_eq!(
        error_of("[1,2]"),
        "line 1: expected a JSON object, found [1,2]"
    );
}

#[test]
fn read_errors_carry_the_line() {
    let mut reader = EventReader::new("\n\n{}\n".as_bytes());
    match reader.next() {
        Some(Err(ReadError::Parse(e))) => {
            assert_eq!(e.line, 3);
            assert_eq!(e.field.as_deref(), Some("event_type"));
        }
        other => panic!("{other:?}"),
    }
}

/// Events kept in operator state go through postcard (not self-describing): the
/// timestamp fields must not need `deserialize_any`.
#[test]
fn events_round_trip_through_postcard() {
    let g = Generator::new(GeneratorConfig::default()).unwrap();
    for n in 0..60 {
        let event = g.event(n);
        let bytes = postcard::to_allocvec(&event).unwrap();
        assert_eq!(postcard::from_bytes::<Event>(&bytes).unwrap(), event);
        match event {
            Event::Person(p) => {
                let bytes = postcard::to_allocvec(&p).unwrap();
                assert_eq!(
                    postcard::from_bytes::<weir_nexmark::Person>(&bytes).unwrap(),
                    p
                );
            }
            Event::Auction(a) => {
                let bytes = postcard::to_allocvec(&a).unwrap();
                assert_eq!(
                    postcard::from_bytes::<weir_nexmark::Auction>(&bytes).unwrap(),
                    a
                );
            }
            Event::Bid(b) => {
                let bytes = postcard::to_allocvec(&b).unwrap();
                assert_eq!(postcard::from_bytes::<Bid>(&bytes).unwrap(), b);
            }
        }
    }
}

/// A generated bid lends its channel and URL from the generator's table; parsed back, it
/// owns them. Both forms are equal and write the same JSON line and postcard bytes.
#[test]
fn borrowed_and_owned_channel_and_url_serialize_alike() {
    use std::borrow::Cow;
    let g = weir_nexmark::Generator::new(Default::default()).unwrap();
    let mut checked = 0;
    for n in 0..2_000 {
        let event = g.event(n);
        let Event::Bid(b) = &event else { continue };
        assert!(matches!(b.channel, Cow::Borrowed(_)) && matches!(b.url, Cow::Borrowed(_)));
        let line = event.to_json();
        let parsed = weir_nexmark::json::parse_line(&line, 1).unwrap();
        let Event::Bid(owned) = &parsed else {
            panic!("a bid line parsed as {parsed:?}")
        };
        assert!(matches!(owned.channel, Cow::Owned(_)) && matches!(owned.url, Cow::Owned(_)));
        assert_eq!(&parsed, &event);
        assert_eq!(parsed.to_json(), line);
        assert_eq!(
            postcard::to_allocvec(&parsed).unwrap(),
            postcard::to_allocvec(&event).unwrap()
        );
        checked += 1;
    }
    assert_eq!(checked, 1_840);
}
