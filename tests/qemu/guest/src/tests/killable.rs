//! ALLOC under contention: a long ALLOC stops at SIGKILL, and concurrent ALLOCs never
//! take available RAM below the reserve between them (issue 11, findings 3 and 4).

use crate::gb::*;
use crate::harness::*;
use crate::tests::pressure::ParamGuard;
use greenboost_abi::GB_CHUNK_SIZE;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn mem_available() -> Result<u64, String> {
    meminfo("MemAvailable").ok_or_else(|| "no MemAvailable in /proc/meminfo".to_string())
}

/// Sets `cache_mb` to 0 and waits until the cache is empty, so that every page an
/// ALLOC takes is a fresh one out of available RAM.
pub fn no_cache() -> Result<ParamGuard, String> {
    let guard = ParamGuard::set("cache_mb", "0")?;
    let t0 = Instant::now();
    while sysfs_counter("t2_cached_bytes")? != 0 {
        if t0.elapsed() > Duration::from_secs(10) {
            return Err("cache not empty 10 s after cache_mb=0".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(guard)
}

/// A child that opens the device, says so, waits for a byte on the pipe `go`, then
/// ALLOCs `size`; it reports 0 or the errno as one byte and holds the buffer until
/// killed. With `cpu` it runs on that CPU only, so that ALLOCs of several children
/// really overlap rather than queue behind each other on one CPU.
fn allocator(size: u64, go: std::fs::File, cpu: Option<usize>) -> (Child, std::fs::File) {
    spawn_with_pipe(move |mut w| {
        if let Some(cpu) = cpu {
            // Unpinned, the children still race, only less.
            let _ = pin_to_cpu(cpu);
        }
        let Ok(dev) = Dev::open() else { return 1 };
        let _ = w.write_all(b"o");
        let mut go = go;
        let _ = go.read(&mut [0u8; 1]);
        let code = match dev.try_alloc(size) {
            Ok(b) => {
                std::mem::forget(b);
                0u8
            }
            Err(e) => e as u8,
        };
        let _ = w.write_all(&[code]);
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    })
}

/// SIGKILL during a long ALLOC: the ALLOC stops at its next chunk (at most one chunk
/// allocated after the signal, counted by sysfs `chunks_allocated`, not timed), and
/// everything it had taken comes back.
pub fn alloc_sigkill_stops() -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let _cache = no_cache()?;
    let reserve = dev.info()?.reserve;
    let room = mem_available()?.saturating_sub(reserve + 256 * MIB);
    // Larger than earlier tests' buffers where RAM allows, so that the peak check below
    // means something.
    let size = (1536 * MIB).min(room) / GB_CHUNK_SIZE * GB_CHUNK_SIZE;
    ensure(size >= 256 * MIB, || format!("only {} MiB above the reserve", room / MIB))?;
    let chunks = size / GB_CHUNK_SIZE;
    let (go_r, go_w) = pipe();
    let (mut child, mut r) = allocator(size, std::fs::File::from(go_r), None);
    let mut b = [0u8; 1];
    r.read_exact(&mut b).map_err(|e| format!("child did not open the device: {e}"))?;
    let start = sysfs_counter("chunks_allocated")?;
    std::fs::File::from(go_w).write_all(b"g").map_err(|e| e.to_string())?;
    // Kill it once its ALLOC is well inside the chunk loop.
    let t0 = Instant::now();
    loop {
        let n = sysfs_counter("chunks_allocated")? - start;
        if n >= 16 {
            break;
        }
        ensure(t0.elapsed() < Duration::from_secs(60), || format!("ALLOC made {n} chunks in 60 s"))?;
        std::thread::yield_now();
    }
    child.kill(libc::SIGKILL);
    let at_kill = sysfs_counter("chunks_allocated")?;
    ensure(at_kill - start < chunks, || format!("the {chunks}-chunk ALLOC finished before the kill; cannot test"))?;
    let st = child.wait();
    ensure(libc::WIFSIGNALED(st) && libc::WTERMSIG(st) == libc::SIGKILL, || format!("child: {:?}", describe_status(st)))?;
    let after = sysfs_counter("chunks_allocated")?;
    note(&format!("{} of {chunks} chunks at the kill, {} after it", at_kill - start, after - at_kill));
    ensure(after - at_kill <= 1, || {
        format!("{} chunks allocated after SIGKILL (at most 1 expected: ALLOC must check fatal_signal_pending)", after - at_kill)
    })?;
    dev.settle_to(&base, Duration::from_secs(10))?;
    // A killed ALLOC never existed as far as the peak goes.
    let peak = dev.pool()?.t2_peak;
    if base.t2_peak >= base.t2_used + size {
        note("peak check skipped: an earlier peak is above this ALLOC's size");
    } else {
        ensure(peak == base.t2_peak, || format!("t2_peak went {} -> {peak} through an ALLOC that was killed (peaks must count only ALLOCs that succeeded)", base.t2_peak))?;
    }
    Ok(Outcome::Pass)
}

/// The peak counts pages that existed, never a reservation (issue 37, finding 7): while
/// another process's large ALLOC is inside its chunk loop (its whole size reserved in
/// the pool's figures), a small ALLOC succeeds; the large one is then killed. Its bytes
/// never existed, so t2_peak must not have risen by them (it was raised from the
/// reserved figure, which counted them).
pub fn peak_ignores_allocs_in_flight() -> TestResult {
    const SMALL: u64 = 2 * MIB;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let _cache = no_cache()?;
    let reserve = dev.info()?.reserve;
    let room = mem_available()?.saturating_sub(reserve + 256 * MIB);
    let size = (1536 * MIB).min(room) / GB_CHUNK_SIZE * GB_CHUNK_SIZE;
    ensure(size >= 256 * MIB, || format!("only {} MiB above the reserve", room / MIB))?;
    if base.t2_peak >= base.t2_used + size {
        return Ok(Outcome::Skip(format!("an earlier peak ({} MiB) is above the ALLOC in flight", base.t2_peak / MIB)));
    }
    let (go_r, go_w) = pipe();
    let (mut child, mut r) = allocator(size, std::fs::File::from(go_r), None);
    let mut b = [0u8; 1];
    r.read_exact(&mut b).map_err(|e| format!("child did not open the device: {e}"))?;
    let start = sysfs_counter("chunks_allocated")?;
    std::fs::File::from(go_w).write_all(b"g").map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    while sysfs_counter("chunks_allocated")? - start < 16 {
        ensure(t0.elapsed() < Duration::from_secs(60), || "the large ALLOC made no progress in 60 s".to_string())?;
        std::thread::yield_now();
    }
    let in_flight = dev.pool()?.t2_used;
    let small = dev.alloc(SMALL)?;
    child.kill(libc::SIGKILL);
    let done = sysfs_counter("chunks_allocated")? - start;
    child.wait();
    ensure(done < size / GB_CHUNK_SIZE, || "the large ALLOC finished before the kill; cannot test".to_string())?;
    drop(small);
    dev.settle_to(&base, Duration::from_secs(10))?;
    let peak = dev.pool()?.t2_peak;
    let most = base.t2_peak.max(base.t2_used + SMALL);
    note(&format!("t2_used {} MiB with the large ALLOC in flight; t2_peak {} -> {} MiB", in_flight / MIB, base.t2_peak / MIB, peak / MIB));
    ensure(peak <= most, || {
        format!("t2_peak went {} -> {peak} bytes: above the {most} bytes that existed at once (a {size}-byte ALLOC in flight, then killed, was counted)", base.t2_peak)
    })?;
    Ok(Outcome::Pass)
}

/// Three processes ALLOC at once, each of a size that fits above the reserve alone but
/// not two together: one succeeds, the others get ENOMEM, and available RAM (sampled
/// throughout) never falls below the reserve.
pub fn reserve_concurrent_allocs() -> TestResult {
    const PROCS: usize = 3;
    const MARGIN: u64 = 480 * MIB;
    const EACH: u64 = 320 * MIB;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let _cache = no_cache()?;
    let avail = mem_available()?;
    ensure(avail > MARGIN + 256 * MIB, || format!("only {} MiB available", avail / MIB))?;
    let reserve = (avail - MARGIN) / MIB * MIB;
    let _reserve = ParamGuard::set("reserve_mb", &(reserve / MIB).to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let low = Arc::new(AtomicU64::new(u64::MAX));
    let sampler = {
        let (stop, low) = (stop.clone(), low.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(a) = meminfo("MemAvailable") {
                    low.fetch_min(a, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let (go_r, go_w) = pipe();
    let go = std::fs::File::from(go_r);
    let mut kids = Vec::new();
    // SAFETY: sysconf has no memory-safety preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    for i in 0..PROCS {
        let (child, mut r) = allocator(EACH, go.try_clone().map_err(|e| e.to_string())?, Some(i % cpus));
        let mut b = [0u8; 1];
        r.read_exact(&mut b).map_err(|e| format!("child did not open the device: {e}"))?;
        kids.push((child, r));
    }
    drop(go);
    // One byte each: they all start at once.
    std::fs::File::from(go_w).write_all(&[b'g'; PROCS]).map_err(|e| e.to_string())?;
    let mut codes = Vec::new();
    for (_, r) in kids.iter_mut() {
        let mut b = [255u8; 1];
        let _ = r.read_exact(&mut b);
        codes.push(b[0] as i32);
    }
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let low = low.load(Ordering::Relaxed);
    let names: Vec<String> = codes.iter().map(|&c| errname(c)).collect();
    note(&format!("reserve {} MiB, lowest MemAvailable {} MiB, results {names:?}", reserve / MIB, low / MIB));
    let ok = codes.iter().filter(|&&c| c == 0).count();
    ensure(codes.iter().all(|&c| c == 0 || c == libc::ENOMEM), || format!("unexpected results {names:?}"))?;
    ensure(ok == 1, || format!("{ok} of {PROCS} ALLOCs of {} MiB succeeded with {} MiB above the reserve (exactly 1 fits)", EACH / MIB, MARGIN / MIB))?;
    // MemAvailable moves a little for reasons of its own; a breach is the size of an
    // ALLOC.
    ensure(low + 16 * MIB >= reserve, || format!("available RAM fell to {} MiB, below the reserve of {} MiB", low / MIB, reserve / MIB))?;
    drop(kids);
    dev.settle_to(&base, Duration::from_secs(10))?;
    Ok(Outcome::Pass)
}
