//! The pressure rule (kmod/README.md, "T3 and swap"), measured: T2 grows while another
//! process holds anonymous memory, until ALLOC says ENOMEM, and the OOM killer never
//! runs (`oom_kill` in /proc/vmstat), the other process's data is intact, and so is a
//! T3 buffer whose RAM T2 took by pushing it to swap.

use crate::gb::*;
use crate::harness::*;
use crate::tests::t3::read_line_timeout;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::Duration;

const MIB: u64 = 1 << 20;
const STEP: u64 = 16 * MIB;

/// A child holding `bytes` of written anonymous memory; it checks them when told.
struct Holder {
    child: Child,
    from: std::fs::File,
    to: std::fs::File,
}

impl Holder {
    fn start(bytes: usize) -> Result<Holder, String> {
        let (cmd_r, cmd_w) = pipe();
        let cmd_fd = cmd_r.as_raw_fd();
        let (child, mut from) = spawn_with_pipe(move |mut w| {
            // SAFETY: the child's copy of the command pipe's read end, owned here alone.
            let mut cmd = unsafe { std::fs::File::from_raw_fd(cmd_fd) };
            let Ok(mem) = Mapping::anonymous(bytes) else {
                let _ = writeln!(w, "ERROR mmap");
                return 1;
            };
            mem.fill(0xa1, page_words());
            let _ = writeln!(w, "READY");
            let mut byte = [0u8; 1];
            let _ = cmd.read(&mut byte);
            match mem.verify(0xa1, page_words()) {
                Ok(()) => {
                    let _ = writeln!(w, "INTACT");
                }
                Err(e) => {
                    let _ = writeln!(w, "BAD {e}");
                }
            }
            0
        });
        std::mem::forget(cmd_r);
        let line = read_line_timeout(&mut from, Duration::from_secs(120))?;
        ensure(line.trim() == "READY", || format!("holder: {line}"))?;
        Ok(Holder { child, from, to: std::fs::File::from(cmd_w) })
    }

    fn check(mut self) -> Result<(), String> {
        let _ = self.to.write_all(b"c");
        let line = read_line_timeout(&mut self.from, Duration::from_secs(120))?;
        self.child.wait();
        ensure(line.trim() == "INTACT", || format!("the other process's memory: {line}"))
    }
}

/// T2 ALLOCs of [`STEP`] until the module refuses; returns the buffers.
fn grow_t2(dev: &Dev) -> Result<Vec<Buffer>, String> {
    let mut held = Vec::new();
    loop {
        match dev.try_alloc(STEP) {
            Ok(b) => held.push(b),
            Err(libc::ENOMEM) => return Ok(held),
            Err(e) => return Err(format!("ALLOC {} after {} MiB: {}", STEP, held.len() as u64 * STEP / MIB, errname(e))),
        }
        ensure(held.len() < 4096, || "ALLOC never refused".into())?;
    }
}

