//! Exactly-once into PostgreSQL from a job on a cluster (issue 24, test 7): keyed-count
//! `--emit updates --sink postgres://…` on 2 worker processes, a worker SIGKILLed
//! mid-input (its input held, after a checkpoint of it completed), a replacement
//! registered: every key's rows are exactly its counts 1..n, the run resumed from the
//! checkpoint, and no prepared transaction is left in the server.

mod cluster_support;
mod common;
mod connectors_support;
#[path = "../../weir-connectors/tests/support/pg.rs"]
mod pg;

use cluster_support::{restored_held_checkpoint, Cluster, HELD};
use common::*;
use connectors_support::*;
use pg::{PgServer, COUNTS_TABLE};

#[test]
fn a_cluster_with_a_worker_killed_writes_every_row_into_postgres_exactly_once() {
    let pg = PgServer::start();
    pg.exec("postgres", COUNTS_TABLE);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (n, keys) = (200_000u64, 97u64);
    let url = pg.url("postgres", "counts");
    let mut extra = vec!["--parallelism", "2", "--checkpoint-interval", "50ms"];
    extra.extend(HELD);
    let args = keyed_count_updates(&dir.join("chk"), &url, n, keys, &extra);
    let mut c = Cluster::start(dir, &args, 2, "w");
    let job_dir = dir.join("chk").join("keyed-count");
    c.wait_until_held(&job_dir, 2);
    let held: u64 = *completed_checkpoints(&job_dir)
        .last()
        .expect("a checkpoint");
    // What the checkpoints committed so far is exactly-once already.
    if let Some(p) = prefix_problem(&group(pg.key_counts("counts"))) {
        panic!("before the kill, the committed rows are not exactly-once: {p}");
    }
    c.kill_worker("w2");
    // For the record: what the killed worker's sink left prepared (the restart settles it).
    let left = pg.prepared("postgres", "keyed-count~");
    eprintln!("prepared transactions of the job after the kill: {left:?}");
    c.add_worker("w2-again");
    c.release();
    let ended = c.finish();
    assert_eq!(ended.code, 0, "{}\n{}", ended.out, ended.log);
    ended.assert_workers_succeeded();
    assert!(
        ended
            .log
            .lines()
            .any(|l| l.contains("lost worker 2 (w2) at 127.0.0.1:")),
        "{}",
        ended.log
    );
    // The restart restored a checkpoint of the held input (or a newer one), not the start.
    let (attempt, _) = restored_held_checkpoint(&ended.out, held);
    assert!(attempt >= 2, "{}", ended.out);
    let committed = group(pg.key_counts("counts"));
    assert_updates_exact(&committed, n, keys, "postgres from a cluster");
    assert_eq!(
        pg.prepared("postgres", ""),
        Vec::<String>::new(),
        "prepared transactions left"
    );
}
