//! The control endpoint's JSON API, `/metrics` and its guard, against a running
//! `weir run keyed-count` (issue 14): what the API says matches what happened (a restart
//! and its cause, completed checkpoints, a savepoint on disk), the metrics parse as the
//! OpenMetrics text format, and the token and cross-site rules hold.

mod common;
mod dashboard_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use dashboard_support::*;
use serde_json::{json, Value};

/// One sample of the OpenMetrics text format.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the OpenMetrics text format strictly enough to catch a malformed exposition:
/// every family is declared (`# TYPE`) before its samples, every sample is
/// `name{label="value",…} number`, and the text ends with `# EOF`.
fn parse_openmetrics(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.last(),
        Some(&"# EOF"),
        "no `# EOF` at the end:\n{text}"
    );
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("`# TYPE name kind`");
            types.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment {line:?}");
        let (series, value) = line.rsplit_once(' ').expect("`series value`");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("not a number in {line:?}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels end with }");
                let labels = body
                    .split("\",")
                    .map(|pair| {
                        let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                        (k.to_string(), v.trim_end_matches('"').to_string())
                    })
                    .collect();
                (name.to_string(), labels)
            }
        };
        let family = types
            .keys()
            .filter(|f| name.starts_with(f.as_str()))
            .max_by_key(|f| f.len())
            .unwrap_or_else(|| panic!("sample {name} of no declared family"));
        let suffix = &name[family.len()..];
        let allowed: &[&str] = match types[family].as_str() {
            "counter" => &["_total", "_created"],
            "gauge" => &[""],
            "histogram" => &["_bucket", "_sum", "_count", "_created"],
            other => panic!("unexpected type {other}"),
        };
        assert!(allowed.contains(&suffix), "{name} in a {}", types[family]);
        samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    (types, samples)
}

fn value(samples: &[Sample], name: &str) -> f64 {
    samples
        .iter()
        .find(|s| s.name == name && s.labels.is_empty())
        .unwrap_or_else(|| panic!("no {name}"))
        .value
}

