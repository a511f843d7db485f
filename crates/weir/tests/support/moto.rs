//! A moto S3 server (`moto_server`, from PyPI; `scripts/test.sh` installs it) for the tests
//! of one test process, started once on loopback, with the `AWS_*` variables pointed at it.
//! Shared by the engine's S3 tests and the CLI's (`#[path]`-included).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The moto server of this test process, killed when the process exits.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let port = free_port();
            let child = Command::new("moto_server")
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("moto_server is needed: pip install 'moto[server]' (scripts/test.sh does)");
            let started = Instant::now();
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "moto did not start"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            // Before any S3 client exists (clients read these once).
            std::env::set_var("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"));
            std::env::set_var("AWS_ALLOW_HTTP", "true");
            std::env::set_var("AWS_REGION", "us-east-1");
            std::env::set_var("AWS_ACCESS_KEY_ID", "test");
            std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
            std::env::set_var("WEIR_S3_LEASE_SECONDS", "3");
            Server { child, port }
        })
        .port
}

/// Creates `bucket` on the server (moto takes an unsigned request).
pub fn make_bucket(bucket: &str) {
    let port = server();
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

/// The `AWS_*` settings a child process (`weir run`) needs to reach the server.
pub fn child_env() -> Vec<(&'static str, String)> {
    let port = server();
    vec![
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("WEIR_S3_LEASE_SECONDS", "3".into()),
    ]
}
