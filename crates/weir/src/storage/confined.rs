//! A local folder held open, written only relative to that open folder: a savepoint's own
//! folder inside the savepoint directory (issue 23).
//!
//! Guarantees:
//! * [`create_confined`] creates the savepoint's folder by walking from the *already
//!   opened* savepoint directory one component at a time (`mkdirat`, then `openat` with
//!   `O_NOFOLLOW | O_DIRECTORY`): a symbolic link anywhere below the savepoint directory,
//!   present when the request was checked or swapped in since, is refused, never followed;
//!   the folder itself must be new.
//! * Every later write goes through the folder's descriptor, component by component,
//!   refusing links the same way; renaming or replacing any folder on the path afterwards
//!   cannot send a file elsewhere.
//! * `_metadata` (written with [`StorageBackend::put_if_absent`], last) is refused when the
//!   folder's path no longer leads to the folder written (moved, or a link swapped in on the
//!   way): the savepoint then fails, and the path handed back never names anything outside.
//!
//! Everything else is [`super::local`]'s contract: temp name, fsync, rename, fsync the
//! folder; a dropped writer leaves nothing.

use std::fs::File;
use std::io::{self, Read};
use std::ops::Range;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::backend::{ObjectWriter, Ownership, StorageBackend};
use super::local::StagedFile;
use super::{io_err, StorageError, READ_HINT, WRITE_HINT};

/// The way out when a link or a moved folder stops a savepoint.
const CONFINED_HINT: &str = "savepoints stay inside the savepoint directory: remove the \
    symbolic link or name a real folder inside it, then take the savepoint again";

/// Folders are created `rwxrwxrwx` less the umask, as `create_dir_all` does.
const DIR_MODE: u32 = 0o777;
/// Files `rw-rw-rw-` less the umask, as `File::create` does.
const FILE_MODE: u32 = 0o666;

/// A folder held open by descriptor; keys are resolved below it without following links.
#[derive(Debug, Clone)]
pub(crate) struct ConfinedBackend {
    /// The savepoint's folder, held open.
    dir: Arc<OwnedFd>,
    /// Its path, as shown to the user and handed back for `--restore`.
    folder: PathBuf,
    /// The folder below it this backend is rooted at (`""`: the folder itself), '/'-ended.
    prefix: String,
}

/// Opens `base` (created if missing: it is the configured savepoint directory, trusted as
/// given) and creates `relative` below it without following any link on the way; the last
/// component must not exist yet. Returns the backend rooted at the new folder, shown as
/// `base/relative`.
pub(crate) fn create_confined(
    base: &Path,
    relative: &Path,
) -> Result<ConfinedBackend, StorageError> {
    let shown = base.join(relative);
    let hint = "check that the savepoint directory is writable";
    std::fs::create_dir_all(base).map_err(io_err("create savepoint directory", base, hint))?;
    let mut dir = rustix::fs::open(
        base,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err("open savepoint directory", base, hint)(e.into()))?;
    let names: Vec<&str> = relative
        .components()
        .map(|c| match c {
            std::path::Component::Normal(n) => n.to_str().ok_or(()),
            _ => Err(()),
        })
        .collect::<Result<_, ()>>()
        .map_err(|()| refused(&shown, "is not a plain relative path of folder names"))?;
    let Some((last, parents)) = names.split_last() else {
        return Err(refused(
            &shown,
            "names no folder below the savepoint directory",
        ));
    };
    let mut walked = base.to_path_buf();
    for name in parents {
        walked.push(name);
        dir = open_or_create_dir(&dir, name, &walked)?;
    }
    walked.push(last);
    match rustix::fs::mkdirat(&dir, *last, Mode::from_raw_mode(DIR_MODE)) {
        Ok(()) => {}
        Err(e) => return Err(io_err("create savepoint folder", &walked, hint)(e.into())),
    }
    let folder = open_dir(&dir, last, &walked)?;
    sync(&dir, walked.parent().unwrap_or(base))?;
    Ok(ConfinedBackend {
        dir: Arc::new(folder),
        folder: shown,
        prefix: String::new(),
    })
}

