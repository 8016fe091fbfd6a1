//! The order in which staged operands are read, learned as the program runs, for
//! GREENBOOST_STAGE_PREFETCH: a model's forward pass reads its weights in the same order
//! every time (layer by layer), so the operand that followed this one last time is the
//! one to copy while this product computes. Pure bookkeeping: `staging` does the copies.

use std::collections::HashMap;

use crate::ffi::CuDevicePtr;

/// A staged operand: its address and the bytes it spans.
pub type OperandKey = (CuDevicePtr, u64);

/// Operands followed by more distinct operands than this are forgotten and learned
/// again: a program whose T2 operands change all the time gains nothing from a guess.
const MAX_REMEMBERED: usize = 1 << 16;

/// Which operand followed which, last time.
#[derive(Default)]
pub struct ReadOrder {
    previous: Option<OperandKey>,
    next: HashMap<OperandKey, OperandKey>,
}

impl ReadOrder {
    /// Records that `key` is read now (after the operand read before it) and answers
    /// the operand that followed `key` the last time it was read, if another one.
    pub fn read(&mut self, key: OperandKey) -> Option<OperandKey> {
        if let Some(previous) = self.previous.replace(key) {
            if previous != key {
                if self.next.len() >= MAX_REMEMBERED && !self.next.contains_key(&previous) {
                    self.next.clear();
                }
                self.next.insert(previous, key);
            }
        }
        self.next.get(&key).copied().filter(|next| *next != key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operand_that_followed_last_time_is_predicted() {
        let mut order = ReadOrder::default();
        let (a, b, c) = ((0x1000, 64), (0x2000, 64), (0x3000, 64));
        // First pass: nothing known yet, except b -> c is not known when b is read.
        assert_eq!(order.read(a), None);
        assert_eq!(order.read(b), None);
        assert_eq!(order.read(c), None);
        // Second pass: each read predicts its successor from the first.
        assert_eq!(order.read(a), Some(b));
        assert_eq!(order.read(b), Some(c));
        assert_eq!(order.read(c), Some(a));
        // The order changes: the latest successor wins.
        assert_eq!(order.read(b), Some(c));
        assert_eq!(order.read(a), Some(b));
        assert_eq!(order.read(b), Some(a), "b was last followed by a");
        // The same operand twice in a row predicts nothing of itself.
        assert_eq!(order.read(b), Some(a));
        let mut repeat = ReadOrder::default();
        assert_eq!(repeat.read(a), None);
        assert_eq!(repeat.read(a), None);
    }

    #[test]
    fn a_different_span_at_the_same_address_is_another_operand() {
        let mut order = ReadOrder::default();
        order.read((0x1000, 64));
        order.read((0x2000, 64));
        assert_eq!(order.read((0x1000, 128)), None);
        assert_eq!(order.read((0x1000, 64)), Some((0x2000, 64)));
    }
}
