//! S3-compatible object storage behind [`StorageBackend`], through the `object_store` crate
//! (feature `s3`). Locations are `s3://bucket/prefix`; the client is configured by the
//! standard `AWS_*` variables (`AWS_ENDPOINT_URL` or `AWS_ENDPOINT`, `AWS_REGION`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP`).
//!
//! * Calls block on one small tokio runtime shared by every S3 backend of the process.
//! * Retries are few and short: wrong credentials, a missing bucket or a server that is
//!   down are one clear error naming the cause ([`StorageError::Remote`]), not a loop.
//! * `_metadata` uses a conditional create (`If-None-Match: *`, HTTP 412 when present).
//! * A streamed object is uploaded in parts while it is written, its first part last
//!   (it holds the header, known last) ([`upload`]); a large object is read in ranges
//!   fetched several at a time.
//! * Ownership is a lease object `_lease` ([`Lease`]), created if absent, renewed while the
//!   run lives and taken over once expired, since S3 has no locks; every write of it is
//!   conditional (`If-Match`), and a run that lost it writes nothing more ([`lease`]).

use std::collections::HashMap;
use std::io;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, PutMode, PutOptions, PutPayload, RetryConfig,
};

use super::backend::{ObjectWriter, Ownership, StorageBackend};
use super::{io_err, StorageError, METADATA_FILE_NAME, READ_HINT};

mod lease;
mod upload;
use lease::Fence;
pub use lease::{Lease, LEASE_OBJECT};
use upload::S3Writer;

/// One S3 client (per bucket) and the runtime its calls block on.
struct Client {
    store: AmazonS3,
    bucket: String,
}

fn runtime() -> Result<&'static tokio::runtime::Runtime, StorageError> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-s3")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| StorageError::Location {
        location: "s3://".into(),
        reason: format!("cannot start the S3 client's runtime: {e}"),
        hint: "check the process's thread limits",
    })
}

fn block<F: std::future::Future>(f: F) -> Result<F::Output, StorageError> {
    Ok(runtime()?.block_on(f))
}

/// A backend for `location` (`s3://bucket/prefix`) whose client talks to `endpoint`
/// instead of `AWS_ENDPOINT_URL`: for tools and tests that reach more than one server.
pub fn open_with_endpoint(location: &str, endpoint: &str) -> Result<S3Backend, StorageError> {
    let rest = location.strip_prefix("s3://").unwrap_or(location);
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    Ok(S3Backend {
        client: make_client(location, bucket, Some(endpoint))?,
        prefix: prefix.trim_matches('/').to_string(),
        fence: Arc::default(),
    })
}

/// The client of `bucket`, made once per process from the `AWS_*` variables.
fn client(location: &str, bucket: &str) -> Result<Arc<Client>, StorageError> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, Arc<Client>>>> = OnceLock::new();
    let mut clients = CLIENTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(c) = clients.get(bucket) {
        return Ok(c.clone());
    }
    let c = make_client(location, bucket, None)?;
    clients.insert(bucket.to_string(), c.clone());
    Ok(c)
}

/// A new client of `bucket` from the `AWS_*` variables (and `endpoint`, if given).
fn make_client(
    location: &str,
    bucket: &str,
    endpoint: Option<&str>,
) -> Result<Arc<Client>, StorageError> {
    if let Some(reason) = metadata_disabled_without_credentials(|k| std::env::var(k).ok()) {
        return Err(StorageError::Location {
            location: location.to_string(),
            reason,
            hint:
                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_WEB_IDENTITY_TOKEN_FILE \
                   with AWS_ROLE_ARN), or unset AWS_EC2_METADATA_DISABLED to use the instance's \
                   role",
        });
    }
    let allow_http = std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v == "true" || v == "1");
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_allow_http(allow_http)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
            },
            max_retries: 2,
            retry_timeout: Duration::from_secs(10),
        })
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(allow_http)
                .with_connect_timeout(Duration::from_secs(5))
                .with_timeout(Duration::from_secs(120)),
        );
    if let Some(endpoint) = endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none()
    {
        builder = builder.with_region("us-east-1");
    }
    let store = builder.build().map_err(|e| StorageError::Location {
        location: location.to_string(),
        reason: format!("cannot configure the S3 client: {e}"),
        hint: "check the AWS_* variables (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, \
               AWS_SECRET_ACCESS_KEY, AWS_ALLOW_HTTP)",
    })?;
    Ok(Arc::new(Client {
        store,
        bucket: bucket.to_string(),
    }))
}

