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
//! | `weir_job_attempt` | gauge | — |
//!
//! Not yet: records out per operator (the engine does not count what a task emits),
//! alignment time, backpressure and busy time (not measured by the tasks), watermark lag.

use std::fmt::Error as FmtError;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::http::Response;
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
    let mut family = e.encode_descriptor(
        "weir_task_records_in",
        "Records that entered a task (its source's, or its input channels'), per chain and subtask",
        None,
        MetricType::Counter,
    )?;
    for t in &s.tasks {
        let labels = vec![
            ("chain", t.chain.clone()),
            ("operator", t.operators.first().cloned().unwrap_or_default()),
            ("subtask", t.subtask.to_string()),
        ];
        ConstCounter::new(t.records_in).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::execution::{DurationHistogram, TaskStatus};

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
                records_in: 77,
            }],
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
            "weir_task_records_in_total{chain=\"source -> map\",operator=\"src\",subtask=\"1\"} 77",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
    }
}
