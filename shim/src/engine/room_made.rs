//! What room made for allocations (`make_room`) tells live tiering's ticks on the device.
//!
//! - The VRAM the driver keeps of it. Room made demotes weights and the allocation takes
//!   its place at once; where the driver keeps the demoted pages' chunks (and no give-back
//!   turned them into free VRAM), the allocation takes fresh VRAM instead and free VRAM
//!   falls by it (measured once the allocation is in, `make_room::RoomHeld`, up to what the
//!   driver kept). The chunks go to whoever asks next, so that drop is answered as a
//!   demotion of the tick's own is (`tiering::Carried::answered`): else the tick would see
//!   a shortfall and demote another allocation's worth of weights for it (on an H100 an
//!   HF prefill beside another process demoted 1.8 GB more so,
//!   bench/results/longctx-2026-12-05.md).
//! - When it was last made. While the working set grows, the weights demoted for it stay
//!   in T2 (`recently`): a tick that promoted one into the room a freed activation left
//!   would have the next allocation demote it again, a weight's round trip over the link
//!   for nothing (on an H100 an HF prefill promoted 2.7 GB and demoted 12.6 GB,
//!   bench/results/longctx-2026-12-05.md). Nor do swaps bring them in meanwhile
//!   (`tiering::Room::working_set_growing`): with swaps on while the device was drained,
//!   the same prefill promoted and demoted 27.8 GB so.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::cuda::ffi::CuDevice;
use crate::sys::clock::monotonic_ns;
use crate::sys::per_device::PerDevice;

/// How long after room was last made on a device the weights demoted for it stay in T2:
/// ten ticks at the default interval; a long prefill makes room at every layer, far
/// more often.
pub const HOLDS: Duration = Duration::from_secs(1);

/// Per device: bytes kept of room made since its last tick. Room made on a device past
/// `per_device::DEVICES` is not carried (its ticks answer the drop themselves).
static KEPT: PerDevice = PerDevice::new();
/// Per device: when room was last made (`monotonic_ns`; 0: never).
static MADE_NS: PerDevice = PerDevice::new();

/// Room was made on `device` now.
pub(super) fn made(device: CuDevice) {
    if let Some(slot) = MADE_NS.of(device) {
        slot.store(monotonic_ns().max(1), Ordering::Relaxed);
    }
}

/// Whether room was made on `device` within `HOLDS` of now.
pub(super) fn recently(device: CuDevice) -> bool {
    MADE_NS.of(device).is_some_and(|slot| {
        let at = slot.load(Ordering::Relaxed);
        at != 0 && monotonic_ns().saturating_sub(at) < HOLDS.as_nanos() as u64
    })
}

/// Room made on `device`: the allocation made in it took `kept` bytes of free VRAM that
/// the driver's keeping of the victims explains.
pub(super) fn note(device: CuDevice, kept: u64) {
    if let Some(slot) = KEPT.of(device) {
        slot.fetch_add(kept, Ordering::Relaxed);
    }
}

/// No movable memory is left on any device: nothing noted is a tick's to answer any more
/// (a later one would otherwise answer a shortfall with a drop long gone).
pub(super) fn forget() {
    KEPT.all().for_each(|slot| slot.store(0, Ordering::Relaxed));
}

/// What room made on `device` left the driver since the last call: the tick's to answer.
pub(super) fn take(device: CuDevice) -> u64 {
    KEPT.of(device).map_or(0, |kept| kept.swap(0, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_room_made_left_the_driver_is_taken_once_per_device() {
        note(3, 384);
        note(3, 128);
        note(4, 64);
        assert_eq!(take(3), 512, "summed");
        assert_eq!(take(3), 0, "taken once");
        assert_eq!(take(4), 64, "each device its own");
        note(-1, 64);
        note(crate::sys::per_device::DEVICES as CuDevice, 64);
        assert_eq!(
            (take(-1), take(crate::sys::per_device::DEVICES as CuDevice)),
            (0, 0),
            "ordinals out of range are not kept"
        );
        note(5, 64);
        forget();
        assert_eq!(take(5), 0, "forgotten once no movable memory is left");
    }

    #[test]
    fn room_made_holds_for_a_while_on_its_device_only() {
        assert!(!recently(6), "never made");
        made(6);
        assert!(recently(6) && !recently(7), "made on device 6 alone");
        MADE_NS.of(6).unwrap().store(monotonic_ns().saturating_sub(HOLDS.as_nanos() as u64 + 1), Ordering::Relaxed);
        assert!(!recently(6), "longer ago than HOLDS");
        made(-1);
        assert!(!recently(-1), "ordinals out of range are not kept");
    }
}
