//! The JSON API behind the dashboard (issue 14): read-only views of the job's
//! [`JobStatus`], the same data `weir status` prints, shaped for pages.
//!
//! | request | answer |
//! |---|---|
//! | `GET /api/job` | name, state, attempt, restarts, records read; operators with uid, name, parallelism, chain, inputs, records in per subtask and per-subtask figures (records in and out, busy time, watermark and its lag); tasks; attempts with their failures; savepoints; state sizes |
//! | `GET /api/checkpoints` | counts (completed, failed, in progress), the newest completed one, and the history newest first: id, kind, status, how it was taken (`alignment`: aligned or unaligned, with `in_flight_bytes`), trigger time, end-to-end duration, size, folder, failure cause |
//! | `GET /api/state` | state size per operator and state in the newest completed checkpoint |
//! | `GET /api/workers` | whether the job runs on a cluster, and its workers: id, name, address, slots, heartbeat age, state (`up`, `lost` with its cause, or `local`: a job in one process shows itself as one worker), the subtasks each runs, and per exchange stream the bytes sent and received and the permit waits |
//!
//! Views are pure functions of a status, so they are tested without a server.

use serde_json::{json, Value};

use super::http::Response;
use crate::prelude::{JobControl, JobStatus};

/// `GET /api/job`.
pub(crate) fn job(control: &JobControl) -> Response {
    Response::json(200, &job_view(&control.status()))
}

/// `GET /api/checkpoints`.
pub(crate) fn checkpoints(control: &JobControl) -> Response {
    Response::json(200, &checkpoints_view(&control.status()))
}

/// `GET /api/workers`.
pub(crate) fn workers(control: &JobControl) -> Response {
    Response::json(200, &workers_view(&control.status()))
}

/// The workers, each with its subtasks and exchange streams (a peer named by its worker's
/// name where the status knows it).
pub(crate) fn workers_view(s: &JobStatus) -> Value {
    let name_of = |id: u32| {
        s.workers
            .iter()
            .find(|w| w.id == id)
            .map(|w| w.name.clone())
    };
    let workers: Vec<Value> = (s.workers.iter())
        .map(|w| {
            let streams: Vec<Value> = (w.streams.iter())
                .map(|st| {
                    let mut v = json!(st);
                    v["peer_name"] = json!(name_of(st.peer));
                    v
                })
                .collect();
            let mut v = json!(w);
            v["streams"] = json!(streams);
            v
        })
        .collect();
    json!({
        "job": s.job,
        "state": s.state,
        "cluster": s.cluster,
        "workers": workers,
    })
}

/// `GET /api/state`.
pub(crate) fn state(control: &JobControl) -> Response {
    Response::json(200, &json!(control.status().state_sizes))
}

/// The job overview. An operator's `records_in` is per subtask; without per-operator
/// figures (metering off) only an operator heading its chain has them (the engine then
/// counts records where they enter a task) and a chained one shows `null`. `subtasks`
/// holds each subtask's figures: records in and out, busy time, watermark and its lag.
pub(crate) fn job_view(s: &JobStatus) -> Value {
    let operators: Vec<Value> = s
        .graph
        .iter()
        .map(|op| {
            let mut subtasks: Vec<Value> = Vec::new();
            let mut heads: Vec<(u32, u64)> = Vec::new();
            for t in &s.tasks {
                let Some(pos) = t.operators.iter().position(|u| u == &op.uid) else {
                    continue;
                };
                if pos == 0 {
                    heads.push((t.subtask, t.records_in));
                }
                if let Some(f) = t.operator_figures.get(pos) {
                    subtasks.push(json!({
                        "subtask": t.subtask,
                        "worker": t.worker,
                        "records_in": f.records_in,
                        "records_out": f.records_out,
                        "busy_ms": f.busy_ms,
                        "watermark_ms": f.watermark_ms,
                        "watermark_lag_ms": f.watermark_lag_ms,
                    }));
                }
            }
            subtasks.sort_by_key(|v| v["subtask"].as_u64());
            heads.sort_unstable();
            let records_in: Option<Vec<u64>> = if !subtasks.is_empty() {
                Some(
                    subtasks
                        .iter()
                        .filter_map(|v| v["records_in"].as_u64())
                        .collect(),
                )
            } else {
                (!heads.is_empty()).then(|| heads.into_iter().map(|(_, n)| n).collect())
            };
            json!({
                "uid": op.uid,
                "name": op.name,
                "parallelism": op.parallelism,
                "chain": op.chain,
                "inputs": op.inputs,
                "records_in": records_in,
                "subtasks": subtasks,
            })
        })
        .collect();
    json!({
        "job": s.job,
        "state": s.state,
        "attempt": s.attempt,
        "restarts": s.restarts,
        "source_records": s.source_records,
        "operators": operators,
        "tasks": s.tasks,
        "attempts": s.attempts,
        "savepoints": s.savepoints,
        "state_sizes": s.state_sizes,
        "cluster": s.cluster,
        "workers": s.workers.iter().map(|w| &w.name).collect::<Vec<_>>(),
    })
}

