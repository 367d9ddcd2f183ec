//! Where the bytes of a store live: a `*.chromdata.zarr` directory or a `.cdz` zip of
//! STORED members, on the local file system or at a URL (an object-store prefix, or one
//! `.cdz` object). Both are seen as a map from a `/`-separated path (relative to the store
//! root) to a byte range of one file or object, read with positioned reads (no memory maps,
//! no extraction) or ranged GETs. Parquet reads through [`FileSlice`], Zarr arrays through
//! `ZarrsStorage`.
//!
//! Local stores keep the fast path of positioned reads on an open file. A remote directory
//! store reads each file by key (`zarr.json` and Zarr chunks whole, Parquet by ranges); a
//! remote `.cdz` reads its central directory by ranged reads of the object's tail, then
//! each member's local header once (its data offset is remembered) and its data by ranges.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;

#[cfg(feature = "remote")]
use crate::storage::remote::ObjectRoot;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::OpenDir;

/// Where a slice's bytes are read from.
#[derive(Clone, Debug)]
enum Source {
    File(Arc<File>),
    /// Bytes already in memory (a file fetched whole while the store opens).
    Memory(bytes::Bytes),
    /// `rel` under an object-store root (`""`: the root object itself, a `.cdz`), and the
    /// slice's last `tail.len()` bytes when they were fetched with it
    /// ([`Store::slice_tail`]).
    #[cfg(feature = "remote")]
    Object {
        root: Arc<ObjectRoot>,
        rel: Arc<str>,
        tail: bytes::Bytes,
    },
}

/// A byte range of a file or object: a whole file of a directory store, or the data of one
/// STORED member of a `.cdz`.
#[derive(Clone, Debug)]
pub(crate) struct FileSlice {
    source: Source,
    base: u64,
    len: u64,
    /// Store path, for messages.
    pub(crate) name: Arc<str>,
}

impl FileSlice {
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Reads `length` bytes at `start` (relative to the slice) into `buf` (replacing its
    /// content, reusing its allocation); short data is an error (`Format` past the end of
    /// the slice, `Io` for a failed read or request, `NotFound` for a vanished object).
    pub(crate) fn read_into(&self, start: u64, buf: &mut Vec<u8>, length: usize) -> Result<()> {
        self.check_range(start, length)?;
        match &self.source {
            Source::File(file) => {
                read_exact_into(file, buf, length, self.base + start).map_err(|e| self.io_error(&e))
            }
            Source::Memory(b) => {
                let at = (self.base + start) as usize;
                buf.clear();
                buf.extend_from_slice(&b[at..at + length]);
                Ok(())
            }
            #[cfg(feature = "remote")]
            Source::Object { tail, .. } => {
                let tail_start = self.len - tail.len() as u64;
                if start >= tail_start {
                    let at = (start - tail_start) as usize;
                    buf.clear();
                    buf.extend_from_slice(&tail[at..at + length]);
                    return Ok(());
                }
                let got = self.fetch(start, length)?;
                buf.clear();
                buf.extend_from_slice(&got);
                Ok(())
            }
        }
    }

    /// One ranged GET of `length` bytes at `start` (relative to the slice).
    #[cfg(feature = "remote")]
    fn fetch(&self, start: u64, length: usize) -> Result<bytes::Bytes> {
        let Source::Object { root, rel, .. } = &self.source else {
            unreachable!("fetch of a local slice")
        };
        if length == 0 {
            return Ok(bytes::Bytes::new());
        }
        let at = self.base + start;
        let got = root.get_range(rel, at..at + length as u64)?;
        if got.len() != length {
            return Err(Error::format(format!(
                "{}: read {} bytes at {start}, expected {length} (the object is shorter)",
                self.name,
                got.len()
            )));
        }
        Ok(got)
    }

    fn io_error(&self, e: &std::io::Error) -> Error {
        Error::new(ErrorKind::Io, format!("{}: {e}", self.name))
    }

    fn check_range(&self, start: u64, length: usize) -> Result<()> {
        let end = start.checked_add(length as u64);
        if end.is_none_or(|e| e > self.len) {
            return Err(Error::format(format!(
                "{}: read of {length} bytes at {start} past the end ({} bytes)",
                self.name, self.len
            )));
        }
        Ok(())
    }

    /// Reads `length` bytes at `start` (relative to the slice); short data is an error.
    pub(crate) fn read_at(&self, start: u64, length: usize) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        self.read_into(start, &mut buf, length)?;
        Ok(buf)
    }

