//! What a window trigger costs: a 1 s tumbling-window sum over 100 000 keys in event time
//! (the W2 shape), once with the assigner's default trigger (the built-in event-time path)
//! and once with the same trigger set explicitly (`.trigger(EventTimeTrigger)`, the
//! general triggered-window operator with per-window trigger state).
//!
//! `cargo run --release -p weir --example window_triggers_cost -- [default|explicit] [events]`
use std::time::{Duration, Instant};

use weir::prelude::*;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "default".into());
    let n: u64 = args
        .next()
        .map_or(10_000_000, |s| s.parse().expect("events"));
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut cfg = JobConfig::new("window-triggers-cost");
    cfg.checkpoint_dir = dir.path().to_path_buf();
    cfg.parallelism = 1;
    cfg.checkpointing.interval = Some(Duration::from_secs(1));
    let env = StreamEnvironment::new(cfg);
    // 1 000 events per millisecond of event time: each 1 s window holds 10 per key.
    let strategy = WatermarkStrategy::for_monotonous_timestamps()
        .with_timestamp_assigner(|i: &u64, _| i / 1_000);
    let keyed = env
        .add_source_with_watermarks("gen", GeneratorSource::new(n), strategy)
        .key_by(|i: &u64| i % 100_000);
    let tumbling = TumblingEventTimeWindows::of(Duration::from_secs(1))?;
    let sums = match mode.as_str() {
        "default" => keyed.window(tumbling).reduce(|a, b| a + b),
        "explicit" => keyed
            .window(tumbling)
            .trigger(EventTimeTrigger)
            .reduce(|a, b| a + b),
        other => panic!("unknown mode {other}: default or explicit"),
    };
    sums.add_sink("discard", DiscardSink);
    let start = Instant::now();
    env.execute()?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{mode}: {n} events in {secs:.2} s = {:.2} M events/s",
        n as f64 / secs / 1e6
    );
    Ok(())
}
