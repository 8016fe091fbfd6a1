//! Per-user limits beyond T2 bytes (issue 37, findings 3 and 5): the number of live
//! buffers and the T3 bytes of one user, and a T3 buffer's pages pinned for an
//! importer, which are charged as T2 pages are (memlock, pool cap, per-user cap, RAM
//! reserve) and go back to the evictable LRU once unpinned.

use crate::gb::*;
use crate::harness::*;
use crate::tests::importer::{check, importer, HOLD, RELEASE};
use crate::tests::pressure::ParamGuard;
use crate::tests::t3::read_line_timeout;
use crate::tests::users::{become_user, DeviceGroup};
use greenboost_abi::*;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// Runs `body` in a child that has become uid 1000 (with `memlock` as its
/// RLIMIT_MEMLOCK, `None`: unlimited) after `before` ran as root; returns the child
/// (holding whatever `body` kept, until killed) and the one line `body` answered.
fn as_user_1000(
    memlock: Option<u64>,
    before: impl FnOnce() -> Option<std::os::fd::OwnedFd>,
    body: impl FnOnce(Option<std::os::fd::OwnedFd>) -> Result<String, String>,
) -> Result<(Child, String), String> {
    let (child, mut out) = spawn_with_pipe(move |mut w| {
        let kept = before();
        let line = match become_user(1000, memlock) {
            Err(e) => format!("could not become uid 1000: {}", errname(e)),
            Ok(()) => body(kept).unwrap_or_else(|e| format!("error: {e}")),
        };
        let _ = std::io::Write::write_all(&mut w, format!("{line}\n").as_bytes());
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    });
    let line = read_line_timeout(&mut out, Duration::from_secs(120))?;
    Ok((child, line.trim().to_string()))
}

fn answer(r: Result<(), i32>) -> String {
    r.map_or_else(errname, |()| "success".into())
}

/// A user's live buffers are limited (`uid_buffers`): one-page buffers cost a few
/// kernel objects each (files, inodes) and no byte cap sees them, so one unprivileged
/// user made them until kernel memory and the file table (ENFILE for root too) ran out.
pub fn uid_buffer_limit() -> TestResult {
    const LIMIT: usize = 48;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let _limit = ParamGuard::set("uid_buffers", &LIMIT.to_string())?;
    let _group = DeviceGroup::grant()?;
    let (mut child, line) = as_user_1000(None, || None, |_| {
        let dev = Dev::open()?;
        let mut bufs = Vec::new();
        let refused = loop {
            match dev.try_alloc(page_size()) {
                Ok(b) => bufs.push(b),
                Err(e) => break e,
            }
            if bufs.len() > 2 * LIMIT {
                break 0;
            }
        };
        let made = bufs.len();
        // One closed: room for one again.
        bufs.pop();
        let again = dev.try_alloc(page_size()).map(|b| bufs.push(b));
        std::mem::forget(bufs);
        Ok(format!("{made} {} {}", errname(refused), answer(again)))
    })?;
    ensure(line == format!("{LIMIT} ENOMEM success"), || {
        format!("uid 1000 under uid_buffers={LIMIT}: made, refused, after closing one: '{line}', expected '{LIMIT} ENOMEM success'")
    })?;
    // Another user's count is its own.
    let mine = dev.alloc(page_size()).map_err(|e| format!("uid 0 while uid 1000 is at its buffer limit: {e}"))?;
    drop(mine);
    child.kill(libc::SIGKILL);
    child.wait();
    dev.settle_to(&base, Duration::from_secs(10))?;
    Ok(Outcome::Pass)
}

/// A user's T3 bytes are limited (`uid_t3_cap_mb`, by default half of what T3 may
/// hold): T3 ALLOCs and moves to T3 past it are ENOMEM, other users unaffected.
pub fn uid_t3_cap() -> TestResult {
    let dev = Dev::open()?;
    let limit = dev.t3()?.t3_cap;
    ensure(limit >= 64 * MIB, || format!("T3 may hold only {limit} bytes: no swap?"))?;
    let _group = DeviceGroup::grant()?;
    // The default: half of the T3 limit per user.
    let half = limit / 2 / page_size() * page_size();
    let (mut child, line) = as_user_1000(None, || None, move |_| {
        let dev = Dev::open()?;
        let over = dev.try_alloc_t3(half + 4 * MIB).map(|_| ());
        let within = dev.try_alloc_t3(half - 4 * MIB).map(std::mem::forget);
        Ok(format!("{} {}", answer(over), answer(within)))
    })?;
    ensure(line == "ENOMEM success", || {
        format!("uid 1000, T3 ALLOCs of half the T3 limit ({half} bytes) + and - 4 MiB: '{line}', expected 'ENOMEM success'")
    })?;
    child.kill(libc::SIGKILL);
    child.wait();
    // An explicit cap, for ALLOCs and moves alike.
    let _cap = ParamGuard::set("uid_t3_cap_mb", "16")?;
    let (mut child, line) = as_user_1000(None, || None, |_| {
        let dev = Dev::open()?;
        let first = dev.try_alloc_t3(12 * MIB).map(std::mem::forget);
        let second = dev.try_alloc_t3(8 * MIB).map(|_| ());
        let t2 = dev.alloc(8 * MIB)?;
        let moved = dev.move_fd(t2.raw(), GB_TIER_T3).map(|_| ());
        std::mem::forget(t2);
        Ok(format!("{} {} {}", answer(first), answer(second), answer(moved)))
    })?;
    ensure(line == "success ENOMEM ENOMEM", || {
        format!("uid 1000 under uid_t3_cap_mb=16: T3 12 MiB, T3 8 MiB more, a move of 8 MiB to T3: '{line}', expected 'success ENOMEM ENOMEM'")
    })?;
    let mine = dev.try_alloc_t3(8 * MIB).map_err(|e| format!("uid 0 T3 ALLOC beside uid 1000 at its T3 cap: {}", errname(e)))?;
    drop(mine);
    child.kill(libc::SIGKILL);
    child.wait();
    Ok(Outcome::Pass)
}

