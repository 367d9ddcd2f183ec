//! Progress of long work: the library reports to an observer (stages, counts that reach the
//! total, cancellation leaving nothing behind) and prints nothing; the `deltacells` tool
//! draws nothing when stderr is not a terminal and prints nothing at all with --quiet;
//! every --help has examples.
#![cfg(feature = "cli")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use deltacells::chromdata::{fofct, WriterOptions};
use deltacells::convert::{self as conv, ConvertOptions};
use deltacells::dataset::Dataset;
use deltacells::progress::{Progress, Silent, Stage, Unit};
use deltacells::ErrorKind;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn mouse() -> PathBuf {
    root().join("tests/data/scrna/mouse-10k-cells-1k-genes")
}

fn table() -> PathBuf {
    root().join("tests/data/chromatin/synthetic_traces.fofct.csv")
}

/// A test's directory, removed when the test ends, passed or failed (a failed assertion
/// unwinds through the drop; only a killed run leaves it).
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("dc-cli-progress-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

fn deltacells(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_deltacells"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Records every report.
#[derive(Default)]
struct Recorder(Mutex<Vec<Progress>>);

impl deltacells::progress::Observer for Recorder {
    fn progress(&self, p: Progress) -> bool {
        self.0.lock().unwrap().push(p);
        true
    }
}

fn small_options() -> ConvertOptions {
    let mut o = ConvertOptions::default();
    o.writer.tile_size = 1000;
    o
}

#[test]
fn convert_and_verify_report_every_block_up_to_the_total() {
    let dir = scratch("convert");
    let out = dir.join("m.dc");
    let rec = Recorder::default();
    let mut src = conv::open_source(&mouse()).unwrap();
    let s = conv::convert(src.as_mut(), &out, &small_options(), &rec).unwrap();
    let seen = rec.0.into_inner().unwrap();
    assert!(seen
        .iter()
        .all(|p| p.stage == Stage::Read && p.unit == Unit::Cells && p.total == Some(s.n_cells)));
    let done: Vec<u64> = seen.iter().map(|p| p.done).collect();
    assert_eq!(done, (0..=10).map(|k| k * 1000).collect::<Vec<_>>());

    let rec = Recorder::default();
    let rep = conv::verify::verify_dataset(&out, 2, &rec);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    let mut tiles: Vec<u64> = rec.0.into_inner().unwrap().iter().map(|p| p.done).collect();
    tiles.sort_unstable(); // pool threads report in any order
    assert_eq!(tiles, (0..=10).collect::<Vec<u64>>());

    let rec = Recorder::default();
    let ds = Dataset::open(&out).unwrap();
    let mut src = conv::open_source(&mouse()).unwrap();
    conv::verify::compare_with_source(&ds, src.as_mut(), &rec).unwrap();
    let seen = rec.0.into_inner().unwrap();
    assert!(seen.iter().all(|p| p.stage == Stage::Compare));
    assert_eq!(seen.last().unwrap().done, 10_000);
}

#[test]
fn a_cancel_stops_the_work_and_leaves_nothing() {
    let dir = scratch("cancel");
    let out = dir.join("m.dc");
    let mut src = conv::open_source(&mouse()).unwrap();
    let stop_at_half = |p: Progress| p.done < 5000;
    let e = conv::convert(src.as_mut(), &out, &small_options(), &stop_at_half).unwrap_err();
    assert_eq!(e.kind, ErrorKind::State);
    assert!(e.message.contains("cancelled"), "{}", e.message);
    assert!(
        !out.exists(),
        "a cancelled conversion left {}",
        out.display()
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "temporary files left"
    );

    let store = dir.join("t.cdz");
    let stop_at_finish = |p: Progress| p.stage != Stage::Finish;
    let e = fofct::import_observed(table(), &store, WriterOptions::default(), &stop_at_finish)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::State);
    assert!(!store.exists());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "temporary files left"
    );
}

#[test]
fn import_reports_bytes_then_the_finish() {
    let dir = scratch("import");
    let rec = Recorder::default();
    let n =
        fofct::import_observed(table(), dir.join("t.cdz"), WriterOptions::default(), &rec).unwrap();
    let seen = rec.0.into_inner().unwrap();
    let size = std::fs::metadata(table()).unwrap().len();
    let reads: Vec<&Progress> = seen.iter().filter(|p| p.stage == Stage::Read).collect();
    assert!(reads
        .iter()
        .all(|p| p.unit == Unit::Bytes && p.total == Some(size)));
    assert_eq!(reads.last().unwrap().done, size);
    let fin: Vec<&Progress> = seen.iter().filter(|p| p.stage == Stage::Finish).collect();
    assert_eq!(fin.len(), 2);
    assert_eq!((fin[0].done, fin[0].total), (0, None));
    assert_eq!((fin[1].done, fin[1].total), (n, Some(n)));
    assert_eq!(seen.last(), Some(fin[1])); // the finish comes last
    fofct::import_observed(
        table(),
        dir.join("u.cdz"),
        WriterOptions::default(),
        &Silent,
    )
    .unwrap();
}

