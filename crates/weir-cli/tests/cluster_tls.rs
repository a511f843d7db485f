//! The cluster over mutual TLS (issue 24): a coordinator and `weir worker` processes on
//! loopback, every process with its own certificate of a CA the test makes (rcgen). A job
//! runs exactly over TLS; a worker without TLS, one with TLS facing a plaintext
//! coordinator, and one whose certificate another CA signed are refused at once with an
//! error naming the cause and the way out; half the TLS flags, or a file that is not PEM,
//! are usage errors.

mod cluster_support;
mod common;
#[path = "../../weir/tests/support/test_ca.rs"]
mod test_ca;

use std::path::Path;
use std::process::Child;

use cluster_support::{keyed_count_verified, spawn_coordinator, Cluster};
use common::*;
use test_ca::Ca;

const EVENTS: u64 = 100_000;
const KEYS: u64 = 97;
const TOKEN: &str = "s3cret";

/// The TLS flags of the process `name` whose files [`Ca::issue_files`] wrote, and the token.
fn tls_flags(dir: &Path, name: &str) -> Vec<String> {
    let f = |ext: &str| s(&dir.join(format!("{name}{ext}")));
    vec![
        "--tls-cert".into(),
        f(".crt"),
        "--tls-key".into(),
        f(".key"),
        "--tls-ca".into(),
        f("-ca.pem"),
        "--cluster-token".into(),
        TOKEN.into(),
    ]
}

/// keyed-count's arguments as a coordinator of `workers` on loopback, and `extra`.
fn coordinator_args(workers: usize, extra: &[String]) -> Vec<String> {
    let mut args = keyed_count_verified(EVENTS, KEYS, &[]);
    args.extend(extra.iter().cloned());
    if workers > 0 {
        args.extend(
            [
                "--workers",
                &workers.to_string(),
                "--cluster-listen",
                "127.0.0.1:0",
            ]
            .map(String::from),
        );
    }
    args
}

#[test]
fn keyed_count_on_a_coordinator_and_two_workers_over_tls_ends_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::new("weir test CA");
    for name in ["coordinator", "w1", "w2"] {
        ca.issue_files(dir, name, &ca);
    }
    let args = coordinator_args(0, &tls_flags(dir, "coordinator"));
    let c = Cluster::start_with(dir, &args, 2, "w", tls_flags);
    let log = c.text();
    assert!(log.contains("(mutual TLS)"), "{log}");
    let ended = c.finish();
    ended.assert_verified();
    assert_eq!(records_read(&ended.out), EVENTS, "{}", ended.out);
    assert_keyed_count_exact(&dir.join("out"), EVENTS, KEYS);
    for (name, _, wlog) in &ended.workers {
        assert!(wlog.contains("TLS)"), "{name}:\n{wlog}");
    }
}

/// A coordinator that waits for workers that never come, killed when dropped.
struct Waiting {
    child: Child,
    address: String,
}

impl Waiting {
    fn start(dir: &Path, extra: &[String]) -> Waiting {
        let (log, out) = (dir.join("coordinator.log"), dir.join("coordinator.out"));
        let (child, address) = spawn_coordinator(dir, &coordinator_args(1, extra), &log, &out);
        Waiting { child, address }
    }

