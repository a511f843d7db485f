//! `weir savepoint | stop | checkpoint | status --job ADDR`: requests to a running job's
//! control endpoint (see the module docs of [`super`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use clap::{Args, ValueEnum};
use serde_json::{json, Value};

/// Longest wait for the TCP connection to the control endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a status answer (the engine answers it at once).
const STATUS_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest wait for a checkpoint, savepoint or stop: as long as the engine's default
/// checkpoint timeout, and a minute more.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(660);

/// Where the job is and how to prove we may ask.
#[derive(Args, Debug)]
pub struct JobAddr {
    /// The job's control endpoint, as `weir run` printed it (`127.0.0.1:PORT`).
    #[arg(long)]
    job: String,
    /// File holding the endpoint's token (needed when the job requires one); the
    /// `WEIR_CONTROL_TOKEN` environment variable works too.
    #[arg(long)]
    token_file: Option<PathBuf>,
}

/// Arguments of `weir savepoint`.
#[derive(Args, Debug)]
pub struct SavepointArgs {
    #[command(flatten)]
    job: JobAddr,
    /// Folder inside the job's --savepoint-dir to put the savepoint in (default: that
    /// directory itself).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Arguments of `weir stop`.
#[derive(Args, Debug)]
pub struct StopArgs {
    #[command(flatten)]
    job: JobAddr,
    /// Folder inside the job's --savepoint-dir for the final savepoint.
    #[arg(long)]
    savepoint_dir: Option<PathBuf>,
    /// End the input first, so operators emit what they hold (timers, partial results).
    #[arg(long)]
    drain: bool,
}

/// Arguments of `weir checkpoint`.
#[derive(Args, Debug)]
pub struct CheckpointArgs {
    #[command(flatten)]
    job: JobAddr,
}

/// Arguments of `weir status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    job: JobAddr,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// How `weir status` prints.
#[derive(Clone, Copy, ValueEnum, Debug)]
pub enum Format {
    /// Lines for people.
    Text,
    /// The endpoint's JSON.
    Json,
}

impl JobAddr {
    fn base(&self) -> String {
        let a = self.job.trim_end_matches('/');
        if a.starts_with("http://") {
            a.to_string()
        } else {
            format!("http://{a}")
        }
    }

