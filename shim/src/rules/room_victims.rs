//! Which runs of movable VRAM loaded before computing give their room to an allocation
//! the program makes while it computes (`engine::make_room`).
//!
//! Coldest first, each no larger than twice the room still wanted, so that a small
//! allocation never costs a large weight's round trip. That alone can stop short: once
//! the room is within a few MiB of what is wanted, only runs of a few MiB qualify, and
//! where none is left the allocation went to T2. On an H100 a 448 MiB activation of an HF
//! 16384-token prefill so went to T2 with 442 MiB found, its products read it over the
//! link, and the decode after fell to 1.9 tokens/s where runs without it decoded 11-18
//! (bench/results/longctx-2026-12-06.md). So the last victim may be larger: the coldest
//! run left that completes the room, no larger than twice the whole allocation, as the
//! first victim may be: a small allocation still goes to T2 rather than cost a large
//! weight's round trip. The coldest, not the smallest: one more cold byte demoted costs
//! a copy once, a hot one (a static KV cache allocated before computing) its reads over
//! the link at every pass.

/// The victims for `wanted` bytes among `runs` (each run's bytes, coldest per byte first):
/// their positions in order, or `None` when they cannot make the room (too little of
/// them, or only runs larger than twice `wanted` to complete it).
pub fn room_victims(wanted: u64, runs: &[u64]) -> Option<Vec<usize>> {
    let mut chosen = Vec::new();
    let mut room = 0u64;
    for (at, &bytes) in runs.iter().enumerate() {
        if room >= wanted {
            break;
        }
        if bytes <= (wanted - room).saturating_mul(2) {
            room += bytes;
            chosen.push(at);
        }
    }
    if room < wanted {
        let still = wanted - room;
        // Every run passed over is larger than twice what was still wanted when it came,
        // so larger than `still`: any of them completes the room.
        let last = (0..runs.len())
            .find(|at| !chosen.contains(at) && runs[*at] >= still && runs[*at] <= wanted.saturating_mul(2))?;
        chosen.push(last);
        chosen.sort_unstable();
    }
    Some(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn coldest_first_each_at_most_twice_what_is_still_wanted() {
        // 448 wanted: the 1024 run (too large) is passed over for colder-ordered smaller ones.
        let runs = [64 * MIB, 1024 * MIB, 256 * MIB, 128 * MIB, 64 * MIB];
        assert_eq!(room_victims(448 * MIB, &runs), Some(vec![0, 2, 3]));
    }

    #[test]
    fn the_last_victim_may_be_larger_when_the_small_ones_run_out() {
        // The H100 case: 442 of 448 found in runs that fit, then only 64 MiB runs left,
        // more than twice the 6 MiB still wanted. Without the completion: no room at all.
        let mut runs = vec![64 * MIB; 6];
        runs.push(58 * MIB);
        runs.extend([64 * MIB, 32 * MIB, 64 * MIB]);
        let chosen = room_victims(448 * MIB, &runs).expect("room made");
        let room: u64 = chosen.iter().map(|&at| runs[at]).sum();
        assert!(room >= 448 * MIB, "{room}");
        // The coldest run that completes it: the first 64 MiB one left, not the smaller
        // but hotter 32 MiB one.
        assert_eq!(chosen, vec![0, 1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn the_completing_run_is_the_coldest_that_fits() {
        let runs = [4 * MIB, 512 * MIB, 300 * MIB, 300 * MIB, 900 * MIB];
        // 200 wanted: 4 taken, then 196 still wanted and every run left larger than twice
        // that; the 512 is more than twice the allocation, the first 300 completes it.
        assert_eq!(room_victims(200 * MIB, &runs), Some(vec![0, 2]));
    }

    #[test]
    fn the_completing_run_is_at_most_twice_the_allocation() {
        // 3 MiB wanted, a 2 MiB run found, then only 8 MiB runs: no weight's round trip
        // for so small an allocation.
        assert_eq!(room_victims(3 * MIB, &[2 * MIB, 8 * MIB, 8 * MIB]), None);
        assert_eq!(room_victims(4 * MIB, &[2 * MIB, 8 * MIB, 8 * MIB]), Some(vec![0, 1]));
    }

    #[test]
    fn no_room_when_all_of_it_is_too_little() {
        assert_eq!(room_victims(448 * MIB, &[64 * MIB, 128 * MIB]), None);
        assert_eq!(room_victims(MIB, &[]), None);
    }

    #[test]
    fn nothing_wanted_takes_nothing() {
        assert_eq!(room_victims(0, &[64 * MIB]), Some(vec![]));
    }
}
