//! [`OpenDir`]: a directory held open by a reader, whose members are opened relative to it.
//!
//! A reader opens its dataset's directory once and reads every member (tiles, gene names,
//! var table, obs) through that descriptor with `openat(2)`, never again by path. A writer
//! replacing the dataset meanwhile swaps the directories at the path (see
//! `fs::publish_dir`); a handle opened before keeps reading the directory it opened — the
//! old dataset, whose files its manifest describes — and never the new dataset's members
//! under the old manifest. Once the writer has deleted the old directory, a member not read
//! yet is missing (`NotFound` / `Io` naming it), never a member of the other dataset.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A directory open for reading its members by relative path.
#[derive(Debug)]
pub struct OpenDir {
    dir: File,
    path: PathBuf,
}

impl OpenDir {
    /// Opens the directory at `path`. Errors: `NotFound`, `Io` (naming the path; a
    /// non-directory is `ENOTDIR`).
    pub fn open(path: &Path) -> Result<OpenDir> {
        let dir = open_directory(path).map_err(|e| Error::io(path, &e))?;
        Ok(OpenDir {
            dir,
            path: path.to_path_buf(),
        })
    }

    /// The path it was opened at (for messages; the directory may have moved since).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the member `rel` (`/`-separated, relative) for reading. Errors: `NotFound`
    /// (saying so when the directory was deleted after it was opened), `Io`, naming
    /// `path/rel`.
    pub fn open_file(&self, rel: &str) -> Result<File> {
        open_at(&self.dir, rel).map_err(|e| {
            let err = Error::io(&self.path.join(rel), &e);
            if err.kind == crate::error::ErrorKind::NotFound && self.deleted() {
                err.context(
                    "the directory was deleted (or replaced by a writer) after it was opened",
                )
            } else {
                err
            }
        })
    }

    /// Whether the directory has been deleted or replaced since it was opened: no name links
    /// to it any more, or its path names another directory (or nothing) now. The second
    /// case matters while a writer that swapped in a new dataset is still deleting the old
    /// tree: its members disappear one by one before the directory itself is unlinked.
    #[cfg(unix)]
    pub fn deleted(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(held) = self.dir.metadata() else {
            return false;
        };
        if held.nlink() == 0 {
            return true;
        }
        match std::fs::metadata(&self.path) {
            Ok(now) => (now.dev(), now.ino()) != (held.dev(), held.ino()),
            Err(_) => true,
        }
    }

    #[cfg(not(unix))]
    pub fn deleted(&self) -> bool {
        false
    }

    /// The whole member `rel`.
    pub fn read(&self, rel: &str) -> Result<Vec<u8>> {
        use std::io::Read;
        let mut f = self.open_file(rel)?;
        let mut out = Vec::new();
        f.read_to_end(&mut out)
            .map_err(|e| Error::io(&self.path.join(rel), &e))?;
        Ok(out)
    }

    /// The size of the member `rel` in bytes.
    pub fn size(&self, rel: &str) -> Result<u64> {
        let f = self.open_file(rel)?;
        f.metadata()
            .map(|m| m.len())
            .map_err(|e| Error::io(&self.path.join(rel), &e))
    }
}

/// How many times an open of a directory begins again when the directory it holds was
/// replaced by a writer before the open could read everything it reads at once.
pub(crate) const OPEN_ATTEMPTS: u32 = 8;

