//! Logging to stderr with `write(2)` from a stack buffer: usable before `main`, inside
//! `dlsym` and in a forked child, because it neither allocates nor takes a lock.

use std::fmt::{self, Write};
use std::sync::atomic::{AtomicU8, Ordering};

/// How much to log (`GREENBOOST_LOG`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    /// Only problems the user must know about (bad settings, refused backends).
    Warn = 0,
    /// Backend choice, fallbacks and the summary at exit.
    Info = 1,
    /// Every placement decision.
    Debug = 2,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Warn as u8);

pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

/// A line being formatted; overlong lines are cut, never reallocated.
struct LineBuffer {
    bytes: [u8; 512],
    len: usize,
}

impl Write for LineBuffer {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.bytes.len() - 1 - self.len;
        let take = s.len().min(room);
        if let (Some(dst), Some(src)) = (self.bytes.get_mut(self.len..self.len + take), s.as_bytes().get(..take)) {
            dst.copy_from_slice(src);
            self.len += take;
        }
        Ok(())
    }
}

/// Writes `greenboost[pid]: <message>\n` to fd 2 in one `write` call, so that lines of
/// concurrent threads do not interleave.
pub fn write_line(args: fmt::Arguments<'_>) {
    let mut line = LineBuffer { bytes: [0; 512], len: 0 };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let _ = write!(line, "greenboost[{pid}]: ");
    let _ = line.write_fmt(args);
    if let Some(slot) = line.bytes.get_mut(line.len) {
        *slot = b'\n';
        line.len += 1;
    }
    // SAFETY: the buffer is valid for `len` bytes.
    unsafe { libc::write(2, line.bytes.as_ptr().cast(), line.len) };
}

macro_rules! log_at {
    ($level:expr, $($arg:tt)*) => {
        if $crate::sys::log::enabled($level) {
            $crate::sys::log::write_line(format_args!($($arg)*));
        }
    };
}
macro_rules! warn { ($($arg:tt)*) => { log_at!($crate::sys::log::Level::Warn, $($arg)*) }; }
macro_rules! info { ($($arg:tt)*) => { log_at!($crate::sys::log::Level::Info, $($arg)*) }; }
macro_rules! debug { ($($arg:tt)*) => { log_at!($crate::sys::log::Level::Debug, $($arg)*) }; }

/// Bytes shown as MiB with one decimal, for log lines.
pub struct Mib(pub u64);

impl fmt::Display for Mib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenths = self.0.saturating_mul(10) / (1 << 20);
        write!(f, "{}.{} MiB", tenths / 10, tenths % 10)
    }
}
