//! Where the bytes of a store live: a `*.chromdata.zarr` directory or a `.cdz` zip of
//! STORED members. Both are seen as a map from a `/`-separated path (relative to the store
//! root) to a byte range of one open file, read with positioned reads (no memory maps, no
//! extraction). Parquet reads through [`FileSlice`], Zarr arrays through [`ZarrsStorage`].

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::OpenDir;

/// A byte range of an open file: a whole file of a directory store, or the data of one
/// STORED member of a `.cdz`.
#[derive(Clone, Debug)]
pub(crate) struct FileSlice {
    file: Arc<File>,
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
    /// content, reusing its allocation); short data is an error.
    pub(crate) fn read_into(
        &self,
        start: u64,
        buf: &mut Vec<u8>,
        length: usize,
    ) -> std::io::Result<()> {
        self.check_range(start, length)?;
        buf.clear();
        buf.resize(length, 0);
        read_exact_at(&self.file, buf, self.base + start)
    }

    fn check_range(&self, start: u64, length: usize) -> std::io::Result<()> {
        let end = start.checked_add(length as u64);
        if end.is_none_or(|e| e > self.len) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: read of {length} bytes at {start} past the end ({} bytes)",
                    self.name, self.len
                ),
            ));
        }
        Ok(())
    }

    /// Reads `length` bytes at `start` (relative to the slice); short data is an error.
    pub(crate) fn read_at(&self, start: u64, length: usize) -> std::io::Result<Vec<u8>> {
        self.check_range(start, length)?;
        let mut buf = vec![0u8; length];
        read_exact_at(&self.file, &mut buf, self.base + start)?;
        Ok(buf)
    }

    pub(crate) fn read_all(&self) -> std::io::Result<Vec<u8>> {
        self.read_at(0, self.len as usize)
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset)
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

impl parquet::file::reader::Length for FileSlice {
    fn len(&self) -> u64 {
        self.len
    }
}

/// Sequential reader over a slice (what parquet asks for when it wants a `Read`).
pub(crate) struct SliceReader {
    slice: FileSlice,
    pos: u64,
}

impl Read for SliceReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.slice.len.saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        read_exact_at(&self.slice.file, &mut buf[..n], self.slice.base + self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl parquet::file::reader::ChunkReader for FileSlice {
    type T = SliceReader;

    fn get_read(&self, start: u64) -> parquet::errors::Result<SliceReader> {
        Ok(SliceReader {
            slice: self.clone(),
            pos: start.min(self.len),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.read_at(start, length)
            .map(Bytes::from)
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
    }
}

/// One member of a `.cdz`: where its local header is and how it is stored.
#[derive(Clone, Copy, Debug)]
struct ZipMember {
    header_start: u64,
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
}

/// An opened store container.
#[derive(Debug)]
pub(crate) struct Store {
    backend: Backend,
    /// The path the user gave, for messages.
    pub(crate) display: String,
    /// Where the store is on the local file system (the directory or the `.cdz`).
    pub(crate) location: PathBuf,
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
                backend: Backend::Dir(OpenDir::open(path)?),
                display,
                location: path.to_path_buf(),
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
        let members = crate::contain::decoding(&display, || zip_members(file, &display))?;
        let file = File::open(path).map_err(|e| Error::io(path, &e))?;
        Ok(Store {
            backend: Backend::Zip {
                file: Arc::new(file),
                members,
            },
            display,
            location: path.to_path_buf(),
        })
    }

    /// Whether `path` exists (as a file / member).
    pub(crate) fn exists(&self, path: &str) -> bool {
        match &self.backend {
            Backend::Dir(root) => root
                .open_file(path)
                .and_then(|f| f.metadata().map_err(|e| Error::io(Path::new(path), &e)))
                .is_ok_and(|m| m.is_file()),
            Backend::Zip { members, .. } => members.contains_key(path),
        }
    }

    /// The bytes of `path` as an open slice. A missing path is `NotFound`.
    pub(crate) fn slice(&self, path: &str) -> Result<FileSlice> {
        let name: Arc<str> = Arc::from(format!("{}/{path}", self.display));
        match &self.backend {
            Backend::Dir(root) => {
                if path.split('/').any(|c| c == ".." || c.is_empty()) || path.starts_with('/') {
                    return Err(Error::format(format!(
                        "{}: path \"{path}\" leaves the store",
                        self.display
                    )));
                }
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
                    file: Arc::new(file),
                    base: 0,
                    len: md.len(),
                    name,
                })
            }
            Backend::Zip { file, members } => {
                let m = members.get(path).ok_or_else(|| {
                    Error::new(ErrorKind::NotFound, format!("{name}: no such member"))
                })?;
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
                // Data start from the local header's own name / extra lengths (§13).
                let mut lh = [0u8; 30];
                read_exact_at(file, &mut lh, m.header_start)
                    .map_err(|e| Error::format(format!("{name}: local header unreadable: {e}")))?;
                if lh[0..4] != *b"PK\x03\x04" {
                    return Err(Error::format(format!("{name}: bad local header signature")));
                }
                let name_len = u16::from_le_bytes([lh[26], lh[27]]) as u64;
                let extra_len = u16::from_le_bytes([lh[28], lh[29]]) as u64;
                let base = m.header_start + 30 + name_len + extra_len;
                let total = file
                    .metadata()
                    .map_err(|e| Error::io(Path::new(&self.display), &e))?
                    .len();
                if base.checked_add(m.size).is_none_or(|end| end > total) {
                    return Err(Error::format(format!(
                        "{name}: member data runs past the end of the archive (truncated .cdz)"
                    )));
                }
                Ok(FileSlice {
                    file: file.clone(),
                    base,
                    len: m.size,
                    name,
                })
            }
        }
    }

    /// The whole content of `path`.
    pub(crate) fn read(&self, path: &str) -> Result<Vec<u8>> {
        let s = self.slice(path)?;
        s.read_all()
            .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", s.name)))
    }

    /// Reads and parses a JSON document.
    pub(crate) fn read_json(&self, path: &str) -> Result<serde_json::Value> {
        let bytes = self.read(path)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::format(format!("{}/{path}: not valid JSON: {e}", self.display)))
    }
}

/// The members of the zip archive `file` (directories left out), by name.
fn zip_members(file: File, display: &str) -> Result<HashMap<String, ZipMember>> {
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|e| Error::format(format!("{display}: not a readable zip archive (.cdz): {e}")))?;
    let mut members = HashMap::with_capacity(archive.len());
    for i in 0..archive.len() {
        let m = archive
            .by_index_raw(i)
            .map_err(|e| Error::format(format!("{display}: zip member {i} unreadable: {e}")))?;
        if m.is_dir() {
            continue;
        }
        members.insert(
            m.name().to_string(),
            ZipMember {
                header_start: m.header_start(),
                compressed_size: m.compressed_size(),
                size: m.size(),
                stored: m.compression() == zip::CompressionMethod::Stored,
            },
        );
    }
    Ok(members)
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
