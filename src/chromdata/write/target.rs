//! Where a store goes. A local path: the store is built in a hidden temporary sibling and
//! renamed into place (`finish::publish`). An object-store URL: it is built in a local spill
//! directory (`$DELTACELLS_SPILL_DIR`, else the system's temporary directory) and uploaded by
//! `finish` — a `.cdz` as one multipart upload (complete or absent), a directory store as
//! every object first and its root `zarr.json` last (the commit point: a prefix without it
//! does not open). Overwriting a directory store deletes the old root `zarr.json` first, then
//! the rest of the old store, so that at no moment a mix of old and new objects opens.

use std::path::{Path, PathBuf};
#[cfg(feature = "remote")]
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
#[cfg(feature = "remote")]
use crate::storage::remote::ObjectRoot;
use crate::storage::Root;

/// The destination of a ChromData writer.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    Local(PathBuf),
    #[cfg(feature = "remote")]
    Remote(Arc<ObjectRoot>),
}

impl Target {
    /// The target at `root`. Errors: `Unsupported` (a read-only http(s):// URL),
    /// `InvalidArgument` (a `.cdz` URL naming a bucket without an object name).
    pub(crate) fn of(root: Root) -> Result<Target> {
        match root {
            Root::Local(p) => Ok(Target::Local(p)),
            Root::Open(d) => Ok(Target::Local(d.path().to_path_buf())),
            #[cfg(feature = "remote")]
            Root::Remote(r) => {
                if !r.url().scheme.writable() {
                    return Err(Error::unsupported(format!(
                        "{}: HTTP(S) URLs are read only; write to s3://, gs:// or az://",
                        r.url()
                    )));
                }
                Ok(Target::Remote(r))
            }
        }
    }

    /// The target for messages.
    pub(crate) fn display(&self) -> String {
        match self {
            Target::Local(p) => p.display().to_string(),
            #[cfg(feature = "remote")]
            Target::Remote(r) => r.url().url.clone(),
        }
    }

    /// The local path, when the target is one.
    pub(crate) fn local(&self) -> Option<&Path> {
        match self {
            Target::Local(p) => Some(p),
            #[cfg(feature = "remote")]
            Target::Remote(_) => None,
        }
    }

    /// The URL, when the target is one.
    pub(crate) fn url(&self) -> Option<&crate::storage::RemoteUrl> {
        match self {
            Target::Local(_) => None,
            #[cfg(feature = "remote")]
            Target::Remote(r) => Some(r.url()),
        }
    }

    /// Creates the directory the store is built in: a hidden temporary sibling of a local
    /// target, a fresh directory under the spill root for a URL.
    pub(crate) fn create_build_dir(&self) -> Result<PathBuf> {
        match self {
            Target::Local(p) => Ok(crate::storage::fs::create_temp_sibling(p)?.dir),
            #[cfg(feature = "remote")]
            Target::Remote(r) => {
                let name = r.url().file_name().to_string();
                let name = if name.is_empty() {
                    "chromdata".to_string()
                } else {
                    name
                };
                crate::storage::fs::create_spill_dir(&name, "a ChromData upload")
            }
        }
    }

    /// Refuses an existing target: `Exists` when something that is not a store is there,
    /// or a store and `overwrite` is off.
    pub(crate) fn check(&self, overwrite: bool) -> Result<()> {
        match self {
            Target::Local(p) => check_local(p, overwrite),
            #[cfg(feature = "remote")]
            Target::Remote(r) => remote::check(r, overwrite).map(|_| ()),
        }
    }
}

pub(crate) fn is_cdz_name(name: &str) -> bool {
    Path::new(name)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("cdz"))
}

/// Whether `path` (which exists) is a store that may be replaced. An I/O error reading it
/// (other than absence or a short file) is `Io`, not "not a store".
fn is_local_store(path: &Path) -> Result<bool> {
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::UnexpectedEof => Ok(false),
        _ => Err(Error::io(path, &e).context("checking the existing target")),
    };
    let md = match std::fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) => return io(e),
    };
    if md.is_dir() {
        match std::fs::read(path.join("zarr.json")) {
            Ok(b) => Ok(is_store_root(&b)),
            Err(e) => io(e),
        }
    } else if md.is_file() && path.to_str().is_some_and(is_cdz_name) {
        let mut magic = [0u8; 4];
        use std::io::Read;
        match std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)) {
            Ok(()) => Ok(&magic == ZIP_MAGIC),
            Err(e) => io(e),
        }
    } else {
        Ok(false)
    }
}

const ZIP_MAGIC: &[u8; 4] = b"PK\x03\x04";

/// Whether `bytes` is the root `zarr.json` of a ChromData store.
fn is_store_root(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(bytes).is_ok_and(|v| {
        v.get("attributes")
            .and_then(|a| a.get("uchrom_format_version"))
            .is_some()
    })
}

