//! Object stores (the `remote` feature): S3, Google Cloud Storage, Azure Blob Storage and
//! plain HTTP(S) through the `object_store` crate, behind a blocking interface the readers and
//! writers call like file I/O.
//!
//! An [`ObjectRoot`] is a URL prefix with its client and settings. Every request of a handle
//! takes one of `max_concurrency` permits, has the client's per-request timeout and retries
//! (exponential backoff), and the whole operation is bounded by [`config::operation_budget`]:
//! no call waits past its timeouts, whatever the server does.

mod config;
mod errors;
pub mod ranged;
pub(crate) mod runtime;

use std::future::Future;
use std::ops::Range;
use std::path::Path as FsPath;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tokio::sync::Semaphore;

use crate::error::{Error, ErrorKind, Result};

use super::location::RemoteUrl;
use super::options::Options;

/// Files up to this size are uploaded with one PUT; larger ones as a multipart upload of
/// parts this large (S3 wants at least 5 MiB per part).
const PART_SIZE: usize = 16 << 20;

/// Requests sent by one root, by kind (tests check "one GET per tile", "footer once").
#[derive(Debug, Default)]
pub struct RequestCounts {
    pub gets: AtomicU64,
    pub heads: AtomicU64,
    pub puts: AtomicU64,
    pub deletes: AtomicU64,
    pub lists: AtomicU64,
}

/// A URL prefix on an object store, ready for requests.
pub struct ObjectRoot {
    url: RemoteUrl,
    options: Options,
    /// The client and the runtime generation it was built for (rebuilt after a fork).
    client: Mutex<(u64, Arc<dyn ObjectStore>)>,
    permits: Arc<Semaphore>,
    counts: RequestCounts,
}

impl std::fmt::Debug for ObjectRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectRoot")
            .field("url", &self.url.url)
            .field("options", &self.options)
            .finish()
    }
}

impl ObjectRoot {
    /// A root at `url` with `options` (the client is configured now; nothing is sent).
    /// Errors: `InvalidArgument` (the backend refuses the configuration).
    pub fn new(url: RemoteUrl, options: Options) -> Result<Arc<ObjectRoot>> {
        let generation = runtime::generation()?;
        let client = config::build_store(&url, &options)?;
        Ok(Arc::new(ObjectRoot {
            permits: Arc::new(Semaphore::new(options.max_concurrency)),
            url,
            options,
            client: Mutex::new((generation, client)),
            counts: RequestCounts::default(),
        }))
    }

    /// The same store and settings at `rel` under this root (its own permits and counts).
    pub fn child(&self, rel: &str) -> Result<Arc<ObjectRoot>> {
        let mut url = self.url.clone();
        url.prefix = url.key(rel.trim_matches('/'));
        url.url = self.url.join(rel.trim_matches('/'));
        ObjectRoot::new(url, self.options.clone())
    }

