//! Measuring one run on a shared machine: wall and CPU time, other processes' CPU, peak
//! memory; plus the statistics and number formats of the tables.

use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc/stat` (`sysconf(_SC_CLK_TCK)`, else 100); only the
/// machine-wide busy time (the others' CPU noise indicator) is read in ticks.
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// User + system CPU seconds of this process (all threads, exited ones included), from
/// `getrusage(RUSAGE_SELF)` (microsecond resolution, not `/proc`'s 10 ms ticks).
pub fn cpu_seconds() -> Option<f64> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the `rusage` it is pointed at; on success it is initialised.
    let ru = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) != 0 {
            return None;
        }
        ru.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Some(secs(ru.ru_utime) + secs(ru.ru_stime))
}

/// Busy CPU seconds of the whole machine (every process), from the `cpu` line of
/// `/proc/stat`: user + nice + system + irq + softirq + steal.
fn machine_busy_seconds(ticks_per_second: f64) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let busy = [0, 1, 2, 5, 6, 7]
        .iter()
        .map(|&i| v.get(i).copied().unwrap_or(0));
    Some(busy.sum::<u64>() as f64 / ticks_per_second)
}

/// Peak resident memory of this process in bytes (`VmHWM` of `/proc/self/status`). Every
/// row runs in its own child process, so this is the row's own peak.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Measures one run: wall time, this process's CPU time (`getrusage`), and the CPU time
/// every other process on the machine used meanwhile (the shared-machine noise, from
/// `/proc/stat` in clock ticks: a noise indicator, not a measurement of the engine).
pub struct Meter {
    ticks: f64,
    t0: Instant,
    own0: Option<f64>,
    machine0: Option<f64>,
}

/// What a [`Meter`] measured.
pub struct Measured {
    pub wall: Duration,
    pub cpu: Option<f64>,
    /// CPU seconds other processes used during the run.
    pub others: Option<f64>,
}

impl Meter {
    /// Starts measuring.
    pub fn start(ticks: f64) -> Meter {
        Meter {
            ticks,
            machine0: machine_busy_seconds(ticks),
            own0: cpu_seconds(),
            t0: Instant::now(),
        }
    }

    /// Stops measuring.
    pub fn stop(self) -> Measured {
        let wall = self.t0.elapsed();
        let cpu = cpu_seconds().zip(self.own0).map(|(b, a)| b - a);
        let machine = machine_busy_seconds(self.ticks)
            .zip(self.machine0)
            .map(|(b, a)| b - a);
        let others = machine.zip(cpu).map(|(m, o)| (m - o).max(0.0));
        Measured { wall, cpu, others }
    }
}

/// The median of `v` (mean of the middle two for an even count); `None` when empty.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// The `q` quantile (nearest rank) of `v`; `None` when empty.
pub fn quantile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// The arithmetic mean of `v`; `None` when empty.
pub fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// `12.3 M`-style rendering of a rate.
pub fn rate(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x >= 1e6 {
        format!("{:.1} M", x / 1e6)
    } else {
        format!("{:.0} k", x / 1e3)
    }
}

/// `10M` / `100k` / `500` rendering of a round count.
pub fn count(x: f64) -> String {
    if x >= 1e6 {
        format!("{}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{}k", x / 1e3)
    } else {
        format!("{x}")
    }
}

/// `850 µs` / `12.3 ms` / `1.20 s` rendering of a duration in seconds.
pub fn dur(s: f64) -> String {
    if s < 0.0 {
        format!("−{}", dur(-s))
    } else if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// `47.9 MB`-style rendering of a byte count (decimal units).
pub fn bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.0} MB", b / 1e6)
    } else {
        format!("{:.0} kB", b / 1e3)
    }
}

/// The 1-minute load average from `/proc/loadavg`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}
