//! The JSON API behind the dashboard (issue 14): read-only views of the job's
//! [`JobStatus`], the same data `weir status` prints, shaped for pages.
//!
//! | request | answer |
//! |---|---|
//! | `GET /api/job` | name, state, attempt, restarts, records read; operators with uid, name, parallelism, chain, inputs and records in per subtask; tasks; attempts with their failures; savepoints |
//! | `GET /api/checkpoints` | counts (completed, failed, in progress), the newest completed one, and the history newest first: id, kind, status, trigger time, end-to-end duration, size, folder, failure cause |
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

/// The job overview. An operator's `records_in` is per subtask when the operator heads
/// its chain (the engine counts records where they enter a task); `null` for an operator
/// chained behind another, which sees what its chain's head passes on.
pub(crate) fn job_view(s: &JobStatus) -> Value {
    let operators: Vec<Value> = s
        .graph
        .iter()
        .map(|op| {
            let mut per_subtask: Vec<(u32, u64)> = s
                .tasks
                .iter()
                .filter(|t| t.operators.first() == Some(&op.uid))
                .map(|t| (t.subtask, t.records_in))
                .collect();
            per_subtask.sort_unstable();
            let records_in: Option<Vec<u64>> = (!per_subtask.is_empty())
                .then(|| per_subtask.into_iter().map(|(_, n)| n).collect());
            json!({
                "uid": op.uid,
                "name": op.name,
                "parallelism": op.parallelism,
                "chain": op.chain,
                "inputs": op.inputs,
                "records_in": records_in,
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
    use crate::api::execution::{CheckpointRecord, OperatorStatus, TaskStatus};

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
}
