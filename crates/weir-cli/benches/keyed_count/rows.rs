//! The rows of the issue-6 table: which job each runs, at which size.

use super::workload::{Mode, Outcome};

/// What a row runs.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// The single-threaded `FxHashMap` loop: the floor.
    Floor,
    /// W1 at parallelism `p`; `fail`: whether subtask 0 fails once (see [`Fail`]).
    W1 { p: u32, mode: Mode, fail: Fail },
    /// Large-state recovery: `keys` of `value_bytes` each, the source paced to `rate`
    /// events/s for `seconds` after the keys are built.
    Recovery {
        value_bytes: usize,
        rate: f64,
        seconds: f64,
    },
}

/// Whether a W1 row fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fail {
    /// No failure, and no failure plan in the function.
    No,
    /// Subtask 0 fails once, [`Sizes::fail_after_ms`] into the run (or 60 % into its
    /// input if that comes first), but never before a checkpoint has completed in the
    /// attempt; the run then checks that the restart restored that checkpoint.
    Once,
    /// The clean half of a time-lost pair: the same job, the same plan in the function
    /// (so the same per-record cost), but the plan never fires.
    Reference,
}

/// One row of the table and its runs.
pub struct Row {
    /// Stable name, also how the parent tells a child which row to run.
    pub id: &'static str,
    pub label: String,
    pub kind: Kind,
    /// Events per run (N; for recovery rows the keys plus the paced part).
    pub events: u64,
    /// Keys (K).
    pub keys: u64,
    pub samples: Vec<Outcome>,
}

/// Sizes of one preset.
pub struct Sizes {
    pub name: &'static str,
    pub events: u64,
    pub keys: u64,
    pub big_events: u64,
    pub big_keys: u64,
    /// N of the one-failure rows and their clean references.
    pub fail_events: u64,
    /// Checkpoint intervals of the two one-failure pairs (W1's 1 s, and a shorter one).
    pub fail_intervals_ms: [u64; 2],
    /// When the failure is due: half-way between two checkpoints of either interval.
    pub fail_after_ms: u64,
    /// N of the long pairs (checkpoints on vs off at p=1, EXACTLY_ONCE vs AT_LEAST_ONCE at
    /// p=2): long enough for several periodic checkpoints (a 50 M run ends before the first).
    pub long_events: u64,
    pub blob_keys: u64,
    pub blob_bytes: usize,
    pub blob_rate: f64,
    pub blob_seconds: f64,
    pub runs: usize,
}

/// `full` (the sizes), `quick` (CI: proves it runs) and `smoke` (`cargo test`).
pub fn sizes(preset: &str) -> Sizes {
    match preset {
        "full" => Sizes {
            name: "full",
            events: 50_000_000,
            keys: 100_000,
            big_events: 60_000_000,
            big_keys: 10_000_000,
            fail_events: 200_000_000,
            fail_intervals_ms: [1000, 200],
            fail_after_ms: 1500,
            long_events: 500_000_000,
            blob_keys: 1_000_000,
            blob_bytes: 1000,
            blob_rate: 1e6,
            // Long enough for a 1 GB checkpoint (5–6 s here on a quiet machine, up to 23 s
            // under load) to complete before the source ends, so that the failure after it
            // hits a running job (the row fails loudly otherwise).
            blob_seconds: 20.0,
            runs: 3,
        },
        "quick" => Sizes {
            name: "quick",
            events: 2_000_000,
            keys: 100_000,
            big_events: 3_000_000,
            big_keys: 1_000_000,
            // Long enough (≥ 0.3 s at p=2) for checkpoints every 100 / 20 ms to complete
            // before the failure at 150 ms.
            fail_events: 30_000_000,
            fail_intervals_ms: [100, 20],
            fail_after_ms: 150,
            long_events: 4_000_000,
            blob_keys: 10_000,
            blob_bytes: 1000,
            blob_rate: 1e6,
            blob_seconds: 0.5,
            runs: 1,
        },
        _ => Sizes {
            name: "smoke",
            events: 200_000,
            keys: 1_000,
            big_events: 200_000,
            big_keys: 10_000,
            // A debug build (`cargo test`) runs W1 at a few M events/s.
            fail_events: 1_000_000,
            fail_intervals_ms: [20, 5],
            fail_after_ms: 30,
            long_events: 200_000,
            blob_keys: 1_000,
            blob_bytes: 1000,
            blob_rate: 1e6,
            blob_seconds: 0.2,
            runs: 1,
        },
    }
}

