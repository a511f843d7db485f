//! The HTTP server of a running job's control endpoint (see the module docs of [`super`]).
//!
//! Bounded in every direction, so that whoever can reach the port cannot exhaust the
//! process: one thread accepts connections into a bounded queue, and a fixed pool of
//! [`WORKERS`] threads takes them from it, reads each request under a deadline counted
//! from the accept ([`Limits`]), checks the token, routes it ([`Router`]) and answers.
//!
//! * Over the queue's capacity a new connection gets a quick `503` and is closed, by the
//!   accepting thread, without a thread of its own.
//! * A connection that sends nothing (half-open) or too slowly is closed when its deadline
//!   passes, queued or not; so a flood of idle connections holds the endpoint for at most
//!   one deadline, and then it answers again.
//! * Slow requests (a savepoint waits until it is complete) take at most `WORKERS - 1`
//!   threads, so `GET /status` is answered while savepoints are being taken.
//!
//! [`ControlServer::shutdown`] lets in-flight answers (a stop's savepoint path above all)
//! reach their clients before the process exits.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TrySendError};

use super::guard::{self, Access};
use super::http::{self, Limits, ReadError, Response};
use super::router::Router;
use super::routes::control_router;
use crate::prelude::JobControl;

/// Worker threads per endpoint: requests served at once.
pub(crate) const WORKERS: usize = 4;

/// Accepted connections waiting for a worker, beyond which new ones get a `503`.
pub(crate) const QUEUE: usize = 32;

/// A connection and when it was accepted (its request's deadline counts from then).
struct Accepted {
    conn: TcpStream,
    at: Instant,
}

/// Threads of the pool still running, to wait for at shutdown.
type Live = Arc<(Mutex<usize>, Condvar)>;

/// A running control endpoint.
pub struct ControlServer {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    live: Live,
    acceptor: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Binds `bind` and serves `control`; requests must carry `token` when it is set.
    pub fn start(
        bind: SocketAddr,
        token: Option<String>,
        control: JobControl,
    ) -> Result<Self, String> {
        let router = control_router(control, WORKERS - 1);
        Self::serve(bind, token, router, Limits::default())
    }

    /// Binds `bind` and serves `router` under `limits` with [`WORKERS`] threads.
    pub(crate) fn serve(
        bind: SocketAddr,
        token: Option<String>,
        router: Router,
        limits: Limits,
    ) -> Result<Self, String> {
        let listener = TcpListener::bind(bind).map_err(|e| {
            format!(
                "cannot open the control endpoint on {bind}: {e}; pick another --control \
                 address (port 0 picks a free one) or pass --control off"
            )
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("cannot read the control endpoint's address: {e}"))?;
        let (tx, rx) = crossbeam_channel::bounded::<Accepted>(QUEUE);
        let stopping = Arc::new(AtomicBool::new(false));
        let live: Live = Arc::new((Mutex::new(0), Condvar::new()));
        let shared = Arc::new(Shared {
            router,
            token,
            limits,
            stopping: stopping.clone(),
        });
        for i in 0..WORKERS {
            let (rx, shared, mine) = (rx.clone(), shared.clone(), live.clone());
            *live.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            let spawned = std::thread::Builder::new()
                .name(format!("weir-control-{i}"))
                .spawn(move || {
                    work(&rx, &shared);
                    let (count, done) = &*mine;
                    *count.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
                    done.notify_all();
                });
            if let Err(e) = spawned {
                *live.0.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
                stopping.store(true, Ordering::SeqCst);
                return Err(format!("cannot start the control endpoint's threads: {e}"));
            }
        }
        let stop = stopping.clone();
        let acceptor = std::thread::Builder::new()
            .name("weir-control".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else {
                        // Out of file descriptors, say: let some close before trying again.
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    let accepted = Accepted {
                        conn,
                        at: Instant::now(),
                    };
                    match tx.try_send(accepted) {
                        Ok(()) => {}
                        Err(TrySendError::Full(mut a)) => {
                            let busy = Response::error(
                                503,
                                "the control endpoint is busy; retry in a moment",
                            );
                            http::send(&mut a.conn, &busy, Duration::from_millis(100));
                        }
                        Err(TrySendError::Disconnected(_)) => break,
                    }
                }
                // Dropping `tx` ends the workers once the queue is empty.
            })
            .map_err(|e| {
                stopping.store(true, Ordering::SeqCst);
                format!("cannot start the control endpoint's thread: {e}")
            })?;
        Ok(ControlServer {
            addr,
            stopping,
            live,
            acceptor: Some(acceptor),
        })
    }

    /// The address clients use (`weir status --job ADDR`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting requests and waits (at most `grace`) for answers still being sent.
    pub fn shutdown(mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        if self.stop_accepting() {
            if let Some(a) = self.acceptor.take() {
                let _ = a.join();
            }
        }
        let (count, done) = &*self.live;
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

    /// Tells the accepting thread to stop and wakes it with a connection of our own; false
    /// when it could not be woken (it then ends with the process).
    fn stop_accepting(&self) -> bool {
        self.stopping.store(true, Ordering::SeqCst);
        let ip = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        TcpStream::connect_timeout(
            &SocketAddr::new(ip, self.addr.port()),
            Duration::from_secs(1),
        )
        .is_ok()
    }
}

impl Drop for ControlServer {
    /// A server dropped without [`ControlServer::shutdown`] still stops accepting.
    fn drop(&mut self) {
        if self.acceptor.is_some() {
            self.stop_accepting();
        }
    }
}

/// What every worker reads.
struct Shared {
    router: Router,
    token: Option<String>,
    limits: Limits,
    stopping: Arc<AtomicBool>,
}

/// A worker: serves connections from the queue until it is closed.
fn work(rx: &Receiver<Accepted>, shared: &Shared) {
    while let Ok(a) = rx.recv() {
        if shared.stopping.load(Ordering::SeqCst) {
            let ending = Response::error(503, "the job is ending");
            let mut conn = a.conn;
            http::send(&mut conn, &ending, Duration::from_millis(100));
            continue;
        }
        serve(a, shared);
    }
}

/// Reads one request, checks it whole before acting, and answers it.
fn serve(a: Accepted, shared: &Shared) {
    let Accepted { mut conn, at } = a;
    let limits = &shared.limits;
    let deadline = at + limits.request_timeout;
    let head = match http::read_head(&mut conn, deadline, limits) {
        Ok(head) => head,
        Err(ReadError::Answer(r)) => return http::respond(conn, &r, limits),
        Err(ReadError::Gone) => return,
    };
    let access = guard::access(&head.request, shared.token.as_deref());
    if access == Access::Denied {
        return http::respond(conn, &guard::unauthorized(), limits);
    }
    if let Err(r) = guard::same_site(&head.request, shared.token.is_some()) {
        return http::respond(conn, &r, limits);
    }
    let route = match shared.router.find(&head.request.method, &head.request.path) {
        Ok(route) => route,
        Err(r) => return http::respond(conn, &r, limits),
    };
    let request = match http::read_body(&mut conn, head, deadline) {
        Ok(request) => request,
        Err(ReadError::Answer(r)) => return http::respond(conn, &r, limits),
        Err(ReadError::Gone) => return,
    };
    let mut response = shared.router.call(route, &request);
    if let (Access::GrantedByQuery, Some(token)) = (access, &shared.token) {
        response = response.with_header("Set-Cookie", guard::cookie(token));
    }
    http::respond(conn, &response, limits);
}

#[cfg(test)]
mod tests;
