//! The server against real sockets: answers, malformed requests refused before acting, and
//! a flood of half-open connections that neither adds threads nor keeps it from answering.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::*;
use crate::prelude::{DiscardSink, GeneratorSource, JobConfig, StreamEnvironment};

/// One server test at a time: the flood test counts the server's threads by name.
static SERIAL: Mutex<()> = Mutex::new(());

/// A server for a job that has ended: snapshot requests that reach the engine are answered
/// 409, so any other status proves the request was refused before acting.
fn server(token: Option<&str>, limits: Limits) -> ControlServer {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = JobConfig::new("t");
    cfg.checkpoint_dir = dir.path().to_path_buf();
    let env = StreamEnvironment::new(cfg);
    let control = env.control();
    env.add_source("numbers", GeneratorSource::new(10))
        .add_sink("out", DiscardSink);
    env.execute().unwrap();
    let router = control_router(control, WORKERS - 1);
    let bind: SocketAddr = "127.0.0.1:0".parse().unwrap();
    ControlServer::serve(bind, token.map(str::to_string), router, limits).unwrap()
}

/// Sends `bytes` (then ends the request side when `close` is set) and returns the answer's
/// status and body.
fn exchange(addr: SocketAddr, bytes: &[u8], close: bool) -> (u16, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(bytes).unwrap();
    if close {
        c.shutdown(Shutdown::Write).unwrap();
    }
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

fn post(path: &str, headers: &str, body: &str) -> Vec<u8> {
    format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Weir-Action: 1\r\n{headers}\r\n{body}")
        .into_bytes()
}

#[test]
fn well_formed_requests_reach_the_engine() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let s = server(None, Limits::default());
    let (status, body) = exchange(
        s.addr(),
        b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        false,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"job\":\"t\""), "{body}");
    let (status, body) = exchange(
        s.addr(),
        &post("/savepoint", "Content-Length: 2\r\n", "{}"),
        false,
    );
    assert_eq!(status, 409, "the engine answered: {body}");
    let (status, _) = exchange(s.addr(), &post("/checkpoint", "", ""), false);
    assert_eq!(status, 409);
    s.shutdown(Duration::from_secs(5));
}

#[test]
fn malformed_requests_are_refused_before_acting() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let s = server(Some("s3cret"), Limits::default());
    let auth = "Authorization: Bearer s3cret\r\n";
    let cases: Vec<(&str, Vec<u8>, bool, u16)> = vec![
        (
            "an invalid Content-Length",
            post("/savepoint", &format!("{auth}Content-Length: 2x\r\n"), "{}"),
            false,
            400,
        ),
        (
            "a negative Content-Length",
            post("/savepoint", &format!("{auth}Content-Length: -1\r\n"), ""),
            false,
            400,
        ),
        (
            "two Content-Lengths",
            post(
                "/savepoint",
                &format!("{auth}Content-Length: 2\r\nContent-Length: 3\r\n"),
                "{}",
            ),
            false,
            400,
        ),
        (
            "a body cut short",
            post("/stop", &format!("{auth}Content-Length: 10\r\n"), "{}"),
            true,
            400,
        ),
        (
            "a body too large",
            post(
                "/savepoint",
                &format!("{auth}Content-Length: 70000\r\n"),
                "",
            ),
            false,
            413,
        ),
        (
            "a chunked body",
            post(
                "/stop",
                &format!("{auth}Transfer-Encoding: chunked\r\n"),
                "0\r\n\r\n",
            ),
            false,
            411,
        ),
        (
            "a body that is not the documented object",
            post(
                "/savepoint",
                &format!("{auth}Content-Length: 9\r\n"),
                "{\"dir\":3}",
            ),
            false,
            400,
        ),
        (
            "no token",
            post("/savepoint", "Content-Length: 2\r\n", "{}"),
            false,
            401,
        ),
        (
            "a wrong token",
            post(
                "/stop",
                "Authorization: Bearer s3cre\r\nContent-Length: 2\r\n",
                "{}",
            ),
            false,
            401,
        ),
        (
            "a garbled request line",
            b"POST /savepoint HTTP/9.9 nonsense\r\n\r\n".to_vec(),
            false,
            400,
        ),
        (
            "a head beyond the limit",
            post(
                "/savepoint",
                &format!("X-Big: {}\r\n", "a".repeat(9000)),
                "",
            ),
            false,
            431,
        ),
        ("an unknown path", post("/savepoints", auth, ""), false, 404),
        (
            "a wrong method",
            format!("GET /stop HTTP/1.1\r\n{auth}\r\n").into_bytes(),
            false,
            405,
        ),
    ];
    for (what, bytes, close, want) in cases {
        let (status, body) = exchange(s.addr(), &bytes, close);
        assert_eq!(status, want, "{what}: {body}");
        assert!(body.contains("\"error\""), "{what}: {body}");
    }
    // The same request, well formed, does reach the engine.
    let (status, _) = exchange(
        s.addr(),
        &post("/savepoint", &format!("{auth}Content-Length: 2\r\n"), "{}"),
        false,
    );
    assert_eq!(status, 409);
    s.shutdown(Duration::from_secs(5));
}

