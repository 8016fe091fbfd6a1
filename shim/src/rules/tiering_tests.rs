//! Unit tests of live tiering's policy (`tiering`): the moves of one tick from the
//! figures the tier thread would measure, and what a tick carries to the next.

use super::*;

const G: u64 = 1 << 30;

fn at(bytes: u64, in_vram: bool, heat: u64, sequence: u64) -> Candidate {
    Candidate {
        bytes,
        in_vram,
        heat,
        sequence,
        working_memory: false,
        idle_ticks: 0,
        maybe_evicted: false,
        chunks_kept: false,
    }
}

fn room(free: u64) -> Room {
    Room {
        free,
        headroom: G,
        budget_room: u64::MAX,
        loaded_room: u64::MAX,
        working_set_growing: false,
        answered: 0,
        demote: true,
        swap_limit: 0,
        driver_keeps: false,
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
    activations.working_memory = true;
    let weights = at(2 * G, false, 99, 0);
    // 4 GiB of budget room, 1 GiB of it outside the reserve: the hot weights wait.
    let reserve_left = Room { budget_room: 4 * G, loaded_room: G, ..room(40 * G) };
    assert_eq!(plan(&reserve_left, &[weights, activations]), vec![Move::Promote(1)]);
    // Room outside the reserve: the weights too, hottest first.
    let roomy = Room { budget_room: 4 * G, loaded_room: 3 * G, ..room(40 * G) };
    assert_eq!(plan(&roomy, &[weights, activations]), vec![Move::Promote(0), Move::Promote(1)]);
}

#[test]
fn without_reads_what_was_allocated_working_memory_goes_first_then_the_oldest() {
    let mut kv = at(G, false, 0, 5);
    kv.working_memory = true;
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
    let answered = Room { answered: G, ..pressing };
    assert_eq!(plan(&answered, &candidates), vec![]);
    // And it is pressure no more: the driver takes the VRAM it keeps of what was demoted
    // before it evicts anything that holds data.
    assert!(pressing.pressing() && !answered.pressing());
    assert!(Room { answered: G / 16, ..pressing }.pressing(), "free and kept together under a quarter");
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
fn while_the_working_set_grows_only_what_came_working_memory_swaps_in_or_is_promoted() {
    let mut kv = at(G, false, 40 * G, 2);
    kv.working_memory = true;
    // A hot weight demoted to make room, a hot KV block, a cold activation in VRAM.
    let mut activation = at(2 * G, true, 0, 3);
    activation.working_memory = true;
    let candidates = [at(G, false, 80 * G, 0), kv, activation];
    let growing = Room { working_set_growing: true, ..swapping(G + G / 4, 4 * G) };
    assert_eq!(plan(&growing, &candidates), vec![Move::SwapOut(2), Move::SwapIn(1)], "the KV block alone");
    assert_eq!(
        plan(&swapping(G + G / 4, 4 * G), &candidates),
        vec![Move::SwapOut(2), Move::SwapIn(1)],
        "once it stops growing, still the KV block: the weight displaces no working set"
    );
    // Drained and answered, swaps go on, still not for the weight.
    let drained = Room { working_set_growing: true, answered: G, driver_keeps: true, ..swapping(0, 4 * G) };
    assert_eq!(plan(&drained, &candidates), vec![Move::SwapOut(2), Move::SwapIn(1)]);
    // No promotion of the weight into free VRAM either, though the reserve leaves room.
    let roomy = Room { working_set_growing: true, ..room(40 * G) };
    assert_eq!(plan(&roomy, &[at(G, false, 80 * G, 0)]), vec![]);
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
    // Unless swaps were seen to take fresh VRAM there,
    let took_fresh = Room { driver_keeps: true, ..answered };
    assert_eq!(plan(&took_fresh, &candidates), vec![]);
    // while the driver has free VRAM to give them: drained, they reuse what it keeps.
    let drained = Room { free: DRAINED_FREE - 1, answered: G, ..took_fresh };
    assert_eq!(plan(&drained, &candidates), vec![Move::SwapOut(2), Move::SwapIn(0)]);
}

#[test]
fn where_the_driver_keeps_what_moves_out_leave_swaps_move_in_only_what_free_vram_holds() {
    const M: u64 = 1 << 20;
    let candidates = [at(512 * M, false, 80 * G, 0), at(256 * M, false, 30 * G, 1), at(G, true, 0, 2)];
    // 1.5 GiB free beside a 1 GiB headroom: 256 MiB past its slack, the budget spent.
    let kept = Room { driver_keeps: true, ..swapping(G + 512 * M, 4 * G) };
    assert_eq!(plan(&kept, &candidates), vec![Move::SwapOut(2), Move::SwapIn(1)], "the one that fits");
    let unknown = Room { driver_keeps: false, ..kept };
    assert_eq!(
        plan(&unknown, &candidates),
        vec![Move::SwapOut(2), Move::SwapIn(0)],
        "not known yet: the hottest, stopped past one run by the tier thread"
    );
    // Under the headroom (answered): none, though swaps there were never seen to take
    // fresh VRAM; drained, they reuse what the driver keeps.
    let short = Room { answered: G, ..swapping(G / 2, 4 * G) };
    assert_eq!(plan(&Room { driver_keeps: true, ..short }, &candidates), vec![]);
    let drained = Room { driver_keeps: true, free: DRAINED_FREE - 1, ..short };
    assert_eq!(plan(&drained, &candidates), vec![Move::SwapOut(2), Move::SwapIn(0)]);
}

#[test]
fn what_takes_back_the_chunks_it_left_swaps_in_where_free_vram_holds_nothing() {
    // Weights moved out for a working set, the driver keeping their chunks for them;
    // the working set (in VRAM) now idle, the weights hot: free VRAM under the headroom,
    // moves in already seen to take fresh VRAM, the device not drained.
    let weights = Candidate { chunks_kept: true, ..at(G, false, 80 * G, 0) };
    let never_in_vram = at(G, false, 80 * G, 0);
    let idle = at(G, true, 0, 2);
    let short = Room { answered: G, driver_keeps: true, ..swapping(G / 2, 4 * G) };
    assert_eq!(plan(&short, &[weights, idle]), vec![Move::SwapOut(1), Move::SwapIn(0)], "back into its own chunks");
    assert_eq!(plan(&short, &[never_in_vram, idle]), vec![], "fresh VRAM: none to take");
    // Past the headroom's slack by 256 MiB: the fresh one waits, the other needs none.
    const M: u64 = 1 << 20;
    let roomy = Room { driver_keeps: true, ..swapping(G + 512 * M, 4 * G) };
    assert_eq!(plan(&roomy, &[never_in_vram, idle]), vec![]);
    assert_eq!(plan(&roomy, &[weights, idle]), vec![Move::SwapOut(1), Move::SwapIn(0)]);
}

#[test]
fn swaps_that_took_fresh_vram_answer_their_own_shortfall_and_no_more_swap_while_short() {
    const M: u64 = 1 << 20;
    // Free VRAM stood at 1.1 GiB beside a 1 GiB headroom (nothing planned past its slack);
    // a swap's moves out freed nothing the driver shows, its moves in took 512 MiB of fresh
    // VRAM before the tier thread stopped them: free VRAM 614 MiB.
    let swap = Outcome { demoted: 0, swapped_in: 512 * M, planned: 0, taken: 512 * M, given_back: 0 };
    let next = Carried::default().after(&swap);
    assert_eq!(next, Carried { answered: 512 * M });
    assert!(swap.kept_by_swaps() > 0, "swaps that took fresh VRAM: the driver keeps what moves out leave");
    let candidates = [
        at(256 * M, true, 40 * G, 0),  // swapped in
        at(256 * M, true, 40 * G, 1),  // swapped in
        at(256 * M, false, 40 * G, 2), // waits
        at(G, false, 0, 3),            // the weights swapped out
    ];
    let after =
        Room { answered: next.answered, driver_keeps: swap.kept_by_swaps() > 0, swap_limit: 4 * G, ..room(614 * M) };
    assert_eq!(plan(&after, &candidates), vec![], "the shortfall is answered and nothing swaps in fresh VRAM");
    // Not counted, the next tick would demote what the swap just moved in.
    let unanswered = Room { answered: 0, ..after };
    assert_eq!(plan(&unanswered, &candidates), vec![Move::Demote(1), Move::Demote(0)]);
    // Demotions add up across ticks.
    let later = next.after(&Outcome { demoted: 64 * M, ..Outcome::default() });
    assert_eq!(later, Carried { answered: 576 * M });
}

#[test]
fn moves_in_within_the_plan_or_reusing_what_went_out_carry_nothing() {
    const M: u64 = 1 << 20;
    // Swaps whose moves in reused what their moves out left: free VRAM did not fall.
    let reused = Outcome { swapped_in: G, ..Outcome::default() };
    assert_eq!(Carried::default().after(&reused), Carried::default());
    // Promotions took the free VRAM the plan gave them, swaps none past it.
    let planned = Outcome { swapped_in: G, planned: 300 * M, taken: 300 * M, ..Outcome::default() };
    assert_eq!(Carried::default().after(&planned), Carried::default());
    // Free VRAM fell past the plan with no swap in this tick (another process allocated):
    // not this process's moves.
    let others = Outcome { planned: 300 * M, taken: G, ..Outcome::default() };
    assert_eq!(Carried::default().after(&others), Carried::default());
    // Past the plan by more than the swaps moved in: no more than they moved is kept.
    let both = Outcome { swapped_in: 100 * M, planned: 0, taken: G, demoted: 5 * M, given_back: 0 };
    assert_eq!(Carried::default().after(&both), Carried { answered: 105 * M });
    assert!(both.kept_by_swaps() > 0, "swaps took fresh VRAM");
}

#[test]
fn what_came_back_as_free_vram_is_not_counted_as_kept() {
    const M: u64 = 1 << 20;
    // 800 MiB demoted for a shortfall, all of it given back: free VRAM rose by itself.
    let all = Outcome { demoted: 800 * M, given_back: 800 * M, ..Outcome::default() };
    assert_eq!(Carried::default().after(&all), Carried::default());
    // Half given back: the driver keeps the other half for whoever asks.
    let half = Outcome { demoted: 800 * M, given_back: 400 * M, ..Outcome::default() };
    assert_eq!(Carried::default().after(&half), Carried { answered: 400 * M });
    assert_eq!(half.kept_by_swaps(), 0, "no swap took fresh VRAM");
    // A swap of 1 GiB whose moves out came back and whose moves in took that: nothing kept,
    // nothing taken past the plan (the plan counts what came back).
    let swap = Outcome { swapped_in: G, planned: G, taken: G, given_back: G, ..Outcome::default() };
    assert_eq!(Carried::default().after(&swap), Carried::default());
    // What came back went to the swaps' moves in first; a demotion beside them is kept.
    let both = Outcome { demoted: 200 * M, swapped_in: G, planned: G, taken: G, given_back: G };
    assert_eq!(Carried::default().after(&both), Carried { answered: 200 * M });
    assert_eq!(both.kept_by_swaps(), 0, "no swap took fresh VRAM");
}

#[test]
fn kept_vram_is_given_back_only_where_the_device_binds_the_driver_evicted_nothing_and_others_could_evict() {
    const M: u64 = 1 << 20;
    // 1 GiB headroom: promotions leave 1.25 GiB free. 512 MiB demoted, free 700 MiB, 4 GiB
    // of managed memory still in VRAM.
    let short =
        AfterMovesOut { kept: 512 * M, free_before: 700 * M, free: 700 * M, headroom: G, wanted: 0, evictable: 4 * G };
    assert!(short.give_back_wanted());
    // Free VRAM already holds the slack and what moves in: nothing binds.
    assert!(!AfterMovesOut { free: 1300 * M, ..short }.give_back_wanted());
    assert!(AfterMovesOut { free: 1300 * M, wanted: 512 * M, ..short }.give_back_wanted());
    // Too little kept to be worth the moment.
    assert!(!AfterMovesOut { kept: GIVE_BACK_LEAST - 1, ..short }.give_back_wanted());
    assert!(AfterMovesOut { kept: GIVE_BACK_LEAST, ..short }.give_back_wanted());
    // Pressing before the moves: the driver may have evicted them already.
    assert!(!AfterMovesOut { free_before: G / 4 - 1, free: G / 4 - 1, ..short }.give_back_wanted());
    assert!(AfterMovesOut { free_before: G / 4, free: G / 4, ..short }.give_back_wanted());
    // Less than the headroom left in VRAM for the driver to evict for another process's
    // allocation during the moment: it could fail.
    assert!(!AfterMovesOut { evictable: G - 1, ..short }.give_back_wanted());
    assert!(AfterMovesOut { evictable: G, ..short }.give_back_wanted());
}

#[test]
fn weights_displace_weights_and_the_working_set_either_but_weights_it_only_once_long_idle() {
    let working = |mut c: Candidate| {
        c.working_memory = true;
        c
    };
    // A hot weight in T2; in VRAM a cold part of the working set (a block the program's
    // caching allocator freed and will hand out again) and a weight read less.
    let hot_weight = at(G, false, 40 * G, 0);
    let (cold_block, cool_weight) = (working(at(G, true, 0, 5)), at(G, true, G, 1));
    assert_eq!(
        plan(&swapping(G + G / 4, 4 * G), &[hot_weight, cold_block, cool_weight]),
        vec![Move::SwapOut(2), Move::SwapIn(0)],
        "the cooler weight goes, not the colder block"
    );
    assert_eq!(plan(&swapping(G + G / 4, 4 * G), &[hot_weight, cold_block]), vec![], "nothing else: no swap");
    // Unread for long, the block gives way to the weight.
    let idle_block = Candidate { idle_ticks: WORKING_SET_IDLE_TICKS.1, ..cold_block };
    assert_eq!(plan(&swapping(G + G / 4, 4 * G), &[hot_weight, idle_block]), vec![Move::SwapOut(1), Move::SwapIn(0)]);
    // A hot KV block in T2 displaces the colder of either kind.
    let kv = working(at(G, false, 40 * G, 6));
    assert_eq!(plan(&swapping(G + G / 4, 4 * G), &[kv, cold_block]), vec![Move::SwapOut(1), Move::SwapIn(0)]);
    assert_eq!(plan(&swapping(G + G / 4, 4 * G), &[kv, cool_weight]), vec![Move::SwapOut(1), Move::SwapIn(0)]);
}

#[test]
fn the_working_set_gives_way_after_several_of_the_programs_passes() {
    let idle_for = |ticks: u32| Candidate { working_memory: true, idle_ticks: ticks, ..at(G, true, 0, 5) };
    let swapped = |weight: Candidate, block: Candidate| !plan(&swapping(G + G / 4, 4 * G), &[weight, block]).is_empty();
    let (least, most) = WORKING_SET_IDLE_TICKS;
    // A weight read whole every tick (a fast decode): the fewest ticks.
    let every_tick = at(G, false, G, 0);
    assert!(!swapped(every_tick, idle_for(least - 1)) && swapped(every_tick, idle_for(least)));
    // Read every 4 ticks: 4 passes of 4.
    let every_fourth = at(G, false, G / 4, 0);
    assert!(!swapped(every_fourth, idle_for(15)) && swapped(every_fourth, idle_for(16)));
    // Read every 128 ticks: the most, though that is under one pass.
    let slow = at(G, false, G / 128, 0);
    assert!(!swapped(slow, idle_for(most - 1)) && swapped(slow, idle_for(most)));
}
