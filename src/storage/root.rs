//! [`Root`]: a directory or an object-store prefix, read by `/`-separated relative keys —
//! whole objects, byte ranges, sizes, existence. What the dataset reader needs; ChromData
//! stores add `.cdz` members on top of it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};

use super::dir::OpenDir;
use super::location::Location;
use super::options::Options;
#[cfg(feature = "remote")]
use super::remote::ObjectRoot;

/// A directory or an object-store prefix.
#[derive(Debug, Clone)]
pub enum Root {
    /// A directory named by its path (a writer's target, a reader not opened yet).
    Local(PathBuf),
    /// A directory a reader holds open: members are read relative to it (see
    /// [`OpenDir`]), so a replace at its path does not mix two datasets.
    Open(Arc<OpenDir>),
    #[cfg(feature = "remote")]
    Remote(Arc<ObjectRoot>),
}

impl Root {
    /// The root at `location`; for a URL the client is configured with `options` (nothing is
    /// sent yet). Errors: `Unsupported` (a URL in a build without the `remote` feature),
    /// `InvalidArgument` (the backend refuses the configuration).
    pub fn new(location: Location, options: &Options) -> Result<Root> {
        match location {
            Location::Local(p) => Ok(Root::Local(p)),
            #[cfg(feature = "remote")]
            Location::Remote(url) => Ok(Root::Remote(ObjectRoot::new(url, options.clone())?)),
            #[cfg(not(feature = "remote"))]
            Location::Remote(url) => {
                let _ = options;
                Err(super::location::no_remote_support(&url))
            }
        }
    }

    /// Parses `text` (a path or URL) and options, then [`Root::new`].
    pub fn parse(text: &str, options: &[&str]) -> Result<Root> {
        let location = Location::parse(text)?;
        let options = Options::parse(options, &location)?;
        Root::new(location, &options)
    }

    pub fn is_remote(&self) -> bool {
        !matches!(self, Root::Local(_) | Root::Open(_))
    }

    /// The local directory held open, for reads relative to it (a local root named by
    /// path is opened now). Errors: those of [`OpenDir::open`].
    pub fn opened(self) -> Result<Root> {
        match self {
            Root::Local(p) => Ok(Root::Open(Arc::new(OpenDir::open(&p)?))),
            other => Ok(other),
        }
    }

    /// The local directory, when this is one.
    pub fn local_path(&self) -> Option<&Path> {
        match self {
            Root::Local(p) => Some(p),
            Root::Open(d) => Some(d.path()),
            #[cfg(feature = "remote")]
            Root::Remote(_) => None,
        }
    }

    /// The object store, when this is one.
    #[cfg(feature = "remote")]
    pub fn remote(&self) -> Option<&Arc<ObjectRoot>> {
        match self {
            Root::Local(_) | Root::Open(_) => None,
            Root::Remote(r) => Some(r),
        }
    }

    /// The root itself, for messages.
    pub fn display(&self) -> String {
        match self {
            Root::Local(p) => p.display().to_string(),
            Root::Open(d) => d.path().display().to_string(),
            #[cfg(feature = "remote")]
            Root::Remote(r) => r.url().url.clone(),
        }
    }

    /// `rel` under the root, for messages.
    pub fn display_rel(&self, rel: &str) -> String {
        match self {
            Root::Local(p) => p.join(rel).display().to_string(),
            Root::Open(d) => d.path().join(rel).display().to_string(),
            #[cfg(feature = "remote")]
            Root::Remote(r) => r.display(rel),
        }
    }

    /// The whole of `rel`. Missing: `NotFound`.
    pub fn read(&self, rel: &str) -> Result<Vec<u8>> {
        match self {
            Root::Local(p) => {
                let path = p.join(rel);
                std::fs::read(&path).map_err(|e| Error::io(&path, &e))
            }
            Root::Open(d) => d.read(rel),
            #[cfg(feature = "remote")]
            Root::Remote(r) => r.get(rel).map(Vec::from),
        }
    }

    /// `len` bytes of `rel` at `start`; short data is `Format`.
    pub fn read_range(&self, rel: &str, start: u64, len: usize) -> Result<Vec<u8>> {
        let got = match self {
            Root::Local(_) | Root::Open(_) => {
                let file = self.open_file(rel)?;
                let mut buf = vec![0u8; len];
                read_exact_at(&file, &mut buf, start)
                    .map_err(|e| Error::io(Path::new(&self.display_rel(rel)), &e))?;
                buf
            }
            #[cfg(feature = "remote")]
            Root::Remote(r) => r.get_range(rel, start..start + len as u64)?.into(),
        };
        if got.len() != len {
            return Err(Error::format(format!(
                "{}: read {} bytes at {start}, expected {len} (the object is shorter)",
                self.display_rel(rel),
                got.len()
            )));
        }
        Ok(got)
    }

    /// The size of `rel` in bytes. Missing: `NotFound`.
    pub fn size(&self, rel: &str) -> Result<u64> {
        match self {
            Root::Local(p) => {
                let path = p.join(rel);
                std::fs::metadata(&path)
                    .map(|m| m.len())
                    .map_err(|e| Error::io(&path, &e))
            }
            Root::Open(d) => d.size(rel),
            #[cfg(feature = "remote")]
            Root::Remote(r) => r.size(rel),
        }
    }

    /// The local file `rel`, open for reading (relative to the open directory). Errors:
    /// `NotFound`, `Io`; `Unsupported` on an object store (read it with `read` instead).
    pub fn open_file(&self, rel: &str) -> Result<File> {
        match self {
            Root::Local(p) => {
                let path = p.join(rel);
                File::open(&path).map_err(|e| Error::io(&path, &e))
            }
            Root::Open(d) => d.open_file(rel),
            #[cfg(feature = "remote")]
            Root::Remote(_) => Err(Error::unsupported(format!(
                "{}: not a local file",
                self.display_rel(rel)
            ))),
        }
    }

    /// Whether this is a directory held open that has been deleted since (a writer replaced
    /// it): its members are then missing for that reason, not because the data is broken.
    pub fn deleted(&self) -> bool {
        matches!(self, Root::Open(d) if d.deleted())
    }

    /// Whether `rel` exists (as a file or object).
    pub fn exists(&self, rel: &str) -> Result<bool> {
        match self.size(rel) {
            Ok(_) => Ok(true),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(unix)]
fn read_exact_at(file: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, at)
}

#[cfg(not(unix))]
fn read_exact_at(file: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::Start(at))?;
    f.read_exact(buf)
}
