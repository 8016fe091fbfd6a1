//! Pages that outlive their buffer: a buffer closed while something else still holds
//! references to its pages (a pipe after vmsplice, io_uring fixed buffers) stays
//! charged until those references go (issue 11, finding 1).

use crate::gb::*;
use crate::harness::*;
use crate::tests::pressure::ParamGuard;
use crate::tests::users::{become_user, DeviceGroup};
use crate::uring::*;
use greenboost_abi::GB_CHUNK_SIZE;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// vmsplice() one 4 KiB page of each 2 MiB chunk into a pipe, close the buffer: the
/// pipe keeps every chunk alive, so the pool, the process (and so its user) and the
/// held figure keep counting them, past several watchdog ticks; once the pipe is
/// closed they drop back to the baseline.
pub fn vmsplice_keeps_charge() -> TestResult {
    const LEN: u64 = 16 * MIB;
    let chunks = (LEN / GB_CHUNK_SIZE) as usize;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let proc_base = dev.proc_stats()?.t2_used;
    let buf = dev.alloc(LEN)?;
    let m = buf.map()?;
    m.fill(0x5911ce, page_words());
    let (pr, pw) = pipe();
    let psz = page_size() as usize;
    let iovs: Vec<libc::iovec> = (0..chunks)
        .map(|i| libc::iovec {
            // SAFETY: inside the live mapping (offsets below LEN).
            iov_base: unsafe { m.ptr().add(i * GB_CHUNK_SIZE as usize) } as *mut libc::c_void,
            iov_len: psz,
        })
        .collect();
    // SAFETY: iovs describe `chunks` pages of the live mapping; the pipe holds 16 pages.
    let n = unsafe { libc::vmsplice(pw.as_raw_fd(), iovs.as_ptr(), iovs.len(), 0) };
    ensure(n == (chunks * psz) as isize, || format!("vmsplice: {n} ({})", errname(errno())))?;
    drop(m);
    drop(buf);
    // Several watchdog ticks (the main load's period is 200 ms): still charged.
    std::thread::sleep(Duration::from_millis(1000));
    let st = dev.pool()?;
    let me = dev.proc_stats()?;
    note(&format!("after close: t2_used {} (baseline {}), buffers {}, process t2 {}", st.t2_used, base.t2_used, st.buffers, me.t2_used));
    ensure(st.buffers == base.buffers, || format!("buffers {} after the close, baseline {}", st.buffers, base.buffers))?;
    ensure(st.t2_used >= base.t2_used + LEN, || {
        format!("t2_used {} while a pipe holds all {chunks} chunks of the closed {LEN}-byte buffer (baseline {}): the pages left every limit", st.t2_used, base.t2_used)
    })?;
    ensure(me.t2_used >= proc_base + LEN, || format!("the process's t2 {} does not count the held chunks (was {proc_base})", me.t2_used))?;
    let held = sysfs_counter("held_bytes")?;
    ensure(held >= LEN, || format!("sysfs held_bytes {held}, expected at least {LEN}"))?;
    // The pipe still reads the data the buffer had.
    let mut page = vec![0u8; psz];
    let mut r = std::fs::File::from(pr);
    r.read_exact(&mut page).map_err(|e| format!("read pipe: {e}"))?;
    ensure(page[..8] == pattern(0x5911ce, 0).to_ne_bytes(), || "pipe page lost its data".to_string())?;
    drop(r);
    drop(pw);
    dev.settle_to(&base, Duration::from_secs(5))?;
    let t0 = Instant::now();
    while sysfs_counter("held_bytes")? != 0 {
        ensure(t0.elapsed() < Duration::from_secs(5), || "held_bytes not back to 0 after the pipe closed".into())?;
        std::thread::sleep(Duration::from_millis(20));
    }
    ensure(dev.proc_stats()?.t2_used == proc_base, || "the process's t2 not back to its baseline".into())?;
    Ok(Outcome::Pass)
}

