//! What the `deltacells` tool shows besides its results: `--quiet`, summaries, and the
//! progress display — an [`Observer`] of the library's progress reports, on standard error
//! only: drawn with indicatif when standard error is a terminal; as plain lines (one per
//! stage begun or ended and at most one every [`LINE_INTERVAL`], for a batch job's log)
//! when `--progress` asks for it off a terminal; nothing with `--quiet` or otherwise (and
//! then it costs next to nothing).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use deltacells::progress::{Observer, Progress, Stage, Unit};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// `--quiet`: nothing on standard output or error but errors (no progress, no summaries).
static QUIET: AtomicBool = AtomicBool::new(false);

pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// `--progress`: show progress even when standard error is not a terminal.
static PROGRESS: AtomicBool = AtomicBool::new(false);

pub fn set_progress(progress: bool) {
    PROGRESS.store(progress, Ordering::Relaxed);
}

/// Time between two progress lines of one stage off a terminal.
pub const LINE_INTERVAL: Duration = Duration::from_secs(10);

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    Nothing,
    /// A bar redrawn in place (standard error is a terminal).
    Bar,
    /// Plain lines (`--progress` off a terminal).
    Lines,
}

/// The lines shown so far: the stage they were about and when the last was written.
struct LineLog {
    key: Option<(Stage, Unit, bool)>,
    last: Instant,
    started: Instant,
}

/// A summary line of a command that produces files (convert, export, verify, ...): like
/// `println!` (a closed stdout is not an error), but nothing with `--quiet`.
macro_rules! summary {
    ($($t:tt)*) => {{
        if !$crate::console::quiet() {
            use std::io::Write as _;
            let _ = writeln!(std::io::stdout().lock(), $($t)*);
        }
    }};
}
pub(crate) use summary;

/// A progress bar (or spinner, for stages without a count) labelled `what`.
pub struct Bar {
    bar: Option<ProgressBar>,
    lines: Option<Mutex<LineLog>>,
    what: String,
    /// The stage and unit the bar is drawing, to restyle it when they change.
    shown: Mutex<Option<(Stage, Unit, bool)>>,
}

impl Bar {
    /// A progress display for `what` (e.g. the output's name), shown as `show` says.
    pub fn new(what: &str, show: Show) -> Bar {
        // Nothing is drawn before the first report styles the bar (then it ticks, so that a
        // spinner turns and the elapsed time runs while a stage reports nothing).
        let bar = (show == Show::Bar)
            .then(|| ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()));
        let lines = (show == Show::Lines).then(|| {
            Mutex::new(LineLog {
                key: None,
                last: Instant::now(),
                started: Instant::now(),
            })
        });
        Bar {
            bar,
            lines,
            what: what.to_string(),
            shown: Mutex::new(None),
        }
    }

    /// How progress is shown: nothing with `quiet`; a bar when standard error is a
    /// terminal; lines when `--progress` asked for it; else nothing.
    pub fn wanted(quiet: bool) -> Show {
        if quiet {
            Show::Nothing
        } else if std::io::stderr().is_terminal() {
            Show::Bar
        } else if PROGRESS.load(Ordering::Relaxed) {
            Show::Lines
        } else {
            Show::Nothing
        }
    }

    /// `--progress` off a terminal: a line when a stage begins, when it reaches its total,
    /// and otherwise at most every LINE_INTERVAL.
    fn line(&self, log: &Mutex<LineLog>, p: Progress) {
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        let key = Some((p.stage, p.unit, p.total.is_some()));
        let now = Instant::now();
        let ended = p.total == Some(p.done);
        if log.key == key && !ended && now.duration_since(log.last) < LINE_INTERVAL {
            return;
        }
        if log.key != key {
            log.started = now;
        }
        log.key = key;
        log.last = now;
        let secs = now.duration_since(log.started).as_secs_f64();
        let count = match p.total {
            Some(t) => format!(
                ": {}/{} {} ({:.0}%)",
                p.done,
                t,
                p.unit.name(),
                100.0 * p.done as f64 / t.max(1) as f64
            ),
            None if p.done > 0 => format!(": {} {}", p.done, p.unit.name()),
            None => String::new(),
        };
        let _ = writeln!(
            std::io::stderr().lock(),
            "deltacells: {} {}{count}, {secs:.1}s",
            p.stage.verb(),
            self.what
        );
    }

    fn style(unit: Unit, counted: bool) -> ProgressStyle {
        let template = match (counted, unit) {
            (false, _) => "{spinner} {msg} ({elapsed})",
            (true, Unit::Bytes) => {
                "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)"
            }
            (true, _) => "{msg} [{bar:30}] {human_pos}/{human_len} {prefix} ({rate}, {eta} left)",
        };
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", s.per_sec());
            })
            .progress_chars("=> ")
    }
}

impl Observer for Bar {
    fn progress(&self, p: Progress) -> bool {
        if let Some(log) = &self.lines {
            self.line(log, p);
        }
        let Some(bar) = &self.bar else { return true };
        let key = (p.stage, p.unit, p.total.is_some());
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        if *shown != Some(key) {
            // Restyled out of sight, so that no half-configured bar is ever drawn.
            bar.set_draw_target(ProgressDrawTarget::hidden());
            let first = shown.is_none();
            *shown = Some(key);
            bar.reset();
            bar.set_style(Bar::style(p.unit, p.total.is_some()));
            bar.set_prefix(p.unit.name());
            bar.set_message(format!("{} {}", p.stage.verb(), self.what));
            match p.total {
                Some(t) => bar.set_length(t),
                None => bar.unset_length(),
            }
            bar.set_position(p.done);
            bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(5));
            // Once a ticker runs, only it draws (indicatif's set_position does not), and it
            // draws as it starts: started here, after the first styling, the bar shows at
            // once; started while hidden, work shorter than one interval showed nothing.
            if first {
                bar.enable_steady_tick(Duration::from_millis(200));
            }
        }
        bar.set_position(p.done);
        true
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
