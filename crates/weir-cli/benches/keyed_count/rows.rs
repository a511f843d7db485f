//! The rows of the issue-6 table: which job each runs, at which size.

use super::workload::{Mode, Outcome};

/// What a row runs.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// The single-threaded `FxHashMap` loop: the floor.
    Floor,
    /// W1 at parallelism `p`; `fail`: subtask 0 fails once, 1.5 s into the run (or 60 %
    /// into its input if that comes first, in small runs).
    W1 { p: u32, mode: Mode, fail: bool },
    /// Large-state recovery: `keys` of `value_bytes` each, the source paced to `rate`
    /// events/s for `seconds` after the keys are built.
    Recovery {
        value_bytes: usize,
        rate: f64,
        seconds: f64,
    },
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
    pub fail_events: u64,
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
            fail_events: 4_000_000,
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
            fail_events: 400_000,
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
    let w1 = |p, mode, fail| Kind::W1 { p, mode, fail };
    let row = |id, label: &str, kind, events, keys| Row {
        id,
        label: label.to_string(),
        kind,
        events,
        keys,
        samples: Vec::new(),
    };
    vec![
        row("floor", "floor: FxHashMap loop", Kind::Floor, n, k),
        row(
            "p1-off",
            "W1 p=1, checkpoints off",
            w1(1, Mode::Off, false),
            n,
            k,
        ),
        row(
            "p1-eo",
            "W1 p=1, EXACTLY_ONCE 1 s",
            w1(1, Mode::ExactlyOnce, false),
            n,
            k,
        ),
        row(
            "p2-off",
            "W1 p=2, checkpoints off",
            w1(2, Mode::Off, false),
            n,
            k,
        ),
        row(
            "p2-eo",
            "W1 p=2, EXACTLY_ONCE 1 s",
            w1(2, Mode::ExactlyOnce, false),
            n,
            k,
        ),
        row(
            "p2-alo",
            "W1 p=2, AT_LEAST_ONCE 1 s",
            w1(2, Mode::AtLeastOnce, false),
            n,
            k,
        ),
        row(
            "p2-eo-fail",
            "W1 p=2, EXACTLY_ONCE 1 s, one failure",
            w1(2, Mode::ExactlyOnce, true),
            s.fail_events,
            k,
        ),
        row(
            "p2-eo200-fail",
            "W1 p=2, EXACTLY_ONCE 200 ms, one failure",
            w1(2, Mode::ExactlyOnceEvery(200), true),
            s.fail_events,
            k,
        ),
        row(
            "p1-off-long",
            "W1 p=1, checkpoints off",
            w1(1, Mode::Off, false),
            s.long_events,
            k,
        ),
        row(
            "p1-eo-long",
            "W1 p=1, EXACTLY_ONCE 1 s",
            w1(1, Mode::ExactlyOnce, false),
            s.long_events,
            k,
        ),
        row(
            "p2-eo-long",
            "W1 p=2, EXACTLY_ONCE 1 s",
            w1(2, Mode::ExactlyOnce, false),
            s.long_events,
            k,
        ),
        row(
            "p2-alo-long",
            "W1 p=2, AT_LEAST_ONCE 1 s",
            w1(2, Mode::AtLeastOnce, false),
            s.long_events,
            k,
        ),
        row(
            "floor-big",
            "floor: FxHashMap loop",
            Kind::Floor,
            s.big_events,
            s.big_keys,
        ),
        row(
            "p1-eo-big",
            "W1 p=1, EXACTLY_ONCE 1 s",
            w1(1, Mode::ExactlyOnce, false),
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
