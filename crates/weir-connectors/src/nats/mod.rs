//! NATS JetStream connectors (feature `nats`): a replayable [`JetStreamSource`] and an
//! exactly-once [`JetStreamSink`].
//!
//! Both talk to the server with [`async_nats`] driven by a small tokio current-thread
//! runtime owned by each source/sink instance: the engine calls them on their task thread
//! and they block on the runtime (`Runtime::block_on`). The client runs only while the
//! instance is inside a call, so an instance that is not called for minutes (a sink without
//! input) may be disconnected by the server's ping timeout; the client reconnects on the
//! next call.
//!
//! # Where to point them
//!
//! [`JetStreamConfig::parse`] reads `nats://host[:port]/STREAM[?subject=SUBJECT]` (port
//! 4222 by default). The stream must exist; create it with the `nats` CLI
//! (`nats stream add STREAM --subjects 'STREAM.>'`) or any client's stream API. The server
//! must run with JetStream (`nats-server -js`). Only plain `nats://` connections are
//! supported (no TLS backend is compiled in).
//!
//! # Exactly-once, in short
//!
//! * The source keeps, per *split*, the next stream sequence to read in operator state and
//!   replays from it after a failure ([`source`] module docs).
//! * The sink is a write-ahead two-phase-commit sink: records are held in the checkpoint
//!   and published only once the checkpoint completes, each with a deterministic
//!   `Nats-Msg-Id`, so that a commit repeated after a failure is dropped by the stream's
//!   duplicate window ([`sink`] module docs). Recovery must therefore commit within the
//!   stream's `duplicate_window` (2 minutes by default).
//!
//! # Example
//!
//! ```no_run
//! use weir::prelude::*;
//! use weir_connectors::nats::{decode_utf8, encode_utf8, JetStreamConfig, JetStreamSink, JetStreamSource};
//!
//! # fn main() -> weir::Result<()> {
//! let env = StreamEnvironment::new(JobConfig::new("upper"));
//! let input = JetStreamConfig::parse("nats://127.0.0.1:4222/orders")?;
//! let output = JetStreamConfig::parse("nats://127.0.0.1:4222/shouted?subject=shouted.all")?;
//! env.add_source("orders", JetStreamSource::bounded(input, decode_utf8))
//!     .uid("orders")
//!     .map(|s: String| s.to_uppercase())
//!     .add_sink("shouted", JetStreamSink::<String>::new(output, encode_utf8).exactly_once())
//!     .uid("shouted");
//! env.execute()?;
//! # Ok(())
//! # }
//! ```

pub mod settle;
pub mod sink;
pub mod source;

use std::fmt;
use std::time::Duration;

use async_nats::jetstream;
use weir::{Error, Result};

pub use settle::PendingCommits;
pub use sink::{JetStreamAtLeastOnceSink, JetStreamCommittable, JetStreamSink, SinkStats};
pub use source::JetStreamSource;

/// The error a user-supplied encoder or decoder returns.
pub type CodecError = Box<dyn std::error::Error + Send + Sync>;

/// The NATS port used when an address names none.
pub const DEFAULT_PORT: u16 = 4222;

/// Where a JetStream connector reads or writes: a server, a stream and optionally a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamConfig {
    /// The server address, `nats://host:port` (credentials as `nats://user:pass@host:port`).
    pub server: String,
    /// The stream's name.
    pub stream: String,
    /// Source: read only messages on this subject (wildcards allowed). Sink: publish to
    /// this subject; when `None`, the stream's only subject (which must be literal).
    pub subject: Option<String>,
    /// How long connecting to the server may take.
    pub connect_timeout: Duration,
    /// How long a JetStream API request or a publish acknowledgement may take.
    pub request_timeout: Duration,
}

impl JetStreamConfig {
    /// Stream `stream` on the server at `server` (`host:port` or `nats://host:port`).
    pub fn new(server: impl Into<String>, stream: impl Into<String>) -> Self {
        let server = server.into();
        let server = if server.contains("://") {
            server
        } else {
            format!("nats://{server}")
        };
        JetStreamConfig {
            server,
            stream: stream.into(),
            subject: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
        }
    }

