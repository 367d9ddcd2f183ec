//! Commands that open an HDF5 input run in a child process.
//!
//! libhdf5 is C code, and malformed files crash it (memory-safety bugs on malformed input
//! are reported against every release line, 1.14 included: HDFGroup/hdf5 #5869 =
//! CVE-2025-2309, #5892, #5581, #6401), so no check of ours can make reading an arbitrary
//! `.h5ad` in-process safe. `deltacells convert` of an HDF5 file and `deltacells verify
//! --against` an HDF5 file therefore re-execute this binary (`current_exe`, the same
//! arguments, [`CHILD_ENV`] set to this process's id) and wait for it. The parent starts no
//! thread and never calls libhdf5; the child inherits standard input, output and error, so
//! everything it prints passes through unchanged, and its exit status is this process's.
//!
//! If the child dies of a crash signal (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL), the
//! parent removes what the child's dataset writer left — its hidden temporary siblings of
//! OUTPUT, `.NAME.tmp-<child pid>-<random>` (`storage::fs::temp_name`), and nothing else
//! (a previous OUTPUT the publish had moved aside is put back: [`clean_up_child`]) —
//! and prints one error line naming the input, the signal and libhdf5, with exit status 1
//! (bad data). The writer publishes only in `finish`, after the last read of the input, so
//! a crash while reading never touches an existing OUTPUT (`--overwrite` swaps the new
//! dataset in only once it is complete). Should the crash come after the publish (libhdf5
//! closing the file), OUTPUT has changed identity, and the message says that it is complete.
//!
//! Signals meant to end the command (SIGINT, SIGTERM, SIGHUP, SIGQUIT) sent to the parent are
//! forwarded to the child; when the child dies of any signal other than a crash, the parent
//! ends itself with the same signal, so a shell sees what it saw before (130 after Ctrl-C),
//! after removing the child's temporaries as for a crash (before this change they waited for
//! the next write to the target).
//! If the parent is killed (SIGKILL), the child gets SIGKILL too (`PR_SET_PDEATHSIG`): the
//! same outcome as killing a single process (a temporary the next write removes).
//!
//! The child does not dump core (`RLIMIT_CORE` 0): a crash on a malformed input is an
//! expected, reported outcome, the input reproduces it, and a core file would be left in the
//! user's directory.
//!
//! libhdf5 can also loop forever on a malformed file. The child records each libhdf5 call
//! with its time budget (`convert::h5watch`: a base of 60 s, [`CALL_TIMEOUT_ENV`], for
//! metadata and attributes; plus one second per MiB for a bulk read), and a watchdog thread
//! in the child checks the call in progress every 250 ms. When one has outlived its budget,
//! the watchdog writes what it was reading to a pipe the parent passed ([`REPORT_ENV`]) and
//! ends the child with [`STATUS_HUNG`] (`_exit`: nothing printed, nothing flushed). The
//! parent then does what it does after a crash: removes the child's temporaries and prints
//! one line naming the input, the object and the budget (status 1). The budget is per call,
//! never per command: a conversion of hours makes many calls, each far inside its budget.
//! Time counts in ticks of at most 1 s, so a child stopped (Ctrl-Z, SIGSTOP) or a machine
//! suspended for a while does not use up a budget.
//!
//! Cost: one more exec and process start (measured in docs/reliability.md §1), nothing per
//! cell.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use deltacells::convert::{h5ad, h5watch};
use deltacells::storage::fs;

use crate::args::Args;

/// Set in the child to the parent's process id: "you are the isolated process, do the work".
/// For deltacells' own use.
pub const CHILD_ENV: &str = "DELTACELLS_ISOLATED_READER";

/// The exit status of bad data (`exit_status(ErrorKind::Format)`).
const STATUS_BAD_DATA: u8 = 1;

/// The base time budget of one libhdf5 call, in seconds (decimals allowed; default 60, the
/// budget of metadata and attribute reads; bulk reads get one more second per MiB; 0 turns
/// the watchdog off).
pub const CALL_TIMEOUT_ENV: &str = "DELTACELLS_HDF5_CALL_TIMEOUT";

/// Set in the child to the descriptor of the pipe its watchdog reports a hang on.
const REPORT_ENV: &str = "DELTACELLS_ISOLATED_REPORT";

