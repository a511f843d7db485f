//! Finding the input files of a [`FileSource`](super::FileSource): files, folders (walked
//! recursively) and glob patterns (`data/*.txt`, `logs/**/*.log`), and which subtask owns
//! a file found later.
//!
//! Names starting with `.` or `_` are skipped inside folders and in pattern matches: by
//! the Hadoop/Flink convention they are not data — the in-progress and pending parts of a
//! [`FileSink`](super::FileSink), `_SUCCESS` markers. A file named explicitly is always read.
//! Results are sorted and free of duplicates, so every subtask that lists the same inputs
//! sees the same files in the same order.
//!
//! Symbolic links are followed, but a folder is walked once however many links lead to it
//! (a link to `.` or to an ancestor would otherwise loop), and a file reached under several
//! names is read once, under the first name in sorted order. Special files (FIFOs, sockets,
//! devices) inside folders are skipped; named explicitly, they are an error.

use std::collections::HashSet;
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
    let mut seen = Seen::default();
    for input in inputs {
        if input.is_dir() {
            walk(input, &mut seen, &mut out)?;
        } else if input.is_file() {
            out.push(input.clone());
        } else if input.exists() {
            return Err(Error::io(
                "cannot read input",
                input,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a regular file or folder (a FIFO, socket or device); name regular \
                     files, folders or glob patterns",
                ),
            ));
        } else if is_pattern(input) {
            glob_files(input, &mut seen, &mut out)?;
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
    // The same file under several names (through links) is read once: keep the first name.
    let mut real = HashSet::new();
    out.retain(|p| real.insert(p.canonicalize().unwrap_or_else(|_| p.clone())));
    Ok(out)
}

/// Folders already walked, by their real path: a link back into one is not walked again.
#[derive(Default)]
struct Seen {
    folders: HashSet<PathBuf>,
}

impl Seen {
    /// Whether `dir` is walked for the first time (and marks it).
    fn first_visit(&mut self, dir: &Path) -> Result<bool> {
        let real = dir
            .canonicalize()
            .map_err(|e| Error::io("cannot resolve input folder", dir, e))?;
        Ok(self.folders.insert(real))
    }
}

/// Adds every non-hidden file under `dir`, recursively, in name order.
fn walk(dir: &Path, seen: &mut Seen, out: &mut Vec<PathBuf>) -> Result<()> {
    if !seen.first_visit(dir)? {
        return Ok(());
    }
    let mut entries = std::fs::read_dir(dir)
        .and_then(|entries| entries.collect::<std::io::Result<Vec<_>>>())
        .map_err(|e| Error::io("cannot list input folder", dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if is_hidden(&entry.file_name()) {
            continue;
        }
        let path = entry.path();
        // Follows symbolic links, like `is_dir` above; special files are skipped.
        if path.is_dir() {
            walk(&path, seen, out)?;
        } else if path.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

/// Adds every non-hidden file matching `pattern`; matched folders are walked.
fn glob_files(pattern: &Path, seen: &mut Seen, out: &mut Vec<PathBuf>) -> Result<()> {
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
            walk(&path, seen, out)?;
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

    #[cfg(unix)]
    #[test]
    fn links_are_followed_once_and_never_loop() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("a.txt"), "alpha\n").unwrap();
        std::fs::write(d.join("sub/b.txt"), "beta\n").unwrap();
        std::os::unix::fs::symlink(".", d.join("self")).unwrap();
        std::os::unix::fs::symlink("..", d.join("sub/up")).unwrap();
        std::os::unix::fs::symlink("a.txt", d.join("z-alias.txt")).unwrap();
        let files = list_files(std::slice::from_ref(&d), true).unwrap();
        assert_eq!(names(&d, files), ["a.txt", "sub/b.txt"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_special_file_named_as_input_is_an_error_that_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            return; // no mkfifo here: nothing to test against
        }
        let err = list_files(std::slice::from_ref(&fifo), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a regular file or folder"), "{err}");
        assert!(!err.contains("no such file"), "{err}");
        // Inside a folder it is skipped.
        std::fs::write(dir.path().join("a.txt"), "x\n").unwrap();
        let files = list_files(&[dir.path().to_path_buf()], true).unwrap();
        assert_eq!(names(dir.path(), files), ["a.txt"]);
    }

    #[test]
    fn owners_are_stable_and_in_range() {
        assert_eq!(owner("data/a.txt", 4), owner("data/a.txt", 4));
        assert!((0..100).all(|i| owner(&format!("f{i}"), 3) < 3));
        assert_eq!(owner("x", 0), 0);
    }
}
