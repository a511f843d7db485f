//! A replayable JetStream source.
//!
//! # Splits: how the stream is divided among subtasks
//!
//! The stream is divided into a fixed number `m` of *splits* by stream sequence: split `j`
//! holds the messages whose sequence `s` has `s % m == j`. `m` is chosen when the job starts
//! fresh — [`JetStreamSource::with_splits`], or the source's parallelism by default — and
//! is kept in the checkpoints, so it never changes for the life of the job. Each split's
//! *next sequence to read* (and, in bounded mode, its last sequence) is an element of the
//! operator list state `jetstream-splits`. A restore hands every split back at exactly its
//! checkpointed position; on a restore at another parallelism the splits are redistributed
//! like any list state (a subtask may hold several splits, or none: a subtask without splits
//! finishes at once, so choose `m` at least as large as any parallelism you plan to scale
//! to).
//!
//! Each subtask reads the stream once with an ordered, ephemeral pull consumer
//! (`DeliverPolicy::ByStartSequence` from its splits' smallest next sequence, optionally
//! filtered by subject) and keeps the messages of its splits. Every subtask therefore
//! receives the whole stream and discards the `(m-1)/m` of it that other subtasks own: a
//! read amplification of the parallelism, in exchange for an assignment that is fully
//! deterministic and rescalable without any coordination.
//!
//! # Bounded and continuous
//!
//! Bounded mode ([`JetStreamSource::bounded`]) stops at the stream's last sequence as of the
//! job's fresh start; that bound is stored with each split, so a restored job stops at the
//! same place. Continuous mode ([`JetStreamSource::continuous`]) never finishes; a poll that
//! finds nothing returns [`SourceStatus::Idle`].
//!
//! Messages deleted from the stream (limits, retention) before they were read are skipped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::pull::{Ordered, OrderedConfig};
use async_nats::jetstream::consumer::DeliverPolicy;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use weir::prelude::*;

use super::{CodecError, Connection, JetStreamConfig};

/// Name of the operator list state holding the splits.
pub const SPLITS_STATE: &str = "jetstream-splits";

/// How long a poll waits for a first message before reporting `Idle`.
const FIRST_WAIT: Duration = Duration::from_millis(20);
/// How long a poll may run in total (barriers wait for it).
const MAX_POLL: Duration = Duration::from_millis(50);

type Decoder<T> = Arc<dyn Fn(&[u8]) -> std::result::Result<T, CodecError> + Send + Sync>;

/// One part of the stream: the sequences `s` with `s % count == index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Split {
    index: u64,
    count: u64,
    /// Next stream sequence to consider (everything below is done).
    next: u64,
    /// Last sequence to read (bounded mode), fixed at the job's fresh start.
    end: Option<u64>,
}

impl Split {
    fn done(&self) -> bool {
        self.end.is_some_and(|e| self.next > e)
    }
}

/// Reads a JetStream stream, one record per message decoded by a user function, from
/// positions kept in operator state; see the module docs.
pub struct JetStreamSource<T> {
    config: JetStreamConfig,
    decoder: Decoder<T>,
    bounded: bool,
    splits_hint: Option<u32>,
    splits: Vec<Split>,
    conn: Option<Connection>,
    reader: Option<Ordered>,
}

impl<T> Clone for JetStreamSource<T> {
    /// Configuration only: every clone opens its own connection.
    fn clone(&self) -> Self {
        JetStreamSource {
            config: self.config.clone(),
            decoder: self.decoder.clone(),
            bounded: self.bounded,
            splits_hint: self.splits_hint,
            splits: Vec::new(),
            conn: None,
            reader: None,
        }
    }
}

impl<T> JetStreamSource<T> {
    /// A source that reads up to the stream's last message as of the job's start, then
    /// finishes.
    pub fn bounded(
        config: JetStreamConfig,
        decoder: impl Fn(&[u8]) -> std::result::Result<T, CodecError> + Send + Sync + 'static,
    ) -> Self {
        JetStreamSource {
            config,
            decoder: Arc::new(decoder),
            bounded: true,
            splits_hint: None,
            splits: Vec::new(),
            conn: None,
            reader: None,
        }
    }

    /// A source that keeps reading new messages forever.
    pub fn continuous(
        config: JetStreamConfig,
        decoder: impl Fn(&[u8]) -> std::result::Result<T, CodecError> + Send + Sync + 'static,
    ) -> Self {
        let mut source = Self::bounded(config, decoder);
        source.bounded = false;
        source
    }

    /// Divides the stream into `splits` splits on a fresh start (default: the source's
    /// parallelism); the most subtasks that can share the work after a rescale. Ignored on
    /// restore, where the checkpointed splits are kept.
    pub fn with_splits(mut self, splits: u32) -> Self {
        self.splits_hint = Some(splits.max(1));
        self
    }

    fn conn(&self) -> Result<&Connection> {
        self.conn.as_ref().ok_or_else(|| {
            Error::InvalidJob("JetStreamSource polled before initialize_state".into())
        })
    }

    /// Drops the consumer inside the runtime (its subscription unsubscribes on a task).
    fn close_reader(&mut self) {
        if let Some(reader) = self.reader.take() {
            match &self.conn {
                Some(conn) => {
                    let _guard = conn.rt.enter();
                    drop(reader);
                }
                None => std::mem::forget(reader),
            }
        }
    }

