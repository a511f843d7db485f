//! One job across worker *containers* (issue 24, tests 2 and 4): each test builds the image
//! of this test's `weir` binary with `deploy/build-image.sh` (FROM scratch, no registry),
//! makes its own private docker network, runs moto's S3 server on the host side of that
//! network (the network's gateway address; the checkpoints must be on S3 when the workers
//! are on other hosts), and starts a coordinator and two workers as containers, each at an
//! address of its own. A worker is then cut off (`docker network disconnect`), killed
//! (`docker kill`) or frozen (`docker pause`) after a checkpoint of the held input completed; the job must detect the
//! loss, restart from that checkpoint on a replacement worker and count exactly.
//!
//! Every name carries the test process's id and a counter, so parallel tests and CI runs
//! never clash, and a guard removes the containers, the network, the image tag and the S3
//! server even when the test fails. Nothing waits on the machine's speed: the input is held
//! (`--hold-at`, with the release file on a bind mount the containers share) until the test
//! saw what it waits for, and every wait is bounded by a generous deadline.
//!
//! Docker Engine is required: without a reachable daemon these tests FAIL, saying how to get
//! one; `WEIR_SKIP_DOCKER_TESTS=1` skips them on purpose.

mod cluster_support;
mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use cluster_support::{assert_worker_restored, restored_held_checkpoint, HOLD_AT};
use common::*;

/// Events of the job; each of the two generator subtasks holds after [`HOLD_AT`] of its own.
const EVENTS: u64 = 200_000;
/// Keys (not a divisor of [`EVENTS`]).
const KEYS: u64 = 97;
/// A safety net for a hang, never a pace (containers on a loaded machine are slow to start).
const TIMEOUT: Duration = Duration::from_secs(300);
/// The cluster's shared secret (every address is off loopback, so one is required).
const TOKEN: &str = "docker-test-token";
/// The S3 bucket of the checkpoints.
const BUCKET: &str = "checkpoints";
/// The coordinator's control port and the workers' exchange port inside the containers.
const CLUSTER_PORT: u16 = 6123;
const EXCHANGE_PORT: u16 = 6124;
/// Set to 1 to skip these tests on a machine without Docker.
const SKIP_VAR: &str = "WEIR_SKIP_DOCKER_TESTS";

/// Whether to run: `false` only when [`SKIP_VAR`] asks to skip. A missing or unreachable
/// docker daemon fails the test, naming the way out.
fn docker_available() -> bool {
    if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") {
        eprintln!("skipped: {SKIP_VAR}=1");
        return false;
    }
    let how = format!(
        "these tests run the cluster in containers and need Docker Engine with a running \
         daemon (Debian: `apt-get install docker.io` then `service docker start`; the user \
         must be allowed to use /var/run/docker.sock), or set {SKIP_VAR}=1 to skip them"
    );
    match Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
    {
        Ok(o) if o.status.success() => true,
        Ok(o) => panic!(
            "the docker daemon is unreachable: {}\n{how}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!("cannot run `docker`: {e}\n{how}"),
    }
}

/// Runs `docker ARGS`.
fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("docker runs")
}

