//! `weir nexmark generate` and `weir nexmark reference` end to end: files written, the
//! same results from a file and from the generator, and clear errors with exit 2 for bad
//! usage, exit 1 for a bad input line.

mod common;

use std::fs;

use common::*;

#[test]
fn generate_then_reference_from_the_file_and_from_the_generator() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let events = cwd.join("events.jsonl");
    run(&mut weir(
        cwd,
        [
            "nexmark",
            "generate",
            "--events",
            "5000",
            "--output",
            &s(&events),
        ],
    ))
    .assert_success();
    let text = fs::read_to_string(&events).unwrap();
    assert_eq!(text.lines().count(), 5000);
    assert!(text.starts_with("{\"event_type\":0,\"person\":{\"id\":1000,"));

    let from_file = cwd.join("from-file");
    let r = run(&mut weir(
        cwd,
        [
            "nexmark",
            "reference",
            "--query",
            "all",
            "--input",
            &s(&events),
            "--output",
            &s(&from_file),
        ],
    ));
    r.assert_success();
    assert!(r.stdout.contains("4600 rows -> "), "{}", r.describe());
    let from_generator = cwd.join("from-generator");
    run(&mut weir(
        cwd,
        [
            "nexmark",
            "reference",
            "--query",
            "q0,q5,q11",
            "--events",
            "5000",
            "--output",
            &s(&from_generator),
        ],
    ))
    .assert_success();
    for q in ["q0", "q5", "q11"] {
        let a = fs::read_to_string(from_file.join(format!("{q}.csv"))).unwrap();
        let b = fs::read_to_string(from_generator.join(format!("{q}.csv"))).unwrap();
        assert_eq!(a, b, "{q}");
    }
    let q1 = fs::read_to_string(from_file.join("q1.csv")).unwrap();
    assert!(q1.starts_with("auction,bidder,price,dateTime,extra\n1000,1001,29537240.908,"));
    for q in ["q2", "q3", "q4", "q7", "q8"] {
        assert!(from_file.join(format!("{q}.csv")).is_file(), "{q}.csv");
    }
}

#[test]
fn generate_resumes_at_an_offset() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let whole = cwd.join("whole.jsonl");
    let tail = cwd.join("tail.jsonl");
    run(&mut weir(
        cwd,
        [
            "nexmark",
            "generate",
            "--events",
            "300",
            "--output",
            &s(&whole),
        ],
    ))
    .assert_success();
    run(&mut weir(
        cwd,
        [
            "nexmark",
            "generate",
            "--events",
            "100",
            "--offset",
            "200",
            "--output",
            &s(&tail),
        ],
    ))
    .assert_success();
    let whole = fs::read_to_string(whole).unwrap();
    let expected: Vec<&str> = whole.lines().skip(200).collect();
    assert_eq!(
        fs::read_to_string(tail)
            .unwrap()
            .lines()
            .collect::<Vec<_>>(),
        expected
    );
}

#[test]
fn an_unknown_query_exits_2_naming_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(&mut weir(
        dir.path(),
        [
            "nexmark",
            "reference",
            "--query",
            "q6",
            "--events",
            "10",
            "--output",
            "out",
        ],
    ));
    assert_eq!(r.code(), Some(2), "{}", r.describe());
    assert_eq!(
        r.stderr.trim(),
        "error: --query: unknown query \"q6\": the reference evaluates q0, q1, q2, q3, q4, q5, \
         q7, q8, q11, or all"
    );
}

#[test]
fn a_bad_line_exits_1_naming_the_line_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let events = cwd.join("events.jsonl");
    fs::write(
        &events,
        "{\"event_type\":2,\"bid\":{\"auction\":1,\"bidder\":2,\"price\":3,\"channel\":\"c\",\
         \"url\":\"u\",\"dateTime\":5,\"extra\":\"\"}}\n\
         {\"event_type\":2,\"bid\":{\"auction\":1,\"bidder\":2,\"price\":3,\"channel\":\"c\",\
         \"url\":\"u\",\"dateTime\":\"soon\",\"extra\":\"\"}}\n",
    )
    .unwrap();
    let r = run(&mut weir(
        cwd,
        [
            "nexmark",
            "reference",
            "--query",
            "q0",
            "--input",
            &s(&events),
            "--output",
            "out",
        ],
    ));
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(
        r.stderr
            .contains("line 2: field bid.dateTime: timestamp \"soon\" does not parse"),
        "{}",
        r.describe()
    );
    let r = run(&mut weir(
        cwd,
        [
            "nexmark", "generate", "--events", "10", "--tps", "0", "--output", "x.jsonl",
        ],
    ));
    assert_eq!(r.code(), Some(2), "{}", r.describe());
    assert!(r.stderr.contains("tps is 0"), "{}", r.describe());
}