fn rule(with_t3: bool) -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let ram = meminfo("MemTotal").ok_or("no MemTotal")?;
    let reserve = sysfs_counter("reserve_bytes")?;
    let oom0 = vmstat("oom_kill").ok_or("no oom_kill in /proc/vmstat")?;
    let holder = Holder::start((ram / 4) as usize)?;
    let t3 = if with_t3 {
        // Small: T2 pushes all of it to swap, and it is read back.
        let b = dev.try_alloc_t3(round_up(ram / 8, 2 * MIB)).map_err(|e| format!("T3 ALLOC: {}", errname(e)))?;
        let m = b.map()?;
        m.fill(0xb3, page_words());
        Some((b, m))
    } else {
        None
    };
    let avail = meminfo("MemAvailable").ok_or("no MemAvailable")?;
    let resident = dev.t3()?.t3_resident;
    let swapped0 = vmstat("pswpout").unwrap_or(0);
    let held = grow_t2(&dev)?;
    let got = held.len() as u64 * STEP;
    let t = dev.t3()?;
    let pushed = (vmstat("pswpout").unwrap_or(0) - swapped0) * page_size();
    note(&format!(
        "{}: RAM {} MiB, available {} MiB, reserve {} MiB, T3 in RAM {} MiB: T2 grew by {} MiB, the kernel wrote {} MiB to swap meanwhile; T3 now {} MiB in RAM, {} MiB in swap",
        if with_t3 { "with swap and T3" } else { "without swap" },
        ram / MIB,
        avail / MIB,
        reserve / MIB,
        resident / MIB,
        got / MIB,
        pushed / MIB,
        t.t3_resident / MIB,
        t.t3_swapped / MIB
    ));
    let oom = vmstat("oom_kill").ok_or("no oom_kill")?;
    ensure(oom == oom0, || format!("the OOM killer ran {} times while T2 grew", oom - oom0))?;
    // It took what was available down to the reserve (less the steps' rounding), and
    // with T3 in RAM, room the kernel made by writing T3 out.
    ensure(got + STEP + 32 * MIB >= avail.saturating_sub(reserve).min(avail), || {
        format!("T2 stopped at {} MiB with {} MiB available over the reserve", got / MIB, avail.saturating_sub(reserve) / MIB)
    })?;
    // With swap the module counts the T3 pages in RAM as room (the kernel can write
    // them out whenever it needs the RAM): T2 grows past what was available. Whether
    // the kernel writes anything meanwhile is its own choice: it need not while free
    // memory stays above its watermarks (the reserve sits above them), so `pushed` is
    // reported, not asserted; t3_larger_than_ram proves the write-out and readback.
    if with_t3 {
        ensure(got > avail.saturating_sub(reserve), || {
            format!("with swap T2 grew {} MiB of {} MiB available over the reserve ({} MiB of T3 in RAM counted as room)", got / MIB, avail.saturating_sub(reserve) / MIB, resident / MIB)
        })?;
    }
    drop(held);
    holder.check()?;
    if let Some((b, m)) = t3 {
        m.verify(0xb3, page_words()).map_err(|e| format!("the T3 buffer pushed to swap: {e}"))?;
        drop((m, b));
    }
    ensure(vmstat("oom_kill") == Some(oom0), || "the OOM killer ran while memory came back".into())?;
    dev.settle_to(&base, Duration::from_secs(10))?;
    Ok(Outcome::Pass)
}

/// No swap: T2 stops at the reserve, nothing is killed.
pub fn pressure_rule_no_swap() -> TestResult {
    ensure(dev_swap_free()? == 0, || "swap is on; this test needs the guest before swapon".into())?;
    rule(false)
}

/// Swap and a resident T3 buffer: T2 may take the T3 buffer's RAM (the kernel writes
/// it to swap), nothing else of anyone's; nothing is killed, nothing lost.
pub fn pressure_rule_with_swap() -> TestResult {
    ensure(dev_swap_free()? > 0, || "no swap: guest-suite.sh turns the NVMe swap on first".into())?;
    rule(true)
}

fn dev_swap_free() -> Result<u64, String> {
    Ok(Dev::open()?.t3()?.swap_free)
}

/// Sanity check of the fixture: the swap device is an NVMe disk.
pub fn swap_is_nvme() -> TestResult {
    let swaps = std::fs::read_to_string("/proc/swaps").map_err(|e| format!("/proc/swaps: {e}"))?;
    ensure(swaps.lines().skip(1).any(|l| l.starts_with("/dev/nvme")), || format!("no NVMe swap in /proc/swaps:\n{swaps}"))?;
    let t = Dev::open()?.t3()?;
    ensure(t.swap_free > 0 && t.t3_cap > 0, || format!("swap on, yet swap_free {} t3_cap {}", t.swap_free, t.t3_cap))?;
    Ok(Outcome::Pass)
}
