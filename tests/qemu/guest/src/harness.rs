//! Test runner: each test runs in its own forked process (a crash, a leaked eventfd
//! registration or a T1 report cannot leak into the next test), under a time limit,
//! and fails when the kernel logged a complaint while it ran.
//! Output: exactly one `PASS name`, `FAIL name: reason` or `SKIP name: reason` line per
//! test; diagnostics are indented `  # ...` lines.

use crate::gb::errno;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

pub enum Outcome {
    Pass,
    Skip(String),
}

pub type TestResult = Result<Outcome, String>;

pub struct Test {
    pub name: &'static str,
    pub limit: Duration,
    pub run: fn() -> TestResult,
}

#[derive(Default)]
pub struct Tally {
    pub passed: u32,
    pub failed: u32,
    pub skipped: u32,
}

/// Prints a diagnostic line (not counted by the suite).
pub fn note(msg: &str) {
    println!("  # {msg}");
}

/// Turns a boolean into a test failure with a message.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

/// Asserts that `r` failed with exactly `want`.
pub fn expect_errno<T>(what: &str, r: Result<T, i32>, want: i32) -> Result<(), String> {
    use crate::gb::errname;
    match r {
        Ok(_) => Err(format!("{what}: succeeded, expected {}", errname(want))),
        Err(e) if e == want => Ok(()),
        Err(e) => Err(format!("{what}: got {}, expected {}", errname(e), errname(want))),
    }
}

pub fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2 failed");
    // SAFETY: fresh fds owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Forks a child that gets the write end of a pipe; returns the read end.
pub fn spawn_with_pipe(f: impl FnOnce(std::fs::File) -> i32) -> (Child, std::fs::File) {
    let (r, w) = pipe();
    let (rfd, wfd) = (r.as_raw_fd(), w.as_raw_fd());
    let child = Child::spawn(move || {
        // SAFETY: in the child, closing its copy of the read end and taking ownership of
        // its copy of the write end (the parent's objects are never dropped here).
        unsafe {
            libc::close(rfd);
            f(std::fs::File::from_raw_fd(wfd))
        }
    });
    drop(w);
    (child, std::fs::File::from(r))
}

/// A forked child process, killed (SIGKILL) and reaped on drop if still running.
pub struct Child {
    pub pid: libc::pid_t,
    reaped: bool,
}

impl Child {
    /// Forks; the child runs `f` and exits with its return value (never returns).
    pub fn spawn(f: impl FnOnce() -> i32) -> Child {
        std::io::stdout().flush().ok();
        // SAFETY: fork in a process whose other threads (if any) hold no locks the child
        // needs: the runner forks from its single main thread.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed: {}", errno());
        if pid == 0 {
            let code = f();
            std::io::stdout().flush().ok();
            // SAFETY: _exit skips the parent's atexit handlers and destructors, which
            // belong to the parent.
            unsafe { libc::_exit(code) };
        }
        Child { pid, reaped: false }
    }

    /// Waits for the child; returns the raw wait status.
    pub fn wait(&mut self) -> i32 {
        let mut status = 0;
        // SAFETY: status is a valid int.
        while unsafe { libc::waitpid(self.pid, &mut status, 0) } < 0 {
            if errno() != libc::EINTR {
                break;
            }
        }
        self.reaped = true;
        status
    }

    /// Waits up to `limit`; None on timeout.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<i32> {
        let t0 = Instant::now();
        loop {
            let mut status = 0;
            // SAFETY: status is a valid int.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == self.pid {
                self.reaped = true;
                return Some(status);
            }
            if t0.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn kill(&self, sig: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid, sig) };
    }

    /// Waits and turns a non-zero exit into an error message.
    pub fn expect_success(&mut self, what: &str) -> Result<(), String> {
        let st = self.wait();
        describe_status(st).map_or(Ok(()), |d| Err(format!("{what}: {d}")))
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill(libc::SIGKILL);
            self.wait();
        }
    }
}

/// None for a clean exit 0, else what went wrong.
pub fn describe_status(st: i32) -> Option<String> {
    if libc::WIFEXITED(st) {
        match libc::WEXITSTATUS(st) {
            0 => None,
            c => Some(format!("exited with status {c}")),
        }
    } else if libc::WIFSIGNALED(st) {
        Some(format!("killed by signal {}", libc::WTERMSIG(st)))
    } else {
        Some(format!("wait status {st:#x}"))
    }
}