#[test]
fn the_api_and_metrics_follow_a_running_job() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let job = start_job(
        t,
        &[
            "--inject-failures",
            "1",
            "--seed",
            "3",
            "--restart-strategy",
            "fixed-delay",
            "--restart-delay",
            "10ms",
        ],
        "api",
    );
    // The injected failure struck, the job restarted, and a checkpoint completed since.
    let overview = wait_for(&job.url("/api/job"), "restarted", |v| {
        v["restarts"].as_u64() >= Some(1) && v["state"] == "running"
    });
    assert_eq!(overview["job"], "keyed-count");
    let failed = &overview["attempts"][0];
    assert_eq!(failed["attempt"], 1, "{overview:#}");
    assert!(
        failed["failure"]
            .as_str()
            .is_some_and(|f| f.contains("injected")),
        "the restart's cause: {overview:#}"
    );
    // `weir status` prints the same: the restart with its cause, the checkpoint counts.
    let status = run(&mut weir(t, ["status", "--job", job.addr.as_str()]));
    status.assert_success();
    assert!(
        status
            .stdout
            .contains("restarts: 1; the last after attempt 1 failed:")
            && status.stdout.contains("injected")
            && status.stdout.contains(" completed, "),
        "{}",
        status.describe()
    );
    let uids: Vec<&str> = overview["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["uid"].as_str().unwrap())
        .collect();
    assert!(
        uids.contains(&"generator") && uids.contains(&"count"),
        "{uids:?}"
    );
    for op in overview["operators"].as_array().unwrap() {
        assert_eq!(op["parallelism"], 2, "{op}");
        assert!(op["name"].as_str().is_some_and(|n| !n.is_empty()), "{op}");
    }
    let generator = overview["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["uid"] == "generator")
        .unwrap();
    let per_subtask = generator["records_in"]
        .as_array()
        .expect("records per subtask");
    assert_eq!(per_subtask.len(), 2);
    assert!(overview["source_records"].as_u64() > Some(0));
    // Per task: the generator's chain sends records downstream and works; the counting
    // chain waits for input and sends nothing (its sink is chained in).
    let tasks = overview["tasks"].as_array().expect("tasks");
    let head = |t: &Value| t["operators"][0].as_str().unwrap().to_string();
    let sent: u64 = tasks
        .iter()
        .filter(|t| head(t) == "generator")
        .map(|t| t["records_out"].as_u64().unwrap())
        .sum();
    assert!(sent > 0, "{tasks:?}");
    for t in tasks {
        assert!(t["busy_ms"].as_u64() > Some(0), "{t}");
        assert!(
            t["backpressured_ms"].is_u64() && t["idle_ms"].is_u64(),
            "{t}"
        );
        if head(t) == "count" {
            assert_eq!(t["records_out"], 0, "{t}");
            assert!(t["idle_ms"].as_u64() > Some(0), "{t}");
        }
    }
    // Per operator, chained ones included: the sink chained behind `count` has its own
    // figures per subtask, and what `count` received is what its task received.
    let ops = overview["operators"].as_array().unwrap();
    let op = |uid: &str| ops.iter().find(|o| o["uid"] == uid).unwrap().clone();
    let count = op("count");
    let sink = ops
        .iter()
        .find(|o| o["chain"] == count["chain"] && o["uid"] != "count")
        .unwrap_or_else(|| panic!("no operator chained behind count: {ops:?}"));
    for o in [&count, sink, &generator.clone()] {
        let subs = o["subtasks"].as_array().expect("per-subtask figures");
        assert_eq!(subs.len(), 2, "{o}");
        for f in subs {
            for field in ["records_in", "records_out", "busy_ms"] {
                assert!(f[field].is_u64(), "{field} of {o}");
            }
            assert!(f["watermark_lag_ms"].is_null(), "no event time here: {o}");
        }
    }
    let received: u64 = count["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["records_in"].as_u64().unwrap())
        .sum();
    assert!(received > 0, "{count}");
    assert_eq!(
        sink["records_in"],
        json!([0, 0]),
        "final counts only at the end: {sink}"
    );
    let history = wait_for(
        &job.url("/api/checkpoints"),
        "a checkpoint completed",
        |v| v["latest_completed"]["id"].is_u64(),
    );
    // The state of the newest completed checkpoint, per operator and state.
    let state = wait_for(&job.url("/api/state"), "state sizes", |v| {
        v["checkpoint_id"].is_u64()
    });
    let counts = state["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["uid"] == "count")
        .unwrap_or_else(|| panic!("no state of count: {state:#}"));
    let keyed = &counts["states"][0];
    assert_eq!(keyed["name"], "count", "{state:#}");
    assert_eq!(keyed["scope"], "keyed", "{state:#}");
    assert!(keyed["bytes"].as_u64() > Some(0), "{state:#}");
    assert_eq!(counts["bytes"], keyed["bytes"], "{state:#}");
    let done = &history["latest_completed"];
    assert_eq!(done["kind"], "checkpoint");
    assert!(done["duration_ms"].is_u64() && done["bytes"].as_u64() > Some(0));
    assert!(
        done["trigger_ms"].as_u64() > Some(1_600_000_000_000),
        "{done}"
    );
    assert!(is_object(
        &Path::new(done["path"].as_str().unwrap()).join("_metadata")
    ));

    // The guard: an action without the header, or from another origin, does not act.
    let action = [("X-Weir-Action", "1")];
    let (status, body) = post(&job.url("/savepoint"), &[]);
    assert_eq!(status, 403, "{body}");
    let evil = [("X-Weir-Action", "1"), ("Origin", "http://evil.example")];
    assert_eq!(post(&job.url("/savepoint"), &evil).0, 403);
    assert_eq!(
        get(&job.url("/api/job"), &[("Host", "evil.example")]).0,
        403
    );
    assert!(
        list_folder(&checkpoint_dir(&t.join("sp"))).is_empty(),
        "a refused request took no savepoint"
    );

    // A savepoint through the API shows in the history with its folder.
    let (status, body) = post(&job.url("/savepoint"), &action);
    assert_eq!(status, 200, "{body}");
    let sp: Value = serde_json::from_str(&body).unwrap();
    let sp_path = PathBuf::from(sp["path"].as_str().unwrap());
    assert!(is_object(&sp_path.join("_metadata")), "{sp_path:?}");
    let history = json(&job.url("/api/checkpoints"));
    let row = history["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == sp["id"])
        .unwrap_or_else(|| panic!("no savepoint row: {history:#}"));
    assert_eq!(row["kind"], "savepoint");
    assert_eq!(row["status"], "completed");
    assert_eq!(row["path"], sp["path"]);
    let ids: Vec<u64> = history["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");

    // The metrics agree with the API.
    let (status, text) = get(&job.url("/metrics"), &[]);
    assert_eq!(status, 200, "{text}");
    let (types, samples) = parse_openmetrics(&text);
    assert_eq!(types["weir_checkpoint_duration_seconds"], "histogram");
    let completed = value(&samples, "weir_checkpoints_completed_total");
    assert!(completed >= 2.0, "{text}");
    assert!(value(&samples, "weir_restarts_total") >= 1.0, "{text}");
    assert!(
        value(&samples, "weir_last_checkpoint_size_bytes") > 0.0,
        "{text}"
    );
    let count = value(&samples, "weir_checkpoint_duration_seconds_count");
    assert_eq!(count, completed, "every completed one is in the histogram");
    let buckets: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == "weir_checkpoint_duration_seconds_bucket")
        .map(|s| s.value)
        .collect();
    assert!(
        buckets.windows(2).all(|w| w[0] <= w[1]),
        "cumulative: {buckets:?}"
    );
    assert_eq!(buckets.last(), Some(&count), "+Inf holds them all");
    let tasks: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == "weir_task_records_in_total")
        .collect();
    assert_eq!(tasks.len(), 4, "two chains × two subtasks: {text}");
    let generator: f64 = tasks
        .iter()
        .filter(|s| s.labels["operator"] == "generator")
        .map(|s| s.value)
        .sum();
    assert!(generator > 0.0, "{text}");
    assert!(tasks.iter().any(|s| s.labels["subtask"] == "1"), "{text}");
    let out: f64 = samples
        .iter()
        .filter(|s| s.name == "weir_task_records_out_total")
        .map(|s| s.value)
        .sum();
    assert!(out > 0.0, "{text}");
    for family in [
        "weir_task_backpressured_seconds",
        "weir_task_idle_seconds",
        "weir_task_busy_seconds",
    ] {
        assert_eq!(types[family], "counter", "{text}");
        let n = samples
            .iter()
            .filter(|s| s.name == format!("{family}_total"))
            .count();
        assert_eq!(n, 4, "{family} per task: {text}");
    }
    assert_eq!(types["weir_task_checkpoint_alignment_seconds"], "gauge");
    assert!(
        samples
            .iter()
            .filter(|s| s.name == "weir_task_checkpoint_alignment_seconds")
            .all(|s| s.value >= 0.0),
        "{text}"
    );

    // Per operator: the sink chained behind `count` is there, and what the counting
    // operators received adds up to what their tasks received.
    let per_op = |name: &str, uid: &str| -> Vec<&Sample> {
        samples
            .iter()
            .filter(|s| s.name == name && s.labels["operator"] == uid)
            .collect()
    };
    assert_eq!(types["weir_operator_records_in"], "counter", "{text}");
    assert_eq!(per_op("weir_operator_records_in_total", "count").len(), 2);
    let sink_uid = sink["uid"].as_str().unwrap();
    assert_eq!(
        per_op("weir_operator_records_out_total", sink_uid).len(),
        2,
        "{text}"
    );
    assert_eq!(per_op("weir_operator_busy_seconds_total", "count").len(), 2);
    assert!(
        !types.contains_key("weir_operator_watermark_lag_seconds"),
        "no watermark lag without event time: {text}"
    );
    assert_eq!(types["weir_state_size_bytes"], "gauge", "{text}");
    let state_bytes: f64 = samples
        .iter()
        .filter(|s| {
            s.name == "weir_state_size_bytes"
                && s.labels["operator"] == "count"
                && s.labels["state"] == "count"
                && s.labels["scope"] == "keyed"
        })
        .map(|s| s.value)
        .sum();
    assert!(state_bytes > 0.0, "{text}");
    // Per operator: what that checkpoint wrote for the counter, and where its state lived
    // (in memory: no local disk, its keys decoded).
    let of = |name: &str, files: Option<&str>| -> Vec<f64> {
        (samples.iter())
            .filter(|s| s.name == name && s.labels["operator"] == "count")
            .filter(|s| files.is_none_or(|f| s.labels["files"] == f))
            .map(|s| s.value)
            .collect()
    };
    assert_eq!(types["weir_state_checkpoint_bytes"], "gauge", "{text}");
    assert!(
        of("weir_state_checkpoint_bytes", Some("new"))[0] > 0.0,
        "{text}"
    );
    assert_eq!(
        of("weir_state_checkpoint_bytes", Some("shared")),
        [0.0],
        "{text}"
    );
    assert_eq!(of("weir_state_local_disk_bytes", None), [0.0], "{text}");
    assert!(of("weir_state_memory_entries", None)[0] > 0.0, "{text}");

    // Stop through the API: the job ends with its savepoint.
    let (status, body) = post(&job.url("/stop"), &action);
    assert_eq!(status, 200, "{body}");
    let (code, log) = job.finish();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("stopped with savepoint"), "{log}");
}

#[test]
fn a_token_protects_the_api_and_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let token_file = t.join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let job = start_job(
        t,
        &[
            "--control",
            "0.0.0.0:0",
            "--control-token-file",
            &s(&token_file),
        ],
        "token",
    );
    for path in ["/api/job", "/api/checkpoints", "/metrics", "/status"] {
        let url = job.url(path);
        assert_eq!(get(&url, &[]).0, 401, "no token: {path}");
        let wrong = [("Authorization", "Bearer s3cret-tokeN")];
        assert_eq!(get(&url, &wrong).0, 401, "wrong token: {path}");
        let right = [("Authorization", "Bearer s3cret-token")];
        assert_eq!(get(&url, &right).0, 200, "{path}");
        assert_eq!(get(&format!("{url}?token=nope"), &[]).0, 401, "{path}");
        let cookie = [("Cookie", "weir_token=s3cret-token")];
        assert_eq!(get(&url, &cookie).0, 200, "{path}");
    }
    // A browser opens `?token=…` once and keeps the cookie (strict: never sent cross-site).
    let resp = agent()
        .get(&job.url("/api/job?token=s3cret-token"))
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let cookie = resp
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        cookie.starts_with("weir_token=s3cret-token;") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    // An action needs the token even with the header, and the query does not carry it.
    let action = [("X-Weir-Action", "1")];
    assert_eq!(post(&job.url("/checkpoint"), &action).0, 401);
    assert_eq!(
        post(&job.url("/checkpoint?token=s3cret-token"), &action).0,
        401
    );
    let both = [
        ("X-Weir-Action", "1"),
        ("Authorization", "Bearer s3cret-token"),
    ];
    let (status, body) = post(&job.url("/stop"), &both);
    assert_eq!(status, 200, "{body}");
    let (code, log) = job.finish();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn an_event_time_job_shows_its_watermark_lag() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let job = start_job(t, &["--event-time"], "event-time");
    // The generator stamps events with the wall clock and the watermark trails the newest
    // stamp by 100 ms (keyed-count's bound), so the lag is at least that much.
    let lagging = |v: &Value, uid: &str| -> Vec<u64> {
        let ops = v["operators"].as_array().unwrap();
        let Some(op) = ops.iter().find(|o| o["uid"] == uid) else {
            return Vec::new();
        };
        op["subtasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["watermark_lag_ms"].as_u64())
            .collect()
    };
    let v = wait_for(&job.url("/api/job"), "a watermark lag per subtask", |v| {
        lagging(v, "count").len() == 2 && lagging(v, "timestamps").len() == 2
    });
    let chain = |uid: &str| {
        v["operators"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["uid"] == uid)
            .unwrap()["chain"]
            .clone()
    };
    assert_eq!(chain("timestamps"), chain("generator"), "chained: {v:#}");
    for uid in ["timestamps", "count"] {
        for lag in lagging(&v, uid) {
            assert!(
                lag >= 100,
                "{uid} lags {lag} ms, less than the bound: {v:#}"
            );
        }
    }
    let op = v["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["uid"] == "count")
        .unwrap();
    let f = &op["subtasks"][0];
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let w = f["watermark_ms"].as_u64().unwrap();
    assert!(
        w > 1_600_000_000_000 && w < now_ms,
        "a wall-clock watermark: {f}"
    );

    let (status, text) = get(&job.url("/metrics"), &[]);
    assert_eq!(status, 200, "{text}");
    let (types, samples) = parse_openmetrics(&text);
    assert_eq!(types["weir_operator_watermark_lag_seconds"], "gauge");
    let lags: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == "weir_operator_watermark_lag_seconds" && s.labels["operator"] == "count"
        })
        .collect();
    assert_eq!(lags.len(), 2, "{text}");
    assert!(lags.iter().all(|s| s.value >= 0.1), "{text}");

    let (status, body) = post(&job.url("/stop"), &[("X-Weir-Action", "1")]);
    assert_eq!(status, 200, "{body}");
    let (code, log) = job.finish();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn the_pages_stay_readable_while_the_run_lingers_after_its_job() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // 2 s of input, then 4 s more of serving the final status.
    let job = start_job_events(t, 1_000_000, &["--control-linger", "4s"], "linger");
    let done = wait_for(&job.url("/api/job"), "the job finished", |v| {
        v["state"] == "finished"
    });
    assert_eq!(done["source_records"], 1_000_000, "{done:#}");
    // The run has published its output and printed its summary, and still answers.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&job.log)
        .unwrap()
        .contains("stays up for 4s")
    {
        assert!(std::time::Instant::now() < deadline, "no linger notice");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(t.join("out-linger").is_dir(), "output published first");
    let (status, page) = get(&job.url("/checkpoints"), &[]);
    assert_eq!(status, 200);
    assert!(page.contains("id=\"timeline\""), "{page}");
    let history = json(&job.url("/api/checkpoints"));
    assert!(history["latest_completed"]["id"].is_u64(), "{history:#}");
    assert_eq!(json(&job.url("/api/job"))["state"], "finished");
    // Then the process exits by itself.
    let (code, log) = job.finish();
    assert_eq!(code, Some(0), "{log}");
}

/// Unaligned checkpoints under backpressure (issue 13) show as `unaligned` in
/// `/api/checkpoints`'s history, which the dashboard's alignment column shows, with the
/// bytes in flight they saved; aligned ones as `aligned` (the browser test's run).
#[test]
fn unaligned_checkpoints_show_as_unaligned_in_the_history() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // The count at a tenth of the generator's 500 000 a second: its input channels stay
    // full, so every checkpoint overtakes records in flight.
    let extra = ["--unaligned", "--sink-rate", "50000"];
    let job = start_job_events(t, 2_000_000, &extra, "unaligned");
    let unaligned = |r: &&Value| r["status"] == "completed" && r["alignment"] == "unaligned";
    let v = wait_for(
        &job.url("/api/checkpoints"),
        "an unaligned checkpoint",
        |v| {
            v["history"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| unaligned(&r))
        },
    );
    let history = v["history"].as_array().unwrap();
    let row = history.iter().find(unaligned).unwrap();
    assert!(row["in_flight_bytes"].as_u64() > Some(0), "{row:#}");
    for r in history {
        let done = r["status"] == "completed";
        assert_eq!(
            r["alignment"].is_string(),
            done,
            "how it was taken, for completed ones only: {r:#}"
        );
    }
}
