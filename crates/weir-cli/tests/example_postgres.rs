//! The PostgreSQL example (`crates/weir-connectors/examples/postgres_pipeline.rs`, compiled
//! into this test) runs as a program of its own — this test binary re-executes itself as the
//! job — against a PostgreSQL server the test starts, under injected failures and through a
//! SIGKILL and `--restore latest`. The table is then checked with SQL against a truth
//! computed here: every customer's rows are exactly its running totals, each once.

mod common;
#[path = "../../weir-connectors/tests/support/pg.rs"]
mod pg;

#[allow(dead_code)]
#[path = "../../weir-connectors/examples/postgres_pipeline.rs"]
mod postgres_pipeline;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;
use pg::PgServer;

/// The environment variable that makes this test binary the job: its arguments, separated
/// by ASCII unit separators.
const CHILD: &str = "WEIR_EXAMPLE_POSTGRES_JOB";

child_job::job_process!(CHILD, "postgres_pipeline", postgres_pipeline::build);

/// The example as a command run in `cwd` with `args`. Without a `--checkpoint-dir` it
/// keeps its checkpoints in the default folder of `cwd` (`weir-checkpoints`), or with
/// `WEIR_TEST_CHECKPOINT_DIR=s3` in that folder's S3 twin ([`checkpoint_dir`]).
fn job(cwd: &Path, args: &[&str]) -> Command {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    if on_s3() && !args.contains(&"--checkpoint-dir") {
        let default = checkpoint_arg(&cwd.join("weir-checkpoints"));
        all.extend(["--checkpoint-dir".to_string(), default]);
    }
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    child_job::command(CHILD, "postgres_pipeline", cwd, &all)
}

/// `(customer, orders, total_cents)` rows `n` orders over `customers` customers must leave:
/// per customer, one row per order with the count and sum of its orders so far.
fn truth(n: u64, customers: u64) -> Vec<(i64, i64, i64)> {
    let mut so_far: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut rows = Vec::with_capacity(n as usize);
    for i in 0..n {
        let o = postgres_pipeline::Order::generate(i, customers);
        assert!((0..customers as i64).contains(&o.customer) && (100..=10_000).contains(&o.cents));
        let t = so_far.entry(o.customer).or_default();
        *t = (t.0 + 1, t.1 + o.cents);
        rows.push((o.customer, t.0, t.1));
    }
    rows.sort_unstable();
    rows
}

/// Every row of `table`, sorted.
fn table_rows(server: &PgServer, table: &str) -> Vec<(i64, i64, i64)> {
    let sql = format!("SELECT customer, orders, total_cents FROM {table} ORDER BY 1, 2, 3");
    server
        .client("postgres")
        .query(&sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// Asserts that `table` holds exactly the truth, and that no prepared transaction is left.
fn assert_table_exact(server: &PgServer, table: &str, n: u64, customers: u64) {
    let got = table_rows(server, table);
    let want = truth(n, customers);
    assert_eq!(got.len(), want.len(), "rows in {table}");
    assert!(got == want, "{table} differs from the truth");
    let prepared = server.prepared("postgres", "");
    assert!(
        prepared.is_empty(),
        "prepared transactions left: {prepared:?}"
    );
}

#[test]
fn postgres_pipeline_is_exactly_once_through_injected_failures() {
    let server = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let (n, customers) = (100_000u64, 23u64);
    let url = server.url("postgres", "totals_failures");
    let n_arg = n.to_string();
    let c_arg = customers.to_string();
    let run = run(&mut job(
        tmp.path(),
        &[
            "--url",
            &url,
            "--orders",
            &n_arg,
            "--customers",
            &c_arg,
            "--rate",
            "200000",
            "--parallelism",
            "2",
            "--checkpoint-interval",
            "50ms",
            "--inject-failures",
            "3",
            "--seed",
            "3",
            "--restart-strategy",
            "fixed-delay",
            "--restart-delay",
            "10ms",
        ],
    ));
    run.assert_success();
    assert!(
        run.stdout.contains("(injected failures: 3 of 3)"),
        "{}",
        run.describe()
    );
    let attempts = assert_resumed(&run, n);
    assert_eq!(attempts.len(), 4, "{}", run.describe());
    assert_table_exact(&server, "totals_failures", n, customers);
}

#[test]
fn postgres_pipeline_resumes_exactly_once_after_sigkill() {
    let server = PgServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (n, customers) = (200_000u64, 17u64);
    let url = server.url("postgres", "totals_kill");
    let (n_arg, c_arg) = (n.to_string(), customers.to_string());
    // Relative to the job's working folder locally; its S3 twin with checkpoints on S3.
    let ck = if on_s3() {
        checkpoint_arg(&t.join("ck"))
    } else {
        "ck".to_string()
    };
    let flags = [
        "--url",
        &url,
        "--orders",
        &n_arg,
        "--customers",
        &c_arg,
        "--parallelism",
        "2",
        "--checkpoint-dir",
        &ck,
        "--checkpoint-interval",
        "100ms",
    ];
    // Slow enough that the kill lands mid-run, with checkpoints behind it.
    let mut first: Vec<&str> = flags.to_vec();
    first.extend(["--rate", "20000"]);
    let mut child = spawn_logged(&mut job(t, &first), &t.join("first.log"));
    wait_for_checkpoints(&mut child, &t.join("ck/postgres_pipeline"), 3, RUN_TIMEOUT);
    sigkill_running(&mut child, "the first run");
    wait_for_dead_lease();
    // What readers saw at the kill: per customer, a prefix of its rows, none twice.
    let seen = table_rows(&server, "totals_kill");
    let want = truth(n, customers);
    let mut per_customer: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (c, orders, total) in &seen {
        assert!(
            want.binary_search(&(*c, *orders, *total)).is_ok(),
            "row {c},{orders},{total}"
        );
        per_customer.entry(*c).or_default().push(*orders);
    }
    for (c, orders) in per_customer {
        let prefix: Vec<i64> = (1..=orders.len() as i64).collect();
        assert!(orders == prefix, "customer {c}: not a prefix of 1..=n");
    }
    assert!(seen.len() < want.len(), "the kill came after the end");
    // A fresh run over the table is refused (its rows would mix), naming the way out.
    let fresh = run(&mut job(t, &flags));
    assert_eq!(fresh.code(), Some(2), "{}", fresh.describe());
    assert!(
        fresh.stderr.contains("--restore latest"),
        "{}",
        fresh.describe()
    );
    // Resume, unthrottled, from the latest checkpoint.
    let mut resume: Vec<&str> = flags.to_vec();
    resume.extend(["--restore", "latest"]);
    let run = run(&mut job(t, &resume));
    run.assert_success();
    assert!(restored_from(&run.stdout).is_some(), "{}", run.describe());
    assert_resumed(&run, n);
    assert_table_exact(&server, "totals_kill", n, customers);
}
