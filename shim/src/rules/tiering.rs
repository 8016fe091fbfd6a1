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
//!   the headroom counts as answered. Free VRAM under a quarter of the headroom means
//!   the driver is already evicting managed pages for someone: then every tick demotes
//!   another shortfall's worth — device-resident managed memory beyond what is free is
//!   the oversubscription that can stall a shared GPU.
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

use std::cmp::Reverse;

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
}

/// One move; the index is into the candidates given to `plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    Promote(usize),
    Demote(usize),
    /// Moved to VRAM again: it is there as the accounts see it, perhaps not all of it.
    Refresh(usize),
}

impl Room {
    /// VRAM someone needs that is not answered yet.
    fn shortfall(&self) -> u64 {
        let short = self.headroom.saturating_sub(self.free);
        if self.pressing() {
            short
        } else {
            short.saturating_sub(self.answered)
        }
    }

    /// Free VRAM so low that the driver evicts managed memory for others: what is in
    /// VRAM may be in part on the host now.
    pub fn pressing(&self) -> bool {
        self.free < self.headroom / 4
    }

    /// Free VRAM that moves may fill now (the budget aside).
    fn fillable(&self) -> u64 {
        let keep = self.headroom.saturating_add(self.headroom / 4);
        self.free.saturating_sub(keep)
    }
}

/// The moves for one tick: demotions when someone needs VRAM, else promotions that fit.
pub fn plan(room: &Room, candidates: &[Candidate]) -> Vec<Move> {
    if room.free < room.headroom {
        return if room.demote { demotions(room.shortfall(), candidates) } else { Vec::new() };
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
    moves
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
        Room { free, headroom: G, budget_room: u64::MAX, loaded_room: u64::MAX, answered: 0, demote: true }
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
    fn under_pressure_every_tick_demotes_again() {
        let candidates = [at(G, true, 0, 0), at(G, true, 0, 1), at(G, true, 0, 2)];
        // Free VRAM under a quarter of the headroom: the driver is evicting for someone.
        let pressing = Room { answered: 10 * G, ..room(G / 8) };
        assert_eq!(plan(&pressing, &candidates), vec![Move::Demote(2)], "newest of equally cold first");
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
}
