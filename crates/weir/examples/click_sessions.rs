//! Per-user click analytics: every `--group-size` clicks of a user make one group, reported
//! with its clicks, distinct pages and most clicked page; at the end of the input, each
//! user's last (partial) group and a summary row of the user's groups and clicks.
//!
//! ```sh
//! cargo run --release --example click_sessions -- --clicks 2000000 --users 1000 \
//!     --group-size 20 --parallelism 2 --rate 500000 --inject-failures 3
//! cat click-sessions/part-*   # group,user,n,clicks,pages,top page | user,user,groups,clicks
//! ```
//!
//! This is the processing-time variant: groups are counted in clicks, and a user idle for
//! `--idle-ms` (a processing-time timer) has the open group flushed early. Event-time
//! windows (sessions by gaps in the clicks' own timestamps, with watermarks) do not exist in
//! Weir yet; an event-time variant of this example will follow them.
//!
//! It shows the three everyday kinds of keyed state, all checkpointed and restored exactly:
//! a `ValueState` (the open group's number, size and idle timer), a `MapState` (clicks per
//! page in the open group) and an `AggregatingState` (the user's totals over closed groups),
//! plus `on_end_of_input`, which visits every user once the input ends.
//!
//! The clicks come from a deterministic generator (click `i`'s user and page are a fixed mix
//! of `i`, [`Click::generate`]) running as one subtask, so each user's clicks arrive in
//! order. The idle timer fires only for a user without a click for `--idle-ms` (default a
//! minute): at the default rate every user clicks every few milliseconds, so in a run of
//! seconds it never fires and the output is a pure function of the input — which is how the
//! test (`crates/weir-cli/tests/examples.rs`) checks it exactly.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use weir::connectors::files::LinesWith;
use weir::prelude::*;
use weir::runner::{clap, BoxError, Job, Runner};

/// Counts each user's clicks and pages per group of `--group-size` clicks.
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
    /// Clicks per group: a user's group is reported when it has this many.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub group_size: u64,
    /// A user without a click for this many milliseconds has the open group reported early.
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_ms: u64,
    /// Clicks per second (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Folder for the rows: part files appear as checkpoints complete.
    #[arg(long, default_value = "click-sessions")]
    pub output: PathBuf,
}

/// One click of a user on a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Click {
    /// The user (the key).
    pub user: u64,
    /// The page clicked.
    pub page: u64,
}

impl Click {
    /// Click `i` over `users` users and `pages` pages: a fixed function of them (no
    /// randomness), so that a test can recompute the input.
    pub fn generate(i: u64, users: u64, pages: u64) -> Click {
        let r = mix(i);
        Click {
            user: r % users,
            page: (r >> 32) % pages,
        }
    }
}

/// splitmix64's finalizer: spreads consecutive indexes over all 64 bits, so users and pages
/// look random but are the same on every run.
pub fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What the job writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Row {
    /// A closed group: `group,user,n,clicks,pages,top page` (`n` counts from 1; the top
    /// page is the most clicked one, the lowest page number on a tie).
    Group {
        /// The user.
        user: u64,
        /// The group's number for this user, from 1.
        n: u64,
        /// Clicks in the group (`--group-size`, or fewer for a flushed group).
        clicks: u64,
        /// Distinct pages clicked in the group.
        pages: u64,
        /// The most clicked page.
        top: u64,
    },
    /// A user's summary at the end of the input: `user,user,groups,clicks`.
    User {
        /// The user.
        user: u64,
        /// Groups reported for the user.
        groups: u64,
        /// The user's clicks.
        clicks: u64,
    },
}

impl Row {
    /// The output line (see the variants).
    pub fn write_line(&self, line: &mut String) {
        line.push_str(&match self {
            Row::Group {
                user,
                n,
                clicks,
                pages,
                top,
            } => format!("group,{user},{n},{clicks},{pages},{top}"),
            Row::User {
                user,
                groups,
                clicks,
            } => format!("user,{user},{groups},{clicks}"),
        });
    }
}

/// The user's open group: kept in a `ValueState`, so it is a serde type.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpenGroup {
    /// The group's number, from 1.
    pub n: u64,
    /// Clicks in it so far.
    pub clicks: u64,
    /// When its idle timer is due (0: none), to move the timer on the next click.
    pub timer: u64,
}

/// A user's totals over the closed groups: fed each closed group's clicks, it keeps
/// `(groups, clicks)`.
pub struct Totals;

impl AggregateFunction<u64, (u64, u64), (u64, u64)> for Totals {
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, clicks: u64, acc: &mut (u64, u64)) {
        *acc = (acc.0 + 1, acc.1 + clicks);
    }
    fn get_result(&self, acc: &(u64, u64)) -> (u64, u64) {
        *acc
    }
}

/// The keyed function: counts a user's clicks into groups (see the module docs).
#[derive(Clone)]
pub struct ClickGroups {
    group_size: u64,
    idle_ms: u64,
    /// Declared in `open`.
    states: Option<States>,
}

