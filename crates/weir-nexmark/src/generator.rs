//! The Nexmark event generator: event number `n` is a pure function of `n` and the
//! configuration, so a source can start (or restart after a failure) at any offset, and
//! parallel subtasks can each take every k-th event.
//!
//! # Why not the `nexmark` crate
//!
//! crates.io's `nexmark` (0.2.0, from RisingWave) was checked first. It follows the same
//! Beam design but differs from the Java generator that nexmark-flink runs, in ways the
//! queries see: states, cities and names are lower case (`"or"`, so q3's
//! `state = 'OR'` finds nothing), strings have exact lengths and no spaces, timestamps are
//! computed in `f32` and rounded instead of truncated (events shift by a millisecond
//! across window boundaries), its default base time is the wall clock, and it brings `rand`
//! 0.8 and `lazy_static`. So this module implements the reference semantics directly.
//!
//! # Semantics (nexmark-flink's `NexmarkGenerator` and model generators)
//!
//! * Event `n` is a person, an auction or a bid by `n % 50`: 0 person, 1–3 auction,
//!   4–49 bid (proportions 1:3:46).
//! * Its time is `base_time + floor(floor(n × 10⁶ / tps µs) / 1000)` ms: `tps` events per
//!   second of event time (default 10 M, the suite's rate), monotonic, so a generated
//!   stream never has a late event.
//! * Ids: persons and auctions are numbered densely from 1000 in event order (the last
//!   person or auction id "so far" is computed from `n`); categories are 10–14.
//! * Hot keys: 3 of 4 auctions go to a hot seller (the first person of the last block of
//!   100), 1 of 2 bids to a hot auction (the first of the last block of 100 auctions), 3 of
//!   4 bids to a hot bidder (the second person of the last block of 100); the others pick
//!   uniformly among the last 1000 people (+10 not yet created) or the last 100 auctions
//!   (+10 not yet created), so some bids name auctions that appear later.
//! * Auctions expire a random time after they open, on average the event-time span of the
//!   next 100 auctions (at 10 M events/s that is 1–2 ms).
//! * Prices are `round(10^(6u) × 100)` cents for a uniform `u`; strings, e-mails, credit
//!   cards, channels, URLs and the `extra` padding (to average sizes of 200, 500 and 100
//!   bytes) follow the Java generator's shapes.
//! * Randomness: the fields of event `n` are drawn, in the Java generator's order, from a
//!   `java.util.Random` seeded with `n` (as Beam's generator does; nexmark-flink's uses an
//!   unseeded `Random` and so is not reproducible). Hot-channel and channel URLs are
//!   derived the same way from fixed seeds.
//! * Bidder ids are person ids (the first person is 1000), as in Beam: one nexmark-flink
//!   revision adds the person-id offset twice to bidders; that only shifts ids and changes
//!   no query's shape.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use crate::extra::Extra;
use crate::java_random::JavaRandom;
use crate::model::{Auction, Bid, EpochMillis, Event, Person};

/// The first person id: ids start high so that small runs still find join partners.
pub const FIRST_PERSON_ID: i64 = 1000;
/// The first auction id.
pub const FIRST_AUCTION_ID: i64 = 1000;
/// The first category id; there are [`NUM_CATEGORIES`] from it.
pub const FIRST_CATEGORY_ID: i64 = 10;
/// How many categories auctions are spread over.
pub const NUM_CATEGORIES: i32 = 5;
/// The suite's event-time rate: 10 M events per second of event time.
pub const DEFAULT_TPS: u64 = 10_000_000;
/// The default time of event 0: 2024-01-01T00:00:00Z. Fixed (not the wall clock) so that
/// the same configuration always yields the same events.
pub const DEFAULT_BASE_TIME: EpochMillis = 1_704_067_200_000;

const PERSON_ID_LEAD: i64 = 10;
const AUCTION_ID_LEAD: i64 = 10;
const HOT_SELLER_RATIO: i64 = 100;
const HOT_AUCTION_RATIO: i64 = 100;
const HOT_BIDDER_RATIO: i64 = 100;
const HOT_CHANNELS_RATIO: i32 = 2;
const CHANNELS_NUMBER: i32 = 10_000;
const MIN_STRING_LENGTH: i32 = 3;
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];

