//! A pipeline into PostgreSQL, exactly once: generated orders → running totals per customer
//! (keyed state) → a table, through the two-phase-commit sink.
//!
//! ```sh
//! createdb shop   # a server with max_prepared_transactions >= 2 × parallelism
//! cargo run --release -p weir-connectors --features postgres --example postgres_pipeline -- \
//!     --url postgres://USER:PASSWORD@127.0.0.1:5432/shop/customer_totals \
//!     --orders 2000000 --parallelism 2 --rate 200000 --inject-failures 3
//! psql shop -c 'SELECT customer, max(orders), max(total_cents) FROM customer_totals GROUP BY 1'
//! ```
//!
//! Every order adds a row `(customer, orders, total_cents)`: the customer's order count and
//! amount so far, a ledger of running totals. The sink writes the rows between two
//! checkpoints into one database transaction, `PREPARE TRANSACTION`s it when the barrier
//! passes and `COMMIT PREPARED`s it when the checkpoint completes; after a failure or a
//! kill, `--restore latest` commits what the restored checkpoint prepared and rolls back
//! the rest, which the source replays. So each customer's rows are exactly `orders = 1..=n`
//! with the right totals, however often the job failed — readers see committed rows only.
//!
//! The job creates the table if it is missing, and a fresh run (no `--restore`) refuses a
//! table that already has rows, which would mix with its own.
use serde::{Deserialize, Serialize};
use weir::prelude::*;
use weir::runner::{clap, BoxError, Job, Runner, UsageError};
use weir_connectors::postgres::{PostgresSink, PostgresSinkConfig, SqlValue};

/// Writes running order totals per customer into PostgreSQL, exactly once.
#[derive(clap::Args)]
pub struct Args {
    /// The table: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE/TABLE.
    #[arg(long)]
    pub url: String,
    /// Orders to generate.
    #[arg(long, default_value_t = 1_000_000)]
    pub orders: u64,
    /// Distinct customers.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub customers: u64,
    /// Orders per second (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
}

/// One order: who placed it and for how much (in cents).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    /// The customer (the key).
    pub customer: i64,
    /// The amount, in cents: 1.00 ..= 100.00.
    pub cents: i64,
}

impl Order {
    /// Order `i` over `customers` customers: a fixed function of them (no randomness), so
    /// that a test can recompute the input.
    pub fn generate(i: u64, customers: u64) -> Order {
        let r = mix(i);
        Order {
            customer: (r % customers) as i64,
            cents: 100 + ((r >> 32) % 9_901) as i64,
        }
    }
}

/// splitmix64's finalizer: spreads consecutive indexes over all 64 bits, so customers and
/// amounts look random but are the same on every run.
pub fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A row of the table: a customer's totals after one more order. It is the keyed state of
/// the fold too, hence serde.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// The customer.
    pub customer: i64,
    /// Orders so far.
    pub orders: i64,
    /// Their amount so far, in cents.
    pub total_cents: i64,
}

/// The table's columns, in the order of [`row`].
pub const COLUMNS: [&str; 3] = ["customer", "orders", "total_cents"];

/// A [`Totals`] as the table's row.
pub fn row(t: &Totals) -> Result<Vec<SqlValue>, String> {
    Ok(vec![
        SqlValue::BigInt(t.customer),
        SqlValue::BigInt(t.orders),
        SqlValue::BigInt(t.total_cents),
    ])
}

/// Creates the table if it is missing; on a fresh run, refuses one that has rows.
fn prepare_table(config: &PostgresSinkConfig, fresh: bool) -> Result<(), BoxError> {
    let mut params = format!(
        "host={} port={} user={} dbname={} connect_timeout=10",
        config.host, config.port, config.user, config.database
    );
    if let Some(password) = &config.password {
        params.push_str(&format!(" password={password}"));
    }
    let mut client = postgres::Client::connect(&params, postgres::NoTls).map_err(|e| {
        let cause = std::error::Error::source(&e).map(|c| format!(": {c}"));
        let cause = cause.unwrap_or_default();
        format!("cannot connect to {}: {e}{cause}", config.address())
    })?;
    let table = &config.table;
    client.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {table} \
         (customer BIGINT NOT NULL, orders BIGINT NOT NULL, total_cents BIGINT NOT NULL)"
    ))?;
    let rows: i64 = client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])?
        .get(0);
    if fresh && rows > 0 {
        return Err(UsageError::new(format!(
            "table {table} already holds {rows} rows: a fresh run would mix its rows with \
             them; empty it (TRUNCATE {table}) or continue that run with --restore latest"
        ))
        .into());
    }
    Ok(())
}

/// Builds the job: generator → key by customer → running totals → PostgreSQL.
pub fn build(job: &mut Job, args: &Args) -> Result<(), BoxError> {
    let config = PostgresSinkConfig::parse(&args.url).map_err(UsageError::new)?;
    prepare_table(
        &config,
        matches!(job.config().restore, RestoreFrom::Nothing),
    )?;
    let customers = args.customers;
    job.expect_records(args.orders.saturating_mul(2)); // the source and the totals
    let source = GeneratorSource::new(args.orders).with_rate(args.rate);
    // One subtask: each customer's orders stay in order on their way to the totals.
    let orders = job
        .add_source("orders", source)
        .uid("orders")
        .set_parallelism(1)
        .map(move |i: u64| Order::generate(i, customers))
        .set_parallelism(1);
    // Each order as the totals of one order, folded per customer: the running totals are
    // keyed state (a `ValueState` behind `reduce`), checkpointed and restored with the
    // source's position.
    let totals = orders
        .map(|o: Order| Totals {
            customer: o.customer,
            orders: 1,
            total_cents: o.cents,
        })
        .set_parallelism(1)
        .key_by(|t: &Totals| t.customer)
        .reduce(|a: Totals, b: Totals| Totals {
            customer: a.customer,
            orders: a.orders + b.orders,
            total_cents: a.total_cents + b.total_cents,
        })
        .uid("totals");
    let sink = PostgresSink::new(config.clone(), &COLUMNS, row);
    totals
        .add_sink("postgres", TwoPhaseCommit::new(sink))
        .uid("postgres");
    job.summary_line(format!(
        "rows: table {} at {}",
        config.table,
        config.address()
    ));
    Ok(())
}

fn main() -> std::process::ExitCode {
    Runner::new("postgres_pipeline").run(build)
}
