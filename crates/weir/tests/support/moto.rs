//! A moto S3 server (`moto_server`, from PyPI; `scripts/test.sh` installs it) for the tests
//! of one test process, started once on loopback, with the `AWS_*` variables pointed at it.
//! Shared by the engine's S3 tests and the CLI's (`#[path]`-included).
//!
//! Tests that stop a server, or need one that checks credentials, start their own [`Moto`].

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A moto server on loopback, killed when dropped. moto keeps everything in memory, so a
/// restarted server is empty: its buckets must be made again.
pub struct Moto {
    child: Option<Child>,
    /// The port it listens on (kept across [`Moto::restart`]).
    pub port: u16,
    /// Whether it checks credentials (`INITIAL_NO_AUTH_ACTION_COUNT=0`): then it knows no
    /// access key at all, so every signed request is refused with `InvalidAccessKeyId`.
    auth: bool,
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Moto {
    /// A new server on a free port that takes any credentials.
    pub fn start() -> Moto {
        Moto::spawn(free_port(), false)
    }

    /// A new server on a free port that refuses every access key.
    pub fn start_with_auth() -> Moto {
        Moto::spawn(free_port(), true)
    }

    fn spawn(port: u16, auth: bool) -> Moto {
        // Through a shell that SIGKILLs the server once its stdin (held by this process)
        // closes: statics are never dropped, so the shared server would otherwise outlive
        // the test process.
        let script = "command -v moto_server >/dev/null || exit 127; moto_server -H 127.0.0.1 -p \"$0\" & m=$!; read _; kill -9 $m; wait $m";
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script, &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if auth {
            cmd.env("INITIAL_NO_AUTH_ACTION_COUNT", "0");
        }
        let mut child = cmd.spawn().expect("sh starts");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if child.try_wait().is_ok_and(|s| s.is_some()) {
                panic!("moto_server is needed: pip install 'moto[server]' (scripts/test.sh does)");
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "moto did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Moto {
            child: Some(child),
            port,
            auth,
        }
    }

    /// Kills the server (as a crash would: SIGKILL), and waits until it is gone.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            drop(c.stdin.take());
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        let fresh = Moto::spawn(self.port, self.auth);
        self.child = fresh.child_take();
    }

    fn child_take(mut self) -> Option<Child> {
        self.child.take()
    }

    /// The process id of the shell the server runs under (its only child is the server).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates `bucket` on this server.
    pub fn make_bucket(&self, bucket: &str) {
        make_bucket_on(self.port, bucket);
    }

    /// The `AWS_*` settings a child process needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        env_for(self.port)
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts moto once, points the `AWS_*` variables at it and returns its port.
pub fn server() -> u16 {
    static SERVER: OnceLock<Moto> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let server = Moto::start();
            // Before any S3 client exists (clients read these once).
            for (k, v) in env_for(server.port) {
                std::env::set_var(k, v);
            }
            server
        })
        .port
}

/// Creates `bucket` on the shared server.
pub fn make_bucket(bucket: &str) {
    make_bucket_on(server(), bucket);
}

/// Creates `bucket` on the server at `port` (moto takes an unsigned request).
fn make_bucket_on(port: u16, bucket: &str) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

/// The `AWS_*` settings a child process (`weir run`) needs to reach the shared server.
pub fn child_env() -> Vec<(&'static str, String)> {
    env_for(server())
}

/// The `AWS_*` settings that reach the server at `port`.
pub fn env_for(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("WEIR_S3_LEASE_SECONDS", "3".into()),
    ]
}
