//! Test support: a real `nats-server` per test, and a small client to set up streams and
//! read them back.
//!
//! A missing binary or a server that does not start FAILS the test with the cause and the
//! fix (`apt-get install nats-server`); nothing is skipped silently.

#![allow(dead_code)]

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull::OrderedConfig, stream};
use futures_util::StreamExt;

/// A `nats-server` child process, killed on drop.
pub struct NatsServer {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    _dir: tempfile::TempDir,
    log: std::path::PathBuf,
}

/// A port nothing listens on (just now).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cannot find a free local port")
}

impl NatsServer {
    /// `nats-server -js` on a free port with its own store directory.
    pub fn start() -> Self {
        Self::start_with(true)
    }

    /// A server with JetStream on (`-js`) or off.
    pub fn start_with(jetstream: bool) -> Self {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start(jetstream) {
                Ok(s) => return s,
                Err(e) => last = e,
            }
        }
        panic!("{last}");
    }

    fn try_start(jetstream: bool) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let port = free_port();
        let log = dir.path().join("server.log");
        let mut cmd = Command::new("nats-server");
        cmd.args(["-a", "127.0.0.1", "-p", &port.to_string()]);
        if jetstream {
            cmd.arg("-js").arg("-sd").arg(dir.path().join("store"));
        }
        cmd.arg("-l").arg(&log);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run `nats-server` ({e}): the NATS tests need the server binary; \
                     install it with `apt-get install nats-server`"
                )
            })?;
        let mut server = NatsServer {
            child,
            port,
            _dir: dir,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "nats-server exited at start ({status}); its log:\n{}\n(is the binary from \
                     `apt-get install nats-server` working?)",
                    server.log_text()
                ));
            }
            // Ready once it greets a client with INFO.
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let mut buf = [0u8; 4];
                if s.read_exact(&mut buf).is_ok() && &buf == b"INFO" {
                    return Ok(server);
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "nats-server on port {port} did not accept connections within 10 s; its \
                     log:\n{}",
                    server.log_text()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// A client for setting up and checking streams.
    pub fn client(&self) -> TestClient {
        TestClient::connect(&self.url())
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking wrapper around an async-nats client.
pub struct TestClient {
    rt: tokio::runtime::Runtime,
    js: jetstream::Context,
}

impl TestClient {
    /// Connects to `url`.
    pub fn connect(url: &str) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(async_nats::connect(url)).unwrap();
        let js = {
            let _guard = rt.enter();
            jetstream::new(client)
        };
        TestClient { rt, js }
    }

    /// Creates stream `name` capturing `name.>` with a duplicate window of `dupe_window`.
    pub fn create_stream(&self, name: &str, dupe_window: Duration) {
        self.rt
            .block_on(self.js.create_stream(stream::Config {
                name: name.into(),
                subjects: vec![format!("{name}.>")],
                duplicate_window: dupe_window,
                ..Default::default()
            }))
            .unwrap();
    }

    /// Makes stream `name` capture exactly `subjects` from now on: a publish to a subject
    /// it no longer captures fails (no stream answers), as when the stream is misconfigured.
    pub fn set_subjects(&self, name: &str, subjects: &[&str]) {
        self.rt.block_on(async {
            let mut s = self.js.get_stream(name).await.unwrap();
            let mut config = s.info().await.unwrap().config.clone();
            config.subjects = subjects.iter().map(|x| x.to_string()).collect();
            self.js.update_stream(config).await.unwrap();
        })
    }

    /// Publishes each payload to `subject` and waits for all acknowledgements.
    pub fn publish<P: AsRef<[u8]>>(&self, subject: &str, payloads: impl IntoIterator<Item = P>) {
        self.rt.block_on(async {
            let mut acks = Vec::new();
            for p in payloads {
                let bytes = bytes::Bytes::copy_from_slice(p.as_ref());
                acks.push(self.js.publish(subject.to_string(), bytes).await.unwrap());
                if acks.len() >= 1000 {
                    for a in acks.drain(..) {
                        a.await.unwrap();
                    }
                }
            }
            for a in acks {
                a.await.unwrap();
            }
        })
    }

    /// Number of messages stored in `stream`.
    pub fn count(&self, name: &str) -> u64 {
        self.rt.block_on(async {
            let mut s = self.js.get_stream(name).await.unwrap();
            s.info().await.unwrap().state.messages
        })
    }

    /// Every message of `stream`, in order: `(sequence, payload)`.
    pub fn read_all(&self, name: &str) -> Vec<(u64, Vec<u8>)> {
        let total = self.count(name);
        self.rt.block_on(async {
            let mut out = Vec::new();
            if total == 0 {
                return out;
            }
            let s = self.js.get_stream(name).await.unwrap();
            let consumer = s.create_consumer(OrderedConfig::default()).await.unwrap();
            let mut msgs = consumer.messages().await.unwrap();
            while (out.len() as u64) < total {
                let m = tokio::time::timeout(Duration::from_secs(10), msgs.next())
                    .await
                    .expect("reading the stream back timed out")
                    .unwrap()
                    .unwrap();
                out.push((m.info().unwrap().stream_sequence, m.payload.to_vec()));
            }
            out
        })
    }
}
