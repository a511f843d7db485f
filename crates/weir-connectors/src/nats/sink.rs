//! JetStream sinks: exactly-once (write-ahead two-phase commit) and at-least-once.
//!
//! # Exactly-once: [`JetStreamSink`] in [`TwoPhaseCommit`]
//!
//! JetStream has no transactions, so the sink is a *write-ahead* two-phase-commit sink:
//!
//! * `write` encodes records into the open transaction, in memory (too-large messages are
//!   refused here, not at commit, where they would fail every retry);
//! * `pre_commit` (checkpoint barrier) turns the transaction into a [`JetStreamCommittable`]
//!   that holds the payloads and is stored **in the checkpoint**;
//! * `commit` (checkpoint complete, or recovery) publishes payload `i` with the message id
//!   `<transaction name>-<run id>-<i>` and waits for every acknowledgement. The stream's
//!   duplicate window drops a message whose id it has already stored and acknowledges it as
//!   a duplicate, which counts as success: a commit repeated after a crash (during the
//!   commit, or after it but before the engine learned of it) adds nothing.
//!
//! Readers of the stream see a checkpoint's records only once it has completed. Because the
//! records come from the checkpoint, not from a replay, the output is exactly-once even when
//! the upstream is not deterministic.
//!
//! **Duplicate window.** The server remembers message ids only for the stream's
//! `duplicate_window` (2 minutes by default). A commit repeated later than that after the
//! first (a job restored from an old checkpoint, a restart that took longer) would publish
//! duplicates. Keep restarts well inside the window, or widen it
//! (`nats stream edit STREAM --dupe-window 10m`). `open` refuses a stream whose window is 0.
//!
//! The *run id* is drawn when the sink value is created and is shared by its clones, so the
//! attempts of one job run name their messages alike, while two separate runs of a job with
//! the same name (whose checkpoint ids restart at 1) never collide. A committable keeps the
//! run id it was made with, so a restored job commits old handles under their old ids.
//!
//! # At-least-once: [`JetStreamAtLeastOnceSink`]
//!
//! Publishes every batch at once and waits for its acknowledgements; after a failure the
//! records replayed since the last checkpoint are published again.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::message::PublishMessage;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use weir::prelude::*;

use super::{subject_matches, CodecError, Connection, JetStreamConfig};

/// How many publishes a commit keeps in flight before awaiting their acknowledgements.
const WINDOW: usize = 1024;

type Encoder<T> = Arc<dyn Fn(&T) -> std::result::Result<Vec<u8>, CodecError> + Send + Sync>;

/// Counters shared by a sink and all its clones (every subtask, every attempt).
#[derive(Debug, Default)]
pub struct SinkStats {
    /// Messages the stream stored.
    pub published: AtomicU64,
    /// Messages the stream dropped as duplicates of an earlier publish (repeated commits).
    pub duplicates: AtomicU64,
}

/// A pre-committed transaction: what its commit publishes. Stored in checkpoints.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JetStreamCommittable {
    /// The deterministic transaction name, `<job>~<uid>~<subtask>-<checkpoint>`.
    pub name: String,
    /// The sink's run id (hex) when the transaction was pre-committed.
    pub run: String,
    /// The subject the payloads are published to.
    pub subject: String,
    /// The encoded records, in order.
    pub payloads: Vec<Vec<u8>>,
}

impl JetStreamCommittable {
    /// The `Nats-Msg-Id` of payload `index`: `<name>-<run>-<index>`.
    pub fn message_id(&self, index: usize) -> String {
        format!("{}-{}-{index}", self.name, self.run)
    }
}

impl fmt::Debug for JetStreamCommittable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{} ({} messages to {})",
            self.name,
            self.run,
            self.payloads.len(),
            self.subject
        )
    }
}

/// An open transaction: the encoded records written since the last pre-commit.
#[derive(Debug, Default)]
pub struct JetStreamTransaction {
    payloads: Vec<Vec<u8>>,
}

/// Writes records to a JetStream stream, exactly-once when wrapped in [`TwoPhaseCommit`]
/// (see [`JetStreamSink::exactly_once`] and the module docs).
pub struct JetStreamSink<T> {
    config: JetStreamConfig,
    encoder: Encoder<T>,
    run: String,
    stats: Arc<SinkStats>,
    conn: Option<Connection>,
    subject: String,
    max_payload: usize,
}

impl<T> Clone for JetStreamSink<T> {
    /// Same configuration, run id and stats; every clone opens its own connection.
    fn clone(&self) -> Self {
        JetStreamSink {
            config: self.config.clone(),
            encoder: self.encoder.clone(),
            run: self.run.clone(),
            stats: self.stats.clone(),
            conn: None,
            subject: String::new(),
            max_payload: 0,
        }
    }
}

