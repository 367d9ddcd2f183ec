//! Local files: hidden temporary siblings, durable writes, and the atomic publish every
//! writer ends with.
//!
//! A write to `dir/NAME` goes into `dir/.NAME.tmp-<pid>-<random>` (hidden; readers refuse to
//! open such a name even if it holds a complete manifest). Publishing fsyncs every file and
//! directory of the temporary tree, renames it to the target, and fsyncs the parent, so that
//! after a crash the target is either absent, the old one, or the new one complete. Every
//! fsync or rename failure is an `Io` error naming the path: a writer never reports success
//! for data the OS did not confirm.

use std::collections::hash_map::RandomState;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, ErrorKind, Result};

/// A random 64-bit value for temporary names (std's per-process random hash keys, a
/// counter and the clock: distinct across calls, threads and processes).
pub fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}

/// The temporary sibling name of a write to `target_name`: `.NAME.tmp-<pid>-<random>`.
pub fn temp_name(target_name: &str, pid: u32, random: u64) -> String {
    format!(".{target_name}.tmp-{pid}-{random:016x}")
}

/// A fresh temporary sibling name for `target_name` in this process.
pub fn fresh_temp_name(target_name: &str) -> String {
    temp_name(target_name, std::process::id(), random_u64())
}

/// The environment variable naming the local directory where writers to object stores keep
/// their spills and build what they upload; default: the system's temporary directory.
pub const SPILL_DIR_ENV: &str = "DELTACELLS_SPILL_DIR";

/// Where a writer to an object store keeps its local spill: `$DELTACELLS_SPILL_DIR`, else the
/// system's temporary directory (`$TMPDIR`, `/tmp`).
pub fn spill_root() -> PathBuf {
    std::env::var_os(SPILL_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// Creates a fresh directory `<spill root>/NAME.tmp-<pid>-<random>` for an upload to an
/// object store (`what` says whose, in messages). Errors: `NotFound` / `Io` naming it.
/// Spill directories of writers that died (killed, or whose cleanup failed) are removed
/// first: those named for `name` in the spill root whose process is no longer running
/// ([`remove_stale_spills`]), as the next local write to a target removes the last one's
/// hidden siblings.
pub fn create_spill_dir(name: &str, what: &str) -> Result<PathBuf> {
    create_spill_dir_in(&spill_root(), name, what)
}

/// [`create_spill_dir`] under `root`.
pub fn create_spill_dir_in(root: &Path, name: &str, what: &str) -> Result<PathBuf> {
    remove_stale_spills(root, name);
    let dir = root.join(fresh_temp_name(name).trim_start_matches('.'));
    std::fs::create_dir(&dir).map_err(|e| {
        Error::io(&dir, &e).context(format_args!(
            "the local spill directory of {what} (set {SPILL_DIR_ENV} to choose another)"
        ))
    })?;
    Ok(dir)
}

/// Whether `path` names a writer's temporary sibling (`.NAME.tmp-<pid>-<16 hex digits>`),
/// which never opens as a dataset or store, even if a killed write left it complete.
pub fn is_temp_name(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    let Some((_, tail)) = rest.rsplit_once(".tmp-") else {
        return false;
    };
    let mut parts = tail.split('-');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(pid), Some(rand), None)
            if !pid.is_empty()
                && pid.bytes().all(|b| b.is_ascii_digit())
                && rand.len() == 16
                && rand.bytes().all(|b| b.is_ascii_hexdigit())
    )
}

/// The hidden temporary directory of a write, created next to its target.
#[derive(Debug, Clone)]
pub struct TempSibling {
    /// The target's last component.
    pub target_name: String,
    /// The target's parent (`.` when it has none).
    pub parent: PathBuf,
    /// The temporary directory, `parent/.NAME.tmp-<pid>-<random>`.
    pub dir: PathBuf,
}

