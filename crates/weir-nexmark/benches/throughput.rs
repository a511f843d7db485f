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

/// One row of the table.
struct Measured {
    what: String,
    events: u64,
    wall: f64,
    cpu: f64,
    mb: Option<f64>,
}

/// This thread's CPU time in seconds.
fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusive `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Wall and CPU time of one measured step.
struct Timer {
    wall: Instant,
    cpu: f64,
}

impl Timer {
    fn start() -> Self {
        Timer {
            wall: Instant::now(),
            cpu: cpu_seconds(),
        }
    }

    /// (wall seconds, CPU seconds) since `start`.
    fn stop(&self) -> (f64, f64) {
        (self.wall.elapsed().as_secs_f64(), cpu_seconds() - self.cpu)
    }
}

fn main() {
    let events: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let g = Generator::new(GeneratorConfig::default()).expect("the default configuration");
    let mut rows: Vec<Measured> = Vec::new();
    let mut push = |what: String, timer: &Timer, mb: Option<f64>| {
        let (wall, cpu) = timer.stop();
        rows.push(Measured {
            what,
            events,
            wall,
            cpu,
            mb,
        });
    };

    // Generation alone: the events are built (strings included) and dropped.
    let t = Timer::start();
    let mut bytes = 0usize;
    for n in 0..events {
        let e = black_box(g.event(n));
        bytes += match &e {
            Event::Bid(b) => b.extra.len(),
            _ => 1,
        };
    }
    black_box(bytes);
    push("generate".into(), &t, None);

    // Generation into JSON lines (in memory).
    let t = Timer::start();
    let mut json = Vec::with_capacity(events as usize * 200);
    write_events(&mut json, (0..events).map(|n| g.event(n))).expect("writing into memory");
    let mb = json.len() as f64 / 1e6;
    push("generate + JSON".into(), &t, Some(mb));

    // Parsing the JSON lines back.
    let text = String::from_utf8(json).expect("JSON is UTF-8");
    let t = Timer::start();
    let mut parsed = Vec::with_capacity(events as usize);
    for (i, line) in text.lines().enumerate() {
        parsed.push(parse_line(line, i as u64 + 1).expect("generated lines parse"));
    }
    push("parse JSON".into(), &t, Some(mb));
    drop(text);

    // The reference, per query, over the parsed events.
    for q in Query::ALL {
        let t = Timer::start();
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
        push(format!("reference {q} ({out} rows)*"), &t, None);
    }

    println!(
        "{:<30} {:>10} {:>8} {:>8} {:>12} {:>12} {:>8}",
        "single thread", "events", "wall s", "CPU s", "events/s", "ev/CPU-s", "MB/CPU-s"
    );
    for m in rows {
        println!(
            "{:<30} {:>10} {:>8.3} {:>8.3} {:>10.2} M {:>10.2} M {:>8}",
            m.what,
            m.events,
            m.wall,
            m.cpu,
            m.events as f64 / m.wall / 1e6,
            m.events as f64 / m.cpu / 1e6,
            m.mb.map_or(String::new(), |mb| format!("{:.0}", mb / m.cpu)),
        );
    }
    println!("* including a clone of every event fed to the evaluator");
}
