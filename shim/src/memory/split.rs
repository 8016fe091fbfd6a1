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

use crate::cuda;
use crate::cuda::ffi::*;
use crate::memory::budget::{self, T2Charge, T2Reservation, VramCharge};
use crate::rules::config;
use crate::rules::placement::Rules;
use crate::sys::log::Mib;
use crate::sys::stats::{self, STATS};

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
    /// The context the range was made in.
    context: Context,
    head_charge: VramCharge,
    tail_charge: T2Charge,
}

/// Where a split attempt stopped, for the log.
struct Failure {
    step: &'static str,
    error: CuError,
}

/// Names the step of a failed driver call, for the log.
trait Step<T> {
    fn at(self, step: &'static str) -> Result<T, Failure>;
}

impl<T> Step<T> for Result<T, CuError> {
    fn at(self, step: &'static str) -> Result<T, Failure> {
        self.map_err(|error| Failure { step, error })
    }
}

impl Step<()> for CuResult {
    fn at(self, step: &'static str) -> Result<(), Failure> {
        self.ok().at(step)
    }
}

/// Splits an allocation of `size` bytes for `device` in the current context when it is
/// at least GREENBOOST_SPLIT_MIN and at least one granule of VRAM is left under the
/// placement limit; `reserve_tail` reserves the T2 the tail takes (the caller may free
/// T2 to find room). `None`: not split, nothing held; the caller puts it wholly in T2.
pub fn create(
    size: u64,
    device: CuDevice,
    reserve_tail: impl FnOnce(u64) -> Option<T2Reservation>,
) -> Option<SplitAllocation> {
    if !Rules::of(config::get()).may_split(size) {
        return None;
    }
    let context = cuda::current_context()?;
    let on_device = CuMemAllocationProp::device(device);
    let node = cuda::host_numa_node(device).unwrap_or(0);
    let on_host = on_device.on_host_numa(node);
    // The larger of the two minimum granularities (powers of two, so a multiple of both),
    // never below MIN_ALIGNMENT.
    let granularity =
        match cuda::granularity(&[&on_device, &on_host], MIN_ALIGNMENT).at("cuMemGetAllocationGranularity") {
            Ok(granularity) => granularity,
            Err(failure) => {
                report_fallback(size, &failure);
                return None;
            }
        };
    let total = size.checked_next_multiple_of(granularity)?;
    // The head leaves at least one granule to the tail: an allocation that fits whole
    // would have gone to VRAM.
    let head = budget::reserve_vram_head(device, granularity, total)?;
    let tail = reserve_tail(total - head.bytes())?;
    let mut building = Building { head_size: head.bytes(), tail_size: tail.bytes(), ..Building::default() };
    let (head_handle, tail_handle) = match building.run(device, &on_device, &on_host, granularity) {
        Ok(handles) => handles,
        Err(failure) => {
            building.undo();
            report_fallback(size, &failure);
            return None;
        }
    };
    stats::bump(&STATS.split_allocs);
    // One line per split at info level: it says how much of a large allocation (all of
    // llama.cpp's weights) is read from VRAM and how much over PCIe.
    info!(
        "split {:#x}: {} = {} VRAM + {} on host NUMA node {} for device {}",
        building.base,
        Mib(size),
        Mib(head.bytes()),
        Mib(tail.bytes()),
        node,
        device
    );
    Some(SplitAllocation {
        base: building.base,
        head: Piece { handle: head_handle, size: head.bytes() },
        tail: Piece { handle: tail_handle, size: tail.bytes() },
        context,
        head_charge: head.commit(),
        tail_charge: tail.commit(),
    })
}

impl SplitAllocation {
    /// The device pointer the program was given.
    pub fn base(&self) -> CuDevicePtr {
        self.base
    }

    pub fn context(&self) -> Context {
        self.context
    }

    /// [start, end) of the T2 part.
    pub(super) fn tail_range(&self) -> (CuDevicePtr, CuDevicePtr) {
        let start = self.base + self.head.size;
        (start, start + self.tail.size)
    }

