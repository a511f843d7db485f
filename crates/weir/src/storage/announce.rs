//! A worker's side of where a checkpoint's files go (issue 24, docs/cluster.md).
//!
//! On a cluster the coordinator decides where checkpoint `id` is written: `chk-<id>` of the
//! job folder, or — for a savepoint — a folder of its own that the coordinator created once
//! inside the job's savepoint directory. Its Trigger tells every worker of the attempt
//! ([`CheckpointStorage::announce`]). A barrier may reach a worker through the exchange
//! before that Trigger does, so a worker's writers wait for the announcement
//! ([`CheckpointStorage::write_target`]) before they write a file of the checkpoint: a
//! savepoint's files never land in the job folder, and never outside the savepoint
//! directory (the folder is opened from that directory without following a link, as the
//! coordinator created it).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::backend::StorageBackend;
use super::{confined, is_remote, open_backend, relative_to, CheckpointStorage, StorageError};

/// How long a writer waits for its coordinator's Trigger once the barrier reached it. The
/// Trigger left the coordinator before any source injected the barrier, so it normally
/// arrives within milliseconds; a coordinator silent this long is lost by its heartbeats
/// well before (the worker then stops), so this only bounds a writer that would otherwise
/// wait forever.
const ANNOUNCE_WAIT: Duration = Duration::from_secs(60);

/// How many of the newest announced ids a worker remembers (older ones are long written).
const REMEMBERED: usize = 1024;

/// The checkpoint ids a worker's coordinator announced, each with why its folder could
/// not be opened (if it could not); see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Announcements {
    ids: Mutex<BTreeMap<u64, Option<String>>>,
    arrived: Condvar,
}

/// What a writer found when it waited for an announcement.
#[derive(Debug, PartialEq, Eq)]
enum Heard {
    /// Announced: the files go where the storage says.
    Ready,
    /// Announced, but this worker could not open the savepoint's folder (why).
    Unwritable(String),
    /// Not announced within the wait.
    Nothing,
}

impl Announcements {
    /// Waits until `id` is announced, at most `wait`.
    fn wait(&self, id: u64, wait: Duration) -> Heard {
        let deadline = Instant::now() + wait;
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match ids.get(&id) {
                Some(None) => return Heard::Ready,
                Some(Some(why)) => return Heard::Unwritable(why.clone()),
                None => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Heard::Nothing;
            }
            ids = (self.arrived.wait_timeout(ids, left))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn add(&self, id: u64, failed: Option<String>) {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        ids.insert(id, failed);
        while ids.len() > REMEMBERED {
            ids.pop_first();
        }
        self.arrived.notify_all();
    }
}

impl CheckpointStorage {
    /// Records where checkpoint `id` goes, as the coordinator's Trigger named it: `None`,
    /// the job folder; `Some(folder)`, a savepoint's folder the coordinator created inside
    /// the savepoint directory `base`. A local folder is opened from `base` one component
    /// at a time without following a link (it must exist: the coordinator made it); a
    /// folder outside `base` is refused. Writers waiting for `id` go on once it returns —
    /// when it fails, to fail their snapshot with the same cause (never to write the
    /// savepoint's files elsewhere).
    pub fn announce(
        &self,
        id: u64,
        base: &Path,
        folder: Option<&Path>,
    ) -> Result<(), StorageError> {
        let joined = folder.map(|f| join_savepoint(base, f)).transpose();
        let failed = match joined {
            Ok(Some((folder, backend))) => {
                (self.redirects.lock().unwrap_or_else(|p| p.into_inner()))
                    .insert(id, (folder, backend));
                None
            }
            Ok(None) => None,
            Err(e) => Some(e),
        };
        if let Some(a) = &self.announced {
            a.add(id, failed.as_ref().map(ToString::to_string));
        }
        failed.map_or(Ok(()), Err)
    }

    /// The savepoint folder checkpoint `id` is redirected to, if it is; what the
    /// coordinator's Trigger names for its workers.
    pub fn redirected(&self, id: u64) -> Option<PathBuf> {
        let redirects = self.redirects.lock().unwrap_or_else(|p| p.into_inner());
        redirects.get(&id).map(|(folder, _)| folder.clone())
    }