    /// Sets the subject (see [`JetStreamConfig::subject`]).
    pub fn with_subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// Parses `nats://host[:port]/STREAM[?subject=SUBJECT]`.
    pub fn parse(url: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::InvalidJob(format!(
                "bad NATS address '{url}': {why} (expected nats://host[:port]/STREAM[?subject=SUBJECT])"
            ))
        };
        let rest = url
            .strip_prefix("nats://")
            .ok_or_else(|| bad("it must start with nats://"))?;
        let (authority, rest) = rest
            .split_once('/')
            .ok_or_else(|| bad("no stream name after the host"))?;
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let host_port = authority.rsplit('@').next().unwrap_or(authority);
        let has_port = match host_port.rsplit_once(':') {
            // `[::1]` alone has colons but no port.
            Some((_, p)) if !host_port.ends_with(']') => {
                p.parse::<u16>()
                    .map_err(|_| bad(&format!("port '{p}' is not a number in 1..65535")))?;
                true
            }
            _ => false,
        };
        let server = if has_port {
            format!("nats://{authority}")
        } else {
            format!("nats://{authority}:{DEFAULT_PORT}")
        };
        let (stream, query) = match rest.split_once('?') {
            Some((s, q)) => (s, Some(q)),
            None => (rest, None),
        };
        let stream = stream.trim_end_matches('/');
        if stream.is_empty() {
            return Err(bad("no stream name after the host"));
        }
        if stream.contains(['/', '.', '*', '>', ' ']) {
            return Err(bad(&format!(
                "'{stream}' is not a valid stream name (no '/', '.', '*', '>' or spaces)"
            )));
        }
        let mut config = JetStreamConfig::new(server, stream);
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("subject", s)) if !s.is_empty() && !s.contains(' ') => {
                    config.subject = Some(s.to_string())
                }
                Some(("subject", _)) => return Err(bad("the subject is empty or has spaces")),
                _ => {
                    return Err(bad(&format!(
                        "unknown parameter '{pair}' (the only one is subject=...)"
                    )))
                }
            }
        }
        Ok(config)
    }
}

/// What [`JetStreamConfig::probe`] found in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamProbe {
    /// Messages stored now.
    pub messages: u64,
    /// The stream's last sequence now: where a bounded source started now would stop.
    pub last_sequence: u64,
}

impl JetStreamConfig {
    /// Connects and looks the stream up as a source does when it starts, without reading.
    ///
    /// Inside a job, an unreachable server or a missing stream is a task failure, which the
    /// restart strategy retries (by default without end); a program that starts jobs (the
    /// `weir` CLI) calls this first to report such a problem at once, with the same message.
    pub fn probe(&self) -> Result<StreamProbe> {
        let conn = Connection::open(self)?;
        let stream = conn.stream(&self.stream)?;
        let state = &stream.cached_info().state;
        Ok(StreamProbe {
            messages: state.messages,
            last_sequence: state.last_sequence,
        })
    }
}

impl fmt::Display for JetStreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.server, self.stream)?;
        if let Some(s) = &self.subject {
            write!(f, "?subject={s}")?;
        }
        Ok(())
    }
}

/// A connection owned by one source/sink instance: its runtime, client and JetStream
/// context.
pub(crate) struct Connection {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    pub(crate) server: String,
}

impl Connection {
    /// Connects to `config.server`; the error says how to start a server when none answers.
    pub(crate) fn open(config: &JetStreamConfig) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::user(format!("cannot start the NATS client runtime: {e}")))?;
        let server = config.server.clone();
        let client = rt
            .block_on(
                async_nats::ConnectOptions::new()
                    .connection_timeout(config.connect_timeout)
                    .request_timeout(Some(config.request_timeout))
                    .connect(server.as_str()),
            )
            .map_err(|e| {
                Error::user(format!(
                    "cannot connect to NATS server at {server}: {e}; is it running? \
                     Start one with JetStream enabled: `nats-server -js`"
                ))
            })?;
        // The context spawns its acknowledgement task on the runtime.
        let _guard = rt.enter();
        let js = jetstream::context::ContextBuilder::new()
            .timeout(config.request_timeout)
            .ack_timeout(config.request_timeout)
            .build(client.clone());
        drop(_guard);
        Ok(Connection {
            rt,
            client,
            js,
            server,
        })
    }

    /// The stream `name` with its current info; clear errors when JetStream is off or the
    /// stream does not exist.
    pub(crate) fn stream(&self, name: &str) -> Result<jetstream::stream::Stream> {
        use jetstream::context::GetStreamErrorKind;
        use jetstream::ErrorCode;
        self.rt
            .block_on(self.js.get_stream(name))
            .map_err(|e| match e.kind() {
                GetStreamErrorKind::JetStream(j)
                    if j.error_code() == ErrorCode::STREAM_NOT_FOUND =>
                {
                    Error::user(format!(
                        "JetStream stream '{name}' does not exist on {}: create it first, e.g. \
                         `nats stream add {name} --subjects '{name}.>' --defaults`",
                        self.server
                    ))
                }
                GetStreamErrorKind::JetStream(j)
                    if j.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED
                        || j.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT =>
                {
                    not_enabled(&self.server, &j.to_string())
                }
                // No one answers `$JS.API` requests: the server runs without JetStream.
                GetStreamErrorKind::Request if is_no_responders(&e) => {
                    not_enabled(&self.server, &e.to_string())
                }
                _ => Error::user(format!(
                    "cannot look up JetStream stream '{name}' on {}: {e}",
                    self.server
                )),
            })
    }
}

