//! cuMemCreate placement: device memory that does not fit (or that the driver refuses
//! for lack of VRAM) is made on the GPU's host NUMA node instead
//! (CU_MEM_LOCATION_TYPE_HOST_NUMA); the caller's cuMemMap/cuMemSetAccess work on it
//! unchanged. Without host-NUMA support the device allocation is made as asked, and
//! memory asked for with a fabric handle type is never moved. The records of VMM
//! handles keep their charges until cuMemRelease.
//!
//! Lock: `VMM` comes after the registry's in the lock order (lib.rs); no CUDA call runs
//! under it.

use std::collections::BTreeMap;

use crate::cuda;
use crate::cuda::ffi::*;
use crate::memory::budget::{self, T2Charge, VramCharge};
use crate::memory::release;
use crate::sys::lock::{const_mutex, ForkLock, Mutex};
use crate::sys::lock_order::rank;
use crate::sys::log::Mib;
use crate::sys::stats::{self, STATS};

/// What a live VMM handle is charged as.
enum VmmCharge {
    /// Device memory, counted against the budget.
    Device(VramCharge),
    /// Host NUMA memory the shim chose, counted as T2.
    Host(T2Charge),
}

impl VmmCharge {
    fn describe(&self) -> (&'static str, u64) {
        match self {
            VmmCharge::Device(charge) => ("device", charge.bytes()),
            VmmCharge::Host(charge) => ("host NUMA", charge.bytes()),
        }
    }
}

static VMM: Mutex<rank::Vmm, BTreeMap<CuMemGenericAllocationHandle, VmmCharge>> = const_mutex(BTreeMap::new());

fn insert(handle: CuMemGenericAllocationHandle, charge: VmmCharge) {
    VMM.lock().insert(handle, charge);
}

/// The placement of a cuMemCreate of `size` bytes of device memory with `requested`
/// properties; `real` makes the allocation with the properties it is given.
pub fn create(
    size: u64,
    requested: CuMemAllocationProp,
    real: impl Fn(&CuMemAllocationProp) -> Result<CuMemGenericAllocationHandle, CuResult>,
) -> CuResult {
    let device = requested.location.id;
    if requested.requested_handle_types & CU_MEM_HANDLE_TYPE_FABRIC != 0 {
        // Memory exported across NVLink fabric (NCCL's multi-node NVLink buffers) stays
        // device memory as asked: its importers map it as such on other GPUs. POSIX-fd
        // handles move like any other memory: the driver exports host-NUMA memory with
        // them (PyTorch's expandable segments and XLA's allocator ask for them always;
        // both ran on the H200 with their memory on host NUMA).
        return as_asked(size, &requested, real);
    }
    let mut after_oom = false;
    match budget::reserve_vram(size, device) {
        Some(reservation) => match real(&requested) {
            Ok(handle) => {
                insert(handle, VmmCharge::Device(reservation.commit()));
                return CuResult::SUCCESS;
            }
            Err(CuResult::OUT_OF_MEMORY) => after_oom = true,
            Err(status) => return status,
        },
        None => budget::note_refused(size, device),
    }
    let Some(reservation) = release::reserve_t2(size) else {
        return stats::out_of_memory(CuResult::OUT_OF_MEMORY);
    };
    let node = cuda::host_numa_node(device).unwrap_or(0);
    match real(&requested.on_host_numa(node)) {
        Ok(handle) => {
            stats::bump(&STATS.vmm_host);
            if after_oom {
                stats::bump(&STATS.t2_after_vram_oom);
            }
            insert(handle, VmmCharge::Host(reservation.commit()));
            debug!("VMM {}: on host NUMA node {} for device {}", Mib(size), node, device);
            return CuResult::SUCCESS;
        }
        Err(status) => {
            drop(reservation);
            info!(
                "cuMemCreate of {} on host NUMA node {} failed (CUDA error {}; handle types {:#x}, flags {:#x}/{:#x}/{:#x})",
                Mib(size),
                node,
                status.0,
                requested.requested_handle_types,
                requested.compression_type,
                requested.gpu_direct_rdma_capable,
                requested.usage
            );
        }
    }
    if after_oom {
        return stats::out_of_memory(CuResult::OUT_OF_MEMORY);
    }
    // Host NUMA allocations unsupported: the device allocation as asked is the fallback.
    as_asked(size, &requested, &real)
}

/// The device allocation as asked, charged to the device whatever the budget says.
fn as_asked(
    size: u64,
    requested: &CuMemAllocationProp,
    real: impl Fn(&CuMemAllocationProp) -> Result<CuMemGenericAllocationHandle, CuResult>,
) -> CuResult {
    match real(requested) {
        Ok(handle) => {
            let charge = budget::reserve_unchecked(size, requested.location.id).commit();
            insert(handle, VmmCharge::Device(charge));
            CuResult::SUCCESS
        }
        Err(status) => status,
    }
}

/// cuMemRelease: the record's charge goes when the real release succeeds; a refused
/// handle keeps its record as it was.
pub fn release(handle: CuMemGenericAllocationHandle, real: impl FnOnce() -> CuResult) -> CuResult {
    let record = VMM.lock().remove(&handle);
    let status = real();
    match record {
        Some(record) if status != CuResult::SUCCESS => insert(handle, record),
        Some(record) => {
            let (place, bytes) = record.describe();
            debug!("VMM {} ({}) released", Mib(bytes), place);
        }
        None => {}
    }
    status
}

/// The lock the fork handlers hold (see `lifecycle`).
pub fn fork_lock() -> &'static dyn ForkLock {
    &VMM
}