    /// On a worker (a storage from [`CheckpointStorage::join`]), waits for the
    /// coordinator's announcement of checkpoint `id` before a file of it is written; see
    /// the module docs.
    pub(super) fn await_announced(&self, id: u64) -> Result<(), StorageError> {
        let Some(a) = &self.announced else {
            return Ok(());
        };
        let (kind, why) = match a.wait(id, ANNOUNCE_WAIT) {
            Heard::Ready => return Ok(()),
            Heard::Unwritable(why) => (io::ErrorKind::Other, why),
            Heard::Nothing => (
                io::ErrorKind::TimedOut,
                format!(
                    "the coordinator's Trigger of checkpoint {id}, which names where its \
                     files go, did not arrive within {ANNOUNCE_WAIT:?}"
                ),
            ),
        };
        Err(StorageError::Io {
            op: "write checkpoint",
            path: self.checkpoint_path(id),
            cause: io::Error::new(kind, why),
            hint: "check that the coordinator is running and that this worker reaches its \
                   checkpoint and savepoint directories",
        })
    }
}

/// Opens savepoint folder `folder` (inside `base`) that the coordinator created.
fn join_savepoint(
    base: &Path,
    folder: &Path,
) -> Result<(PathBuf, Arc<dyn StorageBackend>), StorageError> {
    if is_remote(folder) {
        let backend: Arc<dyn StorageBackend> = Arc::from(open_backend(folder)?);
        return Ok((folder.to_path_buf(), backend));
    }
    let relative = relative_to(base, folder).ok_or_else(|| StorageError::Io {
        op: "open savepoint folder",
        path: folder.to_path_buf(),
        cause: io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "it is not inside this worker's savepoint directory {}",
                base.display()
            ),
        ),
        hint: "give the coordinator and every worker the same absolute --savepoint-dir \
               (and --checkpoint-dir)",
    })?;
    let backend = confined::open_confined(base, &relative)?;
    Ok((folder.to_path_buf(), Arc::new(backend)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::FileKind;

    #[test]
    fn a_writer_waits_for_the_announcement_of_its_checkpoint() {
        let a = Arc::new(Announcements::default());
        assert_eq!(a.wait(3, Duration::ZERO), Heard::Nothing);
        let waiter = {
            let a = a.clone();
            std::thread::spawn(move || a.wait(3, Duration::from_secs(3600)))
        };
        a.add(2, None);
        a.add(3, None);
        assert_eq!(waiter.join().unwrap(), Heard::Ready);
        assert_eq!(a.wait(2, Duration::ZERO), Heard::Ready);
        a.add(4, Some("no such folder".into()));
        assert_eq!(
            a.wait(4, Duration::ZERO),
            Heard::Unwritable("no such folder".into())
        );
    }

    /// A worker's files of a savepoint land in the folder the coordinator created, once
    /// announced; a checkpoint's in the job folder; a folder outside the savepoint
    /// directory, or reached through a symbolic link, is refused and fails the writes.
    #[test]
    fn a_worker_writes_a_savepoint_into_the_coordinators_folder_and_nowhere_else() {
        let tmp = tempfile::tempdir().unwrap();
        let (ckpt, sp) = (tmp.path().join("ckpt"), tmp.path().join("sp"));
        let coordinator = CheckpointStorage::open(&ckpt, "job").unwrap();
        let folder = sp.join("savepoint-job-7");
        coordinator.redirect(7, &sp, folder.clone()).unwrap();
        assert_eq!(coordinator.redirected(7), Some(folder.clone()));
        assert_eq!(coordinator.redirected(6), None);
        let worker = CheckpointStorage::join(&ckpt, "job", coordinator.run_id()).unwrap();
        // The barrier came first: the writer waits for the Trigger.
        let writer = {
            let w = worker.clone();
            std::thread::spawn(move || {
                w.write_state_file(7, "count", "s-0", FileKind::OperatorState, b"x")
            })
        };
        worker.announce(7, &sp, Some(&folder)).unwrap();
        writer.join().unwrap().unwrap();
        assert!(folder.join("count/s-0").is_file());
        assert!(!ckpt.join("job/chk-7").exists());
        worker.announce(8, &sp, None).unwrap();
        (worker.write_state_file(8, "count", "s-0", FileKind::OperatorState, b"x")).unwrap();
        assert!(ckpt.join("job/chk-8/count/s-0").is_file());

        // Outside the savepoint directory: refused, and the writes fail with the cause.
        let outside = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        let e = worker
            .announce(9, &sp, Some(&outside))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not inside this worker's savepoint directory"),
            "{e}"
        );
        let e = (worker.write_state_file(9, "count", "s-0", FileKind::OperatorState, b"x"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not inside"), "{e}");
        assert!(!ckpt.join("job/chk-9").exists());

        // A link swapped in for the folder is not followed.
        std::os::unix::fs::symlink(&outside, sp.join("savepoint-job-10")).unwrap();
        let e = (worker.announce(10, &sp, Some(&sp.join("savepoint-job-10"))))
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[test]
    fn only_the_newest_ids_are_remembered() {
        let a = Announcements::default();
        for id in 0..(REMEMBERED as u64 + 5) {
            a.add(id, None);
        }
        assert_eq!(a.wait(4, Duration::ZERO), Heard::Nothing);
        assert_eq!(a.wait(5, Duration::ZERO), Heard::Ready);
    }
}