/// The generator's knobs, with the benchmark's defaults (`nexmark.yaml` and
/// `NexmarkConfiguration`).
#[derive(Clone, Debug, PartialEq)]
pub struct GeneratorConfig {
    /// Events per second of event time (`--tps`, the DDL's `first-event.rate`).
    pub tps: u64,
    /// The time of event 0, in epoch ms.
    pub base_time: EpochMillis,
    /// Persons per `person + auction + bid` events.
    pub person_proportion: u32,
    /// Auctions per `person + auction + bid` events.
    pub auction_proportion: u32,
    /// Bids per `person + auction + bid` events.
    pub bid_proportion: u32,
    /// How many recent people sellers and bidders are drawn from.
    pub num_active_people: u32,
    /// How many recent auctions bids are drawn from.
    pub num_in_flight_auctions: u32,
    /// 1 in this many bids goes to a random auction, the rest to a hot one.
    pub hot_auction_ratio: u32,
    /// 1 in this many auctions goes to a random seller, the rest to a hot one.
    pub hot_sellers_ratio: u32,
    /// 1 in this many bids comes from a random bidder, the rest from a hot one.
    pub hot_bidders_ratio: u32,
    /// Average size of a person, which `extra` pads to.
    pub avg_person_byte_size: u32,
    /// Average size of an auction, which `extra` pads to.
    pub avg_auction_byte_size: u32,
    /// Average size of a bid, which `extra` pads to.
    pub avg_bid_byte_size: u32,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            tps: DEFAULT_TPS,
            base_time: DEFAULT_BASE_TIME,
            person_proportion: 1,
            auction_proportion: 3,
            bid_proportion: 46,
            num_active_people: 1000,
            num_in_flight_auctions: 100,
            hot_auction_ratio: 2,
            hot_sellers_ratio: 4,
            hot_bidders_ratio: 4,
            avg_person_byte_size: 200,
            avg_auction_byte_size: 500,
            avg_bid_byte_size: 100,
        }
    }
}

/// A configuration the generator cannot run with; the message names the setting and the
/// values it accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Which kind event number `n` is: it depends on `n` alone, so a reader can skip kinds it
/// does not need without generating them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A [`Person`].
    Person,
    /// An [`Auction`].
    Auction,
    /// A [`Bid`].
    Bid,
}

/// An event's place in the repeating person/auction/bid cycle.
#[derive(Clone, Copy)]
struct Position {
    /// Which cycle (`id / total`).
    epoch: i64,
    /// Where in the cycle (`id % total`).
    offset: i64,
}

/// Generates Nexmark events by number; cheap to clone and to share between threads.
#[derive(Clone, Debug)]
pub struct Generator {
    cfg: GeneratorConfig,
    total: i64,
    inter_event_delay_us: f64,
}