    /// Unmaps and releases both pieces and frees the range. The caller has made the
    /// context current and waited until the device is past every use.
    pub(super) fn unmap(&self) {
        let (tail_at, _) = self.tail_range();
        let steps = [
            ("cuMemUnmap (device)", cuda::mem_unmap(self.base, self.head.size)),
            ("cuMemUnmap (host NUMA)", cuda::mem_unmap(tail_at, self.tail.size)),
            ("cuMemRelease (device)", cuda::mem_release(self.head.handle)),
            ("cuMemRelease (host NUMA)", cuda::mem_release(self.tail.handle)),
            ("cuMemAddressFree", cuda::address_free(self.base, self.head.size + self.tail.size)),
        ];
        for (step, status) in steps {
            if status != CuResult::SUCCESS {
                warn!("freeing split allocation {:#x}: {} failed (CUDA error {})", self.base, step, status.0);
            }
        }
    }

    /// The accounting after `unmap`: the head leaves T1, the tail T2 (their charges go).
    pub(super) fn finish(self) {
        let SplitAllocation { base, head, tail, head_charge, tail_charge, .. } = self;
        debug!("split {:#x}: {} + {} freed", base, Mib(head.size), Mib(tail.size));
        drop((head_charge, tail_charge));
    }
}

/// The first failure of a split is worth a line at info level (it tells why large
/// allocations are read over PCIe); later ones only at debug.
fn report_fallback(size: u64, failure: &Failure) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    if REPORTED.swap(true, Ordering::Relaxed) {
        debug!("split of {} failed at {} ({}): wholly in T2", Mib(size), failure.step, failure.error);
    } else {
        info!(
            "split of {} failed at {} ({}): it goes wholly to T2 (later failed splits are logged at debug level)",
            Mib(size),
            failure.step,
            failure.error
        );
    }
}

/// What `create` has made so far, so that a failing step undoes exactly that.
#[derive(Default)]
struct Building {
    head_size: u64,
    tail_size: u64,
    /// The reserved range of `head_size + tail_size` bytes (0: none yet).
    base: CuDevicePtr,
    head: Option<CuMemGenericAllocationHandle>,
    tail: Option<CuMemGenericAllocationHandle>,
    head_mapped: bool,
    tail_mapped: bool,
}

impl Building {
    fn total(&self) -> u64 {
        self.head_size + self.tail_size
    }

    fn run(
        &mut self,
        device: CuDevice,
        on_device: &CuMemAllocationProp,
        on_host: &CuMemAllocationProp,
        alignment: u64,
    ) -> Result<(CuMemGenericAllocationHandle, CuMemGenericAllocationHandle), Failure> {
        self.base = cuda::address_reserve(self.total(), alignment).at("cuMemAddressReserve")?;
        let head = cuda::mem_create(self.head_size, on_device).at("cuMemCreate (device)")?;
        self.head = Some(head);
        let tail = cuda::mem_create(self.tail_size, on_host).at("cuMemCreate (host NUMA)")?;
        self.tail = Some(tail);
        cuda::mem_map(self.base, self.head_size, head).at("cuMemMap (device)")?;
        self.head_mapped = true;
        cuda::mem_map(self.base + self.head_size, self.tail_size, tail).at("cuMemMap (host NUMA)")?;
        self.tail_mapped = true;
        cuda::set_access(self.base, self.total(), device).at("cuMemSetAccess")?;
        Ok((head, tail))
    }

    /// Undoes what `run` did, in reverse order (the reservations are dropped by the
    /// caller).
    fn undo(&self) {
        if self.tail_mapped {
            cuda::mem_unmap(self.base + self.head_size, self.tail_size);
        }
        if self.head_mapped {
            cuda::mem_unmap(self.base, self.head_size);
        }
        for handle in [self.tail, self.head].into_iter().flatten() {
            cuda::mem_release(handle);
        }
        if self.base != 0 {
            cuda::address_free(self.base, self.total());
        }
    }
}
