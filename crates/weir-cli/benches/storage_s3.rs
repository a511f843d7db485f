//! Issue 11's storage rows: ~1 GB of state files written as a checkpoint and read back as a
//! restore does it, to and from a loopback S3 server (moto, started here unless
//! `AWS_ENDPOINT_URL` is set) beside the local disk, in interleaved rounds.
//!
//! ```text
//! cargo bench -p weir-cli --bench storage_s3                       # 1 GiB, 8 files, 3 rounds
//! cargo bench -p weir-cli --bench storage_s3 -- --mib 256 --files 4 --rounds 5
//! ```
//!
//! Writing mirrors a checkpoint: the files are streamed by two writer threads (the
//! snapshot writer pool's size) through the storage backend's streamed put, in 1 MiB
//! pieces, to S3 in parts as they are written. Reading mirrors a restore's read of a large
//! file: the files one after another, each in two halves read in parallel, in reads of the
//! backend's preferred size (on S3, 8 MiB ranges eight at a time). (The engine's own
//! checkpoint writer and restore, which add the envelope and its checksum on both sides,
//! are not public; this is their I/O.) Rounds alternate which side goes first; a side's result is the
//! median over rounds, and the ratio S3 ÷ local is the median of the per-round ratios, so
//! a burst of outside load hits both sides of a round. Beside wall time it reports this
//! process's CPU time (Weir's own cost: encoding, checksums, HTTP) and the S3 server's CPU
//! time (moto is Python: when its CPU time approaches the wall time, moto is the
//! bottleneck, not Weir).
//!
//! Without `--bench` (under `cargo test --all-targets`) it runs one tiny round.

#[path = "../../weir/tests/support/moto.rs"]
mod moto;

use std::path::{Path, PathBuf};
use std::time::Instant;

use weir::storage::backend::StorageBackend;
use weir::storage::open_backend;

/// One side's measurement of one round.
#[derive(Clone, Copy, Default)]
struct Sample {
    write_s: f64,
    read_s: f64,
    /// This process's CPU seconds while writing and while reading.
    write_cpu: f64,
    read_cpu: f64,
    /// The S3 server's CPU seconds while writing and while reading (0 locally).
    write_server_cpu: f64,
    read_server_cpu: f64,
}

fn cpu_seconds() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the `rusage` it is pointed at; on success it is initialised.
    let ru = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) != 0 {
            return 0.0;
        }
        ru.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// CPU seconds of process `pid` and its children's threads (utime + stime from
/// `/proc/<pid>/stat`), 0 if unknown.
fn process_cpu(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return 0.0 };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let after = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / ticks
}

/// The pid of the moto server under the shell `sh_pid` started it from.
fn server_pid(sh_pid: Option<u32>) -> Option<u32> {
    let sh = sh_pid?;
    let children = std::fs::read_to_string(format!("/proc/{sh}/task/{sh}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// Writes `files` objects of `bytes_each` under `chk-1/count/` with two writer threads,
/// streaming 1 MiB pieces. Returns their keys.
fn write_files(b: &dyn StorageBackend, files: usize, bytes_each: usize) -> Vec<String> {
    let piece: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let f = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if f >= files {
                    return;
                }
                let mut w = b
                    .put(&format!("chk-1/count/kg-{f}"))
                    .expect("upload starts");
                let mut left = bytes_each;
                while left > 0 {
                    let n = left.min(piece.len());
                    // A different first byte per piece: no two pieces alike.
                    w.write(&[(left >> 20) as u8]).expect("written");
                    w.write(&piece[1..n]).expect("written");
                    left -= n;
                }
                w.commit(b"header").expect("committed");
            });
        }
    });
    (0..files).map(|f| format!("chk-1/count/kg-{f}")).collect()
}

/// Reads the objects back as a restore reads a large file: one after another, each in two
/// halves at once, in reads of the backend's preferred size.
fn read_files(b: &dyn StorageBackend, keys: &[String]) -> usize {
    let chunk = b.preferred_read_bytes().max(1 << 20);
    keys.iter()
        .map(|key| {
            let len = b.size(key).expect("object size") as usize;
            let mut buf = vec![0u8; len];
            let (first, second) = buf.split_at_mut(len / 2);
            let read = |dst: &mut [u8], mut at: u64| {
                for c in dst.chunks_mut(chunk) {
                    b.read_at(key, at, c).expect("object read");
                    at += c.len() as u64;
                }
            };
            std::thread::scope(|s| {
                s.spawn(|| read(second, (len / 2) as u64));
                read(first, 0);
            });
            buf.len()
        })
        .sum()
}

