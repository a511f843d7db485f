//! PostgreSQL sink throughput, exactly-once (binary COPY + PREPARE/COMMIT PREPARED per
//! epoch) against at-least-once upserts (multi-row INSERT … ON CONFLICT), for
//! BENCHMARKS.md.
//!
//! ```text
//! cargo run --release -p weir-connectors --features postgres --example pg_bench -- \
//!     [--url postgres://user:pw@host:port/db] [--records N] [--epoch N] [--durable]
//! ```
//!
//! Without `--url` it starts a throw-away server (like the tests; as root it needs the
//! `postgres` system user) with `fsync=off`, or with fsync and synchronous commit on when
//! `--durable` is given. The sink is driven directly through its two-phase-commit methods
//! in batches of 1024 records, one transaction per `--epoch` records (a checkpoint).

#[path = "../tests/support/pg.rs"]
mod pg;

use std::time::Instant;

use weir::prelude::*;
use weir_connectors::postgres::{PostgresSink, PostgresSinkConfig, SqlValue};

type Rec = (i64, i64, String);

struct Args {
    url: Option<String>,
    records: u64,
    epoch: u64,
    durable: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        url: None,
        records: 1_000_000,
        epoch: 100_000,
        durable: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = Some(value()?),
            "--records" => a.records = value()?.parse().map_err(|e| format!("{e}"))?,
            "--epoch" => a.epoch = value()?.parse().map_err(|e| format!("{e}"))?,
            "--durable" => a.durable = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

fn run(url: &str, args: &Args, label: &str) -> Result<f64> {
    let config = PostgresSinkConfig::parse(url).map_err(Error::User)?;
    let mut sink = PostgresSink::new(config, &["k", "seq", "note"], |r: &Rec| {
        Ok(vec![
            SqlValue::BigInt(r.0),
            SqlValue::BigInt(r.1),
            SqlValue::Text(r.2.clone()),
        ])
    });
    let ctx = TransactionContext {
        job_name: "bench".into(),
        uid: label.into(),
        subtask: 0,
        parallelism: 1,
    };
    sink.open(&ctx)?;
    sink.recover(&ctx, vec![])?;
    let start = Instant::now();
    let mut next = 0u64;
    let mut checkpoint = 0;
    while next < args.records {
        checkpoint += 1;
        let end = (next + args.epoch).min(args.records);
        let mut txn = sink.begin(&ctx)?;
        while next < end {
            let upto = (next + 1024).min(end);
            let mut batch: Vec<Rec> = (next..upto)
                .map(|i| (i as i64, i as i64 * 7, format!("note-{i}")))
                .collect();
            sink.write(&mut txn, &mut batch)?;
            next = upto;
        }
        if let Some(c) = sink.pre_commit(&ctx, txn, checkpoint)? {
            sink.commit(c)?;
        }
    }
    Ok(args.records as f64 / start.elapsed().as_secs_f64())
}

fn main() {
    let args = args().unwrap_or_else(|e| {
        eprintln!("pg_bench: {e}");
        std::process::exit(2)
    });
    let server;
    let base = match &args.url {
        Some(u) => u.trim_end_matches('/').to_string(),
        None => {
            let mut settings = vec![("max_prepared_transactions", "20")];
            if args.durable {
                settings.extend([
                    ("fsync", "on"),
                    ("synchronous_commit", "on"),
                    ("full_page_writes", "on"),
                ]);
            }
            server = pg::PgServer::start_with(&settings);
            server.create_database("bench");
            server.url("bench", "x").trim_end_matches("/x").to_string()
        }
    };
    let mut admin = postgres::Client::connect(
        &PostgresSinkConfig::parse(&format!("{base}/t"))
            .map(|c| {
                format!(
                    "host={} port={} user={} password={} dbname={}",
                    c.host,
                    c.port,
                    c.user,
                    c.password.unwrap_or_default(),
                    c.database
                )
            })
            .unwrap_or_else(|e| panic!("{e}")),
        postgres::NoTls,
    )
    .unwrap_or_else(|e| panic!("cannot connect to {base}: {e}"));
    println!(
        "PostgreSQL sink, {} records of (bigint, bigint, text), {} per transaction, \
         server {}",
        args.records,
        args.epoch,
        if args.url.is_some() {
            "given"
        } else if args.durable {
            "local, fsync on"
        } else {
            "local, fsync off"
        }
    );
    println!("| mode | records/s |\n|---|---|");
    for (label, query) in [
        ("exactly-once (COPY + 2PC)", ""),
        ("at-least-once (upsert)", "?mode=upsert&key=k"),
    ] {
        admin
            .batch_execute(
                "DROP TABLE IF EXISTS bench_out; \
                 CREATE TABLE bench_out (k bigint PRIMARY KEY, seq bigint, note text)",
            )
            .unwrap_or_else(|e| panic!("create the table: {e}"));
        let uid = if query.is_empty() { "eo" } else { "upsert" };
        match run(&format!("{base}/bench_out{query}"), &args, uid) {
            Ok(rate) => println!("| {label} | {rate:.0} |"),
            Err(e) => {
                eprintln!("pg_bench: {label}: {e}");
                std::process::exit(1)
            }
        }
    }
}
