//! Finding the input files of a [`FileSource`](super::FileSource): files, folders (walked
//! recursively) and glob patterns (`data/*.txt`, `logs/**/*.log`), and which subtask owns
//! a file found later.
//!
//! Names starting with `.` or `_` are skipped inside folders and in pattern matches: by
//! the Hadoop/Flink convention they are not data — the in-progress and pending parts of a
//! [`FileSink`](super::FileSink), `_SUCCESS` markers. A file named explicitly is always read.
//! Results are sorted and free of duplicates, so every subtask that lists the same inputs
//! sees the same files in the same order.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Whether a file or folder name marks something that is not input data.
pub(crate) fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .is_some_and(|n| n.starts_with('.') || n.starts_with('_'))
}

/// Whether `input` is a glob pattern rather than a path.
fn is_pattern(input: &Path) -> bool {
    input.to_str().is_some_and(|s| s.contains(['*', '?', '[']))
}

/// Expands `inputs` into the sorted, de-duplicated list of files they name.
///
/// A path that exists is taken literally (a file as is, a folder walked recursively); one
/// that does not is a glob pattern if it contains `*`, `?` or `[`. With `strict`, an input
/// that is neither an existing path nor a pattern is an error; without (continuous
/// discovery), it contributes nothing for now.
pub(crate) fn list_files(inputs: &[PathBuf], strict: bool) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for input in inputs {
        if input.is_dir() {
            walk(input, &mut out)?;
        } else if input.is_file() {
            out.push(input.clone());
        } else if is_pattern(input) {
            glob_files(input, &mut out)?;
        } else if strict {
            return Err(Error::io(
                "cannot read input",
                input,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such file or folder (and not a glob pattern)",
                ),
            ));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Adds every non-hidden file under `dir`, recursively.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io("cannot list input folder", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("cannot list input folder", dir, e))?;
        if is_hidden(&entry.file_name()) {
            continue;
        }
        let path = entry.path();
        // Follows symbolic links, like `is_dir` above.
        if path.is_dir() {
            walk(&path, out)?;
        } else if path.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

/// Adds every non-hidden file matching `pattern`; matched folders are walked.
fn glob_files(pattern: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let text = pattern.to_str().unwrap_or_default();
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: true,
    };
    let paths = glob::glob_with(text, options).map_err(|e| {
        Error::io(
            "invalid glob pattern",
            pattern,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()),
        )
    })?;
    for entry in paths {
        let path = entry.map_err(|e| {
            let p = e.path().to_path_buf();
            Error::io("cannot read input", p, e.into())
        })?;
        if path.file_name().is_some_and(is_hidden) {
            continue;
        }
        if path.is_dir() {
            walk(&path, out)?;
        } else if path.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

/// The subtask of `parallelism` that reads a file discovered while running: a stable hash
/// of its path (CRC-32C, the same on every run and platform), so every subtask agrees
/// without talking to the others.
pub(crate) fn owner(path: &str, parallelism: u32) -> u32 {
    crc32c::crc32c(path.as_bytes()) % parallelism.max(1)
}

/// A path as the `String` that identifies a file in state.
pub(crate) fn path_key(path: &Path) -> Result<String> {
    path.to_str().map(str::to_string).ok_or_else(|| {
        Error::io(
            "cannot read input file",
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "its path is not valid UTF-8; rename it",
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for f in [
            "a.txt",
            "b.log",
            ".hidden.txt",
            "_SUCCESS",
            "sub/c.txt",
            "sub/deep/d.txt",
            "sub/deep/e.log",
            ".git/f.txt",
        ] {
            std::fs::create_dir_all(p.join(f).parent().unwrap()).unwrap();
            std::fs::write(p.join(f), "x\n").unwrap();
        }
        dir
    }

    fn names(root: &Path, files: Vec<PathBuf>) -> Vec<String> {
        files
            .iter()
            .map(|f| f.strip_prefix(root).unwrap().to_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn folders_are_walked_recursively_without_hidden_entries() {
        let dir = tree();
        let files = list_files(&[dir.path().to_path_buf()], true).unwrap();
        assert_eq!(
            names(dir.path(), files),
            [
                "a.txt",
                "b.log",
                "sub/c.txt",
                "sub/deep/d.txt",
                "sub/deep/e.log"
            ]
        );
    }

    #[test]
    fn globs_match_one_level_or_any_depth() {
        let dir = tree();
        let p = dir.path();
        let one = list_files(&[p.join("*.txt")], true).unwrap();
        assert_eq!(names(p, one), ["a.txt"]);
        let deep = list_files(&[p.join("**/*.log"), p.join("a.txt")], true).unwrap();
        assert_eq!(names(p, deep), ["a.txt", "b.log", "sub/deep/e.log"]);
        // Overlapping inputs are read once; an explicit hidden file is read.
        let both = list_files(
            &[p.join("sub"), p.join("sub/c.txt"), p.join("_SUCCESS")],
            true,
        )
        .unwrap();
        assert_eq!(
            names(p, both),
            ["_SUCCESS", "sub/c.txt", "sub/deep/d.txt", "sub/deep/e.log"]
        );
    }

    #[test]
    fn a_missing_path_is_an_error_only_when_strict() {
        let dir = tree();
        let missing = dir.path().join("nope");
        let err = list_files(std::slice::from_ref(&missing), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("nope"), "{err}");
        assert!(list_files(&[missing], false).unwrap().is_empty());
        assert!(list_files(&[dir.path().join("*.csv")], true)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn owners_are_stable_and_in_range() {
        assert_eq!(owner("data/a.txt", 4), owner("data/a.txt", 4));
        assert!((0..100).all(|i| owner(&format!("f{i}"), 3) < 3));
        assert_eq!(owner("x", 0), 0);
    }
}