/// One round of one side: write, then read, under a fresh job folder in `dir`.
fn measure(dir: &Path, job: &str, files: usize, bytes_each: usize, server: Option<u32>) -> Sample {
    let b = open_backend(&dir.join(job)).expect("storage opens");
    if let Some(folder) = b.local_dir("") {
        folder.expect("job folder created");
    }
    let _owner = b.take_ownership().expect("job folder owned");
    let (c0, s0, t0) = (cpu_seconds(), process_cpu(server), Instant::now());
    let keys = write_files(&*b, files, bytes_each);
    let (c1, s1, t1) = (cpu_seconds(), process_cpu(server), Instant::now());
    let read = read_files(&*b, &keys);
    let (c2, s2, t2) = (cpu_seconds(), process_cpu(server), Instant::now());
    assert_eq!(read, files * bytes_each, "read back a different size");
    b.delete_all("chk-1").expect("checkpoint discarded");
    Sample {
        write_s: (t1 - t0).as_secs_f64(),
        read_s: (t2 - t1).as_secs_f64(),
        write_cpu: c1 - c0,
        read_cpu: c2 - c1,
        write_server_cpu: s1 - s0,
        read_server_cpu: s2 - s1,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn flag(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("storage_s3: {name} needs a number");
                std::process::exit(2)
            })
        })
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let (mib, files, rounds) = if bench {
        (
            flag(&args, "--mib", 1024),
            flag(&args, "--files", 8),
            flag(&args, "--rounds", 3),
        )
    } else {
        (16, 2, 1)
    };
    let bytes_each = (mib << 20) / files.max(1);
    let own_server = std::env::var_os("AWS_ENDPOINT_URL").is_none();
    let server = own_server.then(moto::Moto::start);
    if let Some(m) = &server {
        for (k, v) in m.env() {
            std::env::set_var(k, v);
        }
        m.make_bucket("weir-bench");
    }
    let server_pid = server.as_ref().and_then(|m| server_pid(m.pid()));
    let tmp = tempfile::tempdir().expect("temp dir");
    let local = tmp.path().to_path_buf();
    let s3 = PathBuf::from("s3://weir-bench/ck");
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "storage_s3: {files} files × {} MiB = {mib} MiB, {rounds} rounds; S3 at {}; load {}",
        bytes_each >> 20,
        std::env::var("AWS_ENDPOINT_URL").unwrap_or_default(),
        load().trim()
    );
    let (mut l, mut r) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let job = format!("bench-{round}");
        let run_local = || measure(&local, &job, files, bytes_each, None);
        let run_s3 = || measure(&s3, &job, files, bytes_each, server_pid);
        let (a, b) = if round % 2 == 0 {
            let a = run_local();
            (a, run_s3())
        } else {
            let b = run_s3();
            (run_local(), b)
        };
        println!(
            "round {}: local write {:.2} s read {:.2} s; S3 write {:.2} s read {:.2} s (moto CPU {:.2} + {:.2} s)",
            round + 1,
            a.write_s,
            a.read_s,
            b.write_s,
            b.read_s,
            b.write_server_cpu,
            b.read_server_cpu
        );
        l.push(a);
        r.push(b);
    }
    let col = |v: &[Sample], f: fn(&Sample) -> f64| median(v.iter().map(f).collect());
    let ratio =
        |f: fn(&Sample) -> f64| median(l.iter().zip(&r).map(|(a, b)| f(b) / f(a)).collect());
    let mb = (files * bytes_each) as f64 / 1e6;
    println!();
    println!("| {mib} MiB of state, {files} files | local disk | S3 (moto, loopback) | S3 ÷ local (median of rounds) |");
    println!("|---|---:|---:|---:|");
    for (what, wall, cpu, server) in [
        (
            "write (checkpoint)",
            (|s: &Sample| s.write_s) as fn(&Sample) -> f64,
            (|s: &Sample| s.write_cpu) as fn(&Sample) -> f64,
            (|s: &Sample| s.write_server_cpu) as fn(&Sample) -> f64,
        ),
        (
            "read (restore)",
            |s: &Sample| s.read_s,
            |s: &Sample| s.read_cpu,
            |s: &Sample| s.read_server_cpu,
        ),
    ] {
        println!(
            "| {what}: wall | {:.2} s ({:.0} MB/s) | {:.2} s ({:.0} MB/s) | ×{:.1} |",
            col(&l, wall),
            mb / col(&l, wall),
            col(&r, wall),
            mb / col(&r, wall),
            ratio(wall)
        );
        println!(
            "| {what}: Weir's CPU | {:.2} s | {:.2} s | ×{:.1} |",
            col(&l, cpu),
            col(&r, cpu),
            ratio(cpu)
        );
        println!(
            "| {what}: S3 server's CPU | - | {:.2} s | |",
            col(&r, server)
        );
    }
    println!("load {}", load().trim());
}
