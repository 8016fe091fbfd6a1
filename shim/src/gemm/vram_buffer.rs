//! A VRAM buffer the staging executor holds for itself (the scratch, the look-ahead
//! buffers): grown on demand, never shrunk while the process runs, and charged against
//! the VRAM budget like any allocation (the old buffer's charge becomes the new one's).

use crate::cuda;
use crate::cuda::ffi::*;
use crate::memory::budget::{self, VramCharge};

/// # Invariants
/// `base` is `charge`'s bytes of VRAM from the real cuMemAlloc in the context the buffer
/// belongs to; 0 while `charge` is `None`.
pub(super) struct VramBuffer {
    pub base: CuDevicePtr,
    charge: Option<VramCharge>,
}

/// Why a buffer could not grow.
pub(super) enum Refused {
    /// The placement rule (budget, headroom) had no room for the growth.
    Budget,
    /// The driver did not give the memory.
    Driver(CuError),
}

impl VramBuffer {
    pub const EMPTY: VramBuffer = VramBuffer { base: 0, charge: None };

    pub fn bytes(&self) -> u64 {
        self.charge.as_ref().map_or(0, VramCharge::bytes)
    }

    /// At least `bytes` of VRAM on `device` (the current context's). The old buffer is
    /// freed once every event of `in_use` (what may still read or write it) has passed,
    /// or the context has finished its work where an event cannot be waited for.
    pub fn grow_to(&mut self, bytes: u64, device: CuDevice, in_use: &[Event]) -> Result<(), Refused> {
        if self.bytes() >= bytes {
            return Ok(());
        }
        let growth = budget::reserve_vram(bytes - self.bytes(), device).ok_or(Refused::Budget)?;
        let base = cuda::mem_alloc(bytes).map_err(Refused::Driver)?;
        if self.base != 0 {
            for &event in in_use {
                if !event.is_null() && cuda::event_synchronize(event) != CuResult::SUCCESS {
                    cuda::ctx_synchronize();
                }
            }
            cuda::mem_free(self.base);
        }
        self.base = base;
        self.charge = Some(match self.charge.take() {
            Some(mut charge) => {
                charge.absorb(growth);
                charge
            }
            None => growth.commit(),
        });
        Ok(())
    }
}
