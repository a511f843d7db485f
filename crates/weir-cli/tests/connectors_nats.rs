//! `--source nats://…` and `--sink nats://…` of the built-in jobs against a real
//! `nats-server -js` (started per test by weir-connectors' support helper): keyed-count from
//! a stream of event numbers into a stream of `key<TAB>count` messages, exactly once under
//! injected failures; wordcount from a stream of lines; and the errors a user meets first.

mod common;
mod connectors_support;
mod nats_support;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use connectors_support::*;
use nats_support::{free_port, read_counts, NatsServer};

/// keyed-count reads N event numbers from one stream and writes every update to another,
/// with 5 injected failures at parallelism 2: the output stream holds every key's counts
/// 1..n exactly once.
#[test]
fn keyed_count_from_nats_to_nats_is_exact_under_injected_failures() {
    let server = NatsServer::start();
    let client = server.client();
    client.create_stream("events", Duration::from_secs(120));
    client.create_stream("counts", Duration::from_secs(120));
    let (n, keys) = (30_000u64, 13u64);
    client.publish("events.in", (0..n).map(|i| i.to_string()));
    let tmp = tempfile::tempdir().unwrap();
    let source = format!("{}/events", server.url());
    let sink = format!("{}/counts?subject=counts.out", server.url());
    let run = run(&mut weir(
        tmp.path(),
        [
            "run",
            "keyed-count",
            "--source",
            &source,
            "--keys",
            &keys.to_string(),
            "--emit",
            "updates",
            "--sink",
            &sink,
            "--parallelism",
            "2",
            "--checkpoint-interval",
            "20ms",
            "--inject-failures",
            "5",
            "--seed",
            "11",
            "--restart-delay",
            "5ms",
            "--checkpoint-dir",
            &checkpoint_arg(&tmp.path().join("chk")),
        ],
    ));
    run.assert_success();
    assert!(
        run.stdout.contains("injected failures: 5 of 5"),
        "{}",
        run.describe()
    );
    assert!(
        run.stdout.contains(&format!("sink: {sink}")),
        "{}",
        run.describe()
    );
    let counts = read_counts(&server, "counts");
    assert_eq!(counts.len() as u64, n, "one message per update");
    assert_updates_exact(&group(counts), n, keys, "nats sink");
}

/// A `--source nats://` run is bounded by the stream's last message at the job's fresh
/// start, and a restore keeps that bound: keyed-count is paused (SIGSTOP) right after its
/// first checkpoint, more messages are published, the run is SIGKILLed and resumed with
/// `--restore latest`. The resumed run must count exactly the first `n` messages, although
/// the stream then holds more.
#[test]
fn a_bounded_nats_source_keeps_its_bound_across_a_restore() {
    let server = NatsServer::start();
    let client = server.client();
    client.create_stream("events", Duration::from_secs(120));
    client.create_stream("counts", Duration::from_secs(120));
    let (n, keys, extra) = (60_000u64, 13u64, 5_000u64);
    client.publish("events.in", (0..n).map(|i| i.to_string()));
    let tmp = tempfile::tempdir().unwrap();
    let chk = tmp.path().join("chk");
    let args = |restore: bool| {
        let mut a: Vec<String> = [
            "run",
            "keyed-count",
            "--source",
            &format!("{}/events", server.url()),
            "--keys",
            &keys.to_string(),
            "--emit",
            "updates",
            "--sink",
            &format!("{}/counts?subject=counts.out", server.url()),
            "--parallelism",
            "2",
            "--checkpoint-interval",
            "20ms",
            "--checkpoint-dir",
            &checkpoint_arg(&chk),
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        if restore {
            a.extend(["--restore".to_string(), "latest".to_string()]);
        }
        a
    };
    let started = std::time::Instant::now();
    let mut child = spawn_logged(
        &mut weir(tmp.path(), args(false)),
        &tmp.path().join("first.log"),
    );
    wait_for_checkpoints(&mut child, &chk.join("keyed-count"), 1, RUN_TIMEOUT);
    // Pause the run at once, so that it is still mid-input while the extra messages go in.
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &child.id().to_string()])
        .status()
        .expect("run kill -STOP");
    eprintln!("first checkpoint after {:?}", started.elapsed());
    assert!(stopped.success(), "kill -STOP failed: {stopped}");
    client.publish("events.in", (n..n + extra).map(|i| i.to_string()));
    assert_eq!(
        client.count("events"),
        n + extra,
        "the extra messages are in the stream"
    );
    sigkill_running(
        &mut child,
        "the first run (paused after its first checkpoint)",
    );
    wait_for_dead_lease();
    resume_exact(
        &mut weir(tmp.path(), args(true)),
        || read_counts(&server, "counts"),
        n,
        keys,
        "messages published after the fresh start were read",
    );
}

