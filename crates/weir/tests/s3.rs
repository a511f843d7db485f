//! Checkpoints on a real S3-compatible server: moto's server (`moto_server`, from PyPI;
//! `scripts/test.sh` installs it), started by the tests on loopback. A job checkpoints to
//! `s3://bucket/prefix` and resumes mid-run from it; a corrupted object is skipped; a
//! missing bucket and a server that is down are one clear error each.
#![cfg(feature = "s3")]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use weir::checkpoint::metadata::CheckpointMetadata;
use weir::checkpoint::storage::{open_backend, read_metadata};
use weir::prelude::*;

/// The moto server of this test process, killed when the process exits.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts moto once, points the `AWS_*` variables at it and returns its port.
fn server() -> u16 {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let port = free_port();
            let child = Command::new("moto_server")
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("moto_server is needed: pip install 'moto[server]' (scripts/test.sh does)");
            let started = Instant::now();
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "moto did not start"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            // Before any S3 client exists (clients read these once).
            std::env::set_var("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"));
            std::env::set_var("AWS_ALLOW_HTTP", "true");
            std::env::set_var("AWS_REGION", "us-east-1");
            std::env::set_var("AWS_ACCESS_KEY_ID", "test");
            std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
            std::env::set_var("WEIR_S3_LEASE_SECONDS", "3");
            Server { child, port }
        })
        .port
}

/// Creates `bucket` on the server (moto takes an unsigned request).
fn make_bucket(bucket: &str) {
    let port = server();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

/// The newest complete checkpoint of `job` under `dir` and the records its sources read.
fn newest(dir: &str, job: &str) -> (PathBuf, u64) {
    let root = PathBuf::from(format!("{dir}/{job}"));
    let b = open_backend(&root).unwrap();
    let id = b
        .list("")
        .unwrap()
        .iter()
        .filter_map(|n| n.strip_prefix("chk-")?.parse::<u64>().ok())
        .filter(|id| b.size(&format!("chk-{id}/_metadata")).is_ok())
        .max()
        .expect("a complete checkpoint on S3");
    let path = root.join(format!("chk-{id}"));
    let meta = CheckpointMetadata::decode(&read_metadata(&path).unwrap()).unwrap();
    (path, meta.sources.iter().map(|s| s.records).sum())
}

#[test]
fn a_job_checkpoints_to_s3_and_resumes_mid_run() {
    server();
    make_bucket("resume");
    let dir = "s3://resume/ckpts";
    let n = 400_000;
    let mut cfg = config("counted", Path::new(dir), 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(50));
    cfg.restart = RestartStrategy::None;
    assert_stopped_mid_run(run_keyed_count_stopping(cfg.clone(), n, 777, 40_000));
    let (mid, at) = newest(dir, "counted");
    assert!(at > 0 && at < n, "stopped at {at}");
    assert!(
        !Path::new("s3:").exists(),
        "nothing went to a local folder named s3:"
    );

    let mut c = cfg.clone();
    c.restore = RestoreFrom::Latest;
    let (counts, r) = run_keyed_count(c, n, 777, None).unwrap();
    assert_resumed_mid_run(&r, &mid, n);
    assert_eq!(counts, expected(n, 777));
}

#[test]
fn a_corrupted_object_is_skipped_for_the_previous_checkpoint() {
    server();
    make_bucket("corrupt");
    let dir = "s3://corrupt/ckpts";
    let mut cfg = config("counted", Path::new(dir), 2, CheckpointingMode::ExactlyOnce);
    cfg.checkpointing.interval = Some(Duration::from_millis(50));
    let (counts, r) = run_keyed_count(cfg.clone(), 300_000, 100, Some(300_000.0)).unwrap();
    assert_eq!(counts, expected(300_000, 100));
    assert!(r.checkpoints.len() >= 2, "need two checkpoints");
    let (newest_path, _) = newest(dir, "counted");
    let b = open_backend(&newest_path).unwrap();
    let name = b.list("count").unwrap().pop().unwrap();
    let key = format!("count/{name}");
    let mut bytes = b.get(&key, None).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    let mut w = b.put(&key).unwrap();
    w.write(&bytes).unwrap();
    w.commit(&[]).unwrap();
    let mut c = cfg;
    c.restore = RestoreFrom::Latest;
    let (counts, r) = run_keyed_count(c, 300_000, 100, None).unwrap();
    assert_eq!(counts, expected(300_000, 100));
    let notice = r.notices.join("\n");
    assert!(notice.contains("skipping checkpoint"), "{notice}");
    assert!(
        notice.contains(&format!("{}/{key}", newest_path.display())),
        "{notice}"
    );
    assert!(notice.contains("checksum"), "{notice}");
}

#[test]
fn a_missing_bucket_is_one_clear_error() {
    server();
    let cfg = config(
        "counted",
        Path::new("s3://no-such-bucket/x"),
        1,
        CheckpointingMode::ExactlyOnce,
    );
    let started = Instant::now();
    let err = run_keyed_count(cfg, 10, 2, None).err().unwrap().to_string();
    assert!(err.contains("s3://no-such-bucket/x/counted"), "{err}");
    assert!(err.contains("bucket does not exist"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "retried too long"
    );
}

#[test]
fn a_second_run_is_refused_while_the_lease_is_held() {
    server();
    make_bucket("lease");
    let dir = Path::new("s3://lease/ckpts");
    let first = weir::checkpoint::storage::CheckpointStorage::open(dir, "job").unwrap();
    let err = weir::checkpoint::storage::CheckpointStorage::open(dir, "job").unwrap_err();
    assert!(err.to_string().contains("in use by another run"), "{err}");
    drop(first);
    weir::checkpoint::storage::CheckpointStorage::open(dir, "job").unwrap();
}

#[test]
fn a_server_that_is_down_is_one_clear_error() {
    server();
    // A bucket name no other test uses, so its client points at a closed port.
    let closed = free_port();
    let dir = format!("s3://down-{closed}/x");
    let err = {
        use weir::checkpoint::storage::backend::StorageBackend;
        let b = weir::checkpoint::storage::s3::open_with_endpoint(
            &dir,
            &format!("http://127.0.0.1:{closed}"),
        );
        b.and_then(|b| b.list("")).unwrap_err().to_string()
    };
    assert!(err.contains("cannot be reached"), "{err}");
}