fn check_local(target: &Path, overwrite: bool) -> Result<()> {
    if std::fs::symlink_metadata(target).is_err() {
        return Ok(());
    }
    let t = target.display();
    if !is_local_store(target)? {
        return Err(Error::new(
            ErrorKind::Exists,
            format!("{t}: exists and is not a ChromData store; refusing to replace it"),
        ));
    }
    if !overwrite {
        return Err(Error::new(
            ErrorKind::Exists,
            format!("{t}: a store exists there and overwrite is off"),
        ));
    }
    Ok(())
}

#[cfg(feature = "remote")]
pub(crate) mod remote {
    //! The object-store side: the target's checks and the upload.

    use super::*;

    /// What is at a remote target.
    #[derive(Debug, PartialEq, Eq)]
    pub(crate) enum Existing {
        Nothing,
        /// A ChromData store (a `.cdz` zip object, or a prefix with a store's root
        /// `zarr.json`).
        Store,
    }

    fn is_cdz(r: &ObjectRoot) -> bool {
        is_cdz_name(&r.url().prefix)
    }

    /// What is at `r`. Errors: `Exists` (something that is not a store: an object that is
    /// not a zip, a root `zarr.json` of something else, or objects under a directory
    /// target without a root `zarr.json` — such as the leftovers of a write that died,
    /// which are never deleted for the caller), `Io`.
    fn existing(r: &Arc<ObjectRoot>) -> Result<Existing> {
        let refuse = |why: String| {
            Err(Error::new(
                ErrorKind::Exists,
                format!("{}: {why}; refusing to replace it", r.url()),
            ))
        };
        if is_cdz(r) {
            let size = match r.size("") {
                Ok(s) => s,
                Err(e) if e.kind == ErrorKind::NotFound => return Ok(Existing::Nothing),
                Err(e) => return Err(e),
            };
            if size < 4 || r.get_range("", 0..4)?.as_ref() != ZIP_MAGIC {
                return refuse("an object exists there and is not a .cdz store (a zip)".into());
            }
            return Ok(Existing::Store);
        }
        match r.get("zarr.json") {
            Ok(bytes) if is_store_root(&bytes) => Ok(Existing::Store),
            Ok(_) => refuse("zarr.json exists there and is not a ChromData store's root".into()),
            Err(e) if e.kind == ErrorKind::NotFound => {
                let found = r.list("")?;
                match found.first() {
                    None => Ok(Existing::Nothing),
                    Some(first) => refuse(format!(
                        "{} object(s) exist under it (first: {first}) but no store's root \
                         zarr.json (a write that died leaves such objects; delete them first)",
                        found.len()
                    )),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Checks the target against `overwrite` (see [`Target::check`]); returns what is there.
    pub(crate) fn check(r: &Arc<ObjectRoot>, overwrite: bool) -> Result<Existing> {
        let found = existing(r)?;
        if found == Existing::Store && !overwrite {
            return Err(Error::new(
                ErrorKind::Exists,
                format!("{}: a store exists there and overwrite is off", r.url()),
            ));
        }
        Ok(found)
    }

    /// Uploads the finished store built in `tmp` to `r` (see the module documentation),
    /// then removes `tmp`. `write_cdz(dir, out)` zips a store directory.
    pub(crate) fn publish(
        r: &Arc<ObjectRoot>,
        tmp: &Path,
        overwrite: bool,
        write_cdz: impl FnOnce(&Path, &Path) -> Result<()>,
    ) -> Result<()> {
        let found = check(r, overwrite)?;
        let result = if is_cdz(r) {
            // A local zip beside the build directory, then one multipart upload: a failed
            // upload is aborted and the old object (if any) stays as it was.
            let name = tmp
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let zip = tmp.with_file_name(format!("{name}.cdz"));
            let r2 = write_cdz(tmp, &zip).and_then(|_| r.put_file_multipart("", &zip));
            let _ = std::fs::remove_file(&zip);
            r2
        } else {
            upload_dir(r, tmp, found == Existing::Store)
        };
        let _ = std::fs::remove_dir_all(tmp);
        result
    }

    /// Every file of `dir` but the root `zarr.json`, then the root `zarr.json`. An old
    /// store (`replace`) goes first: its root `zarr.json`, then its other objects.
    fn upload_dir(r: &Arc<ObjectRoot>, dir: &Path, replace: bool) -> Result<()> {
        if replace {
            r.delete("zarr.json")?;
            r.delete_under("")?;
        }
        let root_doc = dir.join("zarr.json");
        if !root_doc.is_file() {
            return Err(Error::new(
                ErrorKind::Internal,
                format!(
                    "{}: the finished store has no root zarr.json",
                    dir.display()
                ),
            ));
        }
        r.put_dir(dir, |rel, _| rel != "zarr.json")?;
        r.put_file("zarr.json", &root_doc)
    }
}
