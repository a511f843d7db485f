//! The NATS tests' shared part: weir-connectors' server helper, and reading keyed-count's
//! `key<TAB>count` messages back from a stream.

#![allow(dead_code)]

#[path = "../../../weir-connectors/tests/support/nats.rs"]
pub mod nats;

pub use nats::{free_port, NatsServer};

/// Every message of `stream` as `(key, count)`; panics on a payload that is not
/// `key<TAB>count`.
pub fn read_counts(server: &NatsServer, stream: &str) -> Vec<(u64, u64)> {
    server
        .client()
        .read_all(stream)
        .into_iter()
        .map(|(seq, p)| {
            let text = String::from_utf8(p).unwrap();
            let (k, c) = text
                .split_once('\t')
                .unwrap_or_else(|| panic!("message {seq}: not key<TAB>count: {text:?}"));
            (k.parse().unwrap(), c.parse().unwrap())
        })
        .collect()
}
