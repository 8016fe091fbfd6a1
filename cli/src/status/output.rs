//! The `status` command: its flags, the three renderings (text, `--json`,
//! `--prometheus`), where they go (stdout, or `--textfile DIR` for node_exporter's
//! textfile collector) and `--watch N`, which repeats them until interrupted.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;

use super::{collect, prometheus, view};
use crate::paths::SystemPaths;
use crate::replace_file;

#[derive(Args)]
pub struct StatusArgs {
    /// Machine-readable output (with --watch: one line of JSON each time).
    #[arg(long, conflicts_with_all = ["prometheus", "textfile"])]
    json: bool,
    /// Prometheus's text exposition format, for a scraper.
    #[arg(long)]
    prometheus: bool,
    /// Write the Prometheus metrics to DIR/greenboost.prom instead of stdout, atomically
    /// (a temporary file in DIR, renamed over it), for node_exporter's textfile collector
    /// (--collector.textfile.directory=DIR).
    #[arg(long, value_name = "DIR")]
    textfile: Option<PathBuf>,
    /// Again every N seconds until interrupted: the text redraws the terminal, --json and
    /// --prometheus print one document each time, --textfile rewrites its file.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    watch: Option<u64>,
}

/// The file node_exporter's textfile collector reads.
pub const TEXTFILE_NAME: &str = "greenboost.prom";

enum Format {
    Text,
    Json,
    Prometheus,
}

pub fn status(args: &StatusArgs) -> Result<ExitCode, String> {
    let paths = SystemPaths::from_env();
    let format = match (args.json, args.prometheus || args.textfile.is_some()) {
        (true, _) => Format::Json,
        (false, true) => Format::Prometheus,
        (false, false) => Format::Text,
    };
    let textfile = args.textfile.as_deref();
    let Some(seconds) = args.watch else {
        show(&paths, &format, textfile, false)?;
        return Ok(ExitCode::SUCCESS);
    };
    stop_on_interrupt();
    let period = Duration::from_secs(seconds);
    while !STOP.load(Ordering::Relaxed) {
        let started = Instant::now();
        show(&paths, &format, textfile, true)?;
        while !STOP.load(Ordering::Relaxed) && started.elapsed() < period {
            std::thread::sleep(Duration::from_millis(100).min(period.saturating_sub(started.elapsed())));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One collection, rendered where it goes.
fn show(paths: &SystemPaths, format: &Format, textfile: Option<&Path>, watching: bool) -> Result<(), String> {
    let status = collect(paths);
    let mut redraw = false;
    let rendered = match format {
        Format::Text => {
            redraw = watching && std::io::stdout().is_terminal();
            view::text(&status.describe(), super::describe::TEXT_ORDER)
        }
        // Watched: one document a line (JSON Lines).
        Format::Json if watching => format!("{}\n", status.to_json()),
        Format::Json => format!("{:#}\n", status.to_json()),
        Format::Prometheus => prometheus::render(&status),
    };
    if let Some(dir) = textfile {
        return write_textfile(dir, &rendered);
    }
    let mut stdout = std::io::stdout().lock();
    let clear = if redraw { "\x1b[H\x1b[2J" } else { "" };
    // A closed pipe ends the command quietly (SIGPIPE is the default again, see main).
    let _ = write!(stdout, "{clear}{rendered}").and_then(|()| stdout.flush());
    Ok(())
}

/// `DIR/greenboost.prom`, replaced whole, readable by the collector's user.
fn write_textfile(dir: &Path, text: &str) -> Result<(), String> {
    let target = dir.join(TEXTFILE_NAME);
    replace_file::replace(&target, text, 0o644).map_err(|e| format!("cannot write {}: {e}", target.display()))
}

/// Set by SIGINT or SIGTERM while watching: the loop ends after the current round, so
/// an interrupted `--textfile` never leaves its temporary file behind.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    // A second interrupt ends at once (a round stuck in a driver call).
    if STOP.swap(true, Ordering::Relaxed) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
}

fn stop_on_interrupt() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only touches an atomic and calls _exit, both
        // async-signal-safe.
        unsafe { libc::signal(signal, on_interrupt as *const () as libc::sighandler_t) };
    }
}