/// Checks a write target — its last component is a UTF-8 name (not `.` or `..`), its
/// parent (`.` when none) is a directory — and creates a fresh hidden temporary sibling
/// directory for the write.
///
/// Errors: `InvalidArgument` (name, parent not a directory), `NotFound` / `Io`.
pub fn create_temp_sibling(target: &Path) -> Result<TempSibling> {
    let target_name = target
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty() && *n != "." && *n != "..")
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "{}: the target path must end in a UTF-8 name",
                target.display()
            ))
        })?
        .to_string();
    let parent = parent_of(target);
    match std::fs::metadata(&parent) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(Error::invalid_argument(format!(
                "{}: the parent of the target is not a directory",
                parent.display()
            )))
        }
        Err(e) => return Err(Error::io(&parent, &e).context("parent of the target")),
    }
    remove_stale_temps(&parent, &target_name);
    loop {
        let dir = parent.join(fresh_temp_name(&target_name));
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                return Ok(TempSibling {
                    target_name,
                    parent,
                    dir,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(&dir, &e)),
        }
    }
}

/// Removes what earlier writes to `target_name` in `parent` left behind — hidden
/// temporaries `.NAME.tmp-<pid>-<random>` of processes no longer running (killed, or whose
/// cleanup failed) — so that the next write to a target cleans up after the last. A
/// temporary of a live process (a write in progress, or this process) is never touched.
/// On a file system shared between hosts a pid says nothing of another host: a write of
/// the same target in progress there may lose its temporary and then fail with `Io`
/// (never a published output).
pub fn remove_stale_temps(parent: &Path, target_name: &str) {
    remove_dead(parent, &format!(".{target_name}"));
}

/// Removes the spill directories `NAME.tmp-<pid>-<random>` ([`create_spill_dir`]) under
/// `root` of writers to a target named `name` whose process is no longer running: what a
/// killed writer to an object store leaves. Same rules as [`remove_stale_temps`].
pub fn remove_stale_spills(root: &Path, name: &str) {
    remove_dead(root, name);
}

/// Removes the entries `STEM.tmp-<pid>-<16 hex digits>` of `dir` whose process is gone.
fn remove_dead(dir: &Path, stem: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!("{stem}.tmp-");
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        // The temporary-name shape, checked on the hidden form of the name.
        let hidden = format!(".{}", name.trim_start_matches('.'));
        if is_temp_name(Path::new(&hidden)) && pid != me && !process_alive(pid) {
            remove_any(&entry.path());
        }
    }
}

/// Whether process `pid` exists (`kill(pid, 0)`; anything but "no such process" counts).
fn process_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return true;
    };
    if p <= 0 {
        return true;
    }
    // SAFETY: signal 0 delivers nothing; kill(2) only checks that the process exists.
    let rc = unsafe { libc::kill(p, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The directory holding `path` (`.` for a bare name).
pub fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Whether anything (a file, directory or symlink, even a dangling one) is at `path`.
pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Flushes a directory's entries (new, renamed or removed names) to disk.
pub fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|d| fsync(&d, path))
        .map_err(|e| Error::io(path, &e).context("syncing directory"))
}

/// Flushes a file's data and metadata to disk.
pub fn sync_file(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| fsync(&f, path))
        .map_err(|e| Error::io(path, &e).context("syncing file"))
}

/// `fsync(2)`; in unit tests, a path can be made to fail like a disk would (`EIO`).
fn fsync(file: &File, path: &Path) -> std::io::Result<()> {
    #[cfg(test)]
    if fault::sync_fails(path) {
        return Err(std::io::Error::from_raw_os_error(5));
    }
    let _ = path;
    file.sync_all()
}

/// Fault injection for unit tests: fsyncs of chosen paths fail on the calling thread.
#[cfg(test)]
pub(crate) mod fault {
    use std::cell::RefCell;
    use std::path::Path;

    thread_local! {
        /// (text, exact): a path fails when it equals the text, or contains it.
        static FAILING: RefCell<Vec<(String, bool)>> = const { RefCell::new(Vec::new()) };
    }

    /// Makes every later fsync of a path containing `part` fail on this thread.
    pub(crate) fn fail_sync_of(part: &str) {
        FAILING.with(|f| f.borrow_mut().push((part.to_string(), false)));
    }

    /// Makes every later fsync of exactly `path` fail on this thread.
    pub(crate) fn fail_sync_of_exactly(path: &Path) {
        let p = path.to_string_lossy().into_owned();
        FAILING.with(|f| f.borrow_mut().push((p, true)));
    }

    /// Lets fsyncs succeed again.
    pub(crate) fn clear() {
        FAILING.with(|f| f.borrow_mut().clear());
    }

