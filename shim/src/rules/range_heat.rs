//! The heat of the parts of one large movable allocation, from the starts launches named
//! in it (`memory::start_counts`): a launch names where a kernel reads, not how much, so
//! each start's piece runs to the next start named lately (in this tick or the one
//! before: `Start::recent`) or to the allocation's end, and each naming counts the whole
//! piece, as a launch naming a whole allocation counts all of it. Lately, because starts
//! named once mark no piece that kernels keep reading: llama.cpp writes each new token's
//! keys at its own place inside the layer's KV cache, and attention reads that layer's
//! cache from its start up to the newest token, the one place written lately. A piece that
//! runs past what a kernel reads is weighed down by the kernel's sampled time
//! (`launch::kernel_times`). A part's heat is what the pieces overlapping it put on its
//! bytes. Heat orders placements only (hotter per byte first), so the constant cost of a
//! byte read over the link rather than from VRAM is left out.

/// A start named in an allocation: where, the weight of its namings since the last tick,
/// and whether it was named in this tick or the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Start {
    pub offset: u64,
    pub weight: u64,
    pub recent: bool,
}

/// Where the piece starting at `offset` ends: the next start named lately (`starts`
/// sorted by offset), else `len`.
pub fn piece_end(starts: &[Start], offset: u64, len: u64) -> u64 {
    starts.iter().find(|s| s.recent && s.offset > offset).map_or(len, |s| s.offset).min(len)
}

/// The heat of each `part`-byte part of a `len`-byte allocation (the last one may be
/// shorter): for every start (sorted by offset, with the weight of its namings, `whole`
/// for one naming that reads all of its piece), the bytes of its piece inside the part
/// by that weight; for the `unplaced` weight (starts the table had no room for), the
/// part's length by it.
pub fn part_heat(starts: &[Start], unplaced: u64, whole: u64, len: u64, part: u64) -> Vec<u64> {
    let by_weight =
        |weight: u64, bytes: u64| (u128::from(weight) * u128::from(bytes) / u128::from(whole.max(1))) as u64;
    let part = part.max(1);
    let parts = len.div_ceil(part) as usize;
    let part_len = |index: usize| (len - index as u64 * part).min(part);
    let mut heat: Vec<u64> = (0..parts).map(|index| by_weight(unplaced, part_len(index))).collect();
    for (at, start) in starts.iter().enumerate() {
        let end = piece_end(&starts[at + 1..], start.offset, len);
        if start.weight == 0 || start.offset >= end {
            continue;
        }
        let (first, last) = ((start.offset / part) as usize, ((end - 1) / part) as usize);
        for (index, heat) in heat.iter_mut().enumerate().take(last + 1).skip(first) {
            let (from, to) = (index as u64 * part, index as u64 * part + part_len(index));
            let overlap = to.min(end) - from.max(start.offset);
            *heat = heat.saturating_add(by_weight(start.weight, overlap));
        }
    }
    heat
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 2 << 20;

    fn at(offset: u64, weight: u64) -> Start {
        Start { offset, weight, recent: true }
    }

    #[test]
    fn each_start_heats_its_piece_up_to_the_next_start() {
        // Starts at 0 (named 3 times), 1.5 parts (once), 3 parts (not this tick, but lately).
        let heat = part_heat(&[at(0, 3), at(3 * P / 2, 1), at(3 * P, 0)], 0, 1, 4 * P, P);
        assert_eq!(heat, vec![3 * P, 3 * P / 2 + P / 2, P, 0]);
        // Weighed: a start named by a kernel that reads a quarter of its piece.
        let heat = part_heat(&[at(0, 4), at(P, 1)], 0, 4, 2 * P, P);
        assert_eq!(heat, vec![P, P / 4]);
    }

    #[test]
    fn a_start_not_named_lately_does_not_cut_a_piece() {
        // Attention reads a layer's cache from 0 to the newest token (written at 2.5 parts);
        // a token written long ago (at 1 part) ends nothing.
        let old = Start { offset: P, weight: 0, recent: false };
        let starts = [at(0, 2), old, at(5 * P / 2, 1)];
        assert_eq!(part_heat(&starts, 0, 1, 3 * P, P), vec![2 * P, 2 * P, P + P / 2]);
        assert_eq!(piece_end(&starts, 0, 3 * P), 5 * P / 2);
        assert_eq!(piece_end(&starts, 5 * P / 2, 3 * P), 3 * P);
    }

    #[test]
    fn unplaced_namings_heat_every_part_by_its_length_and_the_last_part_may_be_short() {
        let heat = part_heat(&[at(P / 2, 2)], 1, 1, 2 * P + 4096, P);
        assert_eq!(heat, vec![P + 2 * (P / 2), P + 2 * P, 4096 + 2 * 4096]);
    }

    #[test]
    fn nothing_named_nothing_hot() {
        assert_eq!(part_heat(&[], 0, 1, 3 * P, P), vec![0, 0, 0]);
        assert_eq!(part_heat(&[at(5 * P, 9)], 0, 1, 3 * P, P), vec![0, 0, 0], "a start past the end heats nothing");
    }
}
