//! What the `deltacells` tool shows besides its results: `--quiet`, summaries, and the
//! progress display — an [`Observer`] of the library's progress reports drawn with
//! indicatif on standard error, only when standard error is a terminal and `--quiet` was
//! not given; otherwise it draws nothing (and costs next to nothing).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

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
    what: String,
    /// The stage and unit the bar is drawing, to restyle it when they change.
    shown: Mutex<Option<(Stage, Unit, bool)>>,
}

impl Bar {
    /// A bar for `what` (e.g. the output's name); drawn only if `show`.
    pub fn new(what: &str, show: bool) -> Bar {
        // Nothing is drawn before the first report styles the bar (then it ticks, so that a
        // spinner turns and the elapsed time runs while a stage reports nothing).
        let bar = show.then(|| ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()));
        Bar {
            bar,
            what: what.to_string(),
            shown: Mutex::new(None),
        }
    }

    /// Whether progress is drawn: standard error is a terminal and not `quiet`.
    pub fn wanted(quiet: bool) -> bool {
        !quiet && std::io::stderr().is_terminal()
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
        let Some(bar) = &self.bar else { return true };
        let key = (p.stage, p.unit, p.total.is_some());
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        if *shown != Some(key) {
            // Restyled out of sight, so that no half-configured bar is ever drawn.
            bar.set_draw_target(ProgressDrawTarget::hidden());
            if shown.is_none() {
                bar.enable_steady_tick(Duration::from_millis(200));
            }
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
