//! Output folders published only after success ([`Job::output`](super::Job::output)).
//!
//! Part files are written into a hidden staging folder beside the output; when the job has
//! finished successfully the staging folder is renamed to the output's name (atomic on one
//! file system) with a `_SUCCESS` marker inside. A run killed halfway therefore never leaves
//! a partial folder under the output name. An existing output folder is replaced only if it
//! is a previous Weir output (has `_SUCCESS`) or is empty.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

/// An exclusive lock on one output folder, held by a run from before it touches the
/// staging folder until it ends. Without it a second run given the same `--output` would
/// clear the first run's staging folder (its pending and committed part files) before
/// being refused elsewhere. The lock file (`.<name>.lock` beside the output) stays behind
/// on purpose: deleting a lock file while others may have it open lets two runs lock two
/// different files of one name. The operating system releases the lock when the process
/// dies, so a SIGKILLed run leaves nothing to clean up.
#[derive(Debug)]
pub(crate) struct OutputLock {
    _file: File,
}

/// Takes `output`'s [`OutputLock`], or names the process holding it.
pub(crate) fn lock(output: &Path) -> Result<OutputLock, String> {
    let staging = staging_dir(output)?;
    let name = staging
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .trim_end_matches(".inprogress")
                .to_string()
        })
        .unwrap_or_default();
    let path = staging.with_file_name(format!("{name}.lock"));
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| {
            format!(
                "cannot create the output's parent folder {}: {e}",
                parent.display()
            )
        })?;
    }
    use crate::storage::local::{lock_file, FileLockError};
    let file = lock_file(&path).map_err(|e| match e {
        FileLockError::Held(holder) => format!(
            "the output folder {} is being written by another run ({}); wait for it to end, \
             stop it, or choose another --output",
            output.display(),
            if holder.is_empty() {
                "another process"
            } else {
                &holder
            }
        ),
        FileLockError::Io("open the lock file", e) => format!(
            "cannot open the output lock file {}: {e} (is the output's parent folder writable?)",
            path.display()
        ),
        FileLockError::Io(what, e) => format!("cannot {what} {}: {e}", path.display()),
    })?;
    Ok(OutputLock { _file: file })
}

/// The hidden staging folder for `output`.
pub(crate) fn staging_dir(output: &Path) -> Result<PathBuf, String> {
    let name = output
        .file_name()
        .ok_or_else(|| format!("the output {} has no folder name", output.display()))?;
    let parent = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(parent.join(format!(".{}.inprogress", name.to_string_lossy())))
}

/// Checks that `output` may be (re)placed and prepares an empty staging folder.
pub(crate) fn prepare(output: &Path) -> Result<PathBuf, String> {
    if output.exists() {
        let is_ours = output.join("_SUCCESS").exists()
            || fs::read_dir(output)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
        if !output.is_dir() || !is_ours {
            return Err(format!(
                "the output folder {} exists and is not a previous Weir output (no _SUCCESS marker); \
                 remove it or choose another folder",
                output.display()
            ));
        }
    }
    let staging = staging_dir(output)?;
    if staging.exists() {
        fs::remove_dir_all(&staging)
            .map_err(|e| format!("cannot clear the staging folder {}: {e}", staging.display()))?;
    }
    fs::create_dir_all(&staging).map_err(|e| {
        format!(
            "cannot create the staging folder {}: {e} (is the output's parent folder writable?)",
            staging.display()
        )
    })?;
    Ok(staging)
}

/// [`prepare`], except that a run that restores keeps the staging folder it finds (the
/// output of the runs it continues); it is created when missing.
///
/// A restoring run whose staging folder is gone because a finished run published `output`
/// is refused before anything is touched: the restored checkpoint's pre-committed output
/// was committed into that staging folder and moved (or merged) into the published one,
/// so the restore could only fail to find it, and a success would replace the published
/// output with one that lacks it.
pub(crate) fn prepare_resumable(output: &Path, restoring: bool) -> Result<PathBuf, String> {
    let staging = staging_dir(output)?;
    if restoring && !staging.is_dir() && output.join("_SUCCESS").exists() {
        return Err(format!(
            "cannot resume into {}: a run that finished published it, and a restore continues \
             an unfinished run's output from its staging folder {}, which publishing moved \
             into it. The published output stays as it is; run without --restore to compute \
             it again (it is replaced when that run succeeds), or restore a checkpoint of a run \
             that has not finished",
            output.display(),
            staging.display()
        ));
    }
    if !(restoring && staging.is_dir()) {
        return prepare(output);
    }
    // Same check on the final folder as a fresh start: it is replaced on success.
    if output.exists() && !output.join("_SUCCESS").exists() {
        let empty = fs::read_dir(output)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
        if !empty {
            return Err(format!(
                "the output folder {} exists and is not a previous Weir output (no _SUCCESS \
                 marker); remove it or choose another folder",
                output.display()
            ));
        }
    }
    Ok(staging)
}