    pub fn url(&self) -> &RemoteUrl {
        &self.url
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    pub fn counts(&self) -> &RequestCounts {
        &self.counts
    }

    /// The URL of `rel`, for messages.
    pub fn display(&self, rel: &str) -> String {
        self.url.join(rel)
    }

    fn client(&self) -> Result<Arc<dyn ObjectStore>> {
        let generation = runtime::generation()?;
        let mut c = self.client.lock().unwrap_or_else(|p| p.into_inner());
        if c.0 != generation {
            // A forked child: the old client's connections belong to the parent.
            let fresh = config::build_store(&self.url, &self.options)?;
            std::mem::forget(std::mem::replace(&mut *c, (generation, fresh)));
        }
        Ok(c.1.clone())
    }

    fn path(&self, rel: &str) -> Result<Path> {
        let key = self.url.key(rel);
        Path::parse(&key).map_err(|e| {
            Error::invalid_argument(format!(
                "{}: not a valid object path: {e}",
                self.display(rel)
            ))
        })
    }

    /// Runs one request of operation `op` on `rel`: a permit, the operation budget, and the
    /// client's error turned into ours.
    async fn request<T, F, Fut>(self: Arc<Self>, rel: String, op: &'static str, f: F) -> Result<T>
    where
        F: FnOnce(Arc<dyn ObjectStore>, Path) -> Fut,
        Fut: Future<Output = object_store::Result<T>>,
    {
        let client = self.client()?;
        let path = self.path(&rel)?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::new(ErrorKind::Internal, "request permits closed"))?;
        let counter = match op {
            "HEAD" => &self.counts.heads,
            "PUT" | "multipart upload" => &self.counts.puts,
            "DELETE" => &self.counts.deletes,
            "LIST" => &self.counts.lists,
            _ => &self.counts.gets,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let budget = config::operation_budget(&self.options) + Duration::from_secs(1);
        match tokio::time::timeout(budget, f(client, path)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(errors::from_store(
                &self.display(&rel),
                op,
                self.options.retries,
                &e,
                &self.options.secrets(),
            )),
            Err(_) => Err(errors::timed_out(
                &self.display(&rel),
                op,
                budget,
                self.options.timeout,
            )),
        }
    }

    async fn get_async(self: Arc<Self>, rel: String) -> Result<Bytes> {
        self.request(
            rel,
            "GET",
            |c, p| async move { c.get(&p).await?.bytes().await },
        )
        .await
    }

    /// The whole object `rel` (one GET).
    pub fn get(self: &Arc<Self>, rel: &str) -> Result<Bytes> {
        runtime::block_on(self.clone().get_async(rel.to_string()))
    }

    /// Starts a GET of the whole object `rel` on the library's runtime and returns at once;
    /// `done` receives the outcome on a runtime thread (exactly once: an error if the task
    /// ends without one). The request takes a permit like any other, so requests started
    /// this way queue behind the `max_concurrency` in flight, first started first served.
    pub(crate) fn get_detached(
        self: &Arc<Self>,
        rel: String,
        done: impl FnOnce(Result<Bytes>) + Send + 'static,
    ) -> Result<()> {
        /// Calls `done` with an error if the task is dropped before it called it.
        struct Once<F: FnOnce(Result<Bytes>)>(Option<F>);
        impl<F: FnOnce(Result<Bytes>)> Once<F> {
            fn call(&mut self, r: Result<Bytes>) {
                if let Some(f) = self.0.take() {
                    f(r)
                }
            }
        }
        impl<F: FnOnce(Result<Bytes>)> Drop for Once<F> {
            fn drop(&mut self) {
                self.call(Err(Error::new(
                    ErrorKind::Internal,
                    "a remote-storage task ended without a result",
                )));
            }
        }
        let (runtime, _) = runtime::runtime()?;
        let me = self.clone();
        let mut done = Once(Some(done));
        runtime.spawn(async move {
            let r = me.get_async(rel).await;
            done.call(r);
        });
        Ok(())
    }

    /// Objects `rels` (one GET each), `max_concurrency` in flight; in order. The first
    /// failing object (in order) is the error.
    pub fn get_many(self: &Arc<Self>, rels: Vec<String>) -> Result<Vec<Bytes>> {
        let me = self.clone();
        let width = self.options.max_concurrency;
        runtime::block_on(async move {
            let results: Vec<Result<Bytes>> = stream::iter(rels)
                .map(|rel| me.clone().get_async(rel))
                .buffered(width)
                .collect()
                .await;
            results.into_iter().collect()
        })
    }

    /// Objects `rels` (one GET each), `max_concurrency` in flight, each answer on its own:
    /// the bytes, `None` for a missing object, or the request's error (in order).
    pub fn get_many_opt(self: &Arc<Self>, rels: Vec<String>) -> Vec<Result<Option<Bytes>>> {
        let me = self.clone();
        let width = self.options.max_concurrency;
        let n = rels.len();
        runtime::block_on(async move {
            let results: Vec<Result<Option<Bytes>>> = stream::iter(rels)
                .map(|rel| {
                    let me = me.clone();
                    async move {
                        match me.get_async(rel).await {
                            Ok(b) => Ok(Some(b)),
                            Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
                            Err(e) => Err(e),
                        }
                    }
                })
                .buffered(width)
                .collect()
                .await;
            Ok(results)
        })
        .unwrap_or_else(|e| (0..n).map(|_| Err(e.clone())).collect())
    }

    /// Bytes `range` of `rel` (one ranged GET).
    pub fn get_range(self: &Arc<Self>, rel: &str, range: Range<u64>) -> Result<Bytes> {
        let me = self.clone();
        let rel = rel.to_string();
        runtime::block_on(async move {
            me.request(rel, "ranged GET", |c, p| async move {
                c.get_range(&p, range).await
            })
            .await
        })
    }

    /// Byte ranges of `rel`, in order: ranges less than 1 MiB apart are fetched by one
    /// request, up to 10 requests at a time (object_store's coalescing).
    pub fn get_ranges(self: &Arc<Self>, rel: &str, ranges: Vec<Range<u64>>) -> Result<Vec<Bytes>> {
        let me = self.clone();
        let rel = rel.to_string();
        runtime::block_on(async move {
            me.request(rel, "ranged GET", |c, p| async move {
                c.get_ranges(&p, &ranges).await
            })
            .await
        })
    }

    /// The last `n` bytes of `rel` (all of it when shorter) and its size, from one ranged
    /// GET of a suffix (`Range: bytes=-n`): what a HEAD then a ranged read of the tail
    /// would learn, in one request. Missing: `NotFound`. An empty object has no suffix
    /// (servers refuse the range): when the GET fails, a HEAD (within the same operation
    /// budget) tells an empty object, `(0, [])`, from a failure, the GET's error.
    pub fn get_suffix(self: &Arc<Self>, rel: &str, n: u64) -> Result<(u64, Bytes)> {
        let me = self.clone();
        let rel = rel.to_string();
        runtime::block_on(async move {
            me.request(rel, "ranged GET", |c, p| async move {
                let options = GetOptions {
                    range: Some(GetRange::Suffix(n)),
                    ..GetOptions::default()
                };
                match c.get_opts(&p, options).await {
                    Ok(got) => {
                        let size = got.meta.size;
                        Ok((size, got.bytes().await?))
                    }
                    Err(e @ object_store::Error::NotFound { .. }) => Err(e),
                    Err(e) => match c.head(&p).await {
                        Ok(meta) if meta.size == 0 => Ok((0, Bytes::new())),
                        _ => Err(e),
                    },
                }
            })
            .await
        })
    }

    /// The size of `rel` in bytes (HEAD). Missing: `NotFound`.
    pub fn size(self: &Arc<Self>, rel: &str) -> Result<u64> {
        let me = self.clone();
        let rel = rel.to_string();
        runtime::block_on(async move {
            me.request(rel, "HEAD", |c, p| async move { c.head(&p).await })
                .await
                .map(|m| m.size)
        })
    }

    /// Whether `rel` exists (HEAD).
    pub fn exists(self: &Arc<Self>, rel: &str) -> Result<bool> {
        match self.size(rel) {
            Ok(_) => Ok(true),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn check_writable(&self) -> Result<()> {
        if self.url.scheme.writable() {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{}: HTTP(S) URLs are read only; write to s3://, gs:// or az://",
                    self.url
                ),
            ))
        }
    }

    /// Writes `rel` with `bytes` (one PUT: the object is complete or absent).
    pub fn put(self: &Arc<Self>, rel: &str, bytes: Bytes) -> Result<()> {
        self.check_writable()?;
        let me = self.clone();
        let rel = rel.to_string();
        runtime::block_on(async move {
            me.request(rel, "PUT", |c, p| async move {
                c.put(&p, PutPayload::from(bytes)).await
            })
            .await
            .map(|_| ())
        })
    }

    /// Uploads the local file `file` to `rel`: one PUT up to 16 MiB, else one multipart
    /// upload (parts in parallel up to `max_concurrency`), completed only once every part is
    /// stored and aborted on any error — the object is complete or absent.
    pub fn put_file(self: &Arc<Self>, rel: &str, file: &FsPath) -> Result<()> {
        self.check_writable()?;
        let len = std::fs::metadata(file)
            .map_err(|e| Error::io(file, &e))?
            .len();
        if len <= PART_SIZE as u64 {
            let bytes = std::fs::read(file).map_err(|e| Error::io(file, &e))?;
            return self.put(rel, Bytes::from(bytes));
        }
        let me = self.clone();
        let rel = rel.to_string();
        let file = file.to_path_buf();
        runtime::block_on(async move { me.multipart(rel, file).await })
    }

    /// Uploads the local file `file` to `rel` as one multipart upload whatever its size
    /// (parts of 16 MiB, in parallel up to `max_concurrency`), completed only once every part
    /// is stored and aborted on any error: the object is complete or absent. For the objects
    /// whose writers promise exactly that (a `.cdz` store).
    pub fn put_file_multipart(self: &Arc<Self>, rel: &str, file: &FsPath) -> Result<()> {
        self.check_writable()?;
        let me = self.clone();
        let rel = rel.to_string();
        let file = file.to_path_buf();
        runtime::block_on(async move { me.multipart(rel, file).await })
    }

    async fn multipart(self: Arc<Self>, rel: String, file: std::path::PathBuf) -> Result<()> {
        let url = self.display(&rel);
        let width = self.options.max_concurrency;
        let upload = self
            .clone()
            .request(rel.clone(), "multipart upload", |c, p| async move {
                c.put_multipart(&p).await
            })
            .await?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut source = std::fs::File::open(&file).map_err(|e| Error::io(&file, &e))?;
        let mut buf = vec![0u8; PART_SIZE];
        let outcome: Result<()> = async {
            loop {
                let n = read_full(&mut source, &mut buf).map_err(|e| Error::io(&file, &e))?;
                if n == 0 {
                    return Ok(());
                }
                writer.wait_for_capacity(width).await.map_err(|e| {
                    errors::from_store(&url, "multipart upload", self.options.retries, &e, &[])
                })?;
                writer.write(&buf[..n]);
            }
        }
        .await;
        let budget = config::operation_budget(&self.options) + Duration::from_secs(1);
        match outcome {
            Ok(()) => match tokio::time::timeout(budget, writer.finish()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(errors::from_store(
                    &url,
                    "multipart upload",
                    self.options.retries,
                    &e,
                    &self.options.secrets(),
                )),
                Err(_) => Err(errors::timed_out(
                    &url,
                    "multipart upload",
                    budget,
                    self.options.timeout,
                )),
            },
            Err(e) => {
                // Nothing becomes visible; the parts are released (best effort).
                let _ = tokio::time::timeout(budget, writer.abort()).await;
                Err(e)
            }
        }
    }

    /// Deletes `rel`; a missing object is not an error.
    pub fn delete(self: &Arc<Self>, rel: &str) -> Result<()> {
        self.check_writable()?;
        let me = self.clone();
        let rel = rel.to_string();
        runtime::block_on(async move {
            match me
                .request(rel, "DELETE", |c, p| async move { c.delete(&p).await })
                .await
            {
                Err(e) if e.kind == ErrorKind::NotFound => Ok(()),
                other => other,
            }
        })
    }

    /// The objects under `rel` (a "directory": `rel/...`; everything when `rel` and the
    /// root's prefix are empty), as paths relative to the root, sorted.
    pub fn list(self: &Arc<Self>, rel: &str) -> Result<Vec<String>> {
        let me = self.clone();
        let rel = rel.to_string();
        let metas = runtime::block_on(async move {
            me.request(rel, "LIST", |c, p| async move {
                let prefix = (!p.as_ref().is_empty()).then_some(p);
                c.list(prefix.as_ref()).try_collect::<Vec<_>>().await
            })
            .await
        })?;
        let base = self.url.prefix.as_str();
        let mut out: Vec<String> = metas
            .into_iter()
            .map(|m| {
                let key = m.location.as_ref();
                match key.strip_prefix(base) {
                    Some(r) if !base.is_empty() => r.trim_start_matches('/').to_string(),
                    _ => key.to_string(),
                }
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Deletes every object under `rel` (see [`ObjectRoot::list`]), up to
    /// `max_concurrency` requests at a time.
    pub fn delete_under(self: &Arc<Self>, rel: &str) -> Result<()> {
        self.check_writable()?;
        let rels = self.list(rel)?;
        let me = self.clone();
        let width = self.options.max_concurrency;
        runtime::block_on(async move {
            stream::iter(rels)
                .map(|rel| {
                    me.clone()
                        .request(rel, "DELETE", |c, p| async move { c.delete(&p).await })
                })
                .buffer_unordered(width)
                .filter_map(|r| async move {
                    match r {
                        Err(e) if e.kind == ErrorKind::NotFound => None,
                        other => Some(other),
                    }
                })
                .try_collect::<Vec<()>>()
                .await
                .map(|_| ())
        })
    }

    /// Uploads the files under the local directory `dir` to the same relative keys, those
    /// `keep(rel, is_dir)` accepts (a directory it refuses is not entered), as `put_files`.
    pub fn put_dir(
        self: &Arc<Self>,
        dir: &FsPath,
        keep: impl Fn(&str, bool) -> bool,
    ) -> Result<()> {
        let mut files = Vec::new();
        let mut stack = vec![(dir.to_path_buf(), String::new())];
        while let Some((d, rel)) = stack.pop() {
            for entry in std::fs::read_dir(&d).map_err(|e| Error::io(&d, &e))? {
                let entry = entry.map_err(|e| Error::io(&d, &e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let child = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                let is_dir = entry
                    .file_type()
                    .map_err(|e| Error::io(&entry.path(), &e))?
                    .is_dir();
                if !keep(&child, is_dir) {
                    continue;
                }
                if is_dir {
                    stack.push((entry.path(), child));
                } else {
                    files.push((child, entry.path()));
                }
            }
        }
        self.put_files(files)
    }

    /// Uploads local files (`(rel, path)` pairs), up to `max_concurrency` at a time.
    pub fn put_files(self: &Arc<Self>, files: Vec<(String, std::path::PathBuf)>) -> Result<()> {
        self.check_writable()?;
        let me = self.clone();
        let width = self.options.max_concurrency;
        runtime::block_on(async move {
            stream::iter(files)
                .map(|(rel, path)| {
                    let me = me.clone();
                    async move {
                        let len = std::fs::metadata(&path)
                            .map_err(|e| Error::io(&path, &e))?
                            .len();
                        if len > PART_SIZE as u64 {
                            return me.multipart(rel, path).await;
                        }
                        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, &e))?;
                        me.request(rel, "PUT", |c, p| async move {
                            c.put(&p, PutPayload::from(bytes)).await
                        })
                        .await
                        .map(|_| ())
                    }
                })
                .buffer_unordered(width)
                .try_collect::<Vec<()>>()
                .await
                .map(|_| ())
        })
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
