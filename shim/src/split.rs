//! Split placement: an allocation that does not fit the VRAM budget gets one virtual
//! address range whose head is VRAM (as much as still fits under the budget) and whose
//! tail is pinned host memory on the GPU's NUMA node, both made with the driver's VMM
//! (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess).
//!
//! Why: llama.cpp and ollama put all the weights on a GPU in one cudaMalloc. Sent whole
//! to T2, every byte is then read over PCIe while the VRAM under the budget stays idle;
//! split, the head is read from VRAM.
//!
//! The head counts as T1 (the device's VRAM counter, so later allocations see the budget
//! used, and the T1 stats), the tail as T2 (within the T2 cap). The tail is the driver's
//! host-NUMA memory, not backend memory. Any failing step undoes the ones before it and
//! the caller takes the whole-T2 path.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::cuda::{self, call, DriverApi};
use crate::driver::on_host_numa;
use crate::ffi::*;
use crate::log::Mib;
use crate::state::{self, STATS};
use crate::tiers;

/// cudaMalloc documents 256-byte alignment but hands out allocations this large 2 MiB
/// aligned; a split range is aligned at least as well, whatever the granularity.
const MIN_ALIGNMENT: u64 = 2 << 20;

/// One VMM handle mapped into a split allocation's range.
struct Piece {
    handle: CuMemGenericAllocationHandle,
    /// Mapped bytes, a multiple of the granularity.
    size: u64,
}

/// A live split allocation: `head` (device memory) mapped at `base`, `tail` (host NUMA
/// memory) right after it; the reserved range is exactly `head.size + tail.size`.
pub struct SplitAllocation {
    base: CuDevicePtr,
    head: Piece,
    tail: Piece,
    device: CuDevice,
    /// The context the range was made in (as an address: contexts are opaque).
    context: usize,
}

/// Where a split attempt stopped, for the log.
struct Failure {
    step: &'static str,
    status: CuResult,
}

fn failed(step: &'static str, status: CuResult) -> Failure {
    Failure { step, status }
}

/// Checks a driver call's status; `step` names it in the log.
fn check(step: &'static str, status: CuResult) -> Result<(), Failure> {
    if status == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(failed(step, status))
    }
}

/// Splits an allocation of `size` bytes for `device` in the current context when it is
/// at least GREENBOOST_SPLIT_MIN and at least one granule of VRAM is left under the
/// placement limit. `None`: not split, nothing held; the caller puts it wholly in T2.
pub fn create(size: u64, device: CuDevice) -> Option<SplitAllocation> {
    if !state::config().may_split(size) {
        return None;
    }
    let driver = cuda::api();
    let context = driver.current_context()?;
    let on_device = device_memory(device);
    let node = driver.host_numa_node(device).unwrap_or(0);
    let on_host = on_host_numa(on_device, node);
    let granularity = match granularity(driver, &[&on_device, &on_host]) {
        Ok(granularity) => granularity,
        Err(failure) => {
            report_fallback(size, &failure);
            return None;
        }
    };
    let total = size.checked_next_multiple_of(granularity)?;
    // The head leaves at least one granule to the tail: an allocation that fits whole
    // would have gone to VRAM.
    let head_size = tiers::reserve_vram_head(device, granularity, total - granularity)?;
    let tail_size = total - head_size;
    if !tiers::take_t2_capacity(tail_size) {
        tiers::unreserve_vram(device, head_size);
        return None;
    }
    let mut building = Building {
        driver,
        head_size,
        tail_size,
        base: 0,
        head: None,
        tail: None,
        head_mapped: false,
        tail_mapped: false,
    };
    let (head, tail) = match building.run(device, &on_device, &on_host, granularity) {
        Ok(handles) => handles,
        Err(failure) => {
            building.undo();
            tiers::unreserve_vram(device, head_size);
            tiers::give_back_t2_capacity(tail_size);
            report_fallback(size, &failure);
            return None;
        }
    };
    tiers::count_vram_head(head_size, device);
    STATS.split_allocs.fetch_add(1, Ordering::Relaxed);
    debug!(
        "split {:#x}: {} = {} VRAM + {} on host NUMA node {} for device {}",
        building.base,
        Mib(size),
        Mib(head_size),
        Mib(tail_size),
        node,
        device
    );
    Some(SplitAllocation {
        base: building.base,
        head: Piece { handle: head, size: head_size },
        tail: Piece { handle: tail, size: tail_size },
        device,
        context: context as usize,
    })
}

impl SplitAllocation {
    /// The device pointer the program was given.
    pub fn base(&self) -> CuDevicePtr {
        self.base
    }

    pub fn context(&self) -> CuContext {
        self.context as CuContext
    }

    /// [start, end) of the T2 part.
    pub fn tail_range(&self) -> (CuDevicePtr, CuDevicePtr) {
        let start = self.base + self.head.size;
        (start, start + self.tail.size)
    }

    /// Unmaps and releases both pieces and frees the range. The caller has made the
    /// context current and waited until the device is past every use.
    pub fn unmap(&self, driver: &DriverApi) {
        let (tail_at, _) = self.tail_range();
        let steps = [
            ("cuMemUnmap (device)", call!(driver, mem_unmap(self.base, self.head.size as usize))),
            ("cuMemUnmap (host NUMA)", call!(driver, mem_unmap(tail_at, self.tail.size as usize))),
            ("cuMemRelease (device)", call!(driver, mem_release(self.head.handle))),
            ("cuMemRelease (host NUMA)", call!(driver, mem_release(self.tail.handle))),
            (
                "cuMemAddressFree",
                call!(driver, mem_address_free(self.base, (self.head.size + self.tail.size) as usize)),
            ),
        ];
        for (step, status) in steps {
            if status != CUDA_SUCCESS {
                warn!("freeing split allocation {:#x}: {} failed (CUDA error {})", self.base, step, status);
            }
        }
    }

