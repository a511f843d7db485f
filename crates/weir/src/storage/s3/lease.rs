//! Ownership of a job folder on S3, which has no locks: the object `_lease` holds
//! `<expiry ms> <holder>`. It is created if absent, renewed while the run lives, and taken
//! over once expired (its holder died or stalled).
//!
//! Fencing: every write of the lease is conditional on the ETag of the one before
//! (`If-Match`, object_store's `PutMode::Update`), so of two runs only one can hold it,
//! and a run whose lease was taken over finds out at its next write of it instead of
//! overwriting the new holder's. A run completes a checkpoint only right after renewing
//! its lease that way ([`Fence::renew`] before `_metadata` is created): the lease then
//! has a whole lifetime left, during which no other run may take it over. Once the lease
//! is lost, the run's writes, deletions and completions in the job folder all fail with
//! one error naming the new holder ([`StorageError::OwnershipLost`]), so it never goes on
//! silently beside it; the job polls for the loss (`StorageBackend::ownership_lost`) and
//! stops at once, without a restart.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion};

use super::{block, S3Backend};
use crate::storage::backend::StorageBackend;
use crate::storage::StorageError;

/// The lease object in a job's folder on S3.
pub const LEASE_OBJECT: &str = "_lease";

/// How long a lease lasts without renewal; `WEIR_S3_LEASE_SECONDS` overrides it (tests
/// take over a killed run's lease without waiting long). Renewed every third of it.
const LEASE_SECONDS: u64 = 30;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The holder a lease's text (`<expiry ms> <holder>`) names.
fn holder_of(text: &str) -> &str {
    text.split_once(' ').map_or(text, |(_, h)| h)
}

/// This run as its lease names it: the process, when it took the lease, and a random
/// number. The number tells this run's own lease from another's even where the rest is
/// alike (every container's first process is process 1), so an earlier renewal of its own
/// whose answer was lost is never taken for a rival's takeover.
fn lease_holder() -> String {
    format!(
        "{} [lease {:016x}]",
        crate::storage::holder_description(),
        fastrand::u64(..)
    )
}

fn lease_seconds() -> u64 {
    std::env::var("WEIR_S3_LEASE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(LEASE_SECONDS)
}

/// What a run knows of its lease, shared by the backends of its job folder (which check it
/// before writing) and the renewing thread.
#[derive(Debug)]
pub(super) struct Fence {
    /// The lease object's backend (rooted at the job folder).
    backend: S3Backend,
    /// Lifetime of one renewal, in seconds.
    ttl: u64,
    /// This run, as recorded in the lease.
    me: String,
    /// ETag of this run's last write of the lease.
    etag: Mutex<Option<String>>,
    /// Who took the lease over, once this run lost it.
    lost: Mutex<Option<String>>,
}

impl Fence {
    fn body(&self) -> PutPayload {
        PutPayload::from(format!("{} {}", now_ms() + self.ttl * 1000, self.me).into_bytes())
    }

    /// The error of every write once the lease is lost to `holder`.
    fn lost_error(&self, holder: &str) -> StorageError {
        StorageError::OwnershipLost {
            location: self.backend.url(""),
            lease: self.backend.url(LEASE_OBJECT),
            holder: holder.to_string(),
        }
    }

    /// Fails if the lease is known to be lost (no request is made).
    pub(super) fn check(&self) -> Result<(), StorageError> {
        match &*self.lost.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(holder) => Err(self.lost_error(holder)),
            None => Ok(()),
        }
    }

    /// Renews the lease if it is still this run's (conditional on the ETag of this run's
    /// last write), so that it has a whole lifetime left; records and returns its loss
    /// otherwise. A lease object that vanished (an emptied server) is created again if no
    /// one else did first.
    pub(super) fn renew(&self) -> Result<(), StorageError> {
        self.check()?;
        let b = &self.backend;
        let path = b.path(LEASE_OBJECT);
        let store = &b.client.store;
        // Held across the request: the renewing thread and a completing checkpoint must
        // not both renew from one ETag, or the second would take the first for a rival.
        let mut etag = self.etag.lock().unwrap_or_else(|p| p.into_inner());
        let mode = PutMode::Update(UpdateVersion {
            e_tag: etag.clone(),
            version: None,
        });
        let put = store.put_opts(&path, self.body(), mode.into());
        let result = match block(put)? {
            Err(object_store::Error::Precondition { .. }) => {
                match block(async { store.get(&path).await })? {
                    Err(object_store::Error::NotFound { .. }) => {
                        let create = PutOptions::from(PutMode::Create);
                        block(store.put_opts(&path, self.body(), create))?
                    }
                    Ok(held) => {
                        let held_etag = held.meta.e_tag.clone();
                        let text =
                            block(held.bytes())?.map_err(|e| b.error("read", LEASE_OBJECT, e))?;
                        if holder_of(&String::from_utf8_lossy(&text)) != self.me {
                            return Err(self.lose());
                        }
                        // Still this run's: an earlier renewal reached the server but its
                        // answer was lost (the store went away mid-request), so the ETag
                        // this run knew is stale. Renew from the one the server holds.
                        let mode = PutMode::Update(UpdateVersion {
                            e_tag: held_etag,
                            version: None,
                        });
                        block(store.put_opts(&path, self.body(), mode.into()))?
                    }
                    // The store is out of reach: not a loss, tried again next time.
                    Err(e) => return Err(b.write_error("renew the lease", LEASE_OBJECT, e)),
                }
            }
            other => other,
        };
        match result {
            Ok(r) => {
                *etag = r.e_tag;
                Ok(())
            }
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Err(self.lose()),
            Err(e) => Err(b.write_error("renew the lease", LEASE_OBJECT, e)),
        }
    }

    /// Records that the lease is lost, naming its new holder as the lease says.
    fn lose(&self) -> StorageError {
        let holder = match self.backend.get(LEASE_OBJECT, None) {
            Ok(bytes) => holder_of(&String::from_utf8_lossy(&bytes)).to_string(),
            Err(_) => "another run".into(),
        };
        let e = self.lost_error(&holder);
        *self.lost.lock().unwrap_or_else(|p| p.into_inner()) = Some(holder);
        e
    }
}

