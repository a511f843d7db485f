//! The layer check (issue 11): imports inside `crates/weir/src` go one way,
//!
//! ```text
//! runner → api, connectors, testing → runtime → checkpoint → state → error → storage → clock
//! ```
//!
//! A module may import its own layer and any layer below it, never one above. This test
//! reads every `.rs` file under `src`, finds each `crate::<module>` path in code (in `use`
//! lines, `use crate::{a, b}` groups and inline paths; comments and string literals are
//! skipped) and fails, naming the file and line, when one reaches up. It runs under
//! `cargo test`, so CI keeps the order. `lib.rs` is the crate root and may name anything
//! (the prelude). A new top-level module fails the check until it is given a layer in
//! [`LAYERS`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Every top-level name a `crate::` path may start with, and its layer: higher numbers sit
/// higher and may import lower ones. `Error`, `Result` and `prelude` are the root's
/// re-exports.
const LAYERS: &[(&str, u8)] = &[
    ("runner", 7),
    ("api", 6),
    ("connectors", 6),
    ("testing", 6),
    ("inspect", 6),
    ("cluster", 6),
    ("prelude", 6),
    ("runtime", 5),
    ("checkpoint", 4),
    ("state", 3),
    ("error", 2),
    ("Error", 2),
    ("Result", 2),
    ("storage", 1),
    ("clock", 0),
];

/// The order, as the failure message states it.
const ORDER: &str = "the order is runner → api → runtime → checkpoint → state → storage \
    (connectors and testing sit beside api; error sits just above storage, whose errors it \
    wraps; clock is a leaf below everything)";

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

/// One `crate::` reference: the line it is on and the top-level module it names.
#[derive(Debug, PartialEq)]
struct Reference {
    line: usize,
    module: String,
}