/// The child's exit status after its watchdog found a libhdf5 call that did not return (the
/// parent turns it into status 1 when the pipe holds the report).
const STATUS_HUNG: i32 = 86;

/// How often the watchdog looks at the call in progress.
const TICK: Duration = Duration::from_millis(250);

/// The base budget from [`CALL_TIMEOUT_ENV`]: None for 0 (no watchdog).
fn call_timeout() -> Result<Option<Duration>, String> {
    let Some(v) = std::env::var_os(CALL_TIMEOUT_ENV) else {
        return Ok(Some(h5watch::DEFAULT_BASE));
    };
    match v.to_str().and_then(|s| s.trim().parse::<f64>().ok()) {
        Some(0.0) => Ok(None),
        Some(s) if s.is_finite() && (0.001..=1e9).contains(&s) => {
            Ok(Some(Duration::from_secs_f64(s)))
        }
        _ => Err(format!(
            "{CALL_TIMEOUT_ENV} is {v:?}: expected the seconds one libhdf5 call may take \
             (e.g. 60; 0 turns the watchdog off)"
        )),
    }
}

/// Seconds for a message: whole, or with one decimal.
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

/// A command line that opens an HDF5 input: the input, and the output it writes (if any).
#[derive(Debug)]
pub struct Plan {
    input: String,
    /// `convert`: the output dataset.
    output: Option<String>,
    /// `verify`: the dataset compared with the input.
    compared: Option<String>,
}

/// Whether this command line opens an HDF5 input (and so runs in a child): `convert` of an
/// HDF5 file (recognised by its signature, or `--matrix`, which only h5ad takes), and
/// `verify --against` an HDF5 file. Help and version requests never do. Reads at most the
/// first 8 bytes of the input; an input that cannot be read is left to the command itself.
pub fn plan(a: &Args) -> Option<Plan> {
    if std::env::var_os(CHILD_ENV).is_some()
        || ["--help", "-h", "--version", "-V"]
            .iter()
            .any(|f| a.flag(f))
    {
        return None;
    }
    let is_hdf5 = |p: &str| h5ad::is_hdf5(Path::new(p)).unwrap_or(false);
    match a.words.as_slice() {
        [c, input, output] if c == "convert" => (a.value("--matrix").is_some() || is_hdf5(input))
            .then(|| Plan {
                input: input.clone(),
                output: Some(output.clone()),
                compared: None,
            }),
        [c, dataset] if c == "verify" => {
            let src = a.value("--against")?;
            is_hdf5(src).then(|| Plan {
                input: src.to_string(),
                output: None,
                compared: Some(dataset.clone()),
            })
        }
        _ => None,
    }
}

/// In the child (CHILD_ENV set): asks for SIGKILL when the parent dies, and checks that the
/// parent is still the process that started it. Returns an error line if not (the parent
/// was killed before this ran, or the variable was set by hand).
pub fn enter_child() -> Result<(), String> {
    let Some(v) = std::env::var_os(CHILD_ENV) else {
        return Ok(());
    };
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and reads no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
    }
    // SAFETY: getrlimit(2) / setrlimit(2) use the struct only during the call; only the
    // soft limit is lowered, to 0 (no core file).
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_CORE, &mut lim) == 0 {
            lim.rlim_cur = 0;
            libc::setrlimit(libc::RLIMIT_CORE, &lim);
        }
    }
    // SAFETY: getppid(2) has no arguments and cannot fail.
    let ppid = unsafe { libc::getppid() };
    match v.to_str().and_then(|s| s.parse::<libc::pid_t>().ok()) {
        Some(p) if p == ppid => {
            if let Ok(Some(base)) = call_timeout() {
                h5watch::watch(base);
                if let Some(fd) = report_fd() {
                    std::thread::spawn(move || watchdog(fd));
                }
            }
            Ok(())
        }
        _ => Err(format!(
            "{CHILD_ENV} is set, but not by this process's parent (the parent was killed, or \
             the variable was set by hand: it is for deltacells' own use); nothing done"
        )),
    }
}

