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
//!   the headroom counts as answered, and so does what swaps moved out where their
//!   moves in took fresh VRAM instead of it (`Carried`), also when free VRAM is under a
//!   quarter of the headroom (the driver may be evicting managed pages for someone): the
//!   chunks the driver keeps go to whoever asks (bench/results/movable-vram-probe-2026-12-05.md),
//!   and demoting again at every tick sent all of an 18 GB model to T2 on the H200 (a
//!   16384-token prefill 60x slower than on a free GPU). Once the shortfall is answered,
//!   nothing is promoted, but roles still swap (below): a swap in reuses what its swap
//!   out left the driver, unless the tier thread saw moves in take fresh VRAM on the
//!   device (`Room::driver_keeps`): from then on swaps there move in only what free VRAM
//!   beyond the headroom's slack holds, none while free VRAM is under the headroom,
//!   until the driver has next to none left to give them (`Room::drained`).
//! - Otherwise, while free VRAM beyond the headroom (plus a slack of a quarter of it,
//!   for the program's own small allocations) and the budget leave room, movable
//!   allocations in T2 go to VRAM, the hottest first: the most read a tick, then the
//!   program's working memory (activations, KV cache: allocated once it computes, or
//!   after it pooled its weights), then the oldest. What was allocated before
//!   (its weights, read once per forward) is promoted only into VRAM that leaves the
//!   reserve free, and not while room is being made for the working set
//!   (`Room::working_set_growing`), nor swapped in then: the reserve is the
//!   working set's, which is read many times over (on
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
//!   launches and products read a tick, over the interval between reads (`read_rate`:
//!   what is read once per pass is alike whatever its phase); a kernel's parameters name
//!   where it reads, not how much, so each launch that names an allocation counts all of it (of a large one cut
//!   into parts, the piece from the start it named to the next: `range_heat`).
//!
//! A candidate is a whole allocation or a run of neighbouring parts of a large one
//! (`memory::movable::Run`): the rule does not tell them apart. This is what lets
//!   a working set allocated after the weights took the VRAM displace them while the
//!   program computes; the weights come back into VRAM that the working set frees or
//!   other processes leave, or over parts of it idle for several passes of the program
//!   (`WORKING_SET_IDLE_PASSES`; `swaps` says why): a process never takes another's VRAM
//!   by swapping.

use std::cmp::{Ordering, Reverse};

/// A movable allocation as the policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub bytes: u64,
    pub in_vram: bool,
    /// Bytes read of it a tick, over the interval between its reads (`read_rate`).
    pub heat: u64,
    /// Allocation order.
    pub sequence: u64,
    /// Working memory: allocated once the program computes, or after it pooled its
    /// weights (`budget::allocating_working_memory`).
    pub working_memory: bool,
    /// Ticks since it was last read (since its allocation before its first read).
    pub idle_ticks: u32,
    /// In VRAM, but the driver may have evicted part of it since.
    pub maybe_evicted: bool,
    /// In T2 with the VRAM chunks it left when it moved out still kept for it by the
    /// driver: moving in, it takes those, not free VRAM (`memory::movable_part`).
    pub chunks_kept: bool,
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
    /// Room is being made for the working set (`engine::room_made`): what was allocated
    /// before the program computed stays where it is, promoted or swapped in by no tick.
    pub working_set_growing: bool,
    /// Bytes demoted since free VRAM last stood at the headroom.
    pub answered: u64,
    /// GREENBOOST_DEMOTE.
    pub demote: bool,
    /// Most bytes one tick demotes to swap roles (none before the GPU has read anything:
    /// `tier_thread`).
    pub swap_limit: u64,
    /// Moves into VRAM on this device were seen to take fresh VRAM where this process's
    /// moves out had left the driver VRAM (it keeps what they leave for the pages that
    /// left it, and gives it to whoever asks only once it has no free VRAM): from then on
    /// swaps move in only into free VRAM the promotions left of `fillable`, unless the
    /// device is drained or what moves in takes the chunks it left
    /// (`Candidate::chunks_kept`). Before, each swap took up to one group of 256 MiB past
    /// the plan, once more every time free VRAM came back to the headroom: on an H100 two
    /// processes sharing the GPU so left it 82 MiB free
    /// (bench/results/gpu-test-2026-12-05-fae13421b7b2-plain-pressure-shared-h100.md).
    pub driver_keeps: bool,
}

