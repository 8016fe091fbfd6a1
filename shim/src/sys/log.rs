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

/// Bytes of one `write` to stderr.
const LINE: usize = 512;

/// A message being formatted into lines of at most `LINE` bytes, never reallocated: one
/// that does not fit goes out in several lines, each after the first marked as a
/// continuation (a `Debug` dump of the configuration runs past 512 bytes).
struct LineBuffer {
    bytes: [u8; LINE],
    len: usize,
    pid: i32,
}

impl LineBuffer {
    fn start(&mut self, continuation: bool) {
        self.len = 0;
        let pid = self.pid;
        let _ =
            if continuation { write!(self, "greenboost[{pid}]: ... ") } else { write!(self, "greenboost[{pid}]: ") };
    }

    /// Writes the line with its newline to fd 2 in one `write` call, so that lines of
    /// concurrent threads do not interleave.
    fn flush(&mut self) {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = b'\n';
            self.len += 1;
        }
        // SAFETY: the buffer is valid for `len` bytes.
        unsafe { libc::write(2, self.bytes.as_ptr().cast(), self.len) };
    }
}

impl Write for LineBuffer {
    fn write_str(&mut self, mut s: &str) -> fmt::Result {
        loop {
            let room = LINE - 1 - self.len;
            // Whole characters only: a line never ends inside one.
            let mut take = s.len().min(room);
            while !s.is_char_boundary(take) {
                take -= 1;
            }
            if let Some(dst) = self.bytes.get_mut(self.len..self.len + take) {
                dst.copy_from_slice(&s.as_bytes()[..take]);
                self.len += take;
            }
            s = &s[take..];
            if s.is_empty() {
                return Ok(());
            }
            self.flush();
            self.start(true);
        }
    }
}

/// Writes `greenboost[pid]: <message>\n` to fd 2, in lines of at most `LINE` bytes.
pub fn write_line(args: fmt::Arguments<'_>) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut line = LineBuffer { bytes: [0; LINE], len: 0, pid };
    line.start(false);
    let _ = line.write_fmt(args);
    line.flush();
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
