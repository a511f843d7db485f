//! What the dashboard tests share: a `weir run keyed-count` in the background with its
//! control address, and HTTP requests to it.
#![allow(dead_code)] // each test file uses a part

pub mod devtools;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

pub use crate::common::running::Running;

/// Starts keyed-count at parallelism 2 over 10 million records (20 s), checkpoints every
/// 200 ms, and waits for its control address.
pub fn start_job(tmp: &Path, extra: &[&str], name: &str) -> Running {
    start_job_events(tmp, 10_000_000, extra, name)
}

/// [`start_job`] over `events` records (at 500 000 a second).
pub fn start_job_events(tmp: &Path, events: u64, extra: &[&str], name: &str) -> Running {
    let (ck, sp) = (
        checkpoint_arg(&tmp.join("ck")),
        checkpoint_arg(&tmp.join("sp")),
    );
    let out = s(&tmp.join(format!("out-{name}")));
    let mut flags = vec![
        "--rate",
        "500000",
        "--checkpoint-interval",
        "200ms",
        "--checkpoint-dir",
        &ck,
        "--savepoint-dir",
        &sp,
        "--output",
        &out,
    ];
    flags.extend_from_slice(extra);
    let args = keyed_count_args(events, 61, &flags, false);
    Running::start(&mut weir(tmp, &args), tmp.join(format!("{name}.log")))
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(60)))
        .http_status_as_error(false)
        .build()
        .into()
}

/// `GET url` with `headers`: the status and the body.
pub fn get(url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut r = agent().get(url);
    for (n, v) in headers {
        r = r.header(*n, *v);
    }
    let mut resp = r.call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

/// `POST url` with `headers` and an empty JSON body: the status and the body.
pub fn post(url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut r = agent().post(url).header("Content-Type", "application/json");
    for (n, v) in headers {
        r = r.header(*n, *v);
    }
    let mut resp = r.send("{}").unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

pub fn json(url: &str) -> Value {
    let (status, body) = get(url, &[]);
    assert_eq!(status, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

/// Polls `url` until `done` holds of its JSON answer.
pub fn wait_for(url: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + RUN_TIMEOUT;
    loop {
        let v = json(url);
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "never {what}: {v:#}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