    fn token(&self) -> Result<Option<String>> {
        if let Some(f) = &self.token_file {
            return weir::runner::control::read_token(f)
                .map(Some)
                .map_err(anyhow::Error::msg);
        }
        Ok(std::env::var("WEIR_CONTROL_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()))
    }

    /// Sends one request; returns the JSON answer of a 2xx, else the endpoint's error (a
    /// peer that does not answer in time is an error too, naming the address).
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let url = format!("{}{path}", self.base());
        // A status answers at once, so a peer that says nothing within seconds is not a
        // Weir job. Savepoints of large state take a while: wait as long as the engine does.
        let answer_within = match method {
            "GET" => STATUS_TIMEOUT,
            _ => SNAPSHOT_TIMEOUT,
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(answer_within))
            .http_status_as_error(false)
            .build()
            .into();
        let auth = self.token()?.map(|t| format!("Bearer {t}"));
        let response = match method {
            "GET" => {
                let mut r = agent.get(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            _ => {
                // Actions carry X-Weir-Action, which the endpoint demands of every POST so
                // that a page on another site cannot trigger them.
                let mut r = agent
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .header("X-Weir-Action", "1");
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.send(body.unwrap_or(Value::Null).to_string().as_str())
            }
        };
        let mut response = response.map_err(|e| match e {
            ureq::Error::Timeout(_) => anyhow!(
                "the control endpoint at {} did not answer within {answer_within:?}; is that \
                 the address `weir run` printed?",
                self.job
            ),
            e => anyhow!(
                "cannot reach the job's control endpoint at {}: {e}; is the job running? \
                 (`weir run` prints the address at start)",
                self.job
            ),
        })?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| anyhow!("cannot read the answer of {}: {e}", self.job))?;
        let value: Value = serde_json::from_str(&text).map_err(|_| {
            anyhow!(
                "{} answered HTTP {status} with something that is not a Weir control answer",
                self.job
            )
        })?;
        if (200..300).contains(&status) {
            return Ok(value);
        }
        let msg = value["error"].as_str().unwrap_or("no reason given");
        if status == 401 {
            bail!("the job refused the request: {msg}");
        }
        bail!("{msg}")
    }
}

fn path_of(v: &Value) -> String {
    v["path"].as_str().unwrap_or("?").to_string()
}

/// `weir savepoint`: prints the savepoint's folder.
pub fn savepoint(a: SavepointArgs) -> Result<ExitCode> {
    let v = a
        .job
        .call("POST", "/savepoint", Some(json!({ "dir": a.dir })))?;
    println!("{}", path_of(&v));
    Ok(ExitCode::SUCCESS)
}

/// `weir stop`: prints the final savepoint's folder once the job stopped.
pub fn stop(a: StopArgs) -> Result<ExitCode> {
    let v = a.job.call(
        "POST",
        "/stop",
        Some(json!({ "dir": a.savepoint_dir, "drain": a.drain })),
    )?;
    println!("{}", path_of(&v));
    Ok(ExitCode::SUCCESS)
}

/// `weir checkpoint`: triggers a checkpoint and prints its folder when complete.
pub fn checkpoint(a: CheckpointArgs) -> Result<ExitCode> {
    // A checkpoint takes no options: `{}` (the endpoint refuses a `null` body).
    let v = a.job.call("POST", "/checkpoint", Some(json!({})))?;
    println!("{}", path_of(&v));
    Ok(ExitCode::SUCCESS)
}

/// `weir status`: the job's state, parallelism and latest checkpoints.
pub fn status(a: StatusArgs) -> Result<ExitCode> {
    let v = a.job.call("GET", "/status", None)?;
    match a.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&v)?),
        Format::Text => print!("{}", describe_status(&v)),
    }
    Ok(ExitCode::SUCCESS)
}

fn describe_status(v: &Value) -> String {
    let mut out = format!(
        "job {}: {} (attempt {}), {} source records\n",
        v["job"].as_str().unwrap_or("?"),
        v["state"].as_str().unwrap_or("?"),
        v["attempt"],
        v["source_records"],
    );
    if let (Some(done), Some(failed)) = (
        v["checkpoints_completed"].as_u64(),
        v["checkpoints_failed"].as_u64(),
    ) {
        out.push_str(&format!("checkpoints: {done} completed, {failed} failed\n"));
    }
    let attempts = v["attempts"].as_array().cloned().unwrap_or_default();
    if let Some(last) = attempts.iter().rev().find(|a| a["failure"].is_string()) {
        out.push_str(&format!(
            "restarts: {}; the last after attempt {} failed: {}\n",
            v["restarts"],
            last["attempt"],
            last["failure"].as_str().unwrap_or("?")
        ));
    }
    out.push_str("operators:\n");
    for op in v["operators"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  {:<24} parallelism {}\n",
            op[0].as_str().unwrap_or("?"),
            op[1]
        ));
    }
    let checkpoints = v["checkpoints"].as_array().cloned().unwrap_or_default();
    if checkpoints.is_empty() {
        out.push_str("no checkpoint completed yet\n");
    } else {
        out.push_str("latest checkpoints:\n");
        for c in checkpoints.iter().rev().take(5) {
            let how = match c["unaligned"].as_bool() {
                Some(true) => format!("unaligned ({} B in flight)", c["in_flight_bytes"]),
                _ => "aligned".to_string(),
            };
            out.push_str(&format!(
                "  {:>6}  {:>6} ms  {:>10} B  {}, alignment {} ms  {}\n",
                c["id"],
                c["duration_ms"],
                c["bytes"],
                how,
                c["alignment_ms"].as_u64().unwrap_or(0),
                c["path"].as_str().unwrap_or("?")
            ));
        }
    }
    for s in v["savepoints"].as_array().into_iter().flatten() {
        out.push_str(&format!("savepoint {}\n", s.as_str().unwrap_or("?")));
    }
    out
}