/// Why the client must not be built, when `AWS_EC2_METADATA_DISABLED` is `true` and no other
/// credential source is configured: object_store would then ask the instance metadata
/// service (169.254.169.254), which the AWS SDKs never do under that variable. `var` reads
/// the environment (a parameter, so the rule is tested without touching the process's).
fn metadata_disabled_without_credentials(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    let set = |k: &str| var(k).is_some_and(|v| !v.is_empty());
    let disabled = var("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let unsigned = var("AWS_SKIP_SIGNATURE").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    // object_store's order: static keys, web identity, container (ECS, EKS), instance.
    let other_source = set("AWS_ACCESS_KEY_ID")
        || set("AWS_SECRET_ACCESS_KEY")
        || (set("AWS_WEB_IDENTITY_TOKEN_FILE") && set("AWS_ROLE_ARN"))
        || set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        || (set("AWS_CONTAINER_CREDENTIALS_FULL_URI")
            && set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"));
    (disabled && !unsigned && !other_source).then(|| {
        "no AWS credentials are set, and AWS_EC2_METADATA_DISABLED=true rules out the instance \
         metadata service (169.254.169.254), the only source left"
            .to_string()
    })
}

/// A prefix in an S3 bucket.
#[derive(Clone)]
pub struct S3Backend {
    client: Arc<Client>,
    prefix: String,
    /// The lease of the job folder, once this backend's family took it
    /// ([`StorageBackend::take_ownership`]): checked before every write.
    fence: Arc<OnceLock<Arc<Fence>>>,
}

impl std::fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "S3Backend(s3://{}/{})", self.client.bucket, self.prefix)
    }
}

/// The backend for location `text` (`s3://<rest>`, `rest` being `bucket/prefix`).
pub(super) fn open(text: &str, rest: &str) -> Result<S3Backend, StorageError> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(StorageError::Location {
            location: text.to_string(),
            reason: "no bucket named".into(),
            hint: "write s3://bucket/prefix",
        });
    }
    Ok(S3Backend {
        client: client(text, bucket)?,
        prefix: prefix.trim_matches('/').to_string(),
        fence: Arc::default(),
    })
}

impl S3Backend {
    fn key(&self, key: &str) -> String {
        match (self.prefix.is_empty(), key.is_empty()) {
            (true, _) => key.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{key}", self.prefix),
        }
    }

    fn path(&self, key: &str) -> ObjectPath {
        ObjectPath::from(self.key(key))
    }

    fn url(&self, key: &str) -> String {
        format!("s3://{}/{}", self.client.bucket, self.key(key))
    }

    /// An object_store error as a [`StorageError`]: absence and presence as the I/O kinds
    /// callers test for, anything else as one remote error with the way out for its cause.
    fn error(&self, op: &'static str, key: &str, e: object_store::Error) -> StorageError {
        let path = PathBuf::from(self.url(key));
        match e {
            object_store::Error::NotFound { .. } => {
                io_err(op, &path, READ_HINT)(io::ErrorKind::NotFound.into())
            }
            object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. } => {
                io_err(
                    op,
                    &path,
                    "checkpoint ids must not be reused; discard the checkpoint first",
                )(io::ErrorKind::AlreadyExists.into())
            }
            other => remote(op, &self.url(key), &other.to_string()),
        }
    }
}