impl<T> JetStreamSink<T> {
    /// A sink writing to `config`'s stream, records encoded by `encoder`; it gets a fresh
    /// run id (module docs).
    pub fn new(
        config: JetStreamConfig,
        encoder: impl Fn(&T) -> std::result::Result<Vec<u8>, CodecError> + Send + Sync + 'static,
    ) -> Self {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        JetStreamSink {
            config,
            encoder: Arc::new(encoder),
            run: format!("{:016x}", h.finish()),
            stats: Arc::default(),
            conn: None,
            subject: String::new(),
            max_payload: 0,
        }
    }

    /// The exactly-once sink function: this sink in [`TwoPhaseCommit`].
    pub fn exactly_once(self) -> TwoPhaseCommit<T, Self>
    where
        T: Send + 'static,
    {
        TwoPhaseCommit::new(self)
    }

    /// The at-least-once sink function: publishes each batch at once.
    pub fn at_least_once(self) -> JetStreamAtLeastOnceSink<T> {
        JetStreamAtLeastOnceSink { inner: self }
    }

    /// Counters shared with every clone of this sink.
    pub fn stats(&self) -> Arc<SinkStats> {
        self.stats.clone()
    }

    /// Connects, checks the stream and resolves the subject. `dedup` demands a duplicate
    /// window.
    fn connect(&mut self, dedup: bool) -> Result<()> {
        if self.conn.is_some() {
            return Ok(());
        }
        let conn = Connection::open(&self.config)?;
        let stream = conn.stream(&self.config.stream)?;
        let cfg = &stream.cached_info().config;
        let name = &self.config.stream;
        if dedup && cfg.duplicate_window.is_zero() {
            return Err(Error::user(format!(
                "JetStream stream '{name}' on {} has no duplicate window, so exactly-once \
                 commits cannot be repeated safely: set one, e.g. \
                 `nats stream edit {name} --dupe-window 2m`",
                conn.server
            )));
        }
        let subject = match (&self.config.subject, cfg.subjects.as_slice()) {
            (Some(s), _) => s.clone(),
            (None, [only]) if !only.contains(['*', '>']) => only.clone(),
            (None, subjects) => {
                return Err(Error::user(format!(
                    "say which subject to publish to on JetStream stream '{name}' (its \
                     subjects are {subjects:?}): add ?subject=... to the address"
                )))
            }
        };
        if !cfg.subjects.iter().any(|p| subject_matches(p, &subject)) {
            return Err(Error::user(format!(
                "subject '{subject}' is not captured by JetStream stream '{name}' (its \
                 subjects are {:?})",
                cfg.subjects
            )));
        }
        let server_max = conn.client.server_info().max_payload;
        self.max_payload = match usize::try_from(cfg.max_message_size) {
            Ok(stream_max) if stream_max > 0 => stream_max.min(server_max),
            _ => server_max,
        };
        self.subject = subject;
        self.conn = Some(conn);
        Ok(())
    }

    /// Connects without resolving a subject, for `weir transactions settle`
    /// ([`super::settle`]): each committable names its own subject, and its payloads were
    /// checked against the size limits when they were written.
    pub(crate) fn connect_for_settle(&mut self) -> Result<&Connection> {
        if self.conn.is_none() {
            self.conn = Some(Connection::open(&self.config)?);
        }
        self.conn
            .as_ref()
            .ok_or_else(|| Error::InvalidJob("JetStreamSink connection missing".into()))
    }

    /// Encodes `record`, refusing a message too large for the stream or server.
    fn encode(&self, record: &T) -> Result<Vec<u8>> {
        let payload = (self.encoder)(record).map_err(|e| {
            Error::user(format!(
                "cannot encode a record for JetStream stream '{}': {e}",
                self.config.stream
            ))
        })?;
        if payload.len() > self.max_payload {
            return Err(Error::user(format!(
                "message too large for JetStream stream '{}': {} bytes, the limit is {} \
                 (server max_payload / stream max_msg_size)",
                self.config.stream,
                payload.len(),
                self.max_payload
            )));
        }
        Ok(payload)
    }

