//! Malformed .h5ad files that crash libhdf5 (a segfault in C code) never kill the CLI
//! silently (docs/reliability.md §1, src/bin/deltacells/isolate.rs): `convert` and `verify
//! --against` read HDF5 inputs in a child process; a crash there gives exit status 1 and one
//! error line naming the input, the signal and libhdf5, nothing on stdout, no output, no
//! temporary and no core file left, and an existing output untouched. A libhdf5 call that
//! never returns (an endless loop on a malformed file) is ended by the child's watchdog with
//! the same guarantees (`a_libhdf5_hang_...`, with a short budget).
//!
//! The inputs are the patches of tests/data/hdf5-crashes/ (scripts/make-hdf5-crash-patch.py),
//! applied to the committed seed. They are deliberately not in fuzz/corpus or
//! fuzz/regressions: tests/fuzz_replay.rs replays those in-process, where libhdf5's crash
//! would kill the test binary.
#![cfg(feature = "cli")]

mod convert_support;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use convert_support::*;
use deltacells::dataset::Dataset;
use deltacells::storage::fs::is_temp_name;
use sha2::{Digest, Sha256};

fn sha256(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Every committed crash reproducer, rebuilt from its patch: (name, bytes).
fn reproducers() -> Vec<(String, Vec<u8>)> {
    patched("tests/data/hdf5-crashes")
        .into_iter()
        .map(|(name, bytes, _)| (name, bytes))
        .collect()
}

/// Every patch of `dir` (relative to the crate), rebuilt: (name, bytes, the patch).
fn patched(dir: &str) -> Vec<(String, Vec<u8>, serde_json::Value)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no patches in {}", dir.display());
    files
        .iter()
        .map(|f| {
            let doc: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
            let seed = std::fs::read(root.join(doc["seed"].as_str().unwrap())).unwrap();
            assert_eq!(sha256(&seed), doc["seed_sha256"], "{}: seed", f.display());
            let (mut out, mut at) = (Vec::new(), 0usize);
            for e in doc["edits"].as_array().unwrap() {
                let off = e[0].as_u64().unwrap() as usize;
                let n = e[1].as_u64().unwrap() as usize;
                let hex = e[2].as_str().unwrap();
                assert!(off >= at, "{}: edits overlap", f.display());
                out.extend_from_slice(&seed[at..off]);
                out.extend(
                    (0..hex.len())
                        .step_by(2)
                        .map(|k| u8::from_str_radix(&hex[k..k + 2], 16).unwrap()),
                );
                at = off + n;
            }
            out.extend_from_slice(&seed[at..]);
            assert_eq!(out.len() as u64, doc["length"].as_u64().unwrap());
            assert_eq!(sha256(&out), doc["sha256"], "{}: rebuilt", f.display());
            let name = f.file_stem().unwrap().to_string_lossy().into_owned();
            (name, out, doc)
        })
        .collect()
}

/// Checks the outcome of a crash: status 1, nothing on stdout (but for verify's line on the
/// dataset's own checks, which passed before the input was read), one error line naming the
/// input, a signal and libhdf5, ending with `tail`.
fn assert_crash_reported(o: &Output, input: &Path, tail: &str, case: &str) {
    let (out, err) = (stdout(o), stderr(o));
    assert_eq!(o.status.code(), Some(1), "{case}: {out}{err}");
    if tail.contains("was not compared") {
        let checks = |l: &str| l.contains(": OK: ") && !l.contains("identical");
        assert!(
            out.lines().count() == 1 && out.lines().all(checks),
            "{case}: stdout: {out}"
        );
    } else {
        assert_eq!(out, "", "{case}: stdout");
    }
    // Ours is the one line; before it, glibc may have printed its own diagnostic of the
    // heap corruption it detected before it aborted (`munmap_chunk(): invalid pointer`):
    // the child writes to the same stderr (docs/reliability.md §1).
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("deltacells"))
        .collect();
    assert_eq!(ours.len(), 1, "{case}: one error line: {err}");
    assert!(
        err.lines().last() == Some(ours[0]),
        "{case}: ours last: {err}"
    );
    let line = ours[0];
    let want = format!(
        "deltacells: error: {}: libhdf5 crashed reading this malformed HDF5 file (SIG",
        input.display()
    );
    // Each reproducer crashed libhdf5 1.10.8 (Debian) deterministically when committed; if
    // a newer libhdf5 refuses one cleanly instead, it no longer tests the containment.
    assert!(line.starts_with(&want), "{case}: {line}");
    assert!(line.ends_with(tail), "{case}: want ...{tail:?}: {line}");
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Files with their bytes (relative path, content).
type Snapshot = Vec<(PathBuf, Vec<u8>)>;

