//! The little HTTP/1.1 the control endpoint speaks: one request per connection, parsed with
//! `httparse` under hard limits, and one answer with `Connection: close`.
//!
//! Everything about a request's framing is checked here, before any route sees it: a
//! malformed request line or header, a head larger than [`Limits::max_head`], a missing,
//! repeated or non-numeric `Content-Length` on a body, `Transfer-Encoding`, a body larger
//! than [`Limits::max_body`] or shorter than announced. So a route acts only on a request
//! that is whole and well-formed.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The bounds a connection lives under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Time from accepting a connection to having read its whole request; a client that
    /// connects and says nothing (a half-open connection) is closed after it.
    pub request_timeout: Duration,
    /// Time to write an answer to a client that does not read it.
    pub write_timeout: Duration,
    /// Largest request line plus headers.
    pub max_head: usize,
    /// Largest request body (the control bodies are a folder name and a flag).
    pub max_body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_head: 8 * 1024,
            max_body: 64 * 1024,
        }
    }
}

/// Most headers a request may have.
const MAX_HEADERS: usize = 32;

/// A whole, well-formed request.
#[derive(Debug)]
pub(crate) struct Request {
    /// `GET`, `POST`, … as sent.
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The query string (after `?`), empty without one.
    pub query: String,
    /// Header names (lower case) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body, exactly `Content-Length` bytes.
    pub body: Vec<u8>,
}

impl Request {
    /// The value of header `name` (lower case), when present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An answer: a status, a content type and a body.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// Headers besides the content type, length and connection (a cookie, a policy).
    pub headers: Vec<(&'static str, String)>,
}

impl Response {
    /// An answer of `content_type` with `body`.
    pub fn bytes(status: u16, content_type: &'static str, body: Vec<u8>) -> Response {
        Response {
            status,
            content_type,
            body,
            headers: Vec::new(),
        }
    }

    /// The same answer with one more header.
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }

    /// A JSON answer.
    pub fn json(status: u16, body: &Value) -> Response {
        Response::bytes(status, "application/json", body.to_string().into_bytes())
    }

    /// A JSON error answer, `{"error": msg}`.
    pub fn error(status: u16, msg: impl Into<String>) -> Response {
        Response::json(status, &json!({ "error": msg.into() }))
    }

    /// The answer as bytes on the wire.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        if self.status == 503 {
            out.push_str("Retry-After: 1\r\n");
        }
        // Nothing the endpoint answers is to be cached, sniffed as another type or framed
        // by another site's page.
        out.push_str("Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n");
        out.push_str("X-Frame-Options: DENY\r\n");
        for (name, value) in &self.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Why no request could be read: an answer to send, or nothing to answer (the client went
/// away or never said anything).
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The request is malformed or over a limit: send this and close.
    Answer(Response),
    /// The connection closed or timed out before a whole request: just close.
    Gone,
}

/// A request head, parsed: what the router needs before the body is read.
#[derive(Debug)]
pub(crate) struct Head {
    /// The request so far, body empty.
    pub request: Request,
    /// The announced body length.
    pub content_length: usize,
    /// Bytes of the body already read with the head.
    body_start: Vec<u8>,
}

/// Reads and parses a request head from `conn` before `deadline`.
pub(crate) fn read_head(
    conn: &mut TcpStream,
    deadline: Instant,
    limits: &Limits,
) -> Result<Head, ReadError> {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = read_until(conn, &mut chunk, deadline)?;
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut headers);
        match parsed.parse(&buf) {
            Ok(httparse::Status::Complete(len)) if len > limits.max_head => {
                return Err(too_large_head(limits));
            }
            Ok(httparse::Status::Complete(len)) => {
                let target = parsed
                    .path
                    .unwrap_or_default()
                    .split_once('?')
                    .unwrap_or((parsed.path.unwrap_or_default(), ""));
                let request = Request {
                    method: parsed.method.unwrap_or_default().to_string(),
                    path: target.0.to_string(),
                    query: target.1.to_string(),
                    headers: parsed
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_ascii_lowercase(),
                                String::from_utf8_lossy(h.value).trim().to_string(),
                            )
                        })
                        .collect(),
                    body: Vec::new(),
                };
                one_host(&request).map_err(ReadError::Answer)?;
                let content_length = framing(&request, limits).map_err(ReadError::Answer)?;
                return Ok(Head {
                    request,
                    content_length,
                    body_start: buf[len..].to_vec(),
                });
            }
            Ok(httparse::Status::Partial) if buf.len() > limits.max_head => {
                return Err(too_large_head(limits));
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => {
                return Err(ReadError::Answer(Response::error(
                    431,
                    format!("more than {MAX_HEADERS} headers"),
                )));
            }
            Err(e) => {
                return Err(ReadError::Answer(Response::error(
                    400,
                    format!("malformed HTTP request: {e}"),
                )));
            }
        }
        if buf.len() > limits.max_head {
            return Err(too_large_head(limits));
        }
    }
}

