//! Live tiering's policy (GREENBOOST_TIERING): which movable allocations move between
//! T2 and VRAM, from what the device has free. Pure functions of numbers the tier
//! thread (`tier_thread`) measured, unit-tested here.
//!
//! The rule, per device, at every tick:
//! - Free VRAM below the headroom means someone needs VRAM (another process, or this
//!   one's allocations the shim did not place): with demotion on, movable allocations
//!   in VRAM go back to T2, coldest first, until the shortfall is answered. The driver
//!   keeps demoted memory counted as used until another process asks for it, so free
//!   VRAM does not rise when we demote: what was demoted since free VRAM last stood at
//!   the headroom counts as answered, also when free VRAM is under a quarter of the
//!   headroom (the driver may be evicting managed pages for someone): the chunks the
//!   driver keeps go to whoever asks (bench/results/movable-vram-probe-2026-12-05.md),
//!   and demoting again at every tick sent all of an 18 GB model to T2 on the H200 (a
//!   16384-token prefill 60x slower than on a free GPU). Once the shortfall is answered,
//!   nothing is promoted, but roles still swap (below) unless free VRAM is under a
//!   quarter of the headroom: a swap in reuses what its swap out left the driver, unless
//!   the tier thread saw moves in take fresh VRAM there (`Room::swaps_while_short`).
//! - Otherwise, while free VRAM beyond the headroom (plus a slack of a quarter of it,
//!   for the program's own small allocations) and the budget leave room, movable
//!   allocations in T2 go to VRAM, the hottest first: the most read by matrix products
//!   since the last ticks, then those allocated after the program started computing
//!   (activations, KV cache), then the oldest. What was allocated before it computed
//!   (its weights, read once per forward) is promoted only into VRAM that leaves the
//!   reserve free: the reserve is the working set's, which is read many times over (on
//!   the H200 an HF 16384-token prefill beside another process with a 6 GiB reserve took
//!   17.9 s once promotions had filled the reserve with 10 GiB of weights and sent its
//!   activations to T2). Before them, allocations in VRAM that
//!   the driver may have evicted in part (free VRAM was under a quarter of the headroom
//!   while they were there) are moved to VRAM again, hottest first, each when the free
//!   VRAM has room for all of it (the driver does not say how much it took): their
//!   budget is charged already.
//! - Then, with what the VRAM and budget left promoted, roles are swapped within the VRAM
//!   this process holds: a T2 allocation read (per byte) more than `SWAP_MARGIN` times
//!   as often as allocations in VRAM goes to VRAM, and as many of those, coldest first,
//!   go to T2 to make its room — at most `Room::swap_limit` bytes a tick (demotion runs
//!   at 9-12 GB/s on the H200, bench/results/tiering-probe-2026-12-01.md). Heat is what
//!   launches and products read; a kernel's parameters name where it reads, not how
//!   much, so each launch that names an allocation counts all of it (of a large one cut
//!   into parts, the piece from the start it named to the next: `range_heat`).
//!
//! A candidate is a whole allocation or a run of neighbouring parts of a large one
//! (`memory::movable::Run`): the rule does not tell them apart. This is what lets
//!   a working set allocated after the weights took the VRAM displace them while the
//!   program computes, and the weights come back when the working set cools: a process
//!   never takes another's VRAM by swapping.

use std::cmp::{Ordering, Reverse};

/// A movable allocation as the policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub bytes: u64,
    pub in_vram: bool,
    /// Bytes matrix products read from it, decayed by half at every tick.
    pub heat: u64,
    /// Allocation order.
    pub sequence: u64,
    /// Allocated after the program started computing.
    pub after_computing: bool,
    /// In VRAM, but the driver may have evicted part of it since.
    pub maybe_evicted: bool,
}

/// A device's state at one tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// Free VRAM as the driver reports it.
    pub free: u64,
    pub headroom: u64,
    /// What the placement limit still leaves this process (budget, device room).
    pub budget_room: u64,
    /// The same with the reserve kept free: the room for what was allocated before the
    /// program computed.
    pub loaded_room: u64,
    /// Bytes demoted since free VRAM last stood at the headroom.
    pub answered: u64,
    /// GREENBOOST_DEMOTE.
    pub demote: bool,
    /// Most bytes one tick demotes to swap roles.
    pub swap_limit: u64,
    /// Whether roles may swap while free VRAM is under the headroom (the shortfall
    /// answered): not once moves in were seen to take fresh VRAM there.
    pub swaps_while_short: bool,
}

