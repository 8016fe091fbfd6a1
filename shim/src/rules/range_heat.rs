//! The heat of the parts of one large movable allocation, from the starts launches named
//! in it (`memory::start_counts`): a launch names where a kernel reads, not how much, so
//! each start's piece runs to the next start ever named (or the allocation's end), and
//! each naming counts the whole piece, as a launch naming a whole allocation counts all
//! of it. A part's heat is what the pieces overlapping it put on its bytes. Heat orders
//! placements only (hotter per byte first), so the constant cost of a byte read over the
//! link rather than from VRAM is left out.

/// The heat of each `part`-byte part of a `len`-byte allocation (the last one may be
/// shorter): for every start in `named` (sorted by offset, with the weight of its
/// namings, `whole` for one naming that reads all of its piece), the bytes of its piece
/// inside the part by that weight; for the `unplaced` weight (starts the table had no
/// room for), the part's length by it.
pub fn part_heat(named: &[(u64, u64)], unplaced: u64, whole: u64, len: u64, part: u64) -> Vec<u64> {
    let by_weight =
        |weight: u64, bytes: u64| (u128::from(weight) * u128::from(bytes) / u128::from(whole.max(1))) as u64;
    let part = part.max(1);
    let parts = len.div_ceil(part) as usize;
    let part_len = |index: usize| (len - index as u64 * part).min(part);
    let mut heat: Vec<u64> = (0..parts).map(|index| by_weight(unplaced, part_len(index))).collect();
    for (at, &(start, namings)) in named.iter().enumerate() {
        let end = named.get(at + 1).map_or(len, |&(next, _)| next).min(len);
        if namings == 0 || start >= end {
            continue;
        }
        let (first, last) = ((start / part) as usize, ((end - 1) / part) as usize);
        for (index, heat) in heat.iter_mut().enumerate().take(last + 1).skip(first) {
            let (from, to) = (index as u64 * part, index as u64 * part + part_len(index));
            let overlap = to.min(end) - from.max(start);
            *heat = heat.saturating_add(by_weight(namings, overlap));
        }
    }
    heat
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 2 << 20;

    #[test]
    fn each_start_heats_its_piece_up_to_the_next_start() {
        // Starts at 0 (named 3 times), 1.5 parts (once), 3 parts (never this tick).
        let heat = part_heat(&[(0, 3), (3 * P / 2, 1), (3 * P, 0)], 0, 1, 4 * P, P);
        assert_eq!(heat, vec![3 * P, 3 * P / 2 + P / 2, P, 0]);
        // Weighed: a start named by a kernel that reads a quarter of its piece.
        let heat = part_heat(&[(0, 4), (P, 1)], 0, 4, 2 * P, P);
        assert_eq!(heat, vec![P, P / 4]);
    }

    #[test]
    fn unplaced_namings_heat_every_part_by_its_length_and_the_last_part_may_be_short() {
        let heat = part_heat(&[(P / 2, 2)], 1, 1, 2 * P + 4096, P);
        assert_eq!(heat, vec![P + 2 * (P / 2), P + 2 * P, 4096 + 2 * 4096]);
    }

    #[test]
    fn nothing_named_nothing_hot() {
        assert_eq!(part_heat(&[], 0, 1, 3 * P, P), vec![0, 0, 0]);
        assert_eq!(part_heat(&[(5 * P, 9)], 0, 1, 3 * P, P), vec![0, 0, 0], "a start past the end heats nothing");
    }
}
