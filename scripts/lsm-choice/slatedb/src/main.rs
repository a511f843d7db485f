#[path = "../../common/harness.rs"]
mod harness;
use harness::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use slatedb::config::{CheckpointOptions, CheckpointScope, FlushOptions, FlushType, Settings};
use slatedb::object_store::local::LocalFileSystem;
use slatedb::Db;

fn files(p: &Path, out: &mut HashMap<PathBuf, u64>) {
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() { files(&e.path(), out) } else { out.insert(e.path(), m.len()); }
        }
    }
}

fn main() {
    let (keys, ops, runs) = args();
    let root = PathBuf::from(std::env::var("LSM_DIR").unwrap_or("/tmp/lsm/data".into()));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut load = vec![]; let mut rmw = vec![]; let mut rmw_cpu = vec![]; let mut rmw_each = vec![];
    let mut chk = vec![]; let mut chk2 = vec![]; let mut inc = vec![]; let mut full = vec![];
    let mut scan = vec![]; let mut disk = vec![];
    for run in 0..runs {
        let dir = root.join(format!("slate-{run}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Arc::new(LocalFileSystem::new_with_prefix(&dir).unwrap());
        let mut settings = Settings::default();
        settings.wal_enabled = false;
        settings.flush_interval = None;
        let db = rt.block_on(Db::builder("db", store).with_settings(settings).build()).unwrap();
        let t = Timer::start();
        rt.block_on(async {
            for k in 0..keys { db.put(key_of(k), 0u64.to_le_bytes()).await.unwrap(); }
        });
        load.push(keys as f64 / t.stop().0 / 1e6);
        eprintln!("run {run}: load {:?}", t.stop());
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ run as u64);
        // Best case: the whole loop in one block_on.
        let t = Timer::start();
        rt.block_on(async {
            for _ in 0..ops {
                let k = key_of(rng.next() % keys);
                let v = db.get(k).await.unwrap().map_or(0, |b| u64::from_le_bytes(b[..8].try_into().unwrap()));
                db.put(k, (v + 1).to_le_bytes()).await.unwrap();
            }
        });
        let (w, c) = t.stop();
        rmw.push(ops as f64 / w / 1e6); rmw_cpu.push(ops as f64 / c / 1e6);
        eprintln!("run {run}: rmw {ops} ops wall {w:.2} s cpu {c:.2} s");
        // What a synchronous operator pays: one block_on per access.
        let t = Timer::start();
        for _ in 0..ops / 4 {
            let k = key_of(rng.next() % keys);
            let v = rt.block_on(db.get(k)).unwrap().map_or(0, |b| u64::from_le_bytes(b[..8].try_into().unwrap()));
            rt.block_on(db.put(k, (v + 1).to_le_bytes())).unwrap();
        }
        rmw_each.push((ops / 4) as f64 / t.stop().0 / 1e6);
        eprintln!("run {run}: rmw block_on each {:?}", t.stop());
        let checkpoint = || {
            rt.block_on(async {
                db.flush_with_options(FlushOptions { flush_type: FlushType::MemTable }).await.unwrap();
                db.create_checkpoint(CheckpointScope::Durable, &CheckpointOptions::default()).await.unwrap()
            })
        };
        let t = Timer::start();
        checkpoint();
        chk.push(t.stop().0 * 1e3);
        let mut f1 = HashMap::new(); files(&dir, &mut f1);
        full.push(f1.values().sum::<u64>() as f64 / 1e6);
        rt.block_on(async {
            for _ in 0..keys / 100 {
                let k = key_of(rng.next() % keys);
                db.put(k, 7u64.to_le_bytes()).await.unwrap();
            }
        });
        let t = Timer::start();
        checkpoint();
        chk2.push(t.stop().0 * 1e3);
        eprintln!("run {run}: chk1 {:.0} ms chk2 {:.0} ms", chk[run], chk2[run]);
        let mut f2 = HashMap::new(); files(&dir, &mut f2);
        inc.push(f2.iter().filter(|(p, _)| !f1.contains_key(*p)).map(|(_, n)| *n).sum::<u64>() as f64 / 1e6);
        let t = Timer::start();
        let n = rt.block_on(async {
            let mut it = db.scan([0u8, 32].to_vec()..[0u8, 64].to_vec()).await.unwrap();
            let mut n = 0u64;
            while let Some(_kv) = it.next().await.unwrap() { n += 1; }
            n
        });
        scan.push(n as f64 / t.stop().0 / 1e6);
        disk.push(dir_bytes(&dir) as f64 / 1e6);
        rt.block_on(db.close()).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("slatedb keys={keys} ops={ops} runs={runs}");
    report("slatedb", &[("load M keys/s", load), ("rmw M ops/s (wall, one block_on)", rmw),
        ("rmw M ops per CPU-s", rmw_cpu), ("rmw M ops/s (block_on per access)", rmw_each),
        ("checkpoint 1 ms (flush+manifest)", chk), ("checkpoint 2 ms", chk2), ("full MB", full),
        ("incremental MB after 1%", inc), ("scan M entries/s (kg 32..64)", scan), ("dir MB", disk)]);
}
