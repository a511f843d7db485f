#[path = "../../common/harness.rs"]
mod harness;
use harness::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use fjall::{Database, KeyspaceCreateOptions};

/// A hand-made checkpoint: flush the memtable, then hard-link every table file (the files are
/// immutable; a file compaction deletes between listing and linking is retried).
fn checkpoint(db: &Database, ks: &fjall::Keyspace, data: &Path, to: &Path) -> HashMap<(u64, u64), u64> {
    ks.rotate_memtable_and_wait().unwrap();
    let _ = db; // the journal is not part of a checkpoint: the table files are
    std::fs::create_dir_all(to).unwrap();
    let mut files = HashMap::new();
    fn walk(p: &Path, rel: &Path, to: &Path, files: &mut HashMap<(u64, u64), u64>) {
        for e in std::fs::read_dir(p).unwrap().flatten() {
            let m = match e.metadata() { Ok(m) => m, Err(_) => continue };
            let r = rel.join(e.file_name());
            if m.is_dir() { walk(&e.path(), &r, to, files); continue; }
            let dst = to.join(r.to_string_lossy().replace('/', "_"));
            if std::fs::hard_link(e.path(), &dst).is_ok() {
                use std::os::unix::fs::MetadataExt;
                files.insert((m.dev(), m.ino()), m.len());
            }
        }
    }
    walk(&data.join("keyspaces"), Path::new(""), to, &mut files);
    files
}

fn main() {
    let (keys, ops, runs) = args();
    let root = PathBuf::from(std::env::var("LSM_DIR").unwrap_or("/tmp/lsm/data".into()));
    let mut load = vec![]; let mut rmw = vec![]; let mut rmw_cpu = vec![]; let mut chk = vec![];
    let mut chk2 = vec![]; let mut inc = vec![]; let mut full = vec![]; let mut scan = vec![];
    let mut disk = vec![];
    for run in 0..runs {
        let dir = root.join(format!("fjall-{run}"));
        let _ = std::fs::remove_dir_all(&dir);
        let data = dir.join("db");
        let db = Database::builder(&data).cache_size(64 << 20).manual_journal_persist(true).open().unwrap();
        let ks = db.keyspace("state", KeyspaceCreateOptions::default).unwrap();
        let t = Timer::start();
        for k in 0..keys { ks.insert(key_of(k), 0u64.to_le_bytes()).unwrap(); }
        load.push(keys as f64 / t.stop().0 / 1e6);
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ run as u64);
        let t = Timer::start();
        for _ in 0..ops {
            let k = key_of(rng.next() % keys);
            let v = ks.get(k).unwrap().map_or(0, |b| u64::from_le_bytes(b[..8].try_into().unwrap()));
            ks.insert(k, (v + 1).to_le_bytes()).unwrap();
        }
        let (w, c) = t.stop();
        rmw.push(ops as f64 / w / 1e6); rmw_cpu.push(ops as f64 / c / 1e6);
        let t = Timer::start();
        let f1 = checkpoint(&db, &ks, &data, &dir.join("chk-1"));
        chk.push(t.stop().0 * 1e3);
        full.push(f1.values().sum::<u64>() as f64 / 1e6);
        // 1 % of the keys change, then checkpoint 2: bytes not already in checkpoint 1.
        for _ in 0..keys / 100 {
            let k = key_of(rng.next() % keys);
            ks.insert(k, 7u64.to_le_bytes()).unwrap();
        }
        let t = Timer::start();
        let f2 = checkpoint(&db, &ks, &data, &dir.join("chk-2"));
        chk2.push(t.stop().0 * 1e3);
        inc.push(f2.iter().filter(|(id, _)| !f1.contains_key(id)).map(|(_, n)| *n).sum::<u64>() as f64 / 1e6);
        // Scan key groups 32..64 (a quarter of the state: what a rescale reads).
        let t = Timer::start();
        let mut n = 0u64;
        for kv in ks.range([0u8, 32]..[0u8, 64]) { let (_k, _v) = kv.into_inner().unwrap(); n += 1; }
        scan.push(n as f64 / t.stop().0 / 1e6);
        disk.push(dir_bytes(&data) as f64 / 1e6);
        drop(ks); drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("fjall keys={keys} ops={ops} runs={runs}");
    report("fjall", &[("load M keys/s", load), ("rmw M ops/s (wall)", rmw), ("rmw M ops per CPU-s", rmw_cpu),
        ("checkpoint 1 ms (flush+link)", chk), ("checkpoint 2 ms", chk2), ("full MB", full),
        ("incremental MB after 1%", inc), ("scan M entries/s (kg 32..64)", scan), ("db dir MB", disk)]);
}