/// How many times hotter per byte a T2 allocation must be than the allocations it
/// displaces from VRAM, so that two about as hot never trade places back and forth.
pub const SWAP_MARGIN: u64 = 2;

/// One move; the index is into the candidates given to `plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    Promote(usize),
    Demote(usize),
    /// Moved to VRAM again: it is there as the accounts see it, perhaps not all of it.
    Refresh(usize),
    /// Moved to VRAM into the room the same tick's `SwapOut`s make: carried out after
    /// them, and only into what they gave back.
    SwapIn(usize),
    /// Moved to T2 to make room for a hotter `SwapIn`.
    SwapOut(usize),
}

impl Room {
    /// VRAM someone needs that is not answered yet.
    fn shortfall(&self) -> u64 {
        self.headroom.saturating_sub(self.free).saturating_sub(self.answered)
    }

    /// Free VRAM so low that the driver evicts managed memory for others: what is in
    /// VRAM may be in part on the host now.
    pub fn pressing(&self) -> bool {
        self.free < self.headroom / 4
    }

    /// Free VRAM that moves may fill now (the budget aside).
    pub fn fillable(&self) -> u64 {
        let keep = self.headroom.saturating_add(self.headroom / 4);
        self.free.saturating_sub(keep)
    }
}

/// The moves for one tick: demotions when someone needs VRAM, else promotions that fit.
pub fn plan(room: &Room, candidates: &[Candidate]) -> Vec<Move> {
    if room.free < room.headroom {
        let shortfall = room.shortfall();
        if shortfall > 0 {
            return if room.demote { demotions(shortfall, candidates) } else { Vec::new() };
        }
        // Answered: free VRAM reads under the headroom because the driver keeps what was
        // demoted. Nothing is promoted into it, but roles still swap inside the VRAM this
        // process holds (a swap in reuses what its swap out left the driver), unless
        // moves in were seen to take fresh VRAM instead.
        let mut moves = Vec::new();
        if room.swaps_while_short && !room.pressing() {
            swaps(room.swap_limit, candidates, &mut moves);
        }
        return moves;
    }
    let mut order: Vec<usize> = (0..candidates.len()).filter(|&i| wants_vram(&candidates[i])).collect();
    order.sort_by_key(|&i| {
        let c = &candidates[i];
        (Reverse(c.in_vram), Reverse(c.heat), Reverse(c.after_computing), c.sequence)
    });
    let (mut free_left, mut budget_left, mut loaded_left) = (room.fillable(), room.budget_room, room.loaded_room);
    let mut moves = Vec::new();
    for i in order {
        let c = &candidates[i];
        let limit = if c.after_computing { budget_left } else { budget_left.min(loaded_left) };
        if c.in_vram && c.bytes <= free_left {
            free_left -= c.bytes;
            moves.push(Move::Refresh(i));
        } else if !c.in_vram && c.bytes <= free_left.min(limit) {
            free_left -= c.bytes;
            budget_left -= c.bytes;
            loaded_left = loaded_left.saturating_sub(c.bytes);
            moves.push(Move::Promote(i));
        }
    }
    swaps(room.swap_limit, candidates, &mut moves);
    moves
}

/// Appends to `moves` (the tick's promotions and refreshes) the swaps of roles that
/// `swap_limit` bytes of demotion allow: the hottest T2 allocations per byte first, each
/// with the coldest allocations in VRAM that make its room, when all of them together
/// are read `SWAP_MARGIN` times less than it. An allocation in VRAM much larger than the
/// room still wanted is passed over for smaller ones.
fn swaps(swap_limit: u64, candidates: &[Candidate], moves: &mut Vec<Move>) {
    let moving =
        |i: usize, moves: &[Move]| moves.iter().any(|m| matches!(m, Move::Promote(j) | Move::Refresh(j) if *j == i));
    let mut hot: Vec<usize> = (0..candidates.len())
        .filter(|&i| !candidates[i].in_vram && candidates[i].heat > 0 && !moving(i, moves))
        .collect();
    hot.sort_by(|&a, &b| hotter_per_byte(&candidates[b], &candidates[a]));
    let mut cold: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].in_vram && !candidates[i].maybe_evicted && !moving(i, moves))
        .collect();
    cold.sort_by(|&a, &b| hotter_per_byte(&candidates[a], &candidates[b]));
    let mut left = swap_limit;
    for h in hot {
        let wanted = &candidates[h];
        if wanted.bytes > left {
            continue;
        }
        // Victims no larger than twice the room still wanted, then any that fit the limit.
        let (room, heat, mut chosen) = [false, true]
            .into_iter()
            .map(|any_size| victims(wanted, &cold, candidates, left, any_size))
            .find(|(room, ..)| *room >= wanted.bytes)
            .unwrap_or_default();
        if room < wanted.bytes || heat.saturating_mul(SWAP_MARGIN) >= wanted.heat || room > left {
            continue;
        }
        left -= room;
        chosen.sort_unstable();
        for at in chosen.iter().rev() {
            moves.push(Move::SwapOut(cold.remove(*at)));
        }
        moves.push(Move::SwapIn(h));
    }
}

