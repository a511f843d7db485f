//! The control endpoint of a running job (issue 4): an HTTP server (`server`) in front of
//! the engine's [`JobControl`](crate::prelude::JobControl), which `weir savepoint | stop |
//! checkpoint | status --job ADDR` talk to. The protocol is JSON over HTTP/1.1:
//!
//! | request | body | answer |
//! |---|---|---|
//! | `GET /status` | — | the job's [`JobStatus`](crate::prelude::JobStatus) |
//! | `POST /checkpoint` | — | `{"id", "path"}` once the checkpoint completed |
//! | `POST /savepoint` | `{"dir"?}` | `{"id", "path"}` once the savepoint completed |
//! | `POST /stop` | `{"dir"?, "drain"?}` | `{"id", "path"}`; the job then ends |
//! | `GET /api/job`, `GET /api/checkpoints`, `GET /api/state`, `GET /api/workers` | — | the dashboard's views of the status (`api`) |
//! | `GET /metrics` | — | OpenMetrics text for Prometheus (`metrics`) |
//! | `GET /`, `/checkpoints`, `/workers`, `/actions`, `/assets/…` | — | the dashboard, embedded (`assets`) |
//!
//! Errors are `{"error": "…"}` with a 4xx/5xx status. Security (`guard`): the endpoint binds
//! to loopback unless told otherwise, and then answers only requests naming a loopback
//! host; bound to any other address it requires a token (printed at start, or read from
//! `--control-token-file`) of every request, as a bearer header or the cookie a browser
//! gets from `/?token=…`. Every `POST` must carry `X-Weir-Action` and no foreign `Origin`,
//! so another site's page cannot trigger an action. The engine confines every folder a
//! request names to the job's `--savepoint-dir`.
//!
//! The server is bounded (a fixed pool of threads, a bounded queue of connections, a
//! deadline per request; see `server`), parses requests with `httparse` and refuses a
//! malformed one before acting on it (`http`). Its routes (`router`, `routes`) are a
//! table of exact paths, so nothing but what is listed can be served. All of it is internal: what is
//! public here are the flags ([`ControlArgs`]) and [`read_token`], which the client shares.
//!
//! The client side lives in the `weir` command (crate `weir-cli`): a job needs the server,
//! never the client.

mod api;
mod assets;
mod guard;
mod http;
mod metrics;
mod router;
mod routes;
pub(crate) mod server;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use crate::api::config::JobConfig;

/// Flags of a run about controlling the running job and its savepoints.
#[derive(Args, Debug, Clone)]
pub struct ControlArgs {
    /// Address of the control endpoint (`weir savepoint|stop|checkpoint|status --job ADDR`):
    /// `IP:PORT` (port 0 picks a free one; the address is printed at start) or `off`.
    #[arg(long, default_value = "127.0.0.1:0", value_parser = parse_bind)]
    pub control: Bind,
    /// File holding the control endpoint's token. Required of requests whenever given;
    /// without it, a non-loopback endpoint makes up a token and prints it at start.
    #[arg(long)]
    pub control_token_file: Option<PathBuf>,
    /// Where savepoints go; a savepoint request may only name folders inside it.
    #[arg(long, default_value = "weir-savepoints", value_parser = crate::runner::flags::parse_location)]
    pub savepoint_dir: PathBuf,
    /// Keep this run's checkpoints when the job is stopped with a savepoint (`true`), or
    /// delete them, leaving the savepoint as the way to resume (`false`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub retain_on_cancel: bool,
    /// After the job ends (finished, stopped or failed), keep serving its final status —
    /// dashboard, API, metrics — this long before the process exits, so its pages stay
    /// readable (e.g. `10m`; Ctrl-C ends it sooner). The default, 0s, exits at once, as
    /// scripts expect. Either way the endpoint serves through publishing and `--verify`.
    #[arg(long, default_value = "0s", value_parser = parse_linger)]
    pub control_linger: Duration,
}

fn parse_linger(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("'{s}' is not a duration like 0s, 30s or 10m ({e})"))
}

/// The running control endpoint of a `weir run`, kept until the run returns: the pages
/// show the job's final status while its output is published and verified, then for
/// `--control-linger`, and only then does the server stop (letting a `weir stop` hear its
/// savepoint's path first). A guard, so every way out of the run — success, a stop, a
/// failure — keeps the same promise.
pub(crate) struct Serving {
    server: Option<server::ControlServer>,
    linger: Duration,
}

impl Serving {
    /// Keeps `server` (if any) up until dropped, and `linger` longer.
    pub(crate) fn new(server: Option<server::ControlServer>, linger: Duration) -> Self {
        Serving { server, linger }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let Some(server) = self.server.take() else {
            return;
        };
        if !self.linger.is_zero() {
            eprintln!(
                "weir: the job ended; its dashboard http://{}/ stays up for {} (Ctrl-C to exit)",
                server.addr(),
                humantime::format_duration(self.linger)
            );
            std::thread::sleep(self.linger);
        }
        server.shutdown(Duration::from_secs(5));
    }
}

impl ControlArgs {
    /// Applies the savepoint settings to the job's configuration.
    pub fn apply(&self, cfg: &mut JobConfig) {
        cfg.savepoint_dir = self.savepoint_dir.clone();
        cfg.retain_on_cancel = self.retain_on_cancel;
    }

    /// Where to bind, or `None` when the endpoint is off.
    pub fn bind_addr(&self) -> Option<SocketAddr> {
        self.control.0
    }

    /// The token requests must carry: the file's content when given, a fresh random one
    /// when binding beyond loopback, none on loopback.
    pub fn token(&self, bind: IpAddr) -> Result<Option<String>, String> {
        if let Some(path) = &self.control_token_file {
            return read_token(path).map(Some);
        }
        if bind.is_loopback() {
            return Ok(None);
        }
        Ok(Some(
            (0..4)
                .map(|_| format!("{:08x}", fastrand::u32(..)))
                .collect(),
        ))
    }
}

/// Where the control endpoint listens; `None` when it is off.
#[derive(Debug, Clone, Copy)]
pub struct Bind(pub Option<SocketAddr>);

fn parse_bind(s: &str) -> Result<Bind, String> {
    if s == "off" {
        return Ok(Bind(None));
    }
    s.parse()
        .map(|a| Bind(Some(a)))
        .map_err(|_| format!("'{s}' is not IP:PORT (e.g. 127.0.0.1:8081, 0.0.0.0:0) nor `off`"))
}

/// Reads a token file: its content without surrounding whitespace, never empty. Shared
/// with the client (`weir status --token-file`), so both read a file the same way.
pub fn read_token(path: &Path) -> Result<String, String> {
    let raw = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the control token file {}: {e}", path.display()))?;
    let token = raw.trim().to_string();
    if token.is_empty() {
        return Err(format!(
            "the control token file {} is empty; put a secret in it",
            path.display()
        ));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "the control token in {} contains whitespace; use one word",
            path.display()
        ));
    }
    Ok(token)
}
