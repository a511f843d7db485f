//! What a newcomer reads stays true (issue 23): the README's layout table names every crate
//! of the workspace and every top-level module of the engine's `src/` (and nothing that is
//! gone), and every file or folder the README and `docs/` cite exists. A crate or module
//! added, moved or removed fails this test until the documents follow.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The workspace root (two levels above this crate).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The workspace's members, from the root `Cargo.toml`'s `members = [...]`.
fn members() -> BTreeSet<String> {
    let toml = read(&root().join("Cargo.toml"));
    let start = toml.find("members").expect("a members list") + "members".len();
    let list = &toml[start..];
    let list = &list[list.find('[').expect("[") + 1..list.find(']').expect("]")];
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The engine's top-level modules, as `lib.rs` declares them (`mod x;`, any visibility).
fn top_level_modules() -> BTreeSet<String> {
    read(&root().join("crates/weir/src/lib.rs"))
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l
                .strip_prefix("pub ")
                .or_else(|| l.strip_prefix("pub(crate) "));
            let rest = rest.unwrap_or(l).strip_prefix("mod ")?;
            Some(rest.strip_suffix(';')?.trim().to_string())
        })
        .collect()
}

/// The rows of the README's `## Layout` table: first cell (unquoted) and the whole row.
fn layout_rows() -> Vec<(String, String)> {
    let readme = read(&root().join("README.md"));
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Layout"))
        .expect("README.md has a `## Layout` section");
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let first = l[3..].split('`').next().unwrap_or("").to_string();
            (first, l.to_string())
        })
        .collect()
}

/// Every `` `…` `` span of `text` outside fenced blocks (whose content is not prose).
fn code_spans(text: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_readme_layout_names_every_crate_and_top_level_module() {
    let rows = layout_rows();
    let crates: BTreeSet<String> = rows
        .iter()
        .map(|(p, _)| p.clone())
        .filter(|p| p.starts_with("crates/"))
        .collect();
    assert_eq!(
        crates,
        members(),
        "README.md's layout table and the workspace's members differ: give each crate a row"
    );
    let engine = &rows
        .iter()
        .find(|(p, _)| p == "crates/weir")
        .expect("a crates/weir row")
        .1;
    let src = root().join("crates/weir/src");
    // Each module is named as its folder (`api/`) or file (`clock.rs`).
    let named: BTreeSet<String> = code_spans(engine)
        .iter()
        .filter_map(|s| s.strip_suffix('/').or_else(|| s.strip_suffix(".rs")))
        .map(str::to_string)
        .collect();
    let modules = top_level_modules();
    assert!(modules.len() >= 10, "lib.rs read wrongly: {modules:?}");
    let missing: Vec<_> = modules.difference(&named).collect();
    let stale: Vec<_> = named.difference(&modules).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "README.md's crates/weir row: modules of src/ not named {missing:?}, named but not \
         modules {stale:?}"
    );
    for m in &modules {
        assert!(
            src.join(m).is_dir() || src.join(format!("{m}.rs")).is_file(),
            "module {m} has neither src/{m}/ nor src/{m}.rs"
        );
    }
}

/// A span that reads as a path in the repository: one starting at the root (`crates/`,
/// `docs/`, `scripts/`) or at the engine's `src/` (`runtime/…`); `:line` and `::item`
/// suffixes are dropped, patterns and placeholders skipped.
fn cited_path(span: &str, modules: &BTreeSet<String>) -> Option<PathBuf> {
    if span.contains(['*', '<', '>', ' ', '{', '$', '…']) {
        return None;
    }
    let path = span.split("::").next()?;
    let path = path.split(':').next()?;
    let first = path.split('/').next()?;
    if path.split('/').count() < 2 {
        return None;
    }
    match first {
        "crates" | "docs" | "scripts" => Some(root().join(path)),
        m if modules.contains(m) => Some(root().join("crates/weir/src").join(path)),
        _ => None,
    }
}

#[test]
fn every_path_the_readme_and_docs_cite_exists() {
    let modules = top_level_modules();
    let mut docs = vec![root().join("README.md")];
    for e in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        for span in code_spans(&read(doc)) {
            if let Some(path) = cited_path(&span, &modules) {
                checked += 1;
                if !path.exists() {
                    missing.push(format!("{}: `{span}`", doc.display()));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} paths found: the parsing is broken"
    );
    assert!(
        missing.is_empty(),
        "cited paths that do not exist: {missing:#?}"
    );
}

/// The text of every Rust file under `dir` (the build folders skipped), appended to `out`.
fn rust_sources(dir: &Path, out: &mut String) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.expect("entry").path();
        if p.is_dir() {
            if !p.ends_with("target") {
                rust_sources(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push_str(&read(&p));
        }
    }
}

/// The README's "Upgrading a job" compatibility table (issue 26) says which test proves
/// each row: every test it names exists (a `fn` of that name in the workspace, or a test
/// file under `crates/*/tests/`), and every row names one, so a row cannot outlive its
/// proof.
#[test]
fn every_test_the_upgrade_table_names_exists() {
    let readme = read(&root().join("README.md"));
    let start = readme
        .find("### Upgrading a job")
        .expect("README.md has an `### Upgrading a job` section");
    let section = &readme[start..];
    // Up to the next heading (`#` lines inside fenced blocks are shell comments).
    let end = ["\n## ", "\n### "]
        .iter()
        .filter_map(|h| section[4..].find(h))
        .min()
        .map_or(section.len(), |i| i + 4);
    let section = &section[..end];
    let mut sources = String::new();
    rust_sources(&root().join("crates"), &mut sources);
    let rows: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| ---"))
        .skip(1) // the header
        .collect();
    assert!(
        rows.len() >= 8,
        "the table has {} rows: parsing broken",
        rows.len()
    );
    let mut missing = Vec::new();
    for row in rows {
        let tested_by = row
            .trim_end()
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .unwrap();
        let mut named = 0;
        for span in code_spans(tested_by) {
            let exists = match span.strip_suffix(".rs") {
                Some(file) if !file.contains('/') => std::fs::read_dir(root().join("crates"))
                    .expect("crates/")
                    .any(|c| c.unwrap().path().join("tests").join(&span).exists()),
                Some(_) => root().join(&span).exists(),
                None => sources.contains(&format!("fn {span}(")),
            };
            named += 1;
            if !exists {
                missing.push(format!("`{span}` in: {row}"));
            }
        }
        if named == 0 {
            missing.push(format!("no test named in: {row}"));
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}
