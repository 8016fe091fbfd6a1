//! Allocation-failure injection on ALLOC's error paths (issue 11): the debug test kernel's
//! fail_page_alloc and failslab, confined by their stack-trace filter to calls made from
//! the module's text (and, where a probability is used, to this task), make chosen
//! allocations fail. Every refused ALLOC is an ENOMEM, leaves the pool at its baseline,
//! and a normal ALLOC works afterwards. The stock kernel has no fault injection: SKIP.

use crate::gb::*;
use crate::harness::*;
use crate::tests::fault::{have_madvise, madvise};
use crate::tests::killable::no_cache;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const DEBUGFS: &str = "/sys/kernel/debug";
const ATTRS: [&str; 2] = ["fail_page_alloc", "failslab"];
/// fail_page_alloc's `space` counts pages (`1 << order` a call), failslab's bytes.
const CHUNK_PAGES: u64 = 512;

fn write(path: &str, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("write {value} to {path}: {e}"))
}

/// The module's text, [start, end): from the lowest to past the highest of its text
/// symbols in /proc/kallsyms (every ALLOC enters through gb_ioctl, among them).
fn module_text() -> Result<(u64, u64), String> {
    let syms = std::fs::read_to_string("/proc/kallsyms").map_err(|e| format!("/proc/kallsyms: {e}"))?;
    let addrs: Vec<u64> = syms
        .lines()
        .filter(|l| l.ends_with("[greenboost]"))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            matches!(f.next()?, "t" | "T").then_some(addr)
        })
        .filter(|&a| a != 0)
        .collect();
    match (addrs.iter().min(), addrs.iter().max()) {
        (Some(&lo), Some(&hi)) => Ok((lo, hi + 0x1000)),
        _ => Err("no greenboost text symbols with addresses in /proc/kallsyms".into()),
    }
}

/// Both fault attributes set up for the module's text (GFP_KERNEL and highmem allocations
/// and every order included) with probability 0; dropped: back to the kernel's defaults,
/// and this task's make-it-fail and fail-nth cleared.
struct Injection;

impl Injection {
    fn setup() -> Result<Option<Injection>, String> {
        if !std::path::Path::new(&format!("{DEBUGFS}/fail_page_alloc")).exists() {
            return Ok(None);
        }
        let (start, end) = module_text()?;
        let inj = Injection;
        for a in ATTRS {
            let d = format!("{DEBUGFS}/{a}");
            write(&format!("{d}/probability"), "0")?;
            write(&format!("{d}/verbose"), "0")?;
            write(&format!("{d}/times"), "-1")?;
            write(&format!("{d}/space"), "0")?;
            write(&format!("{d}/interval"), "1")?;
            write(&format!("{d}/task-filter"), "Y")?;
            write(&format!("{d}/ignore-gfp-wait"), "N")?;
            write(&format!("{d}/stacktrace-depth"), "32")?;
            write(&format!("{d}/require-start"), &start.to_string())?;
            write(&format!("{d}/require-end"), &end.to_string())?;
        }
        write(&format!("{DEBUGFS}/fail_page_alloc/ignore-gfp-highmem"), "N")?;
        write(&format!("{DEBUGFS}/fail_page_alloc/min-order"), "0")?;
        Ok(Some(inj))
    }

    fn set(&self, attr: &str, knob: &str, value: &str) -> Result<(), String> {
        write(&format!("{DEBUGFS}/{attr}/{knob}"), value)
    }
}

impl Drop for Injection {
    fn drop(&mut self) {
        let _ = write("/proc/self/make-it-fail", "0");
        let _ = write("/proc/thread-self/fail-nth", "0");
        for a in ATTRS {
            let d = format!("{DEBUGFS}/{a}");
            for (knob, v) in [
                ("probability", "0"),
                ("times", "1"),
                ("space", "0"),
                ("interval", "1"),
                ("verbose", "2"),
                ("task-filter", "N"),
                ("ignore-gfp-wait", "Y"),
                ("require-start", "0"),
                ("require-end", "18446744073709551615"),
            ] {
                let _ = write(&format!("{d}/{knob}"), v);
            }
        }
        let _ = write(&format!("{DEBUGFS}/fail_page_alloc/ignore-gfp-highmem"), "Y");
        let _ = write(&format!("{DEBUGFS}/fail_page_alloc/min-order"), "1");
    }
}

