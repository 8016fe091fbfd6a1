// SPDX-License-Identifier: GPL-2.0
//! `GB_IOC_LIST_PROCS`: the per-process rows, for the callers allowed to see them.
//!
//! sysfs `stats` is readable by everyone, so it shows totals only; who uses the module
//! (pid, uid, command, usage) is listed here, through the device (mode 0660): a caller
//! with `CAP_SYS_ADMIN` in the initial user namespace sees every process, anyone else
//! the processes of its own real uid. Processes outside the caller's pid namespace are
//! never listed, and pids and uids are shown as the caller's namespaces name them.
//!
//! Locks: the registry lock while the rows are copied (no user access under it), then
//! the T3 list lock for each row's T3 figures, see "Lock order" in kmod/README.md.

use core::mem::size_of;
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::types::{AsBytes, FromBytes};
use kernel::uaccess::UserSlice;

use crate::abi::{self, GbProcList, GbProcRow, GbProcRowT3};
use crate::glue_ffi as ffi;
use crate::procs::ProcEntry;
use crate::state::State;

// SAFETY: `GbProcList` is `#[repr(C)]` with a u64 followed by four u32 fields, so it
// has no padding bytes (size asserted in the ABI file) and every bit pattern is valid.
unsafe impl FromBytes for GbProcList {}
// SAFETY: `GbProcList` has no padding bytes (see its `FromBytes` above).
unsafe impl AsBytes for GbProcList {}
// SAFETY: `GbProcRow` is `#[repr(C)]` with an i32 and a u32, six u64 fields and a
// 16-byte array: no padding bytes (size asserted in the ABI file).
unsafe impl AsBytes for GbProcRow {}
// SAFETY: `GbProcRowT3` is `#[repr(C)]`: a `GbProcRow` (no padding, above) and four
// u64 fields, so no padding bytes either (size asserted in the ABI file).
unsafe impl AsBytes for GbProcRowT3 {}

/// The ioctl: reads the request at `arg`, writes the visible rows (at most
/// `capacity`; `GbProcRowT3` with `GB_PROC_LIST_T3`) to `rows`, and `count`/`total`
/// back into the request.
pub(crate) fn list(state: &State, arg: usize) -> Result {
    let mut req: GbProcList = UserSlice::new(arg, size_of::<GbProcList>()).reader().read()?;
    if req.flags & !abi::GB_PROC_LIST_T3 != 0 {
        return Err(EINVAL);
    }
    let with_t3 = req.flags & abi::GB_PROC_LIST_T3 != 0;
    // SAFETY: `gb_capable_admin` and `gb_current_kuid` only read the calling task's
    // credentials; no precondition.
    let (admin, me) = unsafe { (ffi::gb_capable_admin(), ffi::gb_current_kuid()) };
    let capacity = usize::try_from(req.capacity)?;
    let mut rows: KVec<(GbProcRow, Arc<ProcEntry>)> = KVec::new();
    let total = state.procs.with_slots(|slots| -> Result<u32> {
        rows.reserve(capacity.min(slots.len()), GFP_KERNEL)?;
        let mut total = 0u32;
        for slot in slots {
            let e = slot.entry();
            let kuid = e.kuid.load(Ordering::Relaxed);
            let pid = e.pid_for_caller();
            if (!admin && kuid != me) || pid == 0 {
                continue;
            }
            total = total.saturating_add(1);
            if rows.len() < capacity {
                let row = GbProcRow {
                    pid,
                    // SAFETY: `gb_kuid_to_caller` only reads the caller's user namespace.
                    uid: unsafe { ffi::gb_kuid_to_caller(kuid) },
                    t1_used: e.t1_used.load(Ordering::Relaxed),
                    t1_budget: e.t1_budget.load(Ordering::Relaxed),
                    t2_used: e.t2.used.load(Ordering::Relaxed),
                    t2_peak: e.t2.peak.load(Ordering::Relaxed),
                    buffers: e.buffers.load(Ordering::Relaxed),
                    files: slot.open_files() as u64,
                    comm: e.comm(),
                };
                // Within the capacity reserved above: never allocates. The entry is
                // kept for the T3 figures, summed after the registry lock is released.
                rows.push((row, slot.entry_arc()), GFP_KERNEL)?;
            }
        }
        Ok(total)
    })?;
    // User memory is written only now, with no lock of ours held.
    let stride = if with_t3 { size_of::<GbProcRowT3>() } else { size_of::<GbProcRow>() };
    let bytes = rows.len().checked_mul(stride).ok_or(EINVAL)?;
    let mut out = UserSlice::new(usize::try_from(req.rows)?, bytes).writer();
    for (row, entry) in rows.iter() {
        if with_t3 {
            let residency = state.tier3.of_owner(&**entry as *const ProcEntry);
            out.write(&GbProcRowT3 {
                row: *row,
                t3_used: entry.t3_used.load(Ordering::Relaxed),
                t3_resident: residency.resident,
                t3_swapped: residency.swapped,
                t3_buffers: entry.t3_buffers.load(Ordering::Relaxed),
            })?;
        } else {
            out.write(row)?;
        }
    }
    req.count = u32::try_from(rows.len())?;
    req.total = total;
    UserSlice::new(arg, size_of::<GbProcList>()).writer().write(&req)
}