/// The pipe to report a hang on ([`REPORT_ENV`]), if it is one; marked close-on-exec.
fn report_fd() -> Option<libc::c_int> {
    let fd = std::env::var(REPORT_ENV)
        .ok()?
        .parse::<libc::c_int>()
        .ok()?;
    // SAFETY: fstat(2) fills the local struct; fcntl(2) sets a flag on a descriptor this
    // process inherited for this purpose (checked to be a pipe first).
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if fd < 3 || libc::fstat(fd, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
            return None;
        }
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    Some(fd)
}

/// The child's watchdog (a thread of its own): every [`TICK`], looks at the libhdf5 call in
/// progress; once one call has run longer than its budget, writes `OBJECT: libhdf5 did not
/// return within N s` to `fd` and ends the process with [`STATUS_HUNG`]. Prints nothing.
/// A tick counts at most 4 ticks of time, so time the process spent stopped is not counted.
fn watchdog(fd: libc::c_int) {
    let (mut seq, mut spent, mut last) = (0u64, Duration::ZERO, Instant::now());
    loop {
        std::thread::sleep(TICK);
        let now = Instant::now();
        let step = (now - last).min(4 * TICK);
        last = now;
        let Some(call) = h5watch::current() else {
            seq = 0;
            continue;
        };
        if call.seq != seq {
            (seq, spent) = (call.seq, Duration::ZERO);
            continue;
        }
        spent += step;
        if spent > call.budget {
            let mut line = format!(
                "{}: libhdf5 did not return within {} s",
                call.what,
                seconds(call.budget)
            )
            .into_bytes();
            line.truncate(2048);
            // SAFETY: write(2) from a live buffer to our report pipe (at most 2 KB, less
            // than PIPE_BUF: written whole), then _exit(2), which ends the process at once:
            // the main thread is inside libhdf5 and never returns.
            unsafe {
                libc::write(fd, line.as_ptr().cast(), line.len());
                libc::_exit(STATUS_HUNG);
            }
        }
    }
}

/// In the child, with `DELTACELLS_HDF5_CALL_STATS` set: prints the slowest libhdf5 call and
/// its budget to stderr (a measuring aid for the budgets, docs/reliability.md §1).
pub fn print_call_stats() {
    if std::env::var_os(CHILD_ENV).is_none()
        || std::env::var_os("DELTACELLS_HDF5_CALL_STATS").is_none()
    {
        return;
    }
    if let (Some(slow), Some(tight)) = h5watch::slowest() {
        let show = |t: &h5watch::Timed| {
            format!(
                "{}: {:.3} s of its budget of {} s ({:.0}x)",
                t.what,
                t.elapsed.as_secs_f64(),
                seconds(t.budget),
                t.margin()
            )
        };
        eprintln!(
            "deltacells: slowest libhdf5 call: {}; smallest margin: {}",
            show(&slow),
            show(&tight)
        );
    }
}

/// The child's process id, for the signal handler (0 until it runs).
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal that arrived before the child's id was known (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);

/// The signals a user or a batch system ends a command with; forwarded to the child.
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Signals by which libhdf5 (or any code in the child) crashes.
const CRASHES: [(libc::c_int, &str); 5] = [
    (libc::SIGSEGV, "SIGSEGV, segmentation fault"),
    (libc::SIGBUS, "SIGBUS, bus error"),
    (libc::SIGABRT, "SIGABRT, abort"),
    (libc::SIGFPE, "SIGFPE, arithmetic exception"),
    (libc::SIGILL, "SIGILL, illegal instruction"),
];