/// SIGKILL keyed-count (nats: sink) 4 times at random moments, resuming each time with
/// `--restore latest`: after every kill each key's published counts are a prefix 1..m (the
/// server's duplicate window drops a replayed commit's messages), and the final run
/// completes them exactly once.
#[test]
fn nats_sink_is_exact_after_sigkills_and_restore_latest() {
    let server = NatsServer::start();
    server
        .client()
        .create_stream("counts", Duration::from_secs(120));
    let tmp = tempfile::tempdir().unwrap();
    let chk = tmp.path().join("chk");
    let (n, keys) = (200_000u64, 37u64);
    let sink = format!("{}/counts?subject=counts.out", server.url());
    let args = kill_run_args(&chk, &sink, (n, keys), "50000");
    kill_loop(
        tmp.path(),
        &chk.join("keyed-count"),
        (4, (400, 900)),
        0x00c0_ffee,
        &args,
        |i| {
            if let Some(p) = prefix_problem(&group(read_counts(&server, "counts"))) {
                panic!("after kill {i}, the published counts are not exactly-once: {p}");
            }
        },
    );
    let run = run(&mut weir(tmp.path(), args(true)));
    run.assert_success();
    assert!(restored_from(&run.stdout).is_some(), "{}", run.describe());
    assert_updates_exact(
        &group(read_counts(&server, "counts")),
        n,
        keys,
        "nats sink after kills",
    );
}

/// wordcount reads lines from a stream (one per message) and writes its final counts to
/// files: the counts of the text.
#[test]
fn wordcount_from_nats_counts_the_lines() {
    let server = NatsServer::start();
    let client = server.client();
    client.create_stream("lines", Duration::from_secs(120));
    let lines = ["the cat", "The dog, the cat", "", "bird"];
    client.publish("lines.txt", lines);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let run = run(&mut weir(
        tmp.path(),
        [
            "run",
            "wordcount",
            "--source",
            &format!("{}/lines", server.url()),
            "--sink",
            &format!("files:{}", s(&out)),
            "--checkpoint-dir",
            &checkpoint_arg(&tmp.path().join("chk")),
        ],
    ));
    run.assert_success();
    let mut got = BTreeMap::new();
    for e in std::fs::read_dir(&out).unwrap() {
        for line in std::fs::read_to_string(e.unwrap().path()).unwrap().lines() {
            let (w, c) = line.split_once('\t').unwrap();
            assert!(got
                .insert(w.to_string(), c.parse::<u64>().unwrap())
                .is_none());
        }
    }
    let want: BTreeMap<String, u64> = [("bird", 1), ("cat", 2), ("dog", 1), ("the", 3)]
        .into_iter()
        .map(|(w, c)| (w.to_string(), c))
        .collect();
    assert_eq!(got, want);
}

/// The first errors a user meets end the run at once (exit 1) naming the way out: no
/// server (its address), a missing stream (how to create it), a sink stream with several
/// subjects (add ?subject=); and a message that is not a number fails with its sequence.
#[test]
fn nats_errors_name_the_cause_and_the_fix() {
    let server = NatsServer::start();
    let client = server.client();
    client.create_stream("counts", Duration::from_secs(120));
    let tmp = tempfile::tempdir().unwrap();
    let kc = |extra: &[&str]| {
        let mut a = vec![
            "run".to_string(),
            "keyed-count".into(),
            "--checkpoint-dir".into(),
            checkpoint_arg(&tmp.path().join("chk")),
            "--restart-strategy".into(),
            "none".into(),
        ];
        a.extend(extra.iter().map(|x| x.to_string()));
        run(&mut weir(tmp.path(), a))
    };
    let down = format!("nats://127.0.0.1:{}", free_port());
    let r = kc(&["--source", &format!("{down}/events")]);
    assert_clean_error(&r, 1, &["cannot connect to NATS", &down, "nats-server -js"]);
    let r = kc(&["--events", "10", "--sink", &format!("{down}/counts")]);
    assert_clean_error(&r, 1, &["cannot connect to NATS", &down]);
    let r = kc(&["--source", &format!("{}/nope", server.url())]);
    assert_clean_error(&r, 1, &["'nope' does not exist", "nats stream add nope"]);
    let r = kc(&[
        "--events",
        "10",
        "--sink",
        &format!("{}/counts", server.url()),
    ]);
    assert_clean_error(&r, 1, &["?subject="]);
    // A payload that is not an event number: the job fails (here without restarts) naming
    // the message and its payload.
    client.create_stream("events", Duration::from_secs(120));
    client.publish("events.in", ["1", "2", "three"]);
    let r = kc(&["--source", &format!("{}/events", server.url())]);
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("message 3") && r.stderr.contains("\"three\""),
        "{}",
        r.describe()
    );
}
