//! q5, q7, q8 and q11: the windowed queries.
//!
//! Windows are plain map entries keyed by their start or end; an element counts in a
//! window only if the window had not fired when it arrived (`end - 1 > watermark`).
//! Results are emitted at the end of the input, in window order: the result of a window
//! does not depend on when it fired, only on which elements it accepted.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{window_start, Evaluator};
use crate::csv::{Row, Value};
use crate::model::{EpochMillis, Event, Extra};

/// 10 s: the size of q5's, q7's and q8's windows, and q11's session gap.
const TEN_SECONDS: i64 = 10_000;
/// q5's slide.
const TWO_SECONDS: i64 = 2_000;

/// Whether window `[_, end)` still accepts elements at `watermark`.
fn open(end: EpochMillis, watermark: EpochMillis) -> bool {
    end - 1 > watermark
}

/// q5: per HOP window (10 s, sliding 2 s), the auctions with the most bids.
#[derive(Default)]
pub(super) struct Q5 {
    /// Bid counts per auction, per window start.
    windows: BTreeMap<EpochMillis, HashMap<i64, i64>>,
}

impl Evaluator for Q5 {
    fn on_event(&mut self, event: &Event, watermark: EpochMillis, _: &mut dyn FnMut(Row)) {
        let Event::Bid(b) = event else { return };
        // The windows holding t: starts s with s <= t < s + 10 s, every 2 s.
        let mut start = window_start(b.date_time, TWO_SECONDS);
        while start > b.date_time - TEN_SECONDS {
            if open(start + TEN_SECONDS, watermark) {
                *self
                    .windows
                    .entry(start)
                    .or_default()
                    .entry(b.auction)
                    .or_insert(0) += 1;
            }
            start -= TWO_SECONDS;
        }
    }

    fn finish(self: Box<Self>, emit: &mut dyn FnMut(Row)) {
        for counts in self.windows.values() {
            let Some(&max) = counts.values().max() else {
                continue;
            };
            let mut hot: Vec<i64> = counts
                .iter()
                .filter(|&(_, &n)| n >= max)
                .map(|(&a, _)| a)
                .collect();
            hot.sort_unstable();
            for auction in hot {
                emit(vec![Value::Int(auction), Value::Int(max)]);
            }
        }
    }
}

/// A bid that may match its window's maximum price in q7.
#[derive(Clone)]
struct Candidate {
    auction: i64,
    bidder: i64,
    price: i64,
    date_time: EpochMillis,
    extra: Extra,
}

#[derive(Default)]
struct Q7Window {
    /// The highest price among the bids the window accepted; None while it has none.
    max: Option<i64>,
    /// Bids with `end - 10 s <= dateTime <= end` and a price not below the current `max`:
    /// the final maximum only grows, so a lower bid can never match.
    candidates: Vec<Candidate>,
}

/// q7: the bids whose price is the maximum of a 10 s TUMBLE window, joined back by price
/// and time (`window end - 10 s <= dateTime <= window end`).
#[derive(Default)]
pub(super) struct Q7 {
    /// By window end.
    windows: BTreeMap<EpochMillis, Q7Window>,
}

impl Evaluator for Q7 {
    fn on_event(&mut self, event: &Event, watermark: EpochMillis, _: &mut dyn FnMut(Row)) {
        let Event::Bid(b) = event else { return };
        let t = b.date_time;
        // The aggregation side: the window holding t, unless it has fired.
        let end = window_start(t, TEN_SECONDS) + TEN_SECONDS;
        if open(end, watermark) {
            let w = self.windows.entry(end).or_default();
            if w.max.is_none_or(|m| b.price > m) {
                w.max = Some(b.price);
                w.candidates.retain(|c| c.price >= b.price);
            }
        }
        // The join side: every bid, with each window end e in [t, t + 10 s].
        let mut ends = vec![end];
        if t.rem_euclid(TEN_SECONDS) == 0 {
            ends.push(t);
        }
        for e in ends {
            let w = self.windows.entry(e).or_default();
            if w.max.is_none_or(|m| b.price >= m) {
                w.candidates.push(Candidate {
                    auction: b.auction,
                    bidder: b.bidder,
                    price: b.price,
                    date_time: t,
                    extra: b.extra.clone(),
                });
            }
        }
    }