extern "C" fn forward(sig: libc::c_int) {
    // Recorded first: if the child's id is not known yet, the parent forwards it once it is.
    PENDING.store(sig, Ordering::SeqCst);
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe; pid is our child, not yet reaped (the
        // handlers are reset before it is waited for).
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Installs `forward` for the forwarded signals that are not ignored (a signal the parent
/// was started ignoring, e.g. SIGINT of a background job, stays ignored: the child inherits
/// that across exec). Returns the previous actions, for [`restore_handlers`].
fn install_forwarding() -> Vec<(libc::c_int, libc::sigaction)> {
    let mut old = Vec::new();
    for sig in FORWARDED {
        // SAFETY: sigaction(2) with a null new action only reads the current one into `prev`.
        let prev = unsafe {
            let mut prev: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut prev) != 0 {
                continue;
            }
            prev
        };
        if prev.sa_sigaction == libc::SIG_IGN {
            continue;
        }
        // SAFETY: a zeroed sigaction with an empty mask is valid; `forward` only touches
        // atomics and calls kill(2), both async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
        old.push((sig, prev));
    }
    old
}

/// Puts back the actions [`install_forwarding`] replaced.
fn restore_handlers(old: &[(libc::c_int, libc::sigaction)]) {
    for (sig, prev) in old {
        // SAFETY: `prev` is an action sigaction(2) itself returned.
        unsafe {
            libc::sigaction(*sig, prev, std::ptr::null_mut());
        }
    }
}

/// The (device, inode) of whatever is at `path`, to tell whether the child published.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Cleans up after the child `pid` crashed: removes the hidden temporaries it left beside
/// `output` (`.NAME.tmp-<pid>-<16 hex digits>`: its dataset writer's directory, or a
/// replaced dataset moved aside), and nothing else. One exception: if `output` is gone and
/// one of them is the previous output (`before`: its device and inode, which a rename keeps),
/// the child crashed between moving it aside and renaming the new dataset in (the publish
/// of a file system that cannot swap, `storage::fs::publish_dir`): it is put back instead.
/// Returns how many entries were removed.
fn clean_up_child(output: &Path, pid: u32, before: Option<(u64, u64)>) -> usize {
    let Some(name) = output.file_name().and_then(|n| n.to_str()) else {
        return 0;
    };
    let parent = fs::parent_of(output);
    let prefix = format!(".{name}.tmp-{pid}-");
    let Ok(entries) = std::fs::read_dir(&parent) else {
        return 0;
    };
    let ours: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && fs::is_temp_name(p))
        })
        .collect();
    let mut removed = 0;
    for path in ours {
        let previous = before.is_some() && identity(&path) == before;
        if previous && !fs::exists(output) && std::fs::rename(&path, output).is_ok() {
            continue;
        }
        let r = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        removed += usize::from(r.is_ok());
    }
    removed
}

/// Runs this command line in a child process (see the module doc) and returns its status.
pub fn run_in_child(plan: &Plan) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(_) => PathBuf::from("/proc/self/exe"),
    };
    if let Err(m) = call_timeout() {
        eprintln!("deltacells: error: {m}");
        return ExitCode::from(2);
    }
    let before = plan.output.as_deref().map(|o| identity(Path::new(o)));
    let (report, report_w) = match report_pipe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("deltacells: error: cannot create a pipe for the child process: {e}");
            return ExitCode::from(4);
        }
    };
    let saved = install_forwarding();
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let spawned = Command::new(&exe)
        .args(&args)
        .env(CHILD_ENV, std::process::id().to_string())
        .env(REPORT_ENV, report_w.as_raw_fd().to_string())
        .spawn();
    drop(report_w);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            restore_handlers(&saved);
            eprintln!(
                "deltacells: error: {}: cannot start the process that reads the HDF5 input: {e}",
                exe.display()
            );
            return ExitCode::from(4);
        }
    };
    let pid = child.id();
    CHILD.store(pid as i32, Ordering::SeqCst);
    let early = PENDING.swap(0, Ordering::SeqCst);
    if early != 0 {
        // SAFETY: kill(2) of our own child, not yet reaped.
        unsafe {
            libc::kill(pid as libc::pid_t, early);
        }
    }
    let status = child.wait();
    CHILD.store(0, Ordering::SeqCst);
    restore_handlers(&saved);
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            eprintln!("deltacells: error: waiting for the process reading the HDF5 input: {e}");
            return ExitCode::from(5);
        }
    };
    if let Some(code) = status.code() {
        if code == STATUS_HUNG {
            if let Some(what) = read_report(report) {
                let head = format!(
                    "{}: {what}: an endless loop of libhdf5 on this malformed HDF5 file \
                     (the limit of one call: {CALL_TIMEOUT_ENV})",
                    plan.input
                );
                eprintln!(
                    "deltacells: error: {}",
                    failure_message(plan, pid, head, before)
                );
                return ExitCode::from(STATUS_BAD_DATA);
            }
        }
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    let sig = status.signal().unwrap_or(0);
    match CRASHES.iter().find(|(s, _)| *s == sig) {
        Some((_, name)) => {
            let head = format!(
                "{}: libhdf5 crashed reading this malformed HDF5 file ({name})",
                plan.input
            );
            eprintln!(
                "deltacells: error: {}",
                failure_message(plan, pid, head, before)
            );
            ExitCode::from(STATUS_BAD_DATA)
        }
        None => {
            // Ended from outside (SIGINT, SIGTERM, SIGKILL, ...): its temporary would only
            // wait for the next write to the target to remove it; removed now.
            if let (Some(out), Some(before)) = (&plan.output, before) {
                clean_up_child(Path::new(out), pid, before);
            }
            end_like(sig)
        }
    }
}

