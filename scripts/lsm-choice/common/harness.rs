// Shared harness for the LSM candidates: W1-like read-modify-write of u64 counters,
// checkpoint (flush + pin), incremental bytes after 1 % of keys changed, key-group range scan.
use std::time::Instant;

pub const GROUPS: u64 = 128;

pub fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33; k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33; k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33; k
}

/// key_group (2 bytes BE) ‖ key (8 bytes BE) ‖ namespace (empty): a key-group range is a key range.
#[inline]
pub fn key_of(k: u64) -> [u8; 10] {
    let g = (fmix64(k) % GROUPS) as u16;
    let mut out = [0u8; 10];
    out[..2].copy_from_slice(&g.to_be_bytes());
    out[2..].copy_from_slice(&k.to_be_bytes());
    out
}

pub struct Rng(pub u64);
impl Rng {
    #[inline]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13; self.0 ^= self.0 >> 7; self.0 ^= self.0 << 17; self.0
    }
}

pub fn cpu_secs() -> f64 {
    let mut ru: libc_rusage = unsafe { std::mem::zeroed() };
    unsafe { getrusage(0, &mut ru) };
    let t = |tv: [i64; 2]| tv[0] as f64 + tv[1] as f64 / 1e6;
    t(ru.utime) + t(ru.stime)
}
#[repr(C)]
pub struct libc_rusage { utime: [i64; 2], stime: [i64; 2], rest: [i64; 14] }
extern "C" { fn getrusage(who: i32, ru: *mut libc_rusage) -> i32; }

pub struct Timer { wall: Instant, cpu: f64 }
impl Timer {
    pub fn start() -> Self { Timer { wall: Instant::now(), cpu: cpu_secs() } }
    /// (wall seconds, process CPU seconds incl. background threads)
    pub fn stop(&self) -> (f64, f64) { (self.wall.elapsed().as_secs_f64(), cpu_secs() - self.cpu) }
}

pub fn dir_bytes(p: &std::path::Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() { n += dir_bytes(&e.path()) } else { n += m.len() }
        }
    }
    n
}

pub fn args() -> (u64, u64, usize) {
    let a: Vec<String> = std::env::args().collect();
    let keys: u64 = a.get(1).map_or(1_000_000, |s| s.parse().unwrap());
    let ops: u64 = a.get(2).map_or(2_000_000, |s| s.parse().unwrap());
    let runs: usize = a.get(3).map_or(3, |s| s.parse().unwrap());
    (keys, ops, runs)
}

pub fn median(mut v: Vec<f64>) -> f64 { v.sort_by(|a, b| a.partial_cmp(b).unwrap()); v[v.len() / 2] }

pub fn report(name: &str, rows: &[(&str, Vec<f64>)]) {
    for (what, v) in rows {
        println!("{name}\t{what}\tmedian {:.3}\truns {:?}", median(v.clone()), v.iter().map(|x| (x * 1000.0).round() / 1000.0).collect::<Vec<_>>());
    }
}