impl S3Backend {
    /// Refuses a write of `key` in a job folder whose lease this run lost; before a
    /// checkpoint is completed (`renew`), renews the lease first, so that completion
    /// happens with a whole lease lifetime left (see [`lease`]).
    fn fenced(&self, key: &str, renew: bool) -> Result<(), StorageError> {
        match self.fence.get() {
            Some(_) if key == LEASE_OBJECT => Ok(()),
            Some(fence) if renew => fence.renew(),
            Some(fence) => fence.check(),
            None => Ok(()),
        }
    }

    /// An error of a write: "not found" there means the bucket is missing.
    fn write_error(&self, op: &'static str, key: &str, e: object_store::Error) -> StorageError {
        match e {
            object_store::Error::NotFound { .. } => remote(
                op,
                &self.url(key),
                "NoSuchBucket: the server answered 404 Not Found",
            ),
            other => self.error(op, key, other),
        }
    }
}

/// How object_store shows an HTTP 403 answer (the status code with its reason phrase).
/// The bare number would also match the message's URL: a port such as `:44033` or a
/// checkpoint `chk-403` made an outage look like refused credentials, ending the job
/// instead of waiting it out.
const FORBIDDEN: &str = "403 Forbidden";

/// A remote failure with the way out its message points at.
fn remote(op: &'static str, location: &str, cause: &str) -> StorageError {
    let has = |s: &str| cause.contains(s);
    let refused = has("NoSuchBucket")
        || has("bucket does not exist")
        || has("169.254.169.254")
        || has("InvalidAccessKeyId")
        || has("SignatureDoesNotMatch")
        || has(FORBIDDEN);
    let hint = if has("NoSuchBucket") || has("bucket does not exist") {
        "the bucket does not exist: create it, or fix the bucket in the s3:// URL".into()
    } else if has("169.254.169.254") {
        "no credentials were found (nor an instance role): set AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY"
            .into()
    } else if has("InvalidAccessKeyId") || has("SignatureDoesNotMatch") || has(FORBIDDEN) {
        "the server refused the credentials: check AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY (and AWS_REGION)"
            .into()
    } else if has("connect") || has("error sending request") || has("dns") {
        "the server cannot be reached: check AWS_ENDPOINT_URL (and AWS_ALLOW_HTTP for \
         http://) and that the server is running"
            .into()
    } else {
        "check the S3 server and the AWS_* settings, or pass another --checkpoint-dir".into()
    };
    let cause = cause.split_whitespace().collect::<Vec<_>>().join(" ");
    StorageError::Remote {
        op,
        location: location.to_string(),
        cause,
        hint,
        // What is not a refusal of the settings is the server failing or out of reach:
        // an outage that a later try may get past.
        transient: !refused,
    }
}

/// What the S3 backends of this process have moved, counted for tests and benchmarks that
/// check how objects travel (in parts, in ranges) rather than trusting it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Transfers {
    /// Objects written with one plain PUT (at most one part long).
    pub single_puts: u64,
    /// Multipart uploads started.
    pub multipart_uploads: u64,
    /// Parts sent by multipart uploads.
    pub parts_uploaded: u64,
    /// Ranged GETs (pieces of an object fetched concurrently).
    pub ranged_gets: u64,
}

/// The counters behind [`transfers`].
struct Counters {
    single_puts: AtomicU64,
    multipart_uploads: AtomicU64,
    parts_uploaded: AtomicU64,
    ranged_gets: AtomicU64,
}

static TRANSFERS: Counters = Counters {
    single_puts: AtomicU64::new(0),
    multipart_uploads: AtomicU64::new(0),
    parts_uploaded: AtomicU64::new(0),
    ranged_gets: AtomicU64::new(0),
};

/// What the S3 backends of this process have moved so far.
pub fn transfers() -> Transfers {
    let t = &TRANSFERS;
    Transfers {
        single_puts: t.single_puts.load(Ordering::Relaxed),
        multipart_uploads: t.multipart_uploads.load(Ordering::Relaxed),
        parts_uploaded: t.parts_uploaded.load(Ordering::Relaxed),
        ranged_gets: t.ranged_gets.load(Ordering::Relaxed),
    }
}

