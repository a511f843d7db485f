//! The dashboard in a real browser (issue 14): headless Chromium opens the pages of a
//! running `weir run keyed-count --event-time` and the test checks what a person sees —
//! the operator names, every operator per subtask with its counts (chained ones too) and
//! watermark lag, a state-size row, the attempts, a completed checkpoint row with its
//! alignment, the checkpoint timeline (a row per subtask, its phase segments laid out in
//! order and sized) and the per-subtask phases chart drawn — clicks
//! the savepoint action (refusing, then accepting its confirmation) and finds the savepoint
//! on disk where the page says, and saves a screenshot of the overview and of the
//! checkpoints page, each checked for being more than a blank page.
//!
//! Chromium is Debian's `chromium` package, which `scripts/test.sh` installs (as CI runs
//! it); `WEIR_CHROMIUM` names another binary. Without one the test fails, saying so: it
//! never skips silently.

mod common;
mod dashboard_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use dashboard_support::*;

/// The browser: `WEIR_CHROMIUM`, else the first of Debian's and others' names on the PATH.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("WEIR_CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome", "chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "no Chromium found for the dashboard's browser test: install Debian's `chromium` \
         package (scripts/test.sh does: apt-get install chromium) or set WEIR_CHROMIUM"
    );
}

/// Runs headless Chromium on `url` with `args` (its own profile in `tmp`); returns stdout.
fn browse(tmp: &Path, url: &str, args: &[String]) -> String {
    let profile = tempfile::tempdir_in(tmp).unwrap();
    let out = tmp.join("chromium.out");
    let err = tmp.join("chromium.err");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox", // the tests run as root in CI
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,1000",
            // Lets the page's fetches and a few refreshes run before the DOM is read.
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium().display()));
    let status = wait_deadline(&mut child, Duration::from_secs(90), "chromium");
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        status.success(),
        "chromium failed on {url}: {status}\n{}",
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    stdout
}

/// The DOM of `url` once its scripts ran.
fn dom(tmp: &Path, url: &str) -> String {
    browse(tmp, url, &["--dump-dom".to_string()])
}

/// A screenshot of `url` into `png`; returns its size in bytes.
fn screenshot(tmp: &Path, url: &str, png: &Path) -> u64 {
    let _ = std::fs::remove_file(png);
    browse(tmp, url, &[format!("--screenshot={}", png.display())]);
    let bytes = std::fs::read(png).unwrap_or_else(|e| panic!("no screenshot {png:?}: {e}"));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{png:?} is not a PNG"
    );
    bytes.len() as u64
}

/// The part of `dom` inside the element that starts with `start` (e.g. `<table id="x"`).
fn section<'a>(dom: &'a str, start: &str, end: &str) -> &'a str {
    let from = dom
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in\n{dom}"));
    let rest = &dom[from..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

/// The body rows of `table` (a section of the DOM), each as the texts of its cells (the
/// page writes text only, so a cell is `<td …>text</td>` with `&`, `<`, `>` escaped).
fn rows(table: &str) -> Vec<Vec<String>> {
    let body = table.split("<tbody>").nth(1).unwrap_or("");
    body.split("<tr>")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let text = &cell[cell.find('>').map_or(0, |i| i + 1)..];
                    let text = &text[..text.find("</td>").unwrap_or(text.len())];
                    text.replace("&gt;", ">")
                        .replace("&lt;", "<")
                        .replace("&amp;", "&")
                })
                .collect()
        })
        .collect()
}

/// A number as the page prints it (`12,345`).
fn number(cell: &str) -> u64 {
    cell.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {cell:?}"))
}

