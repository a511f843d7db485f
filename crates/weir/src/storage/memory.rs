//! An in-memory [`StorageBackend`] for tests of the checkpoint protocol: fast, with no disk,
//! and with the same contract as the real backends (atomic objects, create-if-absent,
//! one owner), so a test that passes here passes for the protocol's sake.
//!
//! A store is registered under a name ([`MemoryStore::register`]) and reached at the
//! location `mem://<name>/<prefix>`, which every API that takes a checkpoint folder
//! accepts, so a whole job can checkpoint into memory and restore from it. Stores live as
//! long as the process: an unregistered name is an error, not an empty store.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use super::backend::{ObjectWriter, Ownership, StorageBackend};
use super::{io_err, StorageError, READ_HINT};

/// The scheme of in-memory locations.
pub const MEMORY_SCHEME: &str = "mem://";

/// Objects by full key, and the prefixes owned by a run.
#[derive(Debug, Default)]
struct Objects {
    objects: BTreeMap<String, Arc<Vec<u8>>>,
    owned: HashSet<String>,
    /// Most bytes the store holds, if limited ([`MemoryStore::set_capacity`]).
    capacity: Option<u64>,
}

impl Objects {
    /// Stores `bytes` as `key`, unless that would take the store past its capacity: then
    /// the error a full disk gives, so tests see what a full disk does to a job.
    fn insert(&mut self, key: String, bytes: Vec<u8>, url: PathBuf) -> Result<(), StorageError> {
        if let Some(cap) = self.capacity {
            let others: u64 = self
                .objects
                .iter()
                .filter(|(k, _)| **k != key)
                .map(|(_, o)| o.len() as u64)
                .sum();
            if others + bytes.len() as u64 > cap {
                let full = io::Error::from(io::ErrorKind::StorageFull);
                return Err(io_err("write", &url, super::WRITE_HINT)(full));
            }
        }
        self.objects.insert(key, Arc::new(bytes));
        Ok(())
    }
}

/// One named in-memory store (shared by every backend rooted in it).
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    name: String,
    inner: Arc<Mutex<Objects>>,
}

fn registry() -> &'static Mutex<HashMap<String, MemoryStore>> {
    static STORES: OnceLock<Mutex<HashMap<String, MemoryStore>>> = OnceLock::new();
    STORES.get_or_init(Mutex::default)
}

impl MemoryStore {
    /// Registers (or returns the existing) store `name`, reachable at `mem://<name>/…`.
    pub fn register(name: &str) -> MemoryStore {
        let mut stores = registry().lock().unwrap_or_else(|p| p.into_inner());
        stores
            .entry(name.to_string())
            .or_insert_with(|| MemoryStore {
                name: name.to_string(),
                inner: Arc::default(),
            })
            .clone()
    }

    /// The registered store `name`, if any.
    pub fn find(name: &str) -> Option<MemoryStore> {
        let stores = registry().lock().unwrap_or_else(|p| p.into_inner());
        stores.get(name).cloned()
    }

    /// Every key in the store, sorted; for tests that look at what was written.
    pub fn keys(&self) -> Vec<String> {
        self.lock().objects.keys().cloned().collect()
    }

    /// Object `key`'s bytes, if present; for tests.
    pub fn object(&self, key: &str) -> Option<Vec<u8>> {
        self.lock().objects.get(key).map(|o| o.to_vec())
    }

    /// Replaces (or creates) object `key`; for tests that damage or copy objects.
    pub fn set_object(&self, key: &str, bytes: Vec<u8>) {
        self.lock().objects.insert(key.to_string(), Arc::new(bytes));
    }

