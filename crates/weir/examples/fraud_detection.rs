//! Fraud detection, the shape of Flink's DataStream tutorial: for one account, a small
//! transaction (under 1.00) followed by a large one (over 500.00) within a minute raises an
//! alert.
//!
//! ```sh
//! cargo run --release --example fraud_detection -- --transactions 2000000 --accounts 100 \
//!     --parallelism 2 --rate 500000 --inject-failures 3
//! cat fraud-alerts/part-*     # account,small transaction,large transaction,large amount
//! ```
//!
//! * The input is a deterministic generator: transaction `i`'s account and amount are a fixed
//!   mix of `i` ([`Transaction::generate`]), so anyone can recompute the alerts it must raise.
//!   It runs as one subtask, so each account sees its transactions in order.
//! * The detector is keyed by account and runs at `--parallelism`. Its state per account is
//!   keyed `ValueState`: a flag (the small transaction's id) and the time of a
//!   processing-time timer that clears the flag a minute later. Any transaction after the
//!   small one ends the pattern: it raises the alert if it is large, and clears the flag.
//! * Alerts go to an exactly-once file sink (two-phase commit with the checkpoints): after
//!   any number of failures, each alert is in the output exactly once.
//!
//! The timer fires only for an account with no transaction for a whole minute. At the
//! default rate every account gets one every few milliseconds and a run takes seconds, so
//! the timer never fires and the alerts are a pure function of the input — which is how
//! the test (`crates/weir-cli/tests/examples.rs`) checks them exactly. A slow `--rate`, or a
//! resume more than a minute after a kill, lets timers fire and clear flags, as they should.
use std::path::PathBuf;

use weir::connectors::files::LinesWith;
use weir::prelude::*;
use weir::runner::{clap, BoxError, Job, Runner};

/// Alerts on a small transaction followed by a large one on the same account.
#[derive(clap::Args)]
pub struct Args {
    /// Transactions to generate.
    #[arg(long, default_value_t = 1_000_000)]
    pub transactions: u64,
    /// Distinct accounts.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub accounts: u64,
    /// Transactions per second (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Folder for the alerts: part files appear as checkpoints complete.
    #[arg(long, default_value = "fraud-alerts")]
    pub output: PathBuf,
}

/// A transaction below this amount (in cents: 1.00) is small: a thief testing the card.
pub const SMALL_BELOW: u64 = 100;
/// A transaction above this amount (in cents: 500.00) is large: the thief cashing in.
pub const LARGE_ABOVE: u64 = 50_000;
/// How long a small transaction stays suspicious, in milliseconds.
pub const WINDOW_MS: u64 = 60_000;

/// One card transaction. Amounts are in cents, so they compare and print exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transaction {
    /// Its index in the input: unique, and the order of the account's transactions.
    pub id: u64,
    /// The account it is charged to (the key).
    pub account: u64,
    /// The amount, in cents.
    pub cents: u64,
}

impl Transaction {
    /// Transaction `id` over `accounts` accounts: a fixed function of the two (no
    /// randomness), so that a test can recompute the input. One in five is small, one in
    /// ten large, the rest in between.
    pub fn generate(id: u64, accounts: u64) -> Transaction {
        let r = mix(id);
        let amount = r >> 40;
        let cents = match (r >> 32) % 10 {
            0 | 1 => 1 + amount % (SMALL_BELOW - 1), // 0.01 ..= 0.99
            2 => LARGE_ABOVE + 1 + amount % 50_000,  // 500.01 ..= 1000.00
            _ => SMALL_BELOW + amount % (LARGE_ABOVE - 99), // 1.00 ..= 500.00
        };
        Transaction {
            id,
            account: r % accounts,
            cents,
        }
    }
}

/// splitmix64's finalizer: spreads consecutive ids over all 64 bits, so accounts and
/// amounts look random but are the same on every run.
pub fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What the detector emits: the account and the two transactions of the pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// The account.
    pub account: u64,
    /// The small transaction's id.
    pub small: u64,
    /// The large transaction's id.
    pub large: u64,
    /// The large transaction's amount, in cents.
    pub cents: u64,
}