/// Runs `attempt` — opening a directory and reading what an open reads (a manifest, the
/// store's metadata) — and runs it again when it failed because the directory it held was
/// replaced meanwhile (`OpenDir::deleted`): a writer swapping in a new dataset
/// (`fs::publish_dir`) deletes the old tree, so a reader that opened the old directory just
/// before the swap finds its members gone. The path then holds the new dataset, complete.
/// At most [`OPEN_ATTEMPTS`] attempts, so a path replaced without pause ends the open with
/// the last error, saying so; any other error ends it at once.
///
/// `attempt` returns its error with whether it is due to the directory's replacement
/// (each caller knows which of its errors a vanished member can cause).
pub(crate) fn open_reopening<T>(
    path: &Path,
    mut attempt: impl FnMut() -> std::result::Result<T, (Error, bool)>,
) -> Result<T> {
    let mut attempts = 1;
    loop {
        match attempt() {
            Ok(v) => return Ok(v),
            Err((_, true)) if attempts < OPEN_ATTEMPTS => attempts += 1,
            Err((e, true)) => {
                return Err(e.context(format!(
                    "{}: replaced by a writer during each of {OPEN_ATTEMPTS} attempts to open it",
                    path.display()
                )));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

#[cfg(unix)]
fn open_directory(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(path)
}

#[cfg(unix)]
fn open_at(dir: &File, rel: &str) -> std::io::Result<File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let c = std::ffi::CString::new(rel)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `dir` is an open descriptor for the duration of the call and `c` is a
    // NUL-terminated string that outlives it; openat(2) reads nothing else of ours.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat(2), is valid and owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Without `openat`: members are opened by path under the directory's path.
#[cfg(not(unix))]
fn open_directory(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

#[cfg(not(unix))]
fn open_at(_dir: &File, _rel: &str) -> std::io::Result<File> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_come_from_the_directory_opened_even_after_it_is_replaced() {
        let d = std::env::temp_dir().join(format!(
            "deltacells-opendir-{}-{:x}",
            std::process::id(),
            crate::storage::fs::random_u64()
        ));
        std::fs::create_dir_all(d.join("a/sub")).unwrap();
        std::fs::write(d.join("a/sub/m.txt"), b"old").unwrap();
        let open = OpenDir::open(&d.join("a")).unwrap();
        assert_eq!(open.read("sub/m.txt").unwrap(), b"old");
        // Another directory takes the path: the open one still serves its own members.
        std::fs::rename(d.join("a"), d.join("gone")).unwrap();
        std::fs::create_dir_all(d.join("a/sub")).unwrap();
        std::fs::write(d.join("a/sub/m.txt"), b"new!").unwrap();
        assert_eq!(open.read("sub/m.txt").unwrap(), b"old");
        assert_eq!(open.size("sub/m.txt").unwrap(), 3);
        // Deleted: missing, named by the path it was opened at.
        std::fs::remove_dir_all(d.join("gone")).unwrap();
        let e = open.read("sub/m.txt").unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::NotFound, "{e}");
        assert!(e.message.contains("a/sub/m.txt"), "{e}");
        let e = OpenDir::open(&d.join("a/sub/m.txt")).unwrap_err();
        assert!(e.message.contains("m.txt"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_open_begins_again_only_for_a_replaced_directory_and_a_bounded_number_of_times() {
        use crate::error::ErrorKind;
        let gone = || Error::new(ErrorKind::NotFound, "m: missing");
        let path = Path::new("/some/ds");
        // Replaced twice, then whole.
        let mut calls = 0;
        let got = open_reopening(path, || {
            calls += 1;
            if calls < 3 {
                Err((gone(), true))
            } else {
                Ok(calls)
            }
        });
        assert_eq!(got.unwrap(), 3);
        // Not replaced: the first error, at once.
        let mut calls = 0;
        let e = open_reopening(path, || -> std::result::Result<(), _> {
            calls += 1;
            Err((gone(), false))
        })
        .unwrap_err();
        assert_eq!((calls, e.message.as_str()), (1, "m: missing"));
        // Replaced every time: the last error after OPEN_ATTEMPTS, saying so.
        let mut calls = 0;
        let e = open_reopening(path, || -> std::result::Result<(), _> {
            calls += 1;
            Err((gone(), true))
        })
        .unwrap_err();
        assert_eq!(calls, OPEN_ATTEMPTS);
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert!(
            e.message
                .starts_with("/some/ds: replaced by a writer during each of 8"),
            "{e}"
        );
        assert!(e.message.ends_with("m: missing"), "{e}");
    }
}
