//! The table of runs and the table of the targets, both Markdown.

use super::measure::{bytes, count, dur, mean, median, quantile, rate};
use super::rows::{Kind, Row};

/// Events per wall second of each run.
fn eps(r: &Row) -> Vec<f64> {
    r.samples.iter().map(|s| r.events as f64 / s.wall).collect()
}

fn median_eps(r: &Row) -> Option<f64> {
    median(eps(r))
}

fn events_per_cpu(r: &Row) -> Option<f64> {
    median(
        r.samples
            .iter()
            .filter_map(|s| s.cpu)
            .filter(|c| *c > 0.0)
            .map(|c| r.events as f64 / c)
            .collect(),
    )
}

/// Every checkpoint duration of every run of the row.
fn durations(r: &Row) -> Vec<f64> {
    r.samples
        .iter()
        .flat_map(|s| s.checkpoints.iter().map(|c| c.duration))
        .collect()
}

fn max_of(r: &Row, f: impl Fn(&super::workload::Ckpt) -> f64) -> Option<f64> {
    r.samples
        .iter()
        .flat_map(|s| s.checkpoints.iter().map(&f))
        .max_by(f64::total_cmp)
}

fn median_peak(r: &Row) -> Option<f64> {
    median(
        r.samples
            .iter()
            .filter_map(|s| s.peak.map(|p| p as f64))
            .collect(),
    )
}

fn median_downtime(r: &Row) -> Option<f64> {
    median(r.samples.iter().filter_map(|s| s.downtime).collect())
}

/// The median over runs of `a`'s rate divided by `b`'s in the same round (the rounds are
/// interleaved, so a burst of outside load hits both sides of a ratio alike).
fn paired(a: &Row, b: &Row) -> Option<f64> {
    let (ea, eb) = (eps(a), eps(b));
    median(ea.iter().zip(&eb).map(|(x, y)| x / y).collect())
}

fn find<'a>(rows: &'a [Row], id: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.id == id && !r.samples.is_empty())
}

/// The floor row a job row's ratio divides by: the one with the same key count.
fn floor_for<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
    rows.iter()
        .find(|f| matches!(f.kind, Kind::Floor) && f.keys == r.keys && !f.samples.is_empty())
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map_or("-".into(), f)
}

/// Prints the table of runs.
pub fn print_runs(rows: &[Row]) {
    println!(
        "| row | N | K | events/s | ÷ floor | events/CPU-s | ckpts | mean ckpt | p99 ckpt | \
         max sync pause | max alignment | peak mem | downtime | wall s | others' CPU |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows.iter().filter(|r| !r.samples.is_empty()) {
        let paced = matches!(r.kind, Kind::Recovery { .. });
        let ratio = floor_for(rows, r)
            .filter(|f| f.id != r.id)
            .and_then(|f| paired(r, f));
        let ckpt = !matches!(r.kind, Kind::Floor);
        let d = durations(r);
        let others = r
            .samples
            .iter()
            .filter_map(|s| s.others.map(|o| o / s.wall))
            .max_by(f64::total_cmp);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {} |",
            r.label,
            count(r.events as f64),
            count(r.keys as f64),
            if paced {
                "paced".into()
            } else {
                opt(median_eps(r), rate)
            },
            if paced {
                "-".into()
            } else {
                opt(ratio, |x| format!("{x:.2}"))
            },
            if paced {
                "-".into()
            } else {
                opt(events_per_cpu(r), rate)
            },
            if ckpt {
                opt(
                    median(
                        r.samples
                            .iter()
                            .map(|s| s.checkpoints.len() as f64)
                            .collect(),
                    ),
                    |c| format!("{c}"),
                )
            } else {
                "-".into()
            },
            opt(mean(&d), dur),
            opt(quantile(d, 0.99), dur),
            opt(max_of(r, |c| c.sync), dur),
            opt(max_of(r, |c| c.alignment), dur),
            opt(median_peak(r), bytes),
            opt(median_downtime(r), dur),
            median(r.samples.iter().map(|s| s.wall).collect()).unwrap_or(f64::NAN),
            opt(others, |c| format!("{c:.2} cores")),
        );
    }
}