/// Size of the ranges a large read is split into, fetched [`RANGES_IN_FLIGHT`] at a time:
/// one GET stream rarely fills a link to object storage, several do.
const RANGE: usize = 8 << 20;

/// Ranged GETs in flight at once per read.
const RANGES_IN_FLIGHT: usize = 8;

impl StorageBackend for S3Backend {
    fn describe(&self, key: &str) -> PathBuf {
        PathBuf::from(self.url(key))
    }

    fn sub(&self, prefix: &str) -> Box<dyn StorageBackend> {
        Box::new(S3Backend {
            client: self.client.clone(),
            prefix: self.key(prefix),
            fence: self.fence.clone(),
        })
    }

    fn put(&self, key: &str) -> Result<Box<dyn ObjectWriter>, StorageError> {
        self.fenced(key, false)?;
        Ok(Box::new(S3Writer::new(self.clone(), key)))
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let completes =
            key == METADATA_FILE_NAME || key.ends_with(&format!("/{METADATA_FILE_NAME}"));
        self.fenced(key, completes)?;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let path = self.path(key);
        let put = self
            .client
            .store
            .put_opts(&path, PutPayload::from(bytes.to_vec()), opts);
        block(put)?.map_err(|e| self.write_error("create", key, e))?;
        Ok(())
    }

    fn size(&self, key: &str) -> Result<u64, StorageError> {
        let meta = block(self.client.store.head(&self.path(key)))?;
        Ok(meta.map_err(|e| self.error("read", key, e))?.size)
    }

    fn get(&self, key: &str, range: Option<Range<u64>>) -> Result<Vec<u8>, StorageError> {
        let store = &self.client.store;
        let path = self.path(key);
        let bytes = match range {
            None => block(async { store.get(&path).await?.bytes().await })?,
            Some(r) => block(store.get_range(&path, r))?,
        };
        Ok(bytes.map_err(|e| self.error("read", key, e))?.to_vec())
    }

    /// Reads `buf` in 8 MiB ranges (`RANGE`), several at once, each straight into its
    /// slice of `buf`.
    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        let store = &self.client.store;
        let path = self.path(key);
        let url = PathBuf::from(self.url(key));
        let url = &url;
        let all = futures::stream::iter(buf.chunks_mut(RANGE).enumerate())
            .map(|(i, chunk)| {
                let at = offset + (i * RANGE) as u64;
                fetch_range(store, &path, url, at, chunk)
            })
            .buffer_unordered(RANGES_IN_FLIGHT)
            .try_collect::<Vec<Result<(), StorageError>>>();
        let results = block(all)?.map_err(|e| self.error("read", key, e))?;
        results.into_iter().collect()
    }

    fn preferred_read_bytes(&self) -> usize {
        RANGES_IN_FLIGHT * RANGE
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let folder = self.key(prefix);
        let at = (!folder.is_empty()).then(|| ObjectPath::from(folder.clone()));
        let listed = block(self.client.store.list_with_delimiter(at.as_ref()))?
            .map_err(|e| self.error("list", prefix, e))?;
        let names = listed
            .common_prefixes
            .iter()
            .chain(listed.objects.iter().map(|o| &o.location))
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        Ok(names)
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.fenced(key, false)?;
        match block(self.client.store.delete(&self.path(key)))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("remove", key, e)),
        }
    }

    fn delete_all(&self, prefix: &str) -> Result<(), StorageError> {
        self.fenced(prefix, false)?;
        let folder = self.path(prefix);
        let store = &self.client.store;
        let keys: Vec<ObjectPath> = block(async {
            store
                .list(Some(&folder))
                .map_ok(|m| m.location)
                .try_collect()
                .await
        })?
        .map_err(|e| self.error("list", prefix, e))?;
        for k in keys {
            match block(store.delete(&k))? {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.error("remove", k.as_ref(), e)),
            }
        }
        Ok(())
    }

    fn folder_problem(&self) -> Result<Option<&'static str>, StorageError> {
        Ok(self.list("")?.is_empty().then_some("no such folder"))
    }

    fn ownership_lost(&self) -> Option<StorageError> {
        self.fence.get().and_then(|f| f.check().err())
    }

    fn take_ownership(&self) -> Result<Ownership, StorageError> {
        // The lease's own backend does not share the fence (it writes the lease itself).
        let plain = S3Backend {
            fence: Arc::default(),
            ..self.clone()
        };
        let (lease, fence) = Lease::take(plain)?;
        let _ = self.fence.set(fence);
        Ok(Box::new(lease))
    }
}

