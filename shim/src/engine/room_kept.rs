//! VRAM the driver keeps of room made for allocations (`make_room`), carried to live
//! tiering's next tick on the device. Room made demotes weights and the allocation takes
//! its place at once; where the driver keeps the demoted pages' chunks (and no give-back
//! turned them into free VRAM), the allocation takes fresh VRAM instead and free VRAM
//! falls by it (measured once the allocation is in, `make_room::RoomHeld`, up to what the
//! driver kept). The chunks go to whoever asks next, so that drop is answered as a
//! demotion of the tick's own is (`tiering::Carried::answered`): else the tick would see
//! a shortfall and demote another allocation's worth of weights for it (on an H100 an
//! HF prefill beside another process demoted 1.8 GB more so,
//! bench/results/longctx-2026-12-05.md).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::cuda::ffi::CuDevice;

/// Device ordinals kept track of; room made on a device past them is not carried (its
/// ticks answer the drop themselves, as before).
const DEVICES: usize = 64;

/// Per device ordinal: bytes kept of room made since its last tick.
static KEPT: [AtomicU64; DEVICES] = [const { AtomicU64::new(0) }; DEVICES];

fn slot(device: CuDevice) -> Option<&'static AtomicU64> {
    usize::try_from(device).ok().and_then(|ordinal| KEPT.get(ordinal))
}

/// Room made on `device`: the allocation made in it took `kept` bytes of free VRAM that
/// the driver's keeping of the victims explains.
pub(super) fn note(device: CuDevice, kept: u64) {
    if let Some(slot) = slot(device) {
        slot.fetch_add(kept, Ordering::Relaxed);
    }
}

/// No movable memory is left on any device: nothing noted is a tick's to answer any more
/// (a later one would otherwise answer a shortfall with a drop long gone).
pub(super) fn forget() {
    KEPT.iter().for_each(|slot| slot.store(0, Ordering::Relaxed));
}

/// What room made on `device` left the driver since the last call: the tick's to answer.
pub(super) fn take(device: CuDevice) -> u64 {
    slot(device).map_or(0, |kept| kept.swap(0, Ordering::Relaxed))
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
        note(DEVICES as CuDevice, 64);
        assert_eq!((take(-1), take(DEVICES as CuDevice)), (0, 0), "ordinals out of range are not kept");
        note(5, 64);
        forget();
        assert_eq!(take(5), 0, "forgotten once no movable memory is left");
    }
}