impl Generator {
    /// A generator for `cfg`, or the reason `cfg` cannot be used.
    pub fn new(cfg: GeneratorConfig) -> Result<Self, ConfigError> {
        let positive = [
            ("tps", cfg.tps as u128),
            ("person proportion", cfg.person_proportion as u128),
            ("auction proportion", cfg.auction_proportion as u128),
            ("bid proportion", cfg.bid_proportion as u128),
            ("active people", cfg.num_active_people as u128),
            ("in-flight auctions", cfg.num_in_flight_auctions as u128),
            ("hot auction ratio", cfg.hot_auction_ratio as u128),
            ("hot sellers ratio", cfg.hot_sellers_ratio as u128),
            ("hot bidders ratio", cfg.hot_bidders_ratio as u128),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(ConfigError(format!(
                    "the generator's {name} is 0; it must be at least 1"
                )));
            }
        }
        let total = cfg.person_proportion as i64
            + cfg.auction_proportion as i64
            + cfg.bid_proportion as i64;
        let inter_event_delay_us = 1_000_000.0 / cfg.tps as f64;
        Ok(Generator {
            cfg,
            total,
            inter_event_delay_us,
        })
    }

    /// The configuration this generator runs with.
    pub fn config(&self) -> &GeneratorConfig {
        &self.cfg
    }

    /// The kind of event number `n`.
    pub fn kind(&self, n: u64) -> EventKind {
        let rem = (n % self.total as u64) as i64;
        if rem < self.cfg.person_proportion as i64 {
            EventKind::Person
        } else if rem < self.cfg.person_proportion as i64 + self.cfg.auction_proportion as i64 {
            EventKind::Auction
        } else {
            EventKind::Bid
        }
    }

    /// The event time of event number `n`: the Java generator's
    /// `baseTime + (long)(n * interEventDelayUs) / 1000`.
    pub fn timestamp(&self, n: u64) -> EpochMillis {
        self.cfg
            .base_time
            .saturating_add(((n as f64 * self.inter_event_delay_us) as i64) / 1000)
    }

    /// Event number `n` (0-based), the same on every call.
    pub fn event(&self, n: u64) -> Event {
        let id = n as i64;
        let ts = self.timestamp(n);
        let mut rng = JavaRandom::new(id);
        let pos = self.position(id);
        if pos.offset < self.cfg.person_proportion as i64 {
            Event::Person(self.person(pos, ts, &mut rng))
        } else if pos.offset
            < self.cfg.person_proportion as i64 + self.cfg.auction_proportion as i64
        {
            Event::Auction(self.auction(id, ts, &mut rng))
        } else {
            Event::Bid(self.bid(pos, ts, &mut rng))
        }
    }

    /// Events `offset, offset + 1, ...` without end: resuming at a checkpointed offset
    /// yields exactly the events a run without a failure would have.
    pub fn iter_from(&self, offset: u64) -> impl Iterator<Item = Event> + '_ {
        (offset..).map(move |n| self.event(n))
    }

    /// Where event `id` falls in the person/auction/bid cycle: one division per event.
    fn position(&self, id: i64) -> Position {
        Position {
            epoch: id / self.total,
            offset: id % self.total,
        }
    }

    /// The Java `lastBase0PersonId`: the newest person id so far (base 0).
    fn last_base0_person_id(&self, pos: Position) -> i64 {
        let pp = self.cfg.person_proportion as i64;
        pos.epoch * pp + pos.offset.min(pp - 1)
    }

    /// The Java `lastBase0AuctionId`: the newest auction id so far (base 0).
    fn last_base0_auction_id(&self, pos: Position) -> i64 {
        let pp = self.cfg.person_proportion as i64;
        let ap = self.cfg.auction_proportion as i64;
        let Position {
            mut epoch,
            mut offset,
        } = pos;
        if offset < pp {
            epoch -= 1;
            offset = ap - 1;
        } else if offset >= pp + ap {
            offset = ap - 1;
        } else {
            offset -= pp;
        }
        epoch * ap + offset
    }

    fn next_base0_person_id(&self, pos: Position, rng: &mut JavaRandom) -> i64 {
        let num_people = self.last_base0_person_id(pos) + 1;
        let active = num_people.min(self.cfg.num_active_people as i64);
        num_people - active + next_long(rng, active + PERSON_ID_LEAD)
    }

    fn next_base0_auction_id(&self, pos: Position, rng: &mut JavaRandom) -> i64 {
        let max = self.last_base0_auction_id(pos);
        let min = (max - self.cfg.num_in_flight_auctions as i64).max(0);
        min + next_long(rng, max - min + 1 + AUCTION_ID_LEAD)
    }

    fn person(&self, pos: Position, ts: EpochMillis, rng: &mut JavaRandom) -> Person {
        let person_id = self.last_base0_person_id(pos) + FIRST_PERSON_ID;
        let first = FIRST_NAMES[rng.next_int_bounded(FIRST_NAMES.len() as i32) as usize];
        let last = LAST_NAMES[rng.next_int_bounded(LAST_NAMES.len() as i32) as usize];
        let name = format!("{first} {last}");
        let mut email = next_string(rng, 7, ' ');
        email.push('@');
        email.push_str(&next_string(rng, 5, ' '));
        email.push_str(".com");
        let mut credit_card = String::with_capacity(19);
        for i in 0..4 {
            if i > 0 {
                credit_card.push(' ');
            }
            credit_card.push_str(&format!("{:04}", rng.next_int_bounded(10_000)));
        }
        let city = US_CITIES[rng.next_int_bounded(US_CITIES.len() as i32) as usize];
        let state = US_STATES[rng.next_int_bounded(US_STATES.len() as i32) as usize];
        let size = 8 + name.len() + email.len() + credit_card.len() + city.len() + state.len();
        let extra = next_extra(rng, size, self.cfg.avg_person_byte_size as usize);
        Person {
            id: person_id,
            name,
            email_address: email,
            credit_card,
            city: city.to_string(),
            state: state.to_string(),
            date_time: ts,
            extra,
        }
    }

    fn auction(&self, id: i64, ts: EpochMillis, rng: &mut JavaRandom) -> Auction {
        let pos = self.position(id);
        let auction_id = self.last_base0_auction_id(pos) + FIRST_AUCTION_ID;
        let seller = if rng.next_int_bounded(self.cfg.hot_sellers_ratio as i32) > 0 {
            (self.last_base0_person_id(pos) / HOT_SELLER_RATIO) * HOT_SELLER_RATIO
        } else {
            self.next_base0_person_id(pos, rng)
        } + FIRST_PERSON_ID;
        let category = FIRST_CATEGORY_ID + rng.next_int_bounded(NUM_CATEGORIES) as i64;
        let initial_bid = next_price(rng);
        // How long until `num_in_flight_auctions` more auctions have opened.
        let events_for_auctions = (self.cfg.num_in_flight_auctions as i64 * self.total)
            / self.cfg.auction_proportion as i64;
        let horizon = self.timestamp((id + events_for_auctions) as u64) - ts;
        let expires = ts + 1 + next_long(rng, (horizon * 2).max(1));
        let item_name = next_string(rng, 20, ' ');
        let description = next_string(rng, 100, ' ');
        let reserve = initial_bid + next_price(rng);
        let size = 8 + item_name.len() + description.len() + 8 + 8 + 8 + 8 + 8;
        let extra = next_extra(rng, size, self.cfg.avg_auction_byte_size as usize);
        Auction {
            id: auction_id,
            item_name,
            description,
            initial_bid,
            reserve,
            date_time: ts,
            expires,
            seller,
            category,
            extra,
        }
    }

    fn bid(&self, pos: Position, ts: EpochMillis, rng: &mut JavaRandom) -> Bid {
        let auction = if rng.next_int_bounded(self.cfg.hot_auction_ratio as i32) > 0 {
            (self.last_base0_auction_id(pos) / HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
        } else {
            self.next_base0_auction_id(pos, rng)
        } + FIRST_AUCTION_ID;
        let bidder = if rng.next_int_bounded(self.cfg.hot_bidders_ratio as i32) > 0 {
            (self.last_base0_person_id(pos) / HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
        } else {
            self.next_base0_person_id(pos, rng)
        } + FIRST_PERSON_ID;
        let price = next_price(rng);
        let channels = channels();
        // Borrowed from the channel table built once: no allocation or copy per bid.
        let (channel, url): (&'static str, &'static str) =
            if rng.next_int_bounded(HOT_CHANNELS_RATIO) > 0 {
                let i = rng.next_int_bounded(HOT_CHANNELS.len() as i32) as usize;
                (HOT_CHANNELS[i], &channels.hot_urls[i])
            } else {
                let i = rng.next_int_bounded(CHANNELS_NUMBER) as usize;
                let (channel, url) = &channels.others[i];
                (channel, url)
            };
        let extra = next_extra(rng, 8 + 8 + 8 + 8, self.cfg.avg_bid_byte_size as usize);
        Bid {
            auction,
            bidder,
            price,
            channel: Cow::Borrowed(channel),
            url: Cow::Borrowed(url),
            date_time: ts,
            extra,
        }
    }
}

/// `LongGenerator.nextLong`: uniform in `[0, n)`.
fn next_long(rng: &mut JavaRandom, n: i64) -> i64 {
    if n < i32::MAX as i64 {
        rng.next_int_bounded(n as i32) as i64
    } else {
        (rng.next_long() % n).abs()
    }
}

/// `PriceGenerator.nextPrice`: `Math.round(10^(6u) * 100)`, from 100 to 100 000 000 cents.
fn next_price(rng: &mut JavaRandom) -> i64 {
    price_for_exponent(rng.next_double() * 6.0)
}

/// The reference's price for the exponent `x` in `[0, 6)`: Java's
/// `Math.round(Math.pow(10, x) * 100)`, i.e. `floor(pow(10, x) × 100 + 0.5)` in `f64`.
/// `pow` is the slow part of a bid, so this is the only place it is called.
pub(crate) fn exact_price(x: f64) -> i64 {
    (10f64.powf(x) * 100.0 + 0.5).floor() as i64
}

/// `2^(j/64)` for `j` in `0..64`, for [`price_for_exponent`].
fn exp2_table() -> &'static [f64; 64] {
    static TABLE: OnceLock<[f64; 64]> = OnceLock::new();
    TABLE.get_or_init(|| std::array::from_fn(|j| 2f64.powf(j as f64 / 64.0)))
}