/// Moves the finished staging folder into place as `output`.
pub(crate) fn publish(staging: &Path, output: &Path) -> Result<(), String> {
    let marker = staging.join("_SUCCESS");
    fs::write(&marker, b"").map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    if output.exists() {
        fs::remove_dir_all(output).map_err(|e| {
            format!(
                "cannot replace the previous output {}: {e}",
                output.display()
            )
        })?;
    }
    fs::rename(staging, output).map_err(|e| {
        format!(
            "cannot move {} to {}: {e}",
            staging.display(),
            output.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_locked_output_is_refused_naming_the_holder_and_its_staging_is_left_alone() {
        let tmp = std::env::temp_dir().join(format!("weir-output-lock-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let out = tmp.join("out");
        let held = lock(&out).unwrap();
        let staging = prepare(&out).unwrap();
        fs::write(staging.join("part-0"), "a").unwrap();
        let err = lock(&out).unwrap_err();
        assert!(err.contains("is being written by another run"), "{err}");
        assert!(
            err.contains(&format!("process {}", std::process::id())),
            "{err}"
        );
        assert!(staging.join("part-0").exists());
        drop(held);
        // Released with its holder: the next run takes it.
        let _again = lock(&out).unwrap();
        fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn publishes_only_over_a_previous_output() {
        let tmp = std::env::temp_dir().join(format!("weir-output-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(tmp.join("foreign")).unwrap();
        fs::write(tmp.join("foreign/notes"), "x").unwrap();
        assert!(prepare(&tmp.join("foreign"))
            .unwrap_err()
            .contains("_SUCCESS"));
        let out = tmp.join("out");
        let staging = prepare(&out).unwrap();
        assert_eq!(staging, tmp.join(".out.inprogress"));
        fs::write(staging.join("part-0"), "a").unwrap();
        publish(&staging, &out).unwrap();
        assert!(out.join("_SUCCESS").exists() && !staging.exists());
        // A second run may replace it.
        let staging = prepare(&out).unwrap();
        publish(&staging, &out).unwrap();
        assert!(!out.join("part-0").exists());
        fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_restoring_run_keeps_the_resumable_staging_folder() {
        let tmp = std::env::temp_dir().join(format!("weir-resumable-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let out = tmp.join("out");
        let staging = prepare_resumable(&out, false).unwrap();
        fs::write(staging.join("part-0"), "a").unwrap();
        // A restoring run continues it; a fresh one starts empty.
        let again = prepare_resumable(&out, true).unwrap();
        assert_eq!(again, staging);
        assert!(staging.join("part-0").exists());
        prepare_resumable(&out, false).unwrap();
        assert!(!staging.join("part-0").exists());
        fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_restore_into_a_published_output_is_refused_and_leaves_it_alone() {
        let tmp = std::env::temp_dir().join(format!("weir-published-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let out = tmp.join("out");
        let staging = prepare_resumable(&out, false).unwrap();
        fs::write(staging.join("part-0"), "a").unwrap();
        publish(&staging, &out).unwrap();
        let err = prepare_resumable(&out, true).unwrap_err();
        assert!(
            err.contains("a run that finished published it") && err.contains("without --restore"),
            "{err}"
        );
        assert!(out.join("part-0").exists() && out.join("_SUCCESS").exists());
        assert!(!staging.exists());
        // A fresh run may still replace it.
        prepare_resumable(&out, false).unwrap();
        fs::remove_dir_all(&tmp).unwrap();
    }
}
