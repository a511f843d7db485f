//! Where the tests keep their checkpoints: a local temp folder, or with
//! `WEIR_TEST_CHECKPOINT_DIR=s3` (`scripts/test-s3.sh`) its twin prefix in a bucket of the
//! moto server the test process starts on loopback. Shared (`#[path]`-included) by the
//! helpers of the engine's tests, the CLI's and the connectors', so every crate names a
//! test folder's S3 twin the same way. The including module must have the `moto` module
//! (`support/moto.rs`) beside this one.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use weir::storage::backend::StorageBackend;

use super::moto;

/// The environment variable that sends the tests' checkpoints to S3: `s3` makes every
/// test folder handed to [`checkpoint_dir`] a fresh prefix in a bucket of a moto server
/// the test process starts on loopback, whose `AWS_*` settings child processes inherit
/// (needs weir's `s3` feature and `moto_server`). Unset or `local`: the local folder.
pub const CHECKPOINT_DIR_VAR: &str = "WEIR_TEST_CHECKPOINT_DIR";

/// Whether this test run keeps its checkpoints on S3 (see [`CHECKPOINT_DIR_VAR`]).
pub fn on_s3() -> bool {
    match std::env::var(CHECKPOINT_DIR_VAR).as_deref() {
        Ok("s3") => true,
        Ok("") | Ok("local") | Err(_) => false,
        Ok(other) => panic!("{CHECKPOINT_DIR_VAR}={other}: use s3 or local"),
    }
}

/// The bucket of the tests' checkpoints on S3.
// (Its name must not contain the PostgreSQL tests' password, `weir-test`: they check that
// no output shows it, and checkpoint paths are in the run summaries.)
const TEST_BUCKET: &str = "checkpoints-under-test";

/// Where a test whose scratch folder is `dir` keeps its checkpoints: `dir` itself, or with
/// `WEIR_TEST_CHECKPOINT_DIR=s3` the prefix named after it in the tests' bucket (the same
/// prefix for the same `dir`, so a test's later runs and checks find its checkpoints). A
/// location that already names its storage (`mem://…`, `s3://…`) is kept as it is, so a
/// child process handed the parent's location starts no server of its own.
pub fn checkpoint_dir(dir: &Path) -> PathBuf {
    if !on_s3() || dir.to_string_lossy().contains("://") {
        return dir.to_path_buf();
    }
    static BUCKET: std::sync::Once = std::sync::Once::new();
    BUCKET.call_once(|| moto::make_bucket(TEST_BUCKET));
    let name: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    PathBuf::from(format!("s3://{TEST_BUCKET}/{}", name.trim_matches('-')))
}

/// `rate` records per second for a paced input whose run must outlast several
/// checkpoints (failures that wait for a checkpoint): a third of it on S3, where each
/// checkpoint takes several requests to a loopback server instead of a few local writes.
pub fn paced(rate: f64) -> f64 {
    if on_s3() {
        rate / 3.0
    } else {
        rate
    }
}

/// Ids of the complete checkpoints (`chk-<n>` holding `_metadata`) of the job folder at
/// `location` (a local path or an `s3://` URL), ascending; empty if there is none yet.
pub fn complete_checkpoint_ids(location: &Path) -> Vec<u64> {
    let Ok(store) = weir::storage::open_backend(location) else {
        return Vec::new();
    };
    let mut ids: Vec<u64> = store
        .list("")
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.strip_prefix("chk-")?.parse().ok())
        .filter(|id| store.size(&format!("chk-{id}/_metadata")).is_ok())
        .collect();
    ids.sort_unstable();
    ids
}

/// On S3, a run killed with SIGKILL keeps its lease on the job folder until it expires
/// (`WEIR_S3_LEASE_SECONDS`, 3 s in the tests), and a run started before is refused: wait
/// that long. Locally the lock dies with the process: nothing to wait for.
pub fn wait_for_dead_lease() {
    if on_s3() {
        std::thread::sleep(Duration::from_millis(3_500));
    }
}

/// The backend rooted at the folder holding `path` and `path`'s name in it, for
/// [`read_object`] and [`write_object`].
pub fn parent_backend(path: &Path) -> (Box<dyn StorageBackend>, String) {
    let parent = path.parent().expect("a file path has a folder");
    let name = path.file_name().expect("a file name").to_string_lossy();
    (
        weir::storage::open_backend(parent).unwrap(),
        name.into_owned(),
    )
}

/// The bytes of the checkpoint file at `path` (a local path or an `s3://` URL).
pub fn read_object(path: &Path) -> Vec<u8> {
    let (backend, name) = parent_backend(path);
    backend.get(&name, None).unwrap()
}

/// Replaces the checkpoint file at `path` (a local path or an `s3://` URL) with `bytes`,
/// as a damaged disk or a careless hand would.
pub fn write_object(path: &Path, bytes: &[u8]) {
    let (backend, name) = parent_backend(path);
    let mut w = backend.put(&name).unwrap();
    w.write(bytes).unwrap();
    w.commit(&[]).unwrap();
}

/// Whether the checkpoint file at `path` (a local path or an `s3://` URL) exists.
pub fn is_object(path: &Path) -> bool {
    let (backend, name) = parent_backend(path);
    backend.size(&name).is_ok()
}

/// The names directly under the folder `path` (a local path or an `s3://` URL), sorted.
pub fn list_folder(path: &Path) -> Vec<String> {
    let mut names = weir::storage::open_backend(path).unwrap().list("").unwrap();
    names.sort();
    names
}
