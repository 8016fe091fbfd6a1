//! Pages that outlive their buffer: a buffer closed while something else still holds
//! references to its pages (a pipe after vmsplice, io_uring fixed buffers) stays
//! charged until those references go (issue 11, finding 1).

use crate::gb::*;
use crate::harness::*;
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
