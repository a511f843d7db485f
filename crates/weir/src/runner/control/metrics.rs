//! `GET /metrics`: the job's metrics in the OpenMetrics text format (which Prometheus
//! scrapes), encoded by the `prometheus-client` crate (issue 14).
//!
//! Nothing is counted twice: a [`Collector`] reads the job's [`JobStatus`] at each scrape
//! (the engine's own counters, the checkpoint history's totals and its duration histogram),
//! so metrics cost the job nothing between scrapes.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `weir_checkpoint_duration_seconds` | histogram (trigger to completion) | — |
//! | `weir_last_checkpoint_size_bytes` | gauge | — |
//! | `weir_checkpoints_completed_total`, `weir_checkpoints_failed_total` | counter | — |
//! | `weir_restarts_total` | counter | — |
//! | `weir_source_records_total` | counter (records read by the sources, replays included) | — |
//! | `weir_task_records_in_total` | counter (records entering a task) | `chain`, `operator` (the chain's head), `subtask` |
//! | `weir_task_records_out_total` | counter (records a task sent downstream) | `chain`, `operator` (the chain's tail), `subtask` |
//! | `weir_task_backpressured_seconds_total` | counter (blocked on a full output channel) | `chain`, `operator` (tail), `subtask` |
//! | `weir_task_idle_seconds_total`, `weir_task_busy_seconds_total` | counter (waiting for input; neither that nor backpressured) | `chain`, `operator` (head), `subtask` |
//! | `weir_task_checkpoint_alignment_seconds` | gauge (barrier alignment in the newest completed checkpoint) | `chain`, `operator` (head), `subtask` |
//! | `weir_job_attempt` | gauge | — |
//! | `weir_operator_records_in_total`, `weir_operator_records_out_total` | counter (records that reached an operator, that it emitted) | `operator`, `chain`, `subtask` |
//! | `weir_operator_busy_seconds_total` | counter (an operator's share of its task's busy time) | `operator`, `chain`, `subtask` |
//! | `weir_operator_watermark_lag_seconds` | gauge (wall clock minus the operator's current watermark; event-time operators only) | `operator`, `chain`, `subtask` |
//! | `weir_state_size_bytes` | gauge (state in the newest completed checkpoint) | `operator`, `state`, `scope` (`keyed`, `operator`) |
//! | `weir_state_checkpoint_bytes` | gauge (files the newest completed checkpoint wrote for the operator, `new`, or lists from earlier ones, `shared`) | `operator`, `files` (`new`, `shared`) |
//! | `weir_state_local_disk_bytes`, `weir_state_memory_entries` | gauge (keyed state on local disk, entries decoded in memory, at that checkpoint's barrier) | `operator` |
//! | `weir_worker_slots`, `weir_worker_subtasks` | gauge (slots a worker offers, subtasks it runs) | `worker` |
//! | `weir_worker_heartbeat_age_seconds` | gauge (since the coordinator last heard from the worker; cluster only) | `worker` |
//! | `weir_exchange_sent_bytes_total`, `weir_exchange_received_bytes_total` | counter (encoded bytes on one exchange stream since it opened) | `worker`, `peer` |
//! | `weir_exchange_permit_waits_total` | counter (sends that waited for the receiver's permits) | `worker`, `peer` |
//! | `weir_exchange_permit_wait_seconds_total` | counter (how long they waited) | `worker`, `peer` |
//!
//! Every per-task and per-operator series carries a `worker` label: the worker that runs
//! the subtask on a cluster (its `--name`), `local` in one process. The exchange series
//! come from the workers' reports to the coordinator (every 200 ms), so the coordinator's
//! `/metrics` covers the whole job; a stream opened anew after a restart counts from 0
//! again, which `rate()` and `increase()` take as a counter reset.
//!
//! The `_seconds_total` counters' `rate()` is the share of time backpressured, idle or
//! busy.

use std::fmt::Error as FmtError;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::http::Response;
use crate::api::execution::{OperatorFigures, StreamStatus, TaskStatus, WorkerStatus};
use crate::prelude::{JobControl, JobStatus};

/// The content type of the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Reads a job's status at every scrape.
#[derive(Debug)]
struct JobCollector(JobControl);