/// [`exact_price`] without `pow`, giving the same integer for every `x` in `[0, 6)`.
///
/// `y = 100 × 10^x` is computed as `100 × 2^k × 2^(j/64) × e^(r ln 2)` (`t = x log2 10 =
/// k + j/64 + r`, `|r| ≤ 1/128`, a degree-5 series: its first omitted term is below
/// `4e-17`), with a relative error below `2e-14`. `pow` is within an ulp of `10^x` and the
/// reference's `× 100` and `+ 0.5` add at most an ulp of `y` (≤ `1.5e-8` for `y ≤ 10^8`).
/// So when `y + 0.5` lies farther than `m = 10^-12 × y + 10^-6` from an integer, no
/// integer lies between it and the reference's value, and both round down to the same
/// one; otherwise (about 1 price in 10 000) the reference's own expression decides. A
/// test compares the two over millions of exponents, half-way cases included.
fn price_for_exponent(x: f64) -> i64 {
    const LOG2_10: f64 = std::f64::consts::LOG2_10;
    const LN_2: f64 = std::f64::consts::LN_2;
    let t = x * LOG2_10;
    if !(0.0..20.0).contains(&t) {
        return exact_price(x);
    }
    // Nearest multiple of 1/64 (t ≥ 0, so truncating `+ 0.5` rounds).
    let n = (t * 64.0 + 0.5) as u32;
    let r = t - n as f64 / 64.0;
    let z = r * LN_2;
    let series = 1.0 + z * (1.0 + z * (0.5 + z * (1.0 / 6.0 + z * (1.0 / 24.0 + z / 120.0))));
    let scale = (1u64 << (n >> 6)) as f64 * 100.0;
    let y = exp2_table()[(n & 63) as usize] * series * scale;
    let v = y + 0.5;
    let floor = v as i64;
    let frac = v - floor as f64;
    let margin = y * 1e-12 + 1e-6;
    if frac > margin && frac < 1.0 - margin {
        floor
    } else {
        exact_price(x)
    }
}