    fn finish(self: Box<Self>, emit: &mut dyn FnMut(Row)) {
        for w in self.windows.into_values() {
            let Some(max) = w.max else { continue };
            for c in w.candidates.into_iter().filter(|c| c.price == max) {
                // The SQL selects (auction, price, bidder, ...) into the sink's
                // (auction, bidder, price, ...) by position.
                emit(vec![
                    Value::Int(c.auction),
                    Value::Int(c.price),
                    Value::Int(c.bidder),
                    Value::Int(c.date_time),
                    Value::Str(c.extra.into_string()),
                ]);
            }
        }
    }
}

/// q8: persons who opened an auction in the same 10 s TUMBLE window as they registered.
#[derive(Default)]
pub(super) struct Q8 {
    /// Per window start.
    windows: BTreeMap<EpochMillis, Q8Window>,
}

/// One q8 window's two sides.
#[derive(Default)]
struct Q8Window {
    /// Distinct (id, name) of the persons it accepted.
    persons: BTreeSet<(i64, String)>,
    /// Distinct sellers of the auctions it accepted.
    sellers: HashSet<i64>,
}

impl Evaluator for Q8 {
    fn on_event(&mut self, event: &Event, watermark: EpochMillis, _: &mut dyn FnMut(Row)) {
        let (t, person, seller) = match event {
            Event::Person(p) => (p.date_time, Some((p.id, p.name.clone())), None),
            Event::Auction(a) => (a.date_time, None, Some(a.seller)),
            Event::Bid(_) => return,
        };
        let start = window_start(t, TEN_SECONDS);
        if !open(start + TEN_SECONDS, watermark) {
            return;
        }
        let w = self.windows.entry(start).or_default();
        if let Some(p) = person {
            w.persons.insert(p);
        }
        if let Some(s) = seller {
            w.sellers.insert(s);
        }
    }

    fn finish(self: Box<Self>, emit: &mut dyn FnMut(Row)) {
        for (start, w) in self.windows {
            for (id, name) in w.persons {
                if w.sellers.contains(&id) {
                    emit(vec![Value::Int(id), Value::Str(name), Value::Int(start)]);
                }
            }
        }
    }
}

/// A q11 session: `[start, end)` with `end` = last bid + gap.
#[derive(Clone, Copy, Debug)]
struct Session {
    start: EpochMillis,
    end: EpochMillis,
    count: i64,
}

/// q11: bids per bidder per session (gap 10 s).
#[derive(Default)]
pub(super) struct Q11 {
    /// Sessions that have not fired, per bidder.
    live: HashMap<i64, Vec<Session>>,
    /// Sessions that fired: (bidder, session).
    fired: Vec<(i64, Session)>,
}

impl Evaluator for Q11 {
    fn on_event(&mut self, event: &Event, watermark: EpochMillis, _: &mut dyn FnMut(Row)) {
        let Event::Bid(b) = event else { return };
        let sessions = self.live.entry(b.bidder).or_default();
        // Sessions whose end - 1 the watermark has reached have fired and are gone (the
        // watermark only grows, so checking when the key is next touched is exact).
        let mut still_live = Vec::with_capacity(sessions.len() + 1);
        for s in sessions.drain(..) {
            if open(s.end, watermark) {
                still_live.push(s);
            } else {
                self.fired.push((b.bidder, s));
            }
        }
        let mut merged = Session {
            start: b.date_time,
            end: b.date_time + TEN_SECONDS,
            count: 1,
        };
        let mut merged_any = false;
        still_live.retain(|s| {
            let touches = s.start <= merged.end && s.end >= merged.start;
            if touches {
                merged.start = merged.start.min(s.start);
                merged.end = merged.end.max(s.end);
                merged.count += s.count;
                merged_any = true;
            }
            !touches
        });
        // Merging with a live session keeps the window open; alone, a late window is
        // dropped.
        if merged_any || open(merged.end, watermark) {
            still_live.push(merged);
        }
        *sessions = still_live;
    }

    fn finish(self: Box<Self>, emit: &mut dyn FnMut(Row)) {
        let mut all = self.fired;
        for (bidder, sessions) in self.live {
            all.extend(sessions.into_iter().map(|s| (bidder, s)));
        }
        all.sort_unstable_by_key(|(bidder, s)| (s.end, *bidder, s.start));
        for (bidder, s) in all {
            emit(vec![
                Value::Int(bidder),
                Value::Int(s.count),
                Value::Int(s.start),
                Value::Int(s.end),
            ]);
        }
    }
}