impl Collector for JobCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), FmtError> {
        encode_status(&self.0.status(), encoder)
    }
}

/// The registry `/metrics` encodes: one collector over `control`.
pub(crate) fn registry(control: JobControl) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(JobCollector(control)));
    registry
}

/// `GET /metrics`.
pub(crate) fn scrape(registry: &Registry) -> Response {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, registry) {
        Ok(()) => Response::bytes(200, CONTENT_TYPE, text.into_bytes()),
        Err(_) => Response::error(500, "cannot encode the metrics"),
    }
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> Result<(), FmtError> {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn encode_status(s: &JobStatus, mut e: DescriptorEncoder) -> Result<(), FmtError> {
    let h = &s.checkpoint_durations;
    // The engine keeps cumulative counts; the encoder wants each bucket's own, +Inf last.
    let mut buckets: Vec<(f64, u64)> = Vec::with_capacity(h.buckets.len() + 1);
    let mut below = 0;
    for &(bound_ms, cumulative) in &h.buckets {
        buckets.push((bound_ms as f64 / 1000.0, cumulative - below));
        below = cumulative;
    }
    buckets.push((f64::INFINITY, h.count - below));
    e.encode_descriptor(
        "weir_checkpoint_duration",
        "End-to-end duration of completed checkpoints and savepoints, trigger to metadata written",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?
    .encode_histogram::<NoLabelSet>(h.sum_ms as f64 / 1000.0, h.count, &buckets, None)?;
    let size = ConstGauge::new(s.last_checkpoint_bytes as i64);
    size.encode(e.encode_descriptor(
        "weir_last_checkpoint_size",
        "State written by the newest completed checkpoint or savepoint",
        Some(&Unit::Bytes),
        size.metric_type(),
    )?)?;
    counter(
        &mut e,
        "weir_checkpoints_completed",
        "Checkpoints and savepoints completed",
        s.checkpoints_completed,
    )?;
    counter(
        &mut e,
        "weir_checkpoints_failed",
        "Checkpoints and savepoints that failed (timed out, declined, attempt ended)",
        s.checkpoints_failed,
    )?;
    counter(
        &mut e,
        "weir_restarts",
        "Restarts after a failure",
        u64::from(s.restarts),
    )?;
    counter(
        &mut e,
        "weir_source_records",
        "Records emitted by the sources, replays after a recovery included",
        s.source_records,
    )?;
    let attempt = ConstGauge::new(i64::from(s.attempt));
    attempt.encode(e.encode_descriptor(
        "weir_job_attempt",
        "The running attempt (1 + restarts)",
        None,
        attempt.metric_type(),
    )?)?;
    let secs = |ms: u64| ms as f64 / 1000.0;
    per_task(
        &mut e,
        s,
        "weir_task_records_in",
        "Records that entered a task (its source's, or its input channels'), per chain and subtask",
        None,
        false,
        |t| Some(Value::Count(t.records_in)),
    )?;
    per_task(
        &mut e,
        s,
        "weir_task_records_out",
        "Records a task sent on its output channels (a broadcast counts each copy)",
        None,
        true,
        |t| Some(Value::Count(t.records_out)),
    )?;
    per_task(
        &mut e,
        s,
        "weir_task_backpressured",
        "Time a task was blocked sending to a full output channel (backpressure)",
        Some(&Unit::Seconds),
        true,
        |t| Some(Value::Seconds(secs(t.backpressured_ms))),
    )?;
    per_task(
        &mut e,
        s,
        "weir_task_idle",
        "Time an input task waited for input",
        Some(&Unit::Seconds),
        false,
        |t| Some(Value::Seconds(secs(t.idle_ms))),
    )?;
    per_task(
        &mut e,
        s,
        "weir_task_busy",
        "Time a task worked: neither waiting for input nor backpressured",
        Some(&Unit::Seconds),
        false,
        |t| Some(Value::Seconds(secs(t.busy_ms))),
    )?;
    let latest = s.history.iter().rev().find(|r| r.status == "completed");
    let alignment = |t: &TaskStatus| {
        latest?
            .subtasks
            .iter()
            .find(|p| p.chain == t.chain && p.subtask == t.subtask)
            .map(|p| Value::Gauge(p.alignment_ms / 1000.0))
    };
    per_task(
        &mut e,
        s,
        "weir_task_checkpoint_alignment",
        "Barrier alignment at a task in the newest completed checkpoint (first barrier to last)",
        Some(&Unit::Seconds),
        false,
        alignment,
    )?;
    per_operator(
        &mut e,
        s,
        "weir_operator_records_in",
        "Records that reached an operator (a source: records it read), chained ones included",
        None,
        |f| Some(Value::Count(f.records_in)),
    )?;
    per_operator(
        &mut e,
        s,
        "weir_operator_records_out",
        "Records an operator emitted (0 for a sink)",
        None,
        |f| Some(Value::Count(f.records_out)),
    )?;
    per_operator(
        &mut e,
        s,
        "weir_operator_busy",
        "Time an operator worked, its share of its task's busy time",
        Some(&Unit::Seconds),
        |f| Some(Value::Seconds(secs(f.busy_ms))),
    )?;
    per_operator(
        &mut e,
        s,
        "weir_operator_watermark_lag",
        "Wall-clock time minus the operator's current watermark (operators in event time)",
        Some(&Unit::Seconds),
        |f| f.watermark_lag_ms.map(|ms| Value::Gauge(secs(ms))),
    )?;
    state_sizes(&mut e, s)?;
    workers(&mut e, s)
}

/// A per-stream family: name, help, unit, and the sample of a stream.
type StreamFamily = (
    &'static str,
    &'static str,
    Option<&'static Unit>,
    fn(&StreamStatus) -> Value,
);

/// The workers' families: slots, subtasks, heartbeat age, and per exchange stream its
/// bytes and permit waits.
fn workers(e: &mut DescriptorEncoder, s: &JobStatus) -> Result<(), FmtError> {
    let per_worker = |e: &mut DescriptorEncoder,
                      name: &str,
                      help: &str,
                      unit: Option<&Unit>,
                      value: &dyn Fn(&WorkerStatus) -> Option<f64>|
     -> Result<(), FmtError> {
        let values: Vec<(&WorkerStatus, f64)> = (s.workers.iter())
            .filter_map(|w| value(w).map(|v| (w, v)))
            .collect();
        if values.is_empty() {
            return Ok(());
        }
        let mut family = e.encode_descriptor(name, help, unit, MetricType::Gauge)?;
        for (w, v) in values {
            let labels = vec![("worker", w.name.clone())];
            ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    };
    per_worker(
        e,
        "weir_worker_slots",
        "Subtask slots a worker offers (in one process: the tasks it runs)",
        None,
        &|w| Some(f64::from(w.slots)),
    )?;
    per_worker(
        e,
        "weir_worker_subtasks",
        "Subtasks the current attempt runs on a worker",
        None,
        &|w| Some(w.subtasks.len() as f64),
    )?;
    per_worker(
        e,
        "weir_worker_heartbeat_age",
        "Time since the coordinator last heard from a worker (a report or a heartbeat)",
        Some(&Unit::Seconds),
        &|w| w.heartbeat_age_ms.map(|ms| ms as f64 / 1000.0),
    )?;
    let peer_name = |id: u32| {
        (s.workers.iter())
            .find(|w| w.id == id)
            .map_or_else(|| format!("worker {id}"), |w| w.name.clone())
    };
    let streams: Vec<(&WorkerStatus, &StreamStatus, String)> = (s.workers.iter())
        .flat_map(|w| w.streams.iter().map(move |st| (w, st)))
        .map(|(w, st)| (w, st, peer_name(st.peer)))
        .collect();
    if streams.is_empty() {
        return Ok(());
    }
    let families: [StreamFamily; 4] = [
        (
            "weir_exchange_sent",
            "Encoded bytes a worker sent to a peer on their exchange stream, since it opened",
            Some(&Unit::Bytes),
            |st| Value::Count(st.bytes_sent),
        ),
        (
            "weir_exchange_received",
            "Encoded bytes a worker received from a peer on their exchange stream, since it opened",
            Some(&Unit::Bytes),
            |st| Value::Count(st.bytes_received),
        ),
        (
            "weir_exchange_permit_waits",
            "Sends to a peer that waited for its permits (backpressure across workers)",
            None,
            |st| Value::Count(st.permit_waits),
        ),
        (
            "weir_exchange_permit_wait",
            "Time sends to a peer waited for its permits",
            Some(&Unit::Seconds),
            |st| Value::Seconds(st.permit_wait_ms / 1000.0),
        ),
    ];
    for (name, help, unit, value) in families {
        let mut family = e.encode_descriptor(name, help, unit, MetricType::Counter)?;
        for (w, st, peer) in &streams {
            let labels = vec![("worker", w.name.clone()), ("peer", peer.clone())];
            value(st).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// One family with a sample per operator and subtask that `value` has one for.
fn per_operator(
    e: &mut DescriptorEncoder,
    s: &JobStatus,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: impl Fn(&OperatorFigures) -> Option<Value>,
) -> Result<(), FmtError> {
    let values: Vec<(&str, &TaskStatus, Value)> = s
        .tasks
        .iter()
        .flat_map(|t| {
            t.operators
                .iter()
                .zip(&t.operator_figures)
                .filter_map(|(uid, f)| value(f).map(|v| (uid.as_str(), t, v)))
                .collect::<Vec<_>>()
        })
        .collect();
    let kind = match values.first() {
        None => return Ok(()),
        Some((_, _, Value::Gauge(_))) => MetricType::Gauge,
        Some(_) => MetricType::Counter,
    };
    let mut family = e.encode_descriptor(name, help, unit, kind)?;
    for (uid, t, v) in values {
        let labels = vec![
            ("chain", t.chain.clone()),
            ("operator", uid.to_string()),
            ("subtask", t.subtask.to_string()),
            ("worker", t.worker.clone()),
        ];
        v.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// `weir_state_size_bytes`: per operator and state, from the newest completed checkpoint;
/// per operator that checkpoint's new and shared file bytes, and where its state lived.
fn state_sizes(e: &mut DescriptorEncoder, s: &JobStatus) -> Result<(), FmtError> {
    if s.state_sizes.operators.is_empty() {
        return Ok(());
    }
    let mut family = e.encode_descriptor(
        "weir_state_size",
        "State per operator and state in the newest completed checkpoint or savepoint \
         (encoded entries, summed over subtasks)",
        Some(&Unit::Bytes),
        MetricType::Gauge,
    )?;
    for op in &s.state_sizes.operators {
        for st in &op.states {
            let labels = vec![
                ("operator", op.uid.clone()),
                ("state", st.name.clone()),
                ("scope", st.scope.clone()),
            ];
            ConstGauge::new(st.bytes as i64).encode(family.encode_family(&labels)?)?;
        }
    }
    // Per operator: what the checkpoint's files cost, and where its state lived.
    let mut family = e.encode_descriptor(
        "weir_state_checkpoint",
        "Bytes of the files the newest completed checkpoint wrote for an operator (new) and \
         of earlier checkpoints' shared files it lists (shared), summed over subtasks",
        Some(&Unit::Bytes),
        MetricType::Gauge,
    )?;
    for op in &s.state_sizes.operators {
        for (files, bytes) in [("new", op.new_bytes), ("shared", op.shared_bytes)] {
            let labels = vec![("operator", op.uid.clone()), ("files", files.into())];
            ConstGauge::new(bytes as i64).encode(family.encode_family(&labels)?)?;
        }
    }
    let mut family = e.encode_descriptor(
        "weir_state_local_disk",
        "Bytes an operator's keyed state occupied on local disk at the newest completed \
         checkpoint's barrier (the disk backend's LSMs), summed over subtasks",
        Some(&Unit::Bytes),
        MetricType::Gauge,
    )?;
    for op in &s.state_sizes.operators {
        let labels = vec![("operator", op.uid.clone())];
        ConstGauge::new(op.local_disk_bytes as i64).encode(family.encode_family(&labels)?)?;
    }
    let mut family = e.encode_descriptor(
        "weir_state_memory_entries",
        "Keyed-state entries an operator held decoded in memory at the newest completed \
         checkpoint's barrier (on disk: its caches'), summed over subtasks",
        None,
        MetricType::Gauge,
    )?;
    for op in &s.state_sizes.operators {
        let labels = vec![("operator", op.uid.clone())];
        ConstGauge::new(op.memory_entries as i64).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A per-task sample.
enum Value {
    Count(u64),
    Seconds(f64),
    Gauge(f64),
}

/// One family with a sample per task that `value` has one for, labelled by chain, subtask
/// and its head operator (its tail with `tail`: what records out and backpressure are of).
fn per_task(
    e: &mut DescriptorEncoder,
    s: &JobStatus,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    tail: bool,
    value: impl Fn(&TaskStatus) -> Option<Value>,
) -> Result<(), FmtError> {
    let values: Vec<(&TaskStatus, Value)> = s
        .tasks
        .iter()
        .filter_map(|t| value(t).map(|v| (t, v)))
        .collect();
    let kind = match values.first() {
        None => return Ok(()),
        Some((_, Value::Gauge(_))) => MetricType::Gauge,
        Some(_) => MetricType::Counter,
    };
    let mut family = e.encode_descriptor(name, help, unit, kind)?;
    for (t, v) in values {
        let op = if tail {
            t.operators.last()
        } else {
            t.operators.first()
        };
        let labels = vec![
            ("chain", t.chain.clone()),
            ("operator", op.cloned().unwrap_or_default()),
            ("subtask", t.subtask.to_string()),
            ("worker", t.worker.clone()),
        ];
        v.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Value {
    fn encode(self, m: prometheus_client::encoding::MetricEncoder<'_>) -> Result<(), FmtError> {
        match self {
            Value::Count(n) => ConstCounter::new(n).encode(m),
            Value::Seconds(x) => ConstCounter::new(x).encode(m),
            Value::Gauge(x) => ConstGauge::new(x).encode(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::execution::{
        CheckpointRecord, DurationHistogram, OperatorStateSize, StateSize, StateSizes,
        SubtaskPhases,
    };

    #[test]
    fn the_status_becomes_openmetrics_text() {
        let mut registry = Registry::default();
        #[derive(Debug)]
        struct Fixed(JobStatus);
        impl Collector for Fixed {
            fn encode(&self, e: DescriptorEncoder) -> Result<(), FmtError> {
                encode_status(&self.0, e)
            }
        }
        let status = JobStatus {
            checkpoints_completed: 3,
            checkpoints_failed: 1,
            restarts: 2,
            last_checkpoint_bytes: 4096,
            checkpoint_durations: DurationHistogram {
                buckets: vec![(5, 1), (10, 2)],
                count: 3,
                sum_ms: 1500,
            },
            tasks: vec![TaskStatus {
                chain: "source -> map".into(),
                operators: vec!["src".into(), "map".into()],
                subtask: 1,
                parallelism: 2,
                worker: "w1".into(),
                records_in: 77,
                records_out: 70,
                backpressured_ms: 1500,
                idle_ms: 250,
                busy_ms: 4000,
                operator_figures: vec![
                    OperatorFigures {
                        records_in: 77,
                        records_out: 77,
                        busy_ms: 1000,
                        watermark_ms: None,
                        watermark_lag_ms: None,
                    },
                    OperatorFigures {
                        records_in: 77,
                        records_out: 70,
                        busy_ms: 3000,
                        watermark_ms: Some(1000),
                        watermark_lag_ms: Some(1250),
                    },
                ],
                ..TaskStatus::default()
            }],
            state_sizes: StateSizes {
                checkpoint_id: Some(9),
                operators: vec![OperatorStateSize {
                    uid: "map".into(),
                    bytes: 640,
                    new_bytes: 700,
                    shared_bytes: 0,
                    local_disk_bytes: 0,
                    memory_entries: 10,
                    states: vec![StateSize {
                        name: "seen".into(),
                        scope: "keyed".into(),
                        bytes: 640,
                    }],
                }],
            },
            history: vec![CheckpointRecord {
                id: 9,
                kind: "checkpoint".into(),
                stop: false,
                status: "completed".into(),
                trigger_ms: 0,
                end_ms: Some(10),
                duration_ms: Some(10),
                bytes: Some(1),
                path: None,
                failure: None,
                alignment: Some("aligned".into()),
                in_flight_bytes: Some(0),
                subtasks: vec![SubtaskPhases {
                    chain: "source -> map".into(),
                    subtask: 1,
                    alignment_ms: 2.5,
                    sync_ms: 0.0,
                    async_ms: 0.0,
                    bytes: 1,
                    timeline: None,
                }],
            }],
            cluster: true,
            workers: vec![
                WorkerStatus {
                    id: 1,
                    name: "w1".into(),
                    slots: 2,
                    heartbeat_age_ms: Some(250),
                    subtasks: vec![Default::default()],
                    streams: vec![StreamStatus {
                        peer: 2,
                        bytes_sent: 4096,
                        bytes_received: 512,
                        permit_waits: 3,
                        permit_wait_ms: 125.0,
                        ..StreamStatus::default()
                    }],
                    ..WorkerStatus::default()
                },
                WorkerStatus {
                    id: 2,
                    name: "w2".into(),
                    ..WorkerStatus::default()
                },
            ],
            ..Default::default()
        };
        registry.register_collector(Box::new(Fixed(status)));
        let r = scrape(&registry);
        let text = String::from_utf8(r.body).unwrap();
        for line in [
            "weir_checkpoints_completed_total 3",
            "weir_checkpoints_failed_total 1",
            "weir_restarts_total 2",
            "weir_last_checkpoint_size_bytes 4096",
            "weir_checkpoint_duration_seconds_count 3",
            "weir_checkpoint_duration_seconds_sum 1.5",
            "weir_checkpoint_duration_seconds_bucket{le=\"0.005\"} 1",
            "weir_checkpoint_duration_seconds_bucket{le=\"0.01\"} 2",
            "weir_checkpoint_duration_seconds_bucket{le=\"+Inf\"} 3",
            "weir_task_records_in_total{chain=\"source -> map\",operator=\"src\",subtask=\"1\",worker=\"w1\"} 77",
            "weir_task_records_out_total{chain=\"source -> map\",operator=\"map\",subtask=\"1\",worker=\"w1\"} 70",
            "weir_task_backpressured_seconds_total{chain=\"source -> map\",operator=\"map\",subtask=\"1\",worker=\"w1\"} 1.5",
            "weir_task_idle_seconds_total{chain=\"source -> map\",operator=\"src\",subtask=\"1\",worker=\"w1\"} 0.25",
            "weir_task_busy_seconds_total{chain=\"source -> map\",operator=\"src\",subtask=\"1\",worker=\"w1\"} 4.0",
            "weir_task_checkpoint_alignment_seconds{chain=\"source -> map\",operator=\"src\",subtask=\"1\",worker=\"w1\"} 0.0025",
            "weir_operator_records_in_total{chain=\"source -> map\",operator=\"map\",subtask=\"1\",worker=\"w1\"} 77",
            "weir_operator_records_out_total{chain=\"source -> map\",operator=\"map\",subtask=\"1\",worker=\"w1\"} 70",
            "weir_operator_busy_seconds_total{chain=\"source -> map\",operator=\"src\",subtask=\"1\",worker=\"w1\"} 1.0",
            "weir_operator_watermark_lag_seconds{chain=\"source -> map\",operator=\"map\",subtask=\"1\",worker=\"w1\"} 1.25",
            "weir_state_size_bytes{operator=\"map\",state=\"seen\",scope=\"keyed\"} 640",
            "weir_state_checkpoint_bytes{operator=\"map\",files=\"new\"} 700",
            "weir_state_checkpoint_bytes{operator=\"map\",files=\"shared\"} 0",
            "weir_state_local_disk_bytes{operator=\"map\"} 0",
            "weir_state_memory_entries{operator=\"map\"} 10",
            "weir_worker_slots{worker=\"w1\"} 2.0",
            "weir_worker_subtasks{worker=\"w1\"} 1.0",
            "weir_worker_heartbeat_age_seconds{worker=\"w1\"} 0.25",
            "weir_exchange_sent_bytes_total{worker=\"w1\",peer=\"w2\"} 4096",
            "weir_exchange_received_bytes_total{worker=\"w1\",peer=\"w2\"} 512",
            "weir_exchange_permit_waits_total{worker=\"w1\",peer=\"w2\"} 3",
            "weir_exchange_permit_wait_seconds_total{worker=\"w1\",peer=\"w2\"} 0.125",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        assert!(
            !text.contains(
                "weir_operator_watermark_lag_seconds{chain=\"source -> map\",operator=\"src\""
            ),
            "no lag without event time:\n{text}"
        );
    }
}