/// Opens the existing folder `relative` below `base` the way [`create_confined`] creates
/// one — from `base` opened first, one component at a time, refusing any symbolic link —
/// for a worker that writes into a savepoint folder its coordinator created (issue 24).
/// Neither `base` nor any folder is created here: a missing one means the worker does not
/// see the coordinator's savepoint directory.
#[cfg(feature = "cluster")]
pub(crate) fn open_confined(base: &Path, relative: &Path) -> Result<ConfinedBackend, StorageError> {
    let shown = base.join(relative);
    let hint = "give the coordinator and every worker on this host the same savepoint \
                directory (--savepoint-dir)";
    let mut dir = rustix::fs::open(
        base,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err("open savepoint directory", base, hint)(e.into()))?;
    let mut walked = base.to_path_buf();
    let mut any = false;
    for c in relative.components() {
        let std::path::Component::Normal(name) = c else {
            return Err(refused(
                &shown,
                "is not a plain relative path of folder names",
            ));
        };
        let name = (name.to_str()).ok_or_else(|| refused(&shown, "is not valid UTF-8"))?;
        walked.push(name);
        dir = open_dir(&dir, name, &walked)?;
        any = true;
    }
    if !any {
        return Err(refused(
            &shown,
            "names no folder below the savepoint directory",
        ));
    }
    Ok(ConfinedBackend {
        dir: Arc::new(dir),
        folder: shown,
        prefix: String::new(),
    })
}

/// The error for a path that would leave the folder, or a link on the way.
fn refused(path: &Path, why: &str) -> StorageError {
    StorageError::Io {
        op: "write savepoint",
        path: path.to_path_buf(),
        cause: io::Error::new(io::ErrorKind::PermissionDenied, why.to_string()),
        hint: CONFINED_HINT,
    }
}

/// Opens folder `name` in `dir` without following a link (`path` is for messages).
fn open_dir(dir: &OwnedFd, name: &str, path: &Path) -> Result<OwnedFd, StorageError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(dir, name, flags, Mode::empty()).map_err(|e| match e {
        // O_NOFOLLOW on a link gives ELOOP; O_DIRECTORY on a link to a file, ENOTDIR.
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => refused(
            path,
            "is a symbolic link or not a folder, and savepoints follow no links",
        ),
        e => io_err("open folder", path, WRITE_HINT)(e.into()),
    })
}

/// Creates folder `name` in `dir` if missing, then opens it without following a link.
fn open_or_create_dir(dir: &OwnedFd, name: &str, path: &Path) -> Result<OwnedFd, StorageError> {
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(DIR_MODE)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => open_dir(dir, name, path),
        Err(e) => Err(io_err("create folder", path, WRITE_HINT)(e.into())),
    }
}

/// Makes the entries of the open folder `dir` durable.
fn sync(dir: &OwnedFd, path: &Path) -> Result<(), StorageError> {
    rustix::fs::fsync(dir).map_err(|e| io_err("fsync directory", path, WRITE_HINT)(e.into()))
}