fn not_enabled(server: &str, cause: &str) -> Error {
    Error::user(format!(
        "JetStream is not enabled on the NATS server at {server} ({cause}): \
         restart it with `nats-server -js`"
    ))
}

fn is_no_responders(e: &(dyn std::error::Error + 'static)) -> bool {
    use jetstream::context::{RequestError, RequestErrorKind};
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<RequestError>() {
            return r.kind() == RequestErrorKind::NoResponders;
        }
        cur = err.source();
    }
    false
}

/// Whether a NATS subject matches a pattern with `*` (one token) and `>` (the rest).
pub(crate) fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Decodes a payload as UTF-8 text.
pub fn decode_utf8(payload: &[u8]) -> std::result::Result<String, CodecError> {
    Ok(std::str::from_utf8(payload)?.to_string())
}

/// Hands the payload over as raw bytes.
pub fn decode_bytes(payload: &[u8]) -> std::result::Result<Vec<u8>, CodecError> {
    Ok(payload.to_vec())
}

/// Decodes a payload as JSON into `T`.
pub fn decode_json<T: serde::de::DeserializeOwned>(
    payload: &[u8],
) -> std::result::Result<T, CodecError> {
    Ok(serde_json::from_slice(payload)?)
}

/// Encodes text (`String`, `&str`, …) as its UTF-8 bytes.
pub fn encode_utf8<S: AsRef<str>>(record: &S) -> std::result::Result<Vec<u8>, CodecError> {
    Ok(record.as_ref().as_bytes().to_vec())
}

/// Encodes raw bytes (`Vec<u8>`, …) as they are.
pub fn encode_bytes<B: AsRef<[u8]>>(record: &B) -> std::result::Result<Vec<u8>, CodecError> {
    Ok(record.as_ref().to_vec())
}

/// Encodes a record as JSON.
pub fn encode_json<T: serde::Serialize>(record: &T) -> std::result::Result<Vec<u8>, CodecError> {
    Ok(serde_json::to_vec(record)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addresses() {
        let c = JetStreamConfig::parse("nats://localhost/orders").unwrap();
        assert_eq!(c.server, "nats://localhost:4222");
        assert_eq!((c.stream.as_str(), c.subject.as_deref()), ("orders", None));
        let c =
            JetStreamConfig::parse("nats://u:p@127.0.0.1:5222/orders?subject=orders.*").unwrap();
        assert_eq!(c.server, "nats://u:p@127.0.0.1:5222");
        assert_eq!(c.subject.as_deref(), Some("orders.*"));
        assert_eq!(
            c.to_string(),
            "nats://u:p@127.0.0.1:5222/orders?subject=orders.*"
        );
    }

    #[test]
    fn rejects_bad_addresses_with_the_reason() {
        for (url, why) in [
            ("http://h/s", "must start with nats://"),
            ("nats://h", "no stream name"),
            ("nats://h/", "no stream name"),
            ("nats://h:x/s", "port 'x'"),
            ("nats://h/a.b", "not a valid stream name"),
            ("nats://h/s?subj=x", "unknown parameter 'subj=x'"),
            ("nats://h/s?subject=", "subject is empty"),
        ] {
            let e = JetStreamConfig::parse(url).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
            assert!(e.contains("nats://host[:port]/STREAM"), "{e}");
        }
    }

    #[test]
    fn subjects_match_wildcards() {
        assert!(subject_matches("a.>", "a.b.c"));
        assert!(!subject_matches("a.>", "a"));
        assert!(subject_matches("a.*.c", "a.b.c"));
        assert!(!subject_matches("a.*", "a.b.c"));
        assert!(subject_matches("a", "a"));
        assert!(!subject_matches("a", "b"));
    }

    #[test]
    fn codecs_round_trip() {
        assert_eq!(decode_utf8(b"hi").unwrap(), "hi");
        assert!(decode_utf8(&[0xff]).is_err());
        let v: (u32, String) = decode_json(&encode_json(&(1u32, "x")).unwrap()).unwrap();
        assert_eq!(v, (1, "x".to_string()));
        assert_eq!(
            decode_bytes(&encode_bytes(&vec![1, 2]).unwrap()).unwrap(),
            [1, 2]
        );
        assert_eq!(encode_utf8(&"é".to_string()).unwrap(), "é".as_bytes());
    }
}