/// The pipe the child's watchdog reports on: (read end, write end), the write end to be
/// inherited by the child (not close-on-exec; the parent has no other thread that could
/// start a process meanwhile) and closed here right after the spawn.
fn report_pipe() -> std::io::Result<(std::io::PipeReader, std::io::PipeWriter)> {
    let (r, w) = std::io::pipe()?;
    // SAFETY: fcntl(2) clears the close-on-exec flag of a descriptor we own.
    if unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((r, w))
}

/// What the child's watchdog reported (after the child ended, so the pipe is at its end).
fn read_report(mut r: std::io::PipeReader) -> Option<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    r.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// The error line of a crash or hang of the child `pid` (`head`: what happened), after
/// removing what the child left.
fn failure_message(
    plan: &Plan,
    pid: u32,
    head: String,
    before: Option<Option<(u64, u64)>>,
) -> String {
    match (&plan.output, before) {
        (Some(out), Some(before)) => {
            clean_up_child(Path::new(out), pid, before);
            let after = identity(Path::new(out));
            if after.is_some() && after != before {
                format!(
                    "{head}; this came after {out} was published complete (check it \
                     with deltacells verify)"
                )
            } else {
                format!("{head}; nothing was written to {out}")
            }
        }
        _ => format!(
            "{head}; {} was not compared with it (nothing was written)",
            plan.compared.as_deref().unwrap_or("the dataset")
        ),
    }
}

/// Ends this process with `sig` (its default action), as the child ended; a signal whose
/// default action does not end a process gives status 128 + sig.
fn end_like(sig: libc::c_int) -> ExitCode {
    if sig > 0 {
        // SAFETY: restoring the default action and raising a signal at ourselves; no memory
        // of ours is involved.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    ExitCode::from((128 + sig.clamp(0, 127)) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "deltacells-isolate-{tag}-{}-{:x}",
            std::process::id(),
            fs::random_u64()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The child's temporaries go, a live process's and a user's files stay; a previous
    /// output the child had moved aside (the publish's fallback without a swap) comes back.
    #[test]
    fn clean_up_removes_only_the_childs_temporaries_and_restores_a_moved_output() {
        let d = scratch("clean");
        let out = d.join("out.dc");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("manifest.json"), b"old").unwrap();
        let before = identity(&out);
        let pid = 4_000_000_001u32; // no such process: only the name matters here
        let aside = d.join(fs::temp_name("out.dc", pid, 1));
        let new_tree = d.join(fs::temp_name("out.dc", pid, 2));
        let other = d.join(fs::temp_name("out.dc", 1, 3));
        let user = d.join(".out.dc.tmp-notes");
        std::fs::rename(&out, &aside).unwrap();
        std::fs::create_dir(&new_tree).unwrap();
        std::fs::write(new_tree.join("manifest.json"), b"new").unwrap();
        std::fs::create_dir(&other).unwrap();
        std::fs::write(&user, b"mine").unwrap();
        assert_eq!(clean_up_child(&out, pid, before), 1);
        assert_eq!(std::fs::read(out.join("manifest.json")).unwrap(), b"old");
        assert!(!fs::exists(&aside) && !fs::exists(&new_tree));
        assert!(fs::exists(&other) && fs::exists(&user));
        // Without a previous output, everything of the child's goes.
        std::fs::remove_dir_all(&out).unwrap();
        std::fs::create_dir(&aside).unwrap();
        assert_eq!(clean_up_child(&out, pid, None), 1);
        assert!(!fs::exists(&aside) && !fs::exists(&out) && fs::exists(&other));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