    pub(super) fn sync_fails(path: &Path) -> bool {
        let path = path.to_string_lossy();
        FAILING.with(|f| {
            f.borrow().iter().any(|(s, exact)| {
                if *exact {
                    path == s.as_str()
                } else {
                    path.contains(s.as_str())
                }
            })
        })
    }
}

/// What publishing flushes to disk before the rename that makes a tree visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Every file and every directory: for writers whose files went through buffered
    /// libraries (Parquet, Zarr) and were not synced one by one.
    Tree,
    /// The directories only: the writer synced each file as it finished it (with
    /// `write_synced` or `File::sync_all`), and a second fsync of a clean file still costs
    /// a disk flush.
    Directories,
}

/// Flushes every file and directory under `dir` (and `dir` itself) to disk: what makes a
/// temporary tree durable before it is published.
pub fn sync_tree(dir: &Path) -> Result<()> {
    sync_tree_with(dir, Flush::Tree)
}

/// Flushes the directories under `dir` (and `dir` itself), and the files too with
/// `Flush::Tree`.
pub fn sync_tree_with(dir: &Path, flush: Flush) -> Result<()> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| Error::io(&d, &e))? {
            let entry = entry.map_err(|e| Error::io(&d, &e))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| Error::io(&path, &e))?;
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() && flush == Flush::Tree {
                sync_file(&path)?;
            }
        }
        sync_dir(&d)?;
    }
    Ok(())
}

/// Creates (or truncates) `path`, writes `bytes` and flushes them to disk. For files inside
/// a temporary directory, whose publish makes them visible.
pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = File::create(path).map_err(|e| Error::io(path, &e))?;
    f.write_all(bytes)
        .and_then(|_| fsync(&f, path))
        .map_err(|e| Error::io(path, &e))
}

/// Replaces the file `path` atomically: `write` fills a hidden temporary sibling, which is
/// published over `path` with [`publish_file`] (the file flushed, renamed into place, the
/// parent flushed). A reader sees the old file or the new one, never a part; a directory at
/// `path` is never replaced. On error the temporary file is removed and `path` is untouched
/// (unless only the final flush of the parent failed: then the new file is in place but its
/// durability is not confirmed). What every single-file output goes through.
pub fn write_file_atomically(
    path: &Path,
    write: impl FnOnce(&mut File) -> Result<()>,
) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    remove_stale_temps(&parent_of(path), &name);
    let tmp = parent_of(path).join(fresh_temp_name(&name));
    let result = (|| {
        let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, &e))?;
        write(&mut f)?;
        drop(f);
        publish_file(&tmp, path, Existing::Replace)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// What publishing does with something already at the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Refuse (`Exists`): the target appeared after the writer checked it.
    Keep,
    /// Replace it, once the new tree is in place. The writer has already applied its own
    /// rule of what it may replace (a dataset writer only a dataset, a store writer only a
    /// store).
    Replace,
}

/// Publishes the finished temporary directory `tmp` as `target`: syncs the tree (`flush`
/// says whether its files still need it), renames it into place, and syncs the parent. An
/// existing target (`Existing::Replace`) is swapped with the new tree in one
/// `renameat2(RENAME_EXCHANGE)` and deleted afterwards; where the file system cannot swap,
/// it is first moved aside to a hidden name, put back if the rename fails, and deleted
/// once the new tree is in place.
///
/// Errors: `Exists` (with `Existing::Keep`, something is at the target), `Io` (a sync or
/// rename failed; the message names the path). On any error the target is as it was: a
/// failed sync of the parent after the rename undoes the rename (the new tree goes back to
/// `tmp`). Deleting the replaced tree comes last; if that fails, it stays under a hidden
/// temporary name, removed by the next write to the target ([`remove_stale_temps`]).
pub fn publish_dir(tmp: &Path, target: &Path, existing: Existing, flush: Flush) -> Result<()> {
    sync_tree_with(tmp, flush)?;
    if existing == Existing::Replace && exists(target) {
        // One atomic swap: the path never lacks a dataset, and a reader holding the old
        // directory open (storage::dir) keeps reading it until it is deleted here.
        match exchange(tmp, target) {
            Ok(()) => return finish_exchange(tmp, target),
            Err(e) if exchange_unsupported(&e) => {}
            Err(e) => {
                return Err(Error::io(target, &e).context("exchanging with the existing target"))
            }
        }
    }
    let aside = move_existing_aside(target, existing)?;
    if let Err(e) = std::fs::rename(tmp, target) {
        return Err(match &aside {
            Some(old) => {
                let _ = std::fs::rename(old, target);
                Error::io(target, &e).context("renaming into place")
            }
            None => refused_rename(target, &e),
        });
    }
    if let Err(e) = sync_dir(&parent_of(target)) {
        // The rename is not confirmed durable: undo it, so that a failed publish leaves the
        // target as it was (and the new tree in `tmp`, for another try).
        let _ = std::fs::rename(target, tmp);
        if let Some(old) = &aside {
            let _ = std::fs::rename(old, target);
        }
        return Err(e);
    }
    if let Some(old) = aside {
        remove_any(&old);
    }
    Ok(())
}