fn run_quiet_and_not(args: &[&str]) {
    // Not a terminal (a pipe): no progress drawn; the summary on stdout only.
    let (ok, out, err) = deltacells(args);
    assert!(ok, "{args:?}: {err}");
    assert!(err.is_empty(), "{args:?} wrote to stderr: {err:?}");
    assert!(!out.is_empty());
    // --quiet: nothing at all.
    let mut q: Vec<&str> = args.to_vec();
    q.push("--quiet");
    let (ok, out, err) = deltacells(&q);
    assert!(ok, "{q:?}: {err}");
    assert!(
        out.is_empty() && err.is_empty(),
        "{q:?} printed {out:?} {err:?}"
    );
}

#[test]
fn the_tool_is_silent_off_a_terminal_and_with_quiet() {
    let dir = scratch("quiet");
    let ds = dir.join("m.dc");
    let (d, m, t) = (
        ds.to_str().unwrap(),
        mouse().to_str().unwrap().to_string(),
        table().to_str().unwrap().to_string(),
    );
    run_quiet_and_not(&["convert", &m, d, "--tile-size", "2500", "--overwrite"]);
    run_quiet_and_not(&["verify", d, "--against", &m]);
    let store = dir.join("t.cdz");
    run_quiet_and_not(&[
        "chromdata",
        "import-fofct",
        &t,
        store.to_str().unwrap(),
        "--overwrite",
    ]);
    // -q too; errors still print.
    let (ok, out, err) = deltacells(&["verify", "-q", dir.join("none").to_str().unwrap()]);
    assert!(
        !ok && out.is_empty() && err.contains("deltacells: error"),
        "{err}"
    );
}

#[test]
fn every_help_has_examples() {
    for cmd in [
        vec!["--help"],
        vec!["convert", "--help"],
        vec!["info", "--help"],
        vec!["verify", "--help"],
        vec!["export", "--help"],
        vec!["tile", "--help"],
        vec!["chromdata", "--help"],
        vec!["help", "convert"],
        vec!["tile", "encode", "--help"],
        vec!["chromdata", "get", "-h"],
    ] {
        let (ok, out, _) = deltacells(&cmd);
        assert!(ok, "{cmd:?}");
        let examples = out.split("Examples:").nth(1).unwrap_or("");
        assert!(
            examples
                .lines()
                .filter(|l| l.trim_start().starts_with("deltacells "))
                .count()
                >= 2,
            "{cmd:?}: no examples in\n{out}"
        );
    }
}

/// `--version` names the versions a bug report needs; `--help` lists the exit statuses.
#[test]
fn version_and_exit_statuses() {
    let (ok, out, _) = deltacells(&["--version"]);
    assert!(ok);
    assert_eq!(
        out.trim(),
        format!(
            "deltacells {} (C ABI {}, tile format {})",
            env!("CARGO_PKG_VERSION"),
            deltacells::ffi::DC_ABI_VERSION,
            deltacells::tile::FORMAT_VERSION
        )
    );
    let (_, help, _) = deltacells(&["--help"]);
    for status in [
        "1  bad data",
        "2  usage",
        "3  not found",
        "4  I/O",
        "5  internal",
    ] {
        assert!(help.contains(status), "{status} missing from\n{help}");
    }
}