/// Runs `docker ARGS` and returns its trimmed stdout; panics naming the command and its
/// error when it fails.
fn docker_ok(args: &[&str]) -> String {
    let o = docker(args);
    assert!(
        o.status.success(),
        "`docker {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr).trim()
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// moto's S3 server on the host side of a test's network, killed when dropped.
struct HostS3 {
    shell: Child,
    endpoint: String,
}

impl HostS3 {
    /// Starts moto on `ip` (the network's gateway: reachable from its containers and from
    /// this process, from nowhere else) and makes [`BUCKET`].
    fn start(ip: &str) -> HostS3 {
        let port = TcpListener::bind((ip, 0))
            .and_then(|l| l.local_addr())
            .unwrap_or_else(|e| panic!("cannot bind the network's gateway {ip}: {e}"))
            .port();
        // Through a shell that SIGKILLs the server once its stdin (held here) closes.
        let script = "command -v moto_server >/dev/null || exit 127; moto_server -H \"$0\" -p \"$1\" & m=$!; read _; kill -9 $m; wait $m";
        let shell = Command::new("sh")
            .args(["-c", script, ip, &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh starts");
        let mut s3 = HostS3 {
            shell,
            endpoint: format!("http://{ip}:{port}"),
        };
        let deadline = Instant::now() + TIMEOUT;
        while TcpStream::connect((ip, port)).is_err() {
            if s3.shell.try_wait().is_ok_and(|s| s.is_some()) {
                panic!("moto_server is needed: pip install 'moto[server]' (scripts/test.sh does)");
            }
            assert!(
                Instant::now() < deadline,
                "moto did not start on {ip}:{port}"
            );
            thread::sleep(Duration::from_millis(100));
        }
        let mut c = TcpStream::connect((ip, port)).unwrap();
        write!(
            c,
            "PUT /{BUCKET} HTTP/1.1\r\nHost: {ip}:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        s3
    }
}

impl Drop for HostS3 {
    fn drop(&mut self) {
        drop(self.shell.stdin.take());
        let _ = self.shell.wait();
    }
}

/// A test's cluster: its image tag, network, S3 server and containers, all removed when
/// dropped (also when the test panics).
struct DockerCluster {
    /// The prefix of every name (unique per test process and test).
    name: String,
    /// The test's folder, bind-mounted at `/job` in every container (the output, the
    /// release file).
    dir: PathBuf,
    image: Option<String>,
    network: Option<String>,
    /// The first three octets of the network's /24 (`172.27.14`).
    net24: String,
    s3: Option<HostS3>,
    containers: Vec<String>,
}

impl DockerCluster {
    /// Builds the image, makes the network and starts S3 for the test `tag`.
    fn new(dir: &Path, tag: &str) -> DockerCluster {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "weir-test-{}-{}-{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut c = DockerCluster {
            name: name.clone(),
            dir: dir.to_path_buf(),
            image: None,
            network: None,
            net24: String::new(),
            s3: None,
            containers: Vec::new(),
        };
        // The image of the weir under test (the coordinator and the workers must run the
        // same binary: the plan fingerprint covers it). Layers are cached by content, so
        // each test's tag costs little after the first.
        let image = format!("weir-test:{name}");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/build-image.sh");
        let out = Command::new(&script)
            .args(["--binary", BIN, "--tag", &image])
            .stdin(Stdio::null())
            .output()
            .expect("deploy/build-image.sh runs");
        assert!(
            out.status.success(),
            "deploy/build-image.sh failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        c.image = Some(image);
        // A private network with a subnet of our choosing (containers get fixed addresses,
        // which `--listen` and `--cluster-listen` name): a random /24, another one if it
        // overlaps a network that exists.
        let mut last = String::new();
        for _ in 0..50 {
            let net24 = format!("172.{}.{}", fastrand::u8(24..=31), fastrand::u8(..));
            let o = docker(&[
                "network",
                "create",
                "--driver",
                "bridge",
                "--label",
                "weir-test=1",
                "--subnet",
                &format!("{net24}.0/24"),
                "--gateway",
                &format!("{net24}.1"),
                &name,
            ]);
            if o.status.success() {
                c.network = Some(name.clone());
                c.net24 = net24;
                break;
            }
            last = String::from_utf8_lossy(&o.stderr).into_owned();
        }
        assert!(
            c.network.is_some(),
            "cannot create a docker network: {last}"
        );
        c.s3 = Some(HostS3::start(&c.ip(1)));
        c
    }

    /// The address `.host` on the test's network (`.1` is the host, the gateway).
    fn ip(&self, host: u8) -> String {
        format!("{}.{host}", self.net24)
    }

    /// Starts container `role` at address `.host` running `weir ARGS` as this user, with
    /// the test folder at /job and the S3 settings in its environment.
    fn start(&mut self, role: &str, host: u8, args: &[String]) -> String {
        let container = format!("{}-{role}", self.name);
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let user = unsafe { format!("{}:{}", libc::getuid(), libc::getgid()) };
        let endpoint = self.s3.as_ref().expect("started").endpoint.clone();
        let mut cmd: Vec<String> = [
            "run",
            "--detach",
            "--name",
            &container,
            "--label",
            "weir-test=1",
            "--network",
            self.network.as_deref().expect("made"),
            "--ip",
            &self.ip(host),
            "--user",
            &user,
            "--volume",
            &format!("{}:/job", self.dir.display()),
            "--workdir",
            "/job",
            "--env",
            &format!("AWS_ENDPOINT_URL={endpoint}"),
            "--env",
            "AWS_ALLOW_HTTP=true",
            "--env",
            "AWS_REGION=us-east-1",
            "--env",
            "AWS_ACCESS_KEY_ID=test",
            "--env",
            "AWS_SECRET_ACCESS_KEY=test",
            "--env",
            "WEIR_S3_LEASE_SECONDS=3",
            "--env",
            "RUST_BACKTRACE=0",
            self.image.as_deref().expect("built"),
        ]
        .map(String::from)
        .to_vec();
        cmd.extend(args.iter().cloned());
        let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
        docker_ok(&refs);
        self.containers.push(container.clone());
        container
    }

    /// Starts the coordinator of keyed-count on 2 workers, its input held until
    /// [`DockerCluster::release`], checkpoints on S3, output to /job/out, and the restart
    /// flags `extra`.
    fn start_coordinator(&mut self, extra: &[&str]) {
        let mut args = keyed_count_args(EVENTS, KEYS, &[], false);
        args.extend(
            [
                "--checkpoint-interval",
                "200ms",
                "--checkpoint-dir",
                &format!("s3://{BUCKET}/chk"),
                "--output",
                "out",
                "--verify",
                "--hold-at",
                &HOLD_AT.to_string(),
                "--release-file",
                "release",
                "--workers",
                "2",
                "--cluster-listen",
                &format!("{}:{CLUSTER_PORT}", self.ip(10)),
                "--cluster-token",
                TOKEN,
                "--heartbeat-timeout",
                "10s",
            ]
            .map(String::from),
        );
        args.extend(extra.iter().map(|a| a.to_string()));
        self.start("coordinator", 10, &args);
        self.wait_for(
            "coordinator",
            "coordinator listening on ",
            "the coordinator to listen",
        );
    }

    /// Starts the worker `name` at address `.host` and waits until the coordinator
    /// registered it (workers get their ids in the order they register).
    fn registered_worker(&mut self, name: &str, host: u8) {
        let args: Vec<String> = [
            "worker",
            "--coordinator",
            &format!("{}:{CLUSTER_PORT}", self.ip(10)),
            "--listen",
            &format!("{}:{EXCHANGE_PORT}", self.ip(host)),
            "--cluster-token",
            TOKEN,
            "--slots",
            "1",
            "--name",
            name,
        ]
        .map(String::from)
        .to_vec();
        self.start(name, host, &args);
        let needle = format!("({name}) at {}:", self.ip(host));
        self.wait_until(&format!("worker {name} to register"), |c| {
            c.logs("coordinator")
                .1
                .lines()
                .any(|l| l.contains(&needle) && l.contains(" registered "))
        });
    }

    /// The stdout and stderr of container `role`.
    fn logs(&self, role: &str) -> (String, String) {
        let o = docker(&["logs", &format!("{}-{role}", self.name)]);
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }

    /// Whether container `role` still runs.
    fn running(&self, role: &str) -> bool {
        docker_ok(&[
            "inspect",
            "--format",
            "{{.State.Running}}",
            &format!("{}-{role}", self.name),
        ]) == "true"
    }

    /// Polls until `done` holds; panics with the coordinator's log when the coordinator
    /// exits first or [`TIMEOUT`] passes.
    fn wait_until(&self, what: &str, mut done: impl FnMut(&DockerCluster) -> bool) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if done(self) {
                return;
            }
            let (out, err) = self.logs("coordinator");
            if !self.running("coordinator") {
                let state = docker_ok(&[
                    "inspect",
                    "--format",
                    "exit code {{.State.ExitCode}}, OOM-killed {{.State.OOMKilled}}",
                    &format!("{}-coordinator", self.name),
                ]);
                panic!("the coordinator exited ({state}) while the test waited for {what}:\n{out}\n{err}");
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {TIMEOUT:?}; the coordinator's log:\n{out}\n{err}"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `role`'s stderr has a line holding `needle`.
    fn wait_for(&self, role: &str, needle: &str, what: &str) {
        self.wait_until(what, |c| c.logs(role).1.contains(needle));
    }

    /// Waits until a complete checkpoint was taken while both generator subtasks held (its
    /// sources at `2 × HOLD_AT`), as `weir checkpoints list` in the coordinator's
    /// container reads it from S3; returns its id.
    fn wait_for_held_checkpoint(&self) -> u64 {
        let coordinator = format!("{}-coordinator", self.name);
        let folder = format!("s3://{BUCKET}/chk/keyed-count");
        let mut held = None;
        self.wait_until("a checkpoint of the held input", |_| {
            let o = docker(&[
                "exec",
                &coordinator,
                "/usr/local/bin/weir",
                "checkpoints",
                "list",
                "--format",
                "json",
                &folder,
            ]);
            // Before the first checkpoint the folder does not exist yet: not an error.
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&o.stdout) else {
                return false;
            };
            held = rows(&v)
                .into_iter()
                .filter(|r| r["status"] == "complete")
                .filter(|r| r["source_records"].as_u64() == Some(2 * HOLD_AT))
                .filter_map(|r| r["id"].as_u64())
                .max();
            held.is_some()
        });
        held.expect("waited for it")
    }

    /// Lets the held input go on.
    fn release(&self) {
        fs::write(self.dir.join("release"), b"go").unwrap();
    }

    /// Waits for container `role` to exit; its exit code, stdout and stderr.
    fn finish(&self, role: &str) -> (i64, String, String) {
        let deadline = Instant::now() + TIMEOUT;
        while self.running(role) {
            let (out, err) = self.logs(role);
            assert!(
                Instant::now() < deadline,
                "{role} did not end within {TIMEOUT:?}:\n{out}\n{err}"
            );
            thread::sleep(Duration::from_millis(100));
        }
        let code = docker_ok(&[
            "inspect",
            "--format",
            "{{.State.ExitCode}}",
            &format!("{}-{role}", self.name),
        ]);
        let (out, err) = self.logs(role);
        (code.parse().expect("an exit code"), out, err)
    }
}

impl Drop for DockerCluster {
    fn drop(&mut self) {
        for c in &self.containers {
            // A paused container is thawed first, so that removing it cannot hang.
            let _ = docker(&["unpause", c]);
            let _ = docker(&["rm", "--force", "--volumes", c]);
        }
        if let Some(n) = &self.network {
            let _ = docker(&["network", "rm", n]);
        }
        if let Some(i) = &self.image {
            // Removes the tag; the layers go with the last tag that holds them.
            let _ = docker(&["rmi", "--force", i]);
        }
        drop(self.s3.take());
    }
}

/// The rows of `weir checkpoints list --format json` (an array, or an object holding one).
fn rows(v: &serde_json::Value) -> Vec<&serde_json::Value> {
    match v {
        serde_json::Value::Array(a) => a.iter().collect(),
        serde_json::Value::Object(o) => o.values().filter_map(|x| x.as_array()).flatten().collect(),
        _ => Vec::new(),
    }
}

/// How a test takes worker w2 away.
#[derive(Clone, Copy)]
enum Loss {
    /// `docker network disconnect`: the process lives on, cut off from every peer.
    CutOff,
    /// `docker kill` (SIGKILL).
    Killed,
    /// `docker pause` (the cgroup freezer: every thread stopped, as SIGSTOP would, its
    /// sockets open): hung, not dead, so only silence tells.
    Hung,
}

/// The scenario both tests share: a coordinator and workers w1, w2 in containers; once a
/// checkpoint of the held input completed, w2 is taken away; the coordinator must name
/// the loss, restart from that checkpoint with a replacement w3 and w1, and count exactly.
fn lose_a_worker_and_recover(loss: Loss, tag: &str) {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut c = DockerCluster::new(tmp.path(), tag);
    // The default restart strategy and identical-failure limit (5 in a row), for every
    // loss: a frozen worker keeps its control stream open, so the coordinator counts it
    // lost only after --heartbeat-timeout (10 s), but the surviving worker's exchange
    // reports it lost within 3 s, and from then on no attempt is deployed onto it until it
    // answers or is counted lost (it was the known gap of the frozen worker: each restart
    // deployed onto it again and failed at once, until the job gave up).
    let restarts: &[&str] = &["--restart-delay", "10ms"];
    c.start_coordinator(restarts);
    c.registered_worker("w1", 11);
    c.registered_worker("w2", 12);
    let held = c.wait_for_held_checkpoint();
    let w2 = format!("{}-w2", c.name);
    match loss {
        Loss::CutOff => docker_ok(&["network", "disconnect", c.network.as_deref().unwrap(), &w2]),
        Loss::Killed => docker_ok(&["kill", "--signal", "KILL", &w2]),
        Loss::Hung => docker_ok(&["pause", &w2]),
    };
    // Detected: the coordinator names the lost worker before anything replaces it.
    c.wait_until("the coordinator to report w2 lost", |c| {
        c.logs("coordinator")
            .1
            .lines()
            .any(|l| l.contains("lost worker 2 (w2)"))
    });
    c.release();
    c.registered_worker("w3", 13);
    let (code, out, log) = c.finish("coordinator");
    assert_eq!(code, 0, "the coordinator failed:\n{out}\n{log}");
    assert!(out.contains("verify: OK"), "{out}\n{log}");
    assert_keyed_count_exact(&tmp.path().join("out"), EVENTS, KEYS);
    // Recovered from the checkpoint taken while the input held (or a newer one of it),
    // not from the beginning.
    let (n, path) = restored_held_checkpoint(&out, held);
    assert!(n >= 2, "{out}");
    assert!(
        path.to_string_lossy().starts_with("s3://"),
        "{}",
        path.display()
    );
    // The replacement and the surviving worker restored it themselves, and ended well.
    for w in ["w3", "w1"] {
        let (wcode, _, wlog) = c.finish(w);
        assert_worker_restored(w, wcode, &wlog, &path);
    }
}

#[test]
fn a_worker_cut_off_from_the_network_is_detected_and_the_job_recovers_exactly() {
    lose_a_worker_and_recover(Loss::CutOff, "cut");
}

#[test]
fn a_worker_container_killed_is_replaced_and_the_job_recovers_exactly() {
    lose_a_worker_and_recover(Loss::Killed, "kill");
}

#[test]
fn a_hung_worker_container_is_detected_and_the_job_recovers_exactly() {
    lose_a_worker_and_recover(Loss::Hung, "hung");
}
