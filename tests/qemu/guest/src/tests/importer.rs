//! A second driver imports the DMA-BUF (tests/qemu/importer, /dev/gb_importer): attach,
//! map the attachment, walk the sg table, read through the sg pages and through vmap.

use crate::gb::*;
use crate::harness::*;

const IMPORTER_PATH: &str = "/dev/gb_importer";
const MIB: u64 = 1 << 20;

/// Mirror of `struct gb_importer_check` (tests/qemu/importer/gb_importer.h).
#[repr(C)]
#[derive(Default, Debug)]
pub struct ImporterCheck {
    pub fd: i32,
    pub flags: u32,
    pub dmabuf_size: u64,
    pub cpu_total: u64,
    pub cpu_nents: u64,
    pub dma_total: u64,
    pub dma_nents: u64,
    pub min_seg: u64,
    pub max_seg: u64,
    pub all_page_multiple: u32,
    pub vmap_ok: u32,
    pub vmap_err: i32,
    pub map2_err: i32,
    pub sg_first: u64,
    pub sg_last: u64,
    pub vmap_first: u64,
    pub vmap_last: u64,
    pub seg_limit: u64,
    pub map_limit: u64,
    pub max_dma_seg: u64,
    pub bounced: u32,
    pub attachments: u32,
    pub dev_saw: u64,
    pub cpu_saw: u64,
}

const _: () = assert!(std::mem::size_of::<ImporterCheck>() == 160);
/// _IOWR(0xB8, 0x01, struct gb_importer_check)
pub const GB_IMPORTER_IOC_CHECK: u32 = (3 << 30) | (160 << 16) | (0xB8 << 8) | 0x01;
pub const SEG_64K: u32 = 1 << 0;
pub const ATTACH3: u32 = 1 << 1;
pub const SYNC: u32 = 1 << 2;
pub const HOLD: u32 = 1 << 3;
pub const RELEASE: u32 = 1 << 4;
pub const MAP_TWICE: u32 = 1 << 5;
pub const CPU_MARK: u64 = 0xc0ff_ee00_c0ff_ee00;
pub const DEV_MARK: u64 = 0xdec0_de00_dec0_de00;

/// The importer device.
pub fn importer() -> Result<std::os::fd::OwnedFd, String> {
    open_path(IMPORTER_PATH, libc::O_RDWR).map_err(|e| format!("open {IMPORTER_PATH}: {} (guest-suite.sh loads gb_importer.ko)", errname(e)))
}

/// One importer ioctl on DMA-BUF `fd` with `flags`.
pub fn check(imp: &std::os::fd::OwnedFd, fd: i32, flags: u32) -> Result<ImporterCheck, i32> {
    let mut c = ImporterCheck { fd, flags, ..Default::default() };
    raw_ioctl(std::os::fd::AsRawFd::as_raw_fd(imp), GB_IMPORTER_IOC_CHECK, &mut c as *mut ImporterCheck as usize)?;
    Ok(c)
}

pub fn importer_sg_table() -> TestResult {
    let imp = open_path(IMPORTER_PATH, libc::O_RDWR)
        .map_err(|e| format!("open {IMPORTER_PATH}: {} (guest-suite.sh loads gb_importer.ko)", errname(e)))?;
    let dev = Dev::open()?;
    for size in [page_size(), 2 * MIB, 2 * MIB + page_size(), 17 * MIB + 3] {
        let buf = dev.alloc(size)?;
        let map = buf.map()?;
        let last = map.words() - 1;
        map.write_u64(0, 0xf125_7000 + size);
        map.write_u64(last, 0x1a57_0000 + size);
        let mut c = ImporterCheck { fd: buf.raw(), ..Default::default() };
        raw_ioctl(std::os::fd::AsRawFd::as_raw_fd(&imp), GB_IMPORTER_IOC_CHECK, &mut c as *mut ImporterCheck as usize)
            .map_err(|e| format!("importer attach/map of a {size}-byte buffer: {}", errname(e)))?;
        note(&format!("size {size}: {} CPU segments ({}..{} bytes), {} DMA segments, vmap {}",
            c.cpu_nents, c.min_seg, c.max_seg, c.dma_nents, if c.vmap_ok == 1 { "ok".to_string() } else { errname(-c.vmap_err) }));
        ensure(c.dmabuf_size == buf.size, || format!("dma_buf size {} != alloc_size {}", c.dmabuf_size, buf.size))?;
        ensure(c.cpu_total == buf.size, || format!("sg table covers {} bytes, buffer is {}", c.cpu_total, buf.size))?;
        ensure(c.dma_total == buf.size, || format!("DMA-mapped segments cover {} bytes, buffer is {}", c.dma_total, buf.size))?;
        ensure(c.cpu_nents >= 1 && c.cpu_nents <= buf.size / page_size(), || format!("{} sg entries for {} pages", c.cpu_nents, buf.size / page_size()))?;
        ensure(c.all_page_multiple == 1, || "an sg segment is not page-aligned".into())?;
        // 2 MiB compound pages: a buffer of at least 2 MiB needs far fewer entries than pages
        // (falling back to small pages only under fragmentation, which a fresh guest lacks),
        // unless the mapping limit is smaller (swiotlb: 256 KiB).
        if buf.size >= 2 * MIB && c.map_limit >= 2 * MIB {
            ensure(c.max_seg >= 2 * MIB, || format!("largest segment {} bytes: buffer not built from 2 MiB pages", c.max_seg))?;
        }
        ensure(c.sg_first == map.read_u64(0) && c.sg_last == map.read_u64(last), || {
            format!("through the sg pages the importer reads {:#x}..{:#x}, userspace wrote {:#x}..{:#x}", c.sg_first, c.sg_last, map.read_u64(0), map.read_u64(last))
        })?;
        ensure(c.vmap_ok == 1, || format!("dma_buf_vmap: {}", errname(-c.vmap_err)))?;
        ensure(c.vmap_first == map.read_u64(0) && c.vmap_last == map.read_u64(last), || {
            format!("through vmap the importer reads {:#x}..{:#x}", c.vmap_first, c.vmap_last)
        })?;
    }
    // Not a DMA-BUF: the importer's dma_buf_get refuses it, nothing is attached.
    let (r, _w) = pipe();
    let mut c = ImporterCheck { fd: std::os::fd::AsRawFd::as_raw_fd(&r), ..Default::default() };
    expect_errno("importer with a pipe fd", raw_ioctl(std::os::fd::AsRawFd::as_raw_fd(&imp), GB_IMPORTER_IOC_CHECK, &mut c as *mut ImporterCheck as usize), libc::EINVAL)?;
    Ok(Outcome::Pass)
}