    /// Opens the consumer at the smallest next sequence of the unfinished splits.
    fn open_reader(&mut self) -> Result<()> {
        let start = self
            .splits
            .iter()
            .filter(|s| !s.done())
            .map(|s| s.next)
            .min()
            .unwrap_or(1)
            .max(1);
        let conn = self.conn()?;
        let stream = conn.stream(&self.config.stream)?;
        let cfg = OrderedConfig {
            filter_subject: self.config.subject.clone().unwrap_or_default(),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
            ..Default::default()
        };
        let reader = conn
            .rt
            .block_on(async {
                let consumer = stream
                    .create_consumer(cfg)
                    .await
                    .map_err(|e| e.to_string())?;
                consumer.messages().await.map_err(|e| e.to_string())
            })
            .map_err(|e| {
                Error::user(format!(
                    "cannot read JetStream stream '{}' on {} from sequence {start}: {e}",
                    self.config.stream, conn.server
                ))
            })?;
        self.reader = Some(reader);
        Ok(())
    }
}

impl<T> Drop for JetStreamSource<T> {
    fn drop(&mut self) {
        self.close_reader();
    }
}

impl<T> CheckpointedFunction for JetStreamSource<T> {
    fn initialize_state(&mut self, ctx: &InitContext) -> Result<()> {
        let conn = Connection::open(&self.config)?;
        let mut stream = conn.stream(&self.config.stream)?;
        if ctx.is_restored() && ctx.has_state() {
            self.splits = ctx.list(SPLITS_STATE)?;
        } else {
            let end = if self.bounded {
                let info = conn.rt.block_on(stream.info()).map_err(|e| {
                    Error::user(format!(
                        "cannot read the state of JetStream stream '{}' on {}: {e}",
                        self.config.stream, conn.server
                    ))
                })?;
                Some(info.state.last_sequence)
            } else {
                None
            };
            let p = ctx.parallelism();
            let m = self.splits_hint.unwrap_or(p).max(1);
            self.splits = (0..m)
                .filter(|j| j % p == ctx.subtask_index())
                .map(|j| Split {
                    index: u64::from(j),
                    count: u64::from(m),
                    next: 1,
                    end,
                })
                .collect();
        }
        self.close_reader();
        self.conn = Some(conn);
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext) -> Result<()> {
        ctx.set_operator_list(SPLITS_STATE, &self.splits)
    }

    fn operator_state(&self) -> Vec<OperatorListDeclaration> {
        vec![OperatorListDeclaration::of::<Split>(SPLITS_STATE)]
    }
}

impl<T: Send + 'static> SourceFunction<T> for JetStreamSource<T> {
    fn poll(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus> {
        if self.splits.iter().all(Split::done) {
            self.close_reader();
            return Ok(SourceStatus::Finished);
        }
        if self.reader.is_none() {
            self.open_reader()?;
        }
        let started = Instant::now();
        let mut got = 0usize;
        while got < max && !self.splits.iter().all(Split::done) {
            let wait = if got == 0 {
                FIRST_WAIT
            } else {
                Duration::from_millis(1)
            };
            if started.elapsed() > MAX_POLL {
                break;
            }
            let (Some(conn), Some(reader)) = (self.conn.as_ref(), self.reader.as_mut()) else {
                break;
            };
            let next = conn
                .rt
                .block_on(async { tokio::time::timeout(wait, reader.next()).await });
            let msg = match next {
                Err(_elapsed) => break,
                Ok(Some(Ok(msg))) => msg,
                Ok(failed) => {
                    let cause = match failed {
                        Some(Err(e)) => e.to_string(),
                        _ => "the consumer's message stream ended".into(),
                    };
                    let err = Error::user(format!(
                        "reading JetStream stream '{}' on {} failed: {cause}",
                        self.config.stream, conn.server
                    ));
                    self.close_reader();
                    return Err(err);
                }
            };
            let (seq, pending) = match msg.info() {
                Ok(i) => (i.stream_sequence, i.pending),
                Err(e) => {
                    return Err(Error::user(format!(
                        "a message of JetStream stream '{}' has no stream sequence: {e}",
                        self.config.stream
                    )))
                }
            };
            for split in self.splits.iter_mut().filter(|s| s.next <= seq) {
                if seq % split.count == split.index && split.end.is_none_or(|e| seq <= e) {
                    let record = (self.decoder)(&msg.payload).map_err(|e| {
                        Error::user(format!(
                            "cannot decode message {seq} (subject '{}') of JetStream stream \
                             '{}': {e}",
                            msg.subject, self.config.stream
                        ))
                    })?;
                    out.push(record);
                    got += 1;
                }
                split.next = seq + 1;
            }
            // Bounded: nothing stored after this message, so nothing is left up to the end
            // (later sequences deleted, or none matching the subject filter).
            if pending == 0 {
                for split in self.splits.iter_mut() {
                    if let Some(e) = split.end {
                        split.next = split.next.max(e + 1);
                    }
                }
            }
        }
        if self.splits.iter().all(Split::done) {
            self.close_reader();
            Ok(SourceStatus::Finished)
        } else if got == 0 {
            Ok(SourceStatus::Idle)
        } else {
            Ok(SourceStatus::More)
        }
    }
}