/// Waits up to 5 s for `/proc/meminfo`'s Unevictable to satisfy `ok`; returns it.
fn unevictable_until(ok: impl Fn(u64) -> bool) -> u64 {
    let t0 = Instant::now();
    loop {
        let now = meminfo("Unevictable").unwrap_or(0);
        if ok(now) || t0.elapsed() > Duration::from_secs(5) {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A T3 buffer's pages pinned for an importer are charged as T2 pages are: refused
/// past the caller's RLIMIT_MEMLOCK (a user whose memlock refuses a T2 ALLOC pinned
/// its T3 buffer through an importer) and past the pool cap, counted in T2 while
/// pinned; and once unpinned, the pages reclaim parked on the unevictable list while
/// they were pinned go back to the evictable LRU.
pub fn t3_pins_within_limits() -> TestResult {
    const SIZE: u64 = 16 * MIB;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let _group = DeviceGroup::grant()?;
    // The importer device is root's: opened before the child drops to uid 1000, which
    // then drives it (the pin is the caller's, as an ioctl of a real driver would be).
    let (mut child, line) = as_user_1000(
        Some(8 * MIB),
        || importer().ok(),
        |imp| {
            let imp = imp.ok_or("no importer")?;
            let dev = Dev::open()?;
            let t2 = dev.try_alloc(SIZE).map(|_| ());
            let t3 = dev.try_alloc_t3(SIZE).map_err(|e| format!("T3 ALLOC: {}", errname(e)))?;
            t3.map()?.fill(0x7e, page_words());
            let pinned = check(&imp, t3.raw(), 0).map(|_| ());
            Ok(format!("{} {}", answer(t2), answer(pinned)))
        },
    )?;
    ensure(line == "ENOMEM ENOMEM", || {
        format!("uid 1000 with RLIMIT_MEMLOCK 8 MiB: a {SIZE}-byte T2 ALLOC, an importer mapping its {SIZE}-byte T3 buffer: '{line}', expected 'ENOMEM ENOMEM'")
    })?;
    child.kill(libc::SIGKILL);
    child.wait();
    let imp = importer()?;
    let buf = dev.try_alloc_t3(SIZE).map_err(|e| format!("T3 ALLOC: {}", errname(e)))?;
    let map = buf.map()?;
    map.fill(0x7f, page_words());
    // Past the pool cap (root has no memlock limit).
    {
        let _cap = ParamGuard::set("pool_cap_mb", "8")?;
        expect_errno("an importer pinning 16 MiB of T3 under an 8 MiB pool cap", check(&imp, buf.raw(), 0), libc::ENOMEM)?;
    }
    // Within the limits: counted in T2 while pinned, given back when unpinned.
    let free0 = meminfo("Unevictable").unwrap_or(0);
    check(&imp, buf.raw(), HOLD).map_err(|e| format!("importer HOLD of a T3 buffer: {}", errname(e)))?;
    let held = dev.pool()?;
    ensure(held.t2_used == base.t2_used + SIZE, || format!("t2_used {} while {SIZE} bytes of T3 are pinned (baseline {})", held.t2_used, base.t2_used))?;
    // Reclaim meets the pinned pages (MADV_PAGEOUT) and parks them as unevictable.
    // SAFETY: advice on our own shared mapping; pageout never drops its contents.
    let r = unsafe { libc::madvise(map.ptr() as *mut libc::c_void, map.len(), libc::MADV_PAGEOUT) };
    ensure(r == 0, || format!("MADV_PAGEOUT: {}", errname(errno())))?;
    let parked = unevictable_until(|u| u >= free0 + SIZE / 2);
    check(&imp, -1, RELEASE).map_err(|e| format!("importer RELEASE: {}", errname(e)))?;
    let after = unevictable_until(|u| u < free0 + SIZE / 4);
    note(&format!("Unevictable: {} KiB before the pin, {} KiB pinned after MADV_PAGEOUT, {} KiB unpinned", free0 / 1024, parked / 1024, after / 1024));
    ensure(parked >= free0 + SIZE / 2, || format!("MADV_PAGEOUT of the pinned buffer parked only {} KiB as unevictable: cannot tell", parked.saturating_sub(free0) / 1024))?;
    ensure(after < free0 + SIZE / 4, || {
        format!("{} KiB still unevictable 5 s after the importer let the {SIZE}-byte T3 buffer go", after.saturating_sub(free0) / 1024)
    })?;
    ensure(dev.pool()?.t2_used == base.t2_used, || "t2_used not back to its baseline after the unpin".into())?;
    map.verify(0x7f, page_words()).map_err(|e| format!("after the pins: {e}"))?;
    drop((map, buf));
    dev.settle_to(&base, Duration::from_secs(10))?;
    Ok(Outcome::Pass)
}