/// `StringsGenerator.nextString`: 3 to `max - 1` characters, lower-case letters with a
/// `delimiter` in 1 of 13 places, trimmed of spaces.
fn next_string(rng: &mut JavaRandom, max: i32, delimiter: char) -> String {
    let len = MIN_STRING_LENGTH + rng.next_int_bounded(max - MIN_STRING_LENGTH);
    let mut s = String::with_capacity(len as usize);
    for _ in 0..len {
        if rng.next_int_bounded(13) == 0 {
            s.push(delimiter);
        } else {
            s.push((b'a' + rng.next_int_bounded(26) as u8) as char);
        }
    }
    if s.starts_with(' ') || s.ends_with(' ') {
        s = s.trim_matches(' ').to_string();
    }
    s
}

/// `StringsGenerator.nextExtra`: padding so that `current + extra` averages `average`.
/// Drawn last of its event, so it is kept as the random state and produced when written
/// ([`Extra`]).
fn next_extra(rng: &mut JavaRandom, current: usize, average: usize) -> Extra {
    if current > average {
        return Extra::default();
    }
    let wanted = (average - current) as i32;
    let delta = (wanted as f64 * 0.2 + 0.5).floor() as i32;
    let min = wanted - delta;
    let size = min
        + if delta == 0 {
            0
        } else {
            rng.next_int_bounded(2 * delta)
        };
    Extra::seeded(rng, size as usize)
}