/// Every file under `dir` with its bytes (relative path, content), sorted.
fn snapshot(dir: &Path) -> Snapshot {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.push((
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// Converts the seed to `out` (a good, existing output) and returns its files, the names in
/// `dir` and its inode, to check that a failed conversion leaves all three as they were.
fn good_output(out: &Path, dir: &Path) -> (Snapshot, Vec<String>, u64) {
    let seed = scrna("10x-v3-1107-cells-chr21.h5ad");
    ok(&[
        "convert",
        seed.to_str().unwrap(),
        out.to_str().unwrap(),
        "--quiet",
    ]);
    (snapshot(out), names(dir), ino(out))
}

fn ino(p: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap())
}

/// Runs the CLI in `dir` with core dumps allowed (the soft RLIMIT_CORE raised to the hard
/// one): the child must not leave a core file (core_pattern is often a relative `core`).
fn run_allowing_core_dumps(args: &[&str], dir: &Path) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(dir);
    // SAFETY: getrlimit/setrlimit are async-signal-safe and touch only the local struct.
    unsafe {
        cmd.pre_exec(|| {
            let mut lim: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_CORE, &mut lim) == 0 {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_CORE, &lim);
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

#[test]
fn a_libhdf5_crash_in_convert_is_reported_and_leaves_nothing() {
    for (name, bytes) in reproducers() {
        let dir = TempDir::new("h5crash");
        let input = dir.join(&format!("{name}.h5ad"));
        std::fs::write(&input, &bytes).unwrap();
        // Files that look like temporaries of the output but are not the child's: a live
        // process's (pid 1) and a user's; both must stay.
        let live = ".out.dc.tmp-1-0123456789abcdef";
        std::fs::create_dir(dir.join(live)).unwrap();
        std::fs::write(dir.join(".out.dc.tmp-notes"), b"mine").unwrap();
        let before = names(&dir.0);
        let out = dir.join("out.dc");
        for extra in [&[][..], &["--no-sort-genes"][..], &["--overwrite"][..]] {
            let mut args = vec!["convert", input.to_str().unwrap(), out.to_str().unwrap()];
            args.extend_from_slice(extra);
            let o = run_allowing_core_dumps(&args, &dir.0);
            let tail = format!("; nothing was written to {}", out.display());
            assert_crash_reported(&o, &input, &tail, &format!("{name} {extra:?}"));
            assert_eq!(names(&dir.0), before, "{name} {extra:?}: what is left");
        }
    }
}

#[test]
fn a_libhdf5_crash_leaves_an_existing_output_untouched() {
    for (name, bytes) in reproducers() {
        let dir = TempDir::new("h5crash-keep");
        let input = dir.join(&format!("{name}.h5ad"));
        std::fs::write(&input, &bytes).unwrap();
        let out = dir.join("out.dc");
        let (files, before, ino_before) = good_output(&out, &dir.0);
        for extra in [&["--overwrite"][..], &[][..]] {
            let mut args = vec!["convert", input.to_str().unwrap(), out.to_str().unwrap()];
            args.extend_from_slice(extra);
            let o = run(&args);
            let case = format!("{name} {extra:?}");
            if o.status.code() == Some(4) {
                // Without --overwrite the writer may refuse the existing output before the
                // input's crash is reached (when the crash is past opening the file).
                assert!(stderr(&o).contains("exists"), "{case}: {}", stderr(&o));
            } else {
                let tail = format!("; nothing was written to {}", out.display());
                assert_crash_reported(&o, &input, &tail, &case);
            }
            assert_eq!(names(&dir.0), before, "{case}: what is left");
            assert_eq!(ino(&out), ino_before, "{case}: the output was replaced");
            assert!(snapshot(&out) == files, "{case}: the output changed");
            Dataset::open(&out).unwrap();
        }
    }
}

#[test]
fn a_libhdf5_crash_in_verify_against_is_reported() {
    let dir = TempDir::new("h5crash-verify");
    let ds = dir.join("ds.dc");
    let seed = scrna("10x-v3-1107-cells-chr21.h5ad");
    ok(&[
        "convert",
        seed.to_str().unwrap(),
        ds.to_str().unwrap(),
        "--quiet",
    ]);
    let mut crashed = 0;
    for (name, bytes) in reproducers() {
        let input = dir.join(&format!("{name}.h5ad"));
        std::fs::write(&input, &bytes).unwrap();
        let o = run(&[
            "verify",
            ds.to_str().unwrap(),
            "--against",
            input.to_str().unwrap(),
        ]);
        // verify reads X only: a crash in the obs/var tables is not reached (exit 0).
        assert!(o.status.code().is_some(), "{name}: {:?}", o.status);
        if o.status.code() != Some(0) {
            let tail = format!(
                "; {} was not compared with it (nothing was written)",
                ds.display()
            );
            assert_crash_reported(&o, &input, &tail, &name);
            crashed += 1;
        }
    }
    assert!(
        crashed > 0,
        "no reproducer crashes in X (encoding-type-heap-object-size should)"
    );
}

/// The process ids whose parent is `ppid` (from /proc).
fn children_of(ppid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces, so split after the last ')'.
        let rest = &stat[stat.rfind(')').unwrap() + 1..];
        if rest.split_whitespace().nth(1).and_then(|s| s.parse().ok()) == Some(ppid) {
            out.push(pid);
        }
    }
    out
}

/// Waits (up to 60 s: a hang fails, a slow machine does not) until `f` holds.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..6000 {
        if f() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("gave up waiting: {what}");
}

/// A convert whose child blocks: the input is a FIFO nobody writes (`--matrix` makes the
/// parent isolate without reading the input; libhdf5's open blocks in the child).
fn blocked_convert(dir: &TempDir) -> (std::process::Child, u32) {
    let fifo = dir.join("blocked.h5ad");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path alive for the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut cmd = Command::new(BIN);
    cmd.args([
        "convert",
        fifo.to_str().unwrap(),
        dir.join("out.dc").to_str().unwrap(),
    ])
    .args(["--matrix", "X"])
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    // The CLI starts with SIGINT and SIGTERM at their default actions, whatever this test
    // inherited: a test run in the background of a shell without job control starts with
    // SIGINT ignored, which the CLI keeps ignored (as documented), so SIGINT would never
    // reach its child (seen: the child ended by the hang watchdog after 60 s instead).
    // SAFETY: signal(2) is async-signal-safe and touches no memory of this process.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    let parent = cmd.spawn().unwrap();
    let mut child = 0;
    wait_until("the isolated child to start", || {
        child = children_of(parent.id()).first().copied().unwrap_or(0);
        child != 0
    });
    // The parent runs no thread besides its main one (it only waits; libhdf5 never runs in it).
    let status = std::fs::read_to_string(format!("/proc/{}/status", parent.id())).unwrap();
    assert!(status.lines().any(|l| l == "Threads:\t1"), "{status}");
    (parent, child)
}

#[test]
fn signals_to_the_parent_reach_the_child() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let dir = TempDir::new("h5crash-signal");
        let (mut parent, child) = blocked_convert(&dir);
        // SAFETY: a signal to the process this test started.
        unsafe { libc::kill(parent.id() as libc::pid_t, sig) };
        let status = parent.wait().unwrap();
        // The parent ends as the child did: by the same signal, as a single process would.
        assert_eq!(status.signal(), Some(sig), "{status:?}");
        assert!(
            !Path::new(&format!("/proc/{child}")).exists(),
            "child {child} still runs"
        );
        let left: Vec<String> = names(&dir.0)
            .into_iter()
            .filter(|n| is_temp_name(Path::new(n)))
            .collect();
        // The writer has not started (the child was opening the input): nothing to leave.
        assert!(left.is_empty(), "{left:?}");
    }
}

