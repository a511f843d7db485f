//! q0, q1 and q2: stateless, one row per matching bid, in input order.

use super::Evaluator;
use crate::csv::{Row, Value};
use crate::model::{EpochMillis, Event};

/// q0: every bid, unchanged.
pub(super) struct Q0;

impl Evaluator for Q0 {
    fn on_event(&mut self, event: &Event, _: EpochMillis, emit: &mut dyn FnMut(Row)) {
        if let Event::Bid(b) = event {
            emit(vec![
                Value::Int(b.auction),
                Value::Int(b.bidder),
                Value::Int(b.price),
                Value::Int(b.date_time),
                Value::Str(b.extra.to_string()),
            ]);
        }
    }

    fn finish(self: Box<Self>, _: &mut dyn FnMut(Row)) {}
}

/// q1: every bid with its price times 0.908, as `DECIMAL(23, 3)`.
pub(super) struct Q1;

impl Evaluator for Q1 {
    fn on_event(&mut self, event: &Event, _: EpochMillis, emit: &mut dyn FnMut(Row)) {
        if let Event::Bid(b) = event {
            emit(vec![
                Value::Int(b.auction),
                Value::Int(b.bidder),
                // 0.908 is DECIMAL(4, 3): the product is exact at scale 3.
                Value::Decimal {
                    unscaled: b.price as i128 * 908,
                    scale: 3,
                },
                Value::Int(b.date_time),
                Value::Str(b.extra.to_string()),
            ]);
        }
    }

    fn finish(self: Box<Self>, _: &mut dyn FnMut(Row)) {}
}

/// q2: bids on every 123rd auction.
pub(super) struct Q2;

impl Evaluator for Q2 {
    fn on_event(&mut self, event: &Event, _: EpochMillis, emit: &mut dyn FnMut(Row)) {
        if let Event::Bid(b) = event {
            // SQL MOD takes the dividend's sign; only zero matters here.
            if b.auction % 123 == 0 {
                emit(vec![Value::Int(b.auction), Value::Int(b.price)]);
            }
        }
    }

    fn finish(self: Box<Self>, _: &mut dyn FnMut(Row)) {}
}
