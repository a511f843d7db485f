//! Per-user click sessions in event time: a user's clicks belong to one session until the
//! user pauses for longer than `--gap-ms` (by the clicks' own timestamps, not the clock);
//! each session is reported once, with its clicks, distinct pages and most clicked page.
//!
//! ```sh
//! cargo run --release --example click_sessions -- --clicks 2000000 --users 1000 \
//!     --gap-ms 20000 --parallelism 2 --rate 500000 --inject-failures 3
//! cat click-sessions/part-*   # user,session start,session end,clicks,pages,top page
//! ```
//!
//! The three steps are Flink's:
//! * **Timestamps and watermarks.** Each click carries the time it happened. Clicks arrive
//!   up to `--max-delay-ms` late (out of order), so the watermark — "no click older than
//!   this is still coming" — trails the newest timestamp by that much
//!   (`WatermarkStrategy::for_bounded_out_of_orderness`).
//! * **Session windows.** Keyed by user, `EventTimeSessionWindows::with_gap` opens a window
//!   `[t, t + gap)` per click and merges the ones that overlap, so a late click that fills a
//!   pause joins two sessions into one. A session fires once the watermark passes its end.
//! * **An aggregate per session.** [`SessionStats`] counts clicks per page; it can
//!   `merge`, which is what session windows need when two sessions join.
//!
//! Window contents, open sessions and watermarks are all checkpointed, and the rows go
//! through an exactly-once file sink, so after any number of failures each session is in
//! the output exactly once. At the end of the input the watermark jumps to the end of
//! time, so the last sessions fire too.
//!
//! The clicks are a deterministic function of their index ([`Click::generate`]), so the
//! test (`crates/weir-cli/tests/examples.rs`) recomputes every session on its own and
//! compares the output exactly.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use weir::connectors::files::LinesWith;
use weir::prelude::*;
use weir::runner::{clap, BoxError, Job, Runner};

/// Reports per-user sessions of clicks, in event time.
#[derive(clap::Args)]
pub struct Args {
    /// Clicks to generate.
    #[arg(long, default_value_t = 1_000_000)]
    pub clicks: u64,
    /// Distinct users.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub users: u64,
    /// Distinct pages.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub pages: u64,
    /// Event time between consecutive clicks of the input (all users together), in ms.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub spacing_ms: u64,
    /// How late a click may arrive after newer ones, in ms (the watermark's bound).
    #[arg(long, default_value_t = 500)]
    pub max_delay_ms: u64,
    /// A pause longer than this (in event time) ends a user's session, in ms.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub gap_ms: u64,
    /// Clicks per second (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Folder for the rows: part files appear as checkpoints complete.
    #[arg(long, default_value = "click-sessions")]
    pub output: PathBuf,
}

/// One click of a user on a page, at an event time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Click {
    /// The user (the key).
    pub user: u64,
    /// The page clicked.
    pub page: u64,
    /// When it happened, in ms.
    pub time_ms: u64,
}

impl Click {
    /// Click `i`: its user and page are a fixed mix of `i` (no randomness, so a test can
    /// recompute the input); it happened at `i * spacing` plus up to `max_delay` ms, so it
    /// arrives after clicks that happened up to `max_delay` ms later — out of order.
    pub fn generate(i: u64, users: u64, pages: u64, spacing: u64, max_delay: u64) -> Click {
        let r = mix(i);
        Click {
            user: r % users,
            page: (r >> 32) % pages,
            time_ms: i * spacing + (r >> 48) % (max_delay + 1),
        }
    }
}

/// splitmix64's finalizer: spreads consecutive indexes over all 64 bits, so users, pages
/// and delays look random but are the same on every run.
pub fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One reported session: `user,start,end,clicks,pages,top` (the window is `[start, end)`,
/// which is the first click's time to the last click's time plus the gap; the top page is
/// the most clicked one, the lowest page number on a tie).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The user.
    pub user: u64,
    /// The session window.
    pub window: TimeWindow,
    /// The session's statistics.
    pub stats: Stats,
}

impl Session {
    /// The output line (see the type).
    pub fn write_line(&self, line: &mut String) {
        let (w, s) = (&self.window, &self.stats);
        line.push_str(&format!(
            "{},{},{},{},{},{}",
            self.user, w.start, w.end, s.clicks, s.pages, s.top
        ));
    }
}

/// What [`SessionStats`] reports for one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Clicks in the session.
    pub clicks: u64,
    /// Distinct pages clicked.
    pub pages: u64,
    /// The most clicked page.
    pub top: u64,
}

/// Counts a session's clicks per page. The accumulator (page → clicks) is window state, so
/// it is checkpointed; `merge` adds two sessions' counts when a click joins them.
pub struct SessionStats;

impl AggregateFunction<Click, BTreeMap<u64, u64>, Stats> for SessionStats {
    fn create_accumulator(&self) -> BTreeMap<u64, u64> {
        BTreeMap::new()
    }
    fn add(&self, click: Click, per_page: &mut BTreeMap<u64, u64>) {
        *per_page.entry(click.page).or_default() += 1;
    }
    fn get_result(&self, per_page: &BTreeMap<u64, u64>) -> Stats {
        // On a tie, the lowest page: `max_by_key` keeps the last maximum, so reverse.
        let top = per_page
            .iter()
            .rev()
            .max_by_key(|(_, n)| **n)
            .map_or(0, |(page, _)| *page);
        Stats {
            clicks: per_page.values().sum(),
            pages: per_page.len() as u64,
            top,
        }
    }
    fn merge(
        &self,
        mut a: BTreeMap<u64, u64>,
        b: BTreeMap<u64, u64>,
    ) -> Option<BTreeMap<u64, u64>> {
        for (page, n) in b {
            *a.entry(page).or_default() += n;
        }
        Some(a)
    }
}

/// Builds the job: generator → timestamps and watermarks → key by user → session windows
/// → aggregate → exactly-once file sink.
pub fn build(job: &mut Job, args: &Args) -> Result<(), BoxError> {
    let (users, pages) = (args.users, args.pages);
    let (spacing, max_delay) = (args.spacing_ms, args.max_delay_ms);
    job.expect_records(args.clicks.saturating_mul(2)); // the source and the windows
    let source = GeneratorSource::new(args.clicks).with_rate(args.rate);
    let watermarks =
        WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(max_delay))
            .with_timestamp_assigner(|c: &Click, _| c.time_ms);
    let gap = EventTimeSessionWindows::with_gap(Duration::from_millis(args.gap_ms))?;
    let sessions = job
        .add_source("clicks", source)
        .uid("clicks")
        .map(move |i: u64| Click::generate(i, users, pages, spacing, max_delay))
        .assign_timestamps_and_watermarks(watermarks)
        .key_by(|c: &Click| c.user)
        .window(gap)
        .aggregate_with_window(SessionStats, |user, window, stats| Session {
            user: *user,
            window,
            stats,
        })
        .uid("sessions");
    let sink = TwoPhaseCommit::new(FileSink::new(
        &args.output,
        LinesWith::new(Session::write_line),
    ));
    sessions.add_sink("rows", sink).uid("rows");
    job.summary_line(format!("sessions: {}", args.output.display()));
    Ok(())
}

fn main() -> std::process::ExitCode {
    Runner::new("click_sessions").run(build)
}