/// A pipe whose buffer is full: whoever writes to it blocks (the read end is returned to
/// keep it open).
fn full_pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which we then own.
    assert_eq!(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) },
        0
    );
    let (r, w) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    let chunk = [b'x'; 4096];
    // SAFETY: writes from a live buffer to our own descriptor; fcntl on it.
    unsafe {
        while libc::write(fds[1], chunk.as_ptr().cast(), chunk.len()) > 0 {}
        libc::fcntl(fds[1], libc::F_SETFL, 0);
    }
    (r, w)
}

/// SIGTERM while the child is converting (its writer's temporary exists; it is blocked
/// writing its first progress line to a full stderr pipe): the parent removes the child's
/// temporary, then ends by SIGTERM.
#[test]
fn a_terminated_conversion_leaves_no_temporary() {
    let dir = TempDir::new("h5crash-term");
    let seed = scrna("10x-v3-1107-cells-chr21.h5ad");
    let out = dir.join("out.dc");
    let (_keep_open, full) = full_pipe();
    let mut parent = Command::new(BIN)
        .args([
            "convert",
            seed.to_str().unwrap(),
            out.to_str().unwrap(),
            "--progress",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::from(full))
        .spawn()
        .unwrap();
    let temps = || {
        names(&dir.0)
            .into_iter()
            .filter(|n| is_temp_name(Path::new(n)))
            .count()
    };
    wait_until("the child's writer to create its temporary", || temps() > 0);
    // SAFETY: a signal to the process this test started.
    unsafe { libc::kill(parent.id() as libc::pid_t, libc::SIGTERM) };
    let status = parent.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    assert_eq!(names(&dir.0), Vec::<String>::new(), "what is left");
}

#[test]
fn a_killed_parent_takes_the_child_along() {
    let dir = TempDir::new("h5crash-kill");
    let (mut parent, child) = blocked_convert(&dir);
    parent.kill().unwrap();
    parent.wait().unwrap();
    wait_until("the orphaned child to end", || {
        !Path::new(&format!("/proc/{child}")).exists()
            || std::fs::read_to_string(format!("/proc/{child}/stat"))
                .is_ok_and(|s| s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
    });
}

#[test]
fn the_child_marker_is_refused_when_set_by_hand() {
    let o = Command::new(BIN)
        .args(["info", "nothing.dc"])
        .env("DELTACELLS_ISOLATED_READER", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    assert!(
        stderr(&o).contains("DELTACELLS_ISOLATED_READER is set"),
        "{o:?}"
    );
    assert_eq!(stdout(&o), "");
}

/// The base budget of one libhdf5 call for the hang tests (the default is 60 s).
const SHORT_BUDGET: &str = "2";

/// Runs `cmd` to its end; if it is still running after 5 minutes (the watchdog failed to
/// end the loop), kills it and fails the test instead of hanging it.
fn output_unless_hung(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..3000 {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    panic!("still running after 5 minutes: the watchdog did not end it: {o:?}");
}

/// A libhdf5 call that never returns (`tests/data/hdf5-hangs/`: libhdf5 1.10.8 loops in
/// `H5C_protect` under `H5HG_read`) is ended by the child's watchdog: status 1, one line
/// naming the input, the object read and the budget, nothing on stdout, nothing left
/// behind (a live process's temporary and a user's file stay), a previous output (with and
/// without --overwrite) byte for byte the same.
#[test]
fn a_libhdf5_hang_is_ended_by_the_watchdog_and_leaves_nothing() {
    let hangs = patched("tests/data/hdf5-hangs");
    assert!(!hangs.is_empty());
    for (name, bytes, doc) in hangs {
        let dir = TempDir::new("h5hang");
        let input = dir.join(&format!("{name}.h5ad"));
        std::fs::write(&input, &bytes).unwrap();
        std::fs::create_dir(dir.join(".out.dc.tmp-1-0123456789abcdef")).unwrap();
        std::fs::write(dir.join(".out.dc.tmp-notes"), b"mine").unwrap();
        let out = dir.join("out.dc");
        let object = doc["object"]
            .as_str()
            .expect("the patch names the object that hangs");
        let want = format!(
            "deltacells: error: {}: {object}: libhdf5 did not return within {SHORT_BUDGET} s: \
             an endless loop of libhdf5 on this malformed HDF5 file (the limit of one call: \
             DELTACELLS_HDF5_CALL_TIMEOUT); nothing was written to {}",
            input.display(),
            out.display()
        );
        let convert = |extra: &[&str]| {
            let mut args = vec!["convert", input.to_str().unwrap(), out.to_str().unwrap()];
            args.extend_from_slice(extra);
            args.push("--no-sort-genes");
            let mut cmd = Command::new(BIN);
            cmd.args(&args)
                .current_dir(&dir.0)
                .env("DELTACELLS_HDF5_CALL_TIMEOUT", SHORT_BUDGET);
            output_unless_hung(cmd)
        };
        let check = |o: &Output, case: &str| {
            assert_eq!(o.status.code(), Some(1), "{case}: {o:?}");
            assert_eq!(stdout(o), "", "{case}");
            assert_eq!(
                stderr(o).lines().collect::<Vec<_>>(),
                [want.as_str()],
                "{case}"
            );
        };
        let before = names(&dir.0);
        let o = convert(&[]);
        check(&o, &format!("{name}: new output"));
        assert_eq!(names(&dir.0), before, "{name}: what is left");

        let (files, before, ino_before) = good_output(&out, &dir.0);
        for extra in [&["--overwrite"][..], &[][..]] {
            let o = convert(extra);
            let case = format!("{name} {extra:?}");
            if o.status.code() != Some(4) {
                check(&o, &case);
            }
            assert_eq!(names(&dir.0), before, "{case}: what is left");
            assert_eq!(ino(&out), ino_before, "{case}: the output was replaced");
            assert!(snapshot(&out) == files, "{case}: the output changed");
        }
    }
}

#[test]
fn the_call_budget_variable_is_checked() {
    let dir = TempDir::new("h5budget");
    let seed = scrna("10x-v3-1107-cells-chr21.h5ad");
    let out = dir.join("out.dc");
    for bad in ["abc", "-1", "inf"] {
        let o = Command::new(BIN)
            .args(["convert", seed.to_str().unwrap(), out.to_str().unwrap()])
            .env("DELTACELLS_HDF5_CALL_TIMEOUT", bad)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}: {o:?}");
        assert!(
            stderr(&o).starts_with("deltacells: error: DELTACELLS_HDF5_CALL_TIMEOUT is "),
            "{bad}: {o:?}"
        );
        assert!(!out.exists());
    }
    // 0 turns the watchdog off; the measuring aid names the slowest call (valid input).
    let o = Command::new(BIN)
        .args([
            "convert",
            seed.to_str().unwrap(),
            out.to_str().unwrap(),
            "--quiet",
        ])
        .env("DELTACELLS_HDF5_CALL_TIMEOUT", "0")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(stderr(&o), "");
    let o = Command::new(BIN)
        .args([
            "convert",
            seed.to_str().unwrap(),
            out.to_str().unwrap(),
            "--quiet",
        ])
        .args(["--overwrite"])
        .env("DELTACELLS_HDF5_CALL_STATS", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let err = stderr(&o);
    assert!(
        err.starts_with("deltacells: slowest libhdf5 call: ") && err.contains("of its budget of"),
        "{err}"
    );
}