/// Ownership of a job folder on S3 (see the module docs); released when dropped.
pub struct Lease {
    stop: Arc<AtomicBool>,
    renewer: Option<std::thread::JoinHandle<()>>,
    fence: Arc<Fence>,
}

impl Lease {
    /// Takes the lease of `backend`'s folder: creates it, or takes it over if it expired;
    /// refuses naming the holder if it is live.
    pub(super) fn take(backend: S3Backend) -> Result<(Lease, Arc<Fence>), StorageError> {
        let fence = Arc::new(Fence {
            backend: backend.clone(),
            ttl: lease_seconds(),
            me: lease_holder(),
            etag: Mutex::new(None),
            lost: Mutex::new(None),
        });
        let path = backend.path(LEASE_OBJECT);
        let store = &backend.client.store;
        let create = PutOptions::from(PutMode::Create);
        let taken = match block(store.put_opts(&path, fence.body(), create))? {
            Ok(r) => r,
            Err(object_store::Error::AlreadyExists { .. }) => {
                let held = block(async { store.get(&path).await })?
                    .map_err(|e| backend.error("read", LEASE_OBJECT, e))?;
                let etag = held.meta.e_tag.clone();
                let text =
                    block(held.bytes())?.map_err(|e| backend.error("read", LEASE_OBJECT, e))?;
                let text = String::from_utf8_lossy(&text).into_owned();
                let (expiry, holder) = text.split_once(' ').unwrap_or(("0", &text));
                if expiry.parse::<u64>().unwrap_or(0) > now_ms() {
                    return Err(StorageError::InUse {
                        root: backend.describe(""),
                        holder: format!("{holder}; its lease expires unless renewed"),
                    });
                }
                // Expired: its holder died or stalled. Replace exactly the lease read, so
                // that of two runs taking it over (or a stalled holder renewing it) one wins.
                let mode = PutMode::Update(UpdateVersion {
                    e_tag: etag,
                    version: None,
                });
                match block(store.put_opts(&path, fence.body(), mode.into()))? {
                    Ok(r) => r,
                    Err(object_store::Error::Precondition { .. }) => {
                        return Err(StorageError::InUse {
                            root: backend.describe(""),
                            holder: "another run, which took over the expired lease first".into(),
                        })
                    }
                    Err(e) => return Err(backend.write_error("take over", LEASE_OBJECT, e)),
                }
            }
            Err(e) => return Err(backend.write_error("create", LEASE_OBJECT, e)),
        };
        if taken.e_tag.is_none() {
            let _ = backend.delete(LEASE_OBJECT);
            return Err(StorageError::Remote {
                op: "take the lease of",
                location: backend.url(""),
                cause: "the server returned no ETag for the lease, so it cannot be renewed \
                        conditionally (If-Match)"
                    .into(),
                hint: "use an S3 server with conditional writes (AWS S3, MinIO, moto), or a \
                       local --checkpoint-dir"
                    .into(),
                transient: false,
            });
        }
        *fence.etag.lock().unwrap_or_else(|p| p.into_inner()) = taken.e_tag;
        let stop = Arc::new(AtomicBool::new(false));
        let (f, s) = (fence.clone(), stop.clone());
        let renewer = std::thread::Builder::new()
            .name("weir-s3-lease".into())
            .spawn(move || {
                let every = Duration::from_millis(f.ttl * 1000 / 3);
                let tick = Duration::from_millis(50);
                let mut waited = Duration::ZERO;
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    waited += tick;
                    if waited >= every {
                        waited = Duration::ZERO;
                        // A server that is down is tried again next time; a lost lease
                        // stays lost (the fence then refuses every write).
                        if f.renew().is_err() && f.check().is_err() {
                            return;
                        }
                    }
                }
            })
            .ok();
        let lease = Lease {
            stop,
            renewer,
            fence: fence.clone(),
        };
        Ok((lease, fence))
    }
}

impl Drop for Lease {
    /// Stops renewing and removes the lease, unless it was lost: then it is the new
    /// holder's.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
        if self.fence.check().is_ok() {
            let _ = self.fence.backend.delete(LEASE_OBJECT);
        }
    }
}