impl Alert {
    /// The output line: `account,small id,large id,amount` (amount as `731.50`).
    pub fn write_line(&self, line: &mut String) {
        let (a, c) = (self.cents / 100, self.cents % 100);
        line.push_str(&format!(
            "{},{},{},{a}.{c:02}",
            self.account, self.small, self.large
        ));
    }
}

/// Flink's `FraudDetector`: a flag per account, set by a small transaction and cleared by
/// the next transaction or by a timer. The state handles are declared in `open`.
#[derive(Clone, Default)]
pub struct FraudDetector {
    /// The account's last small transaction, while it is suspicious.
    flag: Option<ValueState<u64>>,
    /// When the account's clean-up timer is due (to delete it when the flag clears early).
    timer: Option<ValueState<u64>>,
}

impl FraudDetector {
    fn states(&self) -> (ValueState<u64>, ValueState<u64>) {
        let declared = "open declares the states";
        (self.flag.expect(declared), self.timer.expect(declared))
    }
}

// No operator state of its own: all of it is keyed state, checkpointed by the engine.
impl CheckpointedFunction for FraudDetector {}

impl KeyedProcessFunction<u64, Transaction, Alert> for FraudDetector {
    fn open(&mut self, states: &mut KeyedStateStore<'_, u64>) -> weir::Result<()> {
        self.flag = Some(states.value_state("flag")?);
        self.timer = Some(states.value_state("timer")?);
        Ok(())
    }

    fn process(
        &mut self,
        t: Transaction,
        ctx: &mut KeyedContext<'_, u64>,
        out: &mut Collector<'_, Alert>,
    ) -> weir::Result<()> {
        let (flag, timer) = self.states();
        if let Some(&small) = ctx.get(flag) {
            if t.cents > LARGE_ABOVE {
                out.collect(Alert {
                    account: t.account,
                    small,
                    large: t.id,
                    cents: t.cents,
                });
            }
            // Any transaction after the small one ends the pattern.
            if let Some(&at) = ctx.get(timer) {
                ctx.delete_processing_time_timer(at);
            }
            ctx.clear(flag);
            ctx.clear(timer);
        }
        if t.cents < SMALL_BELOW {
            let at = ctx.current_processing_time() + WINDOW_MS;
            ctx.register_processing_time_timer(at);
            ctx.set(flag, t.id);
            ctx.set(timer, at);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        _timestamp_ms: u64,
        ctx: &mut KeyedContext<'_, u64>,
        _out: &mut Collector<'_, Alert>,
    ) -> weir::Result<()> {
        // A minute without a next transaction: the small one is no longer suspicious.
        let (flag, timer) = self.states();
        ctx.clear(flag);
        ctx.clear(timer);
        Ok(())
    }
}

/// Builds the job: generator → key by account → detector → exactly-once file sink.
pub fn build(job: &mut Job, args: &Args) -> Result<(), BoxError> {
    let accounts = args.accounts;
    job.expect_records(args.transactions.saturating_mul(2)); // the source and the detector
    let source = GeneratorSource::new(args.transactions).with_rate(args.rate);
    // One subtask: each account's transactions stay in order on their way to the detector.
    let transactions = job
        .add_source("transactions", source)
        .uid("transactions")
        .set_parallelism(1)
        .map(move |i: u64| Transaction::generate(i, accounts))
        .set_parallelism(1);
    let alerts = transactions
        .key_by(|t: &Transaction| t.account)
        .process(FraudDetector::default())
        .uid("fraud-detector");
    let sink = TwoPhaseCommit::new(FileSink::new(
        &args.output,
        LinesWith::new(Alert::write_line),
    ));
    alerts.add_sink("alerts", sink).uid("alerts");
    job.summary_line(format!("alerts: {}", args.output.display()));
    Ok(())
}

fn main() -> std::process::ExitCode {
    Runner::new("fraud_detection").run(build)
}
