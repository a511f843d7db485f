//! What a cluster's coordinator shows of its workers (issue 24, observability): `/api/workers`,
//! `/api/job`, `/status` and `/metrics` of a coordinator with 2 worker processes on loopback
//! list both workers (address, slots, heartbeat age), the subtasks each runs, the worker of
//! every subtask (the `worker` label of the per-subtask series), and both directions of
//! their exchange stream, which the workers report to the coordinator.
//!
//! keyed-count's input is held (`--hold-at`, `--release-file`) until a checkpoint of the
//! held input completed, so records have crossed the exchange both ways (each generator
//! subtask feeds both count subtasks) before anything is read; every wait is bounded.

mod cluster_support;
mod common;
mod dashboard_support;

use std::collections::BTreeMap;

use cluster_support::{keyed_count_verified, Cluster, HELD, HOLD_AT};
use common::*;
use dashboard_support::{get, json, wait_for};
use serde_json::Value;

/// Events of the job; each of the two generator subtasks holds after [`HOLD_AT`].
const EVENTS: u64 = 200_000;
const KEYS: u64 = 97;

/// One sample of the OpenMetrics text: name, labels, value.
fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    assert_eq!(text.lines().last(), Some("# EOF"), "{text}");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("`series value`");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once("=\"").expect("label=\"value\"");
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect();
            (name.to_string(), labels, value.parse().expect("a number"))
        })
        .collect()
}

