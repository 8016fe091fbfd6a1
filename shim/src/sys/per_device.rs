//! A word per device ordinal, read and written without a lock: the per-device counters,
//! stamps and caches of the layers above (what this process holds in VRAM, what room made
//! left the driver, the physical VRAM's size). Ordinals past `DEVICES` have no word: their
//! callers fall back as each says.

use std::sync::atomic::AtomicU64;

/// Device ordinals with a word of their own.
pub const DEVICES: usize = 64;

/// One `AtomicU64` per device ordinal, each 0 at first.
pub struct PerDevice([AtomicU64; DEVICES]);

impl PerDevice {
    pub const fn new() -> PerDevice {
        PerDevice([const { AtomicU64::new(0) }; DEVICES])
    }

    /// The word of device ordinal `device`; `None` for a negative ordinal or one past
    /// `DEVICES`.
    pub fn of(&self, device: i32) -> Option<&AtomicU64> {
        usize::try_from(device).ok().and_then(|ordinal| self.0.get(ordinal))
    }

    /// Every device's word, ordinal 0 first.
    pub fn all(&self) -> impl Iterator<Item = &AtomicU64> {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn each_ordinal_has_its_own_word_and_none_past_the_table() {
        let words = PerDevice::new();
        words.of(3).unwrap().store(7, Ordering::Relaxed);
        assert_eq!(words.of(3).map(|w| w.load(Ordering::Relaxed)), Some(7));
        assert_eq!(words.of(4).map(|w| w.load(Ordering::Relaxed)), Some(0), "another ordinal's word");
        assert!(words.of(-1).is_none() && words.of(DEVICES as i32).is_none());
        assert_eq!(words.all().count(), DEVICES);
    }
}
