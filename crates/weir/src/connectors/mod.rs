//! Built-in connectors that need no server: a replayable generator, replayable text files,
//! and sinks for collecting, discarding and writing text.

pub mod collect;
pub mod files;
pub mod generator;
