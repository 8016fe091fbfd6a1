//! `import` and `vmm`: what the driver answers for foreign DMA-BUFs as external memory,
//! and which host locations cuMemCreate accepts.

use super::*;

/// CUDA_EXTERNAL_MEMORY_HANDLE_DESC with the handle type as a plain number, so that types
/// the headers do not name (DMABUF_FD = 9) can be asked for.
#[repr(C)]
pub(crate) struct ExternalMemoryHandleDesc {
    pub(crate) handle_type: u32,
    /// The handle union (fd, win32 pair, NvSciBuf object): 16 bytes, 8-aligned.
    pub(crate) handle: [u64; 2],
    pub(crate) size: u64,
    pub(crate) flags: u32,
    pub(crate) reserved: [u32; 16],
}

/// A DMA-BUF fd from /dev/udmabuf over a sealed memfd, or the memfd itself where the
/// kernel has no udmabuf; returns (fd, what it is).
pub(crate) fn probe_fd(size: usize) -> Result<(i32, &'static str), String> {
    #[repr(C)]
    struct UdmabufCreate {
        memfd: u32,
        flags: u32,
        offset: u64,
        size: u64,
    }
    /// _IOW('u', 0x42, struct udmabuf_create)
    const UDMABUF_CREATE: libc::c_ulong = 0x4018_7542;
    // SAFETY: plain system calls on fds this function owns.
    unsafe {
        let memfd = libc::memfd_create(c"gb-import-probe".as_ptr(), libc::MFD_ALLOW_SEALING);
        if memfd < 0
            || libc::ftruncate(memfd, size as libc::off_t) != 0
            || libc::fcntl(memfd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) != 0
        {
            return Err(format!("memfd: {}", std::io::Error::last_os_error()));
        }
        let udmabuf = libc::open(c"/dev/udmabuf".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if udmabuf >= 0 {
            let create = UdmabufCreate {
                memfd: memfd as u32,
                flags: 1, /* UDMABUF_FLAGS_CLOEXEC */
                offset: 0,
                size: size as u64,
            };
            let dmabuf = libc::ioctl(udmabuf, UDMABUF_CREATE, &create);
            libc::close(udmabuf);
            if dmabuf >= 0 {
                libc::close(memfd);
                return Ok((dmabuf, "udmabuf"));
            }
        }
        Ok((memfd, "memfd"))
    }
}

/// Asks the driver to import an fd as external memory with both handle types the kmod
/// backend tries, and prints the answers (the driver's behaviour, not a test of ours).
pub(crate) fn import_probe() -> Result<(), String> {
    init_runtime()?;
    type Import = unsafe extern "C" fn(*mut *mut c_void, *const ExternalMemoryHandleDesc) -> i32;
    // SAFETY: libcuda is loaded by cudarc; cuImportExternalMemory has this signature.
    let import: libloading::Symbol<Import> =
        unsafe { cu::culib().get(b"cuImportExternalMemory\0") }.map_err(|e| e.to_string())?;
    const SIZE: usize = 2 * MIB;
    for (label, handle_type) in [("dmabuf_fd", 9u32), ("opaque_fd", 1u32)] {
        let (fd, source) = probe_fd(SIZE)?;
        kv("import.source", source);
        let desc = ExternalMemoryHandleDesc {
            handle_type,
            handle: [fd as u64, 0],
            size: SIZE as u64,
            flags: 0,
            reserved: [0; 16],
        };
        let mut memory: *mut c_void = std::ptr::null_mut();
        // SAFETY: desc is a complete descriptor; on success the driver owns fd.
        let code = unsafe { import(&mut memory, &desc) };
        kv(&format!("import.{label}_code"), code);
        if code == 0 {
            // SAFETY: imported above.
            unsafe { cu::cuDestroyExternalMemory(memory.cast()) };
        } else {
            // SAFETY: the driver did not take the fd.
            unsafe { libc::close(fd) };
        }
    }
    Ok(())
}

/// CUmemAllocationProp with plain numbers, so that any location type can be asked for.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct MemAllocationProp {
    pub(crate) allocation_type: u32,
    pub(crate) requested_handle_types: u32,
    pub(crate) location_type: u32,
    pub(crate) location_id: i32,
    pub(crate) win32_metadata: *mut c_void,
    pub(crate) compression_type: u8,
    pub(crate) gpu_direct_rdma_capable: u8,
    pub(crate) usage: u16,
    pub(crate) reserved: [u8; 4],
}

