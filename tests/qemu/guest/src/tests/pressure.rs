//! Limits: pool cap, per-user cap, the RAM reserve and the pressure watchdog with its
//! eventfd. The module parameters are writable at run time (0644); every change here
//! is undone when the test ends.

use crate::gb::*;
use crate::harness::*;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const PARAMS: &str = "/sys/module/greenboost/parameters";

pub fn read_param(name: &str) -> Result<String, String> {
    std::fs::read_to_string(format!("{PARAMS}/{name}")).map(|s| s.trim().to_string()).map_err(|e| format!("{PARAMS}/{name}: {e}"))
}

pub fn write_param(name: &str, value: &str) -> Result<(), String> {
    std::fs::write(format!("{PARAMS}/{name}"), value).map_err(|e| format!("writing {value} to {PARAMS}/{name}: {e}"))
}

/// Sets a module parameter and restores the old value on drop.
pub struct ParamGuard {
    name: &'static str,
    old: String,
}

impl ParamGuard {
    pub fn set(name: &'static str, value: &str) -> Result<ParamGuard, String> {
        let old = read_param(name)?;
        write_param(name, value)?;
        Ok(ParamGuard { name, old })
    }
}

impl Drop for ParamGuard {
    fn drop(&mut self) {
        if let Err(e) = write_param(self.name, &self.old) {
            note(&format!("could not restore {}: {e}", self.name));
        }
    }
}

/// Memory a child process touches (and so takes from MemAvailable) until killed.
fn hog(bytes: usize) -> Result<(Child, std::fs::File), String> {
    Ok(spawn_with_pipe(move |mut w| {
        let Ok(m) = Mapping::anonymous(bytes) else { return 1 };
        for i in (0..m.words()).step_by(page_words()) {
            m.write_u64(i, i as u64 | 1);
        }
        let _ = std::io::Write::write_all(&mut w, b"k");
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    }))
}