/// An importer's vmap of a large buffer (a fifth of RAM, within the default per-user
/// cap) maps it whole, read through at both ends, with no kernel complaint: the
/// dma-buf core WARNs on any vmap the exporter refuses, so a size limit would WARN.
/// Where every DMA mapping bounces (swiotlb=force, the rust guest) the importer's DMA
/// map of the same buffer needs it to fit the 64 MiB bounce pool: 48 MiB there.
pub fn importer_vmap_large() -> TestResult {
    let imp = importer()?;
    let dev = Dev::open()?;
    let ram = meminfo("MemTotal").ok_or("no MemTotal")?;
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let bounced = cmdline.split_whitespace().any(|word| word == "swiotlb=force");
    let size = if bounced { 48 * MIB } else { round_up(ram / 5, 2 * MIB) };
    let buf = dev.alloc(size)?;
    let map = buf.map()?;
    let last = map.words() - 1;
    map.write_u64(0, 0x7a57_0000);
    map.write_u64(last, 0x7a57_0001);
    let c = check(&imp, buf.raw(), 0).map_err(|e| format!("importer attach/map of a {size}-byte buffer: {}", errname(e)))?;
    note(&format!("RAM {} MiB: vmap of a {} MiB buffer: {}", ram / MIB, size / MIB,
        if c.vmap_ok == 1 { "ok".to_string() } else { errname(-c.vmap_err) }));
    ensure(c.vmap_ok == 1, || format!("vmap of {size} bytes: {}", errname(-c.vmap_err)))?;
    ensure(c.vmap_first == 0x7a57_0000 && c.vmap_last == 0x7a57_0001, || {
        format!("through the vmap the importer reads {:#x}..{:#x}", c.vmap_first, c.vmap_last)
    })?;
    Ok(Outcome::Pass)
}

/// An importer that maps one attachment a second time while it is mapped gets EBUSY
/// (issue 37, second check): the second map DMA-mapped the same table again and, for a
/// T3 buffer, handed out the table that the first unmap frees (a use-after-free at the
/// second unmap). The first mapping keeps working.
fn map_twice_refused(t3: bool) -> TestResult {
    let imp = importer()?;
    let dev = Dev::open()?;
    let buf = if t3 { dev.try_alloc_t3(4 * MIB).map_err(|e| format!("T3 ALLOC: {}", errname(e)))? } else { dev.alloc(4 * MIB)? };
    let map = buf.map()?;
    map.write_u64(0, 0x2a_2a2a);
    let c = check(&imp, buf.raw(), MAP_TWICE).map_err(|e| format!("importer attach/map: {}", errname(e)))?;
    ensure(c.map2_err == -libc::EBUSY, || {
        format!("a second map of a mapped attachment answered {}, expected EBUSY", if c.map2_err == 0 { "success".into() } else { errname(-c.map2_err) })
    })?;
    ensure(c.sg_first == 0x2a_2a2a, || format!("through the first mapping's table the importer reads {:#x}", c.sg_first))?;
    Ok(Outcome::Pass)
}

pub fn importer_map_twice() -> TestResult {
    map_twice_refused(false)
}

pub fn t3_importer_map_twice() -> TestResult {
    map_twice_refused(true)
}
