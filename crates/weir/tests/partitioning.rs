//! Partitioners and planning checks at job level: broadcast, rebalance, forward, uids.

mod common;

use std::time::Duration;

use weir::prelude::*;

fn config(name: &str, dir: &std::path::Path) -> JobConfig {
    let mut c = JobConfig::new(name);
    c.parallelism = 2;
    c.checkpoint_dir = common::checkpoint_dir(dir);
    c.checkpointing.interval = Some(Duration::from_millis(20));
    c
}

/// Broadcast sends every record to every subtask of the next operator.
#[test]
fn broadcast_reaches_every_subtask() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new(config("broadcast", dir.path()));
    let out = CollectSink::new();
    env.add_source("gen", GeneratorSource::new(10_000))
        .set_parallelism(1)
        .broadcast()
        .map(|i| i * 2)
        .set_parallelism(3)
        .add_sink("collect", out.clone())
        .set_parallelism(3);
    env.execute().unwrap();
    let mut got = out.take();
    got.sort_unstable();
    let want: Vec<u64> = (0..10_000u64).flat_map(|i| [i * 2; 3]).collect();
    assert_eq!(got, want);
}

/// Default partitioning between different parallelisms (rebalance) delivers each record once.
#[test]
fn rebalance_delivers_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new(config("rebalance", dir.path()));
    let out = CollectSink::new();
    env.add_source("gen", GeneratorSource::new(30_000))
        .set_parallelism(1)
        .map(|i| i)
        .set_parallelism(3)
        .add_sink("collect", out.clone())
        .set_parallelism(3);
    env.execute().unwrap();
    let mut got = out.take();
    got.sort_unstable();
    assert_eq!(got, (0..30_000).collect::<Vec<u64>>());
}

/// A forward edge between operators of different parallelism is refused before running.
#[test]
fn forward_with_unequal_parallelism_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new(config("forward", dir.path()));
    env.add_source("gen", GeneratorSource::new(10))
        .set_parallelism(1)
        .forward()
        .add_sink("discard", DiscardSink)
        .set_parallelism(2);
    let err = env.execute().err().unwrap().to_string();
    assert!(
        err.contains("forward edge") && err.contains("equal parallelism"),
        "{err}"
    );
}

/// Duplicate and unusable uids are refused with the uid named.
#[test]
fn bad_uids_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new(config("uids", dir.path()));
    env.add_source("a", GeneratorSource::new(10))
        .uid("same")
        .add_sink("s", DiscardSink)
        .uid("same");
    let err = env.execute().err().unwrap().to_string();
    assert!(err.contains("'same'"), "{err}");

    let env = StreamEnvironment::new(config("uids2", dir.path()));
    env.add_source("a", GeneratorSource::new(10))
        .uid("a/b")
        .add_sink("s", DiscardSink);
    let err = env.execute().err().unwrap().to_string();
    assert!(err.contains("a/b"), "{err}");
}

/// Parallelism above the max parallelism is refused.
#[test]
fn parallelism_above_max_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("maxp", dir.path());
    cfg.max_parallelism = 4;
    cfg.parallelism = 5;
    let env = StreamEnvironment::new(cfg);
    env.add_source("a", GeneratorSource::new(10))
        .add_sink("s", DiscardSink);
    let err = env.execute().err().unwrap().to_string();
    assert!(
        err.contains("parallelism 5") && err.contains("max parallelism 4"),
        "{err}"
    );
}