/// A base URL as the Java `getBaseUrl`: three short path parts with `_` delimiters.
fn base_url(rng: &mut JavaRandom) -> String {
    format!(
        "https://www.nexmark.com/{}/{}/{}/item.htm?query=1",
        next_string(rng, 5, '_'),
        next_string(rng, 5, '_'),
        next_string(rng, 5, '_')
    )
}

struct Channels {
    hot_urls: Vec<String>,
    others: Vec<(String, String)>,
}

/// The hot channels' URLs and the 10 000 other channels with theirs, built once.
fn channels() -> &'static Channels {
    static CHANNELS: OnceLock<Channels> = OnceLock::new();
    CHANNELS.get_or_init(|| {
        // Seeds below zero for the hot URLs, so they differ from channel-0..3's.
        let hot_urls = (0..HOT_CHANNELS.len() as i64)
            .map(|i| base_url(&mut JavaRandom::new(-1 - i)))
            .collect();
        let others = (0..CHANNELS_NUMBER)
            .map(|i| {
                let mut rng = JavaRandom::new(i as i64);
                let mut url = base_url(&mut rng);
                if rng.next_int_bounded(10) > 0 {
                    // Java's `Math.abs(Integer.reverse(i))`, int overflow included.
                    url.push_str(&format!("&channel_id={}", i.reverse_bits().wrapping_abs()));
                }
                (format!("channel-{i}"), url)
            })
            .collect();
        Channels { hot_urls, others }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `pow`-free price equals the reference's expression: over millions of exponents
    /// as the generator draws them, and around the exponents of every kind of half-way
    /// price (`m + 0.5` cents), where the fast path must hand over to `pow`.
    #[test]
    fn price_without_pow_is_the_reference_price() {
        let mut rng = JavaRandom::new(0x5eed);
        for _ in 0..3_000_000 {
            let x = rng.next_double() * 6.0;
            assert_eq!(price_for_exponent(x), exact_price(x), "x = {x:e}");
        }
        // Prices drawn as the generator draws them (first draws of per-event seeds).
        for seed in 0..1_000_000 {
            let x = JavaRandom::new(seed).next_double() * 6.0;
            assert_eq!(price_for_exponent(x), exact_price(x), "seed {seed}");
        }
        // Exponents next to half-way values, from 100.5 to 99 999 999.5 cents.
        let mut m = 100.0f64;
        let mut handed_over = 0;
        while m < 1e8 {
            let x = ((m + 0.5) / 100.0).log10();
            for d in -3i64..=3 {
                let x = f64::from_bits((x.to_bits() as i64 + d) as u64);
                if !(0.0..6.0).contains(&x) {
                    continue;
                }
                assert_eq!(price_for_exponent(x), exact_price(x), "x = {x:e}");
                let y = 10f64.powf(x) * 100.0 + 0.5;
                if (y - y.round()).abs() < 1e-6 {
                    handed_over += 1;
                }
            }
            m = (m * 1.0007).floor().max(m + 1.0);
        }
        assert!(handed_over > 1_000, "{handed_over} half-way cases");
        // The ends of the range.
        for x in [0.0, 1e-300, 6.0 - 1e-15, 5.999_999_999] {
            assert_eq!(price_for_exponent(x), exact_price(x), "x = {x:e}");
        }
    }
}
