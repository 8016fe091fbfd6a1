//! DMA-BUF attachments as importers see them (tests/qemu/importer): segments within
//! the importing device's limits, several attachments at once, begin/end_cpu_access
//! carrying CPU and device writes across (through swiotlb bounce buffers when the
//! guest bounces), an attachment and a vmap that outlive every user fd, and the
//! importer's release racing the buffer's last close.

use crate::gb::*;
use crate::harness::*;
use crate::tests::importer::*;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// Every segment, CPU and DMA, is within what the device takes in one piece.
pub fn segments_within_limits() -> TestResult {
    let imp = importer()?;
    let dev = Dev::open()?;
    for size in [2 * MIB + page_size(), 17 * MIB + 3] {
        let buf = dev.alloc(size)?;
        let map = buf.map()?;
        let last = map.words() - 1;
        map.write_u64(0, 0x5e65_0000 + size);
        map.write_u64(last, 0x5e65_ffff + size);
        for flags in [0, SEG_64K] {
            let c = check(&imp, buf.raw(), flags).map_err(|e| format!("importer (flags {flags:#x}) on a {size}-byte buffer: {}", errname(e)))?;
            let limit = c.seg_limit.min(c.map_limit);
            note(&format!(
                "size {size}, device limit {limit} (max_seg {}, max_mapping {}): {} CPU segments up to {}, {} DMA segments up to {}{}",
                c.seg_limit, c.map_limit, c.cpu_nents, c.max_seg, c.dma_nents, c.max_dma_seg, if c.bounced == 1 { ", bounced" } else { "" }
            ));
            ensure(flags != SEG_64K || c.seg_limit == 64 << 10, || format!("the importer's SEG_64K gave a limit of {}", c.seg_limit))?;
            ensure(c.max_seg <= limit && c.max_dma_seg <= limit, || {
                format!("a segment of {} bytes (DMA {}) exceeds the device's limit of {limit}: the exporter ignored dma_get_max_seg_size/dma_max_mapping_size", c.max_seg, c.max_dma_seg)
            })?;
            ensure(c.cpu_total == buf.size && c.dma_total == buf.size, || format!("segments cover {} (DMA {}) of {} bytes", c.cpu_total, c.dma_total, buf.size))?;
            ensure(c.all_page_multiple == 1, || "a segment is not page-aligned".into())?;
            ensure(c.sg_first == map.read_u64(0) && c.sg_last == map.read_u64(last), || format!("through the sg pages: {:#x}..{:#x}", c.sg_first, c.sg_last))?;
        }
    }
    Ok(Outcome::Pass)
}

/// Three attachments mapped at once; a CPU write reaches the device after
/// end_cpu_access and a device write reaches the CPU after begin_cpu_access.
pub fn attachments_and_cpu_syncs() -> TestResult {
    let imp = importer()?;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let buf = dev.alloc(4 * MIB)?;
    let c = check(&imp, buf.raw(), ATTACH3 | SYNC).map_err(|e| format!("importer with three attachments and the sync check: {}", errname(e)))?;
    note(&format!("{} attachments, first segment {}", c.attachments, if c.bounced == 1 { "bounced (swiotlb)" } else { "not bounced: the syncs have nothing to copy" }));
    ensure(c.attachments == 3, || format!("{} attachments mapped", c.attachments))?;
    ensure(c.dev_saw == CPU_MARK, || format!("the device read {:#x} after the CPU wrote {CPU_MARK:#x} and end_cpu_access: no sync for the device", c.dev_saw))?;
    ensure(c.cpu_saw == DEV_MARK, || format!("the CPU read {:#x} after the device wrote {DEV_MARK:#x} and begin_cpu_access: no sync for the CPU", c.cpu_saw))?;
    let map = buf.map()?;
    ensure(map.read_u64(0) == CPU_MARK && map.read_u64(map.words() - 1) == DEV_MARK, || {
        format!("userspace sees {:#x}..{:#x} after the importer is done", map.read_u64(0), map.read_u64(map.words() - 1))
    })?;
    drop((map, buf));
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

/// An importer's attachment and vmap keep the buffer alive after its last fd and
/// mapping are gone; their release frees it. Then the release races the last close.
pub fn held_past_close() -> TestResult {
    let imp = importer()?;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let buf = dev.alloc(4 * MIB)?;
    {
        let map = buf.map()?;
        map.write_u64(0, 0x401d_0001);
    }
    check(&imp, buf.raw(), HOLD).map_err(|e| format!("importer HOLD: {}", errname(e)))?;
    let size = buf.size;
    drop(buf);
    std::thread::sleep(Duration::from_millis(50));
    let st = dev.pool()?;
    ensure(st.buffers == base.buffers + 1 && st.t2_used == base.t2_used + size, || {
        format!("with only the importer holding it, the pool shows {} buffers / {} bytes (baseline {} / {})", st.buffers, st.t2_used, base.buffers, base.t2_used)
    })?;
    let c = check(&imp, -1, RELEASE).map_err(|e| format!("importer RELEASE: {}", errname(e)))?;
    ensure(c.vmap_first == 0x401d_0001, || format!("through the vmap held past close: {:#x}", c.vmap_first))?;
    dev.settle_to(&base, Duration::from_secs(5))?;
    // The importer's release (detach, vunmap, put) racing the buffer's last close.
    for i in 0..20u64 {
        let buf = dev.alloc(2 * MIB)?;
        check(&imp, buf.raw(), HOLD).map_err(|e| format!("round {i}: HOLD: {}", errname(e)))?;
        let imp_fd = std::os::fd::AsRawFd::as_raw_fd(&imp);
        let releaser = std::thread::spawn(move || {
            let mut c = ImporterCheck { fd: -1, flags: RELEASE, ..Default::default() };
            raw_ioctl(imp_fd, GB_IMPORTER_IOC_CHECK, &mut c as *mut ImporterCheck as usize)
        });
        if i % 2 == 0 {
            std::thread::yield_now();
        }
        drop(buf);
        releaser.join().map_err(|_| "releaser thread panicked".to_string())?.map_err(|e| format!("round {i}: RELEASE: {}", errname(e)))?;
    }
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}