    /// The accounting after `unmap`: the head leaves T1, the tail T2.
    pub fn finish(self) {
        debug!("split {:#x}: {} + {} freed", self.base, Mib(self.head.size), Mib(self.tail.size));
        tiers::forget_vram(self.head.size, self.device);
        STATS.sub_t2(self.tail.size);
    }
}

/// The first failure of a split is worth a line at info level (it tells why large
/// allocations are read over PCIe); later ones only at debug.
fn report_fallback(size: u64, failure: &Failure) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    if REPORTED.swap(true, Ordering::Relaxed) {
        debug!("split of {} failed at {} (CUDA error {}): wholly in T2", Mib(size), failure.step, failure.status);
    } else {
        info!(
            "split of {} failed at {} (CUDA error {}): it goes wholly to T2 (later failed splits are logged at debug level)",
            Mib(size),
            failure.step,
            failure.status
        );
    }
}

/// Pinned device memory on `device`, without any shareable handle type (IPC handles
/// are not offered for the shim's memory).
fn device_memory(device: CuDevice) -> CuMemAllocationProp {
    CuMemAllocationProp {
        type_: CU_MEM_ALLOCATION_TYPE_PINNED,
        requested_handle_types: 0,
        location: CuMemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: device },
        win32_handle_meta_data: std::ptr::null_mut(),
        compression_type: 0,
        gpu_direct_rdma_capable: 0,
        usage: 0,
        reserved: [0; 4],
    }
}

/// The granularity both kinds of memory can be mapped at: the larger of their minimum
/// granularities (powers of two, so it is a multiple of both) and never below
/// `MIN_ALIGNMENT`.
fn granularity(driver: &DriverApi, props: &[&CuMemAllocationProp]) -> Result<u64, Failure> {
    let mut largest = MIN_ALIGNMENT;
    for prop in props {
        let mut granularity: usize = 0;
        let prop: *const CuMemAllocationProp = *prop;
        check(
            "cuMemGetAllocationGranularity",
            call!(driver, mem_get_allocation_granularity(&mut granularity, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)),
        )?;
        if !granularity.is_power_of_two() {
            return Err(failed("cuMemGetAllocationGranularity (not a power of two)", CUDA_ERROR_INVALID_VALUE));
        }
        largest = largest.max(granularity as u64);
    }
    Ok(largest)
}

/// What `create` has made so far, so that a failing step undoes exactly that.
struct Building<'a> {
    driver: &'a DriverApi,
    head_size: u64,
    tail_size: u64,
    /// The reserved range of `head_size + tail_size` bytes (0: none yet).
    base: CuDevicePtr,
    head: Option<CuMemGenericAllocationHandle>,
    tail: Option<CuMemGenericAllocationHandle>,
    head_mapped: bool,
    tail_mapped: bool,
}

impl Building<'_> {
    fn total(&self) -> usize {
        (self.head_size + self.tail_size) as usize
    }

    fn run(
        &mut self,
        device: CuDevice,
        on_device: &CuMemAllocationProp,
        on_host: &CuMemAllocationProp,
        alignment: u64,
    ) -> Result<(CuMemGenericAllocationHandle, CuMemGenericAllocationHandle), Failure> {
        let driver = self.driver;
        let (head_len, tail_len) = (self.head_size as usize, self.tail_size as usize);
        check(
            "cuMemAddressReserve",
            call!(driver, mem_address_reserve(&mut self.base, self.total(), alignment as usize, 0, 0)),
        )?;
        let mut head: CuMemGenericAllocationHandle = 0;
        check("cuMemCreate (device)", call!(driver, mem_create(&mut head, head_len, on_device, 0)))?;
        self.head = Some(head);
        let mut tail: CuMemGenericAllocationHandle = 0;
        check("cuMemCreate (host NUMA)", call!(driver, mem_create(&mut tail, tail_len, on_host, 0)))?;
        self.tail = Some(tail);
        check("cuMemMap (device)", call!(driver, mem_map(self.base, head_len, 0, head, 0)))?;
        self.head_mapped = true;
        check("cuMemMap (host NUMA)", call!(driver, mem_map(self.base + self.head_size, tail_len, 0, tail, 0)))?;
        self.tail_mapped = true;
        let access = CuMemAccessDesc {
            location: CuMemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: device },
            flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        check("cuMemSetAccess", call!(driver, mem_set_access(self.base, self.total(), &access, 1)))?;
        Ok((head, tail))
    }

    /// Undoes what `run` did, in reverse order.
    fn undo(&self) {
        let driver = self.driver;
        if self.tail_mapped {
            call!(driver, mem_unmap(self.base + self.head_size, self.tail_size as usize));
        }
        if self.head_mapped {
            call!(driver, mem_unmap(self.base, self.head_size as usize));
        }
        for handle in [self.tail, self.head].into_iter().flatten() {
            call!(driver, mem_release(handle));
        }
        if self.base != 0 {
            call!(driver, mem_address_free(self.base, self.total()));
        }
    }
}
