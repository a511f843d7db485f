//! Nexmark for Weir: the benchmark's events, a deterministic generator, events as JSON
//! lines, and a plain reference evaluation of its queries.
//!
//! Nexmark models an online auction: persons register, open auctions and bid on them. This
//! crate is independent of the engine: the engine's Nexmark source and queries are checked
//! against [`reference`](mod@reference), which computes each query's result with ordinary maps.
//!
//! * [`model`]: `Person`, `Auction`, `Bid` and `Event`, with the DDL's fields.
//! * [`generator`]: event `n` from `n` alone, with the reference generator's semantics
//!   (proportions 1:3:46, id ranges, hot sellers, auctions and bidders, `tps` events per
//!   second of event time).
//! * [`json`]: JSON lines in and out; errors name the line and the field.
//! * [`reference`](mod@reference): q0, q1, q2, q3, q4, q5, q7, q8 and q11, with the SQL's semantics.
//! * [`csv`]: results as CSV, timestamps in epoch ms, decimals in plain notation.
//!
//! ```
//! use weir_nexmark::generator::{Generator, GeneratorConfig};
//! use weir_nexmark::reference::{evaluate, Query};
//!
//! let generator = Generator::new(GeneratorConfig::default()).unwrap();
//! let rows = evaluate(Query::Q2, generator.iter_from(0).take(10_000));
//! assert!(rows.iter().all(|row| matches!(row[0], weir_nexmark::csv::Value::Int(a) if a % 123 == 0)));
//! ```

pub mod csv;
mod extra;
pub mod generator;
mod java_random;
pub mod json;
pub mod model;
pub mod reference;

pub use generator::{Generator, GeneratorConfig};
pub use model::{Auction, Bid, EpochMillis, Event, Extra, Person};
pub use reference::Query;