const NO_INJECTION: &str = "no /sys/kernel/debug/fail_page_alloc (fault injection is on the rust debug kernel only)";

/// One ALLOC of `size` with `attr` failing with probability 100 for this task; the
/// chunks it allocated before failing (sysfs chunks_allocated).
fn alloc_failing(dev: &Dev, inj: &Injection, attr: &str, size: u64) -> Result<(Result<Buffer, i32>, u64), String> {
    let before = sysfs_counter("chunks_allocated")?;
    write("/proc/self/make-it-fail", "1")?;
    inj.set(attr, "probability", "100")?;
    let r = dev.try_alloc(size);
    inj.set(attr, "probability", "0")?;
    write("/proc/self/make-it-fail", "0")?;
    Ok((r, sysfs_counter("chunks_allocated")? - before))
}

/// Refused ALLOCs at the first chunk, mid-loop, and in the slab path (chunk list, buffer,
/// DMA-BUF export): ENOMEM, baseline afterwards, then a normal ALLOC works.
pub fn alloc_fault_injection_enomem() -> TestResult {
    let Some(inj) = Injection::setup()? else { return Ok(Outcome::Skip(NO_INJECTION.into())) };
    let _cache = no_cache()?;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let size = 16 * MIB;
    let cases: [(&str, &str, &str, u64); 3] = [
        // every page allocation fails: nothing is allocated at any order
        ("first chunk", "fail_page_alloc", "0", 0),
        // three 2 MiB chunks pass, then every order fails
        ("mid-loop", "fail_page_alloc", &(3 * CHUNK_PAGES + 1).to_string(), 1),
        // every slab allocation from the module's ioctl fails
        ("slab", "failslab", "0", 0),
    ];
    for (what, attr, space, min_chunks) in cases {
        inj.set(attr, "space", space)?;
        let (r, chunks) = alloc_failing(&dev, &inj, attr, size)?;
        inj.set(attr, "space", "0")?;
        note(&format!("{what}: {} after {chunks} chunks", r.as_ref().map_or_else(|e| errname(*e), |_| "ok".into())));
        expect_errno(&format!("ALLOC({size}) with {attr} failing at the {what}"), r.map(|b| b.size), libc::ENOMEM)?;
        ensure(chunks >= min_chunks, || format!("{what}: {chunks} chunks allocated before the failure, expected at least {min_chunks}"))?;
        if what == "first chunk" {
            ensure(chunks == 0, || format!("{chunks} chunks allocated with every page allocation failing"))?;
        }
        dev.settle_to(&base, Duration::from_secs(10)).map_err(|e| format!("after the {what} failure: {e}"))?;
    }
    drop(inj);
    let buf = dev.alloc(size)?;
    buf.map()?.verify_zero(page_words())?;
    drop(buf);
    dev.settle_to(&base, Duration::from_secs(10))?;
    Ok(Outcome::Pass)
}

/// fail-nth sweep: the Nth allocation (page or slab) made under the module's ioctl
/// fails, for N = 1, 2, ... until an ALLOC runs without reaching its Nth: each is an
/// ENOMEM or (a failed 2 MiB page falling back to a lower order) a working buffer, and
/// the pool is at its baseline after each.
pub fn alloc_fail_nth_sweep() -> TestResult {
    let Some(inj) = Injection::setup()? else { return Ok(Outcome::Skip(NO_INJECTION.into())) };
    for a in ATTRS {
        inj.set(a, "task-filter", "N")?;
    }
    let _cache = no_cache()?;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let size = 6 * MIB + page_size();
    let (mut refused, mut ok) = (0, 0);
    for n in 1..=400 {
        write("/proc/thread-self/fail-nth", &n.to_string())?;
        let r = dev.try_alloc(size);
        let left = std::fs::read_to_string("/proc/thread-self/fail-nth").map_err(|e| format!("fail-nth: {e}"))?;
        write("/proc/thread-self/fail-nth", "0")?;
        match r {
            Err(libc::ENOMEM) => refused += 1,
            Err(e) => return Err(format!("fail-nth {n}: ALLOC({size}) {} (expected ENOMEM)", errname(e))),
            Ok(buf) => {
                let map = buf.map()?;
                map.fill(n, page_words());
                map.verify(n, page_words()).map_err(|e| format!("fail-nth {n}: {e}"))?;
                ok += 1;
            }
        }
        dev.settle_to(&base, Duration::from_secs(10)).map_err(|e| format!("after fail-nth {n}: {e}"))?;
        if left.trim() != "0" {
            note(&format!("{} fault points: {refused} ENOMEM, {ok} completed", n - 1));
            ensure(refused > 0, || "no injected failure refused an ALLOC".into())?;
            return Ok(Outcome::Pass);
        }
    }
    Err("ALLOC still reached its 400th allocation".into())
}

