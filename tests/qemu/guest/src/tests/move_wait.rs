//! A fault that meets a move (issue 37, finding 6): a move holds the buffer's backing
//! lock across its whole copy, so a process faulting on the buffer meanwhile waits for
//! it; killed, that process must die at once, not once the copy is done.

use crate::gb::*;
use crate::harness::*;
use greenboost_abi::*;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// Large enough that the copy outlasts the kill by far under TCG (the t3 guest's debug
/// kernel copies some tens of MB/s), small enough for its RAM twice over.
const SIZE: u64 = 64 * MIB;

/// The state letter of a process (`R`, `S`, `D`, ...) from /proc/PID/stat.
fn proc_state(pid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// A child reads the buffer through its inherited mapping in a loop while the parent
/// moves the buffer to T3: the move zaps the mappings, the child's next read faults and
/// waits for the move. SIGKILLed then, it must be gone long before the move ends.
pub fn fault_behind_move_killable() -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let buf = dev.alloc(SIZE)?;
    let map = buf.map()?;
    map.fill(0x6b, page_words());
    let addr = map.ptr() as usize;
    let mut reader = Child::spawn(move || loop {
        // SAFETY: the inherited live mapping of the buffer; a fault only blocks.
        unsafe { std::ptr::read_volatile(addr as *const u64) };
    });
    let fd = buf.raw();
    let mover = std::thread::spawn(move || {
        let moved = Dev::open().and_then(|d| d.move_fd(fd, GB_TIER_T3).map_err(|e| format!("move to T3: {}", errname(e))));
        (moved, Instant::now())
    });
    // Blocked in the fault (uninterruptible or killable sleep both show as D).
    let t0 = Instant::now();
    while proc_state(reader.pid) != Some('D') {
        if mover.is_finished() || t0.elapsed() > Duration::from_secs(30) {
            let _ = mover.join();
            return Err(format!("the reader never waited for the move ({} MiB): too short to tell", SIZE / MIB));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let killed = Instant::now();
    reader.kill(libc::SIGKILL);
    reader.wait();
    let dead = Instant::now();
    let (moved, ended) = mover.join().map_err(|_| "the mover thread panicked".to_string())?;
    let moved = moved?;
    ensure(moved.moved == buf.size, || format!("moved {} of {} bytes", moved.moved, buf.size))?;
    let (to_death, move_left) = (dead - killed, ended.saturating_duration_since(killed));
    note(&format!(
        "killed {:.0} ms into the wait: dead after {:.1} ms, the move ended {:.0} ms after the kill",
        (killed - t0).as_secs_f64() * 1e3,
        to_death.as_secs_f64() * 1e3,
        move_left.as_secs_f64() * 1e3
    ));
    ensure(move_left >= Duration::from_millis(300), || {
        format!("the move ended {move_left:?} after the kill: too short to tell whether the kill waited for it")
    })?;
    ensure(dead + Duration::from_millis(100) < ended, || {
        format!("the SIGKILLed reader died {to_death:?} after the kill, only as the move ended ({move_left:?} after the kill): its fault waited for the move uninterruptibly")
    })?;
    map.verify(0x6b, page_words()).map_err(|e| format!("after the move: {e}"))?;
    drop((map, buf));
    dev.settle_to(&base, Duration::from_secs(10))?;
    Ok(Outcome::Pass)
}
