//! Routes of the control endpoint's HTTP server: `(method, path) → handler`.
//!
//! Small on purpose, and shaped to grow: the control API registers its four routes here
//! today; a dashboard's static assets, a JSON API and `/metrics` are more routes of the
//! same kind. A route that waits on the engine (a savepoint can take minutes) is *slow*:
//! at most `slow_limit` of those run at once, so the worker pool always keeps a thread
//! for the quick ones (`GET /status` answers while savepoints are being taken).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::http::{Request, Response};

/// What answers a request. It runs on a worker thread of the pool.
pub(crate) type Handler = Box<dyn Fn(&Request) -> Response + Send + Sync>;

/// One route.
pub(crate) struct Route {
    method: &'static str,
    path: &'static str,
    slow: bool,
    handler: Handler,
}

/// The routes of a server.
pub(crate) struct Router {
    routes: Vec<Route>,
    slow_limit: usize,
    slow_in_flight: AtomicUsize,
}

impl Router {
    /// A router without routes, running at most `slow_limit` slow handlers at once.
    pub fn new(slow_limit: usize) -> Router {
        Router {
            routes: Vec::new(),
            slow_limit,
            slow_in_flight: AtomicUsize::new(0),
        }
    }

    /// Adds a quick `GET` route.
    pub fn get(self, path: &'static str, handler: Handler) -> Router {
        self.route("GET", path, false, handler)
    }

    /// Adds a `POST` route that waits on the engine (limited, see the module docs).
    pub fn post_slow(self, path: &'static str, handler: Handler) -> Router {
        self.route("POST", path, true, handler)
    }

    fn route(mut self, method: &'static str, path: &'static str, slow: bool, h: Handler) -> Router {
        self.routes.push(Route {
            method,
            path,
            slow,
            handler: h,
        });
        self
    }

    /// The route for `method` and `path`, or the answer to give: 404 for an unknown path
    /// (naming the known ones), 405 for a known path with another method.
    pub fn find(&self, method: &str, path: &str) -> Result<&Route, Response> {
        if let Some(r) = self
            .routes
            .iter()
            .find(|r| r.path == path && r.method == method)
        {
            return Ok(r);
        }
        let methods: Vec<&str> = self
            .routes
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.method)
            .collect();
        if !methods.is_empty() {
            return Err(Response::error(
                405,
                format!("wrong method for {path}: use {}", methods.join(" or ")),
            ));
        }
        let mut known: Vec<&str> = self.routes.iter().map(|r| r.path).collect();
        known.dedup();
        Err(Response::error(
            404,
            format!("no such endpoint {path}; try {}", known.join(", ")),
        ))
    }

    /// Runs `route`'s handler, or answers 503 when it is slow and `slow_limit` slow ones
    /// are already running.
    pub fn call(&self, route: &Route, request: &Request) -> Response {
        if !route.slow {
            return (route.handler)(request);
        }
        let taken = self
            .slow_in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.slow_limit).then_some(n + 1)
            });
        if taken.is_err() {
            return Response::error(
                503,
                format!(
                    "{} checkpoint, savepoint or stop requests are already waiting for the \
                     job; retry when one has finished",
                    self.slow_limit
                ),
            );
        }
        struct Release<'a>(&'a AtomicUsize);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _release = Release(&self.slow_in_flight);
        (route.handler)(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    fn request(method: &str, path: &str) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            query: String::new(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    fn ok(status: u16) -> Handler {
        Box::new(move |_| Response::error(status, "x"))
    }

    #[test]
    fn unknown_paths_and_wrong_methods_are_told_apart() {
        let r = Router::new(1)
            .get("/status", ok(200))
            .post_slow("/stop", ok(200));
        assert!(r.find("GET", "/status").is_ok());
        let e = r.find("POST", "/status").err().unwrap();
        assert_eq!(e.status, 405);
        assert!(String::from_utf8_lossy(&e.body).contains("GET"));
        let e = r.find("GET", "/nope").err().unwrap();
        assert_eq!(e.status, 404);
        assert!(String::from_utf8_lossy(&e.body).contains("/status, /stop"));
    }

    #[test]
    fn slow_routes_are_limited_and_quick_ones_are_not() {
        let gate = Arc::new(Barrier::new(2));
        let held = gate.clone();
        let router = Arc::new(Router::new(1).get("/status", ok(200)).post_slow(
            "/savepoint",
            Box::new(move |_| {
                held.wait(); // entered
                held.wait(); // released
                Response::error(200, "done")
            }),
        ));
        let r = router.clone();
        let first = std::thread::spawn(move || {
            let route = r.find("POST", "/savepoint").unwrap();
            r.call(route, &request("POST", "/savepoint")).status
        });
        gate.wait();
        let slow = router.find("POST", "/savepoint").unwrap();
        assert_eq!(
            router.call(slow, &request("POST", "/savepoint")).status,
            503
        );
        let quick = router.find("GET", "/status").unwrap();
        assert_eq!(router.call(quick, &request("GET", "/status")).status, 200);
        gate.wait();
        assert_eq!(first.join().unwrap(), 200);
        // The slot is free again.
        let gate2 = gate.clone();
        let again = std::thread::spawn(move || {
            gate2.wait();
            gate2.wait();
        });
        assert_eq!(
            router.call(slow, &request("POST", "/savepoint")).status,
            200
        );
        again.join().unwrap();
    }
}