/// Free VRAM under which the driver has next to nothing to give a move into VRAM but the
/// chunks it keeps of moves out: less than one of the batches its managed-memory
/// allocator takes at once (128 MiB of 2 MiB chunks, `uvm_perf_pma_batch_nonpinned_order`
/// in NVIDIA's open nvidia-uvm).
pub const DRAINED_FREE: u64 = 64 << 20;

/// How many times hotter per byte a T2 allocation must be than the allocations it
/// displaces from VRAM, so that two about as hot never trade places back and forth.
pub const SWAP_MARGIN: u64 = 2;

/// How many of the program's passes a part of the working set (its working memory) must
/// go unread before what was loaded before it displaces it, a pass being the interval between reads of what would come in
/// (`idle_long_enough`; `swaps` says why). A decode frees a token's blocks and takes them
/// again within one pass: a part unread for several is not one of those.
pub const WORKING_SET_IDLE_PASSES: u64 = 4;

/// The fewest and the most ticks that is: 1 s and 5 s at the default tick of 100 ms. A
/// fixed 5 s outlasted the whole decode of an HF generate of 16 tokens at 9 tokens/s
/// after a long prompt, its weights read over the link all along
/// (bench/results/longctx-2026-12-05.md); what decodes slower than a pass a second waits
/// longer.
pub const WORKING_SET_IDLE_TICKS: (u32, u32) = (10, 50);

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
    /// VRAM may be in part on the host now. The VRAM it keeps of this process's moves out
    /// (`answered`) counts as free here: it holds no data, and the driver takes it before
    /// any that does (`pick_root_chunk_to_evict` in NVIDIA's open nvidia-uvm: free chunks,
    /// then unused ones, then used ones). Else room made for a working set, which takes
    /// fresh VRAM beside what its victims leave the driver, would soon read as pressure,
    /// and nothing in VRAM would be a victim any more: on an H100 an HF prefill's larger
    /// activations went to T2 so (bench/results/longctx-2026-12-05.md).
    pub fn pressing(&self) -> bool {
        self.free.saturating_add(self.answered) < self.headroom / 4
    }

    /// Free VRAM so low that moves into VRAM take the chunks the driver keeps of moves
    /// out (it takes them before anything that holds data) and at most `DRAINED_FREE` of
    /// another's: swaps may go on there, also where moves in took fresh VRAM before. After
    /// an HF prefill on an H100 they had stopped so with free VRAM at 2 MiB, and the
    /// weights demoted to make room for it stayed in T2 for the decode that read them at
    /// every token (3.0 tokens/s where 9.3 were before room was made,
    /// bench/results/longctx-2026-12-05.md).
    pub fn drained(&self) -> bool {
        self.free < DRAINED_FREE
    }

    /// Most bytes swaps may move into VRAM that take free VRAM (not the chunks they left:
    /// `Candidate::chunks_kept`), given the free VRAM the tick's promotions left of
    /// `fillable`: that, where the driver keeps what moves out leave (`driver_keeps`) and
    /// the device is not drained; else no bound, the moves in stopped once they took one
    /// run past the plan (`engine::tier_thread`).
    fn swap_in_room(&self, fillable_left: u64) -> u64 {
        if self.driver_keeps && !self.drained() {
            fillable_left
        } else {
            u64::MAX
        }
    }

    /// Free VRAM that moves may fill now (the budget aside).
    pub fn fillable(&self) -> u64 {
        self.free.saturating_sub(kept_free(self.headroom))
    }
}

/// Free VRAM promotions leave: the headroom and a slack of a quarter of it, for the
/// program's own small allocations.
pub fn kept_free(headroom: u64) -> u64 {
    headroom.saturating_add(headroom / 4)
}

/// What one tick leaves the next on a device; the tier thread resets it once free VRAM
/// stands at the headroom again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// VRAM the driver keeps of what this process moved out since free VRAM last stood at
    /// the headroom, as far as known (`Room::answered`): what was demoted, and what swaps
    /// moved out where their moves in took fresh VRAM instead of it.
    pub answered: u64,
}

/// What one tick's moves did, as the tier thread measured them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Bytes demoted to answer a shortfall.
    pub demoted: u64,
    /// Bytes swaps moved into VRAM (into the room their moves out made).
    pub swapped_in: u64,
    /// Free VRAM the plan let moves into VRAM take (`Room::fillable`).
    pub planned: u64,
    /// Free VRAM they took: free VRAM before the first move in less free VRAM after the
    /// last.
    pub taken: u64,
    /// How much free VRAM rose over the moves out, by themselves or given back
    /// (`engine::give_back`): what the driver did not keep of them. Included in `planned`.
    pub given_back: u64,
}