    /// Limits the store to `bytes` in all (`None`: no limit), so that a test can fill it
    /// as a disk fills up: a write that would pass the limit fails as on a full disk.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.lock().capacity = bytes;
    }

    /// A backend rooted at `prefix` in this store.
    pub fn backend(&self, prefix: &str) -> MemoryBackend {
        MemoryBackend {
            store: self.clone(),
            prefix: prefix.trim_matches('/').to_string(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Objects> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A [`MemoryStore`] seen from one prefix.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    store: MemoryStore,
    prefix: String,
}

impl MemoryBackend {
    fn key(&self, key: &str) -> String {
        match (self.prefix.is_empty(), key.is_empty()) {
            (true, _) => key.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{key}", self.prefix),
        }
    }

    fn folder(&self, prefix: &str) -> String {
        let k = self.key(prefix);
        if k.is_empty() {
            k
        } else {
            k + "/"
        }
    }

    fn not_found(&self, op: &'static str, key: &str) -> StorageError {
        io_err(op, &self.describe(key), READ_HINT)(io::ErrorKind::NotFound.into())
    }
}

struct MemoryWriter {
    store: MemoryStore,
    key: String,
    bytes: Vec<u8>,
}

impl ObjectWriter for MemoryWriter {
    fn write(&mut self, bytes: &[u8]) -> Result<(), StorageError> {
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }

    fn commit(mut self: Box<Self>, head: &[u8]) -> Result<(), StorageError> {
        let n = head.len().min(self.bytes.len());
        self.bytes[..n].copy_from_slice(&head[..n]);
        let bytes = std::mem::take(&mut self.bytes);
        let url = PathBuf::from(format!("{MEMORY_SCHEME}{}/{}", self.store.name, self.key));
        self.store.lock().insert(self.key.clone(), bytes, url)
    }
}

/// Releases a prefix owned in a memory store.
struct MemoryOwner {
    store: MemoryStore,
    prefix: String,
}

impl Drop for MemoryOwner {
    fn drop(&mut self) {
        self.store.lock().owned.remove(&self.prefix);
    }
}

impl StorageBackend for MemoryBackend {
    fn describe(&self, key: &str) -> PathBuf {
        PathBuf::from(format!(
            "{MEMORY_SCHEME}{}/{}",
            self.store.name,
            self.key(key)
        ))
    }

    fn sub(&self, prefix: &str) -> Box<dyn StorageBackend> {
        Box::new(self.store.backend(&self.key(prefix)))
    }

    fn put(&self, key: &str) -> Result<Box<dyn ObjectWriter>, StorageError> {
        Ok(Box::new(MemoryWriter {
            store: self.store.clone(),
            key: self.key(key),
            bytes: Vec::new(),
        }))
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let mut objects = self.store.lock();
        let full = self.key(key);
        if objects.objects.contains_key(&full) {
            let hint = "checkpoint ids must not be reused; discard the checkpoint first";
            let exists = io::ErrorKind::AlreadyExists.into();
            return Err(io_err(
                "overwrite complete checkpoint",
                &self.describe(key),
                hint,
            )(exists));
        }
        objects.insert(full, bytes.to_vec(), self.describe(key))
    }

    fn size(&self, key: &str) -> Result<u64, StorageError> {
        let objects = self.store.lock();
        match objects.objects.get(&self.key(key)) {
            Some(o) => Ok(o.len() as u64),
            None => Err(self.not_found("read", key)),
        }
    }

    fn get(&self, key: &str, range: Option<Range<u64>>) -> Result<Vec<u8>, StorageError> {
        let object = self.store.lock().objects.get(&self.key(key)).cloned();
        let object = object.ok_or_else(|| self.not_found("read", key))?;
        let len = object.len() as u64;
        let r = range.unwrap_or(0..len);
        if r.start > r.end || r.end > len {
            let eof = io::ErrorKind::UnexpectedEof.into();
            return Err(io_err("read", &self.describe(key), READ_HINT)(eof));
        }
        Ok(object[r.start as usize..r.end as usize].to_vec())
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let folder = self.folder(prefix);
        let objects = self.store.lock();
        let mut names: Vec<String> = objects
            .objects
            .range(folder.clone()..)
            .take_while(|(k, _)| k.starts_with(&folder))
            .filter_map(|(k, _)| k[folder.len()..].split('/').next().map(str::to_string))
            .collect();
        names.dedup();
        Ok(names)
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.store.lock().objects.remove(&self.key(key));
        Ok(())
    }

    fn delete_all(&self, prefix: &str) -> Result<(), StorageError> {
        let folder = self.folder(prefix);
        self.store
            .lock()
            .objects
            .retain(|k, _| !k.starts_with(&folder));
        Ok(())
    }

    fn folder_problem(&self) -> Result<Option<&'static str>, StorageError> {
        let folder = self.folder("");
        let objects = self.store.lock();
        let any = objects
            .objects
            .range(folder.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&folder));
        Ok((!any).then_some("no such folder"))
    }

    fn take_ownership(&self) -> Result<Ownership, StorageError> {
        let mut objects = self.store.lock();
        if !objects.owned.insert(self.prefix.clone()) {
            return Err(StorageError::InUse {
                root: self.describe(""),
                holder: super::holder_description(),
            });
        }
        Ok(Box::new(MemoryOwner {
            store: self.store.clone(),
            prefix: self.prefix.clone(),
        }))
    }
}

/// The backend for location `rest` (what follows `mem://`): `<store>/<prefix>`.
pub(super) fn open(location: &str, rest: &str) -> Result<MemoryBackend, StorageError> {
    let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    match MemoryStore::find(name) {
        Some(store) => Ok(store.backend(prefix)),
        None => Err(StorageError::Location {
            location: location.to_string(),
            reason: format!(
                "no in-memory store named {name:?} in this process (in-memory storage is for \
                 tests)"
            ),
            hint: "use a local folder or an s3:// URL",
        }),
    }
}