/// Fetches `chunk.len()` bytes of the object at `path` from `at` into `chunk`: the outer
/// error is the client's, the inner one a short read.
async fn fetch_range(
    store: &AmazonS3,
    path: &ObjectPath,
    url: &std::path::Path,
    at: u64,
    chunk: &mut [u8],
) -> object_store::Result<Result<(), StorageError>> {
    TRANSFERS.ranged_gets.fetch_add(1, Ordering::Relaxed);
    let bytes = store.get_range(path, at..at + chunk.len() as u64).await?;
    if bytes.len() != chunk.len() {
        let short = io::ErrorKind::UnexpectedEof.into();
        return Ok(Err(io_err("read", url, READ_HINT)(short)));
    }
    chunk.copy_from_slice(&bytes);
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    /// A server out of reach is transient whatever digits its URL holds; a 403 answer is a
    /// refusal of the settings. (Found by a CI run whose moto port was 44033.)
    #[test]
    fn an_unreachable_server_is_transient_even_when_its_url_holds_403() {
        let at = "s3://gone/chk/job/chk-403/_metadata";
        for cause in [
            "Error performing GET http://127.0.0.1:44033/gone/chk/job/chk-2/_metadata in \
             279.298343ms, after 2 retries - HTTP error: error sending request",
            "Error performing PUT http://127.0.0.1:9000/gone/chk/job/chk-403/_lease in \
             4030ms - HTTP error: error sending request",
        ] {
            let e = remote("read", at, cause);
            assert!(e.is_transient(), "{e}");
            assert!(e.to_string().contains("cannot be reached"), "{e}");
        }
        let refused = remote(
            "read",
            at,
            "Client error with status 403 Forbidden: <Error><Code>AccessDenied</Code></Error>",
        );
        assert!(!refused.is_transient(), "{refused}");
        assert!(
            refused.to_string().contains("refused the credentials"),
            "{refused}"
        );
    }

    #[test]
    fn metadata_disabled_without_credentials_is_refused_not_tried() {
        let off = ("AWS_EC2_METADATA_DISABLED", "true");
        let reason = metadata_disabled_without_credentials(env(&[off])).unwrap();
        assert!(reason.contains("AWS_EC2_METADATA_DISABLED"), "{reason}");
        assert!(metadata_disabled_without_credentials(env(&[(
            "AWS_EC2_METADATA_DISABLED",
            "TRUE"
        )]))
        .is_some());
        // Any other source of credentials, or metadata not disabled, builds the client.
        for other in [
            &[
                off,
                ("AWS_ACCESS_KEY_ID", "k"),
                ("AWS_SECRET_ACCESS_KEY", "s"),
            ][..],
            &[
                off,
                ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"),
                ("AWS_ROLE_ARN", "r"),
            ],
            &[off, ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2")],
            &[off, ("AWS_SKIP_SIGNATURE", "true")],
            &[("AWS_EC2_METADATA_DISABLED", "false")],
            &[],
        ] {
            assert!(
                metadata_disabled_without_credentials(env(other)).is_none(),
                "{other:?}"
            );
        }
    }
}