/// Kernel log lines that mean the kernel is unhappy (what the host runner also greps).
const COMPLAINTS: &[&str] = &[
    "BUG:",
    "WARNING:",
    "Oops",
    "Call Trace",
    "general protection",
    "kernel BUG",
    "UBSAN",
    "KASAN",
    "refcount_t:",
    "list_add corruption",
    "list_del corruption",
    "possible circular locking",
    "inconsistent lock state",
    "suspicious RCU usage",
    "bad page state",
    "Bad page",
    "page dumped because",
    "rust_panic",
    "panicked at",
    "Out of memory",
    "oom-kill",
    "Kernel panic",
];

/// Reads the kernel log records that appear after its creation (via /dev/kmsg).
pub struct KmsgWatch {
    fd: Option<std::fs::File>,
}

impl KmsgWatch {
    pub fn start() -> KmsgWatch {
        let fd = crate::gb::open_path("/dev/kmsg", libc::O_RDONLY | libc::O_NONBLOCK).ok().map(|fd| {
            // SAFETY: seeking our own fd to the end of the log.
            unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END) };
            std::fs::File::from(fd)
        });
        KmsgWatch { fd }
    }

    pub fn available(&self) -> bool {
        self.fd.is_some()
    }

    /// The log messages (text only) recorded since `start` or the previous call.
    pub fn new_lines(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let Some(f) = self.fd.as_mut() else { return out };
        let mut buf = vec![0u8; 8192];
        loop {
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let rec = String::from_utf8_lossy(&buf[..n]);
                    // "prio,seq,usec,flags;message\n continuation lines"
                    let msg = rec.split_once(';').map(|x| x.1).unwrap_or(&rec);
                    out.push(msg.lines().next().unwrap_or("").to_string());
                }
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue, // overwritten records
                Err(_) => break,
            }
        }
        out
    }

    /// The module's own messages ("greenboost: ...") among `new_lines`.
    pub fn module_lines(&mut self) -> Vec<String> {
        self.new_lines().into_iter().filter(|l| l.starts_with("greenboost")).collect()
    }

    /// The first complaint logged since the last call, if any.
    pub fn complaint(&mut self) -> Option<String> {
        self.new_lines().into_iter().find(|l| is_complaint(l))
    }
}

pub fn is_complaint(line: &str) -> bool {
    COMPLAINTS.iter().any(|c| line.contains(c))
}

/// Runs the tests, printing one result line each.
pub fn run_tests(tests: &[Test], only: Option<&str>) -> Tally {
    let mut tally = Tally::default();
    for t in tests.iter().filter(|t| only.is_none_or(|o| t.name == o)) {
        let mut watch = KmsgWatch::start();
        let t0 = Instant::now();
        let run = t.run;
        let (mut child, mut r) = spawn_with_pipe(move |mut w| {
            let msg = match run() {
                Ok(Outcome::Pass) => "P".to_string(),
                Ok(Outcome::Skip(why)) => format!("S{why}"),
                Err(why) => format!("F{why}"),
            };
            w.write_all(msg.as_bytes()).ok();
            0
        });
        let status = child.wait_timeout(t.limit);
        let mut msg = String::new();
        r.read_to_string(&mut msg).ok();
        let mut verdict = match status {
            None => Err(format!("did not finish within {:?}", t.limit)),
            Some(st) => match (describe_status(st), msg.chars().next()) {
                (Some(d), _) => Err(format!("test process {d} ({})", msg.get(1..).unwrap_or(""))),
                (None, Some('P')) => Ok(None),
                (None, Some('S')) => Ok(Some(msg[1..].to_string())),
                (None, Some('F')) => Err(msg[1..].to_string()),
                (None, _) => Err("test process exited without a result".into()),
            },
        };
        drop(child);
        // The kernel logs asynchronously (deferred work, watchdog); give it a moment.
        std::thread::sleep(Duration::from_millis(50));
        if let Some(c) = watch.complaint() {
            verdict = Err(format!("kernel complained while it ran: {c}"));
        }
        match verdict {
            Ok(None) => {
                tally.passed += 1;
                println!("PASS {}", t.name);
                note(&format!("{} took {:.1} s", t.name, t0.elapsed().as_secs_f64()));
            }
            Ok(Some(why)) => {
                tally.skipped += 1;
                println!("SKIP {}: {why}", t.name);
            }
            Err(why) => {
                tally.failed += 1;
                println!("FAIL {}: {why}", t.name);
            }
        }
    }
    tally
}