/// Every row, in table order. `events`/`keys` override the main W1 size.
pub fn rows(s: &Sizes, events: Option<u64>, keys: Option<u64>) -> Vec<Row> {
    let (n, k) = (events.unwrap_or(s.events), keys.unwrap_or(s.keys));
    let [f1, f2] = s.fail_intervals_ms;
    let row = |id, label: &str, kind, events, keys| Row {
        id,
        label: label.to_string(),
        kind,
        events,
        keys,
        samples: Vec::new(),
    };
    // A W1 row without failures at parallelism `p` under `mode` (`what` in its label).
    let w1 = |id, p, mode, what: &str, events, keys| {
        let kind = Kind::W1 {
            p,
            mode,
            fail: Fail::No,
        };
        row(id, &format!("W1 p={p}, {what}"), kind, events, keys)
    };
    // A row of a time-lost pair at p=2, checkpoints every `ms`: `fail` says which half.
    let pair = |id, ms, fail| {
        let what = if fail == Fail::Once { "one" } else { "no" };
        let label = format!("W1 p=2, EXACTLY_ONCE {}, {what} failure", interval(ms));
        let mode = Mode::ExactlyOnceEvery(ms);
        let kind = Kind::W1 { p: 2, mode, fail };
        row(id, &label, kind, s.fail_events, k)
    };
    const OFF: &str = "checkpoints off";
    const EO: &str = "EXACTLY_ONCE 1 s";
    const ALO: &str = "AT_LEAST_ONCE 1 s";
    const UNAL: &str = "EXACTLY_ONCE unaligned 1 s";
    let long = s.long_events;
    vec![
        row("floor", "floor: FxHashMap loop", Kind::Floor, n, k),
        w1("p1-off", 1, Mode::Off, OFF, n, k),
        w1("p1-eo", 1, Mode::ExactlyOnce, EO, n, k),
        w1("p2-off", 2, Mode::Off, OFF, n, k),
        w1("p2-eo", 2, Mode::ExactlyOnce, EO, n, k),
        w1("p2-alo", 2, Mode::AtLeastOnce, ALO, n, k),
        w1("p2-unal", 2, Mode::Unaligned, UNAL, n, k),
        pair("p2-eo-fail", f1, Fail::Once),
        pair("p2-eo-nofail", f1, Fail::Reference),
        pair("p2-eo200-fail", f2, Fail::Once),
        pair("p2-eo200-nofail", f2, Fail::Reference),
        w1("p1-off-long", 1, Mode::Off, OFF, long, k),
        w1("p1-eo-long", 1, Mode::ExactlyOnce, EO, long, k),
        w1("p2-eo-long", 2, Mode::ExactlyOnce, EO, long, k),
        w1("p2-alo-long", 2, Mode::AtLeastOnce, ALO, long, k),
        w1("p2-unal-long", 2, Mode::Unaligned, UNAL, long, k),
        // One source thread and one counting thread on two cores: the mechanism's cost
        // without four threads taking turns on two cores.
        w1("p1-unal-long", 1, Mode::Unaligned, UNAL, long, k),
        row(
            "floor-big",
            "floor: FxHashMap loop",
            Kind::Floor,
            s.big_events,
            s.big_keys,
        ),
        w1(
            "p1-eo-big",
            1,
            Mode::ExactlyOnce,
            EO,
            s.big_events,
            s.big_keys,
        ),
        row(
            "recovery",
            &format!("recovery, {} B per key, p=1", s.blob_bytes),
            Kind::Recovery {
                value_bytes: s.blob_bytes,
                rate: s.blob_rate,
                seconds: s.blob_seconds,
            },
            s.blob_keys + (s.blob_rate * s.blob_seconds) as u64,
            s.blob_keys,
        ),
    ]
}

/// `1 s` / `200 ms` rendering of a checkpoint interval.
pub fn interval(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}