#[test]
fn the_dashboard_shows_the_running_job_in_a_browser() {
    let browser = chromium(); // fail first, and clearly, without a browser
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // Long enough for every browser run below on a busy machine; stopped at the end.
    // In event time, so that the pages show watermark lag.
    let job = start_job_events(t, 100_000_000, &["--event-time"], "browser");
    wait_for(
        &job.url("/api/checkpoints"),
        "a checkpoint completed",
        |v| v["latest_completed"]["id"].is_u64(),
    );

    let overview = dom(t, &job.url("/"));
    let operators = section(&overview, "<table id=\"operators\"", "</table>");
    for name in ["generator", "count", "output"] {
        assert!(
            operators.contains(&format!("<td>{name}</td>")),
            "operator {name} not shown by {}:\n{operators}",
            browser.display()
        );
    }
    assert!(overview.contains("keyed-count"), "{overview}");
    // A row per subtask with its records and, after a refresh, its shares of time.
    let tasks = section(&overview, "<table id=\"tasks\"", "</table>");
    assert_eq!(
        tasks.matches("<tr>").count(),
        5,
        "a header and 4 subtasks:\n{tasks}"
    );
    assert!(
        tasks.contains("<td>generator -&gt; timestamps</td>"),
        "{tasks}"
    );
    assert!(
        tasks.contains(" %</td>"),
        "no backpressure or busy share:\n{tasks}"
    );
    // Every operator in every subtask, chained ones with their own counts: the timestamp
    // assigner chained behind the generator, the sink behind the counter; and the
    // watermark lag of the event-time operators.
    let per_op = rows(section(
        &overview,
        "<table id=\"operator-subtasks\"",
        "</table>",
    ));
    // Operator, chain, subtask, records in, records out, in/s, busy, watermark lag.
    let of = |name: &str| -> Vec<&Vec<String>> { per_op.iter().filter(|r| r[0] == name).collect() };
    for (name, chain) in [
        ("generator", "generator -> timestamps"),
        ("timestamps", "generator -> timestamps"),
        ("count", "count -> output"),
        ("output", "count -> output"),
    ] {
        let shown = of(name);
        assert_eq!(shown.len(), 2, "{name}: a row per subtask:\n{per_op:?}");
        for r in shown {
            assert_eq!(r[1], chain, "{r:?}");
            assert!(r[6].ends_with(" %"), "no busy share: {r:?}");
        }
    }
    for name in ["timestamps", "count"] {
        for r in of(name) {
            assert!(number(&r[3]) > 0, "{name} received nothing: {r:?}");
            let lag = r[7].strip_suffix(" ms").or(r[7].strip_suffix(" s"));
            assert!(lag.is_some(), "no watermark lag for {name}: {r:?}");
        }
    }
    // The state of the newest completed checkpoint: the counter's keyed state.
    let state = rows(section(&overview, "<table id=\"state-sizes\"", "</table>"));
    assert!(
        state
            .iter()
            .any(|r| r[..3] == ["count", "count", "keyed"] && r[3].ends_with('B') && r[3] != "0 B"),
        "no state-size row of count:\n{state:?}"
    );
    // What that checkpoint wrote for the counter, and where its state lived (in memory: no
    // local disk, every key decoded).
    let storage = rows(section(
        &overview,
        "<table id=\"state-storage\"",
        "</table>",
    ));
    let count = storage.iter().find(|r| r[0] == "count");
    assert!(
        count.is_some_and(|r| r[1] != "0 B" && r[2] == "0 B" && r[3] == "0 B" && number(&r[4]) > 0),
        "no storage row of count:\n{storage:?}"
    );
    // Restarts with their causes: none here, the running attempt is shown.
    let attempts = rows(section(&overview, "<table id=\"attempts\"", "</table>"));
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0][3], "running", "{attempts:?}");
    // Every subtask names its worker: in one process, the process itself.
    let task_rows = rows(tasks);
    assert!(task_rows.iter().all(|r| r[2] == "local"), "{task_rows:?}");
    // The workers page: not a cluster, the process as one local worker running all 4.
    let workers = dom(t, &job.url("/workers"));
    assert!(workers.contains("Not a cluster"), "{workers}");
    let listed = rows(section(&workers, "<table id=\"workers\"", "</table>"));
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0][0], "local", "{listed:?}");
    assert_eq!(listed[0][6].split(", ").count(), 4, "{listed:?}");

    let checkpoints = dom(t, &job.url("/checkpoints"));
    let history = section(&checkpoints, "<table id=\"history\"", "</table>");
    assert!(
        history.contains("<td class=\"completed\">completed</td>"),
        "no completed checkpoint row:\n{history}"
    );
    assert!(history.contains("chk-"), "no checkpoint folder:\n{history}");
    let kinds = rows(history);
    assert!(
        kinds.iter().all(|r| r[2] == "aligned"),
        "the alignment column: {kinds:?}"
    );
    // The phases of the newest completed checkpoint, per subtask, are drawn.
    let phases = section(&checkpoints, "<div id=\"phases-chart\"", "</table>");
    let canvas = section(phases, "<canvas", ">");
    assert!(
        canvas.contains("width=\"") && !canvas.contains("width=\"0\""),
        "no sized chart of the phases:\n{phases}"
    );
    assert!(
        phases.contains("sync (ms)") && phases.contains("async (ms)"),
        "{phases}"
    );
    let id = section(&checkpoints, "<span id=\"phases-id\">", "</span>");
    assert!(
        id.trim_start_matches("<span id=\"phases-id\">")
            .parse::<u64>()
            .is_ok(),
        "no checkpoint chosen for the phases: {id}"
    );

    // The timeline of that checkpoint, measured in the laid-out page: a row per subtask
    // (keyed-count at parallelism 2: generator, count and output chains), each a track
    // with phase segments that have a width, start no earlier than the one before and
    // include the synchronous and the asynchronous parts.
    let profile = tempfile::tempdir_in(t).unwrap();
    let mut page = devtools::Browser::open(&browser, profile.path(), &job.url("/checkpoints"));
    let rows = page.wait_for(
        "(rows => rows.length > 0 && rows.map(r => ({ \
            label: r.querySelector('.tl-label').textContent, \
            track: r.querySelector('.tl-track').getBoundingClientRect().width, \
            segs: [...r.querySelectorAll('.tl-seg')].map(s => { \
                const b = s.getBoundingClientRect(); \
                return { kind: s.classList[1], left: b.left, width: b.width, height: b.height }; \
            }) })))([...document.querySelectorAll('#timeline .tl-row:not(.tl-axis)')])",
        Duration::from_secs(60),
    );
    let rows = rows.as_array().expect("timeline rows");
    assert!(rows.len() >= 3, "a row per subtask expected: {rows:?}");
    for r in rows {
        assert!(r["track"].as_f64().unwrap() > 100.0, "narrow track: {r}");
        let segs = r["segs"].as_array().unwrap();
        let kinds: Vec<&str> = segs.iter().map(|s| s["kind"].as_str().unwrap()).collect();
        assert!(
            kinds.contains(&"sync") && kinds.contains(&"async"),
            "no sync or async segment: {r}"
        );
        let mut left = f64::MIN;
        for s in segs {
            assert!(s["width"].as_f64().unwrap() >= 1.0, "unsized segment: {r}");
            assert!(s["height"].as_f64().unwrap() >= 8.0, "flat segment: {r}");
            let at = s["left"].as_f64().unwrap();
            assert!(at + 0.5 >= left, "segments out of order: {r}");
            left = at;
        }
    }
    assert!(
        rows.iter()
            .any(|r| r["label"].as_str().unwrap().starts_with("count")),
        "{rows:?}"
    );
    drop(page);

    // Screenshots, kept for people (target/tmp) and checked against a blank page's size: a
    // uniform page compresses to almost nothing, the dashboard with text and charts not.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&dir).unwrap();
    let blank = screenshot(t, "about:blank", &t.join("blank.png"));
    for (page, file) in [("/", "overview.png"), ("/checkpoints", "checkpoints.png")] {
        let png = dir.join(file);
        let size = screenshot(t, &job.url(page), &png);
        assert!(
            size > 4 * blank.max(1_000),
            "{png:?} ({size} bytes) looks blank next to an empty page ({blank} bytes)"
        );
    }

    // The savepoint action, clicked: refused at the confirmation, nothing happens; confirmed,
    // a savepoint lands on disk and the page shows where.
    let profile = tempfile::tempdir_in(t).unwrap();
    let mut page = devtools::Browser::open(&browser, profile.path(), &job.url("/actions"));
    let wait = Duration::from_secs(60);
    page.wait_for(
        "(e => !!e && e.textContent === 'running')(document.getElementById('state'))",
        wait,
    );
    // The click handler runs synchronously up to its request (a `fetch` POST), so once
    // `click()` returned, a refused confirmation has been asked and no action was sent:
    // checked as facts, not after a sleep a loaded machine may outlast. (The page's own
    // polling GETs are not counted.)
    page.eval(
        "window.asked = 0; window.posted = 0; \
         const realFetch = window.fetch; \
         window.fetch = (url, opts) => { \
           if (opts && opts.method === 'POST') window.posted += 1; \
           return realFetch(url, opts); \
         }; \
         window.confirm = () => { window.asked += 1; return false; }; \
         document.getElementById('do-savepoint').click()",
    );
    assert_eq!(page.eval("window.asked"), serde_json::json!(1));
    assert_eq!(page.eval("window.posted"), serde_json::json!(0));
    assert_eq!(
        page.eval("document.getElementById('action-result').textContent"),
        ""
    );
    assert!(
        list_folder(&checkpoint_dir(&t.join("sp"))).is_empty(),
        "a refused confirmation took a savepoint"
    );
    page.eval("window.confirm = () => true; document.getElementById('do-savepoint').click()");
    let shown = page.wait_for(
        "(t => t.startsWith('savepoint ') && t)(document.getElementById('action-result').textContent)",
        wait,
    );
    // The same counter saw the confirmed action's request: the 0 above was no blind spot.
    assert_eq!(page.eval("window.posted"), serde_json::json!(1));
    let shown = shown.as_str().unwrap().to_string();
    let path = PathBuf::from(shown.split(": ").nth(1).expect("the page names the folder"));
    assert!(path.starts_with(checkpoint_dir(&t.join("sp"))), "{shown}");
    assert!(
        is_object(&path.join("_metadata")),
        "no savepoint at {path:?}"
    );
    drop(page);

    let (status, body) = post(&job.url("/stop"), &[("X-Weir-Action", "1")]);
    assert_eq!(status, 200, "{body}");
    let (code, log) = job.finish();
    assert_eq!(code, Some(0), "{log}");
}