    pub(crate) fn read_all(&self) -> Result<Vec<u8>> {
        self.read_at(0, self.len as usize)
    }

    /// The same slice without the tail bytes [`Store::slice_tail`] fetched with it (its
    /// later reads go to the object).
    pub(crate) fn without_tail(self) -> FileSlice {
        match self.source {
            #[cfg(feature = "remote")]
            Source::Object { root, rel, .. } => FileSlice {
                source: Source::Object {
                    root,
                    rel,
                    tail: bytes::Bytes::new(),
                },
                ..self
            },
            _ => self,
        }
    }

    /// Whether the bytes are in a local file (else behind requests to an object store).
    pub(crate) fn is_local(&self) -> bool {
        matches!(self.source, Source::File(_))
    }

    /// Whether the bytes come from an object store (each read a request).
    pub(crate) fn is_remote(&self) -> bool {
        match &self.source {
            Source::File(_) | Source::Memory(_) => false,
            #[cfg(feature = "remote")]
            Source::Object { .. } => true,
        }
    }

    /// Requests this slice's reads may have in flight at once: 1 for a local file, the
    /// store's `max_concurrency` at a URL (readers run that many row-group reads at once).
    pub(crate) fn request_width(&self) -> usize {
        match &self.source {
            Source::File(_) | Source::Memory(_) => 1,
            #[cfg(feature = "remote")]
            Source::Object { root, .. } => io_width(root),
        }
    }
}

/// Threads that wait on requests of `root` at once: its `max_concurrency`, bounded so that a
/// large setting does not start hundreds of threads (requests beyond it still queue on the
/// root's permits).
#[cfg(feature = "remote")]
fn io_width(root: &ObjectRoot) -> usize {
    const MAX_IO_THREADS: usize = 32;
    root.options().max_concurrency.min(MAX_IO_THREADS)
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset)
}

/// Replaces `buf`'s content with the `length` bytes of `file` at `offset`, read straight
/// into its spare capacity: zero-filling the buffer first (`resize`) was 3 % of a
/// get_chrom, every column chunk's bytes written twice.
#[cfg(unix)]
fn read_exact_into(
    file: &File,
    buf: &mut Vec<u8>,
    length: usize,
    offset: u64,
) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    buf.clear();
    buf.reserve(length);
    let mut done = 0usize;
    while done < length {
        let at = offset
            .checked_add(done as u64)
            .and_then(|o| libc::off_t::try_from(o).ok())
            .ok_or_else(|| std::io::Error::other("offset out of range"))?;
        // SAFETY: the destination is the vector's spare capacity: `length` bytes were
        // reserved above and `done < length` of them written, so `length - done` bytes
        // from `as_mut_ptr() + done` lie inside the allocation; pread writes at most that
        // many, and nothing reads them before `set_len` below.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buf.as_mut_ptr().add(done).cast(),
                length - done,
                at,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "failed to fill whole buffer",
            ));
        }
        done += n as usize;
    }
    // SAFETY: the loop above wrote all `length` bytes (`length <= capacity`).
    unsafe { buf.set_len(length) };
    Ok(())
}

#[cfg(windows)]
fn read_exact_into(
    file: &File,
    buf: &mut Vec<u8>,
    length: usize,
    offset: u64,
) -> std::io::Result<()> {
    buf.clear();
    buf.resize(length, 0);
    read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "unexpected end of file",
                ))
            }
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One member of a `.cdz`: where its local header is and how it is stored.
#[derive(Clone, Copy, Debug)]
struct ZipMember {
    header_start: u64,
    /// Where the next member's local header (or the central directory) starts: the
    /// member's local header, data and data descriptor lie in `header_start..span_end`.
    span_end: u64,
    compressed_size: u64,
    size: u64,
    stored: bool,
}

