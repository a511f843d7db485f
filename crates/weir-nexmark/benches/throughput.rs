//! Generation and parsing throughput, single-threaded; prints a table.
fn main() {}