#[test]
fn only_the_embedded_files_are_served_whatever_the_path_says() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let s = server(None, Limits::default());
    let get = |target: &str| {
        let request = format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        exchange(s.addr(), request.as_bytes(), false)
    };
    for ok in [
        "/",
        "/checkpoints",
        "/workers",
        "/actions",
        "/api/workers",
        "/assets/app.js",
        "/assets/uPlot-LICENSE",
    ] {
        assert_eq!(get(ok).0, 200, "{ok}");
    }
    for bad in [
        "/assets/../../../../etc/passwd",
        "/../../../../etc/passwd",
        "/assets/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/assets/..%2f..%2f..%2fetc%2fpasswd",
        "/assets/%252e%252e/Cargo.toml",
        "/assets/..\\..\\Cargo.toml",
        "/assets//app.js",
        "/assets/./app.js",
        "/assets/vendor/uPlot.min.css",
        "/assets/index.html",
        "/src/runner/control/assets/app.js",
        "//etc/passwd",
    ] {
        let (status, body) = get(bad);
        assert_eq!(status, 404, "{bad}: {body}");
        assert!(!body.contains("root:"), "{bad}: {body}");
    }
    // A query does not change which file is served.
    let (status, body) = get("/assets/app.js?../../etc/passwd");
    assert_eq!(status, 200);
    assert!(body.contains("Weir dashboard"), "{body}");
    // Without a token, a foreign host name (DNS rebinding) is refused even for a page.
    let (status, _) = exchange(
        s.addr(),
        b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        false,
    );
    assert_eq!(status, 403);
    s.shutdown(Duration::from_secs(5));
}

/// Threads of this process whose name starts with `weir-control`.
fn control_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("weir-control"))
        .count()
}

#[test]
fn half_open_connections_neither_add_threads_nor_block_it_for_long() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !std::path::Path::new("/proc/self/task").exists() {
        return; // threads are counted through Linux's /proc
    }
    // Long enough that the acceptor takes the whole flood (and answers the last 503)
    // before the first idle connections time out, however loaded the machine.
    let timeout = Duration::from_secs(3);
    let limits = Limits {
        request_timeout: timeout,
        ..Limits::default()
    };
    let s = server(None, limits);
    // Threads name themselves once running.
    let started = Instant::now();
    while control_threads() < WORKERS + 1 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = control_threads();
    assert_eq!(before, WORKERS + 1, "the pool and the accepting thread");
    let flood: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(s.addr()).unwrap())
        .collect();
    // Past the pool and the queue, connections are answered 503 at once and closed.
    let mut last = flood.last().unwrap().try_clone().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut answer = String::new();
    let _ = last.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    // Counted once the acceptor has taken the whole flood (it answered the last one).
    assert_eq!(control_threads(), before, "no thread per connection");
    // The idle ones time out, and a status request is answered again.
    let started = Instant::now();
    let status = loop {
        let (status, _) = exchange(s.addr(), b"GET /status HTTP/1.1\r\n\r\n", false);
        if status == 200 || started.elapsed() > 10 * timeout {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < 4 * timeout,
        "answered only after {:?}",
        started.elapsed()
    );
    assert_eq!(control_threads(), before);
    drop(flood);
    s.shutdown(Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(5);
    while control_threads() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(control_threads(), 0, "shutdown ends every thread");
}

#[test]
fn a_request_in_pieces_is_answered_and_a_trickle_past_the_deadline_is_closed() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let limits = Limits {
        request_timeout: Duration::from_millis(600),
        ..Limits::default()
    };
    let s = server(None, limits);
    let request = post("/savepoint", "Content-Length: 2\r\n", "{}");
    let mut c = TcpStream::connect(s.addr()).unwrap();
    for piece in request.chunks(7) {
        c.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 409"), "{answer}");
    // One byte every 100 ms never completes the head within 600 ms: closed, unanswered.
    let mut slow = TcpStream::connect(s.addr()).unwrap();
    let started = Instant::now();
    let mut closed = false;
    for b in request.iter().take(20) {
        if slow.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut rest = String::new();
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let read = slow.read_to_string(&mut rest);
    assert!(closed || read.is_err() || rest.is_empty(), "{rest}");
    assert!(started.elapsed() < Duration::from_secs(5));
    s.shutdown(Duration::from_secs(5));
}