/// The checkpoint history, newest first, with its counts.
pub(crate) fn checkpoints_view(s: &JobStatus) -> Value {
    let in_progress = s
        .history
        .iter()
        .filter(|r| r.status == "in_progress")
        .count();
    let latest = s.history.iter().rev().find(|r| r.status == "completed");
    let history: Vec<&_> = s.history.iter().rev().collect();
    json!({
        "job": s.job,
        "state": s.state,
        "counts": {
            "completed": s.checkpoints_completed,
            "failed": s.checkpoints_failed,
            "in_progress": in_progress,
        },
        "last_bytes": s.last_checkpoint_bytes,
        "latest_completed": latest,
        "history": history,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::execution::{CheckpointRecord, OperatorFigures, OperatorStatus, TaskStatus};

    fn record(id: u64, status: &str) -> CheckpointRecord {
        CheckpointRecord {
            id,
            kind: "checkpoint".into(),
            stop: false,
            status: status.into(),
            trigger_ms: 1000 * id,
            end_ms: None,
            duration_ms: None,
            bytes: None,
            path: None,
            failure: None,
            alignment: None,
            in_flight_bytes: None,
            subtasks: Vec::new(),
        }
    }

    fn op(uid: &str) -> OperatorStatus {
        OperatorStatus {
            uid: uid.into(),
            name: format!("{uid}-name"),
            parallelism: 2,
            chain: "c".into(),
            inputs: Vec::new(),
        }
    }

    fn task(head: &[&str], subtask: u32, records_in: u64) -> TaskStatus {
        TaskStatus {
            chain: "c".into(),
            operators: head.iter().map(|s| s.to_string()).collect(),
            subtask,
            parallelism: 2,
            records_in,
            ..TaskStatus::default()
        }
    }

    #[test]
    fn operators_heading_a_chain_show_records_per_subtask() {
        let s = JobStatus {
            job: "j".into(),
            graph: vec![op("src"), op("map"), op("count")],
            tasks: vec![
                task(&["src", "map"], 1, 7),
                task(&["src", "map"], 0, 5),
                task(&["count"], 0, 6),
                task(&["count"], 1, 6),
            ],
            ..Default::default()
        };
        let v = job_view(&s);
        assert_eq!(v["operators"][0]["records_in"], json!([5, 7]));
        assert_eq!(v["operators"][1]["records_in"], Value::Null);
        assert_eq!(v["operators"][2]["records_in"], json!([6, 6]));
        assert_eq!(v["operators"][2]["name"], "count-name");
        assert_eq!(v["operators"][1]["subtasks"], json!([]));
    }

    #[test]
    fn chained_operators_show_their_own_figures_per_subtask() {
        let figures = |n: u64, lag: Option<u64>| OperatorFigures {
            records_in: n,
            records_out: n / 2,
            busy_ms: 3,
            watermark_ms: lag.map(|l| 10_000 - l),
            watermark_lag_ms: lag,
        };
        let mut tasks = vec![task(&["src", "map"], 1, 8), task(&["src", "map"], 0, 4)];
        tasks[0].operator_figures = vec![figures(8, None), figures(4, Some(250))];
        tasks[1].operator_figures = vec![figures(4, None), figures(2, Some(100))];
        let s = JobStatus {
            graph: vec![op("src"), op("map")],
            tasks,
            ..Default::default()
        };
        let v = job_view(&s);
        let map = &v["operators"][1];
        assert_eq!(map["records_in"], json!([2, 4]), "{map:#}");
        assert_eq!(map["subtasks"][0]["subtask"], 0);
        assert_eq!(map["subtasks"][0]["records_out"], 1);
        assert_eq!(map["subtasks"][1]["watermark_lag_ms"], 250);
        assert_eq!(map["subtasks"][1]["watermark_ms"], 9_750);
        assert_eq!(
            v["operators"][0]["subtasks"][1]["watermark_lag_ms"],
            Value::Null
        );
        assert!(v["state_sizes"]["operators"].is_array());
    }

    #[test]
    fn the_history_comes_newest_first_with_its_counts() {
        let s = JobStatus {
            history: vec![
                record(1, "completed"),
                record(2, "failed"),
                record(3, "in_progress"),
            ],
            checkpoints_completed: 1,
            checkpoints_failed: 1,
            ..Default::default()
        };
        let v = checkpoints_view(&s);
        assert_eq!(v["history"][0]["id"], 3);
        assert_eq!(v["history"][2]["id"], 1);
        assert_eq!(v["counts"]["in_progress"], 1);
        assert_eq!(v["counts"]["failed"], 1);
        assert_eq!(v["latest_completed"]["id"], 1);
    }

    #[test]
    fn workers_list_their_subtasks_and_name_the_peers_of_their_streams() {
        use crate::api::execution::{StreamStatus, WorkerStatus};
        let s = JobStatus {
            cluster: true,
            workers: vec![
                WorkerStatus {
                    id: 4,
                    name: "w1".into(),
                    address: "127.0.0.1:7001".into(),
                    slots: 1,
                    heartbeat_age_ms: Some(120),
                    state: "up".into(),
                    streams: vec![StreamStatus {
                        peer: 5,
                        bytes_sent: 10,
                        ..StreamStatus::default()
                    }],
                    ..WorkerStatus::default()
                },
                WorkerStatus {
                    id: 5,
                    name: "w2".into(),
                    streams: vec![StreamStatus {
                        peer: 9, // a worker no longer listed
                        ..StreamStatus::default()
                    }],
                    ..WorkerStatus::default()
                },
            ],
            ..Default::default()
        };
        let v = workers_view(&s);
        assert_eq!(v["cluster"], true);
        assert_eq!(v["workers"][0]["address"], "127.0.0.1:7001");
        assert_eq!(v["workers"][0]["heartbeat_age_ms"], 120);
        assert_eq!(v["workers"][0]["streams"][0]["peer_name"], "w2");
        assert_eq!(v["workers"][0]["streams"][0]["bytes_sent"], 10);
        assert_eq!(v["workers"][1]["streams"][0]["peer_name"], Value::Null);
        assert_eq!(job_view(&s)["workers"], serde_json::json!(["w1", "w2"]));
    }
}