impl Outcome {
    /// Free VRAM the swaps' moves in took past the plan: fresh VRAM, where the driver was
    /// to give them what the same tick's moves out left it. At least that much of what
    /// those moved out the driver still keeps.
    pub fn kept_by_swaps(&self) -> u64 {
        self.taken.saturating_sub(self.planned).min(self.swapped_in)
    }
}

impl Carried {
    /// What the next tick carries after a tick that did `outcome`. VRAM the driver keeps
    /// after swaps that took fresh VRAM answers the shortfall those made, as a demotion
    /// does (the driver gives it to whoever asks): else the next tick would demote what
    /// the swaps just moved in, and free VRAM would not rise for it (the tier thread
    /// remembers such swaps apart, for good: `Room::driver_keeps`). What came back as free
    /// VRAM went to the swaps' moves in first; the rest answers the shortfall the
    /// demotions were for by itself, the driver keeps none of it.
    pub fn after(self, outcome: &Outcome) -> Carried {
        let kept = outcome.kept_by_swaps();
        let freed_by_demotions = outcome.given_back.saturating_sub(outcome.swapped_in).min(outcome.demoted);
        Carried { answered: self.answered.saturating_add(outcome.demoted - freed_by_demotions).saturating_add(kept) }
    }
}

/// Kept VRAM too small to give back (`engine::give_back`): one allocation's cost for less
/// is not worth the moment it holds all of the device's free VRAM.
pub const GIVE_BACK_LEAST: u64 = 32 << 20;

/// A device after moves out of VRAM, for the give-back (`engine::give_back`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AfterMovesOut {
    /// What the moves took out of VRAM that free VRAM does not show: the driver keeps it.
    pub kept: u64,
    /// Free VRAM before the moves, and now.
    pub free_before: u64,
    pub free: u64,
    pub headroom: u64,
    /// Bytes about to move into VRAM (a tick's moves in, an allocation's room).
    pub wanted: u64,
    /// This process's managed memory still in VRAM on the device: what the driver evicts
    /// for another process's allocation made during the give-back's moment, instead of
    /// failing it.
    pub evictable: u64,
}