#[derive(Debug)]
enum Backend {
    /// Held open: members are opened relative to it, so a writer replacing the store at
    /// its path meanwhile never mixes its files into this handle (storage::dir).
    Dir(OpenDir),
    Zip {
        file: Arc<File>,
        members: HashMap<String, ZipMember>,
    },
    /// A directory store under an object-store prefix.
    #[cfg(feature = "remote")]
    RemoteDir(Arc<ObjectRoot>),
    /// A `.cdz` object (the root object itself).
    #[cfg(feature = "remote")]
    RemoteZip {
        root: Arc<ObjectRoot>,
        len: u64,
        members: HashMap<String, ZipMember>,
        /// Data offsets of members whose local header was read.
        bases: Mutex<HashMap<String, u64>>,
    },
}

/// An opened store container.
#[derive(Debug)]
pub(crate) struct Store {
    backend: Backend,
    /// Files fetched whole ahead of their reads while the store opens (`None`: known to be
    /// missing), by store path; emptied when the open ends ([`Store::end_ahead`]).
    ahead: Mutex<HashMap<String, Option<bytes::Bytes>>>,
    /// The path or URL the user gave, for messages.
    pub(crate) display: String,
    /// Where the store is on the local file system (the directory or the `.cdz`); `None`
    /// for a store at a URL.
    pub(crate) location: Option<PathBuf>,
}

/// Whether `path` stays inside the store (no `..`, empty or absolute components).
fn check_inside(display: &str, path: &str) -> Result<()> {
    if path.split('/').any(|c| c == ".." || c.is_empty()) || path.starts_with('/') {
        return Err(Error::format(format!(
            "{display}: path \"{path}\" leaves the store"
        )));
    }
    Ok(())
}

