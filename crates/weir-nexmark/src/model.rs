//! The Nexmark events, with the fields of the benchmark's DDL (`ddl_gen.sql`).
//!
//! Field names follow the DDL (`emailAddress`, `dateTime`, ...) in the JSON form; in Rust
//! they are snake case. Ids and prices are SQL `BIGINT`s (`i64`); `dateTime` and `expires`
//! are SQL `TIMESTAMP(3)`s, held as epoch milliseconds (UTC).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

pub use crate::extra::Extra;

/// Milliseconds since 1970-01-01T00:00:00Z: how every timestamp is held and written, so
/// that results never depend on a time zone.
pub type EpochMillis = i64;

/// A person registering to sell or bid (`event_type` 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Person {
    /// The person's id: sellers and bidders refer to it.
    pub id: i64,
    /// Full name, "First Last".
    pub name: String,
    /// Email address.
    pub email_address: String,
    /// Credit card number, four groups of four digits.
    pub credit_card: String,
    /// US city.
    pub city: String,
    /// US state, two upper-case letters (q3 filters on it).
    pub state: String,
    /// Event time.
    #[serde(deserialize_with = "crate::json::de_timestamp")]
    pub date_time: EpochMillis,
    /// Padding that brings the event to its average size; generated events keep it as a
    /// seed until it is written ([`Extra`]).
    pub extra: Extra,
}

/// An item put up for auction (`event_type` 1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Auction {
    /// The auction's id: bids refer to it.
    pub id: i64,
    /// Name of the item.
    pub item_name: String,
    /// Description of the item.
    pub description: String,
    /// Opening price, in cents.
    pub initial_bid: i64,
    /// Lowest price the seller accepts, in cents.
    pub reserve: i64,
    /// Event time: when the auction opens.
    #[serde(deserialize_with = "crate::json::de_timestamp")]
    pub date_time: EpochMillis,
    /// When the auction closes (q4 joins bids that fall between `date_time` and this).
    #[serde(deserialize_with = "crate::json::de_timestamp")]
    pub expires: EpochMillis,
    /// The selling person's id.
    pub seller: i64,
    /// Category id (q3 and q4 use it).
    pub category: i64,
    /// Padding that brings the event to its average size; generated events keep it as a
    /// seed until it is written ([`Extra`]).
    pub extra: Extra,
}

/// A bid on an auction (`event_type` 2): 46 of every 50 events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bid {
    /// The auction bid on.
    pub auction: i64,
    /// The bidding person's id.
    pub bidder: i64,
    /// Price offered, in cents.
    pub price: i64,
    /// Where the bid came from ("Google", "channel-42", ...). A `Cow` because the
    /// generator draws it from 10 004 fixed channels: it lends the one string of each
    /// (`Cow::Borrowed`) instead of allocating and copying it for every bid, while a parsed
    /// bid owns its text. Serialized as a plain string either way.
    pub channel: Cow<'static, str>,
    /// The page the bid was placed on; a `Cow` for the same reason as `channel` (each
    /// channel has one URL).
    pub url: Cow<'static, str>,
    /// Event time.
    #[serde(deserialize_with = "crate::json::de_timestamp")]
    pub date_time: EpochMillis,
    /// Padding that brings the event to its average size; generated events keep it as a
    /// seed until it is written ([`Extra`]).
    pub extra: Extra,
}

/// One Nexmark event: the benchmark's single source table holds all three kinds, told apart
/// by `event_type`, and its watermark (`dateTime - 4 s`) advances over all of them.
///
/// The serde derives are for keeping events in checkpointed state (postcard); the JSON
/// line format is [`Event::to_json`] and [`crate::json::parse_line`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// `event_type` 0.
    Person(Person),
    /// `event_type` 1.
    Auction(Auction),
    /// `event_type` 2.
    Bid(Bid),
}

impl Event {
    /// The event time (the DDL's computed `dateTime` column), which the watermark follows.
    pub fn date_time(&self) -> EpochMillis {
        match self {
            Event::Person(p) => p.date_time,
            Event::Auction(a) => a.date_time,
            Event::Bid(b) => b.date_time,
        }
    }

    /// The DDL's `event_type`: 0 person, 1 auction, 2 bid.
    pub fn event_type(&self) -> u8 {
        match self {
            Event::Person(_) => 0,
            Event::Auction(_) => 1,
            Event::Bid(_) => 2,
        }
    }

    /// The event as one JSON line (without the newline), nested as the DDL's row:
    /// `{"event_type":2,"bid":{...}}`; the line holds only its own kind's object.
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(256);
        self.write_json(&mut out);
        // serde_json writes valid UTF-8 only.
        String::from_utf8(out).unwrap_or_default()
    }

    /// Appends the event's JSON line (without the newline) to `out`; the generator's
    /// writer uses it to avoid a `String` per event.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        #[derive(Serialize)]
        struct Line<'a> {
            event_type: u8,
            #[serde(skip_serializing_if = "Option::is_none")]
            person: Option<&'a Person>,
            #[serde(skip_serializing_if = "Option::is_none")]
            auction: Option<&'a Auction>,
            #[serde(skip_serializing_if = "Option::is_none")]
            bid: Option<&'a Bid>,
        }
        let line = Line {
            event_type: self.event_type(),
            person: match self {
                Event::Person(p) => Some(p),
                _ => None,
            },
            auction: match self {
                Event::Auction(a) => Some(a),
                _ => None,
            },
            bid: match self {
                Event::Bid(b) => Some(b),
                _ => None,
            },
        };
        // Serializing plain structs of strings and integers into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, &line);
    }
}