/// kill -9 of a process whose buffer is long-term pinned as an io_uring fixed buffer
/// (the ring dies with the process, asynchronously): the charge goes once the pins do,
/// nothing stays held.
pub fn kill9_uring_pinned_released() -> TestResult {
    const LEN: u64 = 8 * MIB;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let (mut child, mut r) = spawn_with_pipe(move |mut w| {
        let Ok(dev) = Dev::open() else { return 1 };
        let Ok(buf) = dev.try_alloc(LEN) else { return 2 };
        let Ok(m) = buf.map() else { return 3 };
        let Ok(ring) = Uring::new(4) else { return 4 };
        let iov = libc::iovec { iov_base: m.ptr() as *mut libc::c_void, iov_len: m.len() };
        if ring.register_buffers(&[iov]).is_err() {
            return 5;
        }
        // Only the pin keeps the pages now (and the ring, until the process dies).
        drop(m);
        drop(buf);
        let _ = w.write_all(b"p");
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    });
    let mut b = [0u8; 1];
    if r.read_exact(&mut b).is_err() {
        let st = child.wait();
        return Err(format!("child could not pin a buffer: {:?}", describe_status(st)));
    }
    let st = dev.pool()?;
    ensure(st.t2_used >= base.t2_used + LEN, || format!("t2_used {} with the closed buffer still pinned (baseline {})", st.t2_used, base.t2_used))?;
    child.kill(libc::SIGKILL);
    child.wait();
    dev.settle_to(&base, Duration::from_secs(10))?;
    let t0 = Instant::now();
    while sysfs_counter("held_bytes")? != 0 {
        ensure(t0.elapsed() < Duration::from_secs(10), || "held_bytes not back to 0 after the pinning process died".into())?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Outcome::Pass)
}

/// Chunks a pipe keeps past their buffer count against their own user only (issue 37,
/// finding 2): one user's held chunks beyond a quarter of the pool cap refused every
/// ALLOC of every user. Now another user's ALLOC succeeds, and the holder's user meets
/// them in its own per-user cap.
pub fn held_chunks_charge_their_user() -> TestResult {
    const HELD: u64 = 32 * MIB;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    // A quarter of the cap (24 MiB) is below what the pipe will hold.
    let _cap = ParamGuard::set("pool_cap_mb", "96")?;
    let _uid_cap = ParamGuard::set("uid_cap_mb", "40")?;
    let _group = DeviceGroup::grant()?;
    let (mut holder, mut out) = spawn_with_pipe(move |mut w| {
        if become_user(1000, None).is_err() {
            let _ = w.write_all(b"could not become uid 1000\n");
            return 1;
        }
        let run = || -> Result<String, String> {
            let dev = Dev::open()?;
            let buf = dev.alloc(HELD)?;
            let m = buf.map()?;
            m.fill(0x4e1d, page_words());
            let (pr, pw) = pipe();
            let iovs: Vec<libc::iovec> = (0..(HELD / GB_CHUNK_SIZE) as usize)
                .map(|i| libc::iovec {
                    // SAFETY: inside the live mapping (offsets below HELD).
                    iov_base: unsafe { m.ptr().add(i * GB_CHUNK_SIZE as usize) } as *mut libc::c_void,
                    iov_len: page_size() as usize,
                })
                .collect();
            // SAFETY: iovs describe pages of the live mapping; the pipe holds 16 pages.
            let n = unsafe { libc::vmsplice(pw.as_raw_fd(), iovs.as_ptr(), iovs.len(), 0) };
            ensure(n == (iovs.len() as u64 * page_size()) as isize, || format!("vmsplice: {n} ({})", errname(errno())))?;
            drop((m, buf));
            // The pipe keeps every chunk: 32 MiB held of this user's 40.
            let more = dev.try_alloc(16 * MIB).map(|_| "success".to_string()).unwrap_or_else(errname);
            std::mem::forget((pr, pw));
            Ok(more)
        };
        let line = match run() {
            Ok(more) => format!("HELD {more}\n"),
            Err(e) => format!("{e}\n"),
        };
        let _ = w.write_all(line.as_bytes());
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    });
    let line = crate::tests::t3::read_line_timeout(&mut out, Duration::from_secs(60))?;
    let more = line.trim().strip_prefix("HELD ").ok_or_else(|| format!("holder: {}", line.trim()))?;
    let held = sysfs_counter("held_bytes")?;
    ensure(held >= HELD, || format!("held_bytes {held} with a pipe holding a closed {HELD}-byte buffer"))?;
    // Another user (root) is not denied by them.
    let mine = dev.alloc(8 * MIB).map_err(|e| format!("uid 0 while uid 1000's pipe holds {held} bytes (a quarter of the cap is {}): {e}", 96 * MIB / 4))?;
    // The holder's own user is: held 32 + 16 MiB > its 40 MiB cap.
    ensure(more == "ENOMEM", || format!("uid 1000 holding {HELD} bytes asked 16 MiB more under a 40 MiB user cap: {more}, expected ENOMEM"))?;
    drop(mine);
    holder.kill(libc::SIGKILL);
    holder.wait();
    dev.settle_to(&base, Duration::from_secs(10))?;
    Ok(Outcome::Pass)
}