/// After `exchange(tmp, target)` (the new output at `target`, the old one at `tmp`): syncs
/// the parent, then deletes the old one. If the sync fails, swaps back: the target as it
/// was, the new output in `tmp` again.
fn finish_exchange(tmp: &Path, target: &Path) -> Result<()> {
    if let Err(e) = sync_dir(&parent_of(target)) {
        let _ = exchange(tmp, target);
        return Err(e);
    }
    remove_any(tmp);
    Ok(())
}

/// Swaps `a` and `b` atomically (`renameat2(RENAME_EXCHANGE)`, Linux 3.15+).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let (ca, cb) = (c(a)?, c(b)?);
    // SAFETY: both paths are NUL-terminated strings alive for the call; renameat2(2) reads
    // nothing else of ours.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, _b: &Path) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

/// The file system (or kernel, or libc) cannot swap: publish by moving the old target
/// aside instead (a short window in which the path is empty).
fn exchange_unsupported(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::Unsupported
        || matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS))
}

/// Publishes the finished temporary file `tmp` as `target` (swapped with an existing file
/// by `renameat2(RENAME_EXCHANGE)`, else renamed into place), then syncs the parent. A
/// directory at the target is never replaced by a file.
///
/// Errors: `Exists` (`Existing::Keep` and something is at the target, or a directory is
/// there), `Io` (the target as it was: a failed rename leaves it, a failed sync of the
/// parent swaps it back — except after a plain rename over an old file, on a file system
/// that cannot swap).
pub fn publish_file(tmp: &Path, target: &Path, existing: Existing) -> Result<()> {
    sync_file(tmp)?;
    let replacing = match std::fs::symlink_metadata(target) {
        Ok(_) if existing == Existing::Keep => return Err(appeared(target)),
        Ok(m) if m.is_dir() => {
            return Err(Error::new(
                ErrorKind::Exists,
                format!(
                    "{}: is a directory; refusing to replace it with a file",
                    target.display()
                ),
            ))
        }
        Ok(_) => true,
        Err(_) => false,
    };
    if replacing {
        // Swapped, so that a failed sync of the parent can put the old file back.
        match exchange(tmp, target) {
            Ok(()) => return finish_exchange(tmp, target),
            Err(e) if exchange_unsupported(&e) => {}
            Err(e) => {
                return Err(Error::io(target, &e).context("exchanging with the existing target"))
            }
        }
    }
    std::fs::rename(tmp, target).map_err(|e| match existing {
        // rename(2) replaces a file atomically: on failure the old one is still there.
        Existing::Replace => Error::io(target, &e).context("renaming into place"),
        Existing::Keep => refused_rename(target, &e),
    })?;
    if let Err(e) = sync_dir(&parent_of(target)) {
        // Not confirmed durable: a new file is taken back (a replaced one without the swap
        // cannot be restored: then the new file stays, reported as not durable).
        if !replacing {
            let _ = std::fs::rename(target, tmp);
        }
        return Err(e);
    }
    Ok(())
}

/// Moves an existing `target` to a hidden sibling name (when replacing it), so that the new
/// tree can take its place; returns where it went.
fn move_existing_aside(target: &Path, existing: Existing) -> Result<Option<PathBuf>> {
    if !exists(target) {
        return Ok(None);
    }
    if existing == Existing::Keep {
        return Err(appeared(target));
    }
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let aside = parent_of(target).join(fresh_temp_name(&name));
    std::fs::rename(target, &aside)
        .map_err(|e| Error::io(target, &e).context("moving the existing target aside"))?;
    Ok(Some(aside))
}