/// The coldest allocations in VRAM (`cold`, coldest first; positions in it) that make room
/// for `wanted`, each read `SWAP_MARGIN` times less per byte; with `any_size` false, none
/// larger than twice the room still wanted. Their bytes and heat, and their positions.
fn victims(
    wanted: &Candidate,
    cold: &[usize],
    candidates: &[Candidate],
    left: u64,
    any_size: bool,
) -> (u64, u64, Vec<usize>) {
    let (mut room, mut heat, mut chosen) = (0u64, 0u64, Vec::new());
    for (at, &v) in cold.iter().enumerate() {
        if room >= wanted.bytes {
            break;
        }
        let victim = &candidates[v];
        // Not `SWAP_MARGIN` times colder per byte (which includes hotter): sorted coldest
        // first, the rest are hotter still.
        if u128::from(victim.heat) * u128::from(SWAP_MARGIN) * u128::from(wanted.bytes)
            >= u128::from(wanted.heat) * u128::from(victim.bytes.max(1))
        {
            break;
        }
        let still = wanted.bytes - room;
        if victim.bytes > left.saturating_sub(room) || (!any_size && victim.bytes > still.saturating_mul(2)) {
            continue;
        }
        room += victim.bytes;
        heat += victim.heat;
        chosen.push(at);
    }
    (room, heat, chosen)
}

/// Orders two allocations by heat per byte (exact, in 128 bits).
fn hotter_per_byte(a: &Candidate, b: &Candidate) -> Ordering {
    per_byte((a.heat, a.bytes), (b.heat, b.bytes))
}

/// Orders two (heat, bytes) pairs by heat per byte, exactly (cross-multiplied in 128 bits):
/// the one order of live tiering's swaps, the room made at once and the heat table.
pub fn per_byte((heat_a, bytes_a): (u64, u64), (heat_b, bytes_b): (u64, u64)) -> Ordering {
    (u128::from(heat_a) * u128::from(bytes_b.max(1))).cmp(&(u128::from(heat_b) * u128::from(bytes_a.max(1))))
}

/// In T2, or in VRAM with part of it perhaps evicted.
fn wants_vram(c: &Candidate) -> bool {
    !c.in_vram || c.maybe_evicted
}