/// Fragmented memory, forced: after two 2 MiB chunks every 2 MiB allocation of this task
/// fails (min-order 9), so the ALLOC falls back to 1 MiB chunks for the rest. The buffer
/// is whole (every page written and read back through mmap, zero first), the importer's
/// sg table covers it with mixed segment sizes, and freeing returns to the baseline.
pub fn alloc_lower_order_fallback() -> TestResult {
    let Some(inj) = Injection::setup()? else { return Ok(Outcome::Skip(NO_INJECTION.into())) };
    let imp = crate::tests::importer::importer()?;
    let _cache = no_cache()?;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let size = 16 * MIB;
    inj.set("fail_page_alloc", "min-order", "9")?;
    inj.set("fail_page_alloc", "space", &(2 * CHUNK_PAGES + 1).to_string())?;
    let (r, chunks) = alloc_failing(&dev, &inj, "fail_page_alloc", size)?;
    drop(inj);
    let buf = r.map_err(|e| format!("ALLOC({size}) with 2 MiB pages failing: {} (expected a lower-order fallback)", errname(e)))?;
    // 2 x 2 MiB + 12 x 1 MiB; 8 chunks would mean no fallback happened.
    ensure(chunks == 14, || format!("{chunks} chunks for 16 MiB, expected 2 of 2 MiB and 12 of 1 MiB"))?;
    let map = buf.map()?;
    map.verify_zero(page_words())?;
    map.fill(0xfa11, page_words());
    map.verify(0xfa11, page_words())?;
    // Every page zapped and faulted back: the fault handler finds each page of a
    // mixed-order buffer (runs of 2 MiB, then 1 MiB chunks). Kernels without madvise
    // skip this step.
    if have_madvise() {
        madvise(map.ptr(), map.len(), libc::MADV_DONTNEED)?;
        map.verify(0xfa11, page_words()).map_err(|e| format!("after MADV_DONTNEED and re-faulting: {e}"))?;
    }
    let last = map.words() - 1;
    let c = crate::tests::importer::check(&imp, buf.raw(), 0).map_err(|e| format!("importer attach/map: {}", errname(e)))?;
    note(&format!("{} CPU segments ({}..{} bytes), {} DMA segments, map limit {}", c.cpu_nents, c.min_seg, c.max_seg, c.dma_nents, c.map_limit));
    ensure(c.cpu_total == size && c.dma_total == size, || format!("sg table covers {} (DMA {}) of {size} bytes", c.cpu_total, c.dma_total))?;
    ensure(c.all_page_multiple == 1, || "an sg segment is not page-aligned".into())?;
    if c.map_limit >= 2 * MIB && c.seg_limit >= 2 * MIB {
        ensure(c.max_seg >= 2 * MIB && c.min_seg <= MIB, || format!("segments {}..{} bytes, expected 2 MiB and 1 MiB ones", c.min_seg, c.max_seg))?;
    }
    ensure(c.sg_first == map.read_u64(0) && c.sg_last == map.read_u64(last), || {
        format!("through the sg pages the importer reads {:#x}..{:#x}, userspace wrote {:#x}..{:#x}", c.sg_first, c.sg_last, map.read_u64(0), map.read_u64(last))
    })?;
    drop(map);
    drop(buf);
    dev.settle_to(&base, Duration::from_secs(10))?;
    Ok(Outcome::Pass)
}