fn too_large_head(limits: &Limits) -> ReadError {
    ReadError::Answer(Response::error(
        431,
        format!(
            "the request line and headers exceed {} bytes",
            limits.max_head
        ),
    ))
}

/// Refuses a request with more than one `Host` header (RFC 9112 §3.2 asks for a 400): the
/// loopback check reads one of them, and a proxy in front may route by another.
fn one_host(request: &Request) -> Result<(), Response> {
    if request.headers.iter().filter(|(n, _)| n == "host").count() > 1 {
        return Err(Response::error(
            400,
            "more than one Host header; send exactly one",
        ));
    }
    Ok(())
}

/// Checks how the body is framed and returns its length: only `Content-Length` (one value,
/// a decimal number, at most `max_body`); none means no body.
fn framing(request: &Request, limits: &Limits) -> Result<usize, Response> {
    if request.header("transfer-encoding").is_some() {
        return Err(Response::error(
            411,
            "Transfer-Encoding is not supported; send the body with a Content-Length",
        ));
    }
    let mut lengths = request
        .headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.as_str());
    let Some(first) = lengths.next() else {
        return Ok(0);
    };
    if lengths.next().is_some() {
        return Err(Response::error(400, "more than one Content-Length"));
    }
    if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Response::error(
            400,
            format!("invalid Content-Length {first:?}"),
        ));
    }
    match first.parse::<usize>() {
        Ok(n) if n <= limits.max_body => Ok(n),
        _ => Err(Response::error(
            413,
            format!("request body too large (at most {} bytes)", limits.max_body),
        )),
    }
}

/// Reads the body `head` announced, before `deadline`; a body cut short is refused.
pub(crate) fn read_body(
    conn: &mut TcpStream,
    head: Head,
    deadline: Instant,
) -> Result<Request, ReadError> {
    let Head {
        mut request,
        content_length,
        mut body_start,
    } = head;
    if body_start.len() > content_length {
        return Err(ReadError::Answer(Response::error(
            400,
            format!("the body has more bytes than its Content-Length ({content_length}) says"),
        )));
    }
    body_start.reserve(content_length - body_start.len());
    let mut chunk = [0u8; 4096];
    while body_start.len() < content_length {
        let want = (content_length - body_start.len()).min(chunk.len());
        match read_until(conn, &mut chunk[..want], deadline) {
            Ok(n) => body_start.extend_from_slice(&chunk[..n]),
            Err(ReadError::Gone) => {
                return Err(ReadError::Answer(Response::error(
                    400,
                    format!(
                        "the body has {} bytes, its Content-Length says {content_length}",
                        body_start.len()
                    ),
                )));
            }
            Err(e) => return Err(e),
        }
    }
    request.body = body_start;
    Ok(request)
}

/// One read of at least one byte before `deadline`; `Gone` on end of stream, timeout or
/// error.
fn read_until(conn: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<usize, ReadError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadError::Gone);
        }
        conn.set_read_timeout(Some(left))
            .map_err(|_| ReadError::Gone)?;
        match conn.read(buf) {
            Ok(0) => return Err(ReadError::Gone),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(ReadError::Gone),
        }
    }
}

/// Writes `response` and closes the connection gracefully: the write side first, then
/// whatever the client still sends is read away (briefly), so that an answer sent before
/// a body was read reaches the client instead of being cut off by a reset.
pub(crate) fn respond(mut conn: TcpStream, response: &Response, limits: &Limits) {
    if !send(&mut conn, response, limits.write_timeout) {
        return;
    }
    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained <= limits.max_body {
        match conn.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

/// Writes `response` within `timeout` and shuts the write side; false when the client
/// could not be written to. For answers that must not hold the caller up (an overload's
/// 503, written by the accepting thread), this is all that is done before closing.
pub(crate) fn send(conn: &mut TcpStream, response: &Response, timeout: Duration) -> bool {
    if conn.set_write_timeout(Some(timeout)).is_err() {
        return false;
    }
    if conn.write_all(&response.to_bytes()).is_err() {
        return false;
    }
    let _ = conn.flush();
    let _ = conn.shutdown(std::net::Shutdown::Write);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "GET".into(),
            path: "/status".into(),
            query: String::new(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
        }
    }

    #[test]
    fn a_repeated_host_is_refused() {
        assert!(one_host(&request(&[])).is_ok());
        assert!(one_host(&request(&[("host", "127.0.0.1:1")])).is_ok());
        let two = request(&[("host", "127.0.0.1:1"), ("host", "evil.example")]);
        let e = one_host(&two).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(String::from_utf8_lossy(&e.body).contains("more than one Host"));
    }
}
