//! Buffers shared between processes (SCM_RIGHTS, fork) and released by close or kill -9.

use crate::gb::*;
use crate::harness::*;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

const MIB: u64 = 1 << 20;

fn socketpair() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(format!("socketpair: {}", errname(errno())));
    }
    // SAFETY: fresh fds.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends one fd plus an 8-byte payload over a unix socket.
fn send_fd(sock: RawFd, fd: RawFd, payload: u64) -> Result<(), String> {
    let mut data = payload.to_ne_bytes();
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr() as *mut libc::c_void, iov_len: 8 };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: msghdr is plain data; all pointers below point into live locals.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
        if libc::sendmsg(sock, &msg, 0) != 8 {
            return Err(format!("sendmsg: {}", errname(errno())));
        }
    }
    Ok(())
}

fn recv_fd(sock: RawFd) -> Result<(OwnedFd, u64), String> {
    let mut data = [0u8; 8];
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr() as *mut libc::c_void, iov_len: 8 };
    // SAFETY: pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: as in send_fd; the kernel fills the control buffer we own.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space;
        if libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) != 8 {
            return Err(format!("recvmsg: {}", errname(errno())));
        }
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_type != libc::SCM_RIGHTS {
            return Err("no SCM_RIGHTS in message".into());
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const RawFd);
        Ok((OwnedFd::from_raw_fd(fd), u64::from_ne_bytes(data)))
    }
}

pub fn scm_rights() -> TestResult {
    let base = Dev::open()?.pool()?;
    let (parent_sock, child_sock) = socketpair()?;
    let size = 6 * MIB;
    let mut child = Child::spawn(move || {
        let run = || -> Result<(), String> {
            let (fd, size) = recv_fd(child_sock.as_raw_fd())?;
            let map = Mapping::of_fd(fd.as_raw_fd(), 0, size as usize, libc::PROT_READ | libc::PROT_WRITE)
                .map_err(|e| format!("child mmap of received fd: {}", errname(e)))?;
            map.verify(0x5c3, 1).map_err(|e| format!("child sees: {e}"))?;
            map.fill(0xc41d, 5);
            Ok(())
        };
        match run() {
            Ok(()) => 0,
            Err(e) => {
                note(&e);
                1
            }
        }
    });
    let dev = Dev::open()?;
    let buf = dev.alloc(size)?;
    let map = buf.map()?;
    map.fill(0x5c3, 1);
    send_fd(parent_sock.as_raw_fd(), buf.raw(), buf.size)?;
    // The parent's own references go away first: the child's fd alone keeps the buffer.
    drop(buf);
    child.expect_success("receiver")?;
    map.verify(0xc41d, 5).map_err(|e| format!("parent does not see the receiver's writes: {e}"))?;
    drop(map);
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

pub fn fork_inherit() -> TestResult {
    let base = Dev::open()?.pool()?;
    let dev = Dev::open()?;
    let buf = dev.alloc(2 * MIB)?;
    let map = buf.map()?;
    map.fill(0xf0f0, 1);
    let fd = buf.raw();
    let size = buf.size as usize;
    let mut child = Child::spawn(move || {
        // The inherited mapping and the inherited fd both work in the child.
        if map_verify_in_child(fd, size).is_err() {
            return 1;
        }
        0
    });
    child.expect_success("child using the inherited fd")?;
    map.verify(0xbeef, 7).map_err(|e| format!("parent does not see the child's writes: {e}"))?;
    drop(map);
    drop(buf);
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

fn map_verify_in_child(fd: RawFd, size: usize) -> Result<(), String> {
    let m = Mapping::of_fd(fd, 0, size, libc::PROT_READ | libc::PROT_WRITE).map_err(errname)?;
    m.verify(0xf0f0, 1)?;
    m.fill(0xbeef, 7);
    Ok(())
}

/// `gb-guest-tests hold-buffer SIZE`: allocate, map, touch, print `HOLDING id size`,
/// then sleep until killed (guest-suite.sh's rmmod test, and kill -9 tests here).
pub fn hold_buffer(size: u64) -> i32 {
    let run = || -> Result<(Buffer, Mapping), String> {
        let dev = Dev::open()?;
        let buf = dev.alloc(size)?;
        let map = buf.map()?;
        map.fill(size, page_words());
        Ok((buf, map))
    };
    match run() {
        Ok((buf, _map)) => {
            println!("HOLDING {} {}", buf.id, buf.size);
            std::io::stdout().flush().ok();
            loop {
                // SAFETY: pause has no preconditions.
                unsafe { libc::pause() };
            }
        }
        Err(e) => {
            println!("hold-buffer: {e}");
            1
        }
    }
}

pub fn close_releases() -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let sizes = [page_size(), 2 * MIB, 3 * MIB + 4096, 16 * MIB];
    let mut bufs = Vec::new();
    for s in sizes {
        bufs.push(dev.alloc(s)?);
    }
    let total: u64 = bufs.iter().map(|b| b.size).sum();
    let st = dev.pool()?;
    ensure(st.t2_used == base.t2_used + total && st.buffers == base.buffers + sizes.len() as u64, || {
        format!("holding {total} bytes in {} buffers, pool says {} / {}", sizes.len(), st.t2_used - base.t2_used, st.buffers - base.buffers)
    })?;
    let mut ids: Vec<u64> = bufs.iter().map(|b| b.id).collect();
    ids.sort();
    ids.dedup();
    ensure(ids.len() == sizes.len(), || "buffer ids are not unique".into())?;
    drop(bufs);
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

pub fn kill9_releases() -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let (mut holder, mut r) = spawn_with_pipe(move |mut w| {
        let run = || -> Result<u64, String> {
            let dev = Dev::open()?;
            let mut held = Vec::new();
            for s in [2 * MIB, 8 * MIB, page_size()] {
                let b = dev.alloc(s)?;
                let m = b.map()?;
                m.fill(s, 1);
                held.push((b, m));
            }
            // One buffer only mapped (fd closed), one only as fd, and one both.
            let (b, m) = held.remove(0);
            drop(b);
            std::mem::forget(m);
            let (b, m) = held.remove(0);
            drop(m);
            std::mem::forget(b);
            let total = 2 * MIB + 8 * MIB + page_size();
            std::mem::forget(held);
            Ok(total)
        };
        match run() {
            Ok(total) => {
                w.write_all(&total.to_ne_bytes()).ok();
                loop {
                    // SAFETY: pause has no preconditions.
                    unsafe { libc::pause() };
                }
            }
            Err(e) => {
                note(&e);
                1
            }
        }
    });
    let mut got = [0u8; 8];
    r.read_exact(&mut got).map_err(|_| "holder died before allocating".to_string())?;
    let total = u64::from_ne_bytes(got);
    let st = dev.pool()?;
    ensure(st.t2_used == base.t2_used + total && st.buffers == base.buffers + 3, || {
        format!("holder holds {total} bytes in 3 buffers; pool says {} / {}", st.t2_used - base.t2_used, st.buffers - base.buffers)
    })?;
    holder.kill(libc::SIGKILL);
    let status = holder.wait();
    ensure(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL, || format!("holder ended with status {status:#x}"))?;
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}