impl AfterMovesOut {
    /// Whether what the driver keeps is to be given back: where the device binds (free
    /// VRAM does not hold what promotions leave free and what is about to move in), at
    /// least `GIVE_BACK_LEAST`, and not where free VRAM was under a quarter of the
    /// headroom before the moves (`Room::pressing`): the driver may have evicted those
    /// pages for someone's allocation already, so that it keeps none of their chunks, and
    /// the give-back would make it evict pages that hold data (this process's or another's).
    /// And only while this process holds at least the headroom of managed memory in VRAM
    /// besides: for the moment the allocation holds every free byte, another process's
    /// allocation is served by the driver evicting those pages, as the headroom would have
    /// served it; with nothing to evict it fails (on an H100 a neighbour allocating in a
    /// loop failed 4 times in 36006, the probe's other managed memory evicted by then:
    /// bench/results/give-back-probe-2026-12-05.md).
    pub fn give_back_wanted(&self) -> bool {
        self.kept >= GIVE_BACK_LEAST
            && self.free_before >= self.headroom / 4
            && self.free < kept_free(self.headroom).saturating_add(self.wanted)
            && self.evictable >= self.headroom
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
        // demoted (never pressing then: that VRAM counts as free). Nothing is promoted
        // into it, but roles still swap inside the VRAM this process holds (a swap in
        // reuses what its swap out left the driver), unless moves in were seen to take
        // fresh VRAM instead (no free VRAM beyond the slack to move into).
        let mut moves = Vec::new();
        swaps(room, room.swap_in_room(0), candidates, &mut moves);
        return moves;
    }
    let mut order: Vec<usize> = (0..candidates.len()).filter(|&i| wants_vram(&candidates[i])).collect();
    order.sort_by_key(|&i| {
        let c = &candidates[i];
        (Reverse(c.in_vram), Reverse(c.heat), Reverse(c.working_memory), c.sequence)
    });
    let loaded_room = if room.working_set_growing { 0 } else { room.loaded_room };
    let (mut free_left, mut budget_left, mut loaded_left) = (room.fillable(), room.budget_room, loaded_room);
    let mut moves = Vec::new();
    for i in order {
        let c = &candidates[i];
        let limit = if c.working_memory { budget_left } else { budget_left.min(loaded_left) };
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
    swaps(room, room.swap_in_room(free_left), candidates, &mut moves);
    moves
}

/// Appends to `moves` (the tick's promotions and refreshes) the swaps of roles that
/// `Room::swap_limit` bytes of demotion allow: the hottest T2 allocations per byte first,
/// each with the coldest allocations in VRAM that make its room, when all of them
/// together are read `SWAP_MARGIN` times less than it. An allocation in VRAM much larger
/// than the room still wanted is passed over for smaller ones. While the working set
/// grows, what was loaded before the working memory is not swapped in: the room is the working
/// set's, and the next allocation would demote it again (on an H100 an HF prefill so
/// promoted and demoted 27.8 GB, bench/results/2026-12-05-4dd3d98c4b53-longctx-h100.md).
/// At most `in_room` bytes move in that take free VRAM (`Room::swap_in_room`); those
/// that take back the chunks they left (`Candidate::chunks_kept`) take none of it, which
/// brings weights moved out for a working set back into the VRAM they held once that
/// working set idles, also where free VRAM stands under the headroom.
///
/// The working memory is displaced by what was loaded before it (the weights) only once it has gone unread for `WORKING_SET_IDLE_PASSES`
/// of its passes, however cold it looks before: a caching allocator (PyTorch's) keeps the
/// blocks the program freed and hands them out again where it likes, so the parts of its
/// segments that no launch named lately are the ones the next allocation takes. On an
/// H100, an HF decode after a 16384-token prefill swapped such parts out for weights at
/// every tick, the next tokens' KV cache landed in them in T2, and swaps brought them
/// back: 1.75 tokens/s where the same run without that churn decoded 10.6
/// (bench/results/longctx-2026-12-05.md). Weights displace weights, the working set
/// displaces either, and weights come back over the working set that stays idle.
fn swaps(room: &Room, in_room: u64, candidates: &[Candidate], moves: &mut Vec<Move>) {
    let moving =
        |i: usize, moves: &[Move]| moves.iter().any(|m| matches!(m, Move::Promote(j) | Move::Refresh(j) if *j == i));
    let may_come = |c: &Candidate| c.working_memory || !room.working_set_growing;
    let mut hot: Vec<usize> = (0..candidates.len())
        .filter(|&i| !candidates[i].in_vram && candidates[i].heat > 0 && may_come(&candidates[i]) && !moving(i, moves))
        .collect();
    hot.sort_by(|&a, &b| hotter_per_byte(&candidates[b], &candidates[a]));
    let mut cold: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].in_vram && !candidates[i].maybe_evicted && !moving(i, moves))
        .collect();
    cold.sort_by(|&a, &b| hotter_per_byte(&candidates[a], &candidates[b]));
    let (mut left, mut in_left) = (room.swap_limit, in_room);
    for h in hot {
        let wanted = &candidates[h];
        let takes_free = if wanted.chunks_kept { 0 } else { wanted.bytes };
        if wanted.bytes > left || takes_free > in_left {
            continue;
        }
        // Victims no larger than twice the room still wanted, then any that fit the limit.
        let (freed, heat, mut chosen) = [false, true]
            .into_iter()
            .map(|any_size| victims(wanted, &cold, candidates, left, any_size))
            .find(|(freed, ..)| *freed >= wanted.bytes)
            .unwrap_or_default();
        if freed < wanted.bytes || heat.saturating_mul(SWAP_MARGIN) >= wanted.heat || freed > left {
            continue;
        }
        left -= freed;
        in_left -= takes_free;
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
        if victim.working_memory && !wanted.working_memory && !idle_long_enough(victim, wanted) {
            // The working set is not displaced by what was loaded before it until
            // it has long been idle: see `swaps`.
            continue;
        }
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

/// Whether a part of the working set, `victim`, has gone unread long enough for `wanted`,
/// loaded before the working memory, to displace it: `WORKING_SET_IDLE_PASSES` of the ticks
/// between `wanted`'s reads (read `heat` bytes a tick, it is read whole every
/// `bytes / heat` ticks), within `WORKING_SET_IDLE_TICKS`.
fn idle_long_enough(victim: &Candidate, wanted: &Candidate) -> bool {
    let pass = wanted.bytes.div_ceil(wanted.heat.max(1));
    let (least, most) = WORKING_SET_IDLE_TICKS;
    u64::from(victim.idle_ticks) >= pass.saturating_mul(WORKING_SET_IDLE_PASSES).clamp(least.into(), most.into())
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
        (c.heat, c.working_memory, Reverse(c.sequence))
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
#[path = "tiering_tests.rs"]
mod tests;
