//! The HTTP server of a running job's control endpoint (see the module docs of [`super`]).
//!
//! One thread accepts requests; each request gets its own thread, because a savepoint
//! request waits until the savepoint is complete while `status` must answer at once.
//! [`ControlServer::shutdown`] lets in-flight answers (a stop's savepoint path above all)
//! reach their clients before the process exits.

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::prelude::{ControlError, ControlErrorKind, JobControl, SnapshotDone};
use serde::Deserialize;
use serde_json::{json, Value};
use tiny_http::{Header, Method, Request, Response, Server};

/// Largest request body accepted (the bodies are a folder name and a flag).
const MAX_BODY: u64 = 64 * 1024;

/// A running control endpoint.
pub struct ControlServer {
    addr: SocketAddr,
    server: Arc<Server>,
    in_flight: Arc<(Mutex<usize>, Condvar)>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

/// The body of `POST /savepoint` and `POST /stop`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SnapshotBody {
    dir: Option<PathBuf>,
    #[serde(default)]
    drain: bool,
}

impl ControlServer {
    /// Binds `bind` and serves `control`; requests must carry `token` when it is set.
    pub fn start(
        bind: SocketAddr,
        token: Option<String>,
        control: JobControl,
    ) -> Result<Self, String> {
        let server = Server::http(bind).map_err(|e| {
            format!(
                "cannot open the control endpoint on {bind}: {e}; pick another --control \
                 address (port 0 picks a free one) or pass --control off"
            )
        })?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| "the control endpoint is not on an IP address".to_string())?;
        let server = Arc::new(server);
        let in_flight = Arc::new((Mutex::new(0usize), Condvar::new()));
        let acceptor = {
            let (server, in_flight) = (server.clone(), in_flight.clone());
            std::thread::Builder::new()
                .name("weir-control".into())
                .spawn(move || {
                    for request in server.incoming_requests() {
                        *in_flight.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
                        let (control, token, mine) =
                            (control.clone(), token.clone(), in_flight.clone());
                        let spawned = std::thread::Builder::new()
                            .name("weir-control-request".into())
                            .spawn(move || {
                                handle(request, &control, token.as_deref());
                                let (count, done) = &*mine;
                                *count.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
                                done.notify_all();
                            });
                        if spawned.is_err() {
                            *in_flight.0.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
                        }
                    }
                })
                .map_err(|e| format!("cannot start the control endpoint's thread: {e}"))?
        };
        Ok(ControlServer {
            addr,
            server,
            in_flight,
            acceptor: Some(acceptor),
        })
    }

    /// The address clients use (`weir status --job ADDR`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting requests and waits (at most `grace`) for answers still being sent.
    pub fn shutdown(mut self, grace: Duration) {
        self.server.unblock();
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let deadline = Instant::now() + grace;
        let (count, done) = &*self.in_flight;
        let mut n = count.lock().unwrap_or_else(|p| p.into_inner());
        while *n > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            n = done
                .wait_timeout(n, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

fn json_response(status: u16, body: &Value) -> Response<std::io::Cursor<Vec<u8>>> {
    let header =
        Header::from_bytes("Content-Type", "application/json").expect("a constant header is valid");
    Response::from_data(body.to_string().into_bytes())
        .with_status_code(status)
        .with_header(header)
}

fn error(status: u16, msg: impl Into<String>) -> (u16, Value) {
    (status, json!({ "error": msg.into() }))
}

/// Whether `request` carries `token` as `Authorization: Bearer <token>`.
fn authorized(request: &Request, token: Option<&str>) -> bool {
    let Some(token) = token else {
        return true;
    };
    request.headers().iter().any(|h| {
        h.field.equiv("Authorization")
            && h.value
                .as_str()
                .strip_prefix("Bearer ")
                .is_some_and(|t| constant_time_eq(t.trim().as_bytes(), token.as_bytes()))
    })
}

/// Compares without an early exit, so response times do not leak the token's prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn handle(mut request: Request, control: &JobControl, token: Option<&str>) {
    let (status, body) = route(&mut request, control, token);
    let _ = request.respond(json_response(status, &body));
}

fn route(request: &mut Request, control: &JobControl, token: Option<&str>) -> (u16, Value) {
    if !authorized(request, token) {
        return error(
            401,
            "missing or wrong token: send `Authorization: Bearer <token>` (weir … --token-file FILE)",
        );
    }
    let path = request.url().split('?').next().unwrap_or("").to_string();
    let method = request.method().clone();
    match (method, path.as_str()) {
        (Method::Get, "/status") => match serde_json::to_value(control.status()) {
            Ok(v) => (200, v),
            Err(e) => error(500, format!("cannot encode the status: {e}")),
        },
        (Method::Post, "/checkpoint") => answer(control.trigger_checkpoint()),
        (Method::Post, "/savepoint") => match body(request) {
            Ok(b) => answer(control.trigger_savepoint(b.dir)),
            Err(e) => e,
        },
        (Method::Post, "/stop") => match body(request) {
            Ok(b) => answer(control.stop_with_savepoint(b.dir, b.drain)),
            Err(e) => e,
        },
        (_, "/status" | "/checkpoint" | "/savepoint" | "/stop") => {
            error(405, "wrong method: GET /status, POST the others")
        }
        _ => error(
            404,
            format!("no such endpoint {path}; try /status, /checkpoint, /savepoint or /stop"),
        ),
    }
}

fn body(request: &mut Request) -> Result<SnapshotBody, (u16, Value)> {
    // A request whose framing is wrong is refused before anything is done for it.
    for h in request.headers() {
        if h.field.equiv("Content-Length") && h.value.as_str().trim().parse::<u64>().is_err() {
            return Err(error(
                400,
                format!("invalid Content-Length {:?}", h.value.as_str()),
            ));
        }
    }
    let announced = request.body_length();
    parse_body(request.as_reader(), announced)
}

/// Reads and parses a snapshot request's body, refusing one larger than [`MAX_BODY`] or of
/// another length than its `Content-Length` (a client that went away mid-body).
fn parse_body(
    reader: &mut dyn Read,
    announced: Option<usize>,
) -> Result<SnapshotBody, (u16, Value)> {
    if announced.is_some_and(|n| n as u64 > MAX_BODY) {
        return Err(error(413, "request body too large"));
    }
    let mut raw = String::new();
    reader
        .take(MAX_BODY + 1)
        .read_to_string(&mut raw)
        .map_err(|e| error(400, format!("cannot read the request body: {e}")))?;
    if raw.len() as u64 > MAX_BODY {
        return Err(error(413, "request body too large"));
    }
    if let Some(announced) = announced {
        if raw.len() != announced {
            return Err(error(
                400,
                format!(
                    "the body has {} bytes, its Content-Length says {announced}",
                    raw.len()
                ),
            ));
        }
    }
    if raw.trim().is_empty() {
        return Ok(SnapshotBody::default());
    }
    serde_json::from_str(&raw).map_err(|e| {
        error(
            400,
            format!("the body is not {{\"dir\": \"…\", \"drain\": false}}: {e}"),
        )
    })
}

/// Maps the engine's answer to a status: bad request 400, job not running 409, else 500.
fn answer(r: Result<SnapshotDone, ControlError>) -> (u16, Value) {
    match r {
        Ok(done) => (200, json!({ "id": done.id, "path": done.path })),
        Err(e) => {
            let status = match e.kind {
                ControlErrorKind::BadRequest => 400,
                ControlErrorKind::NotRunning => 409,
                ControlErrorKind::Failed => 500,
            };
            error(status, e.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_must_match_their_length() {
        let parse = |body: &str, announced| parse_body(&mut body.as_bytes(), announced);
        assert_eq!(parse("{}", Some(10)).err().unwrap().0, 400, "cut short");
        assert_eq!(parse("{}", Some(1)).err().unwrap().0, 400, "longer");
        assert_eq!(parse("{}", Some(70_000)).err().unwrap().0, 413);
        assert_eq!(parse("{\"dir\": 3}", None).err().unwrap().0, 400);
        let ok = parse("{\"dir\": \"n\", \"drain\": true}", Some(27)).unwrap();
        assert!(ok.drain && ok.dir.as_deref() == Some(std::path::Path::new("n")));
        assert!(parse("", Some(0)).unwrap().dir.is_none());
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn answers_map_to_statuses() {
        let err = |kind, message: &str| {
            Err(ControlError {
                kind,
                message: message.into(),
            })
        };
        assert_eq!(answer(err(ControlErrorKind::BadRequest, "outside")).0, 400);
        assert_eq!(answer(err(ControlErrorKind::NotRunning, "ended")).0, 409);
        assert_eq!(answer(err(ControlErrorKind::Failed, "timed out")).0, 500);
        let ok = answer(Ok(SnapshotDone {
            id: 3,
            path: "/sp".into(),
        }));
        assert_eq!(ok.0, 200);
        assert_eq!(ok.1["path"], "/sp");
    }
}