/// The source with comments and string/char literals blanked out (newlines kept, so line
/// numbers stay right).
fn code_only(src: &str) -> Vec<char> {
    let s: Vec<char> = src.chars().collect();
    let mut out = s.clone();
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(s.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let end = (i..s.len()).find(|&j| s[j] == '\n').unwrap_or(s.len());
            blank(&mut out, i, end);
            i = end;
        } else if c == '/' && next == Some('*') {
            let (mut j, mut depth) = (i + 2, 1);
            while j < s.len() && depth > 0 {
                if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if c == 'r'
            && (i == 0
                || !is_ident(s[i - 1])
                || (s[i - 1] == 'b' && (i < 2 || !is_ident(s[i - 2]))))
            && matches!(next, Some('"') | Some('#'))
        {
            // A raw string r"…", r#"…"#; or an identifier such as `r#type` (no quote).
            let hashes = (i + 1..s.len()).take_while(|&j| s[j] == '#').count();
            if s.get(i + 1 + hashes) != Some(&'"') {
                i += 1;
                continue;
            }
            let mut j = i + 2 + hashes;
            while j < s.len() {
                if s[j] == '"' && (j + 1..j + 1 + hashes).all(|k| s.get(k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            blank(&mut out, i, j);
            i = j;
        } else if c == '"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != '"' {
                j += if s[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}'); otherwise a lifetime or label.
            if next == Some('\\') {
                let j = (i + 2..s.len()).find(|&j| s[j] == '\'').unwrap_or(s.len());
                blank(&mut out, i, j + 1);
                i = j + 1;
            } else if s.get(i + 2) == Some(&'\'') {
                blank(&mut out, i, i + 3);
                i += 3;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Every `crate::` (or `$crate::`) path in `src`'s code, with the top-level module it names;
/// a group `crate::{a, b::c}` yields one reference per item.
fn references(src: &str) -> Vec<Reference> {
    let s = code_only(src);
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let line_at = |i: usize| 1 + s[..i].iter().filter(|&&c| c == '\n').count();
    let skip_ws = |mut i: usize| {
        while i < s.len() && s[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let ident_at = |i: usize| -> String {
        s[i..]
            .iter()
            .take_while(|&&c| is_ident(c) || c == '*')
            .collect()
    };
    let mut refs = Vec::new();
    let word: Vec<char> = "crate".chars().collect();
    let mut i = 0;
    while i + word.len() <= s.len() {
        let at_word = s[i..i + word.len()] == word[..]
            && (i == 0 || !is_ident(s[i - 1]))
            && s.get(i + word.len()).is_none_or(|&c| !is_ident(c));
        if !at_word {
            i += 1;
            continue;
        }
        let mut j = skip_ws(i + word.len());
        if !(s.get(j) == Some(&':') && s.get(j + 1) == Some(&':')) {
            i += word.len();
            continue;
        }
        j = skip_ws(j + 2);
        if s.get(j) == Some(&'{') {
            // A group: the first segment of every item at depth 1.
            let mut depth = 1;
            let mut k = skip_ws(j + 1);
            let mut item_start = true;
            while k < s.len() && depth > 0 {
                let c = s[k];
                if item_start && (is_ident(c) || c == '*') {
                    let name = ident_at(k);
                    if name != "self" {
                        refs.push(Reference {
                            line: line_at(k),
                            module: name.clone(),
                        });
                    }
                    item_start = false;
                    k += name.len();
                    continue;
                }
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => item_start = true,
                    _ => {}
                }
                k += 1;
            }
            i = k;
        } else {
            let name = ident_at(j);
            refs.push(Reference {
                line: line_at(j),
                module: name,
            });
            i = j;
        }
    }
    refs
}

/// The top-level module a file under `src` belongs to; `None` for the crate root.
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.strip_suffix(".rs") {
        Some("lib") => None,
        Some(stem) => Some(stem.to_string()),
        None => Some(first),
    }
}

/// The violations in one file's source, as messages.
fn check_file(shown: &str, module: &str, src: &str) -> Vec<String> {
    let Some(own) = layer(module) else {
        return vec![format!(
            "{shown}: module `{module}` has no layer: add it to LAYERS in tests/layers.rs ({ORDER})"
        )];
    };
    let mut found = Vec::new();
    for r in references(src) {
        match layer(&r.module) {
            None => found.push(format!(
                "{shown}:{}: `crate::{}` names no known layer: add it to LAYERS in \
                 tests/layers.rs ({ORDER})",
                r.line, r.module
            )),
            Some(theirs) if theirs > own => found.push(format!(
                "{shown}:{}: {module} may not import {}: {ORDER}",
                r.line, r.module
            )),
            Some(_) => {}
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn lower_layers_never_import_higher_ones() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 20,
        "found only {} files in {}",
        files.len(),
        src.display()
    );
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let Some(module) = module_of(rel) else {
            continue;
        };
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let shown = format!("crates/weir/src/{}", rel.display());
        violations.extend(check_file(&shown, &module, &text));
    }
    if !violations.is_empty() {
        let mut msg = format!("{} import(s) break the layer order:\n", violations.len());
        for v in &violations {
            writeln!(msg, "  {v}").unwrap();
        }
        panic!("{msg}");
    }
}

#[test]
fn references_cover_groups_and_inline_paths_but_not_comments_or_strings() {
    let src = r##"
use crate::error::Result;
use crate::{
    runtime::event::Event,
    state::{keyed::X, Key},
    self,
};
// use crate::api::Nope;
/* crate::api::Nope /* nested */ crate::api::Nope */
const S: &str = "crate::api::Nope";
const R: &str = r#"crate::api::Nope "quoted""#;
const C: char = '"';
fn f<'a>(x: &'a u8) -> u64 { let _ = x; $crate::clock::wall_ms() + crate :: clock::wall_ms() }
pub(crate) fn g() {}
"##;
    let refs = references(src);
    let got: Vec<(usize, &str)> = refs.iter().map(|r| (r.line, r.module.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (2, "error"),
            (4, "runtime"),
            (5, "state"),
            (13, "clock"),
            (13, "clock")
        ]
    );
}

#[test]
fn an_upward_import_fails_with_file_line_and_the_order() {
    let src = "use crate::error::Result;\nfn f() -> u64 { crate::runtime::coordinator::executor::wall_ms() }\n";
    let found = check_file("crates/weir/src/state/x.rs", "state", src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with(
            "crates/weir/src/state/x.rs:2: state may not import runtime: the order is \
             runner → api → runtime → checkpoint → state → storage"
        ),
        "{}",
        found[0]
    );
    // Downward and sideways imports pass; an unknown module does not.
    assert!(check_file("x.rs", "api", "use crate::{runtime::x, testing::y};").is_empty());
    assert_eq!(
        check_file("x.rs", "state", "use crate::nowhere::x;").len(),
        1
    );
    assert_eq!(check_file("x.rs", "nowhere", "").len(), 1);
}
