//! The job the PostgreSQL end-to-end tests run: a generator of `0..n`, keyed by
//! `i % keys`, numbering each key's records `1, 2, 3, …` in keyed state, into the sink.
//! Exactly-once output means every key's rows are exactly `1..=count(key)`.
//!
//! The one support module the PostgreSQL job tests include (`#[path]`): it brings the
//! server ([`pg`]) and where checkpoints go ([`test_checkpoints`], with the [`moto`] server
//! it needs beside it), so that each test names one module.

#![allow(dead_code)]

#[path = "../../../weir/tests/support/moto.rs"]
pub mod moto;
#[path = "pg.rs"]
pub mod pg;
#[path = "../../../weir/tests/support/test_checkpoints.rs"]
pub mod test_checkpoints;

use std::time::Duration;

use weir::prelude::*;
use weir::testing::Sequence;
use weir_connectors::postgres::{PostgresSink, PostgresSinkConfig, SqlValue};

use pg::PgServer;

/// A server with database `db` holding each of `tables` as `(k bigint, seq bigint)`, both
/// `NOT NULL`: where [`seq_sink`] writes.
pub fn seq_server(db: &str, tables: &[&str]) -> PgServer {
    let s = PgServer::start();
    s.create_database(db);
    for t in tables {
        s.exec(
            db,
            &format!("CREATE TABLE {t} (k bigint NOT NULL, seq bigint NOT NULL)"),
        );
    }
    s
}

/// The sink for `(key, seq)` records into `table (k bigint, seq bigint)`.
pub fn seq_sink(url: &str) -> PostgresSink<(u64, u64)> {
    let config = PostgresSinkConfig::parse(url).unwrap_or_else(|e| panic!("{e}"));
    PostgresSink::new(config, &["k", "seq"], |r: &(u64, u64)| {
        let k = i64::try_from(r.0).map_err(|e| e.to_string())?;
        let s = i64::try_from(r.1).map_err(|e| e.to_string())?;
        Ok(vec![SqlValue::BigInt(k), SqlValue::BigInt(s)])
    })
}

/// Job settings: checkpoints in `dir` (see [`test_checkpoints::checkpoint_dir`]) every
/// `interval`, quick fixed-delay restarts.
pub fn config(
    name: &str,
    dir: &std::path::Path,
    parallelism: u32,
    interval: Duration,
) -> JobConfig {
    let mut c = JobConfig::new(name);
    c.parallelism = parallelism;
    // With `WEIR_TEST_CHECKPOINT_DIR=s3`, `dir`'s twin on the tests' S3 server.
    c.checkpoint_dir = test_checkpoints::checkpoint_dir(dir);
    c.checkpointing.interval = Some(interval);
    c.checkpointing.tolerable_failures = 1000;
    c.restart = RestartStrategy::FixedDelay {
        attempts: 1000,
        delay: Duration::from_millis(5),
    };
    c
}

/// Builds and runs the job. With checkpoints on, it ends with the engine's final
/// checkpoint, so everything is committed when it returns.
pub fn run_seq_job(
    config: JobConfig,
    n: u64,
    keys: u64,
    rate: Option<f64>,
    url: &str,
) -> Result<JobResult> {
    let env = StreamEnvironment::new(config);
    env.add_source("events", GeneratorSource::new(n).with_rate(rate))
        .uid("events")
        .key_by(move |i: &u64| i % keys)
        .process(Sequence::default())
        .uid("seq")
        .add_sink("pg", TwoPhaseCommit::new(seq_sink(url)))
        .uid("pg");
    env.execute()
}

/// Asserts the table holds exactly `1..=count(k)` for every key of `0..n` by `i % keys`,
/// and that no prepared transaction of `job` is left.
pub fn assert_exactly_once(s: &PgServer, db: &str, table: &str, job: &str, n: u64, keys: u64) {
    let mut client = s.client(db);
    let rows = client
        .query(
            &format!(
                "SELECT k, count(*), count(DISTINCT seq), min(seq), max(seq) FROM {table} \
                 GROUP BY k ORDER BY k"
            ),
            &[],
        )
        .expect("read the output");
    assert_eq!(rows.len() as u64, keys.min(n), "keys present");
    for r in rows {
        let (k, c, d, lo, hi): (i64, i64, i64, i64, i64) =
            (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
        let want = (n / keys + u64::from((k as u64) < n % keys)) as i64;
        assert_eq!(
            (c, d, lo, hi),
            (want, want, 1, want),
            "key {k}: (rows, distinct, min, max) must be ({want}, {want}, 1, {want})"
        );
    }
    assert!(
        s.prepared(db, &format!("{job}-")).is_empty(),
        "prepared transactions of {job} left behind"
    );
}