fn appeared(target: &Path) -> Error {
    Error::new(
        ErrorKind::Exists,
        format!(
            "{}: appeared while writing (set overwrite to replace it)",
            target.display()
        ),
    )
}

/// rename(2) never replaces a non-empty directory, so a target that appeared meanwhile is
/// not lost: it surfaces here as `Exists`.
fn refused_rename(target: &Path, e: &std::io::Error) -> Error {
    if exists(target) {
        appeared(target)
    } else {
        Error::io(target, e).context("renaming into place")
    }
}

/// Deletes a file or a directory tree; what cannot be deleted stays (it has a hidden name).
fn remove_any(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh scratch directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "deltacells-fs-{name}-{}-{:x}",
            std::process::id(),
            random_u64()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn tree(dir: &Path) -> TempSibling {
        let t = create_temp_sibling(&dir.join("out")).unwrap();
        std::fs::create_dir(t.dir.join("sub")).unwrap();
        write_synced(&t.dir.join("sub/a.bin"), b"abc").unwrap();
        write_synced(&t.dir.join("manifest.json"), b"{}").unwrap();
        t
    }

    /// The pid of a process that has ended (a child run and waited for).
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn a_new_spill_dir_removes_the_spills_of_dead_writers_only() {
        let root = scratch("spills");
        let dead = dead_pid();
        let make = |name: &str| {
            let d = root.join(name);
            std::fs::create_dir_all(d.join("runs")).unwrap();
            std::fs::write(d.join("runs/0.bin"), b"spilled").unwrap();
            d
        };
        let stale = make(&format!("t.cdz.tmp-{dead}-{:016x}", 7));
        let live = make(&format!("t.cdz.tmp-{}-{:016x}", std::process::id(), 8));
        let other_target = make(&format!("u.cdz.tmp-{dead}-{:016x}", 9));
        let not_ours = make(&format!("t.cdz.tmp-{dead}-notahexnumber"));
        let fresh = create_spill_dir_in(&root, "t.cdz", "a test").unwrap();
        assert!(fresh.is_dir());
        assert!(!stale.exists(), "the dead writer's spill is removed");
        assert!(live.exists(), "a live writer's spill is kept");
        assert!(other_target.exists(), "another target's spill is kept");
        assert!(
            not_ours.exists(),
            "a name not of the temporary shape is kept"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn temp_names_are_hidden_and_recognised() {
        let t = scratch("names");
        let s = create_temp_sibling(&t.join("x.chromdata.zarr")).unwrap();
        assert!(is_temp_name(&s.dir));
        assert!(s
            .dir
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(".x.chromdata.zarr.tmp-"));
        assert!(!is_temp_name(&t.join("x.chromdata.zarr")));
        assert!(!is_temp_name(&t.join(".x.tmp-12-zz")));
        assert_ne!(fresh_temp_name("a"), fresh_temp_name("a"));
        let e = create_temp_sibling(&t.join("..")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn publish_moves_the_tree_into_place() {
        let d = scratch("publish");
        let t = tree(&d);
        publish_dir(&t.dir, &d.join("out"), Existing::Keep, Flush::Tree).unwrap();
        assert_eq!(std::fs::read(d.join("out/sub/a.bin")).unwrap(), b"abc");
        assert!(!t.dir.exists());
        // A second tree replaces the first only when asked to.
        let t2 = tree(&d);
        std::fs::write(t2.dir.join("manifest.json"), b"{\"new\":1}").unwrap();
        let e = publish_dir(&t2.dir, &d.join("out"), Existing::Keep, Flush::Tree).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Exists, "{e}");
        assert!(t2.dir.exists(), "a refused publish keeps the new tree");
        publish_dir(&t2.dir, &d.join("out"), Existing::Replace, Flush::Tree).unwrap();
        assert_eq!(
            std::fs::read(d.join("out/manifest.json")).unwrap(),
            b"{\"new\":1}"
        );
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("out")],
            "nothing left aside"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_refused_rename_is_an_io_error_naming_the_target() {
        let d = scratch("rename");
        let t = tree(&d);
        // The OS refuses: the target's parent is a regular file (ENOTDIR).
        std::fs::write(d.join("file"), b"x").unwrap();
        let target = d.join("file").join("out");
        let e = publish_dir(&t.dir, &target, Existing::Keep, Flush::Tree).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io, "{e}");
        assert!(e.message.contains(&target.display().to_string()), "{e}");
        assert!(t.dir.join("sub/a.bin").exists(), "the tree is kept");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_fsync_in_the_tree_stops_the_publish() {
        let d = scratch("fsync-tree");
        let t = tree(&d);
        fault::fail_sync_of("sub/a.bin");
        let e = publish_dir(&t.dir, &d.join("out"), Existing::Keep, Flush::Tree).unwrap_err();
        fault::clear();
        assert_eq!(e.kind, ErrorKind::Io, "{e}");
        assert!(
            e.message.contains("a.bin") && e.message.contains("syncing"),
            "{e}"
        );
        assert!(!d.join("out").exists(), "nothing is published");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_already_synced_are_not_synced_again() {
        let d = scratch("fsync-dirs");
        let t = tree(&d);
        // With Flush::Directories only directories are flushed: a file that would fail is
        // not touched, a directory that fails stops the publish.
        fault::fail_sync_of("a.bin");
        publish_dir(&t.dir, &d.join("out"), Existing::Keep, Flush::Directories).unwrap();
        fault::clear();
        let t2 = tree(&d);
        fault::fail_sync_of("/sub");
        let e = publish_dir(&t2.dir, &d.join("out2"), Existing::Keep, Flush::Directories);
        fault::clear();
        assert_eq!(e.unwrap_err().kind, ErrorKind::Io);
        assert!(!d.join("out2").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_fsync_of_the_parent_is_reported() {
        let d = scratch("fsync-parent");
        let t = tree(&d);
        fault::fail_sync_of_exactly(&d);
        let e = publish_dir(&t.dir, &d.join("out"), Existing::Keep, Flush::Tree).unwrap_err();
        fault::clear();
        assert_eq!(e.kind, ErrorKind::Io, "{e}");
        assert!(e.message.contains(&d.display().to_string()), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_fsync_of_a_file_write_is_reported() {
        let d = scratch("fsync-file");
        fault::fail_sync_of("f.bin");
        let e = write_synced(&d.join("f.bin"), b"abc").unwrap_err();
        let e2 = write_file_atomically(&d.join("g.bin"), |f| {
            f.write_all(b"x")
                .map_err(|e| Error::io(Path::new("g.bin"), &e))
        });
        fault::clear();
        assert_eq!(e.kind, ErrorKind::Io, "{e}");
        assert!(e2.is_ok(), "only f.bin fails");
        fault::fail_sync_of(".g.bin.tmp-");
        let e3 = write_file_atomically(&d.join("g.bin"), |f| {
            f.write_all(b"y")
                .map_err(|e| Error::io(Path::new("g.bin"), &e))
        })
        .unwrap_err();
        fault::clear();
        assert_eq!(e3.kind, ErrorKind::Io, "{e3}");
        assert_eq!(
            std::fs::read(d.join("g.bin")).unwrap(),
            b"x",
            "the old file stays"
        );
        let left = std::fs::read_dir(&d).unwrap().count();
        assert_eq!(left, 2, "no temporary file left");
        // The rename is made durable too: a failed flush of the parent is reported.
        fault::fail_sync_of_exactly(&d);
        let e4 = write_file_atomically(&d.join("g.bin"), |f| {
            f.write_all(b"z")
                .map_err(|e| Error::io(Path::new("g.bin"), &e))
        })
        .unwrap_err();
        fault::clear();
        assert_eq!(e4.kind, ErrorKind::Io, "{e4}");
        assert!(e4.message.contains("syncing directory"), "{e4}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_full_disk_is_an_io_error() {
        if !Path::new("/dev/full").exists() {
            return;
        }
        let e = write_synced(Path::new("/dev/full"), &[0u8; 4096]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io, "{e}");
        assert!(e.message.contains("/dev/full"), "{e}");
    }

    #[test]
    fn a_file_never_replaces_a_directory() {
        let d = scratch("file");
        std::fs::create_dir(d.join("t.cdz")).unwrap();
        let tmp = d.join(fresh_temp_name("t.cdz"));
        write_synced(&tmp, b"PK").unwrap();
        let e = publish_file(&tmp, &d.join("t.cdz"), Existing::Replace).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Exists, "{e}");
        std::fs::remove_dir(d.join("t.cdz")).unwrap();
        std::fs::write(d.join("t.cdz"), b"old").unwrap();
        publish_file(&tmp, &d.join("t.cdz"), Existing::Replace).unwrap();
        assert_eq!(std::fs::read(d.join("t.cdz")).unwrap(), b"PK");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_dataset_writer_reports_a_failed_fsync_and_can_finish_again() {
        use crate::dataset::{Dataset, DatasetWriter, WriterOptions};
        let d = scratch("dataset-writer");
        let target = d.join("ds");
        let mut w = DatasetWriter::create(&target, 3, WriterOptions::default()).unwrap();
        w.append_csr(2, &[0, 1, 3], &[2, 0, 1], &[5, 1, 7]).unwrap();
        // Its files are synced as they are written (tiles on the pool); publishing syncs
        // the directories, here on this thread.
        fault::fail_sync_of("tiles");
        let e = w.finish().unwrap_err();
        fault::clear();
        assert_eq!(e.kind, ErrorKind::Io, "{e}");
        assert!(
            e.message.contains("tiles") && e.message.contains("directory"),
            "{e}"
        );
        assert!(!exists(&target), "nothing published");
        w.finish().unwrap();
        assert_eq!(Dataset::open(&target).unwrap().info().n_cells, 2);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(feature = "cli")]
    #[test]
    fn the_mtx_export_reports_a_failed_fsync() {
        use crate::dataset::{Dataset, DatasetWriter, WriterOptions};
        let d = scratch("export");
        let mut w = DatasetWriter::create(d.join("ds"), 3, WriterOptions::default()).unwrap();
        w.append_csr(2, &[0, 1, 3], &[2, 0, 1], &[5, 1, 7]).unwrap();
        w.finish().unwrap();
        let ds = Dataset::open(d.join("ds")).unwrap();
        for name in ["m.mtx", "m.mtx.gz"] {
            let out = d.join(name);
            fault::fail_sync_of(&format!(".{name}.tmp-"));
            let e = crate::convert::export::export_mtx(&ds, &[0, 1], &out).unwrap_err();
            fault::clear();
            assert_eq!(e.kind, ErrorKind::Io, "{name}: {e}");
            assert!(!exists(&out), "{name}: nothing published");
            crate::convert::export::export_mtx(&ds, &[0, 1], &out).unwrap();
        }
        let text = std::fs::read_to_string(d.join("m.mtx")).unwrap();
        assert!(text.starts_with("%%MatrixMarket"), "{text}");
        assert!(text.contains("\n3 2 3\n"), "{text}");
        let mut left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["ds", "m.mtx", "m.mtx.gz"], "no temporary left");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_chromdata_writer_reports_a_failed_fsync() {
        use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
        use std::sync::Arc;
        let d = scratch("chromdata-writer");
        for name in ["a.chromdata.zarr", "a.cdz"] {
            let target = d.join(name);
            let mut w =
                crate::chromdata::ChromDataWriter::create(&target, Default::default()).unwrap();
            let cols: Vec<(&str, ArrayRef)> = vec![
                ("chrom", Arc::new(StringArray::from(vec!["c1", "c1"]))),
                ("start", Arc::new(Int64Array::from(vec![0, 10]))),
                ("end", Arc::new(Int64Array::from(vec![10, 20]))),
                ("trace_id", Arc::new(StringArray::from(vec!["t", "t"]))),
            ];
            w.append(RecordBatch::try_from_iter(cols).unwrap()).unwrap();
            // The tree of a directory store, the zip of a .cdz.
            fault::fail_sync_of(if name.ends_with(".cdz") {
                ".a.cdz.tmp-"
            } else {
                "zarr.json"
            });
            let e = w.finish().unwrap_err();
            fault::clear();
            assert_eq!(e.kind, ErrorKind::Io, "{name}: {e}");
            assert!(!exists(&target), "{name}: nothing published");
        }
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            0,
            "no temporary left"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
