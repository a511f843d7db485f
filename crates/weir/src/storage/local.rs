//! The local file system behind [`StorageBackend`]: today's layout and guarantees, byte for
//! byte (temp name in the same folder, fsync, rename, fsync the folder), and an OS lock
//! as the job folder's owner.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::backend::{ObjectWriter, Ownership, StorageBackend};
use super::{io_err, temp_path, StorageError, LOCK_FILE_NAME, READ_HINT, WRITE_HINT};

/// A folder on a local disk.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    root: PathBuf,
}

impl LocalBackend {
    /// The backend rooted at `root` (nothing is created until written).
    pub fn new(root: PathBuf) -> Self {
        LocalBackend { root }
    }

    fn path(&self, key: &str) -> PathBuf {
        if key.is_empty() {
            self.root.clone()
        } else {
            self.root.join(key)
        }
    }
}

/// Size of the write buffer of a streamed file.
const STREAM_BUFFER: usize = 1 << 20;

/// Bytes a staged file writes between two releases of its page cache ([`StagedFile::write`]).
const RELEASE_EVERY: u64 = 8 << 20;

/// The part of writing a file that the local and the confined writer share: the bytes stream
/// into a buffered temporary file, then the head is written over its start and the whole file
/// is made durable. Only the rename that publishes it differs (a path rename here, `renameat`
/// against an open folder in `confined.rs`), so that is all each writer keeps for itself.
pub(super) struct StagedFile {
    /// `None` once finished, so a second finish (or the writer's drop) does nothing.
    out: Option<BufWriter<File>>,
    /// The path the errors name.
    shown: PathBuf,
    /// Bytes written, and the offset up to which the page cache was released.
    written: u64,
    released: u64,
}

impl StagedFile {
    /// Stages into `file`; errors name `shown`.
    pub(super) fn new(file: File, shown: PathBuf) -> Self {
        Self {
            out: Some(BufWriter::with_capacity(STREAM_BUFFER, file)),
            shown,
            written: 0,
            released: 0,
        }
    }

    /// The path the errors name.
    pub(super) fn shown(&self) -> &Path {
        &self.shown
    }

    /// Appends `bytes` (nothing once finished). Every [`RELEASE_EVERY`] bytes it writes the
    /// file's dirty pages out and drops them from the page cache: a checkpoint file of a
    /// state larger than memory would otherwise sit in the page cache dirty until the final
    /// fsync, and dirty page cache is charged to the process's memory cgroup, which cannot
    /// reclaim it fast enough — the disk backend was OOM-killed for it (docs/design-notes.md,
    /// "Memory of the disk backend").
    pub(super) fn write(&mut self, bytes: &[u8]) -> Result<(), StorageError> {
        let Some(out) = &mut self.out else {
            return Ok(());
        };
        let err = io_err("write", &self.shown, WRITE_HINT);
        out.write_all(bytes).map_err(err)?;
        self.written += bytes.len() as u64;
        if self.written - self.released >= RELEASE_EVERY {
            out.flush()
                .map_err(io_err("write", &self.shown, WRITE_HINT))?;
            let file = out.get_ref();
            file.sync_data()
                .map_err(io_err("fsync", &self.shown, WRITE_HINT))?;
            // Advice only: the data is durable either way, and a kernel that ignores it
            // keeps clean pages, which reclaim can drop.
            let len = std::num::NonZeroU64::new(self.written - self.released);
            let _ = rustix::fs::fadvise(file, self.released, len, rustix::fs::Advice::DontNeed);
            self.released = self.written;
        }
        Ok(())
    }

    /// Writes `head` at offset 0 and fsyncs the file. `false` when it was finished before,
    /// so the caller must not publish it again.
    pub(super) fn finish(&mut self, head: &[u8]) -> Result<bool, StorageError> {
        let write_err = |e| io_err("write", &self.shown, WRITE_HINT)(e);
        let Some(out) = self.out.take() else {
            return Ok(false);
        };
        let mut file = out.into_inner().map_err(|e| write_err(e.into_error()))?;
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(head))
            .map_err(write_err)?;
        file.sync_all()
            .map_err(io_err("fsync", &self.shown, WRITE_HINT))?;
        Ok(true)
    }
}

/// A file being written under a temp name beside its target.
struct LocalWriter {
    staged: StagedFile,
    tmp: PathBuf,
    target: PathBuf,
    dir: PathBuf,
}

impl ObjectWriter for LocalWriter {
    fn write(&mut self, bytes: &[u8]) -> Result<(), StorageError> {
        self.staged.write(bytes)
    }

    fn commit(mut self: Box<Self>, head: &[u8]) -> Result<(), StorageError> {
        if !self.staged.finish(head)? {
            return Ok(());
        }
        let op = "rename temporary file to";
        fs::rename(&self.tmp, &self.target).map_err(io_err(op, &self.target, WRITE_HINT))?;
        self.tmp = PathBuf::new();
        sync_dir(&self.dir)
    }
}

impl Drop for LocalWriter {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

impl StorageBackend for LocalBackend {
    fn describe(&self, key: &str) -> PathBuf {
        self.path(key)
    }

    fn sub(&self, prefix: &str) -> Box<dyn StorageBackend> {
        Box::new(LocalBackend::new(self.path(prefix)))
    }