/// The handles of the function's keyed states.
#[derive(Clone)]
struct States {
    open: ValueState<OpenGroup>,
    pages: MapState<u64, u64>,
    totals: AggregatingState<u64, (u64, u64), (u64, u64)>,
}

impl ClickGroups {
    /// Groups of `group_size` clicks, flushed after `idle_ms` without a click.
    pub fn new(group_size: u64, idle_ms: u64) -> Self {
        ClickGroups {
            group_size,
            idle_ms,
            states: None,
        }
    }

    fn states(&self) -> States {
        self.states.clone().expect("open declares the states")
    }
}

/// Reports the current user's open group, if it has clicks, and starts the next one.
fn close_group(s: &States, ctx: &mut KeyedContext<'_, u64>, out: &mut Collector<'_, Row>) {
    let user = *ctx.key();
    let mut group = ctx.get(s.open).cloned().unwrap_or_default();
    if group.clicks == 0 {
        return;
    }
    let (pages, top) = {
        let map = ctx.map(&s.pages);
        // The most clicked page; on a tie the lowest page number.
        let top = map
            .entries()
            .max_by_key(|(page, n)| (**n, std::cmp::Reverse(**page)));
        (map.keys().count() as u64, top.map_or(0, |(page, _)| *page))
    };
    out.collect(Row::Group {
        user,
        n: group.n,
        clicks: group.clicks,
        pages,
        top,
    });
    ctx.aggregating(&s.totals).add(group.clicks);
    ctx.map(&s.pages).clear();
    if group.timer != 0 {
        ctx.delete_processing_time_timer(group.timer);
    }
    group = OpenGroup {
        n: group.n + 1,
        clicks: 0,
        timer: 0,
    };
    ctx.set(s.open, group);
}

// No operator state of its own: all of it is keyed state, checkpointed by the engine.
impl CheckpointedFunction for ClickGroups {}

impl KeyedProcessFunction<u64, Click, Row> for ClickGroups {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> weir::Result<()> {
        self.states = Some(States {
            open: states.value_state("open-group")?,
            pages: states.map_state("pages")?,
            totals: states.aggregating_state("totals", Totals)?,
        });
        Ok(())
    }

    fn process(
        &mut self,
        click: Click,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, Row>,
    ) -> weir::Result<()> {
        let s = self.states();
        let mut map = ctx.map(&s.pages);
        let n = map.get(&click.page).copied().unwrap_or(0);
        map.put(click.page, n + 1);
        // Move the idle timer to `idle_ms` from now.
        let due = ctx.current_processing_time() + self.idle_ms;
        let mut group = ctx.get(s.open).cloned().unwrap_or(OpenGroup {
            n: 1,
            ..OpenGroup::default()
        });
        if group.timer != 0 {
            ctx.delete_processing_time_timer(group.timer);
        }
        ctx.register_processing_time_timer(due);
        group.clicks += 1;
        group.timer = due;
        let full = group.clicks == self.group_size;
        ctx.set(s.open, group);
        if full {
            close_group(&s, ctx, out);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        _timestamp_ms: u64,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, Row>,
    ) -> weir::Result<()> {
        // The user has been idle for `idle_ms`: report what the open group holds.
        let s = self.states();
        if let Some(group) = ctx.get(s.open).cloned() {
            ctx.set(s.open, OpenGroup { timer: 0, ..group });
        }
        close_group(&s, ctx, out);
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut KeyedEndContext<'_, u64>,
        out: &mut Collector<'_, Row>,
    ) -> weir::Result<()> {
        // Every user of this subtask: the last, partial group, then the user's summary.
        let s = self.states();
        ctx.apply_to_all_keys(&s.open, |ctx| {
            close_group(&s, ctx, out);
            let (groups, clicks) = ctx.aggregating(&s.totals).get().unwrap_or((0, 0));
            let user = *ctx.key();
            out.collect(Row::User {
                user,
                groups,
                clicks,
            });
            Ok(())
        })
    }
}

/// Builds the job: generator → key by user → click groups → exactly-once file sink.
pub fn build(job: &mut Job, args: &Args) -> Result<(), BoxError> {
    let (users, pages) = (args.users, args.pages);
    job.expect_records(args.clicks.saturating_mul(2)); // the source and the grouping
    let source = GeneratorSource::new(args.clicks).with_rate(args.rate);
    // One subtask: each user's clicks stay in order on their way to the grouping.
    let clicks = job
        .add_source("clicks", source)
        .uid("clicks")
        .set_parallelism(1)
        .map(move |i: u64| Click::generate(i, users, pages))
        .set_parallelism(1);
    let rows = clicks
        .key_by(|c: &Click| c.user)
        .process(ClickGroups::new(args.group_size, args.idle_ms))
        .uid("click-groups");
    let sink = TwoPhaseCommit::new(FileSink::new(&args.output, LinesWith::new(Row::write_line)));
    rows.add_sink("rows", sink).uid("rows");
    job.summary_line(format!("rows: {}", args.output.display()));
    Ok(())
}

fn main() -> std::process::ExitCode {
    Runner::new("click_sessions").run(build)
}
