//! Settling a JetStream sink's pending commits from outside any job, for `weir transactions
//! list|settle`.
//!
//! The exactly-once JetStream sink is write-ahead ([`super::sink`]): a transaction's records
//! live in the checkpoint until the checkpoint completes, and only then are they published,
//! each under its deterministic `Nats-Msg-Id`. So nothing of an aborted transaction ever
//! reaches the stream, and what a job abandoned between a completed checkpoint and its
//! commit leaves behind is the other way round: committables the checkpoint lists whose
//! messages the stream does not (all) hold yet. Settling one publishes exactly its missing
//! messages, under their own ids.
//!
//! Why the stream is read rather than every message republished: the stream's duplicate
//! window (2 minutes by default) is usually long past when someone settles an abandoned
//! job, so a blind republish would duplicate what the commit had already published. Reading
//! the subject's message ids (headers only) tells exactly which are missing, however old.

use std::collections::HashSet;
use std::time::Duration;

use async_nats::jetstream::consumer::pull::OrderedConfig;
use async_nats::jetstream::consumer::DeliverPolicy;
use futures_util::StreamExt;
use weir::{Error, Result};

use super::sink::JetStreamCommittable;
use super::{subject_matches, JetStreamConfig, JetStreamSink};

/// How long reading the next message id may take before the scan gives up.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to the stream a JetStream sink publishes to, for finding and publishing
/// the messages of its pending commits.
pub struct PendingCommits {
    config: JetStreamConfig,
    /// The stream's subjects (patterns).
    subjects: Vec<String>,
    /// Publishes with the sink's own code, so the ids and checks are the sink's; its
    /// connection also reads the stream.
    publisher: JetStreamSink<()>,
}

impl PendingCommits {
    /// Connects to `config`'s server and looks its stream up; the errors name the server
    /// or stream and the way out, as the sink's do.
    pub fn connect(config: &JetStreamConfig) -> Result<Self> {
        let mut publisher = JetStreamSink::new(config.clone(), |_: &()| Ok(Vec::new()));
        let conn = publisher.connect_for_settle()?;
        let subjects = conn
            .stream(&config.stream)?
            .cached_info()
            .config
            .subjects
            .clone();
        Ok(PendingCommits {
            config: config.clone(),
            subjects,
            publisher,
        })
    }

    /// Whether a committable publishing to `subject` belongs to this stream (and to the
    /// sink address's subject, when it names one).
    pub fn captures(&self, subject: &str) -> bool {
        let in_stream = self.subjects.iter().any(|p| subject_matches(p, subject));
        in_stream && self.config.subject.as_deref().is_none_or(|s| s == subject)
    }

    /// The `Nats-Msg-Id`s of every message the stream holds on `subject` (headers only).
    pub fn stored_ids(&mut self, subject: &str) -> Result<HashSet<String>> {
        let conn = self.publisher.connect_for_settle()?;
        let server = &conn.server;
        let name = &self.config.stream;
        let fail = |e: &dyn std::fmt::Display| {
            Error::user(format!(
                "cannot read the message ids on subject '{subject}' of JetStream stream \
                 '{name}' on {server}: {e}"
            ))
        };
        let stream = conn.stream(name)?;
        let cfg = OrderedConfig {
            filter_subject: subject.to_string(),
            deliver_policy: DeliverPolicy::All,
            headers_only: true,
            ..Default::default()
        };
        conn.rt.block_on(async {
            let mut consumer = stream.create_consumer(cfg).await.map_err(|e| fail(&e))?;
            let mut ids = HashSet::new();
            if consumer.info().await.map_err(|e| fail(&e))?.num_pending == 0 {
                return Ok(ids);
            }
            let mut messages = consumer.messages().await.map_err(|e| fail(&e))?;
            loop {
                let m = tokio::time::timeout(READ_TIMEOUT, messages.next())
                    .await
                    .map_err(|_| fail(&format!("no message within {READ_TIMEOUT:?}")))?
                    .ok_or_else(|| fail(&"the consumer ended"))?
                    .map_err(|e| fail(&e))?;
                let id = m
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID));
                if let Some(id) = id {
                    ids.insert(id.to_string());
                }
                if m.info().map_err(|e| fail(&e))?.pending == 0 {
                    return Ok(ids);
                }
            }
        })
    }

    /// The indices of `c`'s messages that `stored` (from [`Self::stored_ids`]) lacks.
    pub fn missing(c: &JetStreamCommittable, stored: &HashSet<String>) -> Vec<usize> {
        (0..c.payloads.len())
            .filter(|&i| !stored.contains(&c.message_id(i)))
            .collect()
    }

    /// Publishes `c`'s messages at `indices` under their own ids and waits for the stream's
    /// acknowledgements; a message the stream still remembers counts as published.
    pub fn publish(&self, c: &JetStreamCommittable, indices: &[usize]) -> Result<()> {
        let payloads: Vec<Vec<u8>> = indices.iter().map(|&i| c.payloads[i].clone()).collect();
        self.publisher
            .publish(&c.subject, &payloads, Some(&|j| c.message_id(indices[j])))
            .map_err(|e| Error::user(format!("settling transaction {c:?}: {e}")))
    }
}