/// An unaligned job under backpressure (issue 13): the checkpoints page, as rendered in
/// the browser, says `unaligned` in the history's alignment column for the checkpoints
/// the API reports unaligned, and agrees with the API on every completed row.
#[test]
fn the_checkpoint_history_shows_unaligned_checkpoints_in_a_browser() {
    let browser = chromium();
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // The count at a tenth of the generator's 500 000 a second: its input channels stay
    // full, so every checkpoint overtakes records in flight. 2 M events last 40 s, longer
    // than the test needs on a busy machine; the job is killed when it is dropped.
    let extra = ["--unaligned", "--sink-rate", "50000"];
    let job = start_job_events(t, 2_000_000, &extra, "unaligned");
    let unaligned =
        |r: &serde_json::Value| r["status"] == "completed" && r["alignment"] == "unaligned";
    wait_for(
        &job.url("/api/checkpoints"),
        "an unaligned checkpoint",
        |v| v["history"].as_array().unwrap().iter().any(unaligned),
    );

    // The page refreshes itself: wait until it shows a completed unaligned row, reading
    // each row's cells as laid out (ID, kind, alignment, status).
    let profile = tempfile::tempdir_in(t).unwrap();
    let mut page = devtools::Browser::open(&browser, profile.path(), &job.url("/checkpoints"));
    let shown = page.wait_for(
        "(rows => rows.some(r => r[2] === 'unaligned' && r[3] === 'completed') && rows)(\
            [...document.querySelectorAll('#history tbody tr')].map(tr => \
                [...tr.querySelectorAll('td')].map(td => td.textContent)))",
        Duration::from_secs(60),
    );
    drop(page);
    let api = json(&job.url("/api/checkpoints"));
    let by_id = |id: u64| {
        api["history"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
    };
    let mut checked = 0;
    for row in shown.as_array().expect("history rows") {
        let cells: Vec<&str> = row
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        if cells[3] != "completed" {
            continue;
        }
        let id: u64 = cells[0]
            .parse()
            .unwrap_or_else(|_| panic!("an ID: {cells:?}"));
        // A completed checkpoint's alignment never changes, but the API keeps a bounded
        // history: rows it has dropped since the page read them are not compared.
        if let Some(r) = by_id(id) {
            assert_eq!(
                cells[2], r["alignment"],
                "row {cells:?} against the API's {r:#}"
            );
            checked += 1;
        }
    }
    assert!(
        checked > 0 && shown.to_string().contains("\"unaligned\""),
        "no unaligned row compared with the API: {shown:#}\n{api:#}"
    );
}