impl ConfinedBackend {
    /// The folder holding `key`'s object (created if `create`) and the object's name.
    fn parent_of(&self, key: &str, create: bool) -> Result<(Arc<OwnedFd>, String), StorageError> {
        let full = format!("{}{key}", self.prefix);
        let mut parts: Vec<&str> = full.split('/').collect();
        let name = parts.pop().unwrap_or_default().to_string();
        if name.is_empty()
            || full
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(refused(
                &self.describe(key),
                "is not a key below the folder",
            ));
        }
        let mut dir = self.dir.clone();
        let mut path = self.folder.clone();
        for part in parts {
            path.push(part);
            let next = if create {
                open_or_create_dir(&dir, part, &path)?
            } else {
                open_dir(&dir, part, &path)?
            };
            dir = Arc::new(next);
        }
        Ok((dir, name))
    }

    /// The open folder `prefix` (the root for `""`), or `None` if there is none.
    fn open_folder(&self, prefix: &str) -> Result<Option<Arc<OwnedFd>>, StorageError> {
        if prefix.is_empty() && self.prefix.is_empty() {
            return Ok(Some(self.dir.clone()));
        }
        let prefix = prefix.trim_end_matches('/');
        let (parent, name) = match self.parent_of(prefix, false) {
            Ok(found) => found,
            Err(StorageError::Io { cause, .. }) if cause.kind() == io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        match open_dir(&parent, &name, &self.describe(prefix)) {
            Ok(fd) => Ok(Some(Arc::new(fd))),
            Err(StorageError::Io { cause, .. }) if cause.kind() == io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Opens object `key` for reading, refusing a link.
    fn open_file(&self, key: &str) -> Result<File, StorageError> {
        let (dir, name) = self.parent_of(key, false)?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat(&*dir, name.as_str(), flags, Mode::empty())
            .map(File::from)
            .map_err(|e| io_err("read", &self.describe(key), READ_HINT)(e.into()))
    }

    /// Whether `shown` still leads to the folder held open: a folder on the path renamed,
    /// or replaced by a symbolic link, since the savepoint began would make the path handed
    /// back name something else.
    fn still_where_shown(&self) -> bool {
        let Ok(at_path) = std::fs::metadata(&self.folder) else {
            return false;
        };
        rustix::fs::fstat(&*self.dir)
            .is_ok_and(|held| held.st_dev == at_path.dev() && held.st_ino == at_path.ino())
    }
}

/// A file being written under a temp name in an open folder.
struct ConfinedWriter {
    staged: StagedFile,
    dir: Arc<OwnedFd>,
    tmp: String,
    name: String,
}

impl ObjectWriter for ConfinedWriter {
    fn write(&mut self, bytes: &[u8]) -> Result<(), StorageError> {
        self.staged.write(bytes)
    }

    fn commit(mut self: Box<Self>, head: &[u8]) -> Result<(), StorageError> {
        if !self.staged.finish(head)? {
            return Ok(());
        }
        let shown = self.staged.shown().to_path_buf();
        rustix::fs::renameat(
            &*self.dir,
            self.tmp.as_str(),
            &*self.dir,
            self.name.as_str(),
        )
        .map_err(|e| io_err("rename temporary file to", &shown, WRITE_HINT)(e.into()))?;
        self.tmp.clear();
        let folder = shown.parent().unwrap_or(&shown).to_path_buf();
        sync(&self.dir, &folder)
    }
}

impl Drop for ConfinedWriter {
    fn drop(&mut self) {
        if !self.tmp.is_empty() {
            let _ = rustix::fs::unlinkat(&*self.dir, self.tmp.as_str(), AtFlags::empty());
        }
    }
}

impl StorageBackend for ConfinedBackend {
    fn describe(&self, key: &str) -> PathBuf {
        let below = format!("{}{key}", self.prefix);
        let below = below.trim_end_matches('/');
        if below.is_empty() {
            self.folder.clone()
        } else {
            self.folder.join(below)
        }
    }

    fn sub(&self, prefix: &str) -> Box<dyn StorageBackend> {
        let prefix = prefix.trim_matches('/');
        Box::new(ConfinedBackend {
            prefix: match prefix.is_empty() {
                true => self.prefix.clone(),
                false => format!("{}{prefix}/", self.prefix),
            },
            ..self.clone()
        })
    }

    fn put(&self, key: &str) -> Result<Box<dyn ObjectWriter>, StorageError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let (dir, name) = self.parent_of(key, true)?;
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = format!(".{name}.tmp-{}-{n}", std::process::id());
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let file = rustix::fs::openat(&*dir, tmp.as_str(), flags, Mode::from_raw_mode(FILE_MODE))
            .map_err(|e| {
            io_err("create temporary file", &self.describe(key), WRITE_HINT)(e.into())
        })?;
        Ok(Box::new(ConfinedWriter {
            staged: StagedFile::new(File::from(file), self.describe(key)),
            dir,
            tmp,
            name,
        }))
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        // The last write of a savepoint (`_metadata`): only if the folder is still where
        // its path says, so the path handed back names what was written.
        if !self.still_where_shown() {
            return Err(refused(
                &self.folder,
                "was moved, or a folder on its path was replaced by a symbolic link, while \
                 the savepoint was written",
            ));
        }
        let (dir, name) = self.parent_of(key, true)?;
        match rustix::fs::statat(&*dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => {
                let exists = io::ErrorKind::AlreadyExists.into();
                let hint = "checkpoint ids must not be reused; discard the checkpoint first";
                return Err(io_err(
                    "overwrite complete checkpoint",
                    &self.describe(key),
                    hint,
                )(exists));
            }
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(io_err("write", &self.describe(key), WRITE_HINT)(e.into())),
        }
        let mut w = self.put(key)?;
        w.write(bytes)?;
        w.commit(&[])
    }

    fn size(&self, key: &str) -> Result<u64, StorageError> {
        let path = self.describe(key);
        let (dir, name) = self.parent_of(key, false)?;
        match rustix::fs::statat(&*dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
                Ok(st.st_size as u64)
            }
            Ok(_) => Err(io_err("read", &path, READ_HINT)(
                io::ErrorKind::NotFound.into(),
            )),
            Err(e) => Err(io_err("read", &path, READ_HINT)(e.into())),
        }
    }

    fn get(&self, key: &str, range: Option<Range<u64>>) -> Result<Vec<u8>, StorageError> {
        let mut file = self.open_file(key)?;
        let err = |e| io_err("read", &self.describe(key), READ_HINT)(e);
        match range {
            None => {
                let mut out = Vec::new();
                file.read_to_end(&mut out).map_err(err)?;
                Ok(out)
            }
            Some(r) => {
                let mut buf = vec![0; r.end.saturating_sub(r.start) as usize];
                file.read_exact_at(&mut buf, r.start).map_err(err)?;
                Ok(buf)
            }
        }
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.open_file(key)?
            .read_exact_at(buf, offset)
            .map_err(io_err("read", &self.describe(key), READ_HINT))
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let Some(dir) = self.open_folder(prefix)? else {
            return Ok(Vec::new());
        };
        let path = self.describe(prefix);
        let hint = "check that the savepoint folder is readable";
        let err = |e: rustix::io::Errno| io_err("list savepoint folder", &path, hint)(e.into());
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(dir.as_fd()).map_err(err)? {
            let entry = entry.map_err(err)?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.extend(std::str::from_utf8(name).ok().map(str::to_string));
            }
        }
        Ok(names)
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        let hint = "check the folder's permissions; it can also be removed by hand";
        let (dir, name) = match self.parent_of(key, false) {
            Ok(found) => found,
            Err(StorageError::Io { cause, .. }) if cause.kind() == io::ErrorKind::NotFound => {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        match rustix::fs::unlinkat(&*dir, name.as_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(io_err("remove", &self.describe(key), hint)(e.into())),
        }
    }

    fn delete_all(&self, prefix: &str) -> Result<(), StorageError> {
        // Only what this backend wrote: objects and the folders holding them, no link.
        for name in self.list(prefix)? {
            let key = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let (dir, last) = self.parent_of(&key, false)?;
            match rustix::fs::statat(&*dir, last.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                    self.delete_all(&key)?;
                }
                _ => self.delete(&key)?,
            }
        }
        if !prefix.is_empty() {
            if let Ok((dir, last)) = self.parent_of(prefix, false) {
                let _ = rustix::fs::unlinkat(&*dir, last.as_str(), AtFlags::REMOVEDIR);
            }
        }
        Ok(())
    }

    fn folder_problem(&self) -> Result<Option<&'static str>, StorageError> {
        Ok(None)
    }

    fn take_ownership(&self) -> Result<Ownership, StorageError> {
        // A savepoint's folder is new and this run's alone (created with mkdirat).
        Ok(Box::new(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_stay_in_the_folder_held_open() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("sp");
        let b = create_confined(&base, Path::new("nightly/savepoint-1")).unwrap();
        let mut w = b.put("count/kg-0").unwrap();
        w.write(b"xxhello").unwrap();
        w.commit(b"ab").unwrap();
        b.put_if_absent("_metadata", b"meta").unwrap();
        assert!(b.put_if_absent("_metadata", b"again").is_err());
        let folder = base.join("nightly/savepoint-1");
        assert_eq!(
            std::fs::read(folder.join("count/kg-0")).unwrap(),
            b"abhello"
        );
        assert_eq!(b.get("count/kg-0", Some(2..4)).unwrap(), b"he");
        assert_eq!(b.size("_metadata").unwrap(), 4);
        let mut names = b.list("").unwrap();
        names.sort();
        assert_eq!(names, ["_metadata", "count"]);
        // The folder must be new.
        assert!(create_confined(&base, Path::new("nightly/savepoint-1")).is_err());
        b.delete_all("").unwrap();
        assert!(b.list("").unwrap().is_empty());
    }

    #[test]
    fn a_symbolic_link_on_the_way_is_refused_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("sp");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, base.join("link")).unwrap();
        let e = create_confined(&base, Path::new("link/savepoint-1")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(create_confined(&base, Path::new("link")).is_err());
        assert!(create_confined(&base, Path::new("../x")).is_err());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[test]
    fn a_folder_swapped_for_a_link_mid_write_keeps_files_inside_and_fails_the_metadata() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("sp");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let b = create_confined(&base, Path::new("sub/savepoint-1")).unwrap();
        // Swap `sub` for a link to `outside` while the savepoint is being written.
        std::fs::rename(base.join("sub"), base.join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, base.join("sub")).unwrap();
        let mut w = b.put("count/kg-0").unwrap();
        w.write(b"state").unwrap();
        w.commit(&[]).unwrap();
        let e = b.put_if_absent("_metadata", b"meta").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        let kept = base.join("moved/savepoint-1/count/kg-0");
        assert_eq!(std::fs::read(kept).unwrap(), b"state");
    }
}