fn wait_pressure(dev: &Dev, want: u32, limit: Duration) -> Result<Duration, String> {
    let t0 = Instant::now();
    loop {
        if dev.pool()?.pressure == want {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > limit {
            return Err(format!("POOL_STATS.pressure not {want} after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Real memory pressure: with the reserve just below available RAM, another process
/// takes memory; the watchdog must notice, signal the eventfd, refuse ALLOC and release
/// its cache; when the memory comes back, signal again and allow ALLOC.
pub fn pressure_eventfd() -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let _period = ParamGuard::set("watchdog_ms", "100")?;
    let avail = meminfo("MemAvailable").ok_or("no MemAvailable")?;
    let hog_bytes = 600 * MIB;
    ensure(avail > hog_bytes + 400 * MIB, || format!("only {} MiB available; the test needs {} MiB", avail >> 20, (hog_bytes + 400 * MIB) >> 20))?;
    // Reserve 300 MiB below what is available now: no pressure yet, pressure once the
    // hog takes 600 MiB (even after the module gives its cache back).
    let reserve_mb = (avail - 300 * MIB) / MIB;
    let _reserve = ParamGuard::set("reserve_mb", &reserve_mb.to_string())?;
    note(&format!("MemAvailable {} MiB, reserve set to {reserve_mb} MiB, hog {} MiB", avail >> 20, hog_bytes >> 20));
    std::thread::sleep(Duration::from_millis(400));
    ensure(dev.pool()?.pressure == 0, || "pressure reported before any memory was taken".into())?;
    let efd = eventfd()?;
    dev.register_eventfd(efd.as_raw_fd(), 0).map_err(|e| format!("REGISTER_EVENTFD: {}", errname(e)))?;
    ensure(wait_eventfd(efd.as_raw_fd(), Duration::from_millis(300))?.is_none(), || "eventfd fired without a crossing".into())?;
    drop(dev.alloc(2 * MIB)?);

    let mut watch = KmsgWatch::start();
    let (mut hog_child, mut ready) = hog(hog_bytes as usize)?;
    let mut k = [0u8; 1];
    std::io::Read::read_exact(&mut ready, &mut k).map_err(|_| "memory hog died (OOM?)".to_string())?;
    let t0 = Instant::now();
    let fired = wait_eventfd(efd.as_raw_fd(), Duration::from_secs(5))?;
    ensure(fired.is_some(), || format!("eventfd not signalled within 5 s (50 watchdog periods) of MemAvailable dropping to {} MiB", meminfo("MemAvailable").unwrap_or(0) >> 20))?;
    note(&format!("pressure eventfd fired {:.2} s after the hog was ready", t0.elapsed().as_secs_f64()));
    let st = dev.pool()?;
    ensure(st.pressure == 1, || "eventfd fired but POOL_STATS.pressure is 0".into())?;
    expect_errno("ALLOC(2 MiB) under pressure", dev.try_alloc(2 * MIB), libc::ENOMEM)?;
    // The cache is given back under pressure.
    let t0 = Instant::now();
    while dev.pool()?.t2_cached != 0 {
        ensure(t0.elapsed() < Duration::from_secs(3), || format!("t2_cached still {} under pressure", dev.pool().map(|s| s.t2_cached).unwrap_or(0)))?;
        std::thread::sleep(Duration::from_millis(50));
    }
    // A registration made during pressure is signalled at once.
    let late = eventfd()?;
    dev.register_eventfd(late.as_raw_fd(), 0).map_err(|e| format!("REGISTER_EVENTFD: {}", errname(e)))?;
    ensure(wait_eventfd(late.as_raw_fd(), Duration::from_millis(500))?.is_some(), || "eventfd registered under pressure was not signalled".into())?;

    hog_child.kill(libc::SIGKILL);
    hog_child.wait();
    let fired = wait_eventfd(efd.as_raw_fd(), Duration::from_secs(5))?;
    ensure(fired.is_some(), || "eventfd not signalled when the pressure ended".into())?;
    wait_pressure(&dev, 0, Duration::from_secs(1))?;
    let b = dev.alloc(2 * MIB).map_err(|e| format!("after the pressure ended: {e}"))?;
    drop(b);
    let lines = watch.new_lines();
    ensure(lines.iter().any(|l| l.starts_with("greenboost") && l.contains("memory pressure:")), || "no 'memory pressure' line in dmesg".into())?;
    ensure(lines.iter().any(|l| l.starts_with("greenboost") && l.contains("memory pressure over")), || "no 'memory pressure over' line in dmesg".into())?;
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

/// `gb-guest-tests reserve-refusal` (guest-suite.sh loads the module with a reserve
/// above the guest's RAM): every ALLOC is refused, the watchdog reports pressure, a new
/// eventfd registration is signalled at once.
pub fn reserve_above_ram() -> TestResult {
    let dev = Dev::open()?;
    let info = dev.info()?;
    let total = meminfo("MemTotal").ok_or("no MemTotal")?;
    ensure(info.reserve > total, || format!("reserve {} MiB is not above RAM {} MiB: guest-suite.sh should load with a huge reserve_mb", info.reserve >> 20, total >> 20))?;
    for size in [page_size(), 2 * MIB, 64 * MIB] {
        expect_errno(&format!("ALLOC({size}) with reserve above RAM"), dev.try_alloc(size), libc::ENOMEM)?;
    }
    wait_pressure(&dev, 1, Duration::from_secs(3))?;
    let efd = eventfd()?;
    dev.register_eventfd(efd.as_raw_fd(), 0).map_err(|e| format!("REGISTER_EVENTFD: {}", errname(e)))?;
    ensure(wait_eventfd(efd.as_raw_fd(), Duration::from_secs(1))?.is_some(), || "eventfd registered under pressure was not signalled".into())?;
    let st = dev.pool()?;
    ensure(st.buffers == 0 && st.t2_used == 0 && st.alloc_failures >= 3, || format!("pool after refusals: {st:?}"))?;
    Ok(Outcome::Pass)
}

/// Pool cap reached by several buffers, and a freed buffer's room usable again at once:
/// the freed pages still wait for the background worker to zero them, so the ALLOC right
/// after the free takes them and zeroes them itself (no data crosses between buffers).
pub fn pool_cap_cumulative() -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    ensure(base.buffers == 0, || "other buffers are alive".into())?;
    let cap_mb = 64u64;
    let _cap = ParamGuard::set("pool_cap_mb", &cap_mb.to_string())?;
    let info = dev.info()?;
    ensure(info.pool_cap == cap_mb * MIB, || format!("INFO.pool_cap {} after writing pool_cap_mb={cap_mb}", info.pool_cap))?;
    std::thread::sleep(Duration::from_millis(300));
    let half = cap_mb / 2 * MIB;
    let mut a = dev.alloc(half).map_err(|e| format!("first half of the cap: {e}"))?;
    let b = dev.alloc(half).map_err(|e| format!("second half of the cap: {e}"))?;
    expect_errno("ALLOC(1 page) with the cap full", dev.try_alloc(page_size()), libc::ENOMEM)?;
    let st = dev.pool()?;
    ensure(st.t2_used == 2 * half && st.t2_cap == cap_mb * MIB, || format!("pool at cap: {st:?}"))?;
    ensure(st.t2_used + st.t2_cached <= st.t2_cap, || format!("used {} + cached {} exceed the cap {}", st.t2_used, st.t2_cached, st.t2_cap))?;
    // Free a written half and allocate it again straight away, a few times over.
    let stride = 64;
    for round in 0..4u64 {
        a.map()?.fill(0x5ec2e7 + round, stride);
        drop(a);
        let freed = dev.pool()?;
        a = dev.try_alloc(half).map_err(|e| {
            format!("round {round}: ALLOC of the half just freed at a full cap: {} (pool after the free: {freed:?})", errname(e))
        })?;
        a.map()?.verify_zero(stride).map_err(|e| format!("round {round}: re-allocated pages not zeroed: {e}"))?;
        note(&format!("round {round}: re-allocated at once ({} MiB cached after the free)", freed.t2_cached >> 20));
    }
    // Zeroing in the caller's path must not let the cache grow past the cap.
    let t0 = Instant::now();
    loop {
        let st = dev.pool()?;
        if st.t2_used + st.t2_cached <= st.t2_cap {
            break;
        }
        ensure(t0.elapsed() < Duration::from_secs(2), || format!("used {} + cached {} exceed the cap {} after re-allocating", st.t2_used, st.t2_cached, st.t2_cap))?;
        std::thread::sleep(Duration::from_millis(50));
    }
    drop((a, b));
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

/// Per-user cap: processes of one uid share it, other users are not affected. The users
/// reach the node as a udev rule arranges it: through its group (0660, group GROUP).
pub fn uid_cap() -> TestResult {
    const GROUP: u32 = 4242;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let _cap = ParamGuard::set("uid_cap_mb", "32")?;
    let node = std::ffi::CString::new(greenboost_abi::GB_DEVICE_PATH).unwrap();
    // SAFETY: chown of the device node by path; restored below.
    ensure(unsafe { libc::chown(node.as_ptr(), 0, GROUP) } == 0, || format!("chgrp {}: {}", greenboost_abi::GB_DEVICE_PATH, errname(errno())))?;
    let restore = Restore(node.clone());
    // Each child becomes `uid` (in group GROUP), opens the device, allocates `mb`, holds
    // it. With `open_as_root` it opens the device before dropping privileges, as a
    // daemon may: the allocation still counts under the uid it has when allocating.
    let as_user = |uid: u32, mb: u64, open_as_root: bool| {
        let (child, mut r) = spawn_with_pipe(move |mut w| {
            let early = if open_as_root { Dev::open().ok() } else { None };
            let groups = [GROUP];
            // No memlock limit, as the install's limits.d rule gives the group: this test
            // is about the per-user cap.
            let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
            // SAFETY: raising our own limit and dropping privileges in the forked child.
            if unsafe {
                libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) != 0
                    || libc::setgroups(1, groups.as_ptr()) != 0
                    || libc::setgid(uid) != 0
                    || libc::setuid(uid) != 0
            } {
                return 11;
            }
            let code: u8 = match early.map_or_else(Dev::open, Ok) {
                Err(_) => 200,
                Ok(dev) => match dev.try_alloc(mb * MIB) {
                    Ok(b) => {
                        std::mem::forget(b);
                        0
                    }
                    Err(e) => e as u8,
                },
            };
            let _ = std::io::Write::write_all(&mut w, &[code]);
            drop(w);
            loop {
                // SAFETY: pause has no preconditions.
                unsafe { libc::pause() };
            }
        });
        let mut code = [255u8];
        let _ = std::io::Read::read_exact(&mut r, &mut code);
        (child, code[0] as i32)
    };
    let describe = |c: i32| match c {
        200 => "could not open the 0660 node through its group".to_string(),
        255 => "child died".to_string(),
        c => errname(c),
    };
    let (h1, c1) = as_user(1000, 24, false);
    ensure(c1 == 0, || format!("uid 1000, 24 MiB under a 32 MiB user cap: {}", describe(c1)))?;
    let (h2, c2) = as_user(1000, 16, false);
    ensure(c2 == libc::ENOMEM, || format!("uid 1000, another process, 16 MiB more (40 > 32): {}, expected ENOMEM", describe(c2)))?;
    let (h3, c3) = as_user(1000, 8, true);
    ensure(c3 == 0, || format!("uid 1000 (opened as root), 8 MiB more (exactly 32): {}", describe(c3)))?;
    let (h4, c4) = as_user(1000, 2, true);
    ensure(c4 == libc::ENOMEM, || format!("uid 1000 at its cap, opened the device as root, then allocated 2 MiB: {}, expected ENOMEM (counts under its current uid)", describe(c4)))?;
    let (h5, c5) = as_user(1001, 24, false);
    ensure(c5 == 0, || format!("uid 1001 is limited by uid 1000's usage: {}", describe(c5)))?;
    // root (uid 0) is a user like the others.
    let mine = dev.alloc(24 * MIB).map_err(|e| format!("uid 0 limited by the others' usage: {e}"))?;
    drop((h1, h2, h3, h4, h5, mine, restore));
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

/// Gives the device node back to root:root.
struct Restore(std::ffi::CString);

impl Drop for Restore {
    fn drop(&mut self) {
        // SAFETY: chown by path.
        unsafe { libc::chown(self.0.as_ptr(), 0, 0) };
    }
}

/// Pressure crossings (the watchdog signalling every registered eventfd) racing with
/// threads that register eventfds and close their device files and eventfds: the
/// registration list and the eventfd references must hold (lockdep, list debugging and
/// the runner's kernel-log check watch this), and each crossing reaches live eventfds.
pub fn eventfd_crossings_race() -> TestResult {
    let dev = Dev::open()?;
    let _period = ParamGuard::set("watchdog_ms", "100")?;
    let normal = read_param("reserve_mb")?;
    let _restore = ParamGuard::set("reserve_mb", &normal)?;
    let total_mb = meminfo("MemTotal").ok_or("no MemTotal")? / MIB;
    let deadline = Instant::now() + Duration::from_secs(5);
    let workers: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || -> Result<u64, String> {
                let mut registrations = 0;
                while Instant::now() < deadline {
                    let d = Dev::open()?;
                    let fds: Vec<_> = (0..4).map(|_| eventfd()).collect::<Result<_, _>>()?;
                    for f in &fds {
                        d.register_eventfd(f.as_raw_fd(), 0).map_err(|e| format!("REGISTER_EVENTFD: {}", errname(e)))?;
                        registrations += 1;
                    }
                    // Close the eventfds first, the device file after: the module's own
                    // references must keep the contexts alive until then.
                    drop(fds);
                    std::thread::sleep(Duration::from_millis(5));
                    drop(d);
                }
                Ok(registrations)
            })
        })
        .collect();
    // A long-lived registration that must see the crossings.
    let watcher = eventfd()?;
    dev.register_eventfd(watcher.as_raw_fd(), 0).map_err(|e| format!("REGISTER_EVENTFD: {}", errname(e)))?;
    let mut crossings = 0u64;
    let mut on = false;
    while Instant::now() < deadline {
        on = !on;
        write_param("reserve_mb", &if on { (total_mb * 4).to_string() } else { normal.clone() })?;
        wait_pressure(&dev, u32::from(on), Duration::from_secs(3))?;
        crossings += 1;
    }
    write_param("reserve_mb", &normal)?;
    wait_pressure(&dev, 0, Duration::from_secs(3))?;
    let mut registrations = 0;
    for w in workers {
        registrations += w.join().map_err(|_| "worker panicked".to_string())??;
    }
    let signalled = wait_eventfd(watcher.as_raw_fd(), Duration::from_millis(500))?.unwrap_or(0);
    note(&format!("{crossings} crossings, {registrations} racing registrations, watcher counted {signalled}"));
    ensure(crossings >= 4, || format!("only {crossings} pressure crossings in 5 s"))?;
    ensure(signalled >= crossings + u64::from(on), || format!("watcher eventfd counted {signalled} signals for {} crossings", crossings + u64::from(on)))?;
    let b = dev.alloc(2 * MIB).map_err(|e| format!("after the race: {e}"))?;
    drop(b);
    Ok(Outcome::Pass)
}