    fn put(&self, key: &str) -> Result<Box<dyn ObjectWriter>, StorageError> {
        let target = self.path(key);
        let dir = target.parent().unwrap_or(&self.root).to_path_buf();
        create_dir(&dir)?;
        let name = target
            .file_name()
            .map_or_else(|| "object".into(), |n| n.to_string_lossy().into_owned());
        let tmp = temp_path(&dir, &name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(io_err("create temporary file", &tmp, WRITE_HINT))?;
        Ok(Box::new(LocalWriter {
            staged: StagedFile::new(file, tmp.clone()),
            tmp,
            target,
            dir,
        }))
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let target = self.path(key);
        let dir = target.parent().unwrap_or(&self.root).to_path_buf();
        create_dir(&dir)?;
        // Check, then rename: only the job folder's owner (an OS lock) writes here.
        if target.exists() {
            let hint = "checkpoint ids must not be reused; discard the checkpoint first";
            let exists = io::ErrorKind::AlreadyExists.into();
            return Err(io_err("overwrite complete checkpoint", &target, hint)(
                exists,
            ));
        }
        let mut w = self.put(key)?;
        w.write(bytes)?;
        w.commit(&[])?;
        sync_dir(dir.parent().unwrap_or(&self.root))
    }

    fn size(&self, key: &str) -> Result<u64, StorageError> {
        let path = self.path(key);
        match fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(m.len()),
            Ok(_) => Err(io_err("read", &path, READ_HINT)(
                io::ErrorKind::NotFound.into(),
            )),
            Err(e) => Err(io_err("read", &path, READ_HINT)(e)),
        }
    }

    fn get(&self, key: &str, range: Option<Range<u64>>) -> Result<Vec<u8>, StorageError> {
        let path = self.path(key);
        let err = |e| io_err("read", &path, READ_HINT)(e);
        match range {
            None => fs::read(&path).map_err(err),
            Some(r) => {
                let mut buf = vec![0; r.end.saturating_sub(r.start) as usize];
                self.read_at(key, r.start, &mut buf)?;
                Ok(buf)
            }
        }
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        use std::os::unix::fs::FileExt;
        let path = self.path(key);
        File::open(&path)
            .and_then(|f| f.read_exact_at(buf, offset))
            .map_err(io_err("read", &path, READ_HINT))
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let dir = self.path(prefix);
        let hint = "check that the checkpoint directory is readable";
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("list checkpoint directory", &dir, hint)(e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_err("list checkpoint directory", &dir, hint))?;
            names.extend(entry.file_name().to_str().map(str::to_string));
        }
        Ok(names)
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        let path = self.path(key);
        let hint = "check the folder's permissions; it can also be removed by hand";
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(path.parent().unwrap_or(&self.root)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove", &path, hint)(e)),
        }
    }

    fn delete_all(&self, prefix: &str) -> Result<(), StorageError> {
        let dir = self.path(prefix);
        let hint = "check the folder's permissions; it can also be removed by hand";
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(io_err("remove checkpoint", &dir, hint)(e))
            }
            _ => Ok(()),
        }
    }

    fn folder_problem(&self) -> Result<Option<&'static str>, StorageError> {
        Ok(if self.root.is_dir() {
            None
        } else if self.root.exists() {
            Some("not a folder")
        } else {
            Some("no such folder")
        })
    }

    fn local_file(&self, key: &str) -> Option<PathBuf> {
        Some(self.path(key))
    }

    fn local_dir(&self, prefix: &str) -> Option<Result<PathBuf, StorageError>> {
        let dir = self.path(prefix);
        Some(create_dir(&dir).map(|()| dir))
    }

    fn take_ownership(&self) -> Result<Ownership, StorageError> {
        Ok(Box::new(take_ownership(&self.root)?))
    }
}

/// Locks `root`'s [`LOCK_FILE_NAME`] for this process, or names the run that holds it.
fn take_ownership(root: &Path) -> Result<File, StorageError> {
    let path = root.join(LOCK_FILE_NAME);
    let hint = "check that the folder is writable or pass --checkpoint-dir";
    lock_file(&path).map_err(|e| match e {
        FileLockError::Held(holder) => StorageError::InUse {
            root: root.to_path_buf(),
            holder: if holder.is_empty() {
                "it has not said who it is yet".into()
            } else {
                holder
            },
        },
        FileLockError::Io(what, e) => io_err(what, &path, hint)(e),
    })
}

/// Why [`lock_file`] took no lock.
#[derive(Debug)]
pub(crate) enum FileLockError {
    /// Another process holds the lock; what it wrote about itself (empty: nothing yet).
    Held(String),
    /// Opening, locking or writing the file failed: what was being done, and why.
    Io(&'static str, io::Error),
}

/// Opens (creating) `path`, takes an exclusive lock on it and writes this process's
/// [`holder_description`](super::holder_description) into it, for a refused taker to
/// name. A lock, not the file's presence, is what counts: the operating system releases
/// it when the process dies, so a run killed with SIGKILL leaves nothing to clean up.
/// One mechanism for the checkpoint folder's owner and the runner's output folder.
pub(crate) fn lock_file(path: &Path) -> Result<File, FileLockError> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| FileLockError::Io("open the lock file", e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = io::Read::read_to_string(&mut file, &mut holder);
            return Err(FileLockError::Held(holder.trim().to_string()));
        }
        Err(fs::TryLockError::Error(e)) => return Err(FileLockError::Io("lock", e)),
    }
    let me = super::holder_description();
    file.set_len(0)
        .and_then(|()| io::Seek::rewind(&mut file))
        .and_then(|()| file.write_all(me.as_bytes()))
        .map_err(|e| FileLockError::Io("write the lock file", e))?;
    Ok(file)
}

/// Creates `dir` and its parents; the error says which folder could not be created.
pub(super) fn create_dir(dir: &Path) -> Result<(), StorageError> {
    fs::create_dir_all(dir).map_err(io_err("create checkpoint directory", dir, WRITE_HINT))
}

/// Makes the entries of `dir` (renames, new subfolders) durable.
fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsync directory", dir, WRITE_HINT))
}