/// Which host locations the driver's virtual memory management accepts for a physical
/// allocation (what the shim's VMM fallback and PyTorch's expandable segments need), and a
/// kernel writing and checking one such allocation through a mapping.
pub(crate) fn vmm_host_probe(tally: &mut Tally) -> Result<(), String> {
    init_runtime()?;
    let kernels = Kernels::load()?;
    type Attribute = unsafe extern "C" fn(*mut i32, i32, i32) -> i32;
    type Create = unsafe extern "C" fn(*mut u64, usize, *const MemAllocationProp, u64) -> i32;
    type Granularity = unsafe extern "C" fn(*mut usize, *const MemAllocationProp, i32) -> i32;
    // SAFETY: libcuda is loaded by cudarc; these are the driver's signatures with enums as
    // plain integers.
    let lib = unsafe { cu::culib() };
    let (attribute, create, granularity) = unsafe {
        (
            lib.get::<Attribute>(b"cuDeviceGetAttribute\0").map_err(|e| e.to_string())?,
            lib.get::<Create>(b"cuMemCreate\0").map_err(|e| e.to_string())?,
            lib.get::<Granularity>(b"cuMemGetAllocationGranularity\0").map_err(|e| e.to_string())?,
        )
    };
    for (name, id) in [
        ("host_numa_id", 134),
        ("numa_id", 131),
        ("host_numa_vmm_supported", 141),
        ("host_vmm_supported", 145),
        ("vmm_supported", 102),
    ] {
        let mut value = -1;
        // SAFETY: out-parameter.
        let code = unsafe { attribute(&mut value, id, 0) };
        kv(&format!("vmm.attr.{name}"), if code == 0 { value.to_string() } else { format!("error{code}") });
    }
    let mut node = -1;
    // SAFETY: out-parameter.
    unsafe { attribute(&mut node, 134, 0) };
    let base = MemAllocationProp {
        allocation_type: 1, // CU_MEM_ALLOCATION_TYPE_PINNED
        requested_handle_types: 0,
        location_type: 0,
        location_id: 0,
        win32_metadata: std::ptr::null_mut(),
        compression_type: 0,
        gpu_direct_rdma_capable: 0,
        usage: 0,
        reserved: [0; 4],
    };
    let mut working = None;
    // (label, location type, id): HOST_NUMA on the device's node (0 when it has none),
    // HOST_NUMA_CURRENT, HOST (CUDA 13), DEVICE for comparison.
    for (label, location_type, id) in
        [("host_numa", 3u32, node.max(0)), ("host_numa_current", 4, 0), ("host", 2, 0), ("device", 1, 0)]
    {
        for (handles_label, handles) in [("none", 0u32), ("posix_fd", 1u32)] {
            let prop = MemAllocationProp { location_type, location_id: id, requested_handle_types: handles, ..base };
            let mut grain = 0usize;
            // SAFETY: out-parameter; 0 = CU_MEM_ALLOC_GRANULARITY_MINIMUM.
            let code = unsafe { granularity(&mut grain, &prop, 0) };
            let size = if code == 0 && grain > 0 { (64 * MIB).div_ceil(grain) * grain } else { 64 * MIB };
            let mut handle = 0u64;
            // SAFETY: a complete property struct; out-parameter.
            let code = unsafe { create(&mut handle, size, &prop, 0) };
            kv(&format!("vmm.create.{label}.{handles_label}"), format!("{code} (granularity {grain})"));
            if code == 0 {
                if working.is_none() && location_type != 1 {
                    working = Some((label, handle, size));
                } else {
                    // SAFETY: created above, never mapped.
                    unsafe { cu::cuMemRelease(handle) };
                }
            }
        }
    }
    let Some((label, handle, size)) = working else {
        tally.record(
            "vmm.host_kernel",
            false,
            "the driver created no host-located VMM allocation (see the vmm.create codes)",
        );
        return Ok(());
    };
    // Map it, give the device access, and write and check it with the kernels.
    let mut va: cu::CUdeviceptr = 0;
    // SAFETY: reserve, map and set access on the range created above; undone below.
    let result = unsafe {
        cu_check("cuMemAddressReserve", cu::cuMemAddressReserve(&mut va, size, 0, 0, 0))
            .and_then(|_| cu_check("cuMemMap", cu::cuMemMap(va, size, 0, handle, 0)))
            .and_then(|_| {
                let access = cu::CUmemAccessDesc {
                    location: cu::CUmemLocation { type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: 0 },
                    flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                };
                cu_check("cuMemSetAccess", cu::cuMemSetAccess(va, size, &access, 1))
            })
            .and_then(|_| kernels.fill(va as *mut c_void, size, 0, 0x7777, std::ptr::null_mut()))
            .and_then(|_| kernels.check(va as *mut c_void, size, 0, 0x7777, std::ptr::null_mut()))
            .and_then(|(bad, _)| readback(va as *mut c_void, size, 0x7777).map(|_| bad))
    };
    let placement = driver_placement(va as *mut c_void).map(|p| format!("{p:?}")).unwrap_or_else(|e| e);
    kv("vmm.host_pointer_memory_type", &placement);
    tally.record("vmm.host_kernel", matches!(result, Ok(0)), match &result {
        Ok(0) => format!("{label} allocation of {} mapped, written and checked by kernels, read back (pointer memory type {placement})", size / MIB),
        Ok(bad) => format!("{label}: {bad} elements differ"),
        Err(e) => format!("{label}: {e}"),
    });
    // SAFETY: undoing the mapping made above (each step tolerates the earlier ones failing).
    unsafe {
        cu::cuMemUnmap(va, size);
        cu::cuMemAddressFree(va, size);
        cu::cuMemRelease(handle);
    }
    Ok(())
}
