//! Single-threaded throughput of the Nexmark pieces, printed as a table:
//! generation (events only, and to JSON lines), parsing JSON lines, and the reference
//! evaluation of each query.
//!
//! ```text
//! cargo bench -p weir-nexmark [-- EVENTS]     # default 2 000 000 generated events
//! ```

use std::hint::black_box;
use std::time::Instant;

use weir_nexmark::generator::{Generator, GeneratorConfig};
use weir_nexmark::json::{parse_line, write_events};
use weir_nexmark::reference::{evaluate_many, Query};
use weir_nexmark::Event;

fn rate(n: u64, secs: f64) -> String {
    format!("{:.2} M/s", n as f64 / secs / 1e6)
}

fn main() {
    let events: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let g = Generator::new(GeneratorConfig::default()).expect("the default configuration");
    let mut rows: Vec<(String, u64, f64, String)> = Vec::new();

    // Generation alone: the events are built (strings included) and dropped.
    let t = Instant::now();
    let mut bytes = 0usize;
    for n in 0..events {
        let e = black_box(g.event(n));
        bytes += match &e {
            Event::Bid(b) => b.extra.len(),
            _ => 1,
        };
    }
    black_box(bytes);
    let secs = t.elapsed().as_secs_f64();
    rows.push(("generate".into(), events, secs, rate(events, secs)));

    // Generation into JSON lines (in memory).
    let t = Instant::now();
    let mut json = Vec::with_capacity(events as usize * 200);
    write_events(&mut json, (0..events).map(|n| g.event(n))).expect("writing into memory");
    let secs = t.elapsed().as_secs_f64();
    let mb = json.len() as f64 / 1e6;
    rows.push((
        "generate + JSON".into(),
        events,
        secs,
        format!("{} ({:.0} MB/s)", rate(events, secs), mb / secs),
    ));

    // Parsing the JSON lines back.
    let text = String::from_utf8(json).expect("JSON is UTF-8");
    let t = Instant::now();
    let mut parsed = Vec::with_capacity(events as usize);
    for (i, line) in text.lines().enumerate() {
        parsed.push(parse_line(line, i as u64 + 1).expect("generated lines parse"));
    }
    let secs = t.elapsed().as_secs_f64();
    rows.push((
        "parse JSON".into(),
        events,
        secs,
        format!("{} ({:.0} MB/s)", rate(events, secs), mb / secs),
    ));
    drop(text);

    // The reference, per query, over the parsed events.
    for q in Query::ALL {
        let t = Instant::now();
        let mut out = 0u64;
        evaluate_many(
            &[q],
            parsed
                .iter()
                .cloned()
                .map(Ok::<_, std::convert::Infallible>),
            |_, row| {
                out += 1;
                black_box(row);
            },
        )
        .unwrap_or_else(|e| match e {});
        let secs = t.elapsed().as_secs_f64();
        rows.push((
            format!("reference {q} ({out} rows)*"),
            events,
            secs,
            rate(events, secs),
        ));
    }

    println!(
        "{:<28} {:>12} {:>9}  events/s (single thread)",
        "what", "events", "seconds"
    );
    for (what, n, secs, rate) in rows {
        println!("{what:<28} {n:>12} {secs:>9.3}  {rate}");
    }
    println!("* including a clone of every event fed to the evaluator");
}