#[test]
fn the_coordinator_lists_both_workers_their_subtasks_and_their_exchange_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let mut extra = vec!["--retained-checkpoints", "1000000"];
    extra.extend(HELD);
    let args = keyed_count_verified(EVENTS, KEYS, &extra);
    let mut c = Cluster::start(tmp.path(), &args, 2, "w");
    let control = c.control_address();
    let url = |path: &str| format!("http://{control}{path}");
    c.wait_until_held(&tmp.path().join("chk").join("keyed-count"), 2);

    // Both workers, each running subtask i of both operators, and both ends of their
    // stream carrying bytes (reported every 200 ms: waited for, bounded).
    let v = wait_for(&url("/api/workers"), "both streams reported", |v| {
        let ws = v["workers"].as_array().cloned().unwrap_or_default();
        ws.len() == 2
            && ws.iter().all(|w| {
                w["streams"]
                    .as_array()
                    .is_some_and(|s| s.len() == 1 && s[0]["bytes_sent"].as_u64() > Some(0))
            })
    });
    assert_eq!(v["cluster"], true, "{v:#}");
    for (i, name) in ["w1", "w2"].iter().enumerate() {
        let w = &v["workers"][i];
        assert_eq!(w["name"], *name, "{v:#}");
        assert_eq!(w["state"], "up", "{v:#}");
        assert_eq!(w["slots"], 1, "{v:#}");
        assert!(
            w["address"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{v:#}"
        );
        // Heard from within the heartbeat timeout (60 s), else it would be lost.
        let age = w["heartbeat_age_ms"]
            .as_u64()
            .expect("a cluster worker's age");
        assert!(age < 60_000, "{v:#}");
        let subtasks: Vec<(String, u64)> = (w["subtasks"].as_array().unwrap().iter())
            .map(|s| {
                let chain = s["chain"].as_str().unwrap().to_string();
                assert!(!chain.is_empty(), "{v:#}");
                (
                    s["task_uid"].as_str().unwrap().to_string(),
                    s["subtask"].as_u64().unwrap(),
                )
            })
            .collect();
        let i = i as u64;
        assert_eq!(
            subtasks,
            [("generator".to_string(), i), ("count".to_string(), i)],
            "{v:#}"
        );
        let other = ["w2", "w1"][i as usize];
        let stream = &w["streams"][0];
        assert_eq!(stream["peer_name"], other, "{v:#}");
        assert!(stream["bytes_received"].as_u64() > Some(0), "{v:#}");
        assert!(stream["permit_waits"].is_u64(), "{v:#}");
    }

    // Every subtask row names its worker: the API's tasks and operators, and /status. The
    // records come with the workers' next reports (every 200 ms) after the hold: waited for.
    let job = wait_for(
        &url("/api/job"),
        "the held sources' records reported",
        |v| {
            let tasks = v["tasks"].as_array().cloned().unwrap_or_default();
            (tasks.iter())
                .filter(|t| t["source"] == true)
                .map(|t| t["records_in"].as_u64().unwrap_or(0))
                .sum::<u64>()
                == 2 * HOLD_AT
        },
    );
    assert_eq!(job["workers"], serde_json::json!(["w1", "w2"]), "{job:#}");
    let tasks = job["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 4, "{job:#}");
    for t in tasks {
        let expected = ["w1", "w2"][t["subtask"].as_u64().unwrap() as usize];
        assert_eq!(t["worker"], expected, "{t:#}");
    }
    for op in job["operators"].as_array().unwrap() {
        for s in op["subtasks"].as_array().unwrap() {
            let expected = ["w1", "w2"][s["subtask"].as_u64().unwrap() as usize];
            assert_eq!(s["worker"], expected, "{op:#}");
        }
    }
    let status = json(&url("/status"));
    assert!(
        (status["tasks"].as_array().unwrap().iter())
            .all(|t| t["worker"] == "w1" || t["worker"] == "w2"),
        "{status:#}"
    );

    // /metrics: the worker label on per-subtask series, the workers' own series, and both
    // directions of the stream.
    let (code, text) = get(&url("/metrics"), &[]);
    assert_eq!(code, 200, "{text}");
    let all = samples(&text);
    let of = |name: &str| -> Vec<&(String, BTreeMap<String, String>, f64)> {
        all.iter().filter(|(n, _, _)| n == name).collect()
    };
    let records_in = of("weir_task_records_in_total");
    assert_eq!(records_in.len(), 4, "{text}");
    for (_, labels, _) in &records_in {
        let expected = ["w1", "w2"][labels["subtask"].parse::<usize>().unwrap()];
        assert_eq!(labels["worker"], expected, "{text}");
    }
    let generators: f64 = (records_in.iter())
        .filter(|(_, l, _)| l["operator"] == "generator")
        .map(|(_, _, v)| v)
        .sum();
    assert_eq!(generators, (2 * HOLD_AT) as f64, "held: {text}");
    assert!(
        (of("weir_operator_records_in_total").iter()).all(|(_, l, _)| l.contains_key("worker")),
        "{text}"
    );
    let ages = of("weir_worker_heartbeat_age_seconds");
    let named: Vec<&str> = ages.iter().map(|(_, l, _)| l["worker"].as_str()).collect();
    assert_eq!(named, ["w1", "w2"], "{text}");
    for (from, to) in [("w1", "w2"), ("w2", "w1")] {
        for family in [
            "weir_exchange_sent_bytes_total",
            "weir_exchange_received_bytes_total",
        ] {
            let sample = of(family)
                .into_iter()
                .find(|(_, l, _)| l["worker"] == from && l["peer"] == to)
                .unwrap_or_else(|| panic!("no {family} of {from} → {to}:\n{text}"));
            assert!(sample.2 > 0.0, "{text}");
        }
        assert!(
            of("weir_exchange_permit_waits_total")
                .iter()
                .any(|(_, l, _)| l["worker"] == from && l["peer"] == to),
            "{text}"
        );
    }

    // The dashboard's workers page is served.
    let (code, page) = get(&url("/workers"), &[]);
    assert_eq!(code, 200);
    assert!(page.contains("id=\"workers\""), "{page}");

    c.release();
    let dir = c.dir.clone();
    c.finish().assert_verified();
    assert_keyed_count_exact(&dir.join("out"), EVENTS, KEYS);
}

/// A job in one process shows itself as one local worker, and every subtask names it.
#[test]
fn one_process_is_one_local_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let flags = ["--hold-at", "1000", "--release-file", "release"];
    let mut args = keyed_count_args(EVENTS, KEYS, &flags, false);
    args.extend(["--checkpoint-dir", "chk", "--output", "out"].map(String::from));
    let job =
        dashboard_support::Running::start(&mut weir(tmp.path(), &args), tmp.path().join("run.log"));
    let v = wait_for(&job.url("/api/workers"), "the job planned", |v| {
        v["workers"][0]["subtasks"]
            .as_array()
            .is_some_and(|s| s.len() == 4)
    });
    assert_eq!(v["cluster"], false, "{v:#}");
    let ws = v["workers"].as_array().unwrap();
    assert_eq!(ws.len(), 1, "{v:#}");
    assert_eq!(ws[0]["name"], "local", "{v:#}");
    assert_eq!(ws[0]["heartbeat_age_ms"], Value::Null, "{v:#}");
    let jv = json(&job.url("/api/job"));
    assert!(
        (jv["tasks"].as_array().unwrap().iter()).all(|t| t["worker"] == "local"),
        "{jv:#}"
    );
    let (_, text) = get(&job.url("/metrics"), &[]);
    let records_in: Vec<_> = (samples(&text).into_iter())
        .filter(|(n, _, _)| n == "weir_task_records_in_total")
        .collect();
    assert_eq!(records_in.len(), 4, "{text}");
    assert!(
        records_in.iter().all(|(_, l, _)| l["worker"] == "local"),
        "{text}"
    );
    std::fs::write(tmp.path().join("release"), b"go").unwrap();
    let (code, log) = job.finish();
    assert_eq!(code, Some(0), "{log}");
}