    /// Publishes `payloads` (with message ids from `ids`, if any) and waits for every
    /// acknowledgement, keeping up to [`WINDOW`] in flight.
    pub(crate) fn publish(
        &self,
        subject: &str,
        payloads: &[Vec<u8>],
        ids: Option<&dyn Fn(usize) -> String>,
    ) -> Result<()> {
        let conn = self
            .conn
            .as_ref()
            .ok_or_else(|| Error::InvalidJob("JetStreamSink used before it was opened".into()))?;
        let stream = &self.config.stream;
        let fail = |what: &str, i: usize, e: &dyn fmt::Display| {
            Error::user(format!(
                "cannot publish message {i} to JetStream stream '{stream}' on {} ({what}): {e}",
                conn.server
            ))
        };
        conn.rt.block_on(async {
            let mut acks: Vec<(usize, PublishAckFuture)> = Vec::with_capacity(WINDOW);
            for (start, chunk) in payloads.chunks(WINDOW).enumerate() {
                for (j, p) in chunk.iter().enumerate() {
                    let i = start * WINDOW + j;
                    let mut msg = PublishMessage::build().payload(Bytes::copy_from_slice(p));
                    if let Some(ids) = ids {
                        msg = msg.message_id(ids(i));
                    }
                    let ack = conn
                        .js
                        .send_publish(subject.to_string(), msg)
                        .await
                        .map_err(|e| fail("send", i, &e))?;
                    acks.push((i, ack));
                }
                for (i, ack) in acks.drain(..) {
                    let ack = ack.await.map_err(|e| fail("acknowledgement", i, &e))?;
                    if ack.stream != *stream {
                        return Err(fail(
                            "wrong stream",
                            i,
                            &format!("subject '{subject}' went to stream '{}'", ack.stream),
                        ));
                    }
                    let counter = if ack.duplicate {
                        &self.stats.duplicates
                    } else {
                        &self.stats.published
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        })
    }
}

impl<T: Send + 'static> TwoPhaseCommitSink<T> for JetStreamSink<T> {
    type Transaction = JetStreamTransaction;
    type Committable = JetStreamCommittable;

    fn open(&mut self, _ctx: &TransactionContext) -> Result<()> {
        self.connect(true)
    }

    /// Commits the restored handles. Nothing else can linger: nothing reaches the stream
    /// before its commit.
    fn recover(
        &mut self,
        _ctx: &TransactionContext,
        committable: Vec<JetStreamCommittable>,
    ) -> Result<()> {
        committable.into_iter().try_for_each(|c| self.commit(c))
    }

    fn begin(&mut self, _ctx: &TransactionContext) -> Result<JetStreamTransaction> {
        Ok(JetStreamTransaction::default())
    }

    fn write(&mut self, txn: &mut JetStreamTransaction, batch: &mut Vec<T>) -> Result<()> {
        txn.payloads.reserve(batch.len());
        for record in batch.drain(..) {
            txn.payloads.push(self.encode(&record)?);
        }
        Ok(())
    }

    fn pre_commit(
        &mut self,
        ctx: &TransactionContext,
        txn: JetStreamTransaction,
        checkpoint_id: u64,
    ) -> Result<Option<JetStreamCommittable>> {
        if txn.payloads.is_empty() {
            return Ok(None);
        }
        Ok(Some(JetStreamCommittable {
            name: ctx.transaction_name(checkpoint_id),
            run: self.run.clone(),
            subject: self.subject.clone(),
            payloads: txn.payloads,
        }))
    }

    /// Publishes every payload under its message id; duplicates (already committed) count
    /// as success, so committing twice is harmless within the duplicate window.
    fn commit(&mut self, c: JetStreamCommittable) -> Result<()> {
        self.publish(&c.subject, &c.payloads, Some(&|i| c.message_id(i)))
            .map_err(|e| Error::user(format!("committing transaction {c:?}: {e}")))
    }

    fn abort(&mut self, _txn: JetStreamTransaction) -> Result<()> {
        Ok(())
    }
}

/// Publishes records as they arrive and waits for their acknowledgements: at-least-once
/// (a failure republishes what was replayed since the last checkpoint).
pub struct JetStreamAtLeastOnceSink<T> {
    inner: JetStreamSink<T>,
}

impl<T> Clone for JetStreamAtLeastOnceSink<T> {
    /// Same configuration and stats; every clone opens its own connection.
    fn clone(&self) -> Self {
        JetStreamAtLeastOnceSink {
            inner: self.inner.clone(),
        }
    }
}

impl<T> JetStreamAtLeastOnceSink<T> {
    /// Counters shared with every clone of this sink.
    pub fn stats(&self) -> Arc<SinkStats> {
        self.inner.stats()
    }
}

impl<T> CheckpointedFunction for JetStreamAtLeastOnceSink<T> {
    fn initialize_state(&mut self, _ctx: &InitContext) -> Result<()> {
        self.inner.connect(false)
    }
}

impl<T: Send + 'static> SinkFunction<T> for JetStreamAtLeastOnceSink<T> {
    fn invoke(&mut self, batch: &mut Vec<T>) -> Result<()> {
        let payloads = batch
            .drain(..)
            .map(|r| self.inner.encode(&r))
            .collect::<Result<Vec<_>>>()?;
        self.inner.publish(&self.inner.subject, &payloads, None)
    }
}
