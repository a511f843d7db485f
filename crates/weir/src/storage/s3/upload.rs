//! Streamed uploads to S3: an object is sent in parts while it is being written, so a
//! large state file neither waits for its last byte before the network starts nor sits
//! whole on local disk or in memory.
//!
//! The envelope's header (which holds the payload length) is known only at commit, and
//! it lies in the object's first bytes. So the first part is kept in memory and uploaded
//! last, under part number 1, through object_store's [`MultipartStore`], which takes
//! explicit part numbers; parts 2, 3, … go up as soon as they are full, a few at a time.
//! An object of at most one part is one plain PUT. Memory stays at most
//! `(2 + IN_FLIGHT) × PART` bytes per writer, whatever the object's size.

use std::sync::atomic::Ordering;

use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{MultipartId, ObjectStore, PutPayload};
use tokio::task::JoinHandle;

use super::{block, runtime, S3Backend, TRANSFERS};
use crate::storage::backend::ObjectWriter;
use crate::storage::StorageError;

/// Part size of uploads: S3 wants at least 5 MiB for every part but the last.
/// `WEIR_S3_PART_BYTES` overrides it (at least 5 MiB) for benchmarks.
pub(super) fn part_size() -> usize {
    const MIN: usize = 5 << 20;
    std::env::var("WEIR_S3_PART_BYTES")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(8 << 20, |n: usize| n.max(MIN))
}

/// Parts being uploaded at once per writer: enough to keep a link busy, few enough that a
/// writer's memory stays small (the writer waits for the oldest when this many are out).
const IN_FLIGHT: usize = 4;

/// A multipart upload in progress.
struct Upload {
    id: MultipartId,
    /// Parts 2, 3, … (indices 1, 2, …) in the order they were sent.
    sent: Vec<JoinHandle<object_store::Result<PartId>>>,
    /// Ids of the parts already finished, by index (index 0 comes at commit).
    done: Vec<PartId>,
}

/// An object being uploaded in parts as it is written (see the module docs).
pub(super) struct S3Writer {
    backend: S3Backend,
    key: String,
    path: ObjectPath,
    part: usize,
    /// The object's first `part` bytes, patched with the header and sent last.
    first: Vec<u8>,
    /// The part being filled.
    current: Vec<u8>,
    upload: Option<Upload>,
}

impl S3Writer {
    pub(super) fn new(backend: S3Backend, key: &str) -> S3Writer {
        let part = part_size();
        S3Writer {
            path: backend.path(key),
            backend,
            key: key.to_string(),
            part,
            first: Vec::new(),
            current: Vec::new(),
            upload: None,
        }
    }

    /// Sends the full `current` part in the background, first starting the upload if need
    /// be; waits for the oldest part when [`IN_FLIGHT`] are out.
    fn send_current(&mut self) -> Result<(), StorageError> {
        let store = self.backend.client.store.clone();
        if self.upload.is_none() {
            let id = block(store.create_multipart(&self.path))?
                .map_err(|e| self.backend.write_error("start upload of", &self.key, e))?;
            TRANSFERS.multipart_uploads.fetch_add(1, Ordering::Relaxed);
            self.upload = Some(Upload {
                id,
                sent: Vec::new(),
                done: Vec::new(),
            });
        }
        let data = PutPayload::from(std::mem::take(&mut self.current));
        let upload = self.upload.as_mut().expect("started above");
        let idx = 1 + upload.done.len() + upload.sent.len();
        let (path, id) = (self.path.clone(), upload.id.clone());
        let task = runtime()?.spawn(async move { store.put_part(&path, &id, idx, data).await });
        TRANSFERS.parts_uploaded.fetch_add(1, Ordering::Relaxed);
        upload.sent.push(task);
        if upload.sent.len() >= IN_FLIGHT {
            self.wait_oldest()?;
        }
        Ok(())
    }

    /// Waits for the oldest part in flight.
    fn wait_oldest(&mut self) -> Result<(), StorageError> {
        let Some(upload) = self.upload.as_mut() else {
            return Ok(());
        };
        if upload.sent.is_empty() {
            return Ok(());
        }
        let task = upload.sent.remove(0);
        let joined = block(task)?
            .map_err(|e| super::remote("upload", &self.backend.url(&self.key), &e.to_string()))?;
        let part = joined.map_err(|e| self.backend.write_error("upload", &self.key, e))?;
        upload.done.push(part);
        Ok(())
    }
}

impl ObjectWriter for S3Writer {
    fn write(&mut self, mut bytes: &[u8]) -> Result<(), StorageError> {
        while !bytes.is_empty() {
            let (buf, at_start) = if self.first.len() < self.part {
                (&mut self.first, true)
            } else {
                (&mut self.current, false)
            };
            // The part being filled is reserved whole (it only exists for large objects);
            // the first grows as written, so that small objects stay small in memory.
            if !at_start && buf.capacity() == 0 {
                buf.reserve_exact(self.part);
            }
            let n = (self.part - buf.len()).min(bytes.len());
            buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if !at_start && self.current.len() == self.part {
                self.send_current()?;
            }
        }
        Ok(())
    }

    fn commit(mut self: Box<Self>, head: &[u8]) -> Result<(), StorageError> {
        let n = head.len().min(self.first.len());
        self.first[..n].copy_from_slice(&head[..n]);
        let first = PutPayload::from(std::mem::take(&mut self.first));
        let b = self.backend.clone();
        if self.upload.is_none() && self.current.is_empty() {
            let put = b.client.store.put(&self.path, first);
            block(put)?.map_err(|e| b.write_error("upload", &self.key, e))?;
            TRANSFERS.single_puts.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if !self.current.is_empty() {
            self.send_current()?;
        }
        while self.upload.as_ref().is_some_and(|u| !u.sent.is_empty()) {
            self.wait_oldest()?;
        }
        let upload = self.upload.as_ref().expect("started by send_current");
        let store = &b.client.store;
        let part = block(store.put_part(&self.path, &upload.id, 0, first))?
            .map_err(|e| b.write_error("upload", &self.key, e))?;
        TRANSFERS.parts_uploaded.fetch_add(1, Ordering::Relaxed);
        let parts = std::iter::once(part).chain(upload.done.iter().cloned());
        let complete = store.complete_multipart(&self.path, &upload.id, parts.collect());
        block(complete)?.map_err(|e| b.write_error("complete upload of", &self.key, e))?;
        self.upload = None;
        Ok(())
    }
}

impl Drop for S3Writer {
    /// An upload that was not completed is aborted, so that its parts are not kept (and
    /// billed) by the server; nothing becomes visible under the key either way.
    fn drop(&mut self) {
        if let Some(upload) = self.upload.take() {
            for task in &upload.sent {
                task.abort();
            }
            let store = &self.backend.client.store;
            let _ = block(store.abort_multipart(&self.path, &upload.id));
        }
    }
}