/// One line of the targets table.
struct Target {
    what: &'static str,
    goal: &'static str,
    measured: String,
    met: Option<bool>,
}

/// Prints the targets with the measured values and whether each is met.
pub fn print_targets(rows: &[Row]) {
    let mut t: Vec<Target> = Vec::new();
    let mut push = |what, goal, measured: String, met: Option<bool>| {
        t.push(Target {
            what,
            goal,
            measured,
            met,
        })
    };
    let [floor, p1_off, p1_eo, p2_eo, p2_alo, fail, big, floor_big, rec] = [
        "floor",
        "p1-off",
        "p1-eo",
        "p2-eo",
        "p2-alo",
        "p2-eo-fail",
        "p1-eo-big",
        "floor-big",
        "recovery",
    ]
    .map(|id| find(rows, id));
    let [fail200, long_off, long_eo, long_p2_eo, long_p2_alo] = [
        "p2-eo200-fail",
        "p1-off-long",
        "p1-eo-long",
        "p2-eo-long",
        "p2-alo-long",
    ]
    .map(|id| find(rows, id));

    let v = p2_eo.and_then(median_eps);
    push(
        "p=2, EXACTLY_ONCE every 1 s",
        "≥ 36 M ev/s",
        opt(v, rate),
        v.map(|v| v >= 36e6),
    );

    let best = rows
        .iter()
        .filter(|r| {
            matches!(
                r.kind,
                Kind::W1 {
                    fail: super::rows::Fail::No,
                    ..
                }
            )
        })
        .filter_map(|r| events_per_cpu(r).map(|e| (e, r)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    push(
        "events per CPU-second, any p",
        "≥ 13 M",
        best.map_or("-".into(), |(e, r)| {
            format!("{} ({}, K={})", rate(e), r.label, count(r.keys as f64))
        }),
        best.map(|(e, _)| e >= 13e6),
    );

    let v = p1_eo.zip(floor).and_then(|(a, f)| paired(a, f));
    push(
        "p=1, EXACTLY_ONCE every 1 s ÷ floor",
        "≥ 0.40",
        opt(v, |x| format!("{x:.2}")),
        v.map(|v| v >= 0.40),
    );

    // The long pair when it ran: at N = 50 M a p=1 run ends before its first periodic
    // checkpoint, so the short pair compares equal work.
    let (on, off) = match long_eo.zip(long_off) {
        Some(pair) => (Some(pair.0), Some(pair.1)),
        None => (p1_eo, p1_off),
    };
    let v = on.zip(off).and_then(|(a, b)| paired(a, b)).map(|r| 1.0 - r);
    let ckpts = on.and_then(|r| {
        let mut n: Vec<f64> = r
            .samples
            .iter()
            .map(|s| s.checkpoints.len() as f64)
            .collect();
        n.sort_by(f64::total_cmp);
        n.get(n.len() / 2).copied()
    });
    push(
        "p=1, checkpoints every 1 s vs off: slowdown",
        "< 3 %",
        format!(
            "{} (median of paired runs, N={}, {} checkpoints per run)",
            opt(v, |x| format!("{:+.1} %", x * 100.0)),
            on.map_or("-".into(), |r| count(r.events as f64)),
            opt(ckpts, |c| format!("{c:.0}"))
        ),
        v.map(|v| v < 0.03),
    );

    let v = p2_eo.zip(p1_eo).and_then(|(a, b)| paired(a, b));
    push(
        "p=2 vs p=1 (EXACTLY_ONCE)",
        "≥ 1.7×",
        opt(v, |x| format!("{x:.2}×")),
        v.map(|v| v >= 1.7),
    );

    // The long pair when it ran, for the same reason as on vs off above.
    let (alo, eo) = match long_p2_alo.zip(long_p2_eo) {
        Some(pair) => (Some(pair.0), Some(pair.1)),
        None => (p2_alo, p2_eo),
    };
    let v = alo.zip(eo).and_then(|(a, b)| paired(a, b));
    let align = |r: Option<&Row>| opt(r.and_then(|r| max_of(r, |c| c.alignment)), dur);
    push(
        "AT_LEAST_ONCE vs EXACTLY_ONCE, p=2 (2 input channels per keyed task)",
        "never slower (≥ 1.00×)",
        format!(
            "{} (N={}); max alignment EO {}, ALO {}",
            opt(v, |x| format!("{x:.2}×")),
            eo.map_or("-".into(), |r| count(r.events as f64)),
            align(eo),
            align(alo)
        ),
        v.map(|v| v >= 1.0),
    );

    // Unaligned checkpoints without backpressure (issue 13): the long pair when it ran.
    let [unal, long_unal, long_p1_unal] =
        ["p2-unal", "p2-unal-long", "p1-unal-long"].map(|id| find(rows, id));
    let (un, al) = match long_unal.zip(long_p2_eo) {
        Some(pair) => (Some(pair.0), Some(pair.1)),
        None => (unal, p2_eo),
    };
    let (measured, met) = unaligned_cost(un, al);
    push(
        "unaligned vs aligned EXACTLY_ONCE, p=2, no backpressure: slowdown",
        "< 5 %",
        measured,
        met,
    );
    if long_p1_unal.is_some() {
        let (measured, met) = unaligned_cost(long_p1_unal, long_eo);
        push(
            "unaligned vs aligned EXACTLY_ONCE, p=1 (a core per thread), no backpressure: slowdown",
            "< 5 %",
            measured,
            met,
        );
    }

    let v = big.and_then(|r| max_of(r, |c| c.sync));
    let small = p1_eo.and_then(|r| max_of(r, |c| c.sync));
    push(
        "sync snapshot pause per task, K_big keys",
        "< 1 ms, independent of size",
        format!(
            "{} max at K={} ({} at K={})",
            opt(v, dur),
            big.map_or("-".into(), |r| count(r.keys as f64)),
            opt(small, dur),
            p1_eo.map_or("-".into(), |r| count(r.keys as f64)),
        ),
        v.map(|v| v < 1e-3),
    );

    let d = big.map(durations).unwrap_or_default();
    let (m, p99) = (mean(&d), quantile(d, 0.99));
    push(
        "checkpoint duration, K_big keys",
        "< 1 s",
        format!("mean {}, p99 {}", opt(m, dur), opt(p99, dur)),
        p99.map(|v| v < 1.0),
    );

    let v = rec.and_then(median_downtime);
    let size = rec.and_then(|r| max_of(r, |c| c.bytes as f64));
    push(
        "recovery: failure → first record, large state",
        "< 2 s (1 GB)",
        format!("{} with {} of state", opt(v, dur), opt(size, bytes)),
        v.map(|v| v < 2.0),
    );

    // Time lost, measured: the one-failure row's wall time minus its clean reference's
    // (same N, same interval, run next to it in every round), median over rounds. The
    // model (downtime + records read twice ÷ the reference's rate) is shown as an
    // estimate only.
    let [ref1000, ref200] = ["p2-eo-nofail", "p2-eo200-nofail"].map(|id| find(rows, id));
    let mut lost = |what, f: Option<&Row>, r: Option<&Row>| {
        let Some((f, r)) = f.zip(r) else {
            return;
        };
        let l = time_lost(f, r);
        // Judged only on at least 3 paired rounds whose middle half spreads by less than
        // the goal itself; otherwise the machine's noise decides, and it says so.
        let iqr = quantile(l.per_round.clone(), 0.75)
            .zip(quantile(l.per_round.clone(), 0.25))
            .map(|(hi, lo)| hi - lo);
        let conclusive = l.per_round.len() >= 3 && iqr.is_some_and(|q| q < 0.3);
        let mut text = l.text();
        if !conclusive {
            text.push_str(&format!(
                "; **inconclusive**: interquartile range of the rounds {} (needs ≥ 3 rounds \
                 and < 0.3 s)",
                opt(iqr, dur)
            ));
        }
        let met = l.measured.filter(|_| conclusive);
        push(what, "< 0.3 s", text, met.map(|v| v < 0.3));
    };
    lost(
        "time lost to one failure in W1, default restarts (wall with − wall without)",
        fail,
        ref1000,
    );
    lost(
        "same, the shorter interval (not W1's 1 s: what a shorter interval buys)",
        fail200,
        ref200,
    );

    let v = big
        .and_then(median_peak)
        .map(|p| (p, big.map_or(1, |r| r.keys) as f64 * 16.0));
    let fl = floor_big.and_then(median_peak);
    push(
        "peak memory, K_big u64 counts ÷ raw 16 B per key",
        "< 3×",
        v.map_or("-".into(), |(p, raw)| {
            format!(
                "{:.2}× ({} peak, raw {}; the floor's HashMap {})",
                p / raw,
                bytes(p),
                bytes(raw),
                opt(fl, |f| format!("{:.2}×", f / raw))
            )
        }),
        v.map(|(p, raw)| p / raw < 3.0),
    );

    println!("| target | goal | measured | |");
    println!("|---|---|---|---|");
    for x in t {
        println!(
            "| {} | {} | {} | {} |",
            x.what,
            x.goal,
            x.measured,
            match x.met {
                Some(true) => "met",
                Some(false) => "**missed**",
                None => "n/a",
            }
        );
    }
}

/// Unaligned `un` against aligned `al` (issue 13): the median of the paired per-round
/// slowdowns by events/s, the same by events per CPU-second, and the interval of ranks
/// that holds the median with 95 % confidence (distribution-free), so a reader sees
/// whether the runs can tell the target from noise.
fn unaligned_cost(un: Option<&Row>, al: Option<&Row>) -> (String, Option<bool>) {
    let Some((u, a)) = un.zip(al) else {
        return ("-".into(), None);
    };
    let mut ratios: Vec<f64> = eps(u).iter().zip(eps(a)).map(|(x, y)| x / y).collect();
    let per_cpu = |r: &Row| -> Vec<f64> {
        r.samples
            .iter()
            .map(|s| {
                s.cpu
                    .filter(|c| *c > 0.0)
                    .map_or(f64::NAN, |c| r.events as f64 / c)
            })
            .collect()
    };
    let cpu: Vec<f64> = per_cpu(u)
        .iter()
        .zip(per_cpu(a))
        .map(|(x, y)| x / y)
        .filter(|r| r.is_finite())
        .collect();
    ratios.sort_by(f64::total_cmp);
    let slowdown = median(ratios.clone()).map(|r| 1.0 - r);
    let pct = |x: f64| format!("{:+.1} %", x * 100.0);
    let interval = median_interval(&ratios).map_or(String::new(), |(lo, hi)| {
        format!("; 95 % interval {} to {}", pct(1.0 - hi), pct(1.0 - lo))
    });
    let measured = format!(
        "{} (median of {} paired runs{interval}; per CPU-second {}; medians {} vs {} ev/s, N={})",
        opt(slowdown, pct),
        ratios.len(),
        opt(median(cpu).map(|r| 1.0 - r), pct),
        opt(median_eps(u), rate),
        opt(median_eps(a), rate),
        count(u.events as f64),
    );
    (measured, slowdown.map(|v| v < 0.05))
}

/// The distribution-free 95 % confidence interval of the median of `sorted` (n ≥ 6):
/// the values at ranks k and n + 1 − k, with k the largest rank whose binomial tail
/// P(Bin(n, ½) < k) stays within 2.5 %.
fn median_interval(sorted: &[f64]) -> Option<(f64, f64)> {
    let n = sorted.len();
    if n < 6 {
        return None;
    }
    // P(Bin(n, 1/2) <= j), summed term by term.
    let mut term = 0.5f64.powi(n as i32);
    let (mut tail, mut k) = (0.0, 0);
    for j in 0..n {
        tail += term;
        if tail > 0.025 {
            break;
        }
        k = j + 1; // P(X <= j) <= 2.5 %: rank j + 1 is a lower bound
        term *= (n - j) as f64 / (j + 1) as f64;
    }
    (k >= 1).then(|| (sorted[k - 1], sorted[n - k]))
}

/// Time lost to one failure: measured, with an estimate beside it.
struct TimeLost {
    /// Median over rounds of (wall with the failure − wall of the reference) in the same
    /// round.
    measured: Option<f64>,
    /// The per-round differences, in round order.
    per_round: Vec<f64>,
    /// Median walls of the two rows.
    walls: (Option<f64>, Option<f64>),
    downtime: Option<f64>,
    /// Median records read twice (sources' records over all attempts − N).
    replayed: Option<f64>,
    /// downtime + replayed ÷ the reference's median rate: a model, not a measurement.
    estimate: Option<f64>,
    /// Median over rounds of (CPU seconds with the failure − without): the work the
    /// failure cost, which time-sharing with other processes inflates far less than wall
    /// time.
    cpu: Option<f64>,
    interval: String,
}

impl TimeLost {
    fn text(&self) -> String {
        let list: Vec<String> = self.per_round.iter().map(|d| dur(*d)).collect();
        format!(
            "**{}** measured (median of {} paired rounds: {}; median walls {} with, {} \
             without; extra CPU time {}); estimate from a model, not measured: {} \
             (downtime {} + {} records read twice at the clean rate); checkpoints every {}",
            opt(self.measured, dur),
            self.per_round.len(),
            list.join(", "),
            opt(self.walls.0, dur),
            opt(self.walls.1, dur),
            opt(self.cpu, dur),
            opt(self.estimate, dur),
            opt(self.downtime, dur),
            opt(self.replayed, count_m),
            self.interval,
        )
    }
}

/// `f` (one failure) against `r` (its clean reference), round by round.
fn time_lost(f: &Row, r: &Row) -> TimeLost {
    let per_round: Vec<f64> = f
        .samples
        .iter()
        .zip(&r.samples)
        .map(|(a, b)| a.wall - b.wall)
        .collect();
    let walls = |x: &Row| median(x.samples.iter().map(|s| s.wall).collect());
    let downtime = median_downtime(f);
    let replayed = median(
        f.samples
            .iter()
            .map(|s| s.source_records.saturating_sub(f.events) as f64)
            .collect(),
    );
    let clean = median_eps(r);
    let estimate = downtime
        .zip(replayed)
        .zip(clean)
        .map(|((d, x), c)| d + x / c);
    let interval = match f.kind {
        Kind::W1 {
            mode: super::workload::Mode::ExactlyOnceEvery(ms),
            ..
        } => super::rows::interval(ms),
        _ => "1 s".into(),
    };
    let cpu = median(
        f.samples
            .iter()
            .zip(&r.samples)
            .filter_map(|(a, b)| a.cpu.zip(b.cpu).map(|(x, y)| x - y))
            .collect(),
    );
    TimeLost {
        cpu,
        measured: median(per_round.clone()),
        per_round,
        walls: (walls(f), walls(r)),
        downtime,
        replayed,
        estimate,
        interval,
    }
}

/// `36.2 M`-style rendering of a record count.
fn count_m(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.1} M", x / 1e6)
    } else {
        format!("{:.0} k", x / 1e3)
    }
}