    /// Runs a worker with `flags` to its end.
    fn worker(&self, dir: &Path, flags: &[String]) -> Run {
        let mut args = vec!["worker", "--coordinator", &self.address, "--name", "odd"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        // Longer than a refusal may take, shorter than the test's run timeout: a TLS
        // failure taken for an unreachable coordinator would be retried until then and
        // fail the needles below.
        args.extend(["--connect-timeout".into(), "30s".into()]);
        args.extend(flags.iter().cloned());
        run(&mut weir(dir, &args))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A refused worker: exit 1 at once (not retried), an `error:` line holding `needles`.
fn assert_refused(run: &Run, needles: &[&str]) {
    assert_clean_error(run, 1, needles);
    assert!(!run.stderr.contains("trying again"), "{}", run.describe());
}

#[test]
fn a_plaintext_worker_and_a_tls_coordinator_refuse_each_other_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::new("weir test CA");
    for name in ["coordinator", "w"] {
        ca.issue_files(dir, name, &ca);
    }
    let tls = Waiting::start(dir, &tls_flags(dir, "coordinator"));
    let plain = tls.worker(dir, &["--cluster-token".into(), TOKEN.into()]);
    assert_refused(
        &plain,
        &[
            "the peer speaks TLS and this process does not",
            "--tls-cert, --tls-key and --tls-ca",
            &tls.address,
        ],
    );
    // And TLS to a plaintext coordinator.
    let other = tempfile::tempdir().unwrap();
    let plain_coordinator = Waiting::start(other.path(), &["--cluster-token".into(), TOKEN.into()]);
    let tls_worker = plain_coordinator.worker(dir, &tls_flags(dir, "w"));
    assert_refused(
        &tls_worker,
        &["does not speak TLS", "started without --tls-cert"],
    );
}

#[test]
fn a_worker_with_a_certificate_of_another_ca_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Ca::new("the cluster's CA");
    let other = Ca::new("another CA");
    cluster.issue_files(dir, "coordinator", &cluster);
    // Signed by another CA, trusting the cluster's: the coordinator refuses it.
    other.issue_files(dir, "stranger", &cluster);
    // Signed by the cluster's CA but trusting another: it refuses the coordinator.
    cluster.issue_files(dir, "misled", &other);
    let c = Waiting::start(dir, &tls_flags(dir, "coordinator"));
    let stranger = c.worker(dir, &tls_flags(dir, "stranger"));
    assert_refused(
        &stranger,
        &["refused this process's certificate", "cluster's CA"],
    );
    let misled = c.worker(dir, &tls_flags(dir, "misled"));
    assert_refused(&misled, &["not signed by the CA of --tls-ca"]);
}

#[test]
fn half_the_tls_flags_or_a_file_that_is_not_pem_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::new("weir test CA");
    ca.issue_files(dir, "c", &ca);
    let flags = tls_flags(dir, "c");
    // The coordinator with a certificate but no key nor CA.
    let half = run(&mut weir(dir, coordinator_args(1, &flags[..2])));
    assert_clean_error(&half, 2, &["--tls-key and --tls-ca is missing"]);
    // A worker whose key file holds the certificate.
    let mut swapped = flags.clone();
    swapped[3] = flags[1].clone();
    let args = ["worker", "--coordinator", "127.0.0.1:1"].map(String::from);
    let bad = run(&mut weir(dir, args.iter().chain(&swapped)));
    assert_clean_error(&bad, 2, &["--tls-key", "c.crt", "holds no private key"]);
    // TLS flags without --workers.
    let alone = run(&mut weir(dir, coordinator_args(0, &flags)));
    assert_clean_error(&alone, 2, &["applies to a job run on a cluster"]);
}

/// `weir health` checks a coordinator whose port speaks TLS only (what Kubernetes' own
/// `grpc:` probes cannot): with a certificate of the cluster's CA it reads `SERVING` and
/// exits 0, without TLS it fails naming TLS, and half the TLS flags are a usage error; a
/// plaintext coordinator answers a plain check, and an unknown service is named.
#[test]
fn weir_health_reads_a_tls_coordinator_and_says_why_when_it_cannot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::new("weir test CA");
    for name in ["coordinator", "probe"] {
        ca.issue_files(dir, name, &ca);
    }
    let c = Waiting::start(dir, &tls_flags(dir, "coordinator"));
    // The probe's TLS files, without the token (health checks need none).
    let probe_tls = tls_flags(dir, "probe")[..6].to_vec();
    let health = |flags: &[String]| {
        let mut args = vec!["health".to_string(), c.address.clone()];
        args.extend(flags.iter().cloned());
        run(&mut weir(dir, &args))
    };
    let ok = health(&probe_tls);
    assert_eq!(ok.code(), Some(0), "{}", ok.describe());
    assert_eq!(ok.stdout.trim(), "SERVING", "{}", ok.describe());
    let plain = health(&[]);
    assert_clean_error(&plain, 1, &["speaks TLS", "--tls-cert", &c.address]);
    let half = health(&probe_tls[..2]);
    assert_clean_error(&half, 2, &["--tls-key and --tls-ca is missing"]);

    let other = tempfile::tempdir().unwrap();
    let p = Waiting::start(other.path(), &["--cluster-token".into(), TOKEN.into()]);
    let args = [
        "health",
        &p.address,
        "--service",
        "weir.cluster.v1.Coordinator",
    ];
    let ok = run(&mut weir(dir, args));
    assert_eq!(ok.code(), Some(0), "{}", ok.describe());
    let unknown = run(&mut weir(
        dir,
        ["health", &p.address, "--service", "weir.nope"],
    ));
    assert_clean_error(&unknown, 1, &["no service named \"weir.nope\""]);
}
