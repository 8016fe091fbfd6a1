//! A VRAM buffer the staging executor holds for itself (the scratch, the look-ahead
//! buffers): grown on demand, never shrunk while the process runs, and charged against
//! the VRAM budget like any allocation (the old buffer's charge becomes the new one's).
//!
//! Growth the budget refuses while the program computes is room wanted: the scratch is
//! working memory, read by every staged product, and belongs in VRAM before weights read
//! once per pass. The next product makes that room (`room_for_wanted`, with
//! `engine::make_room`: weights loaded before computing go to T2, where staging copies
//! them in as it does any T2 operand) before it takes the scratch's lock, which ranks
//! above the tiering locks make_room takes. Without it, on an H100 beside another
//! process, the weights held all of this process's VRAM and no product of an HF prefill
//! was staged ("128 MiB of scratch does not fit the VRAM budget",
//! bench/results/longctx-2026-12-05.md).

use std::sync::atomic::Ordering;

use crate::cuda;
use crate::cuda::ffi::*;
use crate::engine::make_room::{self, RoomHeld};
use crate::memory::budget::{self, VramCharge, VramReservation};
use crate::memory::t2;
use crate::sys::per_device::PerDevice;

/// Per device: the growth a buffer wanted last and the budget refused (a buffer on a
/// device past `per_device::DEVICES` never makes room).
static WANTED: PerDevice = PerDevice::new();

/// Notes that a buffer on `device` could not grow by `bytes` within the budget.
pub(super) fn want_room(device: CuDevice, bytes: u64) {
    if let Some(wanted) = WANTED.of(device) {
        wanted.store(bytes, Ordering::Relaxed);
    }
}

/// Room made on `device` (a context of it current) for the growth a buffer wanted
/// (`want_room`), once: the reservation to offer the buffer (`VramBuffer::grow_to`) and
/// what holds the room until the buffer is allocated in it. `None` when nothing is
/// wanted or no room can be made (the next refusal asks again). Called with no lock of
/// the staging executor held.
pub(super) fn room_for_wanted(device: CuDevice) -> Option<(VramReservation, RoomHeld)> {
    // Nothing wanted is no room: rounded up, 0 would ask for a chunk at every product (on
    // an H100 the scratch grew by 2 MiB a product to 2.8 GB, each growth demoting a weight
    // part and reallocating the scratch: an HF decode at 0.7 tokens/s).
    let wanted = WANTED.of(device)?.swap(0, Ordering::Relaxed);
    let len = Some(wanted).filter(|&wanted| wanted > 0).and_then(t2::rounded_len)?;
    make_room::make_room(len, device)
}

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

    /// At least `bytes` of VRAM on `device` (the current context's), grown into `room`
    /// (made for it, `room_for_wanted`) where that holds the growth, else within the
    /// budget. The old buffer is freed once every event of `in_use` (what may still read
    /// or write it) has passed, or the context has finished its work where an event
    /// cannot be waited for.
    pub fn grow_to(
        &mut self,
        bytes: u64,
        device: CuDevice,
        in_use: &[Event],
        room: Option<VramReservation>,
    ) -> Result<(), Refused> {
        if self.bytes() >= bytes {
            return Ok(());
        }
        let growth_bytes = bytes - self.bytes();
        let growth = match room {
            Some(room) if room.bytes() >= growth_bytes => room,
            // Room too small for the growth goes back (dropped).
            _ => budget::reserve_vram(growth_bytes, device).ok_or(Refused::Budget)?,
        };
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
