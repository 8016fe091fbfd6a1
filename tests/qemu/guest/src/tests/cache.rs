//! The smaller rules of issue 11: refusals do not keep re-running the watchdog, the
//! pre-zeroed cache gives its pages back to kernel reclaim (a shrinker).

use crate::gb::*;
use crate::harness::*;
use crate::tests::pressure::ParamGuard;
use greenboost_abi::GB_CHUNK_SIZE;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// Waits until the cache holds `bytes`, all zeroed.
fn cache_full(bytes: u64) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        let (cached, zeroed) = (sysfs_counter("t2_cached_bytes")?, sysfs_counter("t2_zeroed_bytes")?);
        if cached == bytes && zeroed == bytes {
            return Ok(());
        }
        ensure(t0.elapsed() < Duration::from_secs(20), || format!("cache at {cached} ({zeroed} zeroed), expected {bytes}"))?;
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A burst of refused ALLOCs (reserve above RAM) does not run the watchdog once per
/// refusal: at most a few kicked runs beside the periodic ones.
pub fn refusals_do_not_rearm_watchdog() -> TestResult {
    const REFUSALS: u32 = 200;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let period = crate::tests::pressure::read_param("watchdog_ms")?.parse::<u64>().map_err(|e| e.to_string())?;
    let ticks0 = sysfs_counter("watchdog_ticks")?;
    let t0 = Instant::now();
    {
        let _reserve = ParamGuard::set("reserve_mb", "1000000")?;
        for _ in 0..REFUSALS {
            expect_errno("ALLOC with the reserve above RAM", dev.try_alloc(GB_CHUNK_SIZE), libc::ENOMEM)?;
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let elapsed = t0.elapsed();
    let ticks = sysfs_counter("watchdog_ticks")? - ticks0;
    // Periodic ticks, one kicked run per 100 ms at most, and slack for the crossings.
    let ms = elapsed.as_millis() as u64;
    let allowed = ms / period + ms / 100 + 4;
    note(&format!("{REFUSALS} refusals in {ms} ms: {ticks} watchdog runs (period {period} ms, at most {allowed} allowed)"));
    ensure(ticks <= allowed, || format!("{ticks} watchdog runs for {REFUSALS} refusals in {ms} ms (each refusal re-armed it)"))?;
    // Let the watchdog see the reserve restored.
    let t1 = Instant::now();
    while dev.pool()?.pressure != 0 {
        ensure(t1.elapsed() < Duration::from_secs(10), || "pressure still on 10 s after the reserve was restored".into())?;
        std::thread::sleep(Duration::from_millis(20));
    }
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

/// Kernel reclaim (here `drop_caches=2`, which runs every shrinker) empties the
/// pre-zeroed cache, and the cache does not refill at once behind it.
pub fn cache_shrinker() -> TestResult {
    let dev = Dev::open()?;
    let target = dev.info()?.cache_target;
    if target == 0 {
        return Ok(Outcome::Skip("cache_mb is 0".into()));
    }
    cache_full(target)?;
    std::fs::write("/proc/sys/vm/drop_caches", "2").map_err(|e| format!("drop_caches: {e}"))?;
    let after = sysfs_counter("t2_cached_bytes")?;
    std::thread::sleep(Duration::from_millis(500));
    let later = sysfs_counter("t2_cached_bytes")?;
    note(&format!("cache {} MiB before reclaim, {} MiB right after, {} MiB 0.5 s later", target / MIB, after / MIB, later / MIB));
    ensure(after == 0, || format!("{after} bytes still cached after drop_caches=2 (no shrinker?)"))?;
    ensure(later < target, || "the cache refilled to its target right behind reclaim".into())?;
    Ok(Outcome::Pass)
}