/// Allocations in VRAM, coldest first, until `shortfall` bytes go back.
fn demotions(shortfall: u64, candidates: &[Candidate]) -> Vec<Move> {
    let mut order: Vec<usize> = (0..candidates.len()).filter(|&i| candidates[i].in_vram).collect();
    order.sort_by_key(|&i| {
        let c = &candidates[i];
        (c.heat, c.after_computing, Reverse(c.sequence))
    });
    let mut freed = 0u64;
    let mut moves = Vec::new();
    for i in order {
        if freed >= shortfall {
            break;
        }
        freed = freed.saturating_add(candidates[i].bytes);
        moves.push(Move::Demote(i));
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn at(bytes: u64, in_vram: bool, heat: u64, sequence: u64) -> Candidate {
        Candidate { bytes, in_vram, heat, sequence, after_computing: false, maybe_evicted: false }
    }

    fn room(free: u64) -> Room {
        Room {
            free,
            headroom: G,
            budget_room: u64::MAX,
            loaded_room: u64::MAX,
            answered: 0,
            demote: true,
            swap_limit: 0,
            swaps_while_short: true,
        }
    }

    #[test]
    fn promotes_the_hottest_that_fit_and_keeps_the_headroom_and_slack() {
        let candidates = [at(2 * G, false, 0, 0), at(2 * G, false, 50, 1), at(G, false, 10, 2), at(G, true, 99, 3)];
        // 5.25 GiB free: 4 GiB beyond the headroom and its slack.
        let moves = plan(&room(5 * G + G / 4), &candidates);
        assert_eq!(moves, vec![Move::Promote(1), Move::Promote(2)], "hottest first; what is in VRAM stays");
        // Skips what does not fit, takes a smaller one after it.
        let candidates = [at(3 * G, false, 9, 0), at(G, false, 1, 1)];
        assert_eq!(plan(&room(3 * G), &candidates), vec![Move::Promote(1)]);
        // Nothing beyond the headroom and slack: nothing moves.
        assert_eq!(plan(&room(G + G / 4), &[at(2 << 20, false, 1, 0)]), vec![]);
    }

    #[test]
    fn the_budget_bounds_promotion() {
        let limited = Room { budget_room: G, ..room(40 * G) };
        assert_eq!(plan(&limited, &[at(2 * G, false, 0, 0), at(G, false, 0, 1)]), vec![Move::Promote(1)]);
        let spent = Room { budget_room: 0, ..room(40 * G) };
        assert_eq!(plan(&spent, &[at(1, false, 0, 0)]), vec![]);
    }

    #[test]
    fn weights_are_not_promoted_into_the_reserve_the_working_set_is() {
        let mut activations = at(2 * G, false, 0, 9);
        activations.after_computing = true;
        let weights = at(2 * G, false, 99, 0);
        // 4 GiB of budget room, 1 GiB of it outside the reserve: the hot weights wait.
        let reserve_left = Room { budget_room: 4 * G, loaded_room: G, ..room(40 * G) };
        assert_eq!(plan(&reserve_left, &[weights, activations]), vec![Move::Promote(1)]);
        // Room outside the reserve: the weights too, hottest first.
        let roomy = Room { budget_room: 4 * G, loaded_room: 3 * G, ..room(40 * G) };
        assert_eq!(plan(&roomy, &[weights, activations]), vec![Move::Promote(0), Move::Promote(1)]);
    }

    #[test]
    fn without_reads_what_was_allocated_after_computing_goes_first_then_the_oldest() {
        let mut kv = at(G, false, 0, 5);
        kv.after_computing = true;
        let candidates = [at(G, false, 0, 3), at(G, false, 0, 1), kv];
        assert_eq!(plan(&room(3 * G), &candidates), vec![Move::Promote(2)]);
        assert_eq!(plan(&room(4 * G), &candidates), vec![Move::Promote(2), Move::Promote(1)]);
    }

    #[test]
    fn demotes_the_coldest_until_the_shortfall_is_answered() {
        let candidates = [at(G, true, 100, 0), at(G / 2, true, 1, 1), at(G / 2, true, 5, 2), at(4 * G, false, 0, 3)];
        // 0.5 GiB short of the 1 GiB headroom (not pressing): the coldest half GiB.
        assert_eq!(plan(&room(G / 2), &candidates), vec![Move::Demote(1)]);
        // 0.7 GiB short: two.
        assert_eq!(plan(&room(3 * G / 10), &candidates), vec![Move::Demote(1), Move::Demote(2)]);
        // What was demoted already answers the shortfall: free VRAM does not rise.
        let answered = Room { answered: G / 2, ..room(G / 2) };
        assert_eq!(plan(&answered, &candidates), vec![]);
        // Never promotes while short, even with demotion off.
        let off = Room { demote: false, ..room(G / 2) };
        assert_eq!(plan(&off, &candidates), vec![]);
    }

    #[test]
    fn under_pressure_a_shortfall_is_answered_once() {
        let candidates = [at(G, true, 0, 0), at(G, true, 0, 1), at(G, true, 0, 2)];
        // Free VRAM under a quarter of the headroom: the driver may be evicting for someone.
        let pressing = room(G / 8);
        assert_eq!(plan(&pressing, &candidates), vec![Move::Demote(2)], "newest of equally cold first");
        // Once answered, nothing more goes: free VRAM does not rise when we demote.
        assert_eq!(plan(&Room { answered: G, ..pressing }, &candidates), vec![]);
        // Nothing in VRAM: nothing to do.
        assert_eq!(plan(&pressing, &[at(G, false, 0, 0)]), vec![]);
    }

    #[test]
    fn what_the_driver_may_have_evicted_moves_back_first_within_free_vram_not_the_budget() {
        let mut evicted = at(2 * G, true, 0, 0);
        evicted.maybe_evicted = true;
        let candidates = [at(G, false, 99, 1), evicted, at(G, true, 0, 2)];
        // 3.25 GiB free, the budget spent: the refresh needs no budget, a promotion does.
        let spent = Room { budget_room: 0, ..room(3 * G + G / 4) };
        assert_eq!(plan(&spent, &candidates), vec![Move::Refresh(1)], "refresh only; in VRAM and not evicted stays");
        // With the budget: the refresh first (hotter or not), then what still fits.
        assert_eq!(plan(&room(4 * G + G / 4), &candidates), vec![Move::Refresh(1), Move::Promote(0)]);
        // Free VRAM for less than all of it: it waits (the driver does not say how much it took).
        assert_eq!(plan(&Room { budget_room: 0, ..room(2 * G + G / 4) }, &candidates), vec![]);
    }

    fn swapping(free: u64, limit: u64) -> Room {
        Room { budget_room: 0, swap_limit: limit, ..room(free) }
    }

    #[test]
    fn a_hot_t2_allocation_swaps_with_the_coldest_in_vram() {
        // VRAM full (budget spent): weights in VRAM read once, a working set in T2 read often.
        let candidates = [at(G, true, G, 0), at(G, true, 4 * G, 1), at(G, false, 40 * G, 2), at(G / 2, true, 0, 3)];
        let moves = plan(&swapping(G + G / 4, 4 * G), &candidates);
        assert_eq!(
            moves,
            vec![Move::SwapOut(0), Move::SwapOut(3), Move::SwapIn(2)],
            "coldest per byte first, enough for it"
        );
        // Nothing colder by the margin: nothing moves.
        let even = [at(G, true, 30 * G, 0), at(G, false, 40 * G, 1)];
        assert_eq!(plan(&swapping(G + G / 4, 4 * G), &even), vec![]);
        // Cold T2, hot VRAM: nothing moves.
        let settled = [at(G, true, 40 * G, 0), at(G, false, G, 1)];
        assert_eq!(plan(&swapping(G + G / 4, 4 * G), &settled), vec![]);
    }

    #[test]
    fn swaps_keep_to_the_limit_and_pass_over_victims_far_too_large() {
        let candidates = [at(8 * G, true, 0, 0), at(G, true, 0, 1), at(G, false, 10 * G, 2), at(G, false, 9 * G, 3)];
        // One GiB a tick: the hottest swaps with the 1 GiB victim; the 8 GiB one is passed over.
        assert_eq!(plan(&swapping(G + G / 4, G), &candidates), vec![Move::SwapOut(1), Move::SwapIn(2)]);
        // No limit: nothing swaps.
        assert_eq!(plan(&swapping(G + G / 4, 0), &candidates), vec![]);
        // Room for more: the second goes with the large victim only when the limit allows it.
        assert_eq!(
            plan(&swapping(G + G / 4, 10 * G), &candidates),
            vec![Move::SwapOut(1), Move::SwapIn(2), Move::SwapOut(0), Move::SwapIn(3)]
        );
    }

    #[test]
    fn promotions_come_before_swaps_and_nothing_swaps_while_short_of_an_unanswered_headroom() {
        // Room for one promotion: the hottest is promoted, the next swaps.
        let candidates = [at(G, false, 50 * G, 0), at(G, false, 40 * G, 1), at(G, true, 0, 2)];
        let roomy = Room { budget_room: G, swap_limit: 4 * G, ..room(3 * G) };
        assert_eq!(plan(&roomy, &candidates), vec![Move::Promote(0), Move::SwapOut(2), Move::SwapIn(1)]);
        // Free VRAM under the headroom: demotions only, whatever the heat.
        let short = Room { swap_limit: 4 * G, ..room(G / 2) };
        assert_eq!(plan(&short, &candidates), vec![Move::Demote(2)]);
        // The shortfall answered (free VRAM does not rise when we demote): swaps, no promotion.
        let answered = Room { answered: G / 2, ..short };
        assert_eq!(plan(&answered, &candidates), vec![Move::SwapOut(2), Move::SwapIn(0)]);
        // Unless swaps were seen to take fresh VRAM there.
        assert_eq!(plan(&Room { swaps_while_short: false, ..answered }, &candidates), vec![]);
        // Pressing (the driver may evict for someone), answered: no swaps either.
        let pressing = Room { answered: 10 * G, ..Room { swap_limit: 4 * G, ..room(G / 8) } };
        assert_eq!(plan(&pressing, &candidates), vec![]);
    }
}