/// Runs `deltacells ARGS REDIRECT` with its standard streams on a pseudo-terminal (through
/// util-linux `script`, in Debian's essential set) and returns what the terminal showed.
fn on_a_terminal(args: &[&str], redirect: &str) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut cmd = quote(env!("CARGO_BIN_EXE_deltacells"));
    for a in args {
        cmd.push(' ');
        cmd.push_str(&quote(a));
    }
    cmd.push(' ');
    cmd.push_str(redirect);
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux) runs");
    assert!(out.status.success(), "{cmd}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// On a terminal, long work draws its progress on standard error only (standard output
/// holds the summary alone, so `deltacells convert ... > log` stays clean), and nothing
/// with --quiet.
#[test]
fn progress_is_drawn_on_a_terminal_stderr_only() {
    let dir = scratch("tty");
    let ds = dir.join("m.dc");
    let (d, m) = (ds.to_str().unwrap(), mouse().to_str().unwrap().to_string());
    let convert = ["convert", &m, d, "--tile-size", "1000", "--overwrite"];
    let shown = on_a_terminal(&convert, "> /dev/null");
    assert!(
        shown.contains(&format!("reading {d}")) && shown.contains("/10,000 cells"),
        "no progress on stderr: {shown:?}"
    );
    assert!(
        !shown.contains("nonzeros"),
        "the summary went to stderr: {shown:?}"
    );
    let shown = on_a_terminal(&convert, "2> /dev/null");
    assert!(shown.contains("10000 cells x 1000 genes"), "{shown:?}");
    assert!(!shown.contains("reading"), "progress on stdout: {shown:?}");
    let mut quiet = convert.to_vec();
    quiet.push("--quiet");
    assert_eq!(on_a_terminal(&quiet, ""), "");

    let store = dir.join("t.cdz");
    let (t, s) = (
        table().to_str().unwrap().to_string(),
        store.to_str().unwrap(),
    );
    let import = ["chromdata", "import-fofct", &t, s, "--overwrite"];
    // (a short import may be past its reading stage by the first draw: any stage counts.
    // The whole import takes ~0.1 s, and about one run in six showed nothing at all on the
    // pseudo-terminal (1 of 6, 1 of 8 under load; the longer convert above never): it gets
    // three tries, and a bar drawn in none of them fails.)
    let mut shown = String::new();
    for _ in 0..3 {
        shown = on_a_terminal(&import, "> /dev/null");
        if !shown.is_empty() {
            break;
        }
    }
    assert!(shown.contains(&format!("ing {s}")), "{shown:?}");
    assert_eq!(
        on_a_terminal(
            &["chromdata", "import-fofct", &t, s, "--overwrite", "-q"],
            ""
        ),
        ""
    );
}

/// `--progress` off a terminal (a batch job's log): plain lines on stderr, one when a stage
/// begins and one when it reaches its total; stdout unchanged; contradicting --quiet is a
/// usage error.
#[test]
fn progress_lines_off_a_terminal_when_asked() {
    let dir = scratch("lines");
    let ds = dir.join("m.dc");
    let (d, m) = (ds.to_str().unwrap(), mouse().to_str().unwrap().to_string());
    let (ok, out, err) = deltacells(&["convert", &m, d, "--tile-size", "1000", "--progress"]);
    assert!(ok, "{err}");
    assert!(out.contains("10000 cells x 1000 genes") && !out.contains("deltacells: "));
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.len() >= 2, "{err}");
    assert!(lines[0].starts_with(&format!("deltacells: reading {d}: 0/10000 cells (0%)")));
    assert!(lines[lines.len() - 1].starts_with(&format!(
        "deltacells: reading {d}: 10000/10000 cells (100%)"
    )));
    let (ok, _, err) = deltacells(&["verify", d, "--against", &m, "--progress"]);
    assert!(ok, "{err}");
    for want in [": 10/10 tiles (100%)", ": 10000/10000 cells (100%)"] {
        assert!(err.contains(want), "{want} missing from {err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_deltacells"))
        .args(["info", d, "--progress", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `chromdata rewrite` shows its progress as import and convert do: with --progress off a
/// terminal, plain lines on stderr (reading the spots up to their count, then the finish),
/// the summary alone on stdout; drawn on a terminal's stderr; nothing off a terminal without
/// --progress, nothing at all with --quiet.
#[test]
fn rewrite_reports_progress_like_import() {
    let dir = scratch("rewrite");
    let store = dir.join("t.cdz");
    let (t, s) = (
        table().to_str().unwrap().to_string(),
        store.to_str().unwrap().to_string(),
    );
    let (ok, _, err) = deltacells(&["chromdata", "import-fofct", &t, &s, "-q"]);
    assert!(ok, "{err}");
    // The table's spots: its lines other than the ## header lines.
    let n = std::fs::read_to_string(table())
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    let out22 = dir.join("t22.chromdata.zarr");
    let d = out22.to_str().unwrap();
    let (ok, out, err) = deltacells(&["chromdata", "rewrite", &s, d, "--progress"]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with(&format!("{d}: {n} spots from {s}")) && !out.contains("deltacells: "),
        "{out}"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.iter().all(|l| l.starts_with("deltacells: ")), "{err}");
    let at = |prefix: String| {
        lines
            .iter()
            .position(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in\n{err}"))
    };
    assert_eq!(at(format!("deltacells: reading {d}: 0/{n} rows (0%)")), 0);
    let read = at(format!("deltacells: reading {d}: {n}/{n} rows (100%)"));
    let finishing = at(format!("deltacells: finishing {d}, "));
    let finished = at(format!("deltacells: finishing {d}: {n}/{n} rows (100%)"));
    assert!(read < finishing && finished == lines.len() - 1, "{err}");

    let rewrite = ["chromdata", "rewrite", &s, d, "--overwrite"];
    run_quiet_and_not(&rewrite);
    let shown = on_a_terminal(&rewrite, "> /dev/null");
    assert!(shown.contains(&format!("ing {d}")), "{shown:?}");
    assert!(
        !shown.contains("spots from"),
        "the summary went to stderr: {shown:?}"
    );
    let mut quiet = rewrite.to_vec();
    quiet.push("-q");
    assert_eq!(on_a_terminal(&quiet, ""), "");
}