impl Store {
    /// Dispatch by path (spec §13): `*.cdz` or a regular file starting with `PK\x03\x04` is a
    /// zip store; a directory is a directory store.
    pub(crate) fn open(path: &Path) -> Result<Store> {
        let display = path.display().to_string();
        if crate::storage::fs::is_temp_name(path) {
            // A writer's temporary sibling (an unfinished or killed write) never opens.
            return Err(Error::new(
                crate::error::ErrorKind::NotFound,
                format!("{display}: the temporary output of an unfinished write, not a store"),
            ));
        }
        let md = std::fs::metadata(path).map_err(|e| Error::io(path, &e))?;
        if md.is_dir() {
            return Ok(Store {
                ahead: Mutex::default(),
                backend: Backend::Dir(OpenDir::open(path)?),
                display,
                location: Some(path.to_path_buf()),
            });
        }
        let mut file = File::open(path).map_err(|e| Error::io(path, &e))?;
        let mut magic = [0u8; 4];
        let n = read_up_to(&mut file, &mut magic).map_err(|e| Error::io(path, &e))?;
        let is_cdz = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("cdz"));
        if !(is_cdz || (n == 4 && &magic == b"PK\x03\x04")) {
            return Err(Error::format(format!(
                "{display}: neither a directory store nor a .cdz zip archive"
            )));
        }
        file.seek(SeekFrom::Start(0))
            .map_err(|e| Error::io(path, &e))?;
        // The zip crate parses the central directory: contained (docs/reliability.md).
        // The members are read through a second descriptor of the same open file, never by
        // opening the path again: a writer replacing the archive in between would pair this
        // central directory with the new archive's bytes.
        let listed = file.try_clone().map_err(|e| Error::io(path, &e))?;
        let members = crate::contain::decoding(&display, || zip_members(listed, &display))?;
        Ok(Store {
            ahead: Mutex::default(),
            backend: Backend::Zip {
                file: Arc::new(file),
                members,
            },
            display,
            location: Some(path.to_path_buf()),
        })
    }

    /// A store at a URL: a `.cdz` object when the URL's last component ends in `.cdz`,
    /// else a directory store under the prefix. Nothing is read for a directory store (its
    /// `zarr.json` is read first by the opener); a `.cdz`'s central directory is read now
    /// (its size with one HEAD, then the tail by ranged GETs). Missing `.cdz`: `NotFound`.
    #[cfg(feature = "remote")]
    pub(crate) fn open_remote(root: Arc<ObjectRoot>) -> Result<Store> {
        let display = root.url().url.clone();
        let is_cdz = root
            .url()
            .file_name()
            .to_ascii_lowercase()
            .ends_with(".cdz");
        if !is_cdz {
            return Ok(Store {
                ahead: Mutex::default(),
                backend: Backend::RemoteDir(root),
                display,
                location: None,
            });
        }
        let object = crate::storage::remote::ranged::RangedObject::open(root.clone(), "")?;
        let len = object.len();
        object.prefetch_tail(crate::storage::remote::ranged::FOOTER_GUESS)?;
        let reader = RangedReadSeek {
            object,
            pos: 0,
            error: None,
        };
        let members = crate::contain::decoding(&display, || zip_members_remote(reader, &display))?;
        Ok(Store {
            ahead: Mutex::default(),
            backend: Backend::RemoteZip {
                root,
                len,
                members,
                bases: Mutex::new(HashMap::new()),
            },
            display,
            location: None,
        })
    }

    /// Requests the store's reads may have in flight at once (see
    /// [`FileSlice::request_width`]).
    pub(crate) fn request_width(&self) -> usize {
        match &self.backend {
            Backend::Dir(_) | Backend::Zip { .. } => 1,
            #[cfg(feature = "remote")]
            Backend::RemoteDir(root) | Backend::RemoteZip { root, .. } => io_width(root),
        }
    }

    /// The URL of a store at a URL (None for a local store).
    pub(crate) fn remote_url(&self) -> Option<&crate::storage::RemoteUrl> {
        match &self.backend {
            #[cfg(feature = "remote")]
            Backend::RemoteDir(root) | Backend::RemoteZip { root, .. } => Some(root.url()),
            _ => None,
        }
    }

    /// Requests (GET and HEAD) sent to the object store so far; 0 for a local store.
    pub(crate) fn requests_sent(&self) -> u64 {
        match &self.backend {
            #[cfg(feature = "remote")]
            Backend::RemoteDir(root) | Backend::RemoteZip { root, .. } => {
                use std::sync::atomic::Ordering::Relaxed;
                let c = root.counts();
                c.gets.load(Relaxed) + c.heads.load(Relaxed)
            }
            _ => 0,
        }
    }

    /// Whether the store is a directory that was deleted or replaced since it was opened
    /// (`OpenDir::deleted`). A `.cdz` is replaced by a rename, and the archive held open
    /// keeps its bytes: never.
    pub(crate) fn replaced(&self) -> bool {
        matches!(&self.backend, Backend::Dir(d) if d.deleted())
    }

    /// Whether `path` exists (as a file / member). For a store at a URL this is a HEAD
    /// request, whose failure (other than a missing object) is the error.
    pub(crate) fn exists(&self, path: &str) -> Result<bool> {
        if let Some(known) = self.ahead_of(path) {
            return Ok(known.is_some());
        }
        match &self.backend {
            Backend::Dir(root) => Ok(root
                .open_file(path)
                .and_then(|f| f.metadata().map_err(|e| Error::io(Path::new(path), &e)))
                .is_ok_and(|m| m.is_file())),
            Backend::Zip { members, .. } => Ok(members.contains_key(path)),
            #[cfg(feature = "remote")]
            Backend::RemoteDir(root) => {
                check_inside(&self.display, path)?;
                root.exists(path)
            }
            #[cfg(feature = "remote")]
            Backend::RemoteZip { members, .. } => Ok(members.contains_key(path)),
        }
    }

    fn member<'a>(
        &self,
        members: &'a HashMap<String, ZipMember>,
        path: &str,
        name: &str,
    ) -> Result<&'a ZipMember> {
        let m = members
            .get(path)
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("{name}: no such member")))?;
        if !m.stored {
            return Err(Error::unsupported(format!(
                "{name}: zip member is compressed; .cdz members must be STORED"
            )));
        }
        if m.compressed_size != m.size {
            return Err(Error::format(format!(
                "{name}: STORED member with compressed size {} != size {}",
                m.compressed_size, m.size
            )));
        }
        Ok(m)
    }

    /// The bytes of `path` as a slice. A missing path is `NotFound`.
    pub(crate) fn slice(&self, path: &str) -> Result<FileSlice> {
        let name: Arc<str> = Arc::from(format!("{}/{path}", self.display));
        if let Some(Some(bytes)) = self.ahead_of(path) {
            return Ok(FileSlice {
                len: bytes.len() as u64,
                source: Source::Memory(bytes),
                base: 0,
                name,
            });
        }
        match &self.backend {
            Backend::Dir(root) => {
                check_inside(&self.display, path)?;
                let full = root.path().join(path);
                let file = root.open_file(path)?;
                let md = file.metadata().map_err(|e| Error::io(&full, &e))?;
                if !md.is_file() {
                    return Err(Error::new(
                        ErrorKind::NotFound,
                        format!("{name}: not a regular file"),
                    ));
                }
                Ok(FileSlice {
                    source: Source::File(Arc::new(file)),
                    base: 0,
                    len: md.len(),
                    name,
                })
            }
            Backend::Zip { file, members } => {
                let m = self.member(members, path, &name)?;
                // Data start from the local header's own name / extra lengths (§13).
                let mut lh = [0u8; 30];
                read_exact_at(file, &mut lh, m.header_start)
                    .map_err(|e| Error::format(format!("{name}: local header unreadable: {e}")))?;
                let total = file
                    .metadata()
                    .map_err(|e| Error::io(Path::new(&self.display), &e))?
                    .len();
                let base = member_base(&lh, m, total, &name)?;
                Ok(FileSlice {
                    source: Source::File(file.clone()),
                    base,
                    len: m.size,
                    name,
                })
            }
            #[cfg(feature = "remote")]
            Backend::RemoteDir(root) => {
                check_inside(&self.display, path)?;
                let len = root.size(path)?;
                Ok(FileSlice {
                    source: Source::Object {
                        root: root.clone(),
                        rel: Arc::from(path),
                        tail: bytes::Bytes::new(),
                    },
                    base: 0,
                    len,
                    name,
                })
            }
            #[cfg(feature = "remote")]
            Backend::RemoteZip {
                root,
                len,
                members,
                bases,
            } => {
                let m = self.member(members, path, &name)?;
                let known = bases
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(path)
                    .copied();
                let base = match known {
                    Some(b) => b,
                    None => {
                        let lh = root
                            .get_range("", m.header_start..m.header_start + 30)
                            .map_err(|e| e.context(format_args!("{name}: local header")))?;
                        let b = member_base(&lh, m, *len, &name)?;
                        bases
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(path.to_string(), b);
                        b
                    }
                };
                Ok(FileSlice {
                    source: Source::Object {
                        root: root.clone(),
                        rel: Arc::from(""),
                        tail: bytes::Bytes::new(),
                    },
                    base,
                    len: m.size,
                    name,
                })
            }
        }
    }

    /// [`slice`](Store::slice) of `path` with, at a URL, its last `n` bytes (or all of it
    /// when shorter) fetched in the same round as what a slice needs anyway (a Parquet
    /// footer: [`FileSlice::read_at`] of those bytes then costs no request). A directory
    /// store's file: one suffix GET (its size comes with the bytes) instead of a HEAD; a
    /// `.cdz` member: its local header (unless its data offset is known) and its tail by
    /// concurrent ranged reads (one request when they are near). Local stores: `slice`.
    pub(crate) fn slice_tail(&self, path: &str, n: u64) -> Result<FileSlice> {
        #[cfg(feature = "remote")]
        if !matches!(self.ahead_of(path), Some(Some(_))) {
            match &self.backend {
                Backend::RemoteDir(root) => return self.remote_file_tail(root, path, n),
                Backend::RemoteZip {
                    root,
                    len,
                    members,
                    bases,
                } => return self.remote_member_tail(root, *len, members, bases, path, n),
                _ => {}
            }
        }
        let _ = n;
        self.slice(path)
    }

    /// See [`slice_tail`](Store::slice_tail): a file of a remote directory store.
    #[cfg(feature = "remote")]
    fn remote_file_tail(&self, root: &Arc<ObjectRoot>, path: &str, n: u64) -> Result<FileSlice> {
        check_inside(&self.display, path)?;
        let name: Arc<str> = Arc::from(format!("{}/{path}", self.display));
        let (len, tail) = root.get_suffix(path, n)?;
        if tail.len() as u64 > len {
            return Err(Error::format(format!(
                "{name}: the server sent {} bytes of the tail of a {len}-byte object",
                tail.len()
            )));
        }
        Ok(FileSlice {
            source: Source::Object {
                root: root.clone(),
                rel: Arc::from(path),
                tail,
            },
            base: 0,
            len,
            name,
        })
    }

    /// See [`slice_tail`](Store::slice_tail): a member of a remote `.cdz`. Its data end
    /// (data offset + size) lies at or before `span_end`, so the `n` bytes before
    /// `span_end` (and a little more, for a data descriptor) hold the member's tail
    /// whatever its local header says.
    #[cfg(feature = "remote")]
    fn remote_member_tail(
        &self,
        root: &Arc<ObjectRoot>,
        len: u64,
        members: &HashMap<String, ZipMember>,
        bases: &Mutex<HashMap<String, u64>>,
        path: &str,
        n: u64,
    ) -> Result<FileSlice> {
        let name: Arc<str> = Arc::from(format!("{}/{path}", self.display));
        let m = self.member(members, path, &name)?;
        let known = bases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(path)
            .copied();
        let span_end = m.span_end.min(len);
        // A data descriptor (at most 24 bytes) may follow the data.
        let tail_start = span_end.saturating_sub(n + 24).max(m.header_start);
        let header = m.header_start..m.header_start + 30;
        let ranges: Vec<std::ops::Range<u64>> = known
            .is_none()
            .then_some(header)
            .into_iter()
            .chain(std::iter::once(tail_start..span_end))
            .collect();
        let got = root
            .get_ranges("", ranges)
            .map_err(|e| e.context(format_args!("{name}: local header and tail")))?;
        let base = match known {
            Some(b) => b,
            None => {
                let b = member_base(&got[0], m, len, &name)?;
                bases
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(path.to_string(), b);
                b
            }
        };
        let fetched = got.last().cloned().unwrap_or_default();
        let data_end = base + m.size;
        // The member's last bytes within what was fetched (none if the archive is odd:
        // the reads then go to the object as for any slice).
        let tail = if data_end <= tail_start + fetched.len() as u64 && data_end > tail_start {
            let from = base.max(tail_start);
            fetched.slice((from - tail_start) as usize..(data_end - tail_start) as usize)
        } else {
            bytes::Bytes::new()
        };
        Ok(FileSlice {
            source: Source::Object {
                root: root.clone(),
                rel: Arc::from(""),
                tail,
            },
            base,
            len: m.size,
            name,
        })
    }

    /// The whole content of `path`.
    pub(crate) fn read(&self, path: &str) -> Result<Vec<u8>> {
        #[cfg(feature = "remote")]
        if let Backend::RemoteDir(root) = &self.backend {
            if let Some(Some(bytes)) = self.ahead_of(path) {
                return Ok(Vec::from(bytes));
            }
            // One GET, no HEAD first.
            check_inside(&self.display, path)?;
            return root.get(path).map(Vec::from);
        }
        self.slice(path)?.read_all()
    }

    /// The whole content of `path`, or `None` when it does not exist: one read, whose
    /// `NotFound` says so (one request for a store at a URL and one open of a local file,
    /// where `exists` then `read` would be two: a store's open reads its index chunks this
    /// way). A directory's member that is missing or not a regular file, and a `.cdz` member
    /// absent from the archive's directory, are `NotFound`.
    pub(crate) fn read_opt(&self, path: &str) -> Result<Option<Vec<u8>>> {
        if let Some(known) = self.ahead_of(path) {
            return Ok(known.map(Vec::from));
        }
        // A `.cdz` object at a URL: the archive's directory tells a missing member without a
        // request, and a `NotFound` of the read is then the object gone (an error, not a
        // chunk to be taken for its fill value).
        #[cfg(feature = "remote")]
        if let Backend::RemoteZip { .. } = &self.backend {
            if !self.exists(path)? {
                return Ok(None);
            }
            return self.read(path).map(Some);
        }
        match self.read(path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What [`fetch_ahead`](Store::fetch_ahead) holds for `path`: `Some(None)` when it is
    /// known to be missing, `None` when nothing is held.
    fn ahead_of(&self, path: &str) -> Option<Option<bytes::Bytes>> {
        self.ahead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(path)
            .cloned()
    }

    /// Drops what [`fetch_ahead`](Store::fetch_ahead) holds (the end of an open: later
    /// reads go to the store again, so nothing stays in memory for the handle's life).
    pub(crate) fn end_ahead(&self) {
        self.ahead.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Fetches the files `paths` whole, concurrently (up to `max_concurrency` requests in
    /// flight), and holds them until [`end_ahead`](Store::end_ahead) for the reads that
    /// follow: the documents, index chunks and small tables an open reads one after the
    /// other then cost one round trip together instead of one each. A missing file is held
    /// as missing; a file whose request fails is not held (its read requests it again and
    /// reports the error in its place). Local stores read nothing ahead.
    ///
    /// In a `.cdz`, a member is fetched with its local header in one ranged read of
    /// `header_start .. span_end` (members near each other in one request), so its data
    /// offset costs no request of its own.
    pub(crate) fn fetch_ahead(&self, paths: &[String]) {
        #[cfg(feature = "remote")]
        {
            let held = self.ahead.lock().unwrap_or_else(|p| p.into_inner());
            let todo: Vec<String> = paths
                .iter()
                .filter(|p| !held.contains_key(p.as_str()))
                .filter(|p| check_inside(&self.display, p).is_ok())
                .cloned()
                .collect();
            drop(held);
            if todo.is_empty() {
                return;
            }
            let got = match &self.backend {
                Backend::RemoteDir(root) => {
                    let answers = root.get_many_opt(todo.clone());
                    todo.into_iter()
                        .zip(answers)
                        .filter_map(|(p, a)| a.ok().map(|v| (p, v)))
                        .collect()
                }
                Backend::RemoteZip {
                    root,
                    len,
                    members,
                    bases,
                } => self.fetch_members(root, *len, members, bases, todo),
                _ => Vec::new(),
            };
            self.ahead
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(got);
        }
        #[cfg(not(feature = "remote"))]
        let _ = paths;
    }

    /// The members `paths` of a remote `.cdz` with their local headers, by coalesced ranged
    /// reads; data offsets learned are remembered in `bases`.
    #[cfg(feature = "remote")]
    fn fetch_members(
        &self,
        root: &Arc<ObjectRoot>,
        len: u64,
        members: &HashMap<String, ZipMember>,
        bases: &Mutex<HashMap<String, u64>>,
        paths: Vec<String>,
    ) -> Vec<(String, Option<bytes::Bytes>)> {
        let mut out = Vec::new();
        let mut wanted: Vec<(String, ZipMember)> = Vec::new();
        for p in paths {
            match members.get(&p) {
                None => out.push((p, None)),
                Some(m) if m.stored && m.compressed_size == m.size && m.span_end <= len => {
                    wanted.push((p, *m))
                }
                // Compressed or odd members: their own read reports them.
                Some(_) => {}
            }
        }
        wanted.sort_by_key(|(_, m)| m.header_start);
        let ranges = wanted
            .iter()
            .map(|(_, m)| m.header_start..m.span_end)
            .collect();
        let Ok(spans) = root.get_ranges("", ranges) else {
            return out;
        };
        let mut learned = Vec::new();
        for ((p, m), span) in wanted.into_iter().zip(spans) {
            let name = format!("{}/{p}", self.display);
            let Ok(base) = member_base(&span, &m, len, &name) else {
                continue;
            };
            let at = (base - m.header_start) as usize;
            let Some(end) = at.checked_add(m.size as usize).filter(|&e| e <= span.len()) else {
                continue;
            };
            learned.push((p.clone(), base));
            out.push((p, Some(span.slice(at..end))));
        }
        bases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(learned);
        out
    }

    /// Reads and parses a JSON document.
    pub(crate) fn read_json(&self, path: &str) -> Result<serde_json::Value> {
        let bytes = self.read(path)?;
        self.parse_json(path, &bytes)
    }

    /// Reads and parses a JSON document, `None` when it does not exist.
    pub(crate) fn read_json_opt(&self, path: &str) -> Result<Option<serde_json::Value>> {
        match self.read_opt(path)? {
            Some(bytes) => self.parse_json(path, &bytes).map(Some),
            None => Ok(None),
        }
    }

    fn parse_json(&self, path: &str, bytes: &[u8]) -> Result<serde_json::Value> {
        serde_json::from_slice(bytes)
            .map_err(|e| Error::format(format!("{}/{path}: not valid JSON: {e}", self.display)))
    }
}

/// Where member `m`'s data start, from its local header `lh` (30 bytes; §13: the local
/// header's own name and extra lengths), checked against the archive's size `total`.
fn member_base(lh: &[u8], m: &ZipMember, total: u64, name: &str) -> Result<u64> {
    if lh.len() < 30 || lh[0..4] != *b"PK\x03\x04" {
        return Err(Error::format(format!("{name}: bad local header signature")));
    }
    let name_len = u16::from_le_bytes([lh[26], lh[27]]) as u64;
    let extra_len = u16::from_le_bytes([lh[28], lh[29]]) as u64;
    let base = m.header_start + 30 + name_len + extra_len;
    if base.checked_add(m.size).is_none_or(|end| end > total) {
        return Err(Error::format(format!(
            "{name}: member data runs past the end of the archive (truncated .cdz)"
        )));
    }
    Ok(base)
}

/// The members of the zip archive `file` (directories left out), by name.
fn zip_members(file: File, display: &str) -> Result<HashMap<String, ZipMember>> {
    members_of(file, display)
}

/// The members of the zip archive read through `reader`: a failed request is that error
/// (not "not a zip archive").
#[cfg(feature = "remote")]
fn zip_members_remote(
    mut reader: RangedReadSeek,
    display: &str,
) -> Result<HashMap<String, ZipMember>> {
    let got = members_of(&mut reader, display);
    match reader.error.take() {
        Some(e) => Err(e),
        None => got,
    }
}

fn members_of<R: Read + Seek>(reader: R, display: &str) -> Result<HashMap<String, ZipMember>> {
    let mut archive = zip::ZipArchive::new(reader)
        .map_err(|e| Error::format(format!("{display}: not a readable zip archive (.cdz): {e}")))?;
    let mut members = HashMap::with_capacity(archive.len());
    // Every entry's local header start (directories too), to find where each member ends.
    let mut starts = Vec::with_capacity(archive.len() + 1);
    for i in 0..archive.len() {
        let m = archive
            .by_index_raw(i)
            .map_err(|e| Error::format(format!("{display}: zip member {i} unreadable: {e}")))?;
        starts.push(m.header_start());
        if m.is_dir() {
            continue;
        }
        members.insert(
            m.name().to_string(),
            ZipMember {
                header_start: m.header_start(),
                span_end: 0,
                compressed_size: m.compressed_size(),
                size: m.size(),
                stored: m.compression() == zip::CompressionMethod::Stored,
            },
        );
    }
    let cd_start = archive.central_directory_start();
    starts.sort_unstable();
    for m in members.values_mut() {
        let next = starts.partition_point(|&s| s <= m.header_start);
        m.span_end = starts
            .get(next)
            .copied()
            .unwrap_or(cd_start)
            .max(m.header_start);
    }
    Ok(members)
}

/// `Read + Seek` over an object read by ranges (what the zip crate wants for the central
/// directory); the first failed request is kept to be reported as itself.
#[cfg(feature = "remote")]
struct RangedReadSeek {
    object: crate::storage::remote::ranged::RangedObject,
    pos: u64,
    error: Option<Error>,
}

#[cfg(feature = "remote")]
impl Read for RangedReadSeek {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.object.len().saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        match self.object.read_at(self.pos, n) {
            Ok(b) => {
                buf[..n].copy_from_slice(&b);
                self.pos += n as u64;
                Ok(n)
            }
            Err(e) => {
                let m = e.message.clone();
                self.error.get_or_insert(e);
                Err(std::io::Error::other(m))
            }
        }
    }
}

#[cfg(feature = "remote")]
impl Seek for RangedReadSeek {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let len = self.object.len() as i128;
        let at = match to {
            SeekFrom::Start(s) => s as i128,
            SeekFrom::End(d) => len + d as i128,
            SeekFrom::Current(d) => self.pos as i128 + d as i128,
        };
        if at < 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "seek before the start of the object",
            ));
        }
        self.pos = at as u64;
        Ok(self.pos)
    }
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
