//! Publishing a job's output folder only after success, and verifying keyed-count output.
//!
//! Part files are written into a hidden staging folder beside `--output`; when the job has
//! finished successfully the staging folder is renamed to `--output` (atomic on one file
//! system) with a `_SUCCESS` marker inside. A run killed halfway therefore never leaves a
//! partial folder under the output name. An existing output folder is replaced only if it
//! is a previous Weir output (has `_SUCCESS`) or is empty.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::jobs::expected_count;

/// The hidden staging folder for `output`.
pub fn staging_dir(output: &Path) -> Result<PathBuf> {
    let name = output
        .file_name()
        .with_context(|| format!("--output {} has no folder name", output.display()))?;
    let parent = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(parent.join(format!(".{}.inprogress", name.to_string_lossy())))
}

/// Checks that `output` may be (re)placed and prepares an empty staging folder.
pub fn prepare(output: &Path) -> Result<PathBuf> {
    if output.exists() {
        let is_ours = output.join("_SUCCESS").exists()
            || fs::read_dir(output)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
        if !output.is_dir() || !is_ours {
            bail!(
                "--output {} exists and is not a previous Weir output (no _SUCCESS marker); \
                 remove it or choose another folder",
                output.display()
            );
        }
    }
    let staging = staging_dir(output)?;
    if staging.exists() {
        fs::remove_dir_all(&staging)
            .with_context(|| format!("cannot clear the staging folder {}", staging.display()))?;
    }
    fs::create_dir_all(&staging).with_context(|| {
        format!(
            "cannot create the staging folder {} (is the output's parent folder writable?)",
            staging.display()
        )
    })?;
    Ok(staging)
}

/// Moves the finished staging folder into place as `output`.
pub fn publish(staging: &Path, output: &Path) -> Result<()> {
    fs::write(staging.join("_SUCCESS"), b"")
        .with_context(|| format!("cannot write {}", staging.join("_SUCCESS").display()))?;
    if output.exists() {
        fs::remove_dir_all(output)
            .with_context(|| format!("cannot replace the previous output {}", output.display()))?;
    }
    fs::rename(staging, output)
        .with_context(|| format!("cannot move {} to {}", staging.display(), output.display()))?;
    Ok(())
}

/// Reads every `key,value` line of the part files in `dir`.
pub fn read_pairs(dir: &Path) -> Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        })
        .collect();
    files.sort();
    for f in files {
        let text =
            fs::read_to_string(&f).with_context(|| format!("cannot read {}", f.display()))?;
        for (i, line) in text.lines().enumerate() {
            let (k, v) = line
                .rsplit_once(',')
                .with_context(|| format!("{}:{}: not a key,count line", f.display(), i + 1))?;
            let v: u64 = v.parse().with_context(|| {
                format!("{}:{}: count '{v}' is not a number", f.display(), i + 1)
            })?;
            out.push((k.to_string(), v));
        }
    }
    Ok(out)
}

/// Compares keyed-count output with the exact counts; `Ok(summary)` or `Err(mismatch)`.
pub fn verify_keyed_count(dir: &Path, events: u64, keys: u64) -> Result<Result<String, String>> {
    let pairs = read_pairs(dir)?;
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let mut problems = Vec::new();
    for (k, v) in &pairs {
        match k.parse::<u64>() {
            Ok(key) if key < keys => {
                if seen.insert(key, *v).is_some() {
                    problems.push(format!("key {key} appears twice"));
                }
            }
            _ => problems.push(format!("unexpected key '{k}'")),
        }
    }
    let (mut high, mut low, mut missing) = (0u64, 0u64, 0u64);
    for k in 0..keys.min(events) {
        let want = expected_count(events, keys, k);
        match seen.get(&k) {
            None => missing += 1,
            Some(&got) if got > want => high += 1,
            Some(&got) if got < want => low += 1,
            _ => {}
        }
        if problems.len() < 3 {
            if let Some(&got) = seen.get(&k) {
                if got != want {
                    problems.push(format!("key {k}: expected {want}, got {got}"));
                }
            }
        }
    }
    if problems.is_empty() && missing == 0 && high == 0 && low == 0 {
        Ok(Ok(format!("{} keys, every count exact", seen.len())))
    } else {
        Ok(Err(format!(
            "{high} keys too high, {low} too low, {missing} missing; {}",
            problems.into_iter().take(3).collect::<Vec<_>>().join("; ")
        )))
    }
}
